"""Annotation operators that mark the regions an external code generator takes ("bring your own
codegen"): annotate_target puts them in, merge_compiler_regions merges the regions they mark,
partition_graph turns each region into an external function and takes them out.

    annotation.compiler_begin(x; compiler)   x enters a region of `compiler`
    annotation.compiler_end(y; compiler)     y leaves it

They are the identity on any type and have no compute: kiln refuses to compile a module that
still holds them (kiln.graph.transform.partition_graph.check_no_annotations).

Example:
    >>> y = compiler_end(call("nn.relu", compiler_begin(x, "dnnl")), "dnnl")   # doctest: +SKIP
"""
from __future__ import annotations

from ..expr import Call, GraphTypeError
from ..op import REQUIRED, Op, OpPattern, call, register_op

BEGIN = "annotation.compiler_begin"
END = "annotation.compiler_end"


def _identity(types, attrs):
    if not isinstance(attrs.compiler, str) or not attrs.compiler:
        raise GraphTypeError(f"compiler must be a non-empty string, got {attrs.compiler!r}")
    return types[0]


for _name, _doc in ((BEGIN, "the value entering a region of `compiler`"),
                    (END, "the value leaving a region of `compiler`")):
    register_op(_name, type_rel=_identity, pattern=OpPattern.OPAQUE, num_inputs=1,
                attrs={"compiler": REQUIRED}, doc=_doc)


def compiler_begin(x, compiler: str) -> Call:
    """annotation.compiler_begin(x, compiler=compiler).

    Example:
        >>> b = compiler_begin(var("x", (4,)), "dnnl")   # doctest: +SKIP
    """
    return call(BEGIN, x, compiler=compiler)


def compiler_end(x, compiler: str) -> Call:
    """annotation.compiler_end(x, compiler=compiler).

    Example:
        >>> e = compiler_end(call("nn.relu", b), "dnnl")   # doctest: +SKIP
    """
    return call(END, x, compiler=compiler)


def is_annotation(e, name: str | None = None) -> bool:
    """Whether e is a call of a compiler annotation (of `name`, BEGIN or END, when given).

    Example:
        >>> is_annotation(compiler_begin(x, "dnnl"), BEGIN)   # doctest: +SKIP
        True
    """
    if not (isinstance(e, Call) and isinstance(e.op, Op)):
        return False
    return e.op.name == name if name is not None else e.op.name in (BEGIN, END)
