"""Recurrent ONNX ops (RNN, GRU, LSTM), unrolled over the static sequence into cell ops.

The input projection of every time step is one nn.dense over the whole sequence; each step
then adds its recurrent nn.dense and applies the gate activations. Directions are unrolled
separately and stacked as ONNX lays out Y (seq, num_directions, batch, hidden).
"""
from __future__ import annotations

import numpy as np

from ..context import shape_of, split_outputs
from ..registry import converter
from .tensor import reshape_to

_ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "nn.relu"}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                 "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _check(op_type):
    def check(attrs, opset):
        for act in attrs.get("activations", []):
            if act not in _ACTIVATIONS:
                return f"activation {act}"
        if attrs.get("input_forget", 0):
            return "input_forget=1"
        return None
    return check


def _direction_slice(ctx, value, d, num_dir):
    """value[d] for a (num_directions, ...) tensor."""
    shape = tuple(shape_of(value))
    if num_dir > 1:
        value = ctx.op("strided_slice", value, begin=(d,), end=(d + 1,), strides=(1,), axes=(0,))
    return reshape_to(ctx, value, shape[1:])


def _rows(ctx, value, lo, hi):
    """value[lo:hi] along axis 0 (gate blocks of a weight or bias)."""
    if (lo, hi) == (0, shape_of(value)[0]):
        return value
    return ctx.op("strided_slice", value, begin=(lo,), end=(hi,), strides=(1,), axes=(0,))


def _gate_parts(ctx, value, count):
    """A (batch, count * hidden) value cut into `count` (batch, hidden) parts."""
    if count == 1:
        return [value]
    return split_outputs(ctx.op("split", value, indices_or_sections=count, axis=1), count)


class _Cell:
    """The settings of one recurrent node, shared by the per-direction unrolling."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.kind = ctx.op_type
        self.hidden = int(ctx.attr("hidden_size", shape_of(ctx.input(2))[-1]))
        self.clip = ctx.attr("clip", None)
        direction = ctx.attr("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            ctx.error(f"unknown direction {direction!r}")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        acts = list(ctx.attr("activations", []))
        per_dir = len(_DEFAULT_ACTS[self.kind])
        if not acts:
            acts = _DEFAULT_ACTS[self.kind] * len(self.directions)
        if len(acts) != per_dir * len(self.directions):
            ctx.error(f"activations {acts} should have {per_dir} entries per direction")
        self.acts = [[_ACTIVATIONS[a] for a in acts[k * per_dir:(k + 1) * per_dir]]
                     for k in range(len(self.directions))]

    def act(self, name, x):
        if self.clip is not None:
            x = self.ctx.op("clip", x, a_min=-float(self.clip), a_max=float(self.clip))
        return self.ctx.op(name, x)


def _recurrent(ctx):
    cell = _Cell(ctx)
    ctx_gates = _GATES[cell.kind]
    h_size = cell.hidden
    x = ctx.input(0)
    layout = int(ctx.attr("layout", 0))
    if layout == 1:
        x = ctx.op("transpose", x, axes=(1, 0, 2))
    seq, batch, _ = shape_of(x)
    if ctx.has_input(4):
        lens = np.asarray(ctx.static(4, "sequence_lens")).reshape(-1)
        if (lens != seq).any():
            ctx.unsupported("sequence_lens shorter than the sequence")
    num_dir = len(cell.directions)
    dtype = ctx.dtype(0)
    ys, last_h, last_c = [], [], []
    for d, direction in enumerate(cell.directions):
        w = _direction_slice(ctx, ctx.input(1), d, num_dir)
        r = _direction_slice(ctx, ctx.input(2), d, num_dir)
        bias = _direction_slice(ctx, ctx.input(3), d, num_dir) if ctx.has_input(3) else None
        wb = _rows(ctx, bias, 0, ctx_gates * h_size) if bias is not None else None
        rb = _rows(ctx, bias, ctx_gates * h_size, 2 * ctx_gates * h_size) \
            if bias is not None else None
        h = _initial(ctx, 5, d, num_dir, batch, h_size, dtype)
        c = _initial(ctx, 6, d, num_dir, batch, h_size, dtype) if cell.kind == "LSTM" else None
        peep = _direction_slice(ctx, ctx.input(7), d, num_dir) \
            if cell.kind == "LSTM" and ctx.has_input(7) else None
        # Input projection of the whole sequence at once.
        xw = ctx.op("nn.dense", x, w)
        if cell.kind != "GRU" and bias is not None:
            xw = ctx.op("nn.bias_add", xw, ctx.op("add", wb, rb), axis=2)
        elif bias is not None:
            xw = ctx.op("nn.bias_add", xw, wb, axis=2)
        steps = split_outputs(ctx.op("split", xw, indices_or_sections=seq, axis=0), seq) \
            if seq > 1 else [xw]
        steps = [reshape_to(ctx, s, (batch, ctx_gates * h_size)) for s in steps]
        order = range(seq) if direction == "forward" else range(seq - 1, -1, -1)
        outs = [None] * seq
        for t in order:
            if cell.kind == "LSTM":
                h, c = _lstm_step(ctx, cell, cell.acts[d], steps[t], h, c, r, peep, h_size)
            elif cell.kind == "GRU":
                h = _gru_step(ctx, cell, cell.acts[d], steps[t], h, r, rb, h_size)
            else:
                h = cell.act(cell.acts[d][0], ctx.op("add", steps[t], ctx.op("nn.dense", h, r)))
            outs[t] = h
        ys.append(_stack(ctx, outs, 0))
        last_h.append(h)
        last_c.append(c)
    y = _stack(ctx, ys, 1)                 # (seq, num_dir, batch, hidden)
    y_h = _stack(ctx, last_h, 0)           # (num_dir, batch, hidden)
    y_c = _stack(ctx, last_c, 0) if cell.kind == "LSTM" else None
    if layout == 1:
        y = ctx.op("transpose", y, axes=(2, 0, 1, 3))
        y_h = ctx.op("transpose", y_h, axes=(1, 0, 2))
        y_c = ctx.op("transpose", y_c, axes=(1, 0, 2)) if y_c is not None else None
    return [y, y_h] + ([y_c] if cell.kind == "LSTM" else [])


def _initial(ctx, i, d, num_dir, batch, hidden, dtype):
    if ctx.has_input(i):
        return _direction_slice(ctx, ctx.input(i), d, num_dir)
    return np.zeros((batch, hidden), dtype=dtype)


def _stack(ctx, parts, axis):
    parts = [ctx.op("expand_dims", p, axis=axis) for p in parts]
    return parts[0] if len(parts) == 1 else ctx.op("concatenate", parts, axis=axis)


def _lstm_step(ctx, cell, acts, xw_t, h, c, r, peep, hidden):
    f_act, g_act, h_act = acts
    gates = ctx.op("add", xw_t, ctx.op("nn.dense", h, r))
    i_pre, o_pre, f_pre, c_pre = _gate_parts(ctx, gates, 4)     # ONNX order: i, o, f, c
    if peep is not None:
        p_i, p_o, p_f = (_rows(ctx, peep, k * hidden, (k + 1) * hidden) for k in range(3))
        i_pre = ctx.op("add", i_pre, ctx.op("multiply", p_i, c))
        f_pre = ctx.op("add", f_pre, ctx.op("multiply", p_f, c))
    i_gate, f_gate = cell.act(f_act, i_pre), cell.act(f_act, f_pre)
    c_new = ctx.op("add", ctx.op("multiply", f_gate, c),
                   ctx.op("multiply", i_gate, cell.act(g_act, c_pre)))
    if peep is not None:
        o_pre = ctx.op("add", o_pre, ctx.op("multiply", p_o, c_new))
    o_gate = cell.act(f_act, o_pre)
    return ctx.op("multiply", o_gate, cell.act(h_act, c_new)), c_new


def _gru_step(ctx, cell, acts, xw_t, h, r, rb, hidden):
    f_act, g_act = acts
    x_z, x_r, x_h = _gate_parts(ctx, xw_t, 3)                     # ONNX order: z, r, h
    if cell.ctx.attr("linear_before_reset", 0):
        hr = ctx.op("nn.dense", h, r)
        if rb is not None:
            hr = ctx.op("nn.bias_add", hr, rb, axis=1)
        h_z, h_r, h_h = _gate_parts(ctx, hr, 3)
        z = cell.act(f_act, ctx.op("add", x_z, h_z))
        rr = cell.act(f_act, ctx.op("add", x_r, h_r))
        cand = cell.act(g_act, ctx.op("add", x_h, ctx.op("multiply", rr, h_h)))
    else:
        hzr = ctx.op("nn.dense", h, _rows(ctx, r, 0, 2 * hidden))
        if rb is not None:
            hzr = ctx.op("nn.bias_add", hzr, _rows(ctx, rb, 0, 2 * hidden), axis=1)
        h_z, h_r = _gate_parts(ctx, hzr, 2)
        z = cell.act(f_act, ctx.op("add", x_z, h_z))
        rr = cell.act(f_act, ctx.op("add", x_r, h_r))
        hh = ctx.op("nn.dense", ctx.op("multiply", rr, h), _rows(ctx, r, 2 * hidden, 3 * hidden))
        if rb is not None:
            hh = ctx.op("nn.bias_add", hh, _rows(ctx, rb, 2 * hidden, 3 * hidden), axis=1)
        cand = cell.act(g_act, ctx.op("add", x_h, hh))
    # (1 - z) * candidate + z * h
    one = ctx.scalar(1, z)
    return ctx.op("add", ctx.op("multiply", ctx.op("subtract", one, z), cand),
                  ctx.op("multiply", z, h))


for _kind in _GATES:
    converter(_kind, check=_check(_kind))(_recurrent)
