"""kiln: an end-to-end optimizing compiler for deep learning (tensor expressions → LLVM).

Example:
    >>> import kiln
    >>> from kiln import te
    >>> n = te.var("n")
    >>> A = te.placeholder((n,), name="A")
    >>> B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> f = kiln.build(s, [A, B], target="llvm")   # doctest: +SKIP

Compiler parts load on first use, so `import kiln.runtime` (all a compiled module needs)
does not pull in the compiler.
"""
import importlib

__version__ = "0.1.0"

_LAZY = {
    "te": ("kiln.te", None), "tir": ("kiln.tir", None), "arith": ("kiln.arith", None),
    "runtime": ("kiln.runtime", None), "codegen": ("kiln.codegen", None),
    "build": ("kiln.driver", "build"), "lower": ("kiln.driver", "lower"),
    "compile": ("kiln.driver.compile", "compile"), "graph": ("kiln.graph", None),
    "frontend": ("kiln.frontend", None), "topi": ("kiln.topi", None),
    "cpu": ("kiln.runtime", "cpu"), "cuda": ("kiln.runtime", "cuda"),
    "opencl": ("kiln.runtime", "opencl"), "register_func": ("kiln.runtime", "register_func"),
    "get_global_func": ("kiln.runtime", "get_global_func"),
    "nd": ("kiln.nd", None), "target": ("kiln.target", None), "Target": ("kiln.target", "Target"),
    "autotvm": ("kiln.autotvm", None), "viz": ("kiln.viz", None),
    "compile_timings": ("kiln.timings", "compile_timings"), "timings": ("kiln.timings", None),
}


def __getattr__(name):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}") from None
    from .heap import frozen
    with frozen():          # a first import in a big process: see kiln.heap
        value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = sorted(_LAZY)
