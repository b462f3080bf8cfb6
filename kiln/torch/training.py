"""kiln.torch.optimize(..., training=True): a PyTorch model whose forward and backward both run
in kiln, inside PyTorch's autograd.

The model's graph is differentiated by kiln (kiln.graph.transform.gradient) with respect to its
floating-point inputs and its parameters, and split into a forward that also returns what the
backward needs (a minimum cut: matmul and convolution outputs, ReLU masks) and a backward
(kiln.graph.transform.split_gradient); both are compiled once per mode. A
torch.autograd.Function runs the forward, keeps the saved tensors for the backward, and hands
PyTorch one gradient per input and parameter. The parameters stay the model's own
nn.Parameters (the module holds the model), so any PyTorch optimizer updates them; every call
reads their current values, and tensors cross into kiln without copies (DLPack).

Training mode is compiled as PyTorch computes it (kiln.frontend.pytorch.training): each
dropout multiplies by a mask drawn from PyTorch's generator in eager PyTorch's order (so with
the same seed the same elements are dropped), and batch norm normalizes by the batch's
statistics and updates the model's running statistics. The other mode is compiled the first
time the module is called in it (model.eval() for validation, say; each combination of the
submodules' modes is a mode of its own, such as model.train() with a frozen batch norm). A
`detach()` in the model stops gradients as in PyTorch; a `torch.no_grad()` block inside the
model's forward leaves no trace in the exported graph, so gradients flow through it. Which
parameters and inputs get gradients is fixed when compiling (their requires_grad then); a
later change is an error that says to compile again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
from torch.autograd.function import once_differentiable

from .optimize import InputError, TorchRunner

__all__ = ["KilnTrainingModule", "optimize_for_training"]


@dataclass(frozen=True)
class _Compiled:
    """One mode's compiled forward and backward, and how main's parameters are fed: `names` in
    main's order (inputs, dropout masks, then the model's tensors), `differentiated` whether
    each required grad when compiled, `returned` whether the backward gives it a gradient
    (not one no gradient reaches, behind a detach), `masks` the masks to draw, `mutations`
    the parameters (buffers, inputs) whose new values the forward returns (its auxiliary
    outputs, in order), `constants` the tensors torch.export lifted out of the model's code,
    `output_shapes` those of the model's outputs (joined into one for kiln's gradient when
    there are several)."""

    split: object
    forward_runner: TorchRunner
    backward_runner: TorchRunner
    names: tuple
    differentiated: tuple
    returned: tuple
    masks: tuple
    mutations: tuple
    constants: dict
    output_shapes: tuple = ((),)


class _KilnFunction(torch.autograd.Function):
    """forward: kiln's forward function on main's parameters; backward: kiln's backward
    function on (saved tensors, the parameters it reads, grad_out)."""

    @staticmethod
    def forward(ctx, compiled, updated, *tensors):
        split = compiled.split
        out, *rest = compiled.forward_runner(tensors)   # the outputs, flat and joined if several
        updates, saved = rest[:split.num_aux], rest[split.num_aux:]
        if split.saves_output:              # the backward reads the output itself
            saved = [out, *saved]
        read = [tensors[k] for k in split.backward_params]
        # a tensor updated below but read by the backward is kept as the forward read it
        read = [t.clone() if any(t is u for u in updated) else t for t in read]
        for target, new in zip(updated, updates):
            target.copy_(new)
        ctx.compiled = compiled
        ctx.save_for_backward(*saved, *read)
        ctx.num_saved = len(saved)
        shapes = compiled.output_shapes
        if len(shapes) == 1:
            return out
        # copies: tensors of their own, as the model's outputs are
        parts = out.split([math.prod(shape) for shape in shapes])
        return tuple(part.view(shape).clone() for part, shape in zip(parts, shapes))

    @staticmethod
    @once_differentiable                    # kiln's backward is not itself differentiated
    def backward(ctx, *grad_outs):
        grad_out = grad_outs[0] if len(grad_outs) == 1 else \
            torch.cat([g.reshape(-1) for g in grad_outs])
        grads = ctx.compiled.backward_runner([*ctx.saved_tensors, grad_out.contiguous()])
        # one gradient per input the backward computes, None for the others (indices,
        # buffers, masks, parameters behind a detach)
        out, it = [None, None], iter(grads)
        for returned in ctx.compiled.returned:
            out.append(next(it) if returned else None)
        return tuple(out)


class KilnTrainingModule(torch.nn.Module):
    """An nn.Module running `model`'s forward and backward in kiln (see the module docstring).
    Its parameters are `model`'s; call it on inputs of the compiled shapes and dtypes.

    Example:
        >>> fast = kiln.torch.optimize(model, (x,), training=True)   # doctest: +SKIP
        >>> loss = F.cross_entropy(fast(x), labels); loss.backward()  # doctest: +SKIP
    """

    def __init__(self, model, example_inputs, compile_mode):
        super().__init__()
        self.model = model                  # registers its parameters as ours
        self._examples = tuple(example_inputs)     # kept to compile the model's other modes
        self._compile_mode = compile_mode   # (model, example inputs) -> _Compiled
        self._compiled: dict = {}           # the modules' modes -> _Compiled
        self.num_inputs = len(self._examples)
        # the wrapper's own flag follows the model's (fast.eval() sets both, as for any module),
        # without touching the model's submodules, whose modes may differ
        self.training = model.training
        self._current()

    def _current(self) -> _Compiled:
        """The compilation of the model as its modules' modes are now (model.train() with a
        frozen batch norm is its own mode), compiled when first met."""
        modes = tuple(m.training for m in self.model.modules())
        if modes not in self._compiled:
            self._compiled[modes] = self._compile_mode(self.model, self._examples)
        return self._compiled[modes]

    @property
    def split(self):
        """The forward/backward split of the current mode (kiln.graph.transform.SplitGradient)."""
        return self._current().split

    def forward(self, *inputs):
        if len(inputs) != self.num_inputs:
            raise InputError(f"{type(self.model).__name__} was compiled for {self.num_inputs} "
                             f"input(s), got {len(inputs)}")
        compiled = self._current()
        state = dict(self.model.named_parameters())
        state.update(self.model.named_buffers())
        state.update(compiled.constants)
        masks = {m.name for m in compiled.masks}
        queue = list(inputs)
        tensors = [state[n] if n in state else None if n in masks else queue.pop(0)
                   for n in compiled.names]
        for spec, t, wanted in zip(compiled.forward_runner.inputs, tensors,
                                   compiled.differentiated):
            why = None if t is None else spec.mismatch(t)
            if why is not None:
                raise InputError(f"input {spec.name!r}: {why}")
            if t is not None and t.requires_grad and not wanted:
                raise InputError(f"{spec.name!r} requires grad, but it did not when the model "
                                 f"was compiled: its gradient is not computed; compile again "
                                 f"(kiln.torch.optimize(..., training=True))")
        # eager draws the masks as it reaches each dropout; nothing between draws from the
        # generator, so drawing them all now, in graph order, gives the same masks
        drawn = {m.name: m.draw() for m in compiled.masks}
        tensors = [drawn[n] if t is None else t for n, t in zip(compiled.names, tensors)]
        by_name = dict(zip(compiled.names, tensors))
        updated = [by_name[name] for name in compiled.mutations]
        return _KilnFunction.apply(compiled, updated, *tensors)

    def extra_repr(self) -> str:
        # the modes compiled so far (printing compiles nothing)
        lines = []
        for modes, compiled in self._compiled.items():
            split = compiled.split
            mode = "training" if all(modes) else "eval" if not any(modes) else "mixed"
            lines.append(f"forward and backward compiled by kiln ({mode} mode); the forward "
                         f"saves {split.saved_bytes} bytes in {len(split.saved)} tensors for "
                         f"the backward (of {split.read_bytes} the backward reads), "
                         f"recomputing {len(split.recomputed)} cheap ops")
        return "\n".join(lines)


def optimize_for_training(model, example_inputs, *, target="llvm", tuning_log=None,
                          opt_level=None):
    """Compile `model`'s forward and backward for the shapes and dtypes of `example_inputs`,
    in the model's current mode (the other mode when first called in it); returns a
    KilnTrainingModule (see kiln.torch.optimize).

    Example:
        >>> fast = optimize_for_training(model, (torch.randn(8, 3, 32, 32),))  # doctest: +SKIP
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    _check_trainable(model)
    return KilnTrainingModule(model, example_inputs,
                              partial(_compile, target=target, tuning_log=tuning_log,
                                      opt_level=opt_level))


def _compile(model, example_inputs, *, target, tuning_log, opt_level) -> _Compiled:
    """The model's forward and backward in its current mode, compiled."""
    import numpy as np

    from kiln.driver.compile import compile_with_log
    from kiln.frontend.pytorch import import_for_training
    from kiln.graph.module import IRModule
    from kiln.graph.transform import gradient, split_gradient
    from kiln.graph.transform.autodiff import is_zeros

    imported = import_for_training(model, example_inputs)
    main, shapes = _joined(imported.mod["main"], imported.num_outputs)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    names = tuple(p.name_hint for p in main.params)
    masks = {m.name for m in imported.masks}
    # an input is differentiated when its example requires grad (a model's input usually does
    # not: its gradient would be computed and thrown away at every step)
    wants_input = iter(t.requires_grad for t in example_inputs)
    differentiated = tuple(
        False if n in masks else n in trainable if n in imported.params else
        next(wants_input) and np.dtype(p.checked_type.dtype).kind == "f"
        for n, p in zip(names, main.params))
    wrt = [n for n, d in zip(names, differentiated) if d]
    joint = gradient(main, wrt=wrt, has_aux=bool(imported.mutations))
    # a parameter no gradient reaches (behind a detach) gets none, as in PyTorch, not zeros
    reached = {n for n, g in zip(wrt, joint.body.fields[1].fields) if not is_zeros(g)}
    if len(reached) < len(wrt):
        joint = gradient(main, wrt=[n for n in wrt if n in reached],
                         has_aux=bool(imported.mutations))
    split = split_gradient(joint)
    forward, backward = (compile_with_log(IRModule.from_expr(f), None, target, tuning_log,
                                          opt_level)
                         for f in (split.forward, split.backward))
    state = set(dict(model.named_parameters())) | set(dict(model.named_buffers()))
    constants = {n: torch.from_numpy(v.copy()) for n, v in imported.params.items()
                 if n not in state}
    # the saved values (never the user's: only autograd holds them, until the backward) are
    # written into the last step's tensors once those are free
    saved = range(1 + split.num_aux, 1 + split.num_aux + len(split.saved) - split.saves_output)
    return _Compiled(split, TorchRunner(forward, release=True, recycle=saved),
                     TorchRunner(backward, release=True), names, differentiated,
                     tuple(n in reached for n in names), imported.masks, imported.mutations,
                     constants, shapes)


def _joined(main, count: int):
    """(main with its `count` outputs joined into one flat tensor, since kiln differentiates
    one output; their shapes). The outputs must share a floating-point dtype."""
    from kiln.graph.expr import Function, Tuple
    from kiln.graph.op import call

    fields = list(main.body.fields) if isinstance(main.body, Tuple) else [main.body]
    outputs, rest = fields[:count], fields[count:]
    shapes = tuple(tuple(int(d) for d in o.checked_type.shape) for o in outputs)
    if count == 1:
        return main, shapes
    dtypes = sorted({o.checked_type.dtype for o in outputs})
    if len(dtypes) != 1 or not dtypes[0].startswith("float"):
        raise NotImplementedError(f"the model's outputs have dtypes {', '.join(dtypes)}; kiln "
                                  f"trains models whose outputs share one floating-point dtype")
    flat = call("concatenate", Tuple([call("reshape", o, newshape=(-1,)) for o in outputs]),
                axis=0)
    return Function(main.params, Tuple([flat, *rest]) if rest else flat), shapes


def _check_trainable(model) -> None:
    """A NotImplementedError for embeddings whose padding row or frequency scaling change the
    gradient, and for batch norms averaging their statistics cumulatively (momentum=None, a
    step count torch.export cannot trace), which kiln does not compile yet."""
    special = sorted({name or type(model).__name__ for name, m in model.named_modules()
                      if isinstance(m, torch.nn.Embedding)
                      and (m.padding_idx is not None or m.scale_grad_by_freq)})
    if special:
        raise NotImplementedError(
            f"embedding(s) {', '.join(special)} have padding_idx or scale_grad_by_freq, whose "
            f"gradients kiln does not compute yet")
    cumulative = sorted(name or type(model).__name__ for name, m in model.named_modules()
                        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
                        and m.momentum is None and m.track_running_stats)
    if cumulative:
        raise NotImplementedError(
            f"batch norm(s) {', '.join(cumulative)} have momentum=None (a cumulative average "
            f"of the batch statistics), which kiln does not compile; give them a momentum")
