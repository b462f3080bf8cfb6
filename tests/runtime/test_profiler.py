"""The per-kernel profiler (kiln.runtime.profile), the float-operation counts kiln.compile
records per kernel, and the cached peak FLOP/s (kiln.runtime.peak).

FLOP counts are compared exactly with hand counts (2 per multiply-add, 1 per bias add / relu /
exp / float comparison, 0 for copies, padding and index arithmetic). The profile's sum of kernel
times must be within 10% of the end-to-end latency (the issue's bar); outputs of a profiled
executor match PyTorch at rtol = atol = 1e-4 (float32 convolutions, as in the model tests).
"""
import json
import math

import numpy as np
import pytest
import torch

import kiln
from kiln import te
from kiln.graph import Function, IRModule, call, var
from kiln.graph.transform import PassContext
from kiln.runtime import GraphExecutor, load_module, peak, profile
from kiln.runtime.profiler import SLOW_PEAK_FRACTION, KernelProfile, ProfileReport, random_inputs
from kiln.te.flop import compute_flop, float_flop
from kiln.testing.models import resnet18

TOL = dict(rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ FLOP counts
def test_float_flop_counts_only_float_arithmetic():
    A = te.placeholder((8, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    mm = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * A[j, k], axis=k), name="mm")
    assert float_flop([mm]) == compute_flop([mm]) == 2 * 8 * 8 * 16

    pad = te.compute((10, 16), lambda i, j: te.if_then_else(i < 8, A[i % 8, j], 0.0), name="pad")
    assert float_flop([pad]) == 0                    # a copy with padding does no float math
    assert compute_flop([pad]) == 10 * 16 * 2        # the tuner's count: the call and the compare

    # A guarded choice runs one branch: the costlier one counts, not both.
    pick = te.compute((4, 16), lambda i, j: te.if_then_else(i < 2, A[i, j] * 2.0 + 1.0,
                                                             A[i, j] * 3.0), name="pick")
    assert float_flop([pick]) == 4 * 16 * 2
    assert compute_flop([pick]) == 4 * 16 * (1 + 1 + 2)   # call, compare, the costlier branch

    # a reduction whose terms an index test picks (index_add): how many pass depends on the
    # data, so only the test counts
    idx = te.placeholder((16,), dtype="int64", name="idx")
    picked = te.compute((8, 16), lambda i, j: te.sum(A[k, j], axis=k,
                                                     where=idx[k] == te.cast(i, "int64")),
                        name="picked")
    assert float_flop([picked]) == 0
    assert compute_flop([picked]) == 8 * 16 * 16          # the compare

    I = te.placeholder((32,), dtype="int32", name="I")
    ints = te.compute((32,), lambda i: I[i] * 2 + 1, name="ints")
    assert float_flop([ints]) == 0 and compute_flop([ints]) == 64

    # a quantized product: int8 operands widened to int32, one multiply-add per point
    Q = te.placeholder((8, 16), dtype="uint8", name="Q")
    W = te.placeholder((8, 16), dtype="int8", name="W")
    qmm = te.compute((8, 8), lambda i, j: te.sum(Q[i, k].astype("int32") * W[j, k].astype("int32"),
                                                 axis=k), name="qmm")
    assert float_flop([qmm]) == 2 * 8 * 8 * 16

    act = te.compute((8, 16), lambda i, j: te.exp(te.max(A[i, j], 0.0)), name="act")
    assert float_flop([act]) == 8 * 16 * 2           # max + exp
    leaky = te.compute((8, 16), lambda i, j: te.select(A[i, j] > 0.0, A[i, j], A[i, j] * 0.1),
                       name="leaky")
    assert float_flop([leaky]) == 8 * 16 * 2         # the float compare + the multiply


def test_autotvm_counts_with_the_same_function():
    import kiln.autotvm
    assert kiln.autotvm.compute_flop is compute_flop


def _dense_model(rng, batch=4, features=64):
    """Two identical dense + bias + relu layers (one compiled function, called twice) and a
    final dense."""
    x = var("x", (batch, features))
    ws = [var(f"w{k}", (features, features)) for k in range(3)]
    bs = [var(f"b{k}", (features,)) for k in range(2)]
    h = x
    for w, b in zip(ws, bs):
        h = call("nn.relu", call("nn.bias_add", call("nn.dense", h, w), b))
    y = call("nn.dense", h, ws[2])
    params = {**{f"w{k}": rng.standard_normal((features, features)).astype("float32")
                 for k in range(3)},
              **{f"b{k}": rng.standard_normal(features).astype("float32") for k in range(2)}}
    return IRModule.from_expr(Function([x, *ws, *bs], y)), params


def test_compile_records_each_kernels_float_operations(rng):
    mod, params = _dense_model(rng)
    lib = kiln.compile(mod, params=params)
    flops = lib.graph["flops"]
    dense = 2 * 4 * 64 * 64                      # 2 per multiply-add
    per_call = sorted(flops[k["func"]] for k in lib.graph["kernels"])
    assert per_call == [dense, dense + 2 * 4 * 64, dense + 2 * 4 * 64]   # + bias add + relu
    assert len(flops) == 2                       # the two identical layers share a function

    t = var("t", (3, 5, 7))
    copy = kiln.compile(IRModule.from_expr(Function([t], call("transpose", t, axes=(2, 0, 1)))))
    assert list(copy.graph["flops"].values()) == [0]


@pytest.mark.parametrize("winograd", [False, True])
def test_convolution_counts_its_own_arithmetic(rng, winograd):
    from kiln.target import Target
    from kiln.topi.x86.winograd import winograd_tile

    x, w, b = var("x", (1, 64, 8, 8)), var("w", (64, 64, 3, 3)), var("b", (64,))
    if winograd:
        with Target("llvm"):
            if not winograd_tile((1, 64, 8, 8), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)):
                pytest.skip("kiln uses Winograd on AVX-512 hosts only")
    y = call("nn.relu", call("nn.bias_add", call("nn.conv2d", x, w, padding=(1, 1, 1, 1)), b))
    params = {"w": rng.standard_normal((64, 64, 3, 3)).astype("float32"),
              "b": rng.standard_normal(64).astype("float32")}
    with PassContext(opt_level=3, config={"ConvertConvLayout.winograd": winograd}):
        lib = kiln.compile(IRModule.from_expr(Function([x, w, b], y)), params=params)
    flops = lib.graph["flops"]
    names = [k["func"] for k in lib.graph["kernels"]]
    convs = [n for n in names if "conv2d" in n]
    assert len(convs) == 1 and all(flops[n] == 0 for n in names if "layout_transform" in n)
    direct = 2 * 64 * 64 * 9 * 8 * 8 + 2 * 64 * 8 * 8       # + bias add + relu
    if winograd:
        # Fewer multiplies than the direct convolution: the count is what the kernel computes.
        assert "winograd" in convs[0] and 0 < flops[convs[0]] < direct
    else:
        assert flops[convs[0]] == direct


def test_flop_counts_survive_export_and_load(rng, tmp_path):
    mod, params = _dense_model(rng)
    lib = kiln.compile(mod, params=params)
    lib.export_library(str(tmp_path / "m.so"))
    assert load_module(tmp_path / "m.so").graph["flops"] == lib.graph["flops"]


# ------------------------------------------------------------------------------ the report
def _report(end_to_end=4.8e-3):
    return ProfileReport((KernelProfile("conv", 1, 3e-3, 6 * 10**9),
                          KernelProfile("copy", 2, 1e-3, 0),
                          KernelProfile("old", 1, 0.5e-3, None)),
                         end_to_end, 4000.0, 10, 5, 2)


def test_report_table_text_and_json():
    r = _report()
    text = str(r).splitlines()
    assert text[0].split() == ["kernel", "calls", "time", "(us)", "share", "GFLOPS", "%", "peak"]
    conv, copy, old = (line.split() for line in text[2:5])
    assert conv == ["conv", "1", "3000.0", "66.7%", "2000.00", "50.0%"]
    assert copy == ["copy", "2", "1000.0", "22.2%", "-", "-"]       # no float arithmetic
    assert old == ["old", "1", "500.0", "11.1%", "?", "?"]          # count not recorded
    assert text[6].split() == ["total", "4", "4500.0", "100.0%", "?", "?"]
    assert text[-2] == "peak: 4000.0 GFLOPS (float32, 2 threads)"
    assert text[-1] == "sum of kernel times 4500.0 us vs end-to-end latency 4800.0 us (93.8%)"
    # Models of 10 ms and more are shown in milliseconds.
    slow = str(_report(end_to_end=12e-3)).splitlines()
    assert "time (ms)" in slow[0] and slow[2].split()[2] == "3.000"
    assert slow[-1] == "sum of kernel times 4.500 ms vs end-to-end latency 12.000 ms (37.5%)"
    data = json.loads(r.to_json())
    assert [k["name"] for k in data["kernels"]] == ["conv", "copy", "old"]
    assert data["kernels"][0]["gflops"] == pytest.approx(2000.0)
    assert data["kernels"][0]["peak_fraction"] == pytest.approx(0.5)
    assert data["kernels"][1]["gflops"] is None and data["total"]["flop"] is None
    assert data["coverage"] == pytest.approx(4.5 / 4.8)


def test_slow_compute_bound_kernels_are_marked():
    """Compute bound (>= 10 FLOP/byte) and under 25% of the peak: "slow"; a memory-bound kernel
    as slow as that, or a compute-bound one at 30%, is not."""
    kernels = (KernelProfile("bad_conv", 1, 1e-3, 4 * 10**8, 10**6, (1, 8, 28, 28, 8)),
               KernelProfile("good_conv", 1, 1e-3, 12 * 10**8, 10**6, (1, 8, 28, 28, 8)),
               KernelProfile("add", 1, 1e-3, 10**6, 10**6, (1, 64, 28, 28)))
    r = ProfileReport(kernels, 3e-3, 4000.0, 10, 5, 2)
    assert [k.name for k in r.slow_kernels()] == ["bad_conv"]       # 10%, 400 FLOP/byte
    lines = str(r).splitlines()
    assert lines[2].split()[-2:] == ["10.0%", "slow"] and lines[3].split()[-1] == "30.0%"
    assert lines[-3] == ("slow schedule: bad_conv (output [1, 8, 28, 28, 8]): 10% of peak, "
                         "compute bound (400 FLOP/byte)")
    assert lines[-2].startswith("peak: ")
    data = json.loads(r.to_json())
    assert [k["slow_schedule"] for k in data["kernels"]] == [True, False, False]
    assert data["kernels"][0]["intensity"] == pytest.approx(400.0)


@pytest.mark.timing
def test_a_deliberately_bad_schedule_is_marked_slow_and_the_default_is_not(rng):
    """One convolution compiled twice: with the default schedule, and under a register tile of
    one vector (every multiply-add loads both operands; 2.5-6x slower depending on the
    machine). The peak is put where SLOW_PEAK_FRACTION of it falls at the geometric mean of the
    two measured rates, so the marks depend on the two schedules' order, not on this machine's
    speed or load: the good build sits above the line, the bad one below it."""
    from kiln.autotvm.extract import extract_tasks
    from kiln.autotvm.task import ApplyFixedConfigs
    from kiln.frontend import from_pytorch
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).eval()
    x = torch.randn(1, 64, 28, 28)
    mod, params = from_pytorch(conv, (x,))
    good = kiln.compile(mod, params=params)
    (task,) = extract_tasks(mod, params, opt_level=2)
    space = task.config_space
    worst = {**space.get(0).knobs, "tile_oc": 1, "tile_y": 1, "tile_x": 8}
    with ApplyFixedConfigs({task.key: space.get(space.index_of(worst))}):
        bad = kiln.compile(mod, params=params, opt_level=2)
    # Two alternating rounds, each build's fastest kept: this VM's speed can halve for
    # minutes, and one build measured in a slow spell and the other in a fast one could
    # bring the measured gap under the 2.7x the marks depend on.
    executors = {}
    for name, lib in (("good", good), ("bad", bad)):
        executors[name] = ex = GraphExecutor(lib)
        ex.set_input(ex.get_input_names()[0], x.numpy())
    reports = {}
    for _ in range(2):
        for name, ex in executors.items():
            r = profile(ex, number=5, repeat=3, peak_gflops=1.0)
            if name not in reports or _conv_gflops(r) > _conv_gflops(reports[name]):
                reports[name] = r
    good_rate, bad_rate = _conv_gflops(reports["good"]), _conv_gflops(reports["bad"])
    assert bad_rate * 1.5 < good_rate, (good_rate, bad_rate)
    peak_gflops = (good_rate * bad_rate) ** 0.5 / SLOW_PEAK_FRACTION
    marked = {name: [k.name for k in ProfileReport(r.kernels, r.end_to_end, peak_gflops, 5, 3,
                                                   2).slow_kernels()]
              for name, r in reports.items()}
    assert marked["good"] == []
    assert len(marked["bad"]) == 1 and "conv2d" in marked["bad"][0]


def _conv_gflops(report) -> float:
    (conv,) = [k for k in report.kernels if "conv2d" in k.name]
    return conv.gflops


def test_random_inputs_have_the_models_shapes_and_safe_integers():
    x, ids = var("x", (2, 3)), var("ids", (5,), dtype="int64")
    lib = kiln.compile(IRModule.from_expr(Function([x, ids], call("take", x, ids, axis=1))))
    arrays = random_inputs(lib)
    assert arrays["x"].shape == (2, 3) and arrays["x"].dtype == np.float32
    assert arrays["ids"].dtype == np.int64 and set(np.unique(arrays["ids"])) <= {0, 1}
    m = GraphExecutor(lib)
    m.run(**arrays)                                   # indices in range for any model
    np.testing.assert_array_equal(m.get_output(0).numpy(),
                                  np.take(arrays["x"], arrays["ids"], axis=1))


def test_profile_rejects_bad_arguments(rng):
    mod, params = _dense_model(rng)
    lib = kiln.compile(mod, params=params)
    with pytest.raises(ValueError, match="number must be a positive int, got 0"):
        profile(lib, number=0, peak_gflops=1.0)
    with pytest.raises(TypeError, match="profile takes a GraphExecutor or a compiled model"):
        profile("model.so")
    with pytest.raises(kiln.runtime.ArgumentError, match=r"input\(s\) \['x'\] were never set"):
        profile(GraphExecutor(lib), peak_gflops=1.0)


def test_profile_has_a_row_per_function_with_its_calls(rng):
    mod, params = _dense_model(rng)
    lib = kiln.compile(mod, params=params)
    r = profile(lib, number=5, repeat=3, peak_gflops=1000.0)
    funcs = [k["func"] for k in lib.graph["kernels"]]
    assert sorted((k.name, k.calls) for k in r.kernels) == sorted(
        (f, funcs.count(f)) for f in set(funcs))
    assert sorted(k.calls for k in r.kernels) == [1, 2]
    for k in r.kernels:
        assert k.flop == lib.graph["flops"][k.name] * k.calls and k.seconds > 0
    assert [k.seconds for k in r.kernels] == sorted((k.seconds for k in r.kernels), reverse=True)


# ------------------------------------------------------------------------------ ResNet
def _conv_linear_flop(model, x):
    """2 x multiply-adds of every conv and linear layer, from PyTorch's own output shapes."""
    total = []

    def hook(mod, inp, out):
        if isinstance(mod, torch.nn.Conv2d):
            per_out = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
        else:
            per_out = mod.in_features
        total.append(2 * per_out * out.numel())
    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        y = model(x)
    for h in handles:
        h.remove()
    return sum(total), y.numpy()


@pytest.fixture(scope="module")
def small_resnet(tmp_path_factory):
    model = resnet18(width=16, layers=(1, 1, 1, 1), num_classes=10)
    x = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(0))
    mod, params = kiln.frontend.from_pytorch(model, (x,))
    path = tmp_path_factory.mktemp("profile") / "resnet.so"
    kiln.compile(mod, params=params).export_library(str(path))
    flop, ref = _conv_linear_flop(model, x)
    return load_module(path), x.numpy(), ref, flop


@pytest.mark.timing
def test_resnet_kernel_times_add_up_to_the_end_to_end_latency(small_resnet, tmp_path):
    lib, x, ref, conv_flop = small_resnet
    machine_peak = peak.peak_gflops(cache_file=tmp_path / "peak.json")
    m = GraphExecutor(lib)
    m.set_input(lib.graph["inputs"][0]["name"], x)
    # Batches of 200 runs (~20 ms): on a 2-core VM each batch of plain runs had a fixed cost
    # at its start, and in batches of 20 the kernels covered 0.88 of the run (0.95 with 200).
    # Medians over 15 batch pairs, not 5, and a 96x96 image, not 64x64 (a run of ~0.25 ms, not
    # ~0.1: GraphExecutor.run's own ~2 us is then under 1%): with both smaller, a burst of a
    # neighbour's load on the shared CI machine once left the run at 0.897.
    r = profile(m, number=200, repeat=15, peak_gflops=machine_peak)
    print(r)
    # The bar: the kernels account for the run, within 10%.
    assert 0.9 <= r.coverage <= 1.1, str(r)
    np.testing.assert_allclose(m.get_output(0).numpy(), ref, **TOL)   # the real kernels ran
    funcs = [k["func"] for k in lib.graph["kernels"]]
    assert {k.name for k in r.kernels} == set(funcs)
    assert sum(k.calls for k in r.kernels) == len(funcs)
    assert math.isclose(sum(r.share(k) for k in r.kernels), 1.0)
    # Float work is the convolutions' and the classifier's, plus a little for bias, relu,
    # residual adds and pooling.
    total_flop = sum(k.flop for k in r.kernels)
    assert conv_flop <= total_flop <= 1.15 * conv_flop
    copies = [k for k in r.kernels if k.flop == 0]
    for k in copies:
        row = next(line for line in str(r).splitlines() if line.startswith(k.name + " "))
        assert row.split()[-2:] == ["-", "-"]
    fractions = [r.peak_fraction(k) for k in r.kernels if k.flop]
    assert all(0 < f < 1.5 for f in fractions), fractions   # no kernel beats the machine


# ------------------------------------------------------------------------------ peak FLOP/s
def _cache(path):
    return json.loads(path.read_text())["entries"]


def test_peak_is_measured_once_then_read_from_the_cache(tmp_path):
    path = tmp_path / "peak.json"
    measured = peak.peak_gflops(cache_file=path)
    # Any CPU kiln runs on does more than 1 GFLOP/s; a figure past 100 TFLOP/s means the FMA
    # chains were optimized away.
    assert 1.0 < measured < 1e5
    assert _cache(path)[peak.host_key()]["gflops"] == measured
    entries = _cache(path)
    entries[peak.host_key()]["gflops"] = 1234.5     # a figure no measurement gives
    path.write_text(json.dumps({"format": "kiln-peak", "version": 1, "entries": entries}))
    assert peak.peak_gflops(cache_file=path) == 1234.5
    assert peak.peak_gflops(cache_file=path, refresh=True) != 1234.5


def test_peak_is_measured_again_for_another_key(tmp_path):
    path = tmp_path / "peak.json"
    other = "another cpu|x86_64 features 000000000000|64 threads"
    path.write_text(json.dumps({"format": "kiln-peak", "version": 1,
                                "entries": {other: {"gflops": 1234.5}}}))
    value = peak.peak_gflops(cache_file=path)
    assert value != 1234.5
    assert _cache(path) == {other: {"gflops": 1234.5}, peak.host_key(): _cache(path)[peak.host_key()]}
    assert peak.host_key(3) != peak.host_key(4)      # the thread count is part of the key


@pytest.mark.parametrize("content", [b"\x00\xffnot json", b'{"format": "other"}',
                                     b'{"format": "kiln-peak", "version": 1, "entries": '
                                     b'{"KEY": {"gflops": "fast"}}}'])
def test_an_unreadable_cache_is_measured_over(tmp_path, content):
    path = tmp_path / "peak.json"
    path.write_bytes(content.replace(b"KEY", peak.host_key().encode()))
    value = peak.peak_gflops(cache_file=path)
    assert value > 1.0
    assert _cache(path)[peak.host_key()]["gflops"] == value


def test_an_unwritable_cache_does_not_fail(tmp_path):
    assert peak.peak_gflops(cache_file=tmp_path) > 1.0      # the path is a directory
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []


def test_winograd_counts_fewer_operations_than_the_direct_conv():
    # F(4x4, 3x3) multiplies 36 instead of 144 times per 4x4 tile and channel pair; with the
    # transforms the count sits between a quarter and a half of the direct conv's. (Summing
    # both branches of the output transform's point selection once counted 2.3x the direct.)
    from kiln.autotvm import Task
    from kiln.autotvm.templates.winograd import direct_flop
    args = [[1, 4, 56, 56, 16], [6, 6, 4, 4, 16, 16], [1, 1, 1, 1], "float32"]
    task = Task("conv2d_winograd_nchwc.x86", args, "llvm")
    _, tensors = task.instantiate(task.default_config())
    ratio = float_flop([tensors[-1]]) / direct_flop(*args[:3])
    assert 0.25 < ratio < 0.5, ratio
