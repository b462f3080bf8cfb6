"""A JSON form of graph expressions, so a fused function can be lowered in another process.

The graph is a DAG: every node is written once, children first, and names its children by their
position in "nodes" (the root comes last), so shared sub-expressions and the identity of
variables survive the trip. A call's type is written too and checked against its operator's
type relation on reading: a reader whose operators disagree with the writer's fails, naming the
node, instead of lowering a different program. Nothing is pickled or evaluated: constants travel
as base64 bytes, non-finite floats as tagged strings (JSON has no inf or nan).

Example:
    >>> text = json.dumps(function_to_json(fn), allow_nan=False)      # doctest: +SKIP
    >>> same = function_from_json(json.loads(text))                   # doctest: +SKIP
"""
from __future__ import annotations

import base64
import binascii
import math

import numpy as np

from ..arith.size_bounds import declare_size_bounds, size_bounds
from ..tir import expr as tx
from ..tir import op as top
from ..tir.expr import SizeVar
from ..tir.expr import Var as DimVar
from .attrs import Attrs
from .expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from .op import get_op
from .ty import FuncType, TensorType, TupleType
from .visitor import post_order

FORMAT = "kiln.graph"
VERSION = 1
_FLOAT_TAGS = ("inf", "-inf", "nan")


class SerializeError(ValueError):
    """Graph data that cannot be written or read; the message names the node and what is wrong."""


def expr_to_json(e: Expr) -> dict:
    """The JSON form (plain dicts, lists, strings and numbers) of a graph expression.

    Example:
        >>> expr_to_json(call("nn.relu", var("x", (2,))))["nodes"][-1]["op"]   # doctest: +SKIP
        'nn.relu'
    """
    w = _Writer()
    for node in post_order(e):
        write = _NODE_WRITERS.get(type(node))
        if write is None:
            raise SerializeError(f"node {len(w.nodes)}: unknown node kind {type(node).__name__}")
        item = {"kind": type(node).__name__, **write(w, node)}
        if node.span is not None:
            if not isinstance(node.span, str):
                raise SerializeError(f"node {len(w.nodes)}: span {node.span!r} is not a string")
            item["span"] = node.span
        w.index[node] = len(w.nodes)
        w.nodes.append(item)
    return {"format": FORMAT, "version": VERSION, "dims": w.dims, "nodes": w.nodes}


def expr_from_json(data: dict) -> Expr:
    """The graph expression that expr_to_json wrote (after any json.dumps/json.loads).

    Example:
        >>> to_text(expr_from_json(expr_to_json(y))) == to_text(y)   # doctest: +SKIP
        True
    """
    if not isinstance(data, dict):
        raise SerializeError(f"graph data must be a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise SerializeError(f"not kiln graph data: format {data.get('format')!r}, "
                             f"expected {FORMAT!r}")
    if type(data.get("version")) is not int or data["version"] != VERSION:
        raise SerializeError(f"unsupported format version {data.get('version')!r}; this kiln "
                             f"reads version {VERSION}")
    r = _Reader(_field(data, "dims", list, "graph data"))
    items = _field(data, "nodes", list, "graph data")
    if not items:
        raise SerializeError("graph data has no nodes")
    for k, item in enumerate(items):
        where = f"node {k}"
        if not isinstance(item, dict):
            raise SerializeError(f"{where}: must be a JSON object, got {type(item).__name__}")
        kind = item.get("kind")
        read = _NODE_READERS.get(kind) if isinstance(kind, str) else None
        if read is None:
            raise SerializeError(f"{where}: unknown node kind {kind!r}; known: "
                                 f"{sorted(_NODE_READERS)}")
        where = f"node {k} ({kind})"
        span = item.get("span")
        if span is not None and not isinstance(span, str):
            raise SerializeError(f"{where}: span must be a string, got {span!r}")
        try:
            r.nodes.append(read(r, item, span, where))
        except SerializeError:
            raise
        except (TypeError, ValueError, IndexError) as err:
            # The IR's own constructors reject ill-typed data (GraphTypeError, AttrError, ...).
            raise SerializeError(f"{where}: {err}") from err
    return r.nodes[-1]


def function_to_json(fn: Function) -> dict:
    """The JSON form of a function, e.g. a fused primitive function, for another process.

    Example:
        >>> data = function_to_json(call.op)   # a primitive call of a fused main  # doctest: +SKIP
        >>> data["nodes"][-1]["attrs"]                                             # doctest: +SKIP
        [['Primitive', 1], ['Name', 'fused_nn_conv2d_add_nn_relu']]
    """
    if not isinstance(fn, Function):
        raise SerializeError(f"expected a Function, got {type(fn).__name__}")
    return expr_to_json(fn)


def function_from_json(data: dict) -> Function:
    """The function that function_to_json wrote; its text and loop program are the original's.

    Example:
        >>> fn2 = function_from_json(json.loads(json.dumps(function_to_json(fn))))  # doctest: +SKIP
        >>> str(lower_primitive(fn2, "k")) == str(lower_primitive(fn, "k"))         # doctest: +SKIP
        True
    """
    fn = expr_from_json(data)
    if not isinstance(fn, Function):
        raise SerializeError(f"graph data holds a {type(fn).__name__}, not a Function")
    return fn


def module_to_json(mod) -> dict:
    """The JSON form of an IRModule: its functions by name, in order (a partitioned module's
    external functions with the main that calls them through global variables).

    Example:
        >>> [name for name, _ in module_to_json(mod)["functions"]]   # doctest: +SKIP
        ['main', 'dnnl_main_0']
    """
    from .module import IRModule
    if not isinstance(mod, IRModule):
        raise SerializeError(f"expected an IRModule, got {type(mod).__name__}")
    return {"format": FORMAT, "version": VERSION,
            "functions": [[name, function_to_json(f)] for name, f in mod.items()]}


def module_from_json(data: dict):
    """The IRModule that module_to_json wrote.

    Example:
        >>> mod2 = module_from_json(json.loads(json.dumps(module_to_json(mod))))  # doctest: +SKIP
    """
    from .module import IRModule
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SerializeError(f"not kiln module data: expected a JSON object with format "
                             f"{FORMAT!r}")
    out = IRModule()
    for k, pair in enumerate(_field(data, "functions", list, "module data")):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise SerializeError(f"module function {k}: {pair!r:.80} is not a [name, function] "
                                 f"pair")
        if pair[0] in out:
            raise SerializeError(f"module function {k}: @{pair[0]} appears twice")
        try:
            out[pair[0]] = function_from_json(pair[1])
        except SerializeError as err:
            raise SerializeError(f"module function @{pair[0]}: {err}") from None
    return out


# Symbolic dimensions that are expressions of size variables (a flattened dynamic length).
_EXPR_KINDS = {tx.Add: "+", tx.Sub: "-", tx.Mul: "*", tx.FloorDiv: "//", tx.FloorMod: "%",
               tx.Min: "min", tx.Max: "max"}
_EXPR_MAKERS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                "//": top.floordiv, "%": top.floormod, "min": top.min_, "max": top.max_}

# -- writing ------------------------------------------------------------------------------------
class _Writer:
    def __init__(self):
        self.index: dict = {}       # node -> position in nodes
        self.dim_index: dict = {}   # symbolic dimension (a kiln.tir Var) -> position in dims
        self.dims: list = []
        self.nodes: list = []

    def type(self, t) -> dict:
        write = _TYPE_WRITERS.get(type(t))
        if write is None:
            raise SerializeError(f"node {len(self.nodes)}: unknown type kind {type(t).__name__}")
        return {"kind": type(t).__name__, **write(self, t)}

    def dim(self, d):
        if type(d) is int:
            return d
        if type(d) is tx.IntImm:
            return d.value
        kind = _EXPR_KINDS.get(type(d))
        if kind is not None:
            return {"expr": [kind, self.dim(d.a), self.dim(d.b)]}
        if type(d) not in (DimVar, SizeVar):
            raise SerializeError(f"node {len(self.nodes)}: symbolic dimension {d} is not a "
                                 f"variable or + - * // % min max of them")
        if d not in self.dim_index:
            self.dim_index[d] = len(self.dims)
            entry = {"name": d.name, "dtype": d.dtype, "size": type(d) is SizeVar}
            bounds = size_bounds(d)
            if bounds is not None:       # what the kernels of a symbolic model may assume
                entry["low"], entry["high"] = bounds
            self.dims.append(entry)
        return {"dim": self.dim_index[d]}

    def attrs(self, attrs: Attrs) -> list:
        return _attr_pairs(attrs, f"node {len(self.nodes)}", self)


def _attr_pairs(attrs: Attrs, where: str, w=None) -> list:
    # Pairs, not an object: attribute order shows in the text, and a sender may sort keys.
    out = []
    for key, value in attrs.items():
        if not isinstance(key, str):
            raise SerializeError(f"{where}: attribute name {key!r} is not a string")
        out.append([key, _attr_value(value, f"{where} attribute {key!r}", w)])
    return out


def _attr_value(v, where: str, w=None):
    # Exact types: an int subclass (an IntEnum) would come back as a plain int.
    if v is None or type(v) in (bool, int, str):
        return v
    if type(v) is float:
        return v if math.isfinite(v) else {"float": repr(v)}
    if type(v) is tuple:
        return [_attr_value(x, where, w) for x in v]
    if type(v) is Attrs:
        return {"attrs": _attr_pairs(v, where, w)}
    if isinstance(v, tx.PrimExpr) and w is not None:     # a symbolic size (reshape's)
        return {"size": w.dim(v)}
    raise SerializeError(f"{where}: value {v!r} of type {type(v).__name__} has no JSON form")


def _write_constant(w, c):
    arr = c.data
    if arr.dtype.kind not in "biuf":
        raise SerializeError(f"node {len(w.nodes)}: constant of dtype {arr.dtype} has no "
                             f"JSON form")
    little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return {"dtype": arr.dtype.name, "shape": list(arr.shape),
            "data": base64.b64encode(little.tobytes()).decode("ascii")}


def _write_call(w, c):
    if isinstance(c.op, Function):
        op = {"fn": w.index[c.op]}
    elif isinstance(c.op, GlobalVar):
        # Only the reference travels: the function itself is another entry of the module.
        op = {"global": c.op.name_hint, "global_type": w.type(c.op.func_type)}
    else:
        op = {"op": c.op.name}
    return {**op, "args": [w.index[a] for a in c.args], "attrs": w.attrs(c.attrs),
            "type": w.type(c.checked_type)}


_NODE_WRITERS = {
    Var: lambda w, v: {"name": v.name_hint, "type": w.type(v.type_annotation)},
    Constant: _write_constant,
    Call: _write_call,
    Tuple: lambda w, t: {"fields": [w.index[f] for f in t.fields]},
    TupleGetItem: lambda w, t: {"tuple": w.index[t.tuple_value], "index": t.index},
    Function: lambda w, f: {"params": [w.index[p] for p in f.params], "body": w.index[f.body],
                            "attrs": w.attrs(f.attrs)},
    Let: lambda w, e: {"var": w.index[e.var], "value": w.index[e.value],
                       "body": w.index[e.body]},
    If: lambda w, e: {"cond": w.index[e.cond], "then": w.index[e.true_branch],
                      "else": w.index[e.false_branch]},
}

_TYPE_WRITERS = {
    TensorType: lambda w, t: {"shape": [w.dim(d) for d in t.shape], "dtype": t.dtype},
    TupleType: lambda w, t: {"fields": [w.type(f) for f in t.fields]},
    FuncType: lambda w, t: {"args": [w.type(a) for a in t.arg_types], "ret": w.type(t.ret_type)},
}


# -- reading ------------------------------------------------------------------------------------
_MISSING = object()


def _field(item: dict, key: str, kind, where: str):
    value = item.get(key, _MISSING)
    if value is _MISSING:
        raise SerializeError(f"{where}: missing field {key!r}")
    # bool is an int to Python, never to this format.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise SerializeError(f"{where}: field {key!r} must be a {kind.__name__}, "
                             f"got {value!r:.80}")
    return value


class _Reader:
    def __init__(self, dims: list):
        self.nodes: list = []
        self.globals: dict = {}     # name -> GlobalVar
        self.dims = []
        for k, d in enumerate(dims):
            where = f"dim {k}"
            if not isinstance(d, dict):
                raise SerializeError(f"{where}: must be a JSON object, got {d!r:.80}")
            make = SizeVar if _field(d, "size", bool, where) else DimVar
            v = make(_field(d, "name", str, where), _field(d, "dtype", str, where))
            if "low" in d:
                low, high = _field(d, "low", int, where), d.get("high")
                if (high is not None and type(high) is not int) or make is not SizeVar:
                    raise SerializeError(f"{where}: bounds {d.get('low')!r}, {high!r} of a "
                                         f"dimension must be ints of a size")
                try:
                    declare_size_bounds(v, low, high)
                except ValueError as err:
                    raise SerializeError(f"{where}: {err}") from None
            self.dims.append(v)

    def global_var(self, name: str, func_type, where: str) -> GlobalVar:
        # One GlobalVar per name, as in the module that was written.
        gv = self.globals.get(name)
        if gv is None:
            if not isinstance(func_type, FuncType):
                raise SerializeError(f"{where}: global @{name} has type {func_type!r}, not a "
                                     f"function type")
            gv = self.globals[name] = GlobalVar(name, func_type)
        elif gv.func_type != func_type:
            raise SerializeError(f"{where}: global @{name} has type {func_type!r} here and "
                                 f"{gv.func_type!r} before")
        return gv

    def node(self, item: dict, key: str, where: str, kind=Expr):
        k = _field(item, key, int, where)
        return self.ref(k, f"{where} field {key!r}", kind)

    def nodes_of(self, item: dict, key: str, where: str, kind=Expr) -> list:
        return [self.ref(k, f"{where} field {key!r}", kind)
                for k in _field(item, key, list, where)]

    def ref(self, k, where: str, kind=Expr):
        # Only earlier nodes: the data is in post order, which also rules out cycles.
        if type(k) is not int or not 0 <= k < len(self.nodes):
            raise SerializeError(f"{where}: {k!r} is not the index of an earlier node")
        node = self.nodes[k]
        if not isinstance(node, kind):
            raise SerializeError(f"{where}: node {k} is a {type(node).__name__}, "
                                 f"not a {kind.__name__}")
        return node

    def type(self, t, where: str):
        if not isinstance(t, dict):
            raise SerializeError(f"{where}: a type must be a JSON object, got {t!r:.80}")
        read = _TYPE_READERS.get(t.get("kind"))
        if read is None:
            raise SerializeError(f"{where}: unknown type kind {t.get('kind')!r}; known: "
                                 f"{sorted(_TYPE_READERS)}")
        return read(self, t, where)

    def dim(self, d, where: str):
        if type(d) is int:
            if d < 0:
                raise SerializeError(f"{where}: negative dimension {d}")
            return d
        e = d.get("expr") if isinstance(d, dict) and len(d) == 1 else None
        if isinstance(e, list) and len(e) == 3 and e[0] in _EXPR_MAKERS:
            return _EXPR_MAKERS[e[0]](self.dim(e[1], where), self.dim(e[2], where))
        k = d.get("dim") if isinstance(d, dict) else None
        if type(k) is not int or not 0 <= k < len(self.dims):
            raise SerializeError(f"{where}: dimension {d!r:.80} is neither an int nor "
                                 f"{{'dim': index into dims}}")
        return self.dims[k]

    def attrs(self, pairs, where: str) -> Attrs:
        if not isinstance(pairs, list):
            raise SerializeError(f"{where}: attributes must be a list of [name, value] pairs")
        items = {}
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                raise SerializeError(f"{where}: attribute {pair!r:.80} is not a [name, value] "
                                     f"pair")
            if pair[0] in items:
                raise SerializeError(f"{where}: attribute {pair[0]!r} appears twice")
            items[pair[0]] = self.attr_value(pair[1], f"{where} attribute {pair[0]!r}")
        return Attrs(items)

    def attr_value(self, v, where: str):
        if v is None or type(v) in (bool, int, str, float):
            return v
        if type(v) is list:
            return tuple(self.attr_value(x, where) for x in v)
        if type(v) is dict and list(v) == ["float"] and v["float"] in _FLOAT_TAGS:
            return float(v["float"])
        if type(v) is dict and list(v) == ["attrs"]:
            return self.attrs(v["attrs"], where)
        if type(v) is dict and list(v) == ["size"]:
            return self.dim(v["size"], where)
        raise SerializeError(f"{where}: {v!r:.80} is not an attribute value")


def _read_constant(r, item, span, where):
    dtype_name = _field(item, "dtype", str, where)
    try:
        dtype = np.dtype(dtype_name)
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "biuf" or dtype.name != dtype_name:
        raise SerializeError(f"{where}: unknown constant dtype {dtype_name!r}")
    shape = tuple(r.dim(d, where) for d in _field(item, "shape", list, where))
    if not all(type(d) is int for d in shape):
        raise SerializeError(f"{where}: a constant's shape must be ints, got {shape}")
    try:
        raw = base64.b64decode(_field(item, "data", str, where), validate=True)
    except binascii.Error as err:
        raise SerializeError(f"{where}: data is not base64 ({err})") from None
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise SerializeError(f"{where}: {len(raw)} bytes of data for shape {shape} of "
                             f"{dtype_name}, expected {expected}")
    return Constant(np.frombuffer(raw, dtype.newbyteorder("<")).reshape(shape), span)


def _read_call(r, item, span, where):
    args = r.nodes_of(item, "args", where)
    attrs = r.attrs(_field(item, "attrs", list, where), where)
    if "fn" in item:
        op = r.node(item, "fn", where, Function)
    elif "global" in item:
        op = r.global_var(_field(item, "global", str, where),
                          r.type(_field(item, "global_type", dict, where), where), where)
    else:
        name = _field(item, "op", str, where)
        try:
            op = get_op(name)
        except KeyError:
            raise SerializeError(f"{where}: unknown operator {name!r}") from None
        where = f"{where[:-1]} {name})"
        unknown = sorted(set(attrs) - set(op.attrs))
        if unknown:
            raise SerializeError(f"{where}: unknown attribute(s) {unknown}; known: "
                                 f"{sorted(op.attrs)}")
    stored = r.type(_field(item, "type", dict, where), where)
    call = Call(op, args, attrs, span)
    if call.checked_type != stored:
        raise SerializeError(f"{where}: written with type {stored!r}, but its operator "
                             f"infers {call.checked_type!r}")
    return call


_NODE_READERS = {
    "Var": lambda r, i, span, where: Var(_field(i, "name", str, where),
                                         r.type(_field(i, "type", dict, where), where), span),
    "Constant": _read_constant,
    "Call": _read_call,
    "Tuple": lambda r, i, span, where: Tuple(r.nodes_of(i, "fields", where), span),
    "TupleGetItem": lambda r, i, span, where: TupleGetItem(r.node(i, "tuple", where),
                                                           _field(i, "index", int, where), span),
    "Function": lambda r, i, span, where: Function(
        r.nodes_of(i, "params", where, Var), r.node(i, "body", where),
        r.attrs(_field(i, "attrs", list, where), where), span),
    "Let": lambda r, i, span, where: Let(r.node(i, "var", where, Var), r.node(i, "value", where),
                                         r.node(i, "body", where), span),
    "If": lambda r, i, span, where: If(r.node(i, "cond", where), r.node(i, "then", where),
                                       r.node(i, "else", where), span),
}

_TYPE_READERS = {
    "TensorType": lambda r, t, where: TensorType(
        [r.dim(d, where) for d in _field(t, "shape", list, where)],
        _field(t, "dtype", str, where)),
    "TupleType": lambda r, t, where: TupleType(
        [r.type(f, where) for f in _field(t, "fields", list, where)]),
    "FuncType": lambda r, t, where: FuncType(
        [r.type(a, where) for a in _field(t, "args", list, where)],
        r.type(_field(t, "ret", dict, where), where)),
}
