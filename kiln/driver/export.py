"""export_library: one shared library with the kernels, the execution graph and the weights.

The weights are embedded with the assembler's .incbin (fast for hundreds of MB, unlike
generating source text); kiln.runtime.load_module maps them in place.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..runtime import file_checksum
from ..runtime.external import kernels_of
from ..runtime.load import BLOB_SIZE_SYMBOL, BLOB_SYMBOL, pack_blob
from ..runtime.native_build import c_compiler
from ..timings import phase


class ExportError(RuntimeError):
    """The system compiler could not link the library."""


def _asm(blob_path: Path, size: int) -> str:
    return (f'\t.section .rodata\n\t.balign 64\n\t.globl {BLOB_SYMBOL}\n'
            f'\t.type {BLOB_SYMBOL}, @object\n{BLOB_SYMBOL}:\n\t.incbin "{blob_path}"\n'
            f'\t.size {BLOB_SYMBOL}, {size}\n\t.balign 8\n\t.globl {BLOB_SIZE_SYMBOL}\n'
            f'\t.type {BLOB_SIZE_SYMBOL}, @object\n{BLOB_SIZE_SYMBOL}:\n\t.quad {size}\n'
            f'\t.size {BLOB_SIZE_SYMBOL}, 8\n{file_checksum.marker_asm()}'
            f'\t.section .note.GNU-stack,"",@progbits\n')


def export_library(model, path) -> None:
    """Write `model` (a CompiledModel) to `path` as a shared library.

    Example:
        >>> lib.export_library("model.so")   # doctest: +SKIP
    """
    path = Path(path)
    cc = c_compiler()
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
        blob_path = tmp / "blob.bin"
        blob_path.write_bytes(blob)
        asm = tmp / "blob.S"
        asm.write_text(_asm(blob_path, len(blob)))
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
