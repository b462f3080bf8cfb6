"""Text form of graphs, one line per call:
    %3 = nn.conv2d(%x, %w, strides=[2, 2]) /* ty=Tensor[(1, 64, 112, 112), float32] */
    %4 = @dnnl_main_0(%3) /* ty=Tensor[(1, 64, 112, 112), float32] */   (a GlobalVar call)
"""
from __future__ import annotations

from .expr import Call, Constant, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from .visitor import post_order


def _const_text(c: Constant) -> str:
    if c.data.size == 1:
        return f"{c.data.reshape(()).item()!r}"
    return f"meta[Constant][{tuple(c.data.shape)}]"


class _Printer:
    def __init__(self):
        self.names: dict = {}
        self.lines: list = []
        self.counter = 0
        self.var_names: set = set()

    def var_name(self, v: Var) -> str:
        n = self.names.get(v)
        if n is None:
            base = v.name_hint or "v"
            n, k = base, 0
            while n in self.var_names:
                k += 1
                n = f"{base}_{k}"
            self.var_names.add(n)
            n = "%" + n
            self.names[v] = n
        return n

    def ref(self, e) -> str:
        if isinstance(e, Var):
            return self.var_name(e)
        if isinstance(e, Constant):
            return _const_text(e)
        if isinstance(e, GlobalVar):
            return repr(e)
        return self.names[e]

    def function(self, f: Function, indent: int) -> str:
        pad = "  " * indent
        params = ", ".join(f"{self.var_name(p)}: {p.checked_type!r}" for p in f.params)
        attrs = f" /* {f.attrs!r} */" if len(f.attrs) else ""
        self.lines.append(f"{pad}fn ({params}) -> {f.ret_type!r}{attrs} {{")
        result = self.body(f.body, indent + 1)
        self.lines.append(f"{pad}  {result}")
        self.lines.append(f"{pad}}}")
        return "fn"

    def body(self, root, indent: int) -> str:
        pad = "  " * indent
        # Nested functions print as a whole where they are used, their bodies indented inside.
        for n in post_order(root, enter_functions=False):
            if n in self.names or isinstance(n, (Var, Constant, GlobalVar)):
                continue
            if isinstance(n, Function):
                name = f"%f{self.counter}"
                self.counter += 1
                self.lines.append(f"{pad}{name} = ")
                self.function(n, indent + 1)
                self.names[n] = name
                continue
            if isinstance(n, Call):
                op = self.names[n.op] if isinstance(n.op, Function) else (
                    repr(n.op) if isinstance(n.op, GlobalVar) else n.op.name)
                args = [self.ref(a) for a in n.args]
                if len(n.attrs):
                    args.append(repr(n.attrs))
                text = f"{op}({', '.join(args)})"
            elif isinstance(n, Tuple):
                text = f"({', '.join(self.ref(f) for f in n.fields)}{',' if len(n.fields) == 1 else ''})"
            elif isinstance(n, TupleGetItem):
                text = f"{self.ref(n.tuple_value)}.{n.index}"
            elif isinstance(n, Let):
                text = f"let {self.ref(n.var)} = {self.ref(n.value)}; {self.ref(n.body)}"
            elif isinstance(n, If):
                text = f"if ({self.ref(n.cond)}) {self.ref(n.true_branch)} else {self.ref(n.false_branch)}"
            else:
                text = type(n).__name__
            name = f"%{self.counter}"
            self.counter += 1
            self.names[n] = name
            self.lines.append(f"{pad}{name} = {text} /* ty={n.checked_type!r} */")
        return self.ref(root)


def to_text(e) -> str:
    """Text of a graph expression or function.

    Example:
        >>> print(to_text(call("nn.relu", x)))  # doctest: +SKIP
        %0 = nn.relu(%x) /* ty=Tensor[(1, 8), float32] */
        %0
    """
    p = _Printer()
    if isinstance(e, Function):
        p.function(e, 0)
    else:
        result = p.body(e, 0)
        p.lines.append(result)
    return "\n".join(p.lines)
