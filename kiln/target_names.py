"""The CPU and feature names LLVM knows for a target triple, so that a Target's -mcpu, -mattr
and -mtriple are checked before LLVM sees them.

LLVM does not reject bad names politely: an unknown x86-64 CPU ends the whole process ("LLVM
ERROR: 64-bit code requested on a subtarget that doesn't support it!"), which kills a notebook
kernel, and an unknown feature is ignored after a warning on stderr, so the code silently lacks
what the user asked for. llvmlite has no API for the lists; LLVM prints them (to file descriptor
2) when asked for the CPU "help". They are read in a child process, once per triple:

- LLVM prints the tables once per process (a static flag in its help printer), so capturing
  them in this process would work for the first triple only, and not at all if anything here
  asked for help before;
- redirecting this process's fd 2 while LLVM prints would also swallow what other threads write
  to stderr meanwhile, and a crash inside that window would leave stderr pointing at a temp file;
- the child may register every LLVM target (to answer for other triples) without touching this
  process's LLVM state.

A child costs about 0.1 s (Python start and the llvmlite import); lists are cached per triple for
the life of the process, so parsing a Target stays a few set lookups after the first.

    python -m kiln.target_names [TRIPLE]     # print the names (default: this machine's triple)
"""
from __future__ import annotations

import difflib
import re
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass
from functools import lru_cache

# Exit status of the child when LLVM has no target for the triple.
_NO_TARGET = 3
_CHILD = """
import sys
import llvmlite.binding as llvm
llvm.initialize_all_targets()
try:
    target = llvm.Target.from_triple(sys.argv[1])
except RuntimeError as err:
    sys.exit(%d)
target.create_target_machine(cpu="help", features="+help")
""" % _NO_TARGET
_ENTRY = re.compile(r"^\s+(\S+)\s+- ")
_SUGGESTIONS = 3


class TargetNameError(ValueError):
    """A target names a CPU, feature or triple that LLVM does not know."""


@dataclass(frozen=True)
class LLVMNames:
    """What LLVM accepts for one triple: CPU names (-mcpu) and feature names (-mattr, no sign)."""
    triple: str
    cpus: frozenset[str]
    features: frozenset[str]


def parse_help(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(CPU names, feature names) from LLVM's "Available CPUs/features for this target" tables.

    Example:
        >>> parse_help("Available CPUs for this target:\\n\\n  haswell  - Select the haswell "
        ...            "processor.\\n\\nAvailable features for this target:\\n\\n  avx2  - "
        ...            "Enable AVX2 instructions.\\n")
        (frozenset({'haswell'}), frozenset({'avx2'}))
    """
    sections: dict[str, set[str]] = {"cpus": set(), "features": set()}
    current = None
    for line in text.splitlines():
        if line.startswith("Available CPUs"):
            current = sections["cpus"]
        elif line.startswith("Available features"):
            current = sections["features"]
        elif current is not None and (match := _ENTRY.match(line)):
            current.add(match.group(1))
    return frozenset(sections["cpus"]), frozenset(sections["features"])


def llvm_names(triple: str) -> LLVMNames | None:
    """LLVM's CPU and feature names for `triple`, read once per process; None (with a warning)
    when they could not be read, and a TargetNameError when LLVM has no target for the triple.

    Example:
        >>> "haswell" in llvm_names("x86_64-unknown-linux-gnu").cpus
        True
    """
    names = _read(triple)
    if names is _NO_TARGET_FOR_TRIPLE:
        raise TargetNameError(_unknown_triple(triple))
    return names


# Cached like a list, so that a bad triple is not asked about again.
_NO_TARGET_FOR_TRIPLE = object()


@lru_cache(maxsize=None)
def _read(triple: str):
    if not sys.executable:
        return _unreadable(triple, "no Python executable to run the child process")
    try:
        # -P: the current directory is not put first on the child's sys.path, so a file named
        # like a module (llvmlite.py) in whatever directory kiln runs in is never imported.
        child = subprocess.run([sys.executable, "-P", "-c", _CHILD, triple],
                               capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        return _unreadable(triple, str(err))
    if child.returncode == _NO_TARGET:
        return _NO_TARGET_FOR_TRIPLE
    cpus, features = parse_help(child.stderr)
    if child.returncode != 0 or not cpus or not features:
        last = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
        return _unreadable(triple, last)
    return LLVMNames(triple, cpus, features)


def _unknown_triple(triple: str, spec: str | None = None) -> str:
    where = f" in target {spec!r}" if spec else ""
    return (f"unknown target triple {triple!r}{where}; LLVM has no target for it (triples look "
            "like x86_64-unknown-linux-gnu or aarch64-linux-gnu)")


def _unreadable(triple: str, why: str) -> None:
    warnings.warn(f"kiln could not read LLVM's CPU and feature names for {triple} ({why}); "
                  "-mcpu and -mattr are passed to LLVM unchecked", RuntimeWarning, stacklevel=5)
    return None


def check_llvm_target(spec: str, triple: str, cpu: str | None, features: list[str]) -> None:
    """Raise TargetNameError unless LLVM knows `triple`, `cpu` (None or "native": not checked)
    and every feature ("+name" / "-name") of the target `spec`.

    Example:
        >>> check_llvm_target("llvm -mcpu=haswel", "x86_64-unknown-linux-gnu", "haswel", [])
        Traceback (most recent call last):
        ...
        kiln.target_names.TargetNameError: unknown CPU 'haswel' for x86_64-unknown-linux-gnu in \
target 'llvm -mcpu=haswel'; did you mean haswell? (all 131: python -m kiln.target_names \
x86_64-unknown-linux-gnu)
    """
    names = _read(triple)
    if names is _NO_TARGET_FOR_TRIPLE:
        raise TargetNameError(_unknown_triple(triple, spec))
    if names is None:
        return
    if cpu not in (None, "native") and cpu not in names.cpus:
        raise TargetNameError(_unknown("CPU", cpu, "", names.cpus, triple, spec))
    for feature in features:
        if feature[1:] not in names.features:
            raise TargetNameError(_unknown("CPU feature", feature[1:], feature[0],
                                           names.features, triple, spec))


def _unknown(what: str, name: str, sign: str, known: frozenset[str], triple: str,
             spec: str) -> str:
    close = [sign + n for n in difflib.get_close_matches(name, known, n=_SUGGESTIONS)]
    if not close:
        hint = f"no {what} name is close"
    elif len(close) == 1:
        hint = f"did you mean {close[0]}?"
    else:
        hint = f"did you mean {', '.join(close[:-1])} or {close[-1]}?"
    return (f"unknown {what} {sign + name!r} for {triple} in target {spec!r}; {hint} "
            f"(all {len(known)}: python -m kiln.target_names {triple})")


def _main(argv: list[str]) -> int:
    if len(argv) > 1 or argv[:1] in (["-h"], ["--help"]):
        print("usage: python -m kiln.target_names [TRIPLE]\n"
              "Print the CPU (-mcpu) and feature (-mattr) names LLVM knows for TRIPLE "
              "(default: this machine's).")
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    if argv:
        triple = argv[0]
    else:
        import llvmlite.binding as llvm
        triple = llvm.get_process_triple()
    try:
        names = llvm_names(triple)
    except TargetNameError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if names is None:
        return 1
    for title, found in (("CPUs (-mcpu=NAME)", names.cpus),
                         ("features (-mattr=+NAME,-NAME)", names.features)):
        print(f"{title} for {triple}, {len(found)}:")
        print(textwrap.fill("  ".join(sorted(found)), width=100, initial_indent="  ",
                            subsequent_indent="  ", break_on_hyphens=False))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
