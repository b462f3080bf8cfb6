"""export_library: one shared library with the kernels, the execution graph and the weights.

The weights are embedded with the assembler's .incbin (fast for hundreds of MB, unlike
generating source text); kiln.runtime.load_module maps them in place. Beside them, the execution
plan kiln's C runtime reads (kiln/runtime/c). A model for another instruction set is linked by
its cross tool-chain (kiln.runtime.toolchain).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..runtime import file_checksum
from ..runtime.c.plan import PLAN_SIZE_SYMBOL, PLAN_SYMBOL, PlanError, pack_plan
from ..runtime.external import kernels_of
from ..runtime.load import (BLOB_SIZE_SYMBOL, BLOB_SYMBOL, SYMBOL_PREFIX, blob_constants,
                            pack_blob)
from ..runtime.native_build import NativeBuildError
from ..runtime.toolchain import compiler_for
from ..timings import phase

logger = logging.getLogger("kiln.export")


class ExportError(RuntimeError):
    """The system compiler could not link the library."""


def _incbin(symbol: str, size_symbol: str, path: Path, size: int) -> str:
    """Assembler lines embedding the file at `path` as `symbol`, its size as `size_symbol`."""
    return (f'\t.section .rodata\n\t.balign 64\n\t.globl {symbol}\n'
            f'\t.type {symbol}, @object\n{symbol}:\n\t.incbin "{path}"\n'
            f'\t.size {symbol}, {size}\n\t.balign 8\n\t.globl {size_symbol}\n'
            f'\t.type {size_symbol}, @object\n{size_symbol}:\n\t.quad {size}\n'
            f'\t.size {size_symbol}, 8\n')


def _plan(model, blob: bytes) -> bytes | None:
    """The execution plan of kiln's C runtime (kiln/runtime/c/plan.py), or None for a model
    it cannot run (which the Python runtime still loads)."""
    module = kernels_of(model.module)
    tables = getattr(module, "errors_of", {}) if module is not None else {}
    try:
        return pack_plan(json.loads(model.graph_json), blob_constants(blob), SYMBOL_PREFIX,
                         {name: table.messages for name, table in tables.items()})
    except PlanError as err:
        logger.info("%s: no plan for the C runtime: %s", model, err)
        return None


def export_library(model, path) -> None:
    """Write `model` (a CompiledModel) to `path` as a shared library.

    Example:
        >>> lib.export_library("model.so")   # doctest: +SKIP
    """
    path = Path(path)
    try:
        cc = compiler_for(model.target.host.mtriple)     # a cross compiler for another ISA
    except NativeBuildError as err:
        raise ExportError(f"cannot export {path}: {err}") from None
    with tempfile.TemporaryDirectory(prefix="kiln_export_") as tmp:
        tmp = Path(tmp)
        sources = []
        module = kernels_of(model.module)      # external modules travel in the graph
        if module is not None and not model.target.is_gpu:   # GPU kernels are in the graph
            if model.target.kind == "llvm":
                for k, code in enumerate(module.object_codes):
                    obj = tmp / f"kernels{k}.o"
                    obj.write_bytes(code)
                    sources.append(str(obj))
                # a cached kernel keeps the name it was compiled under; the loader looks
                # for the model's name
                sources += [f"-Wl,--defsym={shown}={inner}"
                            for shown, inner in sorted(module.symbol_aliases.items())]
            else:
                from ..codegen.c.build import compile_flags
                c_file = tmp / "kernels.c"
                c_file.write_text(module.get_source("c"))
                sources += list(compile_flags(model.target)) + [str(c_file)]
        with phase("export.blob"):
            blob = pack_blob(model.graph_json, model.params)
            plan = _plan(model, blob)
        blob_path = tmp / "blob.bin"
        blob_path.write_bytes(blob)
        text = _incbin(BLOB_SYMBOL, BLOB_SIZE_SYMBOL, blob_path, len(blob))
        if plan is not None:
            (tmp / "plan.bin").write_bytes(plan)
            text += _incbin(PLAN_SYMBOL, PLAN_SIZE_SYMBOL, tmp / "plan.bin", len(plan))
        asm = tmp / "blob.S"
        asm.write_text(text + file_checksum.marker_asm() +
                       '\t.section .note.GNU-stack,"",@progbits\n')
        # Linked in a fresh private directory beside the output, then renamed over it: a
        # predictable name there could be a link someone planted, which the linker would write
        # through; the rename keeps a process that has the old library loaded intact.
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            out_tmp = staging / path.name
            cmd = [*cc, "-shared", "-fPIC", "-o", str(out_tmp), *sources, str(asm), "-lm"]
            with phase("export.link"):
                result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise ExportError(f"linking {path} failed:\n{result.stderr[-2000:]}")
            with phase("export.checksum"):
                file_checksum.stamp(out_tmp)
            os.replace(out_tmp, path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
