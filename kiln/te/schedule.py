"""Schedules: per-stage loop transformations that never change what a tensor computes.

A Schedule holds one Stage per operation. Stage primitives (split, fuse, reorder, tile,
compute_at, compute_inline, vectorize, unroll, parallel, ...) record loop structure; the
dataflow-changing primitives (cache_read, cache_write, rfactor) live on the Schedule and add
stages. `kiln.lower` turns the result into a loop program.
"""
from __future__ import annotations

from ..tir.expr import IterVar, ProducerLoad, Range, Reduce, Var
from ..tir.functor import IRMutator
from ..tir.op import convert
from .relations import Fuse, Split, is_reduce
from .tensor import ComputeOp, Operation, Tensor, fresh_itervar, is_reduction


class ScheduleError(ValueError):
    """A schedule primitive used wrongly; the message names the stage and the axis."""


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")


SCOPES = ("global", "shared", "local")


def check_scope(scope, where: str) -> str:
    """A memory scope: global, shared, local, or a tagged local / shared scope such as
    "local.acc_buffer" (an accelerator's on-chip buffer, which its back-end knows)."""
    base, _, tag = scope.partition(".") if isinstance(scope, str) else (scope, "", "")
    if base not in SCOPES or (tag == "" and "." in scope) or (tag and base == "global"):
        raise ScheduleError(f"{where}: unknown memory scope {scope!r}; use one of "
                            f"{', '.join(SCOPES)}, or local.NAME / shared.NAME")
    return scope


def is_thread_tag(tag: str) -> bool:
    """True for the tags a loop may be bound to: GPU block / thread indices and vthreads.

    Example:
        >>> is_thread_tag("threadIdx.x"), is_thread_tag("vthread"), is_thread_tag("warp")
        (True, True, False)
    """
    return tag in THREAD_TAGS or tag == "vthread" or tag.startswith("vthread.")


def _name(iv) -> str:
    return iv.var.name if isinstance(iv, IterVar) else repr(iv)


class Stage:
    """The schedule of one operation: its loop nest and where it is computed."""

    def __init__(self, op: Operation, schedule: "Schedule"):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self._reset_loops()
        self.attach_type = "root"          # root | inline | scope
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = ""
        self.is_output = False
        self.iter_var_attrs: dict = {}     # IterVar -> {"kind": ..., "thread": ..., "pragmas": [...]}
        self.align_info: dict = {}         # axis index -> (factor, offset)

    def _reset_loops(self):
        roots = list(self.op.axis) + list(self.op.reduce_axis) if isinstance(self.op, ComputeOp) else []
        self.all_iter_vars = list(roots)
        self.leaf_iter_vars = list(roots)
        self.relations: list = []

    def __repr__(self):
        return f"stage({self.op.name}, leaves=[{', '.join(_name(v) for v in self.leaf_iter_vars)}])"

    # -------------------------------------------------------------------- checks
    def _error(self, primitive, message):
        return ScheduleError(f"{primitive} on stage '{self.op.name}': {message}")

    def _require_compute(self, primitive):
        if not isinstance(self.op, ComputeOp):
            raise self._error(primitive, "a placeholder has no loops to schedule")

    def _leaf(self, iv, primitive) -> IterVar:
        self._require_compute(primitive)
        if not isinstance(iv, IterVar):
            raise self._error(primitive, f"expected an axis (IterVar), got {iv!r}")
        if iv not in self.all_iter_vars:
            owner = self.schedule._owner_of(iv)
            where = f"it belongs to stage '{owner.op.name}'" if owner else "it is not an axis of this stage"
            raise self._error(primitive, f"axis '{_name(iv)}' is not an axis of this stage ({where})")
        if iv not in self.leaf_iter_vars:
            raise self._error(primitive, f"axis '{_name(iv)}' was already split or fused; "
                                         f"use one of the current loops: "
                                         f"{', '.join(_name(v) for v in self.leaf_iter_vars)}")
        return iv

    def _new_iv(self, name, iter_type):
        iv = IterVar(None, Var(name, "int32"), iter_type)
        self.all_iter_vars.append(iv)
        return iv

    # -------------------------------------------------------------------- loop structure
    def split(self, parent, factor=None, nparts=None):
        """Split a loop in two: for x in range(n) → for x.outer: for x.inner in range(factor).

        Example:
            >>> xo, xi = s[C].split(C.op.axis[0], factor=32)  # doctest: +SKIP
        """
        self._leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise self._error("split", f"give exactly one of factor= or nparts= for axis '{_name(parent)}'")
        by = factor if factor is not None else nparts
        by_expr = convert(by)
        if hasattr(by_expr, "value") and by_expr.value <= 0:
            raise self._error("split", f"axis '{_name(parent)}': the {'factor' if factor is not None else 'nparts'} "
                                       f"must be positive, got {by_expr.value}")
        outer = self._new_iv(parent.var.name + ".outer", parent.iter_type)
        inner = self._new_iv(parent.var.name + ".inner", parent.iter_type)
        self.relations.append(Split(parent, outer, inner,
                                    by_expr if factor is not None else None,
                                    by_expr if nparts is not None else None))
        k = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *axes):
        """Fuse adjacent loops (outer first) into one."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if not axes:
            raise self._error("fuse", "needs at least one axis")
        for iv in axes:
            self._leaf(iv, "fuse")
        if len(axes) == 1:
            return axes[0]
        positions = [self.leaf_iter_vars.index(iv) for iv in axes]
        if positions != list(range(positions[0], positions[0] + len(axes))):
            raise self._error("fuse", f"axes {', '.join(_name(a) for a in axes)} must be adjacent "
                                      f"loops, outer to inner; current order: "
                                      f"{', '.join(_name(v) for v in self.leaf_iter_vars)}")
        if len({is_reduce(a) for a in axes}) > 1:
            raise self._error("fuse", "cannot fuse a reduction axis with a data-parallel axis "
                                      f"({', '.join(_name(a) for a in axes)})")
        fused = axes[0]
        for nxt in axes[1:]:
            new = self._new_iv(f"{fused.var.name}.{nxt.var.name}.fused", fused.iter_type)
            self.relations.append(Fuse(fused, nxt, new))
            fused = new
        self.leaf_iter_vars[positions[0]:positions[-1] + 1] = [fused]
        return fused

    def reorder(self, *axes):
        """Put the given loops in this order (they keep the set of positions they occupy)."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        for iv in axes:
            self._leaf(iv, "reorder")
        if len(set(axes)) != len(axes):
            dup = [a for a in axes if axes.count(a) > 1][0]
            raise self._error("reorder", f"axis '{_name(dup)}' is given more than once")
        positions = sorted(self.leaf_iter_vars.index(iv) for iv in axes)
        for pos, iv in zip(positions, axes):
            self.leaf_iter_vars[pos] = iv

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two loops and order them (x.outer, y.outer, x.inner, y.inner)."""
        self._leaf(x_parent, "tile")
        self._leaf(y_parent, "tile")
        if x_parent is y_parent:
            raise self._error("tile", f"needs two different axes, got '{_name(x_parent)}' twice")
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # -------------------------------------------------------------------- loop annotations
    def _attrs(self, iv) -> dict:
        return self.iter_var_attrs.setdefault(iv, {"kind": None, "pragmas": []})

    def _annotate(self, iv, primitive, kind, **extra):
        self._leaf(iv, primitive)
        attrs = self._attrs(iv)
        attrs["kind"] = kind
        attrs.update(extra)

    def vectorize(self, iv):
        """Run the loop as vector instructions (its extent must be a constant at lowering)."""
        self._leaf(iv, "vectorize")
        if is_reduce(iv):
            raise self._error("vectorize", f"cannot vectorize the reduction axis '{_name(iv)}'; "
                                           "vectorize a data-parallel axis (or rfactor first)")
        self._annotate(iv, "vectorize", "vectorized")

    def unroll(self, iv):
        self._annotate(iv, "unroll", "unrolled")

    def parallel(self, iv):
        """Run the iterations of this loop on the thread pool. A loop whose whole work is too
        small to pay for a launch (under ~16k element updates) still runs serially: see
        kiln/tir/transform/serial_small_parallel.py; to keep it parallel anyway, lower with a
        pipeline without that pass.

        Example:
            >>> outer, inner = s[C].split(C.op.axis[0], factor=64)   # doctest: +SKIP
            >>> s[C].parallel(outer)                                  # doctest: +SKIP
        """
        self._leaf(iv, "parallel")
        if is_reduce(iv):
            raise self._error("parallel", f"cannot parallelize the reduction axis '{_name(iv)}' "
                                          "(threads would race on the result); use rfactor")
        self._annotate(iv, "parallel", "parallel")

    def bind(self, iv, thread_ivar):
        """Run the iterations of a loop on GPU threads: `thread_ivar` is a te.thread_axis
        ("blockIdx.x", "threadIdx.y", "vthread", ...). Loops of different stages bound to one
        thread tag are the same hardware index (so a shared-memory stage computed inside the
        threads' loops is fetched cooperatively); within one kernel they must have one extent.
        A reduction axis bound to threadIdx makes a cross-thread reduction: each thread reduces
        its share, then the block combines the threads' partial results (an all-reduce in
        shared memory), and every thread sees the result.

        Example:
            >>> bx, tx = s[C].split(C.op.axis[0], factor=64)      # doctest: +SKIP
            >>> s[C].bind(bx, te.thread_axis("blockIdx.x"))      # doctest: +SKIP
            >>> s[C].bind(tx, te.thread_axis("threadIdx.x"))     # doctest: +SKIP
        """
        if not isinstance(thread_ivar, IterVar) or thread_ivar.iter_type != "thread":
            raise self._error("bind", f"axis '{_name(iv)}' must be bound to a te.thread_axis, "
                                      f"got {thread_ivar!r}")
        self._leaf(iv, "bind")
        tag = thread_ivar.thread_tag
        if not is_thread_tag(tag):
            raise self._error("bind", f"unknown thread tag {tag!r} for axis '{_name(iv)}'; use "
                                      "blockIdx.x/y/z, threadIdx.x/y/z or vthread")
        if is_reduce(iv) and not tag.startswith("threadIdx"):
            raise self._error("bind", f"the reduction axis '{_name(iv)}' cannot be bound to "
                                      f"{tag}: a reduction is shared by the threads of one "
                                      "block only; bind it to threadIdx.x/y/z (a cross-thread "
                                      "reduction) or rfactor it and bind a data axis")
        if not tag.startswith("vthread"):
            for other, attrs in self.iter_var_attrs.items():
                if other is not iv and attrs.get("thread") == tag and other in self.leaf_iter_vars:
                    raise self._error("bind", f"axes '{_name(other)}' and '{_name(iv)}' are both "
                                              f"bound to {tag}")
        self._annotate(iv, "bind", "thread_binding", thread=tag, thread_ivar=thread_ivar)

    def pragma(self, iv, name: str, value=None):
        """Attach a pragma to a loop, e.g. s[C].pragma(xo, "auto_unroll_max_step", 16)."""
        self._leaf(iv, "pragma")
        self._attrs(iv)["pragmas"].append((name, 1 if value is None else value))

    def tensorize(self, iv, intrin):
        """Replace loop `iv` and the loops inside it by a tensor intrinsic
        (te.decl_tensor_intrin). Lowering checks that these loops compute what the intrinsic
        declares (its axes pair with the stage's last axes) and says what differs if not.

        Example:
            >>> yo, xo, yi, xi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)  # doctest: +SKIP
            >>> s[C].tensorize(yi, gemm_4x16)                                   # doctest: +SKIP
        """
        from .tensor_intrin import TensorIntrin
        self._leaf(iv, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise self._error("tensorize", f"expected an intrinsic from te.decl_tensor_intrin, "
                                           f"got {intrin!r}")
        for other, attrs in self.iter_var_attrs.items():
            if attrs.get("tensorize") is not None and other is not iv and other in self.leaf_iter_vars:
                raise self._error("tensorize", f"loop '{_name(other)}' is already tensorized "
                                               f"(with '{attrs['tensorize'].name}')")
        self._attrs(iv)["tensorize"] = intrin

    def prefetch(self, tensor, iv, offset: int = 1):
        """While an iteration of loop `iv` runs, prefetch the part of `tensor` that the
        iteration `offset` later reads, spread over the loops inside `iv` (see
        kiln.tir.transform.inject_prefetch), e.g. the next weight panel of a dense layer while
        the current one is multiplied.

        Example:
            >>> s[C].prefetch(W_packed, jo, 1)  # doctest: +SKIP
        """
        self._leaf(iv, "prefetch")
        if not isinstance(tensor, Tensor):
            raise self._error("prefetch", f"expected a tensor to prefetch, got {tensor!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 1:
            raise self._error("prefetch", f"offset must be a positive number of iterations, "
                                          f"got {offset!r}")
        self._attrs(iv).setdefault("prefetch", []).append((tensor, offset))

    # -------------------------------------------------------------------- placement
    def compute_at(self, parent: "Stage", ivar):
        """Compute this stage inside loop `ivar` of `parent`, just the region parent needs."""
        self._require_compute("compute_at")
        if not isinstance(parent, Stage):
            raise self._error("compute_at", f"the first argument must be a stage (s[T]), got {parent!r}")
        parent._leaf(ivar, "compute_at")
        if parent is self:
            raise self._error("compute_at", "a stage cannot be computed at its own loop")
        if self.is_output:
            raise self._error("compute_at", "an output of the schedule is computed at the root")
        if not self.schedule._consumes(parent, self):
            raise self._error("compute_at", f"stage '{parent.op.name}' does not read this stage's "
                                            f"result, so it cannot host it at axis '{_name(ivar)}'")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, ivar

    def compute_inline(self):
        """Substitute this stage's expression into its consumers (no buffer of its own)."""
        self._require_compute("compute_inline")
        if is_reduction(self.op):
            raise self._error("compute_inline", "a reduction cannot be inlined")
        if self.is_output:
            raise self._error("compute_inline", "an output of the schedule cannot be inlined")
        for other in self.schedule.stages:
            if other.attach_stage is self:
                raise self._error("compute_inline", f"stage '{other.op.name}' is computed at one "
                                                    "of its loops")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_root(self):
        self._require_compute("compute_root")
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None

    def set_scope(self, scope: str):
        """Where this stage's buffer lives on a GPU: "global", "shared" (one copy per thread
        block) or "local" (one per thread).

        Example:
            >>> s[AA].set_scope("shared")   # doctest: +SKIP
        """
        self.scope = check_scope(scope, f"set_scope on stage '{self.op.name}'")

    def storage_align(self, axis, factor: int, offset: int):
        """Pad the stride of `axis` so that stride % factor == offset (avoids bank conflicts)."""
        self._require_compute("storage_align")
        if axis not in self.op.axis:
            raise self._error("storage_align", f"axis '{_name(axis)}' is not a root data axis of this stage")
        if factor <= 0 or not 0 <= offset < factor:
            raise self._error("storage_align", f"need factor > 0 and 0 <= offset < factor, got {factor}, {offset}")
        self.align_info[self.op.axis.index(axis)] = (int(factor), int(offset))


class Schedule:
    """The schedules of all stages of a computation; s[T] is the stage of tensor T."""

    def __init__(self, outputs):
        self.outputs = []
        self.stage_map: dict = {}
        for op in outputs:
            self.outputs.append(self._stage_for(op))
        for st in self.outputs:
            st.is_output = True
        self._refresh()

    def _stage_for(self, op):
        st = self.stage_map.get(op)
        if st is None:
            st = Stage(op, self)
            self.stage_map[op] = st
            for t in op.input_tensors():
                self._stage_for(t.op)
        return st

    def _refresh(self):
        order, seen = [], set()

        def visit(op):
            if op in seen:
                return
            seen.add(op)
            for t in op.input_tensors():
                visit(self.stage_map[t.op].op)
            order.append(self.stage_map[op])

        for st in self.outputs:
            visit(st.op)
        self.stages = order

    def __getitem__(self, item) -> Stage:
        op = item.op if isinstance(item, Tensor) else item
        st = self.stage_map.get(op)
        if st is None:
            name = getattr(op, "name", repr(op))
            raise ScheduleError(f"'{name}' is not part of this schedule (was it made by another "
                                "compute chain?)")
        return st

    def _owner_of(self, iv):
        for st in self.stages:
            if iv in st.all_iter_vars:
                return st
        return None

    def current(self, tensor: Tensor) -> Tensor:
        return self[tensor].op.output(tensor.value_index)

    def consumers(self, stage: Stage) -> list:
        out = []
        for st in self.stages:
            if any(self.stage_map[t.op] is stage for t in st.op.input_tensors()):
                out.append(st)
        return out

    def _consumes(self, consumer: Stage, producer: Stage) -> bool:
        todo, seen = [consumer], set()
        while todo:
            st = todo.pop()
            for t in st.op.input_tensors():
                p = self.stage_map[t.op]
                if p is producer:
                    return True
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return False

    # -------------------------------------------------------------------- dataflow rewrites
    def _replace_op(self, stage: Stage, new_op: Operation):
        """Give `stage` a new operation and point every reader at the new outputs."""
        old_op = stage.op
        stage.op = new_op
        self.stage_map[new_op] = stage
        self._rewire({old_op.output(k): new_op.output(k) for k in range(old_op.num_outputs)},
                     only=set(self.stages) - {stage})

    def _rewire(self, tensor_map: dict, only=None):
        """Point readers at replacement tensors; `only` limits which stages see `tensor_map`
        (cache_read rewires just its readers), while every stage sees the replacements that
        rewriting produces downstream."""
        self._refresh()
        derived: dict = {}
        for st in list(self.stages):
            if not isinstance(st.op, ComputeOp):
                continue
            mapping = dict(derived)
            if only is None or st in only:
                mapping.update(tensor_map)
            if not any(t in mapping for t in st.op.input_tensors()):
                continue
            rewriter = _TensorRewriter(mapping)
            old = st.op
            st.op = old.with_body(tuple(rewriter.visit(b) for b in old.body))
            self.stage_map[st.op] = st
            derived.update({old.output(k): st.op.output(k) for k in range(old.num_outputs)})
        self._refresh()

    def _insert_stage(self, op, before: Stage, scope: str) -> Stage:
        st = Stage(op, self)
        st.scope = scope
        self.stage_map[op] = st
        return st

    def cache_read(self, tensor: Tensor, scope: str, readers):
        """Copy `tensor` into a new stage that `readers` read instead (e.g. into "shared")."""
        check_scope(scope, f"cache_read of '{tensor.name}'")
        producer = self[tensor]
        src = self.current(tensor)
        readers = readers if isinstance(readers, (list, tuple)) else [readers]
        reader_stages = []
        for r in readers:
            st = r if isinstance(r, Stage) else self[r]
            if src not in st.op.input_tensors():
                raise ScheduleError(f"cache_read of '{src.name}': stage '{st.op.name}' does not "
                                    "read it")
            reader_stages.append(st)
        axis = tuple(IterVar(Range(convert(0, s.dtype), s), Var(f"ax{k}", s.dtype), "data_par")
                     for k, s in enumerate(src.op.shape))
        op = ComputeOp(f"{src.name}.{scope}", "", {}, axis, (), (src[tuple(iv.var for iv in axis)],))
        self._insert_stage(op, producer, scope)
        self._rewire({src: op.output(0)}, only=set(reader_stages))
        return op.output(0)

    def cache_write(self, tensor: Tensor, scope: str):
        """Compute `tensor` into a new stage, then copy it out; returns the new stage's tensor."""
        check_scope(scope, f"cache_write of '{tensor.name}'")
        stage = self[tensor]
        op = stage.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cache_write: '{op.name}' is a placeholder, not a compute")
        if stage.relations or stage.attach_type != "root" or stage.iter_var_attrs:
            raise ScheduleError(f"cache_write on stage '{op.name}': call it before scheduling "
                                "that stage (it already has loop transformations)")
        axis_map = {iv: fresh_itervar(iv) for iv in op.axis + op.reduce_axis}
        body = tuple(remap_axes(b, axis_map) for b in op.body)
        local = ComputeOp(f"{op.name}.{scope}", op.tag, op.attrs,
                          tuple(axis_map[iv] for iv in op.axis),
                          tuple(axis_map[iv] for iv in op.reduce_axis), body)
        copy_body = tuple(local.output(k)[tuple(iv.var for iv in op.axis)]
                          for k in range(local.num_outputs))
        new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, (), copy_body)
        self._insert_stage(local, stage, scope)
        self._replace_op(stage, new_op)
        stage._reset_loops()
        outs = list(local.outputs)
        return outs[0] if len(outs) == 1 else outs

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0):
        """Factor a reduction: a new stage reduces all but `axis`, keeping `axis` as a data axis;
        the original stage then reduces over it (e.g. to parallelize or vectorize a reduction)."""
        from .rfactor import rfactor
        return rfactor(self, tensor, axis, factor_axis)


class _TensorRewriter(IRMutator):
    def __init__(self, tensor_map):
        super().__init__()
        self.tensor_map = tensor_map

    def visit_ProducerLoad(self, e):
        indices = tuple(self.visit(i) for i in e.indices)
        producer = self.tensor_map.get(e.producer, e.producer)
        if producer is e.producer and all(a is b for a, b in zip(indices, e.indices)):
            return e
        return ProducerLoad(producer, indices)


def remap_axes(expr, axis_map: dict):
    """Substitute iter vars (data and reduce) by other iter vars, rebuilding reductions."""
    vmap = {old.var: new.var for old, new in axis_map.items()}

    class _Remap(IRMutator):
        def visit_Var(self, v):
            return vmap.get(v, v)

        def visit_Reduce(self, r):
            return Reduce(r.combiner, tuple(self.visit(s) for s in r.source),
                          tuple(axis_map.get(a, a) for a in r.axis), self.visit(r.condition),
                          r.value_index, tuple(self.visit(i) for i in r.init))

    return _Remap().visit(expr)


def create_schedule(ops) -> Schedule:
    """A default schedule (one loop per axis, every stage at the root) for the given outputs.

    Example:
        >>> s = create_schedule(C.op)  # doctest: +SKIP
    """
    if not isinstance(ops, (list, tuple)):
        ops = [ops]
    ops = [o.op if isinstance(o, Tensor) else o for o in ops]
    for o in ops:
        if not isinstance(o, Operation):
            raise ScheduleError(f"create_schedule takes operations (T.op), got {o!r}")
    return Schedule(ops)
