"""Choosing each task's config inside the compiled model, among the best the tuner found alone.

A tuner times each kernel alone, in a regime that only approximates the model's: inside the
model a kernel finds its input where the previous kernel left it, its weights wherever the
other layers' traffic pushed them, and it runs between kernels that leave the thread pool in
some state. The config that wins alone can lose inside the model; on a 2-core VM with a large
shared L3, MobileNet-V2's isolated winners ran the model no faster than the default configs.

So the last step of tuning a model measures where it matters. For every task it takes the
default config and the `top` best configs of the log (by their median time alone), compiles
the model once per rank (variant r uses each task's r-th candidate, or its default when it has
fewer; variant 0 runs the default configs, which is the untuned model wherever a template's
default is the topi heuristic, as on x86; the GPU conv2d template's is a tile of the direct
schedule, not the generic schedule an untuned model runs), and profiles the variants in interleaved rounds (kiln.runtime.profile): a task's time
in a round is its kernels' time per call in that variant's runs. Each (task, candidate) gets
one record with "in_model": true and those per-round times as its costs (their median is
its cost: a round can hold a preemption), and
ApplyHistoryBest answers such tasks from these records: the config whose median in-model time
is lowest, the default on a tie. Kernels are attributed to tasks by name (Task.kernels), so a
variant needs no more than one compile and one profile per round.

Example:
    >>> select_in_model(mod, params, "llvm", log_file="tune.jsonl")   # doctest: +SKIP
"""
from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

from ..target import as_target
from .extract import extract_tasks
from .record import (MeasureInput, MeasureResult, RecordWriter, _pick_best, cost_of,
                     load_records)
from .task import ApplyFixedConfigs

__all__ = ["select_in_model", "profile_variants", "TaskChoice"]


@dataclass(frozen=True)
class TaskChoice:
    """One task's outcome: its median time per call inside the model with the default config
    and with the chosen one (seconds), and the chosen config (JSON form).

    Example:
        >>> TaskChoice("k", 2e-4, 1.5e-4, {"index": 3, "knobs": {}}).speedup
        1.3333333333333335
    """

    task_key: str
    default_seconds: float
    chosen_seconds: float
    config: dict

    @property
    def speedup(self) -> float:
        return self.default_seconds / self.chosen_seconds if self.chosen_seconds > 0 else 1.0


def _candidates(task, records: list, top: int) -> list:
    """[the default config, then up to `top` others, fastest alone first] as JSON configs."""
    default = task.default_config().to_json()
    costs: dict = {}
    configs: dict = {}
    for inp, res in records:
        if inp.task_key == task.key and not inp.in_model and res.status == "ok":
            costs.setdefault(inp.config["index"], []).append(res.mean)
            configs.setdefault(inp.config["index"], inp.config)
    costs.pop(default["index"], None)
    ranked = sorted(costs, key=lambda i: (statistics.median(costs[i]), i))
    return [default] + [configs[i] for i in ranked[:top]]


def _measured_in_model(records: list) -> dict:
    done: dict = {}
    for inp, _ in records:
        if inp.in_model:
            done.setdefault(inp.task_key, set()).add(inp.config["index"])
    return done


def _agree(out, ref) -> bool:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    return out.shape == ref.shape and float(np.abs(out - ref).max(initial=0.0)) <= 1e-3 * scale


def profile_variants(executors: list, rounds: int = 10, run_seconds: float = 0.1) -> list:
    """Profile compiled variants of one model in `rounds` interleaved rounds (who goes first
    rotates), each variant about `run_seconds` a round; returns per variant (None: skipped) a
    list of {kernel name: seconds per run}, one per round.

    Example:
        >>> times = profile_variants([GraphExecutor(a), GraphExecutor(b)], rounds=3)  # doctest: +SKIP
        >>> len(times[1]), times[1][0]["fused_nn_dense_0"]                     # doctest: +SKIP
        (3, 2.1e-06)
    """
    from ..runtime.profiler import profile

    def batch(seconds_per_run):
        return max(1, round(run_seconds / max(seconds_per_run, 1e-6)))

    variants = len(executors)
    runs = [None if ex is None else batch(ex.benchmark(1, 5).median) for ex in executors]
    out: list = [[] for _ in executors]
    for k in range(rounds):
        for r in [(k + j) % variants for j in range(variants)]:   # rotate who goes first
            if executors[r] is None:
                continue
            report = profile(executors[r], number=runs[r], repeat=1, peak_gflops=0.0)
            out[r].append({kp.name: kp.seconds for kp in report.kernels})
            # Sized again from this round: a first estimate taken on a busy moment (a few slow
            # runs) would otherwise keep every round of this variant a handful of runs long.
            runs[r] = batch(sum(kp.seconds for kp in report.kernels))
    return out


def select_in_model(mod, params=None, target="llvm", log_file: str = "tune.jsonl", top: int = 3,
                    rounds: int = 10, run_seconds: float = 0.1,
                    progress=sys.stderr) -> list[TaskChoice]:
    """Measure each task's default and `top` best logged configs inside the compiled model
    and append the measurements to `log_file` (see the module docstring); returns one
    TaskChoice per task that had a tuned candidate, as ApplyHistoryBest will now answer it.
    Tasks whose candidates all have in-model records already are not measured again: with
    nothing new in the log this compiles nothing and returns the choices the log holds.
    Each of `rounds` rounds profiles every variant for about `run_seconds`; `progress` (a
    stream, or None) gets one line per step.

    Example:
        >>> choices = select_in_model(mod, params, log_file="tune.jsonl")   # doctest: +SKIP
        >>> sum(c.speedup > 1 for c in choices)                              # doctest: +SKIP
        9
    """
    import kiln
    from ..runtime.graph_executor import GraphExecutor
    from ..runtime.profiler import random_inputs

    for name, value in (("top", top), ("rounds", rounds)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"select_in_model: {name} must be a positive int, got {value!r}")
    target = as_target(target)
    records = list(load_records(log_file)) if os.path.exists(log_file) else []
    tasks = extract_tasks(mod, params, target)
    cands = {t.key: _candidates(t, records, top) for t in tasks}
    tuned = [t for t in tasks if len(cands[t.key]) > 1]
    done = _measured_in_model(records)
    todo = [t for t in tuned if not {c["index"] for c in cands[t.key]} <= done.get(t.key, set())]

    def say(line):
        if progress is not None:
            progress.write(line + "\n")
            progress.flush()

    if todo:
        variants = max(len(cands[t.key]) for t in todo)
        say(f"selecting in the model: {len(todo)} tasks, {variants} variants of the model")
        start = time.monotonic()
        executors = []
        for r in range(variants):
            # the default is applied explicitly: what ApplyHistoryBest answers when it wins
            fixed = {t.key: cands[t.key][r if r < len(cands[t.key]) else 0] for t in todo}
            with ApplyFixedConfigs(fixed):
                lib = kiln.compile(mod, target=target, params=params)
            ex = GraphExecutor(lib)
            for name, value in random_inputs(lib).items():
                ex.set_input(name, value)
            executors.append(ex)
        refs = []
        for ex in executors:
            ex.run()
            refs.append([ex.get_output(i).numpy() for i in range(ex.get_num_outputs())])
        usable = [all(_agree(o, d) for o, d in zip(out, refs[0])) for out in refs]
        for r in range(1, variants):
            if not usable[r]:
                warnings.warn(f"select_in_model: variant {r} of the model (each task's "
                              f"candidate {r}) disagrees with the default configs' output; "
                              f"its candidates are not measured", stacklevel=2)
        measured = profile_variants([ex if ok else None for ex, ok in zip(executors, usable)],
                                    rounds, run_seconds)
        costs: dict = {(t.key, r): [] for t in todo for r in range(len(cands[t.key]))}
        for r, per_round in enumerate(measured):
            for seconds in per_round:
                for t in todo:
                    if r < len(cands[t.key]):
                        costs[t.key, r].append(sum(seconds[n] for n in t.kernels) / t.count)
        now = time.time()
        spent = (time.monotonic() - start) / max(len(costs), 1)
        pairs = [(MeasureInput(key, cands[key][r], str(target), default=(r == 0), in_model=True),
                  MeasureResult(tuple(c), "ok", all_cost=spent, timestamp=now))
                 for (key, r), c in costs.items() if c]
        with RecordWriter(log_file) as writer:
            writer.write_batch(pairs)
        records += pairs
    chosen = _pick_best(records)
    in_model: dict = {}
    for inp, res in records:
        if inp.in_model and res.status == "ok":
            in_model.setdefault((inp.task_key, inp.config["index"]), []).append(cost_of(inp, res))
    out = []
    for t in tuned:
        default = in_model.get((t.key, cands[t.key][0]["index"]))
        config = chosen.get(t.key)
        mine = config and in_model.get((t.key, config["index"]))
        if default and mine:
            out.append((t, TaskChoice(t.key, statistics.median(default),
                                      statistics.median(mine), config)))
    if out:
        before = sum(c.default_seconds * t.count for t, c in out)
        after = sum(c.chosen_seconds * t.count for t, c in out)
        switched = sum(c.config["index"] != cands[t.key][0]["index"] for t, c in out)
        say(f"in the model: {switched} of {len(out)} tuned tasks run a tuned config (the rest "
            f"measured no faster than their default there); their kernels "
            f"{before * 1e3:.3f} -> {after * 1e3:.3f} ms per run")
    return [c for _, c in out]
