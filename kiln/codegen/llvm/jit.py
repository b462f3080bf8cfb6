"""The "llvm" back-end: emit IR text, verify, optimize at O3, generate machine code and link it
into a long-lived ORC JIT (LLJIT), one JIT library per build.

One target machine per target serves the pass pipeline and object emission; the JIT owns a
second one (a target machine handed to a JIT belongs to it). A library stays loaded while the
Module built from it (or a function taken from it) lives.
"""
from __future__ import annotations

import itertools
import re
import threading

import llvmlite.binding as llvm

from ...target import Target
from ...timings import phase
from ..common import SYMBOL_PREFIX, CodegenError, ErrorTable, prepare, symbol_of
from ..compiled import CompiledModule
from .function import ModuleEmitter

_lock = threading.RLock()          # LLVM's global context is not safe to use from two threads
_machines: dict[tuple, "_Machine"] = {}
_library_ids = itertools.count()
_initialized = False


def _initialize() -> None:
    global _initialized
    if not _initialized:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _initialized = True


class _Machine:
    """Target machines and the JIT for one target."""

    def __init__(self, target: Target):
        _initialize()
        self.triple = target.mtriple
        self.llvm_target = llvm.Target.from_triple(self.triple)
        self.tm = self._target_machine(target)
        self.data_layout = str(self.tm.target_data)
        self.opt_level = target.opt_level
        self.jit = llvm.create_lljit_compiler(self._target_machine(target), use_jit_link=True)

    def _target_machine(self, target: Target):
        return self.llvm_target.create_target_machine(
            cpu=target.mcpu, features=target.features, opt=target.opt_level, reloc="pic",
            codemodel="small")

    def optimize(self, module) -> None:
        pto = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
        pto.loop_vectorization = self.opt_level >= 2
        pto.slp_vectorization = self.opt_level >= 2
        pto.loop_unrolling = self.opt_level >= 2
        pb = llvm.create_pass_builder(self.tm, pto)
        pb.getModulePassManager().run(module, pb)


def machine_for(target: Target) -> _Machine:
    """The (cached) target machines and JIT of a target; only this machine's triple can run.

    Example:
        >>> machine_for(Target("llvm")).triple   # doctest: +SKIP
        'x86_64-unknown-linux-gnu'
    """
    key = (target.mtriple, target.mcpu, target.features, target.opt_level)
    with _lock:
        machine = _machines.get(key)
        if machine is None:
            if not target.is_host and target.mtriple != llvm.get_process_triple():
                raise CodegenError(f"target {target} is for {target.mtriple}; the LLVM JIT runs "
                                   f"code for this machine ({llvm.get_process_triple()}) only")
            machine = _machines[key] = _Machine(target)
        return machine


def emit_ir(funcs, target: Target, errors: ErrorTable) -> tuple[str, bool]:
    """LLVM IR text for PrimFuncs (already checked and lowered) and whether it calls the support
    library (kiln.runtime.support_lib).

    Example:
        >>> text, uses_runtime = emit_ir([f], Target("llvm"), ErrorTable())   # doctest: +SKIP
    """
    return ModuleEmitter.emit(funcs, errors)


def parse_and_verify(text: str, names: list[str]):
    """Parse and verify IR before anything can run it (invalid IR may abort the process);
    errors name the kiln function at fault.

    Example:
        >>> module = parse_and_verify(ir_text, ["f"])   # doctest: +SKIP
    """
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as err:
        where = _function_at(text, str(err)) or ", ".join(names)
        raise CodegenError(f"kiln generated invalid LLVM IR for function(s) {where}: "
                           f"{str(err).strip()}") from None
    return module


def _function_at(text: str, message: str) -> str | None:
    match = re.search(r":(\d+):\d+: error", message)
    if match:
        lines = text.splitlines()[: int(match.group(1))]
        for line in reversed(lines):
            found = re.match(r'define .*@"([^"]+)"', line)
            if found:
                return found.group(1).split("__")[0]
    match = re.search(r'@"([^"]+)"', message)
    return match.group(1).split("__")[0].removeprefix(SYMBOL_PREFIX) if match else None


def build_llvm(funcs, target: Target, entry: str | None) -> CompiledModule:
    """Compile PrimFuncs with LLVM into this process.

    Example:
        >>> mod = build_llvm([f], Target("llvm"), "f")   # doctest: +SKIP
    """
    with phase("codegen.prepare"):
        prep = prepare(funcs, target)
    names = list(prep.infos)
    with phase("codegen.emit_ir"):
        text, uses_runtime = emit_ir(prep.funcs, target, prep.errors)
    machine = machine_for(target)
    runtime_symbols = {}
    if uses_runtime:
        from ...runtime import support_symbol_addresses
        runtime_symbols = support_symbol_addresses()
    with _lock:
        with phase("llvm.parse_verify"):
            module = parse_and_verify(text, names)
        module.triple = machine.triple
        module.data_layout = machine.data_layout
        with phase("llvm.optimize"):
            machine.optimize(module)
            optimized = str(module)
        with phase("llvm.machine_code"):
            obj = machine.tm.emit_object(module)
        with phase("llvm.link"):
            lib = llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
            for name, address in runtime_symbols.items():
                lib.import_symbol(name, address)
            for name in names:
                lib.export_symbol(symbol_of(name))
            try:
                tracker = lib.link(machine.jit, f"kiln_lib{next(_library_ids)}")
            except RuntimeError as err:
                raise CodegenError(f"linking {', '.join(names)} failed: {err}") from None

    def assembly() -> str:
        with _lock:
            return machine.tm.emit_assembly(llvm.parse_assembly(optimized))

    sources = {"ll": optimized, "ll.in": text, "errors": prep.errors.to_json()}
    mod = CompiledModule(prep.infos, lambda name: tracker[symbol_of(name)], sources, entry, tracker,
                         "llvm", lazy_sources={"asm": assembly}, errors=prep.errors)
    mod.object_code = obj
    return mod
