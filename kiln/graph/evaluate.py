"""Evaluate constant graph expressions by compiling and running them (used by FoldConstant)."""
from __future__ import annotations

from .expr import Function, Tuple
from .module import IRModule


def evaluate(exprs, target="llvm"):
    """Values of expressions that use no variables: one array, or a list for a list input.
    Several expressions are compiled together into one kernels module (one LLVM build).

    Example:
        >>> evaluate(call("add", const(np.ones(3, "float32")), const(np.ones(3, "float32"))))  # doctest: +SKIP
        array([2., 2., 2.], dtype=float32)
    """
    from ..driver.compile import compile as compile_model
    from ..runtime import GraphExecutor
    single = not isinstance(exprs, (list, tuple))
    items = [exprs] if single else list(exprs)
    if not items:
        return []
    body = items[0] if len(items) == 1 else Tuple(items)
    lib = compile_model(IRModule.from_expr(Function([], body)), target=target, opt_level=1)
    m = GraphExecutor(lib)
    m.run()
    values = [m.get_output(k).numpy() for k in range(m.get_num_outputs())]
    if single and len(items) == 1:
        return values[0] if len(values) == 1 else values
    return values
