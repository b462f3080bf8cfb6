"""Reverse-mode AD on the graph IR (kiln.graph.transform.gradient): each operator's rule against
PyTorch autograd, in float64 (relative error <= 1e-10), and whole graphs imported from PyTorch.
The gradients are compiled and run by kiln like any other function."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln.graph import transform as T
from kiln.graph.expr import Function, Tuple, var
from kiln.graph.module import IRModule
from kiln.graph.op import call

RTOL = 1e-10


def _run(fn: Function, inputs: list) -> list:
    lib = kiln.compile(IRModule.from_expr(fn))
    m = kiln.runtime.GraphExecutor(lib)
    for p, value in zip(fn.params, inputs):
        m.set_input(p.name_hint, value)
    m.run()
    return [m.get_output(k).numpy() for k in range(m.get_num_outputs())]


def _close(got, want, what, floor=1e-300):
    """Max error within RTOL of the reference's largest magnitude (at least `floor`: for a
    gradient that is zero in exact arithmetic, the scale of the others)."""
    want = np.asarray(want)
    scale = max(float(np.abs(want).max()), floor)
    err = float(np.abs(got - want).max()) if want.size else 0.0
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert err <= RTOL * scale, f"{what}: max error {err:.3g} > {RTOL} x {scale:.3g}"


def check_gradient(kiln_fn, torch_fn, shapes, positive=False, seed=0, values=None):
    """kiln_fn(*vars) -> expr and torch_fn(*tensors) -> tensor compute the same; their
    gradients with respect to every input, for a random output gradient, must agree. `values`:
    the inputs (default: random, of `shapes`)."""
    rng = np.random.default_rng(seed)
    if values is None:
        values = [rng.uniform(0.5, 2.0, s) if positive else rng.standard_normal(s)
                  for s in shapes]
    shapes = [np.shape(v) for v in values]
    params = [var(f"x{k}", s, "float64") for k, s in enumerate(shapes)]
    fn = Function(params, kiln_fn(*params))
    grad_fn = T.gradient(fn)
    tensors = [torch.tensor(v, requires_grad=True) for v in values]
    out = torch_fn(*tensors)
    grad_out = rng.standard_normal(tuple(out.shape))
    want = torch.autograd.grad(out, tensors, torch.tensor(grad_out))
    got = _run(grad_fn, values + [grad_out])
    _close(got[0], out.detach().numpy(), "output")
    for k, (g, w) in enumerate(zip(got[1:], want)):
        _close(g, w.numpy(), f"gradient of input {k}")


def _c(name, **attrs):
    return lambda *xs: call(name, *xs, **attrs)


UNARY = {
    "negative": (_c("negative"), torch.neg, False),
    "exp": (_c("exp"), torch.exp, False),
    "log": (_c("log"), torch.log, True),
    "sqrt": (_c("sqrt"), torch.sqrt, True),
    "rsqrt": (_c("rsqrt"), torch.rsqrt, True),
    "tanh": (_c("tanh"), torch.tanh, False),
    "sigmoid": (_c("sigmoid"), torch.sigmoid, False),
    "abs": (_c("abs"), torch.abs, False),
    "relu": (_c("nn.relu"), F.relu, False),
    "leaky_relu": (_c("nn.leaky_relu", alpha=0.1), lambda x: F.leaky_relu(x, 0.1), False),
    "clip": (_c("clip", a_min=-0.5, a_max=0.7), lambda x: torch.clamp(x, -0.5, 0.7), False),
    "gelu": (_c("nn.gelu"), F.gelu, False),
    "gelu_tanh": (_c("nn.gelu", approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"),
                  False),
    "silu": (_c("nn.silu"), F.silu, False),
    "softmax": (_c("nn.softmax", axis=-1), lambda x: torch.softmax(x, -1), False),
    "softmax_axis1": (_c("nn.softmax", axis=1), lambda x: torch.softmax(x, 1), False),
    "log_softmax": (_c("nn.log_softmax", axis=1), lambda x: torch.log_softmax(x, 1), False),
    "sum_axis": (_c("sum", axis=1), lambda x: x.sum(1), False),
    "sum_keepdims": (_c("sum", axis=(0, 2), keepdims=True), lambda x: x.sum((0, 2), True),
                     False),
    "sum_all": (_c("sum"), torch.sum, False),
    "mean": (_c("mean", axis=(0, 2)), lambda x: x.mean((0, 2)), False),
    "mean_last": (_c("mean", axis=-1, keepdims=True), lambda x: x.mean(-1, True), False),
    "reshape": (_c("reshape", newshape=(6, 4)), lambda x: x.reshape(6, 4), False),
    "transpose": (_c("transpose", axes=(1, 2, 0)), lambda x: x.permute(1, 2, 0), False),
    "transpose_default": (_c("transpose"), lambda x: x.permute(2, 1, 0), False),
    "expand_dims": (_c("expand_dims", axis=1), lambda x: x.unsqueeze(1), False),
    "broadcast_to": (_c("broadcast_to", shape=(5, 2, 3, 4)), lambda x: x.expand(5, 2, 3, 4),
                     False),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradient_matches_torch(name):
    kiln_fn, torch_fn, positive = UNARY[name]
    check_gradient(kiln_fn, torch_fn, [(2, 3, 4)], positive=positive)


BINARY = {
    "add_broadcast": (_c("add"), torch.add, [(4, 3), (3,)], False),
    "subtract_broadcast": (_c("subtract"), torch.sub, [(4, 3), (4, 1)], False),
    "multiply_broadcast": (_c("multiply"), torch.mul, [(2, 4, 3), (4, 3)], False),
    "divide": (_c("divide"), torch.div, [(4, 3), (4, 3)], True),
    "power": (_c("power"), torch.pow, [(4, 3), (4, 3)], True),
    "maximum": (_c("maximum"), torch.maximum, [(4, 3), (3,)], False),
    "minimum": (_c("minimum"), torch.minimum, [(4, 3), (4, 3)], False),
    "dense": (_c("nn.dense"), F.linear, [(2, 5, 8), (3, 8)], False),
    "matmul": (_c("nn.matmul"), torch.matmul, [(4, 6), (6, 3)], False),
    "matmul_ta": (_c("nn.matmul", transpose_a=True), lambda a, b: a.T @ b, [(6, 4), (6, 3)],
                  False),
    "matmul_tb": (_c("nn.matmul", transpose_b=True), lambda a, b: a @ b.T, [(4, 6), (3, 6)],
                  False),
    "matmul_tatb": (_c("nn.matmul", transpose_a=True, transpose_b=True),
                    lambda a, b: a.T @ b.T, [(6, 4), (3, 6)], False),
    "batch_matmul": (_c("nn.batch_matmul"), torch.bmm, [(2, 4, 6), (2, 6, 3)], False),
    "batch_matmul_tb": (_c("nn.batch_matmul", transpose_b=True),
                        lambda a, b: a @ b.transpose(1, 2), [(2, 4, 6), (2, 3, 6)], False),
    "batch_matmul_ta_broadcast": (_c("nn.batch_matmul", transpose_a=True),
                                  lambda a, b: a.transpose(1, 2) @ b, [(1, 6, 4), (3, 6, 5)],
                                  False),
    "bias_add": (_c("nn.bias_add", axis=1), lambda x, b: x + b.reshape(1, 3, 1),
                 [(2, 3, 4), (3,)], False),
    "concatenate": (lambda a, b: call("concatenate", Tuple([a, b]), axis=1),
                    lambda a, b: torch.cat([a, b], 1), [(2, 3, 4), (2, 5, 4)], False),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradient_matches_torch(name):
    kiln_fn, torch_fn, shapes, positive = BINARY[name]
    check_gradient(kiln_fn, torch_fn, shapes, positive=positive)


def test_where_and_layer_norm_gradients_match_torch():
    check_gradient(lambda a, b: call("where", call("greater", a, b), a, call("multiply", a, b)),
                   lambda a, b: torch.where(a > b, a, a * b), [(4, 3), (4, 3)])
    check_gradient(lambda x, g, b: call("nn.layer_norm", x, g, b, epsilon=1e-5),
                   lambda x, g, b: F.layer_norm(x, (8,), g, b, 1e-5), [(2, 5, 8), (8,), (8,)])


def test_a_shared_input_sums_its_gradients_and_unused_parameters_get_zeros():
    # x is used three times; w is a parameter the output does not depend on.
    check_gradient(lambda x, w: call("multiply", call("tanh", x), call("add", x, x)),
                   lambda x, w: torch.tanh(x) * (x + x) + 0 * w.sum(), [(3, 4), (2,)])


def test_only_the_chosen_parameters_and_missing_rules_are_named():
    x, w = var("x", (4, 8)), var("w", (3, 8))
    fn = Function([x, w], call("nn.dense", x, w))
    g = T.gradient(fn, wrt=["w"])
    assert [tuple(t.shape) for t in g.ret_type.fields[1].fields] == [(3, 8)]
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        T.gradient(fn, wrt=["nope"])
    ids = var("ids", (4,), "int64")
    with pytest.raises(TypeError, match="only floating-point tensors have gradients"):
        T.gradient(Function([x, ids], call("sum", x)), wrt=["ids"])
    bad = Function([x], call("sum", call("nn.dropout", call("tan", call("floor", x)))))
    with pytest.raises(T.MissingGradientError,
                       match=r"no gradient rule for floor \(1x\), nn.dropout \(1x\), tan \(1x\)"):
        T.gradient(bad)
    # An op without a rule is fine where no differentiated parameter lies below it.
    T.gradient(Function([x, w], call("add", call("nn.dense", x, w),
                                     call("sum", call("tan", w)))), wrt=["x"])


CONVS = {   # (strides, padding (t, l, b, r), dilation, groups, x shape, w shape)
    "plain": ((1, 1), (0, 0, 0, 0), (1, 1), 1, (2, 3, 7, 7), (4, 3, 3, 3)),
    "stride2_pad1": ((2, 2), (1, 1, 1, 1), (1, 1), 1, (2, 3, 9, 8), (5, 3, 3, 3)),
    "uneven_pad_stride3": ((3, 2), (2, 0, 1, 1), (1, 1), 1, (1, 2, 10, 9), (3, 2, 3, 2)),
    "dilated": ((1, 1), (2, 2, 2, 2), (2, 2), 1, (1, 2, 8, 8), (3, 2, 3, 3)),
    "grouped": ((2, 2), (1, 1, 1, 1), (1, 1), 2, (2, 4, 8, 8), (6, 2, 3, 3)),
    "depthwise": ((1, 1), (1, 1, 1, 1), (1, 1), 4, (2, 4, 6, 6), (8, 1, 3, 3)),
    "pointwise": ((1, 1), (0, 0, 0, 0), (1, 1), 1, (2, 8, 5, 5), (4, 8, 1, 1)),
    # strided input gradients are computed phase by phase: phases no tap reaches (a 1x1
    # kernel of stride 2), odd sizes (a phase longer than another), kernels larger than
    # the stride, and a strided, dilated one (conv2d_transpose)
    "pointwise_stride2": ((2, 2), (0, 0, 0, 0), (1, 1), 1, (2, 6, 8, 7), (4, 6, 1, 1)),
    "stem_7x7_stride2": ((2, 2), (3, 3, 3, 3), (1, 1), 1, (1, 3, 11, 12), (4, 3, 7, 7)),
    "stride4_kernel2": ((4, 3), (1, 0, 2, 0), (1, 1), 1, (1, 2, 13, 10), (3, 2, 2, 5)),
    "strided_dilated": ((2, 2), (1, 1, 1, 1), (2, 2), 1, (1, 2, 9, 9), (3, 2, 3, 3)),
    # padding wider than the kernel: stride 1 takes the phase path (negative "full" padding);
    # around a tiny input some phases read no row of g at all
    "wide_pad": ((1, 1), (3, 1, 2, 4), (1, 1), 1, (1, 2, 5, 4), (3, 2, 3, 2)),
    "tiny_wide_pad_stride3": ((3, 3), (4, 4, 0, 1), (1, 1), 1, (1, 2, 1, 2), (3, 2, 3, 3)),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_conv2d_gradient_matches_torch(name):
    strides, (pt, pl, pb, pr), dilation, groups, xs, ws = CONVS[name]

    def torch_conv(x, w):
        return F.conv2d(F.pad(x, (pl, pr, pt, pb)), w, stride=strides, dilation=dilation,
                        groups=groups)
    check_gradient(lambda x, w: call("nn.conv2d", x, w, strides=strides,
                                     padding=(pt, pl, pb, pr), dilation=dilation,
                                     groups=groups), torch_conv, [xs, ws])


def test_pooling_batch_norm_pad_and_slice_gradients_match_torch():
    check_gradient(_c("nn.global_avg_pool2d"), lambda x: x.mean((2, 3), keepdim=True),
                   [(2, 3, 5, 4)])
    check_gradient(_c("nn.adaptive_avg_pool2d", output_size=(1, 1)),
                   lambda x: F.adaptive_avg_pool2d(x, 1), [(2, 3, 5, 4)])
    def along(t):
        return t.reshape(1, -1, 1, 1)
    check_gradient(lambda x, g, b, m, v: call("nn.batch_norm", x, g, b, m, v, epsilon=1e-3),
                   lambda x, g, b, m, v: (x - along(m)) / torch.sqrt(along(v) + 1e-3) * along(g)
                   + along(b), [(2, 3, 4, 4), (3,), (3,), (3,), (3,)], positive=True)
    check_gradient(_c("nn.pad", pad_width=((0, 0), (1, 2), (0, 3))),
                   lambda x: F.pad(x, (0, 3, 1, 2)), [(2, 3, 4)])
    check_gradient(_c("strided_slice", begin=(1, -3), end=(3, 100), axes=(1, 2)),
                   lambda x: x[:, 1:3, -3:], [(2, 4, 5)])


def test_unsupported_attributes_are_errors_not_zero_gradients():
    x = var("x", (1, 4, 6, 6))
    with pytest.raises(T.MissingGradientError, match="nn.pad has no gradient rule for "
                                                     "pad_mode reflect"):
        T.gradient(Function([x], call("nn.pad", x, pad_width=((0, 0), (0, 0), (1, 1), (1, 1)),
                                      pad_mode="reflect")))
    with pytest.raises(T.MissingGradientError, match=r"strides \(-1,\) \(a reversed slice\)"):
        T.gradient(Function([x], call("strided_slice", x, begin=(5,), end=(-7,), strides=(-1,),
                                      axes=(2,))))
    w = var("w", (4, 3, 3, 3))
    with pytest.raises(T.MissingGradientError, match="groups 2 .the weight's gradient."):
        T.gradient(Function([x, w], call("nn.conv2d_transpose", x, w, groups=2)))
    with pytest.raises(T.MissingGradientError, match=r"output_padding \(1, 1\) not below"):
        T.gradient(Function([x, w], call("nn.conv2d_transpose", x, w, dilation=(2, 2),
                                         output_padding=(1, 1))))


def _check_model(model, inputs):
    """The gradient of a PyTorch model's graph (imported by kiln) with respect to its float
    inputs and its parameters equals torch.autograd.grad's, for a random output gradient."""
    model = model.double().eval()
    inputs = [i.double() if i.is_floating_point() else i for i in inputs]
    mod, params = kiln.frontend.from_pytorch(model, tuple(inputs))
    main = mod["main"]
    weights = dict(model.named_parameters())
    feeds, queue = [], list(inputs)
    for p in main.params:
        feeds.append(params[p.name_hint] if p.name_hint in params else queue.pop(0).numpy())
    wrt = [p.name_hint for p in main.params
           if p.name_hint in weights or (p.name_hint not in params
                                         and np.dtype(p.checked_type.dtype).kind == "f")]
    grad_fn = T.gradient(main, wrt=wrt)
    leaves = [weights[n] if n in weights else None for n in wrt]
    float_inputs = iter([i.requires_grad_() for i in inputs if i.is_floating_point()])
    leaves = [leaf if leaf is not None else next(float_inputs) for leaf in leaves]
    out = model(*inputs)
    grad_out = np.random.default_rng(1).standard_normal(tuple(out.shape))
    want = torch.autograd.grad(out, leaves, torch.tensor(grad_out))
    got = _run(grad_fn, feeds + [grad_out])
    _close(got[0], out.detach().numpy(), "output")
    assert len(got) == 1 + len(wrt)
    largest = max(float(w.abs().max()) for w in want)
    for name, g, w in zip(wrt, got[1:], want):
        _close(g, w.numpy(), f"gradient of {name}", floor=largest)


def test_a_small_cnn_gradient_matches_torch():
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    from kiln.testing.models import randomize_norm_stats
    _check_model(randomize_norm_stats(model), [torch.randn(2, 3, 8, 8)])


def test_a_transformer_layer_gradient_matches_torch():
    from kiln.testing.models import BertConfig, BertLayer
    torch.manual_seed(0)
    layer = BertLayer(BertConfig(hidden=32, heads=4, intermediate=64))
    mask_bias = torch.zeros(2, 1, 1, 6)
    mask_bias[1, ..., 4:] = -1e4                     # padding in the second sequence
    _check_model(layer, [torch.randn(2, 6, 32), mask_bias])


def test_embedding_and_gather_gradients_add_up_repeated_indices():
    ids = np.array([[1, 4, 1], [0, 4, 4]])              # repeats: their gradients add
    check_gradient(lambda w: call("take", w, call("reshape", kiln.graph.expr.const(ids),
                                                   newshape=(2, 3)), axis=0),
                   lambda w: F.embedding(torch.tensor(ids), w), [(5, 3)])
    where = np.array([[0, 2, 2], [1, 1, 0]])
    check_gradient(lambda x: call("gather", x, kiln.graph.expr.const(where), axis=1),
                   lambda x: torch.gather(x, 1, torch.tensor(where)), [(2, 4)])


POOLS = {   # (kind, pool_size, strides, padding (t, l, b, r), dilation, ceil_mode, x shape)
    "max_3x3_s2_p1": ("max", (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, (2, 3, 9, 9)),
    "max_2x2": ("max", (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, (1, 2, 7, 6)),
    "max_dilated_ceil": ("max", (2, 3), (2, 1), (1, 0, 1, 0), (2, 1), True, (1, 2, 8, 7)),
    "avg_3x3_s2_p1": ("avg", (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, (2, 3, 9, 9)),
    "avg_ceil_include_pad": ("avg_pad", (3, 2), (2, 2), (1, 1, 1, 1), (1, 1), True,
                             (1, 2, 8, 7)),
}


@pytest.mark.parametrize("name", list(POOLS))
def test_pool_gradient_matches_torch(name):
    kind, size, strides, (pt, pl, pb, pr), dilation, ceil, xs = POOLS[name]
    assert (pt, pl) == (pb, pr)          # torch pads symmetrically
    if kind == "max":
        kiln_fn = _c("nn.max_pool2d", pool_size=size, strides=strides, padding=(pt, pl, pb, pr),
                     dilation=dilation, ceil_mode=ceil)

        def torch_fn(x):
            return F.max_pool2d(x, size, strides, (pt, pl), dilation, ceil)
    else:
        include = kind == "avg_pad"
        kiln_fn = _c("nn.avg_pool2d", pool_size=size, strides=strides, padding=(pt, pl, pb, pr),
                     ceil_mode=ceil, count_include_pad=include)

        def torch_fn(x):
            return F.avg_pool2d(x, size, strides, (pt, pl), ceil, include)
    check_gradient(kiln_fn, torch_fn, [xs])


def test_max_pool_ties_send_the_gradient_to_the_first_maximum():
    # windows of small integers hold their maximum several times: PyTorch gives each window's
    # gradient to the first in scan order, and so must kiln (x itself is differentiated)
    ties = np.random.default_rng(2).integers(0, 3, (1, 2, 7, 7)).astype(np.float64)
    check_gradient(_c("nn.max_pool2d", pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1)),
                   lambda x: F.max_pool2d(x, 3, 2, 1), None, values=[ties])
    check_gradient(_c("nn.max_pool2d", pool_size=(2, 3), strides=(1, 2), dilation=(2, 1)),
                   lambda x: F.max_pool2d(x, (2, 3), (1, 2), 0, (2, 1)), None, values=[ties])


def _models(full: bool):
    from kiln.testing.models import bert, example_input, resnet18
    if full:
        return {"resnet18": (resnet18(seed=1), {"image_size": 224}),
                "bert_2_layers": (bert(seed=3, layers=2), {"seq_len": 128})}
    return {"resnet18": (resnet18(seed=1, width=8, num_classes=10), {"image_size": 32}),
            "bert_2_layers": (bert(seed=3, layers=2, hidden=32, heads=4, vocab_size=64,
                                   max_position=32), {"seq_len": 12})}


@pytest.mark.parametrize("name", ["resnet18", "bert_2_layers"])
def test_whole_model_gradient_matches_torch(name):
    from kiln.testing.models import example_input
    model, sizes = _models(False)[name]
    _check_model(model, list(example_input(model, seed=5, dtype=torch.float64, **sizes)))


@pytest.mark.full_model
@pytest.mark.parametrize("name", ["resnet18", "bert_2_layers"])
def test_full_size_model_gradient_matches_torch(name):
    from kiln.testing.models import example_input
    model, sizes = _models(True)[name]
    _check_model(model, list(example_input(model, seed=5, dtype=torch.float64, **sizes)))


# ------------------------------------------------------------------ forward / backward split
def _check_split(fn: Function, feeds: list, grad_out):
    """The split's forward then backward give the joint gradient function's results; no
    expensive op is computed again; the forward saves less than everything the backward
    reads. Returns the split."""
    from kiln.graph.transform.forward_backward import EXPENSIVE
    joint = T.gradient(fn)
    split = T.split_gradient(joint)
    want = _run(joint, feeds + [grad_out])
    forward = _run(split.forward, feeds)
    _close(forward[0], want[0], "output")
    saved = forward[:1] + forward[1:] if split.saves_output else forward[1:]
    grads = _run(split.backward,
                 saved + [feeds[k] for k in split.backward_params] + [grad_out])
    largest = max(float(np.abs(w).max()) for w in want[1:])
    for k, (g, w) in enumerate(zip(grads, want[1:])):
        _close(g, w, f"gradient {k}", floor=largest)
    patterns = {n: kiln.graph.op.get_op(n).pattern for n in split.recomputed}
    assert not [n for n, p in patterns.items() if p in EXPENSIVE], split.recomputed
    assert split.saved_bytes <= split.read_bytes
    return split


def test_split_saves_a_relu_mask_not_the_activations():
    x, w, b = var("x", (4, 8), "float64"), var("w", (3, 8), "float64"), var("b", (3,), "float64")
    fn = Function([x, w, b], call("nn.relu", call("nn.bias_add", call("nn.dense", x, w), b)))
    rng = np.random.default_rng(0)
    feeds = [rng.standard_normal(s) for s in ((4, 8), (3, 8), (3,))]
    split = _check_split(fn, feeds, rng.standard_normal((4, 3)))
    assert [str(t.dtype) for t in split.saved] == ["bool"] and split.saved_bytes == 12


@pytest.mark.parametrize("name", ["resnet18", "bert_2_layers"])
def test_split_of_a_model_gives_its_gradients_and_saves_less(name):
    from kiln.testing.models import example_input
    model, sizes = _models(False)[name]
    model = model.double().eval()
    inputs = example_input(model, seed=5, dtype=torch.float64, **sizes)
    mod, params = kiln.frontend.from_pytorch(model, inputs)
    main = mod["main"]
    queue = [i.numpy() for i in inputs]
    feeds = [params[p.name_hint] if p.name_hint in params else queue.pop(0)
             for p in main.params]
    grad_out = np.random.default_rng(1).standard_normal(tuple(int(d) for d in
                                                              main.ret_type.shape))
    split = _check_split(main, feeds, grad_out)
    assert split.saved_bytes < split.read_bytes



def test_ties_indices_and_multi_axis_norms_follow_pytorch():
    # maximum / minimum split a tie evenly; abs has slope 0 at 0; negative and wrapped
    # embedding indices read (and get the gradient of) the row the forward read
    same = np.array([[0.5, -1.0, 2.0]])
    check_gradient(lambda a: call("maximum", a, kiln.graph.expr.const(same)),
                   lambda a: torch.maximum(a, torch.tensor(same)), [(1, 3)], seed=3)
    check_gradient(lambda a: call("abs", call("multiply", a, kiln.graph.expr.const(
        np.array([[0.0, 1.0, 1.0]])))), lambda a: torch.abs(a * torch.tensor([[0.0, 1, 1]])),
        [(1, 3)])
    ids = np.array([[0, -1, 2], [-5, 4, 1]])
    check_gradient(lambda w: call("take", w, kiln.graph.expr.const(ids), axis=0),
                   lambda w: w[torch.tensor(ids) % 5], [(5, 3)])
    big = np.array([[7, -8, 2]])
    check_gradient(lambda w: call("take", w, kiln.graph.expr.const(big), axis=0, mode="wrap"),
                   lambda w: w[torch.tensor(big) % 5], [(5, 3)])
    check_gradient(lambda w: call("take", w, kiln.graph.expr.const(big), axis=0, mode="clip"),
                   lambda w: w[torch.tensor(big).clamp(-5, 4) % 5], [(5, 3)])
    check_gradient(lambda x, g, b: call("nn.layer_norm", x, g, b, axis=-2, epsilon=1e-5),
                   lambda x, g, b: F.layer_norm(x, (3, 4), g, b, 1e-5),
                   [(2, 3, 4), (3, 4), (3, 4)])


def test_a_split_without_expensive_ops_recomputes_everything():
    x = var("x", (3, 4), "float64")
    split = T.split_gradient(T.gradient(Function([x], call("multiply", x, call("tanh", x)))))
    assert split.saved == () and split.saved_bytes == 0


def test_auxiliary_outputs_pass_the_gradient_and_the_split_by():
    # has_aux: only the first output is differentiated; the others (a batch norm's new running
    # statistics) are returned by the forward after the output, before the saved values; the
    # backward takes only the parameters it reads (not the bias b, nor r, which only aux reads)
    x, w, b, r = (var("x", (4, 3), "float64"), var("w", (2, 3), "float64"),
                  var("b", (2,), "float64"), var("r", (2,), "float64"))
    y = call("tanh", call("nn.bias_add", call("nn.dense", x, w), b))
    aux = call("add", r, call("mean", y, axis=0))
    joint = T.gradient(Function([x, w, b, r], Tuple([y, aux])), wrt=["x", "w", "b"],
                       has_aux=True)
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal(s) for s in ((4, 3), (2, 3), (2,), (2,))]
    grad_out = rng.standard_normal((4, 2))
    want = _run(joint, feeds + [grad_out])       # y, aux, dx, dw, db
    tx, tw, tb = (torch.tensor(f, requires_grad=True) for f in feeds[:3])
    ty = torch.tanh(tx @ tw.T + tb)
    np.testing.assert_allclose(want[0], ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(want[1], feeds[3] + ty.detach().numpy().mean(0), rtol=1e-12)
    for got, ref in zip(want[2:], torch.autograd.grad(ty, (tx, tw, tb), torch.tensor(grad_out))):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-10)
    split = T.split_gradient(joint)
    assert split.num_aux == 1 and split.backward_params == (0, 1)
    forward = _run(split.forward, feeds)
    np.testing.assert_allclose(forward[1], want[1], rtol=1e-12)
    saved = forward[:1] + forward[2:] if split.saves_output else forward[2:]
    grads = _run(split.backward, saved + feeds[:2] + [grad_out])
    for got, ref in zip(grads, want[2:]):
        np.testing.assert_allclose(got, ref, rtol=1e-10)
    with pytest.raises(TypeError, match="with has_aux the function must return a tuple"):
        T.gradient(Function([x, w], call("nn.dense", x, w)), has_aux=True)


def test_more_elementwise_reduction_and_layout_gradients_match_torch():
    from kiln.graph.expr import const

    def three(x):                       # spread inputs past hardswish's and hardsigmoid's knees
        return call("multiply", x, const(np.float64(3.0)))
    for name, fn in (("erf", torch.erf), ("sin", torch.sin), ("cos", torch.cos)):
        check_gradient(_c(name), fn, [(2, 3, 4)])
    check_gradient(lambda x: call("nn.hardswish", three(x)), lambda x: F.hardswish(3 * x),
                   [(4, 25)])
    # (torch's own float64 hardsigmoid backward multiplies by 1/6 rounded to float32: the
    # reference is the op's definition, relu6(x + 3) / 6)
    check_gradient(lambda x: call("nn.hardsigmoid", three(x)),
                   lambda x: torch.clamp(3 * x + 3, 0, 6) / 6, [(4, 25)])
    check_gradient(_c("nn.prelu", axis=1), lambda x, a: F.prelu(x, a), [(2, 3, 4, 5), (3,)])
    check_gradient(_c("nn.prelu", axis=1), lambda x, a: F.prelu(x, a), [(2, 3, 4), (1,)])
    # reductions: ties (small integers, many equal) share the gradient evenly, as
    # torch.amax / amin
    ties = np.random.default_rng(3).integers(0, 3, (3, 6, 2)).astype(np.float64)
    check_gradient(_c("max", axis=(1,)), lambda x: torch.amax(x, 1), None, values=[ties])
    check_gradient(_c("min", axis=(0, 2)), lambda x: torch.amin(x, (0, 2)), None,
                   values=[ties])
    check_gradient(lambda x: call("min", x, axis=(0, 2), keepdims=True),
                   lambda x: torch.amin(x, (0, 2), keepdim=True), [(3, 4, 2)])
    # a part nothing reads gets zeros
    check_gradient(lambda x: call("add", kiln.graph.expr.TupleGetItem(
                       call("split", x, indices_or_sections=(2, 3), axis=1), 0),
                       kiln.graph.expr.TupleGetItem(
                       call("split", x, indices_or_sections=(2, 3), axis=1), 2)),
                   lambda x: x[:, :2] + x[:, 3:5], [(3, 5)])
    check_gradient(_c("tile", reps=(2, 1, 3)), lambda x: x.repeat(2, 1, 3), [(3, 2)])
    # slices with steps
    check_gradient(_c("strided_slice", begin=(1, 0), end=(9, 7), strides=(3, 2)),
                   lambda x: x[1:9:3, 0:7:2], [(10, 7)])
    check_gradient(_c("strided_slice", begin=(-2,), end=(100,), strides=(4,), axes=(1,)),
                   lambda x: x[:, -2::4], [(3, 9)])


@pytest.mark.parametrize("strides,padding,output_padding,dilation", [
    ((1, 1), (0, 0), (0, 0), (1, 1)), ((2, 2), (1, 1), (1, 0), (1, 1)),
    ((2, 3), (0, 2), (0, 1), (2, 1))])
def test_conv2d_transpose_gradient_matches_torch(strides, padding, output_padding, dilation):
    (ph, pw) = padding
    check_gradient(lambda x, w: call("nn.conv2d_transpose", x, w, strides=strides,
                                     padding=(ph, pw, ph, pw), output_padding=output_padding,
                                     dilation=dilation),
                   lambda x, w: F.conv_transpose2d(x, w, stride=strides, padding=padding,
                                                   output_padding=output_padding,
                                                   dilation=dilation),
                   [(2, 3, 5, 4), (3, 4, 3, 2)])
