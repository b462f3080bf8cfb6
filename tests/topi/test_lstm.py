"""LSTM ops against torch.nn.LSTM (gate order i, f, g, o)."""
import numpy as np
import pytest
import torch

import kiln
from kiln import te
from kiln.topi import broadcast as bc
from kiln.topi.nn.dense import dense
from kiln.topi.nn.lstm import lstm, lstm_cell, lstm_pointwise
from kiln.topi.utils import TopiError
from kiln.topi.x86 import schedule_dense
from kiln.topi.x86.injective import schedule_injective

B, I, H = 3, 5, 4


def build_run(s, args, arrays, outs):
    f = kiln.build(s, args, target="llvm")
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results


def torch_lstm(layers, dtype):
    torch.manual_seed(0)
    m = torch.nn.LSTM(I, H, num_layers=layers).to(dtype)
    weights = []
    for layer in range(layers):
        weights.append([getattr(m, f"{n}_l{layer}").detach().numpy()
                        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")])
    return m, weights


@pytest.mark.parametrize("layers,dtype,tol", [(1, "float32", 1e-5), (2, "float32", 1e-5),
                                              (1, "float64", 1e-12)])
def test_unrolled_two_steps_matches_torch(layers, dtype, tol, rng):
    """A 2-step sequence through kiln's unrolled LSTM equals torch.nn.LSTM (output, h_n, c_n)."""
    steps = 2
    m, weights = torch_lstm(layers, torch.float64)
    x_np = rng.standard_normal((steps, B, I)).astype(dtype)
    h0_np = rng.standard_normal((layers, B, H)).astype(dtype)
    c0_np = rng.standard_normal((layers, B, H)).astype(dtype)
    x = te.placeholder((steps, B, I), dtype, name="x")
    h0 = te.placeholder((layers, B, H), dtype, name="h0")
    c0 = te.placeholder((layers, B, H), dtype, name="c0")
    w_ph, w_np = [], []
    for layer, ws in enumerate(weights):
        ph = [te.placeholder(w.shape, dtype, name=f"{n}{layer}")
              for w, n in zip(ws, ("w_ih", "w_hh", "b_ih", "b_hh"))]
        if layer > 0:    # deeper layers read the previous layer's hidden state
            assert ph[0].shape == (4 * H, H)
        w_ph.append(ph)
        w_np.extend(w.astype(dtype) for w in ws)
    out, h_n, c_n = lstm(x, h0, c0, w_ph)
    s = te.create_schedule([out.op, h_n.op, c_n.op])
    args = [x, h0, c0] + [p for ph in w_ph for p in ph] + [out, h_n, c_n]
    got = build_run(s, args, [x_np, h0_np, c0_np] + w_np, [out, h_n, c_n])
    with torch.no_grad():
        state = (torch.from_numpy(h0_np.astype("float64")), torch.from_numpy(c0_np.astype("float64")))
        want_out, (want_h, want_c) = m(torch.from_numpy(x_np.astype("float64")), state)
    for g, w in zip(got, (want_out, want_h, want_c)):
        np.testing.assert_allclose(g, w.numpy(), rtol=tol, atol=tol)


def test_cell_as_fused_groups_with_x86_schedules(rng):
    """How the graph layer compiles a cell: dense(x)+b_ih | dense(h)+b_hh+add | pointwise,
    each group built from its schedule function, results passed between kernels."""
    m, ((w_ih, w_hh, b_ih, b_hh),) = torch_lstm(1, torch.float32)
    x_np = rng.standard_normal((B, I)).astype("float32")
    h_np, c_np = rng.standard_normal((B, H)).astype("float32"), rng.standard_normal((B, H)).astype("float32")
    x, h, c = (te.placeholder(s, name=n) for s, n in (((B, I), "x"), ((B, H), "h"), ((B, H), "c")))
    Wi, Wh = te.placeholder((4 * H, I), name="w_ih"), te.placeholder((4 * H, H), name="w_hh")
    bi, bh = te.placeholder((4 * H,), name="b_ih"), te.placeholder((4 * H,), name="b_hh")
    gi = dense(x, Wi, bi)
    (gi_np,) = build_run(schedule_dense(gi), [x, Wi, bi, gi], [x_np, w_ih, b_ih], [gi])
    gi_in = te.placeholder((B, 4 * H), name="gi")
    gates = bc.add(gi_in, dense(h, Wh, bh))
    (gates_np,) = build_run(schedule_dense(gates), [gi_in, h, Wh, bh, gates],
                            [gi_np, h_np, w_hh, b_hh], [gates])
    g_in = te.placeholder((B, 4 * H), name="gates")
    h1, c1 = lstm_pointwise(g_in, c)
    h1_np, c1_np = build_run(schedule_injective([h1, c1]), [g_in, c, h1, c1], [gates_np, c_np], [h1, c1])
    cell = torch.nn.LSTMCell(I, H)
    with torch.no_grad():
        for name, value in (("weight_ih", w_ih), ("weight_hh", w_hh), ("bias_ih", b_ih), ("bias_hh", b_hh)):
            getattr(cell, name).copy_(torch.from_numpy(value))
        want_h, want_c = cell(torch.from_numpy(x_np), (torch.from_numpy(h_np), torch.from_numpy(c_np)))
    np.testing.assert_allclose(c1_np, want_c.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h1_np, want_h.numpy(), rtol=1e-5, atol=1e-6)


def test_errors():
    x, h, c = (te.placeholder(s, name=n) for s, n in (((B, I), "x"), ((B, H), "h"), ((B, H), "c")))
    with pytest.raises(TopiError, match="w_ih has 12 rows, expected 4 \\* hidden = 16"):
        lstm_cell(x, h, c, te.placeholder((12, I), name="w"), te.placeholder((16, H), name="u"))
    with pytest.raises(TopiError, match="gates have shape"):
        lstm_pointwise(te.placeholder((B, 12), name="g"), c)
    with pytest.raises(TopiError, match="1 weight sets"):
        lstm(te.placeholder((2, B, I), name="xs"), te.placeholder((2, B, H), name="h0"),
             te.placeholder((2, B, H), name="c0"), [(None, None, None, None)])
