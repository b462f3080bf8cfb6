"""Tuning records: one measurement per JSON line, and the dispatch of the best config per task.

A log is a text file (UTF-8) of JSON objects, one per line, appended to as a tuner measures:

    {"v":1,"task":"[\\"test.matmul\\",[512,512,512,\\"float32\\"],\\"llvm\\"]","target":"llvm","config":{"index":17,"knobs":{"tile_i":[-1,8,16],"ann":["unroll","none"]}},"result":{"costs":[0.0012,0.0011],"status":"ok","message":"","all_cost":0.4,"timestamp":1763820000.0},"default":true}

- "v": the format version (RECORD_VERSION); lines of another version are skipped with a warning.
- "task": the task key (`Task.key`, canonical JSON of [template name, args, target text]).
- "target": the target text the candidate was built for.
- "config": the config as data, `ConfigEntity.to_json()` ({"index": int, "knobs": {...}}).
- "result": "costs" (seconds per repeat), "status" (one of STATUSES), "message" (the error, if
  any), "all_cost" (seconds spent building and measuring), "timestamp" (unix time).
- "default": present and true only on the measurement of the task's default (fallback) config;
  `ApplyHistoryBest` uses it to never pick a config that measured slower than the default.
- "in_model": present and true only on a measurement taken inside a compiled model (see
  kiln.autotvm.model_select): "costs" are then the task's kernel time per call in whole-model
  runs, one per round. Where a task has such records, `ApplyHistoryBest` picks among them;
  the tuners learn only from the others (the kernel measured alone).

The log is append-only (never rewritten), flushed and fsync'ed once per batch, so a killed
tuning run loses at most the batch in flight; a resumed run appends to the same file and skips
configs already measured (`measured_configs`). Nothing here uses pickle.
"""
from __future__ import annotations

import json
import logging
import math
import os
import statistics
import threading
import warnings
from dataclasses import dataclass
from typing import Iterable, Iterator

from kiln.autotvm.task import DispatchContext, is_auto_task_key

RECORD_VERSION = 1
STATUSES = ("ok", "compile_error", "runtime_error", "timeout", "wrong_answer")

# The untuned-task summary goes to this logger (not warnings.warn): one line per context exit.
logger = logging.getLogger("kiln.autotvm")

# Past this many corrupt lines in one file, the rest are counted in one closing warning.
_MAX_LINE_WARNINGS = 10


class RecordWarning(UserWarning):
    """Warning about a tuning-log line that was skipped (corrupt, or of another version)."""


class RecordFormatError(ValueError):
    """A tuning-log line that is not a valid record; the message names what is wrong."""


class RecordVersionError(RecordFormatError):
    """A well-formed record line of another format version (`.found` holds it)."""

    def __init__(self, found):
        super().__init__(f"record format version {found!r}, expected {RECORD_VERSION}")
        self.found = found


# ------------------------------------------------------------------------------ data records
def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_config(config) -> None:
    if not isinstance(config, dict):
        raise RecordFormatError(f"config must be a dict {{'index': int, 'knobs': {{...}}}}, got {config!r}")
    missing = [k for k in ("index", "knobs") if k not in config]
    if missing:
        raise RecordFormatError(f"config is missing field {missing[0]!r}: {config!r}")
    index = config["index"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise RecordFormatError(f"config 'index' must be a non-negative int, got {index!r}")
    if not isinstance(config["knobs"], dict):
        raise RecordFormatError(f"config 'knobs' must be a dict of knob name -> value, got {config['knobs']!r}")


@dataclass(frozen=True)
class MeasureInput:
    """What was measured: a task key, a config (as data) and the target text.

    `default` marks the measurement of the task's default (fallback) config, `in_model` one
    taken inside a compiled model's runs (kiln.autotvm.model_select) rather than alone.

    Example:
        >>> MeasureInput('["t",[4],"llvm"]', {"index": 0, "knobs": {}}, "llvm").config["index"]
        0
    """

    task_key: str
    config: dict
    target: str
    default: bool = False
    in_model: bool = False

    def __post_init__(self):
        if not isinstance(self.task_key, str) or not self.task_key:
            raise RecordFormatError(f"task key must be a non-empty string (Task.key), got {self.task_key!r}")
        if not isinstance(self.target, str):
            if type(self.target).__name__ != "Target":
                raise RecordFormatError(f"target must be a target text such as 'llvm', got {self.target!r}")
            object.__setattr__(self, "target", str(self.target))
        _check_config(self.config)
        for flag in ("default", "in_model"):
            if not isinstance(getattr(self, flag), bool):
                raise RecordFormatError(f"{flag!r} must be true or false, "
                                        f"got {getattr(self, flag)!r}")


@dataclass(frozen=True)
class MeasureResult:
    """How a measurement went: costs in seconds per repeat, a status from STATUSES, and more.

    Example:
        >>> MeasureResult((0.002, 0.004), "ok").mean
        0.003
        >>> MeasureResult((), "timeout", "ran past 10 s").mean
        inf
    """

    costs: tuple
    status: str
    message: str = ""
    all_cost: float = 0
    timestamp: float = 0

    def __post_init__(self):
        if self.status not in STATUSES:
            raise RecordFormatError(f"unknown measurement status {self.status!r}; known: {', '.join(STATUSES)}")
        if isinstance(self.costs, (str, bytes)) or not isinstance(self.costs, Iterable):
            raise RecordFormatError(f"costs must be a sequence of seconds, got {self.costs!r}")
        costs = tuple(self.costs)
        for c in costs:
            if not _is_number(c) or not math.isfinite(c) or c < 0:
                raise RecordFormatError(f"a cost must be a finite number of seconds >= 0, got {c!r}")
        if self.status == "ok" and not costs:
            raise RecordFormatError("a result with status 'ok' needs at least one cost")
        if not isinstance(self.message, str):
            raise RecordFormatError(f"message must be a string, got {self.message!r}")
        for name in ("all_cost", "timestamp"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value):
                raise RecordFormatError(f"{name} must be a finite number, got {value!r}")
        object.__setattr__(self, "costs", costs)

    @property
    def mean(self) -> float:
        """Mean cost in seconds; inf unless the status is ok."""
        return sum(self.costs) / len(self.costs) if self.status == "ok" else math.inf


# ----------------------------------------------------------------------------- line format
def encode(inp: MeasureInput, res: MeasureResult) -> str:
    """One record as a JSON line (no trailing newline).

    Example:
        >>> encode(MeasureInput("k", {"index": 3, "knobs": {}}, "llvm"), MeasureResult((1e-3,), "ok"))[:15]
        '{"v":1,"task":"'
    """
    if not isinstance(inp, MeasureInput) or not isinstance(res, MeasureResult):
        raise TypeError(f"encode takes (MeasureInput, MeasureResult), got ({type(inp).__name__}, "
                        f"{type(res).__name__})")
    record = {
        "v": RECORD_VERSION,
        "task": inp.task_key,
        "target": inp.target,
        "config": {"index": inp.config["index"], "knobs": inp.config["knobs"]},
        "result": {"costs": list(res.costs), "status": res.status, "message": res.message,
                   "all_cost": res.all_cost, "timestamp": res.timestamp},
    }
    for flag in ("default", "in_model"):
        if getattr(inp, flag):
            record[flag] = True
    try:
        # allow_nan=False: Infinity/NaN are not JSON, and other readers of the log would choke.
        return json.dumps(record, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise RecordFormatError(f"config of task {inp.task_key} is not JSON data: {e}") from None


def _field(obj: dict, name: str, kind, where: str):
    if name not in obj:
        raise RecordFormatError(f"missing field {where}{name!r}")
    value = obj[name]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise RecordFormatError(f"field {where}{name!r} has the wrong type: {value!r}")
    return value


def decode(line: str) -> tuple[MeasureInput, MeasureResult]:
    """Parse one JSON line back into (MeasureInput, MeasureResult).

    Raises RecordVersionError for a line of another format version, and RecordFormatError
    (naming the field at fault) for anything else that is not a valid record.

    Example:
        >>> inp, res = decode(encode(MeasureInput("k", {"index": 3, "knobs": {}}, "llvm"),
        ...                          MeasureResult((1e-3,), "ok")))
        >>> (inp.config["index"], res.status)
        (3, 'ok')
    """
    try:
        record = json.loads(line)
    except ValueError as e:
        raise RecordFormatError(f"not valid JSON ({e})") from None
    if not isinstance(record, dict):
        raise RecordFormatError(f"a record is a JSON object, got {type(record).__name__}")
    version = _field(record, "v", object, "")
    if version != RECORD_VERSION or isinstance(version, bool):
        raise RecordVersionError(version)
    result = _field(record, "result", dict, "")
    costs = _field(result, "costs", list, "result.")
    res = MeasureResult(
        costs=tuple(costs),
        status=_field(result, "status", str, "result."),
        message=_field(result, "message", str, "result."),
        all_cost=_field(result, "all_cost", (int, float), "result."),
        timestamp=_field(result, "timestamp", (int, float), "result."),
    )
    flags = {}
    for flag in ("default", "in_model"):
        flags[flag] = record.get(flag, False)
        if not isinstance(flags[flag], bool):
            raise RecordFormatError(f"field {flag!r} must be true or false, got {flags[flag]!r}")
    inp = MeasureInput(
        task_key=_field(record, "task", str, ""),
        config=_field(record, "config", dict, ""),
        target=_field(record, "target", str, ""),
        **flags,
    )
    return inp, res


# ----------------------------------------------------------------------------- file access
_path_locks: dict[str, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def log_lock(path: "str | os.PathLike") -> threading.Lock:
    """The lock of one log file in this process: writers append a batch under it, and a
    reader that must not see a half-written batch (a tuner resuming while other tasks' tuners
    write the same log) reads under it.

    Example:
        >>> log_lock("tune.jsonl") is log_lock("./tune.jsonl")
        True
    """
    key = os.path.realpath(os.fspath(path))
    with _path_locks_guard:
        return _path_locks.setdefault(key, threading.Lock())


class RecordWriter:
    """Appends records to a JSON-lines log; one flush + fsync per batch. Writers of one log in
one process (tuners of several tasks at once) append whole batches, one at a time.

    Opening an existing log appends to it (a resumed run); nothing is ever truncated. If the
    previous writer was killed mid-line, a newline is written first so that the partial line
    stays one corrupt line instead of swallowing the next record.

    Example:
        >>> with RecordWriter("tune.jsonl") as w:                      # doctest: +SKIP
        ...     w.write_batch([(inp, res)])
    """

    def __init__(self, path: "str | os.PathLike"):
        self.path = os.fspath(path)
        self._lock = log_lock(self.path)
        with self._lock:        # another writer of this log may be mid-batch
            self._open()

    def _open(self) -> None:
        needs_newline = False
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() > 0:
                    f.seek(-1, os.SEEK_END)
                    needs_newline = f.read(1) != b"\n"
        except FileNotFoundError:
            pass
        try:
            self._file = open(self.path, "a", encoding="utf-8", newline="\n")
        except OSError as e:
            raise OSError(f"cannot open tuning log {self.path!r} for appending: {e.strerror}") from None
        if needs_newline:
            self._file.write("\n")
            self._sync()

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def write_batch(self, pairs: Iterable[tuple[MeasureInput, MeasureResult]]) -> int:
        """Append (MeasureInput, MeasureResult) pairs, then flush and fsync; returns how many.

        Example:
            >>> w.write_batch([(inp, res), (inp2, res2)])              # doctest: +SKIP
            2
        """
        # Encode everything first: a bad record fails the batch before any byte is written.
        lines = [encode(inp, res) + "\n" for inp, res in pairs]
        if not lines:
            return 0
        with self._lock:
            if self._file.closed:
                raise ValueError(f"RecordWriter for {self.path!r} is closed")
            self._file.write("".join(lines))
            self._sync()
        return len(lines)

    def close(self) -> None:
        """Close the file (records already written stay). Example: `writer.close()`."""
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_records(path: "str | os.PathLike") -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """Iterate over the (MeasureInput, MeasureResult) records of a log, in file order.

    A corrupt line is skipped with a RecordWarning naming the file and line number; lines of
    another format version are skipped with one RecordWarning per file giving their count.
    A missing file raises FileNotFoundError at once.

    Example:
        >>> best = best_by_task(load_records("tune.jsonl"))            # doctest: +SKIP
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"tuning log {path!r} does not exist")
    f = open(path, encoding="utf-8", errors="replace")
    return _iter_records(f, path)


def _iter_records(f, path: str) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    corrupt = 0
    other_versions: dict[str, int] = {}
    with f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield decode(line)
            except RecordVersionError as e:
                key = repr(e.found)
                other_versions[key] = other_versions.get(key, 0) + 1
            except RecordFormatError as e:
                corrupt += 1
                if corrupt <= _MAX_LINE_WARNINGS:
                    warnings.warn(f"{path}:{lineno}: skipped corrupt tuning record: {e}",
                                  RecordWarning, stacklevel=2)
    if corrupt > _MAX_LINE_WARNINGS:
        warnings.warn(f"{path}: skipped {corrupt - _MAX_LINE_WARNINGS} more corrupt tuning records",
                      RecordWarning, stacklevel=2)
    if other_versions:
        found = ", ".join(f"{n} of version {v}" for v, n in sorted(other_versions.items()))
        total = sum(other_versions.values())
        warnings.warn(f"{path}: skipped {total} tuning record(s) of another format version ({found}); "
                      f"this kiln reads version {RECORD_VERSION}", RecordWarning, stacklevel=2)


# -------------------------------------------------------------------------------- queries
def cost_of(inp: MeasureInput, res: MeasureResult) -> float:
    """A measurement's cost in seconds (inf unless ok): the mean of its repeats, or for one
    taken inside a model, the median of its rounds (a round's interval can hold a preemption
    many times the kernel's own time).

    Example:
        >>> cost_of(MeasureInput("k", {"index": 0, "knobs": {}}, "llvm", in_model=True),
        ...         MeasureResult((1e-5, 1e-5, 9.0), "ok"))
        1e-05
    """
    if inp.in_model and res.status == "ok":
        return statistics.median(res.costs)
    return res.mean


def best_by_task(records: Iterable[tuple[MeasureInput, MeasureResult]],
                 in_model: bool = False) -> dict[str, tuple[dict, float]]:
    """The fastest config per task key among the ok results: {task_key: (config_dict, cost)},
    over the measurements of kernels alone, or (`in_model`) over those taken inside a model.

    A config measured more than once (the tuner re-measures its best few) counts with the
    median of its measurements, so one lucky draw does not win. Failed measurements are
    ignored; on a tie the config measured first wins.

    Example:
        >>> best_by_task(load_records("tune.jsonl"))                   # doctest: +SKIP
        {'["test.matmul",[512,512,512,"float32"],"llvm"]': ({'index': 17, 'knobs': {...}}, 0.0011)}
    """
    costs: dict[str, dict[int, list[float]]] = {}
    configs: dict[tuple[str, int], dict] = {}
    for inp, res in records:
        if res.status != "ok" or inp.in_model != in_model:
            continue
        index = inp.config["index"]
        costs.setdefault(inp.task_key, {}).setdefault(index, []).append(cost_of(inp, res))
        configs.setdefault((inp.task_key, index), inp.config)
    best: dict[str, tuple[dict, float]] = {}
    for key, per_config in costs.items():
        index = min(per_config, key=lambda i: statistics.median(per_config[i]))
        best[key] = (configs[key, index], statistics.median(per_config[index]))
    return best


def measured_configs(records: Iterable[tuple[MeasureInput, MeasureResult]], task_key: str) -> set[int]:
    """Indices of the configs of `task_key` already measured, whatever the outcome.

    Example:
        >>> measured_configs(load_records("tune.jsonl"), task.key)     # doctest: +SKIP
        {0, 17, 42}
    """
    return {inp.config["index"] for inp, _ in records if inp.task_key == task_key}


def _pick_best(records: Iterable[tuple[MeasureInput, MeasureResult]]) -> dict[str, dict]:
    """best_by_task, except that a measured default config wins whenever it is at least as
    fast, and that a task measured inside a model is answered from those measurements."""
    records = list(records)
    chosen = {}
    for in_model in (False, True):      # in-model choices override the kernel-alone ones
        best = best_by_task(records, in_model)
        default_best = best_by_task(((inp, res) for inp, res in records if inp.default),
                                    in_model)
        for key, (config, mean) in best.items():
            if key in default_best and default_best[key][1] <= mean:
                config = default_best[key][0]
            chosen[key] = config
    return chosen


class ApplyHistoryBest(DispatchContext):
    """A dispatch context answering each task key with the best config found in a tuning log.

    Task keys that no context answers fall back to the template's default config; the template
    machinery reports them through `on_fallback`, they are collected in `.untuned` (the keys
    asked for are in `.queried`), and leaving the context logs ONE summary line (logger "kiln.autotvm", level
    WARNING) saying how many tasks were untuned. A config that measured slower than the task's
    measured default config is never picked.

    Example:
        >>> with ApplyHistoryBest("tune.jsonl"):                       # doctest: +SKIP
        ...     lib = kiln.compile(mod, target="llvm", params=params)
    """

    def __init__(self, records_or_path):
        super().__init__()
        if isinstance(records_or_path, (str, os.PathLike)):
            self.source = os.fspath(records_or_path)
            records = load_records(records_or_path)
        else:
            self.source = "the given records"
            records = records_or_path
        self.best: dict[str, dict] = _pick_best(records)
        self._has_auto = any(is_auto_task_key(k) for k in self.best)
        self.untuned: set[str] = set()
        self.queried: set[str] = set()

    def _query(self, task_key: str) -> dict | None:
        auto = is_auto_task_key(task_key)
        if self._has_auto or not auto:
            self.queried.add(task_key)
        config = self.best.get(task_key)
        if config is None:
            if auto and self._has_auto:     # (no fallback is reported for these: see there)
                self.untuned.add(task_key)
            return None
        # A copy: the caller may edit what it gets without changing what later queries return.
        return json.loads(json.dumps(config))

    def snapshot(self) -> dict:
        return json.loads(json.dumps(self.best))

    def on_fallback(self, task_key: str) -> None:
        # Counted here, not in _query: a key that an enclosing context answered is not untuned.
        self.queried.add(task_key)
        self.untuned.add(task_key)

    def __enter__(self):
        self.untuned = set()
        self.queried = set()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self.untuned:
                logger.warning("apply_history_best: %d of %d tasks untuned (no ok record in %s); "
                               "they use their default configs", len(self.untuned),
                               len(self.queried), self.source)


def apply_history_best(log) -> ApplyHistoryBest:
    """The public name: a context using the best config per task from a log (path or records).

    Example:
        >>> with kiln.autotvm.apply_history_best("tune.jsonl"):        # doctest: +SKIP
        ...     lib = kiln.compile(mod, target="llvm", params=params)
    """
    return ApplyHistoryBest(log)
