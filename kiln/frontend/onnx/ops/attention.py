"""Attention-family ONNX ops (Attention, RotaryEmbedding, TensorScatter, CausalConvWithState,
LinearAttention), built from matmul, softmax, gather and elementwise catalog ops.

Attention keeps the heads grouped for GQA instead of repeating K and V: query heads
[g * G, (g + 1) * G) share key/value head g, so Q (B, Hq, Sq, D) is viewed as
(B * Hkv, G * Sq, D) and multiplied with K (B * Hkv, Skv, D) in one nn.batch_matmul. The
attention bias (mask, causal frontier, sliding window, key padding) folds to a constant
whenever it does not depend on run-time inputs.

float16 products and sums are accumulated in float32 and rounded once, as numpy (the ONNX
reference) and ONNX Runtime do: kiln's float16 batch_matmul, conv2d and softmax accumulate
in float16, several ulp off against the node suite's 1e-3 tolerance.
"""
from __future__ import annotations

import math

import numpy as np

from ..context import dtype_of, shape_of
from ..registry import converter
from .tensor import reshape_to

# softmax_precision (an ONNX TensorProto element type) -> kiln dtype.
_SOFTMAX_PRECISIONS = {1: "float32", 10: "float16", 11: "float64"}
_QK_MODES = (0, 1, 2, 3)


# -- Attention -------------------------------------------------------------------------------

def _split_heads(ctx, x, heads: int, what: str):
    """(B, S, H * D) -> (B, H, S, D)."""
    b, s, hidden = shape_of(x)
    if heads <= 0 or hidden % heads:
        ctx.error(f"{what} hidden size {hidden} is not a multiple of {heads} heads")
    x = reshape_to(ctx, x, (b, s, heads, hidden // heads))
    return ctx.op("transpose", x, axes=(0, 2, 1, 3))


def _attention_operands(ctx):
    """Q, K, V as 4-d (B, H, S, D) tensors, and the rank of the node's inputs."""
    rank = ctx.ndim(0)
    if rank not in (3, 4) or ctx.ndim(1) != rank or ctx.ndim(2) != rank:
        ctx.error(f"Q, K and V must all be 3-d or all 4-d, got ranks "
                  f"{ctx.ndim(0)}, {ctx.ndim(1)} and {ctx.ndim(2)}")
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    if rank == 3:
        hq, hkv = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
        q = _split_heads(ctx, q, hq, "Q")
        k = _split_heads(ctx, k, hkv, "K")
        v = _split_heads(ctx, v, hkv, "V")
    (b, hq, _, d), (bk, hk, sk, dk), (bv, hv, sv, _) = shape_of(q), shape_of(k), shape_of(v)
    for name in ("q_num_heads", "kv_num_heads"):
        want = hq if name == "q_num_heads" else hk
        if int(ctx.attr(name, want)) != want:
            ctx.error(f"{name}={ctx.attr(name)} but the 4-d input has {want} heads")
    if not b == bk == bv:
        ctx.error(f"batch sizes of Q, K and V differ: {b}, {bk}, {bv}")
    if dk != d:
        ctx.error(f"head size of K ({dk}) differs from Q's ({d})")
    if (hv, sv) != (hk, sk):
        ctx.error(f"K has {hk} heads of length {sk}, V {hv} heads of length {sv}")
    if hq % hk:
        ctx.error(f"q_num_heads {hq} is not a multiple of kv_num_heads {hk}")
    if ctx.dtype(1) != ctx.dtype(0):
        ctx.error(f"K has dtype {ctx.dtype(1)}, Q {ctx.dtype(0)} (they must be the same)")
    if ctx.has_input(6) and tuple(ctx.shape(6)) != (b,):
        ctx.error(f"nonpad_kv_seqlen has shape {tuple(ctx.shape(6))}, expected ({b},)")
    return q, k, v, rank


def _with_past(ctx, k, v):
    """present_key / present_value: the past cache (if any) followed by the new K / V."""
    has_key, has_value = ctx.has_input(4), ctx.has_input(5)
    if has_key != has_value:
        ctx.error("past_key and past_value must be given together")
    if not has_key:
        return k, v, 0
    if ctx.has_input(6):
        ctx.error("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    past_k, past_v = ctx.input(4), ctx.input(5)
    for past, new, what in ((past_k, k, "past_key"), (past_v, v, "past_value")):
        ps, ns = shape_of(past), shape_of(new)
        if len(ps) != 4 or ps[:2] != ns[:2] or ps[3] != ns[3]:
            ctx.error(f"{what} of shape {ps} does not extend the 4-d cache {ns}")
        if dtype_of(past) != dtype_of(new):
            ctx.error(f"{what} has dtype {dtype_of(past)}, the new entries {dtype_of(new)}")
    past_len = shape_of(past_k)[2]
    if shape_of(past_v)[2] != past_len:
        ctx.error(f"past_key has {past_len} positions, past_value {shape_of(past_v)[2]}")
    return (ctx.op("concatenate", [past_k, k], axis=2),
            ctx.op("concatenate", [past_v, v], axis=2), past_len)


def _batch_matmul(ctx, a, b, transpose_b: bool):
    """nn.batch_matmul; float16 operands are summed in float32 and rounded once, as numpy and
    ONNX Runtime do (kiln's float16 batch_matmul rounds every partial sum to float16, which
    is off by several ulp against the suite's 1e-3 tolerance)."""
    half = ctx.dtype(0) == "float16"
    if half:
        a, b = ctx.op("cast", a, dtype="float32"), ctx.op("cast", b, dtype="float32")
    y = ctx.op("nn.batch_matmul", a, b, transpose_a=False, transpose_b=transpose_b)
    return ctx.op("cast", y, dtype="float16") if half else y


def _grouped_matmul(ctx, a, b, hkv: int, transpose_b: bool):
    """a (B, Hq, M, X) times b (B, Hkv, ., .) per head group, as (B, Hq, M, N)."""
    batch, hq, m, x = shape_of(a)
    b_rows, b_cols = shape_of(b)[2:]
    a3 = reshape_to(ctx, a, (batch * hkv, (hq // hkv) * m, x))
    b3 = reshape_to(ctx, b, (batch * hkv, b_rows, b_cols))
    y = _batch_matmul(ctx, a3, b3, transpose_b)
    n = b_rows if transpose_b else b_cols
    return reshape_to(ctx, y, (batch, hq, m, n))


def _qk_scores(ctx, q, k):
    """(Q * sqrt(scale)) @ (K * sqrt(scale))^T: both operands are scaled, as the spec says,
    so that float16 products do not overflow."""
    head_size = shape_of(q)[3]
    scale = float(ctx.attr("scale", 1.0 / math.sqrt(head_size)))
    if scale < 0:
        ctx.error(f"scale must be non-negative (Q and K are scaled by its square root), "
                  f"got {scale}")
    if scale != 1.0:
        root = ctx.scalar(math.sqrt(scale), q)
        q, k = ctx.op("multiply", q, root), ctx.op("multiply", k, root)
    return _grouped_matmul(ctx, q, k, shape_of(k)[1], transpose_b=True)


def _softcap(ctx, scores):
    cap = float(ctx.attr("softcap", 0.0))
    if cap < 0:
        ctx.error(f"softcap must be non-negative, got {cap}")
    if cap == 0:
        return scores
    c = ctx.scalar(cap, scores)
    return ctx.op("multiply", ctx.op("tanh", ctx.op("divide", scores, c)), c)


def _padded_mask(ctx, scores_shape: tuple, dtype: str):
    """attn_mask with its key axis padded to the scores' (False / -inf) and a float mask cast
    to the query's dtype; (value, is_bool), or (None, False) without a mask."""
    if not ctx.has_input(3):
        return None, False
    mask = ctx.input(3)
    shape, total = tuple(shape_of(mask)), scores_shape[-1]
    if not 1 <= len(shape) <= 4 or any(
            m not in (1, s) for m, s in zip(shape[::-1][1:], scores_shape[::-1][1:])):
        ctx.error(f"attn_mask of shape {shape} does not broadcast to the scores' "
                  f"{tuple(scores_shape)}")
    is_bool = ctx.dtype(3) == "bool"
    if not is_bool and ctx.dtype(3) != dtype:
        mask = ctx.op("cast", mask, dtype=dtype)
    short = total - shape[-1]
    if short < 0:
        ctx.error(f"attn_mask covers {shape[-1]} keys, more than the {total} keys attended")
    if short:
        fill = np.zeros(shape[:-1] + (short,), bool) if is_bool else \
            np.full(shape[:-1] + (short,), -np.inf, dtype)
        mask = ctx.op("concatenate", [mask, fill], axis=-1)
    return mask, is_bool


def _query_positions(ctx, sq: int, past_len: int):
    """Absolute position of each query, (Sq, 1) or per batch (B, 1, Sq, 1): the causal
    frontier and the sliding window are measured from it."""
    rows = np.arange(sq, dtype=np.int64).reshape(sq, 1)
    if not ctx.has_input(6):
        return rows + past_len
    # External cache: the query block ends at the last valid key of each batch.
    return ctx.op("add", rows, ctx.op("subtract", _kv_lengths(ctx), np.asarray(sq, np.int64)))


def _kv_lengths(ctx):
    """nonpad_kv_seqlen as int64 of shape (B, 1, 1, 1), to broadcast against (Sq, Skv)."""
    seqlen = ctx.input(6)
    if ctx.dtype(6) != "int64":
        seqlen = ctx.op("cast", seqlen, dtype="int64")
    return reshape_to(ctx, seqlen, (shape_of(seqlen)[0], 1, 1, 1))


def _allowed_keys(ctx, sq: int, total: int, past_len: int):
    """The boolean constraints on which keys a query may attend (causal frontier, sliding
    window, key padding), combined; None when nothing is excluded this way."""
    keys = np.arange(total, dtype=np.int64).reshape(1, total)
    pos = _query_positions(ctx, sq, past_len)
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if left < -1 or right < -1:
        ctx.error(f"window sizes must be -1 or non-negative, got left {left}, right {right}")
    parts = []
    if ctx.attr("is_causal", 0):
        parts.append(ctx.op("less_equal", keys, pos))
    if left >= 0:
        first = ctx.op("subtract", pos, np.asarray(left, np.int64))
        parts.append(ctx.op("greater_equal", keys, first))
    if right >= 0:
        last = ctx.op("add", pos, np.asarray(right, np.int64))
        parts.append(ctx.op("less_equal", keys, last))
    if ctx.has_input(6):
        parts.append(ctx.op("less", keys, _kv_lengths(ctx)))
    allowed = None
    for part in parts:
        allowed = part if allowed is None else ctx.op("logical_and", allowed, part)
    return allowed


def _attention_bias(ctx, scores_shape: tuple, past_len: int, dtype: str):
    """The additive bias of the scores (0 / -inf for excluded keys, plus a float mask), or
    None when every query attends every key."""
    mask, is_bool = _padded_mask(ctx, scores_shape, dtype)
    allowed = _allowed_keys(ctx, *scores_shape[2:], past_len)
    if is_bool:
        allowed = mask if allowed is None else ctx.op("logical_and", allowed, mask)
        mask = None
    if allowed is None:
        return mask
    base = np.zeros((), dtype) if mask is None else mask
    return ctx.op("where", allowed, base, np.asarray(-np.inf, dtype))


def _fully_masked_rows(ctx, bias):
    """Rows whose every key is excluded (their probabilities are 0, not NaN); None when
    statically there are none."""
    if bias is None:
        return None
    row_max = ctx.op("max", bias, axis=-1, keepdims=True)
    rows = ctx.op("equal", row_max, ctx.scalar(-np.inf, bias))
    if isinstance(rows, np.ndarray) and not rows.any():
        return None
    return rows


def _softmax_half(ctx, x):
    """float16 softmax over the last axis with the row sum accumulated in float32 (nn.softmax
    sums in float16); exp and the division round to float16 as the reference does."""
    e = ctx.op("exp", ctx.op("subtract", x, ctx.op("max", x, axis=-1, keepdims=True)))
    total = ctx.op("sum", ctx.op("cast", e, dtype="float32"), axis=-1, keepdims=True)
    return ctx.op("divide", e, ctx.op("cast", total, dtype="float16"))


def _probabilities(ctx, logits, empty_rows, dtype: str):
    """softmax over keys in softmax_precision, back in the query dtype, empty rows zeroed."""
    precision = ctx.attr("softmax_precision", None)
    work = dtype
    if precision is not None:
        if int(precision) not in _SOFTMAX_PRECISIONS:
            ctx.unsupported(f"softmax_precision={precision}")
        work = _SOFTMAX_PRECISIONS[int(precision)]
    if work != dtype:
        logits = ctx.op("cast", logits, dtype=work)
    probs = _softmax_half(ctx, logits) if work == "float16" else \
        ctx.op("nn.softmax", logits, axis=-1)
    if work != dtype:
        probs = ctx.op("cast", probs, dtype=dtype)
    if empty_rows is None:
        return probs
    return ctx.op("where", empty_rows, ctx.scalar(0, probs), probs)


def _merge_heads(ctx, y):
    """(B, H, S, Dv) -> (B, S, H * Dv)."""
    b, h, s, dv = shape_of(y)
    return reshape_to(ctx, ctx.op("transpose", y, axes=(0, 2, 1, 3)), (b, s, h * dv))


@converter("Attention")
def _attention(ctx):
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if mode not in _QK_MODES:
        ctx.error(f"qk_matmul_output_mode must be one of {_QK_MODES}, got {mode}")
    q, k, v, rank = _attention_operands(ctx)
    dtype = ctx.dtype(0)
    k, v, past_len = _with_past(ctx, k, v)
    scores = _qk_scores(ctx, q, k)
    capped = _softcap(ctx, scores)
    bias = _attention_bias(ctx, tuple(shape_of(scores)), past_len, dtype)
    logits = capped if bias is None else ctx.op("add", capped, bias)
    probs = _probabilities(ctx, logits, _fully_masked_rows(ctx, bias), dtype)
    # V may have its own float type (T2); Y has Q's.
    values = v if dtype_of(v) == dtype else ctx.op("cast", v, dtype=dtype)
    y = _grouped_matmul(ctx, probs, values, shape_of(v)[1], transpose_b=False)
    if rank == 3:
        y = _merge_heads(ctx, y)
    # Mode 0 is the raw scaled Q K^T even with softcap, as the spec and its function body
    # say (onnx's Python reference returns the softcapped scores there).
    qk_out = (scores, capped, logits, probs)[mode] if ctx.output_used(3) else None
    return [y, k, v, qk_out]


# -- RotaryEmbedding -------------------------------------------------------------------------

def _rotary_input(ctx):
    """X as 4-d with tokens on axis 1 (3-d input, (B, S, H, D)) or 2 (4-d, (B, H, S, D)),
    and its batch, sequence and head sizes."""
    x, shape = ctx.input(0), tuple(ctx.shape(0))
    if len(shape) == 4:
        return x, shape[0], shape[2], shape[3]
    if len(shape) != 3:
        ctx.error(f"input must be 3-d or 4-d, got shape {shape}")
    heads = int(ctx.attr("num_heads"))
    if heads <= 0 or shape[2] % heads:
        ctx.error(f"hidden size {shape[2]} is not a multiple of num_heads {heads}")
    head_size = shape[2] // heads
    return reshape_to(ctx, x, shape[:2] + (heads, head_size)), shape[0], shape[1], head_size


def _rotary_tables(ctx, batch: int, seq: int, half: int):
    """cos and sin as (B, S, R / 2): looked up by position_ids in a (positions, R / 2) cache,
    or given per token."""
    for i in (1, 2):
        if ctx.dtype(i) != ctx.dtype(0):
            ctx.error(f"input {i} (cos/sin) has dtype {ctx.dtype(i)}, the input {ctx.dtype(0)}")
    tables = [ctx.input(1), ctx.input(2)]
    if not ctx.has_input(3):
        for i, t in zip((1, 2), tables):
            if tuple(shape_of(t)) != (batch, seq, half):
                ctx.error(f"input {i} (cos/sin) has shape {tuple(shape_of(t))}, expected "
                          f"{(batch, seq, half)} without position_ids")
        return tables
    ids = ctx.input(3)
    if tuple(shape_of(ids)) != (batch, seq):
        ctx.error(f"position_ids has shape {tuple(shape_of(ids))}, expected {(batch, seq)}")
    for i, t in zip((1, 2), tables):
        if len(shape_of(t)) != 2 or shape_of(t)[1] != half:
            ctx.error(f"input {i} (cos/sin cache) has shape {tuple(shape_of(t))}, expected "
                      f"(positions, {half})")
    return [ctx.op("take", t, ids, axis=0) for t in tables]


def _last_axis_slice(ctx, x, begin: int, end: int, step: int = 1):
    last = len(shape_of(x)) - 1
    return ctx.op("strided_slice", x, begin=(begin,), end=(end,), strides=(step,), axes=(last,))


def _rotate(ctx, x, cos, sin, interleaved: bool):
    """Rotate the pairs of x's last axis (its two halves, or even/odd entries) by the angles
    whose cos and sin are given."""
    d = shape_of(x)[-1]
    if interleaved:
        x1, x2 = _last_axis_slice(ctx, x, 0, d, 2), _last_axis_slice(ctx, x, 1, d, 2)
    else:
        x1, x2 = _last_axis_slice(ctx, x, 0, d // 2), _last_axis_slice(ctx, x, d // 2, d)
    real = ctx.op("subtract", ctx.op("multiply", cos, x1), ctx.op("multiply", sin, x2))
    imag = ctx.op("add", ctx.op("multiply", sin, x1), ctx.op("multiply", cos, x2))
    if not interleaved:
        return ctx.op("concatenate", [real, imag], axis=-1)
    pairs = [ctx.op("expand_dims", real, axis=-1), ctx.op("expand_dims", imag, axis=-1)]
    return reshape_to(ctx, ctx.op("concatenate", pairs, axis=-1), shape_of(x))


@converter("RotaryEmbedding")
def _rotary_embedding(ctx):
    x, batch, seq, head_size = _rotary_input(ctx)
    dim = int(ctx.attr("rotary_embedding_dim", 0)) or head_size
    if dim % 2 or dim > head_size:
        ctx.error(f"rotary_embedding_dim {dim} must be even and at most the head size "
                  f"{head_size}")
    cos, sin = _rotary_tables(ctx, batch, seq, dim // 2)
    # The (B, S, R / 2) tables broadcast over the heads axis of x.
    per_token = (batch, seq, 1, dim // 2) if ctx.ndim(0) == 3 else (batch, 1, seq, dim // 2)
    cos, sin = reshape_to(ctx, cos, per_token), reshape_to(ctx, sin, per_token)
    interleaved = bool(ctx.attr("interleaved", 0))
    if dim == head_size:
        y = _rotate(ctx, x, cos, sin, interleaved)
    else:
        rotated = _rotate(ctx, _last_axis_slice(ctx, x, 0, dim), cos, sin, interleaved)
        y = ctx.op("concatenate", [rotated, _last_axis_slice(ctx, x, dim, head_size)], axis=-1)
    return reshape_to(ctx, y, ctx.shape(0))


# -- TensorScatter ---------------------------------------------------------------------------

def _scatter_operands(ctx):
    """past_cache, update, the normalized sequence axis and the write mode, checked."""
    past, update = ctx.input(0), ctx.input(1)
    shape, ushape = tuple(shape_of(past)), tuple(shape_of(update))
    rank = len(shape)
    axis = int(ctx.attr("axis", -2))
    if not -rank <= axis < rank or axis % rank == 0:
        ctx.error(f"axis {axis} must name a non-batch axis of the rank-{rank} cache")
    axis %= rank
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        ctx.error(f"mode must be 'linear' or 'circular', got {mode!r}")
    others_differ = any(a != b for k, (a, b) in enumerate(zip(shape, ushape)) if k != axis)
    if len(ushape) != rank or others_differ or ushape[axis] > shape[axis]:
        ctx.error(f"update of shape {ushape} does not fit the cache of shape {shape} "
                  f"along axis {axis}")
    if ctx.dtype(1) != ctx.dtype(0):
        ctx.error(f"update has dtype {ctx.dtype(1)}, the cache {ctx.dtype(0)}")
    return past, update, axis, mode


@converter("TensorScatter")
def _tensor_scatter(ctx):
    past, update, axis, mode = _scatter_operands(ctx)
    shape = tuple(shape_of(past))
    slots, length = shape[axis], shape_of(update)[axis]
    if length == 0:
        return past
    # Cache slot t takes update row t - write_index[b] (mod slots when circular) when that
    # row exists: a gather from the update, selected against the past cache.
    along = (1,) * axis + (slots,) + (1,) * (len(shape) - axis - 1)
    row = np.arange(slots, dtype=np.int64).reshape(along)
    if ctx.has_input(2):
        starts = ctx.input(2)
        if ctx.dtype(2) != "int64":
            starts = ctx.op("cast", starts, dtype="int64")
        starts = reshape_to(ctx, starts, (shape[0],) + (1,) * (len(shape) - 1))
        row = ctx.op("subtract", row, starts)
    if mode == "circular":
        row = ctx.op("floor_mod", row, np.asarray(slots, np.int64))
    zero = np.asarray(0, np.int64)
    inside = ctx.op("logical_and", ctx.op("greater_equal", row, zero),
                    ctx.op("less", row, np.asarray(length, np.int64)))
    index = ctx.op("broadcast_to", ctx.op("where", inside, row, zero), shape=shape)
    written = ctx.op("gather", update, index, axis=axis)
    return ctx.op("where", inside, written, past)


# -- CausalConvWithState ---------------------------------------------------------------------

def _conv_state_operands(ctx):
    """input (B, C, L), weight (C, 1, K) and the carried state (B, C, K - 1), checked."""
    shape, wshape = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(shape) != 3 or len(wshape) != 3 or wshape[:2] != (shape[1], 1):
        ctx.error(f"input {shape} and weight {wshape} are not (B, C, L) and (C, 1, K)")
    for i in (1, 2, 3):
        if ctx.has_input(i) and ctx.dtype(i) != ctx.dtype(0):
            ctx.error(f"input {i} has dtype {ctx.dtype(i)}, the input {ctx.dtype(0)}")
    state_shape = (shape[0], shape[1], wshape[2] - 1)
    if not ctx.has_input(3):
        return ctx.input(0), ctx.input(1), np.zeros(state_shape, ctx.dtype(0))
    if tuple(ctx.shape(3)) != state_shape:
        ctx.error(f"past_state has shape {tuple(ctx.shape(3))}, expected {state_shape}")
    return ctx.input(0), ctx.input(1), ctx.input(3)


def _depthwise_conv(ctx, padded, w):
    """out[b, c, t] = sum_k w[c, 0, k] * padded[b, c, t + k], as a grouped nn.conv2d over
    (B, C, K - 1 + L, 1); float16 sums in float32 and rounds once, as the reference."""
    dtype = dtype_of(padded)
    data, weight = ctx.op("expand_dims", padded, axis=-1), ctx.op("expand_dims", w, axis=-1)
    if dtype == "float16":
        data = ctx.op("cast", data, dtype="float32")
        weight = ctx.op("cast", weight, dtype="float32")
    y = ctx.op("nn.conv2d", data, weight, strides=(1, 1), dilation=(1, 1),
               padding=(0, 0, 0, 0), groups=shape_of(w)[0])
    y = ctx.op("squeeze", y, axis=(3,))
    return ctx.op("cast", y, dtype=dtype) if dtype == "float16" else y


@converter("CausalConvWithState")
def _causal_conv_with_state(ctx):
    activation = ctx.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        ctx.error(f"activation must be 'none', 'silu' or 'swish', got {activation!r}")
    x, w, state = _conv_state_operands(ctx)
    dtype, kernel = ctx.dtype(0), shape_of(w)[2]
    padded = ctx.op("concatenate", [state, x], axis=2) if kernel > 1 else x
    y = _depthwise_conv(ctx, padded, w)
    if ctx.has_input(2):
        y = ctx.op("nn.bias_add", y, ctx.input(2), axis=1)
    if activation != "none" and dtype == "float16":
        # silu in float32 and one rounding, as the reference computes it.
        y = ctx.op("cast", ctx.op("nn.silu", ctx.op("cast", y, dtype="float32")), dtype=dtype)
    elif activation != "none":
        y = ctx.op("nn.silu", y)
    total = shape_of(padded)[2]
    present = ctx.op("strided_slice", padded, begin=(total - kernel + 1,), end=(total,),
                     axes=(2,))
    return [y, present]


# -- LinearAttention -------------------------------------------------------------------------

# update_rule -> (decays the state, corrects with the delta rule)
_LINEAR_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                 "gated_delta": (True, True)}
# The recurrence is unrolled one token at a time; longer prefills would make graphs (and
# compile times) that grow without bound.
_MAX_RECURRENT_STEPS = 64


def _f32(ctx, x):
    return x if dtype_of(x) == "float32" else ctx.op("cast", x, dtype="float32")


def _per_head(ctx, i: int, what: str, hkv: int, widths: tuple):
    """Optional input i (B, T, hkv * w) for a w in widths, as float32 (B, hkv or 1, T, w)."""
    if not ctx.has_input(i):
        return None
    x = ctx.input(i)
    shape = tuple(shape_of(x))
    if len(shape) != 3 or shape[2] not in widths:
        ctx.error(f"{what} has shape {shape}, expected (B, T, one of {sorted(set(widths))})")
    heads = 1 if shape[2] == 1 else hkv
    return _f32(ctx, _split_heads(ctx, x, heads, what))


def _linear_attention_operands(ctx):
    """q, k, v as float32 (B, H, T, D), the per-token exp(decay) and beta (or None), the
    initial state (B * Hkv, dk, dv) and the head counts; the rule's inputs checked."""
    rule = ctx.attr("update_rule", "gated_delta")
    if rule not in _LINEAR_RULES:
        ctx.error(f"update_rule must be one of {sorted(_LINEAR_RULES)}, got {rule!r}")
    hq, hkv = int(ctx.attr("q_num_heads")), int(ctx.attr("kv_num_heads"))
    if hkv <= 0 or hq <= 0 or hq % hkv:
        ctx.error(f"q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    for i, what in enumerate(("query", "key", "value")):
        if ctx.ndim(i) != 3:
            ctx.error(f"{what} must be 3-d (B, T, H * D), got shape {ctx.shape(i)}")
    q = _f32(ctx, _split_heads(ctx, ctx.input(0), hq, "query"))
    k = _f32(ctx, _split_heads(ctx, ctx.input(1), hkv, "key"))
    v = _f32(ctx, _split_heads(ctx, ctx.input(2), hkv, "value"))
    gated, delta = _LINEAR_RULES[rule]
    for i, what, needed in ((4, "decay", gated), (5, "beta", delta)):
        if ctx.has_input(i) != needed:
            ctx.error(f"update_rule {rule!r} {'needs' if needed else 'takes no'} {what} input")
    batch, dk, dv = shape_of(q)[0], shape_of(q)[3], shape_of(v)[3]
    decay = _per_head(ctx, 4, "decay", hkv, (hkv, hkv * dk))
    gate = None if decay is None else ctx.op("exp", decay)
    beta = _per_head(ctx, 5, "beta", hkv, (hkv, 1))
    return q, k, v, gate, beta, _initial_state(ctx, batch, hkv, dk, dv), hq, hkv


def _initial_state(ctx, batch: int, hkv: int, dk: int, dv: int):
    shape = (batch, hkv, dk, dv)
    if not ctx.has_input(3):
        return np.zeros((batch * hkv, dk, dv), np.float32)
    if tuple(ctx.shape(3)) != shape:
        ctx.error(f"past_state has shape {ctx.shape(3)}, expected {shape}")
    return reshape_to(ctx, _f32(ctx, ctx.input(3)), (batch * hkv, dk, dv))


def _token(ctx, x, t: int, rows: int):
    """Token t of a (B, H, T, D) value as (rows, B * H / rows, D): rows = B * Hkv, so query
    heads come grouped by the key/value head they read."""
    b, h, _, d = shape_of(x)
    step = ctx.op("strided_slice", x, begin=(t,), end=(t + 1,), axes=(2,))
    return reshape_to(ctx, step, (rows, (b * h) // rows, d))


def _linear_step(ctx, state, q_t, k_t, v_t, gate_t, beta_t):
    """One token of the recurrence on (B * Hkv, ...) operands: the new state and output."""
    if gate_t is not None:
        state = ctx.op("multiply", state, gate_t)
    if beta_t is not None:
        recalled = ctx.op("nn.batch_matmul", k_t, state, transpose_a=False, transpose_b=False)
        v_t = ctx.op("multiply", beta_t, ctx.op("subtract", v_t, recalled))
    dk = shape_of(k_t)[2]
    outer = ctx.op("multiply", reshape_to(ctx, k_t, (shape_of(k_t)[0], dk, 1)), v_t)
    state = ctx.op("add", state, outer)
    return state, ctx.op("nn.batch_matmul", q_t, state, transpose_a=False, transpose_b=False)


@converter("LinearAttention")
def _linear_attention(ctx):
    q, k, v, gate, beta, state, hq, hkv = _linear_attention_operands(ctx)
    batch, _, steps, dk = shape_of(q)
    dv = shape_of(v)[3]
    if steps > _MAX_RECURRENT_STEPS:
        ctx.unsupported(f"{steps} tokens (the recurrence is unrolled up to "
                        f"{_MAX_RECURRENT_STEPS})")
    rows = batch * hkv
    outs = []
    for t in range(steps):
        gate_t = None if gate is None else _column(ctx, gate, t, batch, hkv)
        beta_t = None if beta is None else _column(ctx, beta, t, batch, hkv)
        state, out = _linear_step(ctx, state, _token(ctx, q, t, rows), _token(ctx, k, t, rows),
                                  _token(ctx, v, t, rows), gate_t, beta_t)
        outs.append(reshape_to(ctx, out, (batch, hq, 1, dv)))
    scale = float(ctx.attr("scale", 0.0)) or 1.0 / math.sqrt(dk)
    y = ctx.op("concatenate", outs, axis=2) if len(outs) > 1 else outs[0]
    y = ctx.op("multiply", _merge_heads(ctx, y), np.asarray(scale, np.float32))
    if ctx.dtype(0) != "float32":
        y = ctx.op("cast", y, dtype=ctx.dtype(0))
    state_dtype = ctx.dtype(3) if ctx.has_input(3) else ctx.dtype(0)
    present = reshape_to(ctx, state, (batch, hkv, dk, dv))
    if state_dtype != "float32":
        present = ctx.op("cast", present, dtype=state_dtype)
    return [y, present]


def _column(ctx, x, t: int, batch: int, hkv: int):
    """Token t of a per-head (B, H or 1, T, w) value as (B * hkv, w, 1): it scales the rows
    of the state (decay) or the whole update (beta, w = 1)."""
    _, heads, _, width = shape_of(x)
    step = ctx.op("strided_slice", x, begin=(t,), end=(t + 1,), axes=(2,))
    if heads != hkv:
        step = ctx.op("broadcast_to", step, shape=(batch, hkv, 1, width))
    return reshape_to(ctx, step, (batch * hkv, width, 1))
