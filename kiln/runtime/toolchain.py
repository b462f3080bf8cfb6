"""The tools that build and run code for an instruction set: this machine's C compiler, or a
cross tool-chain (Debian's `gcc-<arch>-linux-gnu`) and a user-mode emulator (QEMU) for another.

    compiler_for("aarch64-linux-gnu")    # ['aarch64-linux-gnu-gcc']
    emulator_for("aarch64-linux-gnu")    # ['qemu-aarch64', '-L', '/usr/aarch64-linux-gnu']

$KILN_CC_<ARCH> (e.g. KILN_CC_AARCH64="clang --target=aarch64-linux-gnu") overrides the cross
compiler, as $CC does the host's.
"""
from __future__ import annotations

import os
import platform
import shlex
import shutil
import signal
import subprocess

from .native_build import NativeBuildError, c_compiler

# Debian's packages, named in the error a missing tool gives.
_PACKAGES = {"aarch64": ("gcc-aarch64-linux-gnu libc6-dev-arm64-cross", "qemu-user")}


def host_arch() -> str:
    """This machine's instruction set, as a triple names it ("x86_64", "aarch64").

    Example:
        >>> host_arch() in ("x86_64", "aarch64")
        True
    """
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def _arch(triple: str) -> str:
    return triple.split("-")[0]


def gnu_prefix(triple: str) -> str:
    """The GNU tool-chain prefix of a Linux triple ("aarch64-unknown-linux-gnu" ->
    "aarch64-linux-gnu").

    Example:
        >>> gnu_prefix("aarch64-unknown-linux-gnu")
        'aarch64-linux-gnu'
    """
    if "linux" not in triple:
        raise NativeBuildError(f"kiln cross-compiles for Linux triples only, not {triple!r}")
    return f"{_arch(triple)}-linux-gnu"


def compiler_for(triple: str) -> list[str]:
    """The C compiler command that builds and links code for `triple`: $CC / cc for this
    machine's instruction set, else $KILN_CC_<ARCH> or the GNU cross compiler. Raises
    NativeBuildError (saying what to install) when it is missing.

    Example:
        >>> compiler_for("aarch64-linux-gnu")          # doctest: +SKIP
        ['aarch64-linux-gnu-gcc']
    """
    arch = _arch(triple)
    if "linux" not in triple:
        raise NativeBuildError(f"kiln links libraries for Linux only, not for {triple!r}")
    if arch == host_arch():
        return c_compiler()
    override = os.environ.get(f"KILN_CC_{arch.upper()}")
    command = shlex.split(override) if override else [f"{gnu_prefix(triple)}-gcc"]
    if shutil.which(command[0]) is None:
        package = _PACKAGES.get(arch, (f"gcc-{gnu_prefix(triple)}",))[0]
        raise NativeBuildError(f"no C compiler for {triple}: {command[0]!r} is not on PATH "
                               f"(Debian: apt-get install {package}; or set "
                               f"KILN_CC_{arch.upper()})")
    return command


def emulator_for(triple: str) -> list[str]:
    """The command prefix that runs a program built for `triple` on this machine: nothing for
    this machine's instruction set, else user-mode QEMU with the cross tool-chain's libraries.
    Raises NativeBuildError (saying what to install) when QEMU is missing.

    Example:
        >>> emulator_for("aarch64-linux-gnu")          # doctest: +SKIP
        ['qemu-aarch64', '-L', '/usr/aarch64-linux-gnu']
    """
    arch = _arch(triple)
    if arch == host_arch():
        return []
    qemu = f"qemu-{arch}"
    if shutil.which(qemu) is None:
        package = _PACKAGES.get(arch, ("", "qemu-user"))[1]
        raise NativeBuildError(f"cannot run {triple} programs here: {qemu!r} is not on PATH "
                               f"(Debian: apt-get install {package})")
    return [qemu, "-L", f"/usr/{gnu_prefix(triple)}"]


def missing(triple: str) -> str | None:
    """Why programs for `triple` cannot be built and run here (the compiler or the emulator is
    missing, with what to install), or None.

    Example:
        >>> missing(f"{host_arch()}-linux-gnu") is None or "C compiler" in missing(host_arch())
        True
    """
    try:
        compiler_for(triple)
        emulator_for(triple)
    except NativeBuildError as err:
        return str(err)
    return None


def run_bounded(command: list, timeout: float, input=None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(command, capture_output=True, input=input, ...) in a session of its own,
    so that a run past `timeout` seconds kills everything it started (an emulator's or a
    wrapper's children too) before subprocess.TimeoutExpired is raised.

    Example:
        >>> run_bounded(["true"], timeout=10).returncode
        0
    """
    with subprocess.Popen(command, stdin=subprocess.PIPE if input is not None else None,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          start_new_session=True, **kwargs) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)
