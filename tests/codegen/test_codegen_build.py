"""Targets, the back-end registry, module sources, build errors and build time."""
import time

import numpy as np
import pytest

from codegen_helpers import TARGETS, elementwise
from kiln.codegen import CodegenError, build_module, register_codegen
from kiln.codegen.llvm.jit import parse_and_verify
from kiln.target import Target


def test_target_parsing():
    t = Target("llvm -mcpu=skylake-avx512 -mattr=+avx512f")
    assert (t.kind, t.mcpu, t.mattr, t.vector_width_bits) == ("llvm", "skylake-avx512", ["+avx512f"], 512)
    assert Target(str(t)) == t and hash(Target(str(t))) == hash(t)
    assert Target("llvm -mcpu=znver5").vector_width_bits == 512
    assert Target("llvm -mcpu=haswell").vector_width_bits == 256
    assert Target("llvm -mcpu=x86-64").vector_width_bits == 128
    assert Target("llvm -mcpu=x86-64 -mattr=+avx2").vector_width_bits == 256
    assert Target("llvm -mcpu=skylake-avx512 -mattr=-avx512f").vector_width_bits == 128
    host = Target("llvm")
    assert host.is_host and host.mcpu and str(host) == "llvm" and Target(host) == host
    assert any(f.startswith("+") for f in host.mattr)
    assert Target("c").kind == "c" and Target("c").vector_width_bits in (128, 256, 512)
    for bad, words in (("vulkan", "unknown target kind 'vulkan'"), ("llvm -foo=1", "unknown target option -foo"),
                       ("cuda -arch=80", "not a CUDA architecture"), ("cuda -mcpu=skylake", "-mcpu for kind 'cuda'"),
                       ("opencl -max_num_threads=0", "positive integer"),
                       ("llvm mcpu", "not of the form"), ("llvm -mattr=avx2", "must start with"),
                       ("", "a target is a string"), ("llvm -opt-level=7", "-opt-level")):
        with pytest.raises(ValueError, match=words):
            Target(bad)
    with pytest.raises(AttributeError):
        host.kind = "c"
    assert (Target("cuda").keys, Target("cuda").arch, Target("cuda -arch=sm_90a").arch) == \
        (("cuda", "gpu"), "sm_80", "sm_90a")
    assert Target("opencl").keys == ("opencl", "gpu") and host.keys[-1] == "cpu"
    assert Target("opencl").host == host and Target("cuda").max_shared_memory_per_block == 49152


@pytest.mark.parametrize("target", TARGETS)
def test_sources_and_entry(target):
    f = elementwise("twice", ["float32"], "float32", lambda x: x * 2.0, 64, 16)
    g = elementwise("thrice", ["float32"], "float32", lambda x: x * 3.0, 64)
    mod = build_module([f, g], target, entry="thrice")
    x, y = np.ones(64, "float32"), np.zeros(64, "float32")
    mod(x, y)
    np.testing.assert_array_equal(y, 3 * x)
    mod["twice"](x, y)
    np.testing.assert_array_equal(y, 2 * x)
    assert mod.function_names() == ["twice", "thrice"]
    assert mod.function_info("twice").params[0].shape == (64,)
    if target == "llvm":
        assert mod.get_source().startswith("; ModuleID") and "<16 x float>" in mod.get_source("ll")
        widest = {512: "zmm", 256: "ymm", 128: "xmm"}[Target("llvm").vector_width_bits]
        assert widest in mod.get_source("asm") and "asm" in mod.source_formats()
    else:
        assert "vector_size(64)" in mod.get_source() and mod.get_source("c") == mod.get_source()


def test_registry_and_input_errors():
    f = elementwise("f", ["float32"], "float32", lambda x: x + 1.0, 8)
    from kiln.codegen import _BUILDERS
    original = _BUILDERS["llvm"]
    calls = []

    @register_codegen("llvm")
    def fake(funcs, target, entry):
        calls.append((funcs, str(target), entry))
        return "built"

    try:
        assert build_module(f, "llvm -mcpu=x86-64") == "built"
    finally:
        register_codegen("llvm", original)
    assert calls == [([f], "llvm -mcpu=x86-64", "f")]
    with pytest.raises(CodegenError, match="repeat"):
        build_module([f, f], "llvm")
    with pytest.raises(CodegenError, match="entry 'g'"):
        build_module([f], "llvm", entry="g")
    with pytest.raises(CodegenError, match="PrimFunc"):
        build_module(["f"], "llvm")
    with pytest.raises(ValueError, match="unknown target kind"):
        build_module([f], "vulkan")


def test_invalid_ir_is_rejected_naming_the_function():
    text = 'define i32 @"broken__impl"(i32 %x) {\nentry:\n  %y = add i32 %x, %undefined\n  ret i32 %y\n}\n'
    with pytest.raises(CodegenError, match="broken"):
        parse_and_verify(text, ["broken"])
    text = 'define i32 @"bad_dom"(i32 %x) {\nentry:\n  ret i32 %y\nnext:\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n'
    with pytest.raises(CodegenError, match="bad_dom"):
        parse_and_verify(text, ["bad_dom"])


def test_llvm_build_time_of_a_small_kernel(capsys):
    f = elementwise("small", ["float32", "float32"], "float32", lambda a, b: a * b + a, 1024, 16)
    build_module([f], "llvm")                     # target machine and JIT set up once
    times = []
    for _ in range(5):
        start = time.perf_counter()
        build_module([f], "llvm")
        times.append(time.perf_counter() - start)
    median = sorted(times)[2]
    with capsys.disabled():
        print(f"\n[kiln.codegen] llvm build of a small vector kernel: {median * 1e3:.1f} ms (median of 5)")
    assert median < 1.0      # a loose sanity bound; the measured figure is printed above
