"""The kernel cache and the parallel build (kiln.driver.build_kernels, kernel_cache, kernel_key).

Each test uses its own cache directory. What is checked: a second compile (here, and in a new
process) builds nothing and gives the same outputs; a changed lowering (kiln's sources, or the
pipeline registered) rebuilds; a damaged entry is rebuilt; two processes fill one cache at
once; dispatch answers are part of the key; worker and in-process builds give the same bytes.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.autotvm import ApplyFixedConfigs
from kiln.driver import build_kernels as bk
from kiln.driver.kernel_cache import (CacheEntryError, KernelCache, KernelEntry, decode_kernel,
                                      encode_kernel)
from kiln.driver.kernel_key import function_key, is_kiln_code, pipeline_identity
from kiln.driver.pipeline import LoopPass, default_pipeline
from kiln.graph import Function, IRModule, OpPattern, call, register_op, var
from kiln.graph.ops.relations import identity
from kiln.runtime import GraphExecutor

REPO = Path(__file__).resolve().parents[2]
BUILD_PHASES = ("llvm.optimize", "tir.simplify")

# A small model of kiln's own operators: three dense layers, so several kernels, of which
# the two hidden layers are the same kernel.
MODEL = textwrap.dedent("""
    import numpy as np
    from kiln.graph import Function, IRModule, call, var

    def mlp(width=32):
        x = var("x", (4, width))
        ws = [var(f"w{k}", (width, width)) for k in range(3)]
        h = x
        for w in ws[:2]:
            h = call("nn.relu", call("nn.dense", h, w))
        y = call("nn.softmax", call("nn.dense", h, ws[2]), axis=-1)
        mod = IRModule.from_expr(Function([x, *ws], y))
        rng = np.random.default_rng(0)
        params = {f"w{k}": rng.standard_normal((width, width)).astype("float32") / 6
                  for k in range(3)}
        return mod, params, rng.standard_normal((4, width)).astype("float32")

    def reference(params, x):
        h = x
        for k in range(2):
            h = np.maximum(h @ params[f"w{k}"].T, 0)
        z = h @ params["w2"].T
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
""")
_ns: dict = {}
exec(MODEL, _ns)
mlp, reference = _ns["mlp"], _ns["reference"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "kernels"
    monkeypatch.setenv("KILN_KERNEL_CACHE_DIR", str(path))
    return path


def _compile(mod, params, **kw):
    with kiln.compile_timings() as timings:
        lib = kiln.compile(mod, params=params, **kw)
    return lib, {**timings.phases(), **{f"worker:{p}": s
                                        for p, s in timings.worker_phases().items()}}


def _run(lib, x):
    m = GraphExecutor(lib)
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def _built(phases) -> bool:
    """Whether kernels were built (here, or in a worker: "worker:" phases)."""
    return any(p.removeprefix("worker:") in BUILD_PHASES for p in phases)


def _entries(cache_dir, suffix=".kernel"):
    return sorted(cache_dir.rglob(f"*{suffix}"))


def test_second_compile_is_served_from_the_cache(cache_dir):
    mod, params, x = mlp()
    lib1, phases1 = _compile(mod, params)
    lib2, phases2 = _compile(mod, params)
    assert _built(phases1) and not _built(phases2)
    assert not any(p.startswith(("tir.", "llvm.optimize", "schedule")) for p in phases2)
    y1, y2 = _run(lib1, x), _run(lib2, x)
    np.testing.assert_allclose(y1, reference(params, x), rtol=1e-5, atol=1e-6)
    assert np.array_equal(y1, y2)
    assert lib1.module.object_codes == lib2.module.object_codes
    # the two hidden layers are one kernel: 3 distinct kernels, each stored once
    assert len(lib1.prim_funcs) == 3 and len(_entries(cache_dir)) == 3
    assert [str(f) for f in lib1.prim_funcs] == [str(f) for f in lib2.prim_funcs]
    assert all(f.name in str(f) for f in lib2.prim_funcs)      # shown under the model's names


def test_cached_kernels_export_and_load(cache_dir, tmp_path):
    mod, params, x = mlp()
    _compile(mod, params)
    lib, phases = _compile(mod, params)
    assert not _built(phases)
    path = tmp_path / "m.so"
    lib.export_library(str(path))
    loaded = kiln.runtime.load_module(str(path))
    np.testing.assert_array_equal(_run(loaded, x), _run(lib, x))


def _subprocess(code: str, env: dict, kiln_copy: str | None = None):
    env = {**os.environ, **env}
    flags = []
    if kiln_copy:
        # -S: no site hooks, so the editable install of kiln does not shadow the copy
        paths = sysconfig.get_paths()
        env["PYTHONPATH"] = os.pathsep.join([kiln_copy, paths["purelib"], paths["platlib"]])
        flags = ["-S"]
    # cwd: `python -c` puts the working directory first on the path
    return subprocess.Popen([sys.executable, *flags, "-c", code], env=env, cwd=kiln_copy,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


CHILD = MODEL + textwrap.dedent("""
    import hashlib, json, kiln
    from kiln.runtime import GraphExecutor
    mod, params, x = mlp()
    with kiln.compile_timings() as t:
        lib = kiln.compile(mod, params=params)
    m = GraphExecutor(lib); m.set_input("x", x); m.run()
    y = m.get_output(0).numpy()
    phases = sorted(t.phases()) + ["worker:" + p for p in t.worker_phases()]
    print(json.dumps({"phases": phases, "err": float(abs(y - reference(params, x)).max()),
                      "kiln": kiln.__file__,
                      "objects": hashlib.sha256(b"".join(lib.module.object_codes)).hexdigest()}))
""")


def _child_result(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_a_new_process_is_served_from_the_cache(cache_dir):
    env = {"KILN_KERNEL_CACHE_DIR": str(cache_dir)}
    first = _child_result(_subprocess(CHILD, env))
    second = _child_result(_subprocess(CHILD, env))
    assert _built(first["phases"]) and not _built(second["phases"])
    assert first["err"] < 1e-6 and second["err"] < 1e-6


def test_two_processes_compiling_into_one_cache_both_succeed(cache_dir):
    env = {"KILN_KERNEL_CACHE_DIR": str(cache_dir)}
    procs = [_subprocess(CHILD, env) for _ in range(2)]
    for result in [_child_result(p) for p in procs]:
        assert result["err"] < 1e-6
    cache = KernelCache(cache_dir / "kernels-v1")
    entries = _entries(cache_dir)
    assert len(entries) == 3
    for path in entries:                    # complete, valid entries; no temporaries left
        assert cache.get_kernel(path.stem) is not None
    assert not [p for p in cache_dir.rglob(".*") if p.is_file()]


def test_a_change_to_the_lowering_rebuilds(cache_dir, tmp_path):
    """A copy of kiln whose unroll pass unrolls less: its kernels are keyed apart."""
    env = {"KILN_KERNEL_CACHE_DIR": str(cache_dir)}
    original = _child_result(_subprocess(CHILD, env))
    assert _built(original["phases"])
    copy = tmp_path / "src"
    shutil.copytree(REPO / "kiln", copy / "kiln",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    unroll = copy / "kiln" / "tir" / "transform" / "unroll.py"
    text = unroll.read_text()
    assert "MAX_UNROLLED_STATEMENTS = 4096" in text
    unroll.write_text(text.replace("MAX_UNROLLED_STATEMENTS = 4096", "MAX_UNROLLED_STATEMENTS = 1"))
    changed = _child_result(_subprocess(CHILD, {**env, "KILN_BUILD_JOBS": "1"}, str(copy)))
    assert changed["kiln"].startswith(str(copy))
    assert _built(changed["phases"]) and changed["err"] < 1e-6
    assert changed["objects"] != original["objects"]     # it did lower differently
    again = _child_result(_subprocess(CHILD, env))      # the original is still served
    assert not _built(again["phases"])


def test_a_different_lowering_pipeline_has_other_keys(cache_dir):
    mod, params, x = mlp()
    lib1, _ = _compile(mod, params)
    pipeline = default_pipeline()
    assert pipeline_identity(pipeline) is not None
    # the same passes in another order: kiln's own code, so cached, but under other keys
    swapped = pipeline[:1] + [pipeline[2], pipeline[1]] + pipeline[3:]
    assert pipeline_identity(swapped) != pipeline_identity(pipeline)
    fn_json = {"any": "function"}
    assert function_key(fn_json, kiln.target.Target("llvm"), pipeline_identity(swapped)) != \
        function_key(fn_json, kiln.target.Target("llvm"), pipeline_identity(pipeline))
    # a pass that is not kiln's: nothing it touches is cached
    mine = [LoopPass(p.name, (lambda f, fn=p.fn: fn(f))) if p.name == "unroll" else p
            for p in pipeline]
    assert pipeline_identity(mine) is None and not is_kiln_code(mine[3].fn)


def test_a_damaged_entry_is_rebuilt(cache_dir, caplog):
    mod, params, x = mlp()
    lib1, _ = _compile(mod, params)
    entries = _entries(cache_dir)
    entries[0].write_bytes(entries[0].read_bytes()[:-100])            # cut short
    data = bytearray(entries[1].read_bytes())
    data[len(data) // 2] ^= 0xFF                                       # one byte flipped
    entries[1].write_bytes(bytes(data))
    entries[2].write_bytes(b"")                                        # emptied
    index = _entries(cache_dir, ".asked")[0]
    index.write_text("{not json")
    with caplog.at_level("WARNING", logger="kiln"):
        lib2, phases = _compile(mod, params)
    assert _built(phases)
    assert "damaged" in caplog.text
    np.testing.assert_array_equal(_run(lib2, x), _run(lib1, x))
    cache = KernelCache(cache_dir / "kernels-v1")
    assert all(cache.get_kernel(p.stem) is not None for p in _entries(cache_dir))
    lib3, phases3 = _compile(mod, params)                              # repaired
    assert not _built(phases3)


def test_dispatch_answers_are_part_of_the_key(cache_dir):
    from kiln.autotvm import extract_tasks
    mod, params, x = mlp()
    tasks = extract_tasks(mod, params, target="llvm")
    dense = [t for t in tasks if "dense" in t.name][0]
    space = dense.config_space
    _compile(mod, params)
    n = len(_entries(cache_dir))
    with ApplyFixedConfigs({dense.key: space.get(len(space) - 1)}):
        lib, phases = _compile(mod, params)
    assert _built(phases) and len(_entries(cache_dir)) > n
    with ApplyFixedConfigs({dense.key: space.get(len(space) - 1)}) as ctx:
        lib2, phases2 = _compile(mod, params)
    assert not _built(phases2)
    assert dense.key not in ctx.fallbacks            # the replayed query was answered
    np.testing.assert_allclose(_run(lib2, x), reference(params, x), rtol=1e-5, atol=1e-6)


def test_workers_and_this_process_build_the_same_bytes(cache_dir, monkeypatch):
    mod, params, x = mlp()
    monkeypatch.setenv("KILN_BUILD_JOBS", "1")
    monkeypatch.setenv("KILN_KERNEL_CACHE", "0")
    here, phases_here = _compile(mod, params)
    monkeypatch.setenv("KILN_BUILD_JOBS", "2")
    there, phases_there = _compile(mod, params)
    assert not any(p.startswith("worker:") for p in phases_here)
    assert any(p.startswith("worker:") for p in phases_there)
    assert here.module.object_codes == there.module.object_codes
    assert [str(f) for f in here.prim_funcs] == [str(f) for f in there.prim_funcs]
    assert not _entries(cache_dir)                    # the cache was off


def test_a_user_defined_operator_is_never_cached(cache_dir):
    def compute(attrs, ins, out_type):
        (a,) = ins
        return [te.compute(a.shape, lambda *i: a[i] * 3.0, name="triple", tag="elemwise")]

    def schedule(attrs, outs):
        return te.create_schedule([o.op for o in outs])

    if "test_cache.triple" not in kiln.graph.op._REGISTRY:
        register_op("test_cache.triple", type_rel=identity, pattern=OpPattern.ELEMWISE,
                    num_inputs=1, compute=compute, schedules={"cpu": schedule})
    x = var("x", (8,))
    mod = IRModule.from_expr(Function([x], call("test_cache.triple", x)))
    for _ in range(2):
        lib, phases = _compile(mod, {})
        assert _built(phases)
    assert not _entries(cache_dir)
    m = GraphExecutor(lib)
    m.set_input("x", np.arange(8, dtype="float32"))
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), 3 * np.arange(8, dtype="float32"))


# ------------------------------------------------------------------------------ the store
def _entry(name="kernel_ab"):
    return KernelEntry(name, b"\x7fELF" + bytes(60), {name: {"name": name, "params": [],
                                                          "shape_vars": []}},
                       ["kernel_ab: n > 0"], "; ll", "; ll in", False, 8)


def test_entries_round_trip_and_damage_is_named():
    key = "ab" * 32
    data = encode_kernel(key, _entry())
    assert decode_kernel(key, data) == _entry()
    with pytest.raises(CacheEntryError, match="checksum"):
        decode_kernel(key, data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CacheEntryError, match="another key"):
        decode_kernel("cd" * 32, data)
    with pytest.raises(CacheEntryError, match="not a kiln kernel"):
        decode_kernel(key, b"\0" + data)
    with pytest.raises(CacheEntryError, match="truncated"):
        decode_kernel(key, data[:20])


def test_the_cache_is_pruned_least_recently_used_first(tmp_path):
    cache = KernelCache(tmp_path, limit_bytes=10 ** 9)
    keys = [f"{k:02x}" * 32 for k in range(8)]
    for k, key in enumerate(keys):
        cache.put_kernel(key, _entry())
        os.utime(cache._path(key, ".kernel"), (1000 + k, 1000 + k))
    cache.get_kernel(keys[0])                  # used now: the newest
    size = cache.size_bytes()
    cache.limit_bytes = size // 2
    assert cache.prune() > 0
    assert cache.size_bytes() <= size * 3 // 8 + 1
    assert cache.get_kernel(keys[0]) is not None and cache.get_kernel(keys[1]) is None


def test_writes_do_not_rescan_the_cache_but_keep_it_bounded(tmp_path, monkeypatch):
    """The size is scanned once per process and directory and counted up after that (a scan
    per compile made many small compiles quadratic); going over the bound still prunes."""
    scans = []
    entries = KernelCache._entries

    def counted(self):
        scans.append(self.root)
        return entries(self)

    monkeypatch.setattr(KernelCache, "_entries", counted)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for k in range(200):            # a compile makes a KernelCache of its own each time
        KernelCache(tmp_path / "a").put_asked(f"{k:064x}", [])
    assert len(scans) == 1
    small = KernelCache(tmp_path / "b", limit_bytes=10 * len(encode_kernel("ab" * 32, _entry())))
    for k in range(30):
        small.put_kernel(f"{k:064x}", _entry())
    assert small.size_bytes() <= small.limit_bytes
    assert small.get_kernel(f"{29:064x}") is not None and small.get_kernel(f"{0:064x}") is None


def test_cache_off_and_bad_settings(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("KILN_KERNEL_CACHE", "0")
    assert KernelCache.default() is None
    monkeypatch.setenv("KILN_KERNEL_CACHE", "1")
    monkeypatch.setenv("KILN_KERNEL_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("KILN_KERNEL_CACHE_MB", "lots")
    with caplog.at_level("WARNING", logger="kiln"):
        cache = KernelCache.default()
    assert cache is not None and "KILN_KERNEL_CACHE_MB" in caplog.text
    with pytest.raises(ValueError, match="64 hex digits"):
        cache.get_kernel("../../etc/passwd")
    monkeypatch.setenv("KILN_BUILD_JOBS", "many")
    with caplog.at_level("WARNING", logger="kiln"):
        assert bk._jobs() >= 1
    assert "KILN_BUILD_JOBS" in caplog.text
