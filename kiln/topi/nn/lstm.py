"""LSTM as topi ops, with PyTorch's conventions (torch.nn.LSTM, batch_first=False):

    gates = x @ W_ih^T + b_ih + h @ W_hh^T + b_hh          (B, 4H), gate order i, f, g, o
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h' = sigmoid(o) * tanh(c')

The two products are dense ops (anchors of their own fused groups); everything after them
is one injective group (`lstm_pointwise`), so a cell compiles to two dense kernels with the
gate arithmetic fused after the second. `lstm` unrolls a static sequence over layers.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((2, 8), name="x"); h = te.placeholder((2, 4), name="h")
    >>> c = te.placeholder((2, 4), name="c")
    >>> w_ih = te.placeholder((16, 8), name="w_ih"); w_hh = te.placeholder((16, 4), name="w_hh")
    >>> h1, c1 = topi.nn.lstm_cell(x, h, c, w_ih, w_hh)
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..broadcast import add
from ..elemwise import check_tensor
from ..transform import stack, take
from ..utils import TopiError, get_const_tuple
from .dense import dense


def lstm_pointwise(gates, c):
    """(h', c') from the gate pre-activations (B, 4H) in order i, f, g, o and the cell state
    (B, H); c' is a stage of its own (an output of the step) that h' reads.

    Example:
        >>> h1, c1 = lstm_pointwise(te.placeholder((2, 16), name="g"), te.placeholder((2, 4), name="c"))
    """
    check_tensor(gates, "lstm_pointwise", "gates")
    check_tensor(c, "lstm_pointwise", "c")
    batch, hidden = get_const_tuple(c.shape)
    if get_const_tuple(gates.shape) != (batch, 4 * hidden):
        raise TopiError(f"lstm_pointwise: gates have shape {get_const_tuple(gates.shape)}, "
                        f"expected {(batch, 4 * hidden)} for a cell state of shape {(batch, hidden)}")

    def gate(b, j, k):
        return gates[b, k * hidden + j]

    c_next = te.compute((batch, hidden), lambda b, j: te.sigmoid(gate(b, j, 1)) * c[b, j]
                        + te.sigmoid(gate(b, j, 0)) * te.tanh(gate(b, j, 2)),
                        name="lstm_c", tag=tags.INJECTIVE)
    h_next = te.compute((batch, hidden), lambda b, j: te.sigmoid(gate(b, j, 3)) * te.tanh(c_next[b, j]),
                        name="lstm_h", tag=tags.INJECTIVE)
    return h_next, c_next


def lstm_cell(x, h, c, w_ih, w_hh, b_ih=None, b_hh=None):
    """One LSTM step: x (B, I), h and c (B, H), w_ih (4H, I), w_hh (4H, H), biases (4H,) or
    None. Returns (h', c').

    Example:
        >>> h1, c1 = lstm_cell(x, h, c, w_ih, w_hh)  # doctest: +SKIP
    """
    for t, what in ((x, "x"), (h, "h"), (c, "c"), (w_ih, "w_ih"), (w_hh, "w_hh")):
        check_tensor(t, "lstm_cell", what)
    hidden = get_const_tuple(h.shape)[-1]
    for w, what in ((w_ih, "w_ih"), (w_hh, "w_hh")):
        if get_const_tuple(w.shape)[0] != 4 * hidden:
            raise TopiError(f"lstm_cell: {what} has {get_const_tuple(w.shape)[0]} rows, expected "
                            f"4 * hidden = {4 * hidden} (gates i, f, g, o)")
    gates = add(dense(x, w_ih, b_ih), dense(h, w_hh, b_hh))
    return lstm_pointwise(gates, c)


def lstm(x, h0, c0, layers):
    """A multi-layer LSTM unrolled over a static sequence, as torch.nn.LSTM: x (T, B, I),
    h0 and c0 (L, B, H), `layers` a list of (w_ih, w_hh, b_ih, b_hh) per layer (biases may
    be None). Returns (output (T, B, H), h_n (L, B, H), c_n (L, B, H)).

    Example:
        >>> out, h_n, c_n = lstm(x, h0, c0, [(w_ih, w_hh, b_ih, b_hh)])  # doctest: +SKIP
    """
    for t, what in ((x, "x"), (h0, "h0"), (c0, "c0")):
        check_tensor(t, "lstm", what)
    if x.ndim != 3 or h0.ndim != 3 or c0.ndim != 3:
        raise TopiError("lstm: x must be (T, B, I) and h0, c0 (L, B, H)")
    steps = get_const_tuple(x.shape)[0]
    if get_const_tuple(h0.shape)[0] != len(layers) or get_const_tuple(c0.shape)[0] != len(layers):
        raise TopiError(f"lstm: h0 / c0 hold {get_const_tuple(h0.shape)[0]} layers, "
                        f"{len(layers)} weight sets given")
    if steps == 0:
        raise TopiError("lstm: the sequence is empty")
    inputs = [take(x, t, axis=0) for t in range(steps)]
    h_last, c_last = [], []
    for layer, weights in enumerate(layers):
        if len(weights) != 4:
            raise TopiError(f"lstm: layer {layer} needs (w_ih, w_hh, b_ih, b_hh), got {len(weights)} items")
        w_ih, w_hh, b_ih, b_hh = weights
        h, c = take(h0, layer, axis=0), take(c0, layer, axis=0)
        outputs = []
        for x_t in inputs:
            h, c = lstm_cell(x_t, h, c, w_ih, w_hh, b_ih, b_hh)
            outputs.append(h)
        inputs = outputs
        h_last.append(h)
        c_last.append(c)
    return stack(inputs, axis=0), stack(h_last, axis=0), stack(c_last, axis=0)
