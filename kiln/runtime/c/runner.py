"""Run an exported model library through the C runtime's run_model program: on this machine,
or, for another instruction set, under its emulator (user-mode QEMU), which is how kiln checks
ARM code without an ARM machine. QEMU's timings say nothing about an ARM CPU's speed.

    outputs, seconds = run_exported("model.so", {"data": x}, "aarch64-linux-gnu")
"""
from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from ..native_build import cache_root
from ..toolchain import compiler_for, emulator_for, run_bounded
from . import FLAGS, HEADER, LIBRARY, PROGRAMS, SOURCES, build_program, host_triple

_TYPE_LINE = re.compile(r"^(output\d+): (\w+)\[([\dx]*)\]")
_MEDIAN_LINE = re.compile(r"^median run: ([\d.]+) us")
_lock = threading.Lock()


class DeviceRunError(RuntimeError):
    """The model did not run on the device (or its emulator): the message says why."""


def program_for(triple: str | None = None, name: str = "run_model") -> list[str]:
    """The command that runs program `name` (kiln.runtime.c.PROGRAMS) for `triple` (default:
    this machine): the emulator's prefix, if any, then the program, built once per source
    version and compiler into kiln's cache.

    Example:
        >>> program_for("aarch64-linux-gnu")[0]                  # doctest: +SKIP
        'qemu-aarch64'
    """
    triple = triple or host_triple()
    emulator = emulator_for(triple)
    key = hashlib.sha256(" ".join([*compiler_for(triple), *FLAGS]).encode())
    for source in (HEADER, *SOURCES, *PROGRAMS[name], Path(__file__).with_name("__init__.py")):
        key.update(source.read_bytes())
    directory = cache_root() / "c_runtime" / f"{triple}-{name}-{key.hexdigest()[:16]}"
    program = directory / name
    with _lock:
        if not (program.is_file() and (directory / LIBRARY).is_file()):
            directory.mkdir(parents=True, exist_ok=True)
            build_program(directory, triple, name)
    return [*emulator, str(program)]


def run_exported(path, inputs: dict, triple: str | None = None, repeat: int = 0,
                 threads: int | None = None, timeout: float = 300):
    """Run the model library at `path` once on `inputs` (name -> numpy array) through the C
    runtime for `triple`; returns (outputs as numpy arrays, median seconds of `repeat` more runs
    or None). A failure or a run past `timeout` seconds is a DeviceRunError.

    Example:
        >>> (y,), _ = run_exported("model.so", {"x": x}, "aarch64-linux-gnu")   # doctest: +SKIP
    """
    command = program_for(triple)
    with tempfile.TemporaryDirectory(prefix="kiln-run-") as tmp:
        args = [*command, str(Path(path).resolve())]
        for name, value in inputs.items():
            file = Path(tmp) / f"input{len(args)}.bin"
            np.ascontiguousarray(value).tofile(file)
            args.append(f"{name}={file}")
        args += ["-o", tmp]
        if repeat:
            args += ["--repeat", str(repeat)]
        if threads:
            args += ["--threads", str(threads)]
        try:
            done = run_bounded(args, timeout, text=True)
        except subprocess.TimeoutExpired:
            raise DeviceRunError(f"{path}: no answer within {timeout:g} s from "
                                 f"{' '.join(command)}") from None
        if done.returncode != 0:
            why = done.stderr.strip() or f"exit status {done.returncode}"
            if done.returncode < 0:
                why = f"killed by signal {-done.returncode}; {why}"
            raise DeviceRunError(f"{path} failed on {triple or host_triple()}: {why}")
        outputs, median = [], None
        for line in done.stdout.splitlines():
            if match := _TYPE_LINE.match(line):
                name, dtype, dims = match.groups()
                shape = tuple(int(d) for d in dims.split("x")) if dims else ()
                data = np.fromfile(Path(tmp) / f"{name}.bin", dtype=dtype)
                outputs.append(data.reshape(shape))
            elif match := _MEDIAN_LINE.match(line):
                median = float(match.group(1)) * 1e-6
    return outputs, median
