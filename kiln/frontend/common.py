"""Helpers shared by the model importers (PyTorch, ONNX).

Example:
    >>> err = UnsupportedOpsError([("Foo", "node_1"), ("Foo", "node_7"), ("Bar", "n2")])
    >>> print(err)   # doctest: +NORMALIZE_WHITESPACE
    2 unsupported op types (3 nodes):
      Bar: n2
      Foo: node_1, node_7
"""
from __future__ import annotations

__all__ = ["UnsupportedOpsError", "FrontendError", "StaticValueError", "UniqueNamer"]

# Past this many node names per op type the message lists a count instead: a model with 500
# uses of one op should still give a readable error.
_MAX_NAMES_PER_OP = 8


class FrontendError(ValueError):
    """A model that a frontend cannot import for a reason other than a missing op.

    Example:
        >>> raise FrontendError("input 'x': rank 5 not supported")   # doctest: +SKIP
    """


class StaticValueError(FrontendError):
    """An operand that kiln needs at compile time (a shape, axes, sizes, k ...) that the model
    computes from run-time data. `value` names the model's value (for ONNX, the tensor name)
    and `node` the node that needs it; a caller that knows the run-time inputs can bind them
    as constants and import again (the ONNX backend does).

    Example:
        >>> StaticValueError("Reshape needs its shape", value="shape", node="r").value
        'shape'
    """

    def __init__(self, message, value=None, node=None):
        super().__init__(message)
        self.value = value
        self.node = node


class UnsupportedOpsError(NotImplementedError):
    """Every op of a model that a frontend cannot translate, reported at once.

    `unsupported` is a list of (op_type, node_name); the message groups node names by op type,
    so a user sees all the work needed, not just the first missing op.

    Example:
        >>> e = UnsupportedOpsError([("aten.fft_fft.default", "fft_fft")], frontend="PyTorch")
        >>> e.op_types
        ['aten.fft_fft.default']
    """

    def __init__(self, unsupported, frontend=None):
        self.unsupported = [(str(op), str(node)) for op, node in unsupported]
        self.frontend = frontend
        super().__init__(self._format())

    @property
    def op_types(self):
        """The distinct unsupported op types, sorted.

        Example:
            >>> UnsupportedOpsError([("B", "x"), ("A", "y")]).op_types
            ['A', 'B']
        """
        return sorted({op for op, _ in self.unsupported})

    def nodes_of(self, op_type):
        """The node names that use `op_type`, in model order.

        Example:
            >>> UnsupportedOpsError([("A", "n1"), ("A", "n2")]).nodes_of("A")
            ['n1', 'n2']
        """
        return [node for op, node in self.unsupported if op == op_type]

    def _format(self):
        types = self.op_types
        where = f" in {self.frontend} model" if self.frontend else ""
        head = (f"{len(types)} unsupported op type{'s' if len(types) != 1 else ''}{where} "
                f"({len(self.unsupported)} node{'s' if len(self.unsupported) != 1 else ''}):")
        lines = [head]
        for op in types:
            nodes = self.nodes_of(op)
            shown = ", ".join(nodes[:_MAX_NAMES_PER_OP])
            if len(nodes) > _MAX_NAMES_PER_OP:
                shown += f", ... ({len(nodes) - _MAX_NAMES_PER_OP} more)"
            lines.append(f"  {op}: {shown}")
        return "\n".join(lines)


class UniqueNamer:
    """Hands out names that are unique within one import, sanitized for the graph IR.

    Example:
        >>> n = UniqueNamer()
        >>> n("layer1.0.conv1.weight"), n("x"), n("x")
        ('layer1.0.conv1.weight', 'x', 'x_1')
    """

    def __init__(self):
        self._used = set()

    def __call__(self, name):
        base = str(name) or "v"
        candidate, k = base, 0
        while candidate in self._used:
            k += 1
            candidate = f"{base}_{k}"
        self._used.add(candidate)
        return candidate
