"""Tuning on a dask.distributed cluster (kiln.autotvm.cluster), on this machine: a TLS
LocalCluster whose two workers have this CPU as their device, plus one worker started with
dask's own command line (as docs/tune_cluster.md starts them) that declares another device.

What is checked: a model tuned through the cluster measures what a local run measures and,
for the same measurements, chooses the same configs; workers killed mid-batch; a tuning client
killed and resumed; a worker with another device key never measures; a missing device or
scheduler is a ClusterError; simulated devices.
"""
import collections
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed", reason="dask.distributed is not installed: pip install "
                                          "'kiln[cluster]'")
pytest.importorskip("cryptography", reason="TLS certificates need cryptography: pip install "
                                           "'kiln[cluster]'")

import kiln  # noqa: E402
import kiln.autotvm.testing  # noqa: E402,F401  (registers test.matmul)
from kiln import autotvm  # noqa: E402
from kiln.autotvm import cluster as kc  # noqa: E402
from kiln.autotvm.cluster import measure as cluster_measure  # noqa: E402
from kiln.autotvm.cluster.simulate import (SIMULATED_RESOURCE, SimulatedBuilder,  # noqa: E402
                                           SimulatedRunner, table_cost)
from kiln.autotvm.record import best_by_task, load_records  # noqa: E402

pytestmark = pytest.mark.xdist_group("dask_cluster")

OTHER_DEVICE = kc.RESOURCE_PREFIX + "other-device"
HERE = Path(__file__).resolve().parent


def _start_cli_worker(address, certs, resource, log, nthreads=1):
    """A `dask worker` process, as docs/tune_cluster.md starts one."""
    command = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads",
               str(nthreads),
               "--resources", f"{resource}=1", "--no-dashboard",
               "--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"],
               "--tls-key", certs["key"]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def _stop(worker):
    """Stop a `dask worker` process as its user would (SIGTERM), killing it past 30 s."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    import dask
    from distributed import LocalCluster, Security

    # A Nanny sets OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1 ... in its own process (this
    # one) before it spawns a worker: later tests of this process and their subprocesses
    # would run with those. Not here.
    saved_environ = dict(os.environ)
    no_environ = dask.config.set({"distributed.nanny.pre-spawn-environ": {}})
    no_environ.__enter__()

    sec = Security.temporary()
    tmp = tmp_path_factory.mktemp("certs")
    certs = {}
    for name, pem in (("ca", sec.tls_ca_file), ("cert", sec.tls_client_cert),
                      ("key", sec.tls_client_key)):
        certs[name] = str(tmp / f"{name}.pem")
        Path(certs[name]).write_text(pem)
    host = kc.device_resource("llvm")
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, security=sec,
                           protocol="tls://", resources={host: 1}, dashboard_address=None,
                           worker_dashboard_address=None)
    log = open(tmp / "cli_worker.log", "w")
    worker = _start_cli_worker(cluster.scheduler_address, certs, OTHER_DEVICE, log)
    client = kc.connect(cluster)
    try:
        client.wait_for_workers(3, timeout=90)
    except Exception:
        worker.kill()
        raise AssertionError("the dask worker started from the command line did not join: "
                             + (tmp / "cli_worker.log").read_text()[-2000:])
    yield {"cluster": cluster, "security": sec, "certs": certs, "client": client,
           "host": host}
    _stop(worker)
    log.close()
    kc.close_connections()
    cluster.close()
    no_environ.__exit__(None, None, None)
    os.environ.clear()
    os.environ.update(saved_environ)


def _option(env, **runner):
    return autotvm.measure_option(builder=kc.ClusterBuilder(env["cluster"]),
                                  runner=kc.ClusterRunner(env["cluster"], **runner))


def _workers_by_resource(env):
    info = env["client"].scheduler_info(n_workers=-1)["workers"]
    return {addr: set(w.get("resources") or {}) for addr, w in info.items()}


# ------------------------------------------------------------------------------ device keys
def test_device_keys():
    host = kc.device_key("llvm")
    assert host == kc.device_key("c") == kc.device_key(kc.pinned_target("llvm"))
    assert kc.device_key("llvm -mcpu=haswell") == "x86_64-haswell"
    assert kc.device_key("llvm -mcpu=haswell -mattr=+avx2") != kc.device_key(
        "llvm -mcpu=haswell -mattr=-avx2")
    for key in (host, kc.device_key("cuda -arch=sm_90"), kc.device_key("opencl")):
        # dask's --resources "name=1,other=2" splits on "," and "="
        assert key and not set(key) & set(",= "), key
    pinned = kc.pinned_target("llvm")
    assert not pinned.is_host and pinned.mcpu == kiln.target.Target("llvm").mcpu
    assert str(kc.pinned_target("llvm -mcpu=haswell")) == "llvm -mcpu=haswell"


def test_unreachable_scheduler_is_a_cluster_error():
    import socket
    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(kc.ClusterError, match=f"cannot reach the dask scheduler at "
                                              f"tcp://127.0.0.1:{port}"):
        kc.connect(f"tcp://127.0.0.1:{port}", timeout=2)
    with pytest.raises(kc.ClusterError, match="speaks TLS: pass security="):
        kc.connect("tls://127.0.0.1:1")
    with pytest.raises(ValueError, match="scheduler address"):
        kc.connect("127.0.0.1:8786")
    with pytest.raises(kc.ClusterError, match="does not exist"):
        kc.tls_security("/no/such/ca.pem", "/no/cert.pem", "/no/key.pem")


def test_a_client_without_the_clusters_certificate_is_refused(tls_cluster):
    from distributed import Security

    stranger = Security.temporary()           # a certificate from another CA
    with pytest.raises(kc.ClusterError, match="cannot reach the dask scheduler"):
        kc.connect(tls_cluster["cluster"].scheduler_address, security=stranger, timeout=5)


def test_a_device_worker_with_several_threads_is_warned_about(tls_cluster, tmp_path):
    client = tls_cluster["client"]
    resource = kc.RESOURCE_PREFIX + "two-threads"
    with open(tmp_path / "worker.log", "w") as log:
        worker = _start_cli_worker(tls_cluster["cluster"].scheduler_address,
                                   tls_cluster["certs"], resource, log, nthreads=2)
        try:
            client.wait_for_workers(4, timeout=90)
            runner = kc.ClusterRunner(tls_cluster["cluster"])
            with pytest.warns(UserWarning, match="2 threads: builds can run beside"):
                runner.check_device_workers(resource)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                runner.check_device_workers(resource)        # once per worker
        finally:
            _stop(worker)
    deadline = time.monotonic() + 60
    while len(_workers_by_resource(tls_cluster)) > 3:
        assert time.monotonic() < deadline, "the 2-thread worker did not leave"
        time.sleep(0.2)


# ------------------------------------------------------------------------------ a whole model
def test_tls_cluster_tunes_a_model_like_the_local_runner(tls_cluster, tmp_path):
    import torch

    from kiln.frontend import from_pytorch
    from template_checks import TinyConvNet

    torch.manual_seed(0)
    model = TinyConvNet().eval()
    x = torch.randn(1, 3, 12, 12)
    mod, params = from_pytorch(model, (x,))
    common = dict(trials_per_task=6, tuner="random", seed=3, select_top=0, progress=None)

    cluster_log = str(tmp_path / "cluster.jsonl")
    option = _option(tls_cluster)
    tasks = autotvm.tune_model(mod, params, measure_option=option, log_file=cluster_log,
                               **common)
    assert len(tasks) >= 2
    local_log = str(tmp_path / "local.jsonl")
    autotvm.tune_model(mod, params, log_file=local_log, **common)

    def by_config(path):
        out = collections.defaultdict(list)
        for inp, res in load_records(path):
            out[(inp.task_key, inp.config["index"])].append((inp, res))
        return out

    remote, local = by_config(cluster_log), by_config(local_log)
    # The same candidates tried (the seeded random tuner's choices do not depend on the
    # costs), recorded alike (task, config, target, default flag), with the same outcomes.
    # (How many times a config is re-measured at the end depends on the costs.)
    assert sorted(remote) == sorted(local)
    first = {k: v[0] for k, v in remote.items()}
    assert {k: inp for k, (inp, _) in first.items()} == {k: v[0][0] for k, v in local.items()}
    assert all(r.status == "ok" for v in remote.values() for _, r in v)
    assert all(r.status == "ok" for v in local.values() for _, r in v)
    # The cluster measured only on workers with this machine's device.
    with_device = {a for a, r in _workers_by_resource(tls_cluster).items()
                   if tls_cluster["host"] in r}
    assert option.runner.measured_on and set(option.runner.measured_on) <= with_device
    assert sum(option.runner.measured_on.values()) == sum(len(v) for v in remote.values())

    # Same measurements -> same choices: the local log's records with the cluster's results.
    swapped = [(inp, remote[key][k][1]) for key, pairs in local.items()
               for k, (inp, _) in enumerate(pairs) if k < len(remote[key])]
    replayed = [pair for key, pairs in remote.items() for pair in pairs[:len(local[key])]]
    assert best_by_task(swapped) == best_by_task(replayed)

    with autotvm.apply_history_best(cluster_log) as ctx:
        lib = kiln.compile(mod, params=params)
    assert {t.key for t in tasks} <= set(ctx.best) and not ctx.untuned
    ex = kiln.runtime.GraphExecutor(lib)
    ex.set_input(ex.get_input_names()[0], x.numpy())
    ex.run()
    with torch.inference_mode():
        np.testing.assert_allclose(ex.get_output(0).numpy(), model(x).numpy(), rtol=1e-4,
                                   atol=1e-4)


def test_worker_with_another_device_never_measures(tls_cluster, tmp_path):
    option = _option(tls_cluster)
    task = autotvm.create_task("test.matmul", (32, 32, 32, "float32"))
    autotvm.RandomTuner(task, seed=1).tune(12, measure_option=option,
                                           log_file=str(tmp_path / "t.jsonl"))
    others = {a for a, r in _workers_by_resource(tls_cluster).items() if OTHER_DEVICE in r}
    assert len(others) == 1
    assert sum(option.runner.measured_on.values()) == 12
    assert not set(option.runner.measured_on) & others


def test_missing_device_is_a_cluster_error(tls_cluster, monkeypatch):
    monkeypatch.setattr(cluster_measure, "NO_DEVICE_GRACE", 1.0)
    option = _option(tls_cluster)
    # Tuning for a CPU this cluster lacks: built anywhere, measured nowhere.
    task = autotvm.create_task("test.matmul", (16, 16, 16, "float32"),
                               "llvm -mcpu=haswell -mattr=+avx2,+fma")
    builds = option.builder.build(task, [task.config_space.get(0).to_json()])
    assert builds[0].ok
    want = kc.device_resource(task.target)
    with pytest.raises(kc.ClusterError, match=f"no worker .* has device '{want}'") as err:
        option.runner.run(task, builds)
    assert tls_cluster["host"] in str(err.value) and OTHER_DEVICE in str(err.value)


def test_a_job_that_fails_on_a_worker_is_a_cluster_error_not_a_record(tls_cluster, tmp_path):
    """A template the workers cannot import is the cluster's problem: nothing is logged."""
    (tmp_path / "only_here.py").write_text(textwrap.dedent("""
        from kiln import te
        from kiln.autotvm.task import get_config, template

        @template("test.only_here")
        def only_here(n):
            cfg = get_config()
            cfg.define_knob("k", [1, 2])
            A = te.placeholder((n,), "float32", name="A")
            B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
            return te.create_schedule(B.op), [A, B]
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        import only_here  # noqa: F401
        task = autotvm.create_task("test.only_here", (8,))
        log = tmp_path / "t.jsonl"
        with pytest.raises(kc.ClusterError, match="a job failed on a worker .*only_here"):
            autotvm.RandomTuner(task, seed=0).tune(2, measure_option=_option(tls_cluster),
                                                   log_file=str(log))
        assert not log.exists() or log.read_text() == ""
    finally:
        sys.path.remove(str(tmp_path))


# ------------------------------------------------------------------------------ faults
def _kill_one_worker(env, resource, delay):
    """After `delay` seconds, SIGKILL one worker process that has `resource`; returns a
    thread and the list it puts the killed address in."""
    client = env["client"]
    killed = []

    def kill():
        time.sleep(delay)
        pids = client.run(os.getpid)
        victims = [a for a, r in _workers_by_resource(env).items() if resource in r and a in pids]
        os.kill(pids[victims[0]], signal.SIGKILL)
        killed.append(victims[0])

    thread = threading.Thread(target=kill)
    thread.start()
    return thread, killed


def _wait_for_restart(env, killed):
    """Until the scheduler has dropped the killed worker and its nanny's new one is in."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = _workers_by_resource(env)
        if killed not in workers and len(workers) == 3:
            return
        time.sleep(0.2)
    raise AssertionError(f"the killed worker was not replaced: {sorted(workers)}")


def test_worker_killed_mid_batch(tls_cluster):
    task = autotvm.create_task("test.matmul", (48, 48, 48, "float32"))
    configs = [task.config_space.get(i).to_json() for i in range(0, 8000, 1000)]
    # Measurements of about a second each, so that the kill lands mid-measurement.
    option = _option(tls_cluster, number=1, repeat=3, min_repeat_ms=300)
    builds = option.builder.build(task, configs)
    assert [b.status for b in builds] == ["ok"] * len(configs)
    thread, killed = _kill_one_worker(tls_cluster, tls_cluster["host"], 1.5)
    results = option.runner.run(task, builds)
    thread.join()
    assert killed
    # The killed worker's candidates ran again elsewhere (or on the restarted worker).
    assert [r.status for r in results] == ["ok"] * len(configs)
    _wait_for_restart(tls_cluster, killed[0])

    # The same during builds.
    thread, killed = _kill_one_worker(tls_cluster, tls_cluster["host"], 0.5)
    builds = option.builder.build(task, [task.config_space.get(i).to_json()
                                         for i in range(1, 8000, 700)])
    thread.join()
    assert killed
    assert [b.status for b in builds] == ["ok"] * len(builds)
    _wait_for_restart(tls_cluster, killed[0])


def test_faulty_candidates_are_classified_as_locally(tls_cluster):
    """The statuses of tests/autotvm/test_measure.py's fault modes, through the cluster."""
    import fault_templates

    task = autotvm.Task("test.fault", (64,))
    modes = ["none", "abort", "raise", "wrong", "segfault", "bad_split", "hang", "none"]
    option = autotvm.measure_option(
        builder=kc.ClusterBuilder(tls_cluster["cluster"], timeout=3.0),
        runner=kc.ClusterRunner(tls_cluster["cluster"], check_correctness=True, number=1,
                                repeat=1))
    with autotvm.create_measure_batch(task, option) as measure:
        results = measure([task.config_space.get(fault_templates.MODES.index(m))
                           for m in modes])
    assert [r.status for r in results] == ["ok", "compile_error", "compile_error",
                                           "wrong_answer", "runtime_error", "compile_error",
                                           "timeout", "ok"]
    by_mode = dict(zip(modes, results))
    assert "crashed the builder" in by_mode["abort"].message
    assert "this candidate's template raises" in by_mode["raise"].message
    assert "differs from the reference" in by_mode["wrong"].message
    assert "SIGSEGV" in by_mode["segfault"].message
    assert "timeout of 3 s" in by_mode["hang"].message


def test_lost_jobs_are_submitted_again(tls_cluster):
    """A job the scheduler drops (here: cancelled by another client, as after a scheduler
    restart or a cut connection) is submitted again, and the batch completes."""
    from distributed import Client, Future

    task = autotvm.create_task("test.matmul", (40, 40, 40, "float32"))
    option = _option(tls_cluster, number=1, repeat=3, min_repeat_ms=300)
    builds = option.builder.build(task, [task.config_space.get(i).to_json()
                                         for i in range(5, 4000, 500)])
    assert all(b.ok for b in builds)
    cancelled = []
    other = Client(tls_cluster["cluster"].scheduler_address, security=tls_cluster["security"],
                   set_as_default=False)

    def cancel_running_measurements():
        with other:
            for _ in range(300):
                keys = other.run_on_scheduler(
                    lambda dask_scheduler: [k for k, t in dask_scheduler.tasks.items()
                                            if str(k).startswith("measure-")
                                            and t.state == "processing"])
                if keys:
                    other.cancel([Future(k, other) for k in keys[:2]], force=True)
                    cancelled.extend(keys[:2])
                    return
                time.sleep(0.1)

    thread = threading.Thread(target=cancel_running_measurements)
    thread.start()
    results = option.runner.run(task, builds)
    thread.join()
    assert cancelled
    assert [r.status for r in results] == ["ok"] * len(builds)
    assert sum(option.runner.measured_on.values()) == len(builds)


_CLIENT = """
import sys
import kiln.autotvm.testing
from kiln import autotvm
from kiln.autotvm import cluster as kc

address, ca, cert, key, log = sys.argv[1:]
sec = kc.tls_security(ca, cert, key)
option = autotvm.measure_option(builder=kc.ClusterBuilder(address, security=sec),
                                runner=kc.ClusterRunner(address, security=sec))
task = autotvm.create_task("test.matmul", (32, 64, 32, "float32"))
autotvm.RandomTuner(task, seed=7).tune(40, measure_option=option, log_file=log)
"""


def test_client_killed_and_resumed(tls_cluster, tmp_path):
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(_CLIENT))
    log = tmp_path / "tune.jsonl"
    certs = tls_cluster["certs"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, str(script), tls_cluster["cluster"].scheduler_address,
                             certs["ca"], certs["cert"], certs["key"], str(log)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and sum(1 for _ in open(log)) >= 9:
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[0].decode()[-3000:]
    proc.kill()
    proc.wait()
    before = [inp.config["index"] for inp, _ in load_records(str(log))]
    assert 9 <= len(before) < 40

    task = autotvm.create_task("test.matmul", (32, 64, 32, "float32"))
    option = _option(tls_cluster)
    tuner = autotvm.RandomTuner(task, seed=7).tune(40, measure_option=option, log_file=str(log))
    records = list(load_records(str(log)))
    after = [inp.config["index"] for inp, _ in records]
    assert after[:len(before)] == before
    # No record lost or written twice: every trial once, 40 in all; the resumed run measured
    # only what the log lacked (candidates that failed to build are not measured).
    assert len(after) == len(set(after)) == 40
    new = [r for _, r in records[len(before):]]
    measured = sum(option.runner.measured_on.values())
    assert sum(r.status == "ok" for r in new) <= measured <= len(new)
    assert tuner.best_config is not None


# ------------------------------------------------------------------------------ simulated
def test_simulated_devices_and_parallel_tasks(tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                      resources={SIMULATED_RESOURCE: 1}, dashboard_address=None,
                      worker_dashboard_address=None) as cluster:
        option = autotvm.measure_option(
            builder=SimulatedBuilder(cluster, build_seconds=0.05),
            runner=SimulatedRunner(cluster, hold_seconds=0.01, parallel_tasks=2))
        tasks = [autotvm.create_task("test.matmul", (n, n, n, "float32"))
                 for n in (16, 32, 64)]
        log = str(tmp_path / "sim.jsonl")
        autotvm.tune_tasks(tasks, 20, log_file=log, tuner="random", seed=0,
                           measure_option=option, progress=None)
        records = list(load_records(log))
    by_task = {t.key: t for t in tasks}
    for inp, res in records:
        assert res.status == "ok"
        assert res.costs == (table_cost(by_task[inp.task_key], inp.config),) * 3
    counts = collections.Counter(inp.task_key for inp, _ in records)
    assert all(counts[t.key] >= 20 for t in tasks)
    # Two tasks were tuned at once: their batches interleave in the log.
    order = [inp.task_key for inp, _ in records]
    first_done = max(i for i, k in enumerate(order) if k == tasks[0].key)
    assert tasks[1].key in order[:first_done]
