"""from_onnx: an ONNX model (opsets 13-21) as a kiln IRModule plus its weights.

Import runs in three steps: reject nodes of other domains (but ONNX Runtime's contrib ops that
have converters) and unsupported variants, convert the nodes in topological order into graph
calls (folding shape arithmetic in numpy as it goes,
and evaluating converter-less nodes whose inputs are all constants with the ONNX reference
interpreter), and build `main` from the graph inputs and the weights the result uses. Every
node that cannot be imported is collected into one UnsupportedOpsError. Subgraphs (If's
branches, Loop's and Scan's bodies) are imported by their converters, through
ctx.subgraph -> import_subgraph, with the enclosing graph's values in scope.
"""
from __future__ import annotations

from ...timings import phase

import copy
import heapq
import logging
import re

import numpy as np
from onnx import AttributeProto, numpy_helper

from ...graph import (AttrError, Function, GraphTypeError, IRModule, TensorType, Tuple,
                      TupleGetItem, Var, post_order)
from ...arith.size_bounds import declare_size_bounds
from ...tir import dtype as dt
from ...tir.expr import PrimExpr, SizeVar, SymbolicBoolError
from ...topi.utils import TopiError
from ..common import FrontendError, StaticValueError, UniqueNamer, UnsupportedOpsError
from .context import NodeContext, NodeError, decode_attribute, is_static, to_expr
from .dtypes import kiln_dtype
from .fallback import evaluate_node
from .fold import SymbolicSizeError
from .loader import DEFAULT_DOMAINS, load_model, opset_version
from .registry import Unsupported, get_converter

logger = logging.getLogger("kiln.frontend.onnx")

# Initializers that stay numpy values at import (shape data, literals) rather than weights.
_LITERAL_SIZE = 1
# Ops whose value is not a function of their inputs: never evaluated at import.
_RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform",
                         "RandomUniformLike", "Bernoulli", "Multinomial"})


def _outer_names(graph) -> set:
    """Names a subgraph (and the subgraphs inside it) reads from enclosing scopes."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined.update(o for node in graph.node for o in node.output)
    read = set()
    for node in graph.node:
        read.update(node_reads(node))
    read.update(o.name for o in graph.output)
    return {name for name in read if name and name not in defined}


def node_reads(node) -> list:
    """The values a node reads: its inputs, then what its subgraphs take from outer scopes.

    Example:
        >>> node_reads(helper.make_node("Add", ["a", "b"], ["c"]))   # doctest: +SKIP
        ['a', 'b']
    """
    graphs = [a.g for a in node.attribute if a.type == AttributeProto.GRAPH]
    graphs += [g for a in node.attribute if a.type == AttributeProto.GRAPHS for g in a.graphs]
    if not graphs:
        return list(node.input)
    return list(node.input) + sorted(set().union(*(_outer_names(g) for g in graphs)))


FALLBACKS = ("onnxruntime",)


def from_onnx(model_or_path, shape_dict=None, dtype=None, fallback=None, dim_ranges=None):
    """Import an ONNX model: returns (IRModule with "main", params: name -> numpy array).

    Graph inputs that are not initializers become main's parameters, in model order, followed
    by the weights (float initializers) the graph uses; params holds the weights' values, to be
    bound by kiln.compile. `shape_dict` ({input name: shape}) sets or overrides input shapes
    (needed for dynamic dimensions); `dtype` is {input name: dtype} to override element types,
    or one dtype string for the inputs whose ONNX type leaves it undefined. Integer and
    one-element initializers stay constants (shape data, literals), so shape arithmetic folds.
    A model with ops kiln cannot convert raises one UnsupportedOpsError naming every such op
    type and its nodes, unless `fallback="onnxruntime"`: then those nodes run in ONNX Runtime,
    as partitioned regions of the module (kiln.fallback.onnxruntime; their output types come
    from ONNX shape inference). Other problems (corrupt file, dynamic shapes) raise
    FrontendError. `dim_ranges` ({dim_param name: (low, high)}, high None for unbounded)
    keeps those named dynamic dimensions symbolic: main's types name them, so kiln.compile
    makes one library for every size in the ranges (kiln.runtime.GraphExecutor binds them
    from each run's inputs). Ops that need a static size where a symbolic one flows (a
    Reshape computed from Shape, for now) are an error naming the node.

    Example:
        >>> mod, params = from_onnx("resnet18.onnx", shape_dict={"input": (1, 3, 224, 224)})
        ... # doctest: +SKIP
    """
    if fallback is not None and fallback not in FALLBACKS:
        raise ValueError(f"unknown fallback {fallback!r}; kiln can fall back to "
                         f"{', '.join(FALLBACKS)}")
    if fallback == "onnxruntime":
        from ...fallback.onnxruntime import require_onnxruntime
        require_onnxruntime()       # up front: without it no node could fall back
    with phase("frontend.onnx"):
        model, where = load_model(model_or_path)
        return _GraphImporter(model, where, shape_dict or {}, dtype, fallback,
                              dim_ranges).run()


class _GraphImporter:
    def __init__(self, model, where, shape_dict, dtype, fallback=None, dim_ranges=None):
        self.model = model
        self.graph = model.graph
        self.where = where
        self.opset = opset_version(model)
        self.shape_dict = dict(shape_dict)
        self.dtype = dtype
        self.env: dict = {}               # ONNX value name -> numpy array | graph Expr
        self.param_vars: dict = {}        # Var -> initializer array
        self.namer = UniqueNamer()
        self.rejected: dict = {}          # index -> the problem _check_ops found in a node
        self.fallback = fallback          # None, or the runtime that runs what kiln lacks
        self.fallen_back: list = []       # (op type, node name) of the nodes it runs
        self._types = None                # ONNX value name -> (shape, dtype), on first use
        self._partly_typed: set = set()   # values shape inference knows, but not statically
        self.dim_ranges = dict(dim_ranges or {})
        self.dims: dict = {}              # dim_param -> the size variable naming it

    def run(self):
        self._add_initializers()
        inputs = self._add_inputs()
        nodes = self._sorted_nodes()
        unsupported = self._check_ops(nodes)
        unsupported += self._convert(nodes)
        if unsupported:
            raise UnsupportedOpsError(unsupported, frontend="ONNX")
        mod, params = self._build_main(inputs)
        if self.fallen_back:
            from ...fallback.onnxruntime import partition_for_onnxruntime
            mod = partition_for_onnxruntime(mod)
            logger.warning("%s: %d ONNX node(s) kiln lacks run in %s: %s", self.where,
                           len(self.fallen_back), self.fallback,
                           ", ".join(f"{op} ({name})" for op, name in self.fallen_back))
        return mod, params

    # -- values entering the graph ------------------------------------------------------------
    def _read_initializer(self, init) -> np.ndarray:
        what = f"{self.where}: initializer {init.name!r}"
        dtype = kiln_dtype(init.data_type, what)
        try:
            array = numpy_helper.to_array(init)
        except (ValueError, OSError, TypeError) as err:
            raise FrontendError(f"{what} cannot be read: {err}") from None
        # (np.ascontiguousarray would turn 0-d scalars into 1-d arrays.)
        array = np.asarray(array, dtype=dtype)
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        return array

    def _add_initializers(self):
        for init in self.graph.initializer:
            array = self._read_initializer(init)
            if array.size <= _LITERAL_SIZE or not dt.is_float(array.dtype.name):
                self.env[init.name] = array
            else:
                v = Var(self.namer(init.name), TensorType(array.shape, array.dtype.name))
                self.param_vars[v] = array
                self.env[init.name] = v

    def _add_inputs(self) -> list:
        names = [i.name for i in self.graph.input if i.name not in self.env]
        unknown = sorted(set(self.shape_dict) - set(names))
        if unknown:
            raise FrontendError(f"{self.where}: shape_dict names {unknown}, which are not "
                                f"graph inputs; the inputs are {names}")
        if isinstance(self.dtype, dict):
            unknown = sorted(set(self.dtype) - set(names))
            if unknown:
                raise FrontendError(f"{self.where}: dtype names {unknown}, which are not graph "
                                    f"inputs; the inputs are {names}")
        out = []
        for info in self.graph.input:
            if info.name in self.env:
                continue   # an initializer listed as an input too (a default value): a weight
            v = Var(self.namer(info.name), self._input_type(info))
            self.env[info.name] = v
            out.append(v)
        return out

    def _input_type(self, info) -> TensorType:
        what = f"{self.where}: input {info.name!r}"
        if not info.type.HasField("tensor_type"):
            raise FrontendError(f"{what} is not a tensor; kiln imports tensor inputs only")
        tt = info.type.tensor_type
        if isinstance(self.dtype, dict) and info.name in self.dtype:
            dtype = dt.normalize(self.dtype[info.name])
        elif isinstance(self.dtype, str) and not tt.elem_type:
            dtype = dt.normalize(self.dtype)
        else:
            dtype = kiln_dtype(tt.elem_type, what)
        if info.name in self.shape_dict:
            shape = tuple(int(d) for d in self.shape_dict[info.name])
        else:
            if not tt.HasField("shape"):
                raise FrontendError(f"{what} has no shape; give one with shape_dict")
            shape = []
            for k, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value >= 0:
                    shape.append(int(d.dim_value))
                elif d.dim_param in self.dim_ranges:
                    shape.append(self._dim(d.dim_param))
                else:
                    label = d.dim_param or "?"
                    raise FrontendError(f"{what} has dynamic dimension {k} ({label!r}); give "
                                        f"its shape with shape_dict={{{info.name!r}: (...)}}, "
                                        f"or keep it symbolic with "
                                        f"dim_ranges={{{label!r}: (low, high)}}")
            shape = tuple(shape)
        return TensorType(shape, dtype)

    # -- nodes ----------------------------------------------------------------------------------
    def _node_name(self, node, k) -> str:
        return node.name or f"{node.op_type}_{k}"

    def _sorted_nodes(self) -> list:
        """(index, node) in topological order, keeping the model's order where it is valid."""
        nodes = list(self.graph.node)
        producer = {}
        for k, node in enumerate(nodes):
            for out in node.output:
                if out:
                    producer[out] = k
        waiting = [0] * len(nodes)
        consumers: dict = {}
        for k, node in enumerate(nodes):
            for name in node_reads(node):
                if not name:
                    continue
                if name in producer:
                    waiting[k] += 1
                    consumers.setdefault(producer[name], []).append(k)
                elif name not in self.env:
                    raise FrontendError(f"{self.where}: node {self._node_name(node, k)!r} "
                                        f"({node.op_type}) reads {name!r}, which no node, input "
                                        f"or initializer provides")
        ready = [k for k in range(len(nodes)) if waiting[k] == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            k = heapq.heappop(ready)
            order.append((k, nodes[k]))
            for c in consumers.get(k, ()):
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(ready, c)
        if len(order) != len(nodes):
            stuck = [self._node_name(nodes[k], k) for k in range(len(nodes)) if waiting[k]]
            raise FrontendError(f"{self.where}: the graph has a cycle through nodes {stuck[:8]}")
        return order

    def _check_ops(self, nodes) -> list:
        """(op type, node name) for every node of another domain or an unsupported variant."""
        out = []
        for k, node in nodes:
            name = self._node_name(node, k)
            problem = None
            conv = get_converter(node.op_type, node.domain)
            if conv is None and node.domain not in DEFAULT_DOMAINS:
                problem = f"{node.domain}.{node.op_type}"
            elif conv is not None and conv.check is not None:
                reason = conv.check({a.name: decode_attribute(a) for a in node.attribute},
                                    self.opset)
                problem = f"{node.op_type}({reason})" if reason else None
            if problem:
                self.rejected[k] = problem
                if self.fallback is None:
                    out.append((problem, name))
        return out

    def _convert(self, nodes) -> list:
        used = {name for node in self.graph.node for name in node_reads(node)}
        used.update(o.name for o in self.graph.output)
        poisoned: set = set()
        unsupported = []
        for k, node in nodes:
            name = self._node_name(node, k)
            has_converter = get_converter(node.op_type, node.domain) is not None
            reads = node_reads(node)
            if (k in self.rejected and self.fallback is None) or (
                    has_converter and any(i in poisoned for i in reads)):
                poisoned.update(node.output)     # reported by _check_ops, or downstream of it
                continue
            try:
                if k in self.rejected:
                    raise Unsupported("")
                if has_converter:
                    outputs = self._convert_node(node, name, used)
                else:
                    outputs = self._evaluate_node(node, poisoned)
            except Unsupported as err:
                outputs = self._fall_back(node, name) if self.fallback else None
                if outputs is None:
                    reason = f"({err.reason})" if err.reason else ""
                    unsupported.append((self.rejected.get(k, f"{node.op_type}{reason}"), name))
                    poisoned.update(node.output)
                    continue
            except MemoryError as err:
                # Folding a constant whose shape follows the inputs' (ConstantOfShape, Expand
                # ...): too large an input shape is the user's to change, not a crash.
                raise FrontendError(f"{self.where}: ONNX node {name!r} ({node.op_type}) computes "
                                    f"a constant too large for memory at import ({err}); "
                                    f"{self._shapes_text()}") from None
            for out_name, value in zip(node.output, outputs):
                if out_name:
                    self.env[out_name] = value
        return unsupported

    # -- nodes another runtime runs -------------------------------------------------------
    def _fall_back(self, node, name):
        """The outputs of `node` as a call the fallback runtime runs, or None when it cannot
        be one (an input that is not a value here, an output whose static type ONNX shape
        inference does not know)."""
        from ...fallback.onnxruntime import node_call, probe_output_types
        if any(i and i not in self.env for i in node.input):
            return None
        args = [to_expr(self.env[i]) for i in node.input if i]
        if not all(isinstance(a.checked_type, TensorType) for a in args):
            return None
        types = self._value_types()
        outputs = [o for o in node.output if o]
        if not outputs:
            return None
        if all(o in types for o in outputs):
            out_types = [types[o] for o in outputs]
        elif any(o in self._partly_typed for o in outputs):
            return None     # a shape that depends on the values (NonZero's): not static
        else:
            # an op ONNX shape inference does not know (com.microsoft's): ask the runtime
            try:
                out_types = probe_output_types(node, self.model, [
                    (tuple(int(d) for d in a.checked_type.shape), a.checked_type.dtype)
                    for a in args])
            except Exception:           # the runtime cannot run it either
                return None
        result = node_call(node, args, [bool(i) for i in node.input], self.model, out_types)
        self.fallen_back.append((node.op_type, name))
        values = [result] if len(outputs) == 1 else [TupleGetItem(result, j)
                                                      for j in range(len(outputs))]
        it = iter(values)
        return [next(it) if o else None for o in node.output]

    def _value_types(self) -> dict:
        """ONNX value name -> (static shape, kiln dtype), by ONNX shape inference on the
        model with its inputs at the shapes and dtypes they have here."""
        if self._types is None:
            import onnx
            model = copy.deepcopy(self.model)
            for info in model.graph.input:
                v = self.env.get(info.name)
                if isinstance(v, Var):
                    tt = info.type.tensor_type
                    tt.elem_type = onnx.helper.np_dtype_to_tensor_dtype(
                        np.dtype(v.checked_type.dtype))
                    tt.ClearField("shape")
                    tt.shape.SetInParent()
                    for d in v.checked_type.shape:
                        tt.shape.dim.add().dim_value = int(d)
            try:
                inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
            except Exception as err:     # onnx raises several kinds on models it rejects
                raise FrontendError(f"{self.where}: ONNX shape inference failed, so the types "
                                    f"of nodes for {self.fallback} are unknown: {err}") from None
            self._types = {}
            for info in list(inferred.graph.value_info) + list(inferred.graph.output):
                tt = info.type.tensor_type
                if not tt.elem_type or not tt.HasField("shape") or any(
                        not d.HasField("dim_value") for d in tt.shape.dim):
                    self._partly_typed.add(info.name)
                    continue
                try:
                    dtype = kiln_dtype(tt.elem_type, info.name)
                except Exception:       # a dtype kiln lacks: that value cannot cross over
                    continue
                self._types[info.name] = (tuple(int(d.dim_value) for d in tt.shape.dim), dtype)
        return self._types

    def _shapes_text(self) -> str:
        given = ", ".join(f"{n}: {'x'.join(str(int(d)) for d in s)}"
                          for n, s in self.shape_dict.items())
        return (f"check the input shapes given ({given})" if given
                else "the model's own input shapes lead to it")

    def _convert_node(self, node, name, used) -> list:
        conv = get_converter(node.op_type, node.domain)
        inputs = [self.env[i] if i else None for i in node.input]
        while inputs and inputs[-1] is None:
            inputs.pop()
        used_outputs = [bool(o) and o in used for o in node.output]
        ctx = NodeContext(node, name, inputs, self.opset, self.param_vars, used_outputs,
                          subgraph=self.import_subgraph)
        try:
            result = conv.fn(ctx)
        except StaticValueError as err:
            raise StaticValueError(f"{self.where}: {err}", value=err.value, node=err.node) \
                from None
        except NodeError as err:
            raise FrontendError(f"{self.where}: {err}") from None
        except (GraphTypeError, AttrError, dt.DTypeError, FrontendError) as err:
            raise FrontendError(f"{self.where}: ONNX node {name!r} ({node.op_type}): {err}") \
                from None
        except (SymbolicBoolError, SymbolicSizeError, TopiError) as err:
            if not self.dims:
                raise
            raise FrontendError(f"{self.where}: ONNX node {name!r} ({node.op_type}) needs a "
                                f"static size where a dimension of dim_ranges "
                                f"({', '.join(self.dims)}) flows: {err}") from None
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        # (an element taken from shape data with symbolic sizes is a bare int or expression)
        outputs = [np.asarray(o) if isinstance(o, np.generic) else
                   np.asarray(o, dtype=object) if isinstance(o, PrimExpr) else
                   np.asarray(o, dtype=np.int64) if type(o) is int else o for o in outputs]
        for k, used_k in enumerate(used_outputs):
            if used_k and (k >= len(outputs) or outputs[k] is None):
                raise Unsupported(f"output {k} {node.output[k]!r}")
        return outputs

    def _evaluate_node(self, node, poisoned) -> list:
        """Outputs of a converter-less node whose inputs are all known (Unsupported if not)."""
        inputs = []
        for i in node.input:
            value = self.env.get(i) if i else None
            if i in poisoned:
                raise Unsupported("")
            if value is not None and not is_static(value):
                value = self.param_vars.get(value)
                if value is None:
                    raise Unsupported("")
            inputs.append(value)
        if node.op_type in _RANDOM_OPS:
            raise Unsupported("")
        try:
            outputs = evaluate_node(node, inputs, self.opset)
            for out in outputs:
                if out is not None:
                    dt.normalize(out.dtype)          # strings, objects: nothing kiln holds
        except Exception:     # the reference interpreter's errors: op unknown to it, bad input
            raise Unsupported("") from None
        return outputs

    # -- subgraphs (If branches, Loop and Scan bodies) ---------------------------------------
    def import_subgraph(self, graph, inputs: list, where: str) -> list:
        """The values of `graph`'s outputs with its inputs bound to `inputs` (numpy arrays or
        expressions, in order); the values converted so far stay visible (ONNX outer scope).

        Each call converts the subgraph afresh, so a converter can unroll a loop by calling
        it once per iteration. `where` names the subgraph in messages. Nodes kiln cannot
        import raise Unsupported listing them; errors name the node inside the subgraph.

        Example:
            >>> outs = importer.import_subgraph(body, [np.int64(0), x], "node 'l', body")
            ... # doctest: +SKIP
        """
        if len(inputs) != len(graph.input):
            raise NodeError(f"{where} takes {len(graph.input)} inputs, got {len(inputs)}")
        scope = copy.copy(self)          # the same weights, names and opset; its own values
        scope.graph, scope.where, scope.env, scope.rejected = graph, where, dict(self.env), {}
        for init in graph.initializer:   # literals: each unrolled copy folds them again
            scope.env[init.name] = self._read_initializer(init)
        for info, value in zip(graph.input, inputs):
            scope.env[info.name] = value
        try:
            nodes = scope._sorted_nodes()
            unsupported = scope._check_ops(nodes) + scope._convert(nodes)
        except (StaticValueError, NodeError):
            raise
        except FrontendError as err:     # its message names `where` and the inner node
            raise NodeError(str(err)) from None
        if unsupported:
            raise Unsupported(", ".join(sorted({op for op, _ in unsupported})))
        missing = [o.name for o in graph.output if o.name not in scope.env]
        if missing:
            raise NodeError(f"{where}: outputs {missing} are never produced")
        return [scope.env[o.name] for o in graph.output]

    # -- main -----------------------------------------------------------------------------------
    def _build_main(self, inputs):
        results = []
        for out in self.graph.output:
            if out.name not in self.env:
                raise FrontendError(f"{self.where}: graph output {out.name!r} is never produced")
            results.append(to_expr(self.env[out.name]))
        body = results[0] if len(results) == 1 else Tuple(results)
        reached = {n for n in post_order(body) if isinstance(n, Var)}
        weights = [v for v in self.param_vars if v in reached]    # initializer order
        params = {v.name_hint: self.param_vars[v] for v in weights}
        unused = sorted(set(self.dim_ranges) - set(self.dims))
        if unused:
            raise FrontendError(f"{self.where}: dim_ranges names {unused}, which no graph "
                                f"input has as a dynamic dimension")
        attrs = {"dim_ranges": {v.name: self.dim_ranges[p] for p, v in self.dims.items()}} \
            if self.dims else None
        func = Function(list(inputs) + weights, body, attrs)
        return IRModule.from_expr(func), params

    def _dim(self, param: str):
        """The size variable of dim_param `param` (one per name, named after it)."""
        v = self.dims.get(param)
        if v is None:
            name = re.sub(r"\W", "_", param)
            name = name if name.isidentifier() else f"d_{name}"
            low, high = self._range(param)
            v = self.dims[param] = SizeVar(name, "int32")
            declare_size_bounds(v, low, high)
            self.dim_ranges[param] = (low, high)
        return v

    def _range(self, param: str) -> tuple:
        r = self.dim_ranges[param]
        try:
            low, high = r
        except (TypeError, ValueError):
            low = high = object()
        if isinstance(low, bool) or not isinstance(low, int) or low < 1 or high is not None \
                and (isinstance(high, bool) or not isinstance(high, int) or high < low):
            raise FrontendError(f"{self.where}: dim_ranges[{param!r}] = {r!r} is not a range "
                                f"of sizes (ints 1 <= low <= high, high None for unbounded)")
        return low, high
