"""Small kernels for the auto-scheduler's tests: (name, inputs, outputs) of tensor expressions."""
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


def softmax(rows=8, cols=32):
    X = te.placeholder((rows, cols), name="X")
    return [X], [topi.nn.softmax(X)]


def layer_norm(rows=6, cols=24):
    X = te.placeholder((rows, cols), name="X")
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
