"""Every translated ATen op, imported from PyTorch, compiled and run, against PyTorch itself.

Each case is a tiny model around one op (or one form of an op); tolerances are those of
conftest.py (float32: 1e-4 x max|reference|; float64: 1e-10; ints and bools exact).
"""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import torch.nn.functional as F
from torch import nn

import kiln.frontend.pytorch  # noqa: F401  (kiln raises the recursion limit on import; do it
#                                 before hypothesis records the limit)
from kiln.testing.models import randomize_norm_stats

torch.manual_seed(0)   # the weights of the modules built below
GEN = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN, dtype=dtype)


def randint(high, *shape):
    return torch.randint(0, high, shape, generator=GEN)


class Fn(nn.Module):
    """A model whose forward is a function of its inputs (and optional submodule `m`)."""

    def __init__(self, fn, m=None):
        super().__init__()
        self.fn, self.m = fn, m

    def forward(self, *xs):
        return self.fn(self, *xs) if self.m is not None else self.fn(*xs)


def case(name, fn, *inputs, m=None):
    return pytest.param(fn, inputs, m, id=name)


X = rand(2, 3, 4)
POS = X.abs() + 0.1
IMG = rand(1, 4, 9, 9)

UNARY = [
    case("relu", torch.relu, X), case("sigmoid", torch.sigmoid, X), case("tanh", torch.tanh, X),
    case("exp", torch.exp, X), case("log", torch.log, POS), case("sqrt", torch.sqrt, POS),
    case("rsqrt", torch.rsqrt, POS), case("abs", torch.abs, X), case("neg", torch.neg, X),
    case("floor", lambda x: torch.floor(x * 3), X), case("ceil", lambda x: torch.ceil(x * 3), X),
    case("round", lambda x: torch.round(x * 3), X), case("erf", torch.erf, X),
    case("silu", F.silu, X), case("hardswish", lambda x: F.hardswish(x * 4), X),
    case("hardsigmoid", lambda x: F.hardsigmoid(x * 4), X),
    case("gelu", F.gelu, X), case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), X),
    case("leaky_relu", lambda x: F.leaky_relu(x, 0.2), X),
    case("hardtanh", lambda x: F.hardtanh(x, -0.5, 0.4), X),
    case("relu6", lambda x: F.relu6(x * 5), X),
    case("clamp", lambda x: torch.clamp(x, -0.3, 0.4), X),
    case("clamp_min", lambda x: torch.clamp(x, min=-0.3), X),
    case("clamp_max", lambda x: torch.clamp(x, max=0.2), X),
    case("elu", lambda x: F.elu(x, 0.7), X), case("softplus", lambda x: F.softplus(x * 8, 2.0), X),
    case("reciprocal", torch.reciprocal, POS), case("square", torch.square, X),
    case("pow_scalar", lambda x: x ** 3, X), case("pow_half", lambda x: x ** 0.5, POS),
    case("logical_not", lambda x: torch.logical_not(x > 0), X),
    case("dropout_eval", lambda x: F.dropout(x, 0.5, training=False), X),
    case("clone", lambda x: x.clone() + 1, X),
]

Y = rand(3, 4)
BINARY = [
    case("add", torch.add, X, Y), case("add_alpha", lambda x, y: torch.add(x, y, alpha=2.5), X, Y),
    case("sub_alpha", lambda x, y: torch.sub(x, y, alpha=0.5), X, Y),
    case("rsub", lambda x: 1.0 - x, X), case("mul_scalar", lambda x: x * 3.0, X),
    case("div", torch.div, X, POS[0]),
    case("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), X, POS[0]),
    case("div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc"), X, POS[0]),
    case("remainder", lambda x, y: torch.remainder(x * 4, y), X, POS[0]),
    case("pow", lambda x, y: torch.pow(x, y), POS, Y),
    case("maximum", torch.maximum, X, Y), case("minimum", torch.minimum, X, Y),
    case("eq", lambda x: torch.floor(x) == 0, X), case("ne", lambda x, y: x != y, X, Y),
    case("lt", torch.lt, X, Y), case("le", lambda x: x <= 0.1, X), case("gt", torch.gt, X, Y),
    case("ge", torch.ge, X, Y),
    case("logical_and", lambda x, y: torch.logical_and(x > 0, y > 0), X, Y),
    case("logical_or", lambda x, y: (x > 0) | (y > 0), X, Y),
    case("where", lambda x, y: torch.where(x > 0, x, y), X, Y),
    case("where_scalar", lambda x: torch.where(x > 0, x, 0.5), X),
    case("masked_fill", lambda x: x.masked_fill(x < 0, -7.0), X),
    case("int_plus_float", lambda i: i + 0.5, randint(9, 2, 3)),
    case("int_times_tensor", lambda i, x: i * x, randint(9, 3, 4), X),
    case("float64_plus_scalar", lambda x: x * 1.1 + 3, rand(3, 4, dtype=torch.float64)),
    case("cast_double", lambda x: x.double() * 3, X),
    case("cast_int", lambda x: (x * 10).to(torch.int32), X),
    case("cast_bool_float", lambda x: (x > 0).float(), X),
    case("type_as", lambda x, y: y.type_as(x) + x, X, randint(5, 3, 4)),
]


NN = [
    case("conv2d", lambda s, x: s.m(x), IMG, m=nn.Conv2d(4, 6, 3)),
    case("conv2d_stride_pad_dil", lambda s, x: s.m(x), IMG,
         m=nn.Conv2d(4, 6, 3, stride=2, padding=(2, 1), dilation=2, bias=False)),
    case("conv2d_groups", lambda s, x: s.m(x), IMG, m=nn.Conv2d(4, 8, 3, groups=2, padding=1)),
    case("conv2d_depthwise", lambda s, x: s.m(x), IMG,
         m=nn.Conv2d(4, 4, 3, groups=4, stride=2, padding=1)),
    case("conv2d_same", lambda s, x: s.m(x), IMG, m=nn.Conv2d(4, 5, (2, 3), padding="same")),
    case("conv1d", lambda s, x: s.m(x), rand(1, 4, 11), m=nn.Conv1d(4, 6, 3, padding=1, stride=2)),
    case("conv1d_same", lambda s, x: s.m(x), rand(1, 4, 11),
         m=nn.Conv1d(4, 6, 4, padding="same", dilation=2)),
    case("conv_transpose2d", lambda s, x: s.m(x), IMG,
         m=nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)),
    case("linear", lambda s, x: s.m(x), rand(5, 7), m=nn.Linear(7, 3)),
    case("linear_3d_nobias", lambda s, x: s.m(x), rand(2, 5, 7), m=nn.Linear(7, 3, bias=False)),
    case("mm", torch.mm, rand(3, 5), rand(5, 2)),
    case("bmm", torch.bmm, rand(2, 3, 5), rand(2, 5, 4)),
    case("addmm", lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0), rand(3, 2), rand(3, 5),
         rand(5, 2)),
    case("matmul_1d_1d", torch.matmul, rand(5), rand(5)),
    case("matmul_1d_2d", torch.matmul, rand(5), rand(5, 3)),
    case("matmul_2d_1d", torch.matmul, rand(3, 5), rand(5)),
    case("matmul_3d_2d", torch.matmul, rand(2, 3, 5), rand(5, 4)),
    case("matmul_2d_3d", torch.matmul, rand(3, 5), rand(2, 5, 4)),
    case("matmul_4d_broadcast", torch.matmul, rand(2, 1, 3, 5), rand(1, 3, 5, 4)),
    case("matmul_transposed", lambda a, b: a @ b.transpose(-1, -2), rand(2, 3, 4, 5),
         rand(2, 3, 6, 5)),
    case("batch_norm", lambda s, x: s.m(x), IMG, m=nn.BatchNorm2d(4)),
    case("layer_norm", lambda s, x: s.m(x), rand(2, 5, 6), m=nn.LayerNorm(6)),
    case("layer_norm_2d_noaffine", lambda s, x: s.m(x), rand(2, 5, 6),
         m=nn.LayerNorm((5, 6), elementwise_affine=False)),
    case("group_norm", lambda s, x: s.m(x), rand(2, 6, 3, 3), m=nn.GroupNorm(3, 6)),
    case("instance_norm", lambda s, x: s.m(x), rand(2, 3, 4, 5), m=nn.InstanceNorm2d(3, affine=True)),
    case("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), IMG),
    case("max_pool2d_ceil_dil", lambda x: F.max_pool2d(x, 2, 2, ceil_mode=True, dilation=2), IMG),
    case("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1), IMG),
    case("avg_pool2d_nopad_ceil", lambda x: F.avg_pool2d(x, 2, 2, 1, ceil_mode=True,
                                                          count_include_pad=False), IMG),
    case("adaptive_avg_global", lambda x: F.adaptive_avg_pool2d(x, 1), IMG),
    case("adaptive_avg_2x3", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), rand(1, 2, 7, 7)),
    case("adaptive_max_2x2", lambda x: F.adaptive_max_pool2d(x, 2), rand(1, 2, 7, 7)),
    case("softmax", lambda x: torch.softmax(x, 1), X),
    case("log_softmax", lambda x: F.log_softmax(x, -1), X),
    case("upsample_nearest", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), IMG),
    case("resize_nearest_size", lambda x: F.interpolate(x, size=(5, 13)), IMG),
    case("upsample_bilinear", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), IMG),
    case("upsample_bilinear_align", lambda x: F.interpolate(x, size=(4, 14), mode="bilinear",
                                                              align_corners=True), IMG),
    case("embedding", lambda s, i: s.m(i), randint(10, 2, 5), m=nn.Embedding(10, 4)),
    case("prelu", lambda s, x: s.m(x), IMG, m=nn.PReLU(4)),
    case("prelu_single", lambda s, x: s.m(x), IMG, m=nn.PReLU()),
    case("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         rand(1, 2, 5, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)),
    case("sdpa_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
         rand(1, 2, 5, 4), rand(1, 2, 6, 4), rand(1, 2, 6, 3), rand(5, 6)),
]

S = rand(2, 3, 4, 5)
SHAPE = [
    case("view", lambda x: x.view(6, 20), S), case("reshape_neg", lambda x: x.reshape(-1, 5), S),
    case("flatten", lambda x: torch.flatten(x, 1), S),
    case("permute", lambda x: x.permute(3, 1, 0, 2) + 1, S),
    case("transpose", lambda x: x.transpose(1, -1) + 1, S), case("t", lambda x: x.t() * 2, Y),
    case("unsqueeze", lambda x: x.unsqueeze(-1) + 1, X),
    case("squeeze", lambda x: x[:, :1].squeeze() * 2, S),
    case("squeeze_dims", lambda x: x[:1, :, :1].squeeze((0, 1, 2)) * 2, S),
    case("expand", lambda x: x[:, :1].expand(2, 3, 4) * 2, X),
    case("repeat", lambda x: x.repeat(2, 1, 3), X),
    case("cat", lambda x, y: torch.cat([x, y, x], 1), X, rand(2, 2, 4)),
    case("cat_promote", lambda x, i: torch.cat([x, i], 0), Y, randint(5, 2, 4)),
    case("stack", lambda x, y: torch.stack([x, y], -1), Y, Y * 2),
    case("split", lambda x: x.split(2, dim=1), rand(2, 5, 3)),
    case("split_sizes", lambda x: x.split([1, 4], dim=1), rand(2, 5, 3)),
    case("chunk", lambda x: [c * 2 for c in x.chunk(3, dim=-1)], rand(2, 3, 7)),
    case("unbind", lambda x: [c * 2 for c in x.unbind(1)], X),
    case("slice_step", lambda x: x[:, 1::2, -3:-1], S),
    case("slice_end", lambda x: x[..., 2:] * 2, S),
    case("narrow", lambda x: x.narrow(2, 1, 2) * 2, S),
    case("select", lambda x: x[:, -1, 2], S),
    case("index_select", lambda x, i: torch.index_select(x, 1, i), X, torch.tensor([2, 0, 2])),
    case("index_tensor", lambda x, i: x[:, i], X, torch.tensor([[1, 0], [2, 2]])),
    case("gather", lambda x, i: torch.gather(x, 2, i), X, randint(4, 2, 3, 6)),
    case("pad_constant", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), IMG),
    case("pad_reflect", lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), IMG),
    case("pad_replicate", lambda x: F.pad(x, (2, 1, 1, 2), mode="replicate"), IMG),
]

REDUCE = [
    case("sum_dims_keep", lambda x: x.sum((0, 2), keepdim=True), S),
    case("sum_all", lambda x: x.sum(), S), case("sum_bool", lambda x: (x > 0).sum(1), X),
    case("mean", lambda x: x.mean(-1), S), case("mean_all", lambda x: x.mean(), S),
    case("prod", lambda x: (x * 0.5 + 1).prod(1), X),
    case("amax", lambda x: x.amax((1, 2)), S), case("amin", lambda x: x.amin(-1, keepdim=True), S),
    case("max_all", lambda x: x.max(), S),
    case("max_dim", lambda x: x.max(1), X), case("min_dim", lambda x: x.min(-1, keepdim=True), X),
    case("argmax", lambda x: x.argmax(1), X), case("argmin", lambda x: x.argmin(-1, True), X),
    case("argmax_flat", lambda x: x.argmax(), X),
    case("var", lambda x: x.var(-1), X),
    case("std_biased", lambda x: x.std((0, 2), unbiased=False), X),
    case("var_mean_custom_norm", lambda x: (x - x.mean(-1, keepdim=True)) /
         torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5), X),
]

CREATE = [
    case("arange", lambda x: x + torch.arange(4), X),
    case("arange_float", lambda x: x * torch.arange(0.5, 2.5, 0.5), X),
    case("zeros_like", lambda x: x + torch.zeros_like(x), X),
    case("ones", lambda x: x + torch.ones(4), X),
    case("full", lambda x: x * torch.full((3, 1), 2.5), X),
    case("scalar_tensor", lambda x: x + torch.tensor(2.0), X),
    case("size_arith", lambda x: x.view(x.shape[0] * x.shape[1], -1), X),
]


@pytest.mark.parametrize("fn,inputs,m", UNARY + BINARY + NN + SHAPE + REDUCE + CREATE)
def test_op_matches_torch(verify, fn, inputs, m):
    model = randomize_norm_stats(Fn(fn, m)).eval()
    verify(model, inputs)


@pytest.mark.parametrize("fn,inputs,m", [
    case("conv_bn_relu", lambda s, x: torch.relu(s.m(x)), rand(1, 3, 8, 8, dtype=torch.float64),
         m=nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4))),
    case("linear_gelu_ln", lambda s, x: s.m(x), rand(2, 4, 8, dtype=torch.float64),
         m=nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8), nn.LayerNorm(8))),
    case("softmax_matmul", lambda a, b: torch.softmax(a @ b.transpose(-1, -2), -1) @ b,
         rand(2, 3, 4, dtype=torch.float64), rand(2, 5, 4, dtype=torch.float64)),
])
def test_float64_stays_float64(verify, fn, inputs, m):
    model = randomize_norm_stats(Fn(fn, m)).double().eval()
    mod, _, _ = verify(model, inputs)
    from kiln.graph import post_order
    dtypes = {e.checked_type.dtype for e in post_order(mod["main"].body)
              if hasattr(e.checked_type, "dtype")}
    assert dtypes == {"float64"}


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_slices_match_torch(verify, data):
    """Python slice semantics (negative, out-of-range and stepped bounds) on every axis."""
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3), label="shape")
    bound = st.one_of(st.none(), st.integers(-7, 7))
    step = st.sampled_from([None, 1, 2, 3])
    index = tuple(slice(data.draw(bound), data.draw(bound), data.draw(step)) for _ in shape)
    x = torch.arange(float(torch.tensor(shape).prod())).reshape(shape)
    if 0 in x[index].shape:
        return    # empty results are not graph values kiln runs
    verify(Fn(lambda t: t[index] * 2).eval(), (x,))
