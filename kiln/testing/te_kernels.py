"""Small kernels for the auto-scheduler's tests, CPU and GPU: each a function of its sizes
returning (inputs, outputs) tensor expressions; `reference` computes the same with PyTorch and
SIZES bounds the sizes that property tests draw.

Example:
    >>> inputs, outputs = KERNELS["softmax"](rows=4, cols=8)
    >>> [t.name for t in inputs]
    ['X']
"""
from kiln import te, topi


def matmul(n=64, m=48, k=32):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B], [C]


def matmul_bias_relu(n=64, m=48, k=32):
    (A, B), (C,) = matmul(n, m, k)
    bias = te.placeholder((m,), name="bias")
    D = te.compute((n, m), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="D")
    return [A, B, bias], [D]


def softmax(rows=8, cols=32, heads=1):
    """Over the last axis of (heads, rows, cols), or (rows, cols) with one head."""
    X = te.placeholder((rows, cols) if heads == 1 else (heads, rows, cols), name="X")
    return [X], [topi.nn.softmax(X)]


def layer_norm(rows=6, cols=24, batch=1):
    X = te.placeholder((rows, cols) if batch == 1 else (batch, rows, cols), name="X")
    g = te.placeholder((cols,), name="g")
    b = te.placeholder((cols,), name="b")
    return [X, g, b], [topi.nn.layer_norm(X, g, b, axis=-1)]


def max_pool(size=12, channels=4):
    P = te.placeholder((1, channels, size, size), name="P")
    return [P], [topi.nn.max_pool2d(P, (3, 3), (2, 2), padding=1)]


def conv(size=10, cin=4, cout=8):
    P = te.placeholder((1, cin, size, size), name="P")
    W = te.placeholder((cout, cin, 3, 3), name="W")
    return [P, W], [topi.nn.conv2d.conv2d_nchw(P, W, 1, 1, 1)]


def row_sum(rows=4, cols=300):
    V = te.placeholder((rows, cols), name="V")
    r = te.reduce_axis((0, cols), name="r")
    return [V], [te.compute((rows,), lambda i: te.sum(V[i, r], axis=r), name="S")]


def gelu_chain(n=16, m=40):
    X = te.placeholder((n, m), name="X")
    Y = te.compute((n, m), lambda i, j: X[i, j] * 0.5, name="half")
    Z = te.compute((n, m), lambda i, j: Y[i, j] * (1.0 + te.tanh(X[i, j] * 0.79788)),
                   name="gelu")
    return [X], [Z]


def transformed_matmul(n=24, m=20, k=16):
    """A producer combining two elements feeding a matmul: computed once, not inlined."""
    A = te.placeholder((n, k + 1), name="A")
    B = te.placeholder((k, m), name="B")
    T = te.compute((n, k), lambda i, j: A[i, j] + A[i, j + 1], name="T")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(T[i, r] * B[r, j], axis=r), name="C")
    return [A, B], [C]


KERNELS = {"matmul": matmul, "matmul_bias_relu": matmul_bias_relu, "softmax": softmax,
           "layer_norm": layer_norm, "max_pool": max_pool, "conv": conv, "row_sum": row_sum,
           "gelu_chain": gelu_chain, "transformed_matmul": transformed_matmul}


# the size ranges property tests draw from, per kernel
SIZES = {"matmul": dict(n=(1, 40), m=(1, 40), k=(1, 40)),
         "matmul_bias_relu": dict(n=(1, 40), m=(1, 40), k=(1, 40)),
         "softmax": dict(rows=(1, 12), cols=(1, 80), heads=(1, 3)),
         "layer_norm": dict(rows=(1, 12), cols=(2, 80), batch=(1, 3)),
         "max_pool": dict(size=(3, 14), channels=(1, 6)),
         "conv": dict(size=(3, 10), cin=(1, 6), cout=(1, 9)),
         "row_sum": dict(rows=(1, 6), cols=(1, 400)),
         "gelu_chain": dict(n=(1, 20), m=(1, 70)),
         "transformed_matmul": dict(n=(1, 30), m=(1, 30), k=(1, 30))}


def reference(name, arrays):
    """PyTorch's result of kernel `name` on numpy `arrays` (the inputs, in order)."""
    import torch

    t = [torch.from_numpy(a) for a in arrays]
    if name == "matmul":
        return t[0] @ t[1]
    if name == "matmul_bias_relu":
        return torch.relu(t[0] @ t[1] + t[2])
    if name == "softmax":
        return torch.softmax(t[0], -1)
    if name == "layer_norm":
        return torch.nn.functional.layer_norm(t[0], t[0].shape[-1:], t[1], t[2], 1e-5)
    if name == "max_pool":
        return torch.nn.functional.max_pool2d(t[0], 3, 2, 1)
    if name == "conv":
        return torch.nn.functional.conv2d(t[0], t[1], padding=1)
    if name == "row_sum":
        return t[0].sum(-1)
    if name == "transformed_matmul":
        return (t[0][:, :-1] + t[0][:, 1:]) @ t[1]
    if name == "gelu_chain":
        return t[0] * 0.5 * (1.0 + torch.tanh(t[0] * 0.79788))
    raise KeyError(name)
