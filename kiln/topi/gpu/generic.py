"""The generic GPU schedule: one thread per element of each output, every other stage inlined
(elementwise) or computed by that thread (reductions, in its local memory)."""
from __future__ import annotations

from ... import te
from ...target import current_target
from ...te.tensor import ComputeOp

# Threads per block: a multiple of the warp (32) and of AMD's wavefront (64), within every
# GPU's work-group limit that kiln's targets default to.
DEFAULT_THREADS = 64


def default_threads(wanted: int = DEFAULT_THREADS) -> int:
    """`wanted` threads per block, or fewer when the current target allows fewer."""
    target = current_target()
    return min(wanted, target.max_num_threads) if target.is_gpu else wanted


def bind_elementwise(s, tensor, threads: int | None = None):
    """One thread per element of `tensor`: its axes fused, split into blocks of `threads`
    (default_threads() when None); returns the thread loop (None for a scalar: one thread).

    Example:
        >>> tx = bind_elementwise(s, relu_out)   # doctest: +SKIP
    """
    st = s[tensor]
    axes = list(st.op.axis)
    if not axes:
        return None
    bx, tx = st.split(st.fuse(*axes), factor=threads or default_threads())
    st.bind(bx, te.thread_axis("blockIdx.x"))
    st.bind(tx, te.thread_axis("threadIdx.x"))
    return tx


def schedule_generic(outs):
    """A correct GPU schedule of any fused group: each output's elements over blocks of
    threads; producers inlined when elementwise, else (reductions) computed per thread at the
    output's thread loop.

    Example:
        >>> y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
        >>> s = schedule_generic([y])
    """
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([o.op for o in outs])
    out_ops = {o.op for o in outs}
    threads = default_threads()
    hosts = []
    for op in [o.op for o in outs]:
        st = s[op]
        if not isinstance(op, ComputeOp) or st in [h for h, _ in hosts]:
            continue
        hosts.append((st, bind_elementwise(s, op.output(0), threads)))
    first_host = hosts[0] if hosts else None
    for st in s.stages:
        op = st.op
        if not isinstance(op, ComputeOp) or op in out_ops or st.attach_type != "root":
            continue
        if op.reduce_axis:
            host = _reading_host(s, st, hosts) or first_host
            if host is not None and host[1] is not None:
                st.compute_at(host[0], host[1])
                st.set_scope("local")
        else:
            st.compute_inline()
    return s


def _reading_host(s, stage, hosts):
    """The output stage (with its thread loop) that reads `stage`, directly or through
    inlined stages."""
    for host, tx in hosts:
        if _reads(s, host.op, stage.op, set()):
            return host, tx
    return None


def _reads(s, op, target, seen) -> bool:
    if op in seen or not isinstance(op, ComputeOp):
        return False
    seen.add(op)
    for t in op.input_tensors():
        if t.op is target or _reads(s, t.op, target, seen):
            return True
    return False
