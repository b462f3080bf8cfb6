"""The "llvm" back-end: emit IR text, verify, optimize at O3, generate machine code and link it
into a long-lived ORC JIT (LLJIT), one JIT library per build.

One target machine per target serves the pass pipeline and object emission; the JIT owns a
second one (a target machine handed to a JIT belongs to it). A library stays loaded while the
Module built from it (or a function taken from it) lives.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import replace
from typing import NamedTuple

import llvmlite.binding as llvm

from ...target import Target
from ...timings import phase
from ..common import (SYMBOL_PREFIX, CodegenError, ErrorTable, cross_address, prepare,
                      symbol_of)
from ..compiled import CompiledModule
from .function import ModuleEmitter

_lock = threading.RLock()          # LLVM's global context is not safe to use from two threads
_machines: dict[tuple, "_Machine"] = {}
_library_ids = itertools.count()
_initialized = False


def _initialize(cross: bool) -> None:
    global _initialized
    if not _initialized:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _initialized = True
    if cross:                     # every target LLVM was built with (AArch64, ...); idempotent
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()


class _Machine:
    """Target machines and, for this machine's instruction set, the JIT for one target."""

    def __init__(self, target: Target):
        _initialize(target.is_cross)
        self.triple = target.mtriple
        try:
            self.llvm_target = llvm.Target.from_triple(self.triple)
        except RuntimeError as err:
            raise CodegenError(f"target {target}: LLVM cannot generate code for "
                               f"{self.triple} ({err})") from None
        self.tm = self._target_machine(target)
        self.data_layout = str(self.tm.target_data)
        self.opt_level = target.opt_level
        self.jit = None if target.is_cross else llvm.create_lljit_compiler(
            self._target_machine(target), use_jit_link=True)

    def _target_machine(self, target: Target):
        return self.llvm_target.create_target_machine(
            cpu=target.mcpu, features=target.features, opt=target.opt_level, reloc="pic",
            codemodel="small")

    def optimize(self, module, slp: bool = True) -> None:
        pto = llvm.create_pipeline_tuning_options(speed_level=self.opt_level)
        # LLVM's loop vectorizer stays off. kiln vectorizes what its schedules ask for; on
        # the loops they leave scalar, LLVM 22's loop vectorizer miscompiled a masked index
        # (a fused loop's i % 4, which InstCombine makes `and`/`or disjoint`) into
        # consecutive loads: a matmul scheduled fuse(i, j) + reorder(r, ij) read the wrong
        # row of B (tests/codegen/test_codegen_llvm_vectorizer.py). Turning it off changed
        # ResNet-18, MobileNet-V2 and BERT-base run times by -2..+1% (noise).
        pto.loop_vectorization = False
        pto.slp_vectorization = slp and self.opt_level >= 2
        pto.loop_unrolling = self.opt_level >= 2
        pb = llvm.create_pass_builder(self.tm, pto)
        pb.getModulePassManager().run(module, pb)


def machine_for(target: Target) -> _Machine:
    """The (cached) target machines and JIT of a target; a cross target has no JIT.

    Example:
        >>> machine_for(Target("llvm")).triple   # doctest: +SKIP
        'x86_64-unknown-linux-gnu'
    """
    key = (target.mtriple, target.mcpu, target.features, target.opt_level)
    with _lock:
        machine = _machines.get(key)
        if machine is None:
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


class ObjectCode(NamedTuple):
    """One LLVM module compiled to a relocatable object: the unit kiln caches and links.

    `functions` are the signatures of its public functions, `errors` the messages behind the
    statuses its checks return, `ll` / `ll_in` its IR after / before optimization, and
    `uses_runtime` whether it calls the support library (kiln.runtime.support_lib).
    """

    object: bytes
    functions: dict
    errors: ErrorTable
    ll: str
    ll_in: str
    uses_runtime: bool


def compile_object(funcs, target: Target, max_ir_lines: int | None = None) -> ObjectCode:
    """Compile PrimFuncs as one LLVM module to an object file (nothing is loaded). With
    `max_ir_lines`, IR longer than that is refused (CodegenError) before LLVM works on it.

    Example:
        >>> obj = compile_object([f], Target("llvm"))   # doctest: +SKIP
        >>> obj.object[:4]                              # doctest: +SKIP
        b'\\x7fELF'
    """
    with phase("codegen.prepare"):
        prep = prepare(funcs, target)
    names = list(prep.infos)
    with phase("codegen.emit_ir"):
        text, uses_runtime = emit_ir(prep.funcs, target, prep.errors)
    if max_ir_lines is not None and (lines := text.count("\n")) > max_ir_lines:
        raise CodegenError(f"{', '.join(names)}: {lines} lines of LLVM IR, over the bound of "
                           f"{max_ir_lines}")
    machine = machine_for(target)
    with _lock:
        with phase("llvm.parse_verify"):
            module = parse_and_verify(text, names)
        module.triple = machine.triple
        module.data_layout = machine.data_layout
        with phase("llvm.optimize"):
            machine.optimize(module)
            module = _valid_optimized(module, text, names, machine)
            optimized = str(module)
        with phase("llvm.machine_code"):
            obj = machine.tm.emit_object(module)
    return ObjectCode(obj, prep.infos, prep.errors, optimized, text, uses_runtime)


def _valid_optimized(module, text: str, names: list, machine: "_Machine"):
    """The optimized module, checked: LLVM 22's SLP vectorizer turned three plain loop nests
    (stencil-like stages at the root, unrolled) into IR where a shufflevector used a load
    before it, and machine code generation then aborted the process. Such a module is
    optimized again from kiln's IR without the SLP vectorizer; if that is invalid too, a
    CodegenError names the functions.

    Example:
        >>> module = _valid_optimized(module, ir_text, ["f"], machine)  # doctest: +SKIP
    """
    try:
        module.verify()
        return module
    except RuntimeError:
        pass
    module = parse_and_verify(text, names)
    module.triple, module.data_layout = machine.triple, machine.data_layout
    machine.optimize(module, slp=False)
    try:
        module.verify()
    except RuntimeError as err:
        raise CodegenError(f"LLVM's optimizer made invalid IR of function(s) "
                           f"{', '.join(names)}: {str(err).strip()}") from None
    return module


def link_objects(objects, target: Target, entry: str | None,
                 names: dict | None = None) -> CompiledModule:
    """Link compiled objects into this process (the JIT) as one Module; for a cross target, a
    Module of the objects alone, to export (its functions cannot be called). `names` maps the names
    the Module shows to the names the objects were compiled under (default: the same), so that
    one cached object serves a kernel under whatever name each model gives it.

    Example:
        >>> mod = link_objects([compile_object([f], target)], target, "f")   # doctest: +SKIP
    """
    compiled = {name: (obj, k) for k, obj in enumerate(objects) for name in obj.functions}
    names = dict(names) if names is not None else {name: name for name in compiled}
    missing = sorted(set(names.values()) - set(compiled))
    if missing:
        raise CodegenError(f"link_objects: no object defines {missing}")
    machine = machine_for(target)
    if machine.jit is None:         # code for another instruction set: to export, not run
        return _module(objects, compiled, names, entry, machine, cross_address(target), None)
    runtime_symbols = {}
    if any(obj.uses_runtime for obj in objects):
        from ...runtime import support_symbol_addresses
        runtime_symbols = support_symbol_addresses()
    with _lock, phase("llvm.link"):
        lib = llvm.JITLibraryBuilder()
        for obj in objects:
            lib.add_object_img(obj.object)
        lib.add_current_process()
        for name, address in runtime_symbols.items():
            lib.import_symbol(name, address)
        for compiled_name in names.values():
            lib.export_symbol(symbol_of(compiled_name))
        try:
            tracker = lib.link(machine.jit, f"kiln_lib{next(_library_ids)}")
        except RuntimeError as err:
            raise CodegenError(f"linking {', '.join(names)} failed: {err}") from None
    return _module(objects, compiled, names, entry, machine,
                   lambda name: tracker[symbol_of(names[name])], tracker)


def _module(objects, compiled, names, entry, machine, address, keepalive) -> CompiledModule:
    """The Module of linked (or, for a cross target, only compiled) objects."""
    infos = {shown: replace(compiled[inner][0].functions[inner], name=shown)
             for shown, inner in names.items()}
    tables = {shown: renamed_errors(compiled[inner][0].errors, inner, shown)
              for shown, inner in names.items()}
    ll = "\n".join(obj.ll for obj in objects)

    def assembly() -> str:
        with _lock:
            return "\n".join(machine.tm.emit_assembly(llvm.parse_assembly(obj.ll))
                             for obj in objects)

    sources = {"ll": ll, "ll.in": "\n".join(obj.ll_in for obj in objects),
               "errors": json.dumps({n: json.loads(t.to_json()) for n, t in tables.items()},
                                    indent=1) if len(objects) > 1 else objects[0].errors.to_json()}
    mod = CompiledModule(infos, address, sources, entry, keepalive, "llvm",
                         lazy_sources={"asm": assembly}, errors=tables)
    mod.object_codes = [obj.object for obj in objects]
    mod.symbol_aliases = {symbol_of(shown): symbol_of(inner) for shown, inner in names.items()
                          if shown != inner}
    return mod


def renamed_errors(errors: ErrorTable, old: str, new: str) -> ErrorTable:
    """The messages of `errors` with the function name `old` they begin with read as `new`.

    Example:
        >>> t = ErrorTable(); t.code("k1: assert n > 0")
        1
        >>> renamed_errors(t, "k1", "conv_0").message(1)
        'conv_0: assert n > 0'
    """
    if old == new:
        return errors
    # Positions are kept: the generated code returns them (code() would merge equal texts).
    return ErrorTable.from_messages(
        [new + m[len(old):] if m.startswith(old + ":") else m for m in errors.messages])


def build_llvm(funcs, target: Target, entry: str | None) -> CompiledModule:
    """Compile PrimFuncs with LLVM into this process.

    Example:
        >>> mod = build_llvm([f], Target("llvm"), "f")   # doctest: +SKIP
    """
    return link_objects([compile_object(funcs, target)], target, entry)
