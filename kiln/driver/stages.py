"""The graph half of kiln.compile, stage by stage: the one place its sequence is written.

imported  - the module as given (weights are parameters of main);
optimized - params bound as constants (their names checked), then the graph passes;
fused     - then FuseOps: each kernel a primitive function called from main.
kiln.compile lowers the "fused" module; `kiln inspect --stage` and kiln.viz.draw(stage=) show
any stage, with the same passes, target context and opt_level rule.

Example:
    >>> fused = module_at_stage(mod, "fused", params=params)   # doctest: +SKIP
    >>> print(fused)                                           # doctest: +SKIP
"""
from __future__ import annotations

from ..graph.expr import Function
from ..graph.module import IRModule
from ..graph.transform import default_passes
from ..graph.transform.fold_constant import bind_params
from ..graph.transform.fuse_ops import fuse_ops
from ..timings import phase


class CompileError(ValueError):
    """The model cannot be compiled: unknown parameters, a non-tensor input, ..."""


def check_param_names(main: Function, params: dict) -> None:
    """A CompileError unless every name in `params` is a parameter of `main`.

    Example:
        >>> check_param_names(mod["main"], {"w9": w})   # doctest: +SKIP
        CompileError: params ['w9'] are not inputs of main (its inputs: ['w', 'x'])
    """
    names = {p.name_hint for p in main.params}
    unknown = sorted(set(params) - names)
    if unknown:
        raise CompileError(f"params {unknown[:5]}{'...' if len(unknown) > 5 else ''} are not "
                           f"inputs of main (its inputs: {sorted(names)[:8]}"
                           f"{'...' if len(names) > 8 else ''})")


def resolve_opt_level(opt_level: int | None = None) -> int:
    """The optimization level kiln.compile uses: `opt_level`, else an entered PassContext's,
    else 3.

    Example:
        >>> resolve_opt_level(), resolve_opt_level(1)
        (3, 1)
    """
    if opt_level is not None:
        return opt_level
    from ..graph.transform.pass_infra import PassContext
    entered = PassContext.entered()
    return entered.opt_level if entered is not None else 3


def _bind(mod, params, opt_level, borrow):
    if not params:
        return mod
    main = mod["main"]
    check_param_names(main, params)
    return mod.with_function("main", bind_params(main, params, copy=not borrow))


def _passes(mod, params, opt_level, borrow):
    return default_passes(mod, opt_level)


def _fuse(mod, params, opt_level, borrow):
    return fuse_ops(mod, fuse=opt_level >= 1)


# Each stage is the steps after the previous one; a stage runs its own and those before it.
STAGE_STEPS = {"imported": (), "optimized": (_bind, _passes), "fused": (_bind, _passes, _fuse)}
STAGES = tuple(STAGE_STEPS)
# What CompileTimings calls each step (the passes inside default_passes are timed each by name).
STEP_PHASES = {_bind: "graph.bind_params", _passes: "graph.passes", _fuse: "graph.FuseOps"}


def module_at_stage(mod, stage: str, target="llvm", params=None,
                    opt_level: int | None = None, borrow_params: bool = False) -> IRModule:
    """The graph module after kiln.compile's steps up to `stage` ("imported", "optimized" or
    "fused"), for `target` (the current target while the passes run). opt_level as in
    kiln.compile (resolve_opt_level). The params are copied, unless borrow_params: then the
    module's constants may be read-only views of the caller's arrays (bind_params(copy=False)),
    for a caller that copies what it keeps of them or keeps nothing.

    Example:
        >>> print(module_at_stage(mod, "optimized", params=params))   # doctest: +SKIP
    """
    from ..target import as_target

    steps = STAGE_STEPS.get(stage)
    if steps is None:
        raise ValueError(f"unknown stage {stage!r}; the stages are {', '.join(STAGES)}")
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    opt_level = resolve_opt_level(opt_level)
    with as_target(target):
        for step in steps:
            with phase(STEP_PHASES[step]):
                mod = step(mod, params, opt_level, borrow_params)
    return mod
