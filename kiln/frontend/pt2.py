"""Reading a saved torch.export program (.pt2) without running code that the file carries.

torch.export.load trusts its file: it unpickles pickled weight and constant payloads, custom
and opaque objects, legacy `.pt` weight files, the sample inputs (falling back to a full
unpickler when the safe one fails) and archives in the pre-2.7 format; it loads native code
from `data/aotinductor/`, evaluates the graph's symbolic shape expressions with
sympy.sympify (an eval), compiles `guards_code` into Python, imports the modules that a
pytree context names, and the graph's call targets are resolved by attribute lookup on
torch, `operator` and `math` and later run when kiln decomposes the program. Any of these
lets a crafted file run code. `load_exported_program` first reads the archive as data
(JSON and zip records, nothing unpickled) and hands it to torch only when none of that can
happen, with its sample inputs left out (torch.save pickles, which kiln does not need): so
nothing in the file is unpickled. What `torch.export.save` writes for a plain nn.Module passes.
`trust=True` skips the check, for files whose source you trust.

Example:
    >>> import torch, kiln
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())
    >>> program = torch.export.export(net, (torch.randn(1, 4),))       # doctest: +SKIP
    >>> torch.export.save(program, "net.pt2")                          # doctest: +SKIP
    >>> program = kiln.frontend.load_exported_program("net.pt2")       # doctest: +SKIP
    >>> mod, params = kiln.frontend.from_pytorch(program)              # doctest: +SKIP
"""
from __future__ import annotations

import io
import json
import os
import re
import zipfile

from .common import FrontendError

__all__ = ["load_exported_program", "check_exported_program", "UntrustedModelError"]


class UntrustedModelError(FrontendError):
    """A .pt2 file that loading would run code from (a pickle, native code, an eval'd
    string): `reason` names the archive entry and what it needs; `path` is the file.

    Example:
        >>> err = UntrustedModelError("m.pt2", "data/aotinductor/m/m.so is native code")
        >>> err.reason, str(err).endswith("load it with trust=True")
        ('data/aotinductor/m/m.so is native code', True)
    """

    def __init__(self, path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: refusing to load: {reason}; if you trust where the file came "
                         f"from, load it with trust=True")


def load_exported_program(path, trust: bool = False):
    """A torch.export ExportedProgram from a .pt2 file that torch.export.save wrote.

    Unless `trust` is true the archive is checked first (check_exported_program) and an
    UntrustedModelError says which entry would run code; an archive that is not a readable
    .pt2 raises FrontendError. With trust=True this is torch.export.load(path).

    Example:
        >>> program = load_exported_program("resnet18.pt2")            # doctest: +SKIP
        >>> mod, params = kiln.frontend.from_pytorch(program)          # doctest: +SKIP
        >>> load_exported_program("third_party.pt2")                   # doctest: +SKIP
        UntrustedModelError: third_party.pt2: refusing to load: data/weights/weight_0 (weight
        'fc.weight') is a pickle ...; if you trust where the file came from, load it with trust=True
    """
    import torch

    path = os.fspath(path)
    if trust:
        return torch.export.load(path)
    with open(path, "rb") as f:
        data = f.read()
    # The checked bytes are the loaded bytes: the file cannot change in between.
    check_exported_program(data, name=path)
    return torch.export.load(io.BytesIO(_without_sample_inputs(data)))


def _without_sample_inputs(data: bytes) -> bytes:
    """The archive with its sample-input records emptied: torch.load would unpickle them (and
    retry a failure with the full unpickler); an empty record is what torch.export.save writes
    without sample inputs, and loads as example_inputs None."""
    sample_dir = os.path.dirname(_constants().SAMPLE_INPUTS_FILENAME_FORMAT) + "/"
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            inside = info.filename.partition("/")[2]        # past the archive's folder
            dst.writestr(info, b"" if inside.startswith(sample_dir) else src.read(info))
    return out.getvalue()


def check_exported_program(data: bytes, name: str = "program") -> None:
    """Raise UntrustedModelError if torch.export.load would run code from `data` (the bytes of
    a .pt2 file), FrontendError if it is not a .pt2 archive; return None if loading it runs
    nothing from the file. Nothing is unpickled or evaluated.

    Example:
        >>> check_exported_program(open("model.pt2", "rb").read(), "model.pt2")  # doctest: +SKIP
    """
    import torch

    # The check mirrors what torch's loader reads and runs; another PyTorch may load more.
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if version not in CHECKED_TORCH_VERSIONS:
        raise UntrustedModelError(name, f"kiln's check of .pt2 files follows PyTorch "
                                        f"{', '.join(CHECKED_TORCH_VERSIONS)}'s loader, and this "
                                        f"is PyTorch {torch.__version__}")
    _ArchiveCheck(data, name).run()


# PyTorch versions (major.minor) whose torch.export.load the check was written against.
CHECKED_TORCH_VERSIONS = ("2.13",)


# --------------------------------------------------------------------------- the archive layout
def _constants():
    from torch.export.pt2_archive import constants
    return constants


class _ArchiveCheck:
    def __init__(self, data: bytes, name: str):
        self.data, self.name = data, name

    def refuse(self, reason: str):
        raise UntrustedModelError(self.name, reason)

    def run(self) -> None:
        c = _constants()
        reader = self._reader(self._zip_names())
        version = self._text(reader, c.ARCHIVE_VERSION_PATH)
        if version != c.ARCHIVE_VERSION_VALUE:
            raise FrontendError(f"{self.name}: .pt2 archive version {version!r}; this PyTorch "
                                f"reads version {c.ARCHIVE_VERSION_VALUE!r} (save it again with "
                                f"this PyTorch's torch.export.save)")
        records = list(reader.get_file_names())
        for record in records:
            if record.startswith(c.AOTINDUCTOR_DIR):
                self.refuse(f"{record} is AOTInductor native code, which loading runs")
        models = [r for r in records if r.startswith(c.MODELS_DIR)]
        if not models:
            raise FrontendError(f"{self.name}: not a readable torch.export program (the "
                                f"archive holds no {c.MODELS_DIR} entry)")
        prefix, suffix = c.MODELS_FILENAME_FORMAT.split("{}")
        for record in models:
            # torch's own reading of the model name, so the files checked are those it loads
            self._check_model(reader, record, record[len(prefix):-len(suffix)], records)

    def _zip_names(self) -> list:
        try:
            with zipfile.ZipFile(io.BytesIO(self.data)) as z:
                return z.namelist()
        except (zipfile.BadZipFile, ValueError, OSError) as err:
            raise FrontendError(f"{self.name}: not a readable torch.export program (not a zip "
                                f"archive: {err})") from None

    def _reader(self, names: list):
        from torch.export.pt2_archive import PT2ArchiveReader

        # torch.export.load falls back to the pre-2.7 format (its state dict, constants and
        # example inputs are pickles) when the archive fails to load; that fallback reads the
        # file with zipfile and looks for entries at the top level.
        top = [n for n in names if "/" not in n.strip("/")]
        old = "version" in top or "serialized_exported_program.json" in top
        try:
            reader = PT2ArchiveReader(io.BytesIO(self.data))
        except (RuntimeError, AssertionError) as err:
            if old:
                self.refuse("it is in the pre-2.7 torch.export format, whose weights and inputs "
                            "load with pickle (save it again with torch.export.save)")
            raise FrontendError(f"{self.name}: not a readable torch.export program "
                                f"({type(err).__name__}: {_first_line(err)})") from None
        if top:
            self.refuse(f"entry {top[0]!r} is outside the archive's folder, where torch's "
                        f"fallback reader for the old pickled format looks")
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            self.refuse(f"entry {dup!r} appears twice, so what is checked may not be what "
                        f"loads")
        return reader

    def _text(self, reader, record: str) -> str:
        try:
            return reader.read_string(record)
        except (RuntimeError, UnicodeDecodeError) as err:
            raise FrontendError(f"{self.name}: not a readable torch.export program ({record}: "
                                f"{_first_line(err)})") from None

    def _json(self, reader, record: str):
        try:
            return json.loads(self._text(reader, record))
        except ValueError as err:
            raise FrontendError(f"{self.name}: not a readable torch.export program ({record} "
                                f"is not JSON: {err})") from None

    # ------------------------------------------------------------------------- one model
    def _check_model(self, reader, record: str, model: str, records: list) -> None:
        c = _constants()
        for legacy in (f"{c.WEIGHTS_DIR}{model}.pt", f"{c.CONSTANTS_DIR}{model}.pt"):
            if legacy in records:
                self.refuse(f"{legacy} is a legacy weights file, which loads with pickle (save "
                            f"the program again with torch.export.save)")
        for config_record, directory, kind in (
                (c.WEIGHTS_CONFIG_FILENAME_FORMAT.format(model), c.WEIGHTS_DIR, "weight"),
                (c.CONSTANTS_CONFIG_FILENAME_FORMAT.format(model), c.CONSTANTS_DIR, "constant")):
            if config_record in records:   # a missing one: torch says so, loading nothing
                self._check_payloads(self._json(reader, config_record), directory, kind)
        self._check_program(self._json(reader, record), record)

    def _check_payloads(self, config, directory: str, kind: str) -> None:
        c = _constants()
        entries = config.get("config") if isinstance(config, dict) else None
        if not isinstance(entries, dict):
            return                         # torch rejects the config before loading any of it
        for fqn, meta in entries.items():
            meta = meta if isinstance(meta, dict) else {}
            where = f"{directory}{meta.get('path_name')} ({kind} {fqn!r})"
            if meta.get("use_pickle"):
                self.refuse(f"{where} is a pickle, which loading runs")
            path_name = str(meta.get("path_name"))
            if kind == "constant" and not path_name.startswith(c.TENSOR_CONSTANT_FILENAME_PREFIX):
                self.refuse(f"{where} is a custom or opaque object, which loads with pickle")

    # ----------------------------------------------------------------------- the graph JSON
    def _check_program(self, program, record: str) -> None:
        if not isinstance(program, dict):
            return
        if program.get("guards_code"):
            self.refuse(f"{record} holds guards_code, Python source that loading compiles "
                        f"(a program exported with dynamic shapes; kiln compiles static ones)")
        for node in _walk(program):
            if not isinstance(node, dict):
                continue
            if isinstance(node.get("expr_str"), str) and not _plain_expr(node["expr_str"]):
                self.refuse(f"{record}: the symbolic expression {node['expr_str'][:60]!r} is "
                            f"not plain arithmetic, and loading evaluates it")
            target = node.get("target")
            if isinstance(target, str) and "inputs" in node and "outputs" in node:
                problem = _target_problem(target)
                if problem:
                    self.refuse(f"{record}: node {node.get('name')!r} calls {target!r}, "
                                f"{problem}")
            # an operator passed as an argument (to a higher-order op, which may call it)
            if isinstance(node.get("as_operator"), str):
                problem = _target_problem(node["as_operator"])
                if problem:
                    self.refuse(f"{record}: an argument names {node['as_operator']!r}, "
                                f"{problem}")
            for key in ("in_spec", "out_spec"):
                if isinstance(node.get(key), str):
                    problem = _treespec_problem(node[key])
                    if problem:
                        self.refuse(f"{record}: a {key} {problem}")


def _first_line(err) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _walk(value):
    stack = [value]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# ---------------------------------------------------------------------------- graph call targets
# `operator` functions that compute on values; attrgetter, methodcaller, call and the like
# would reach any Python object.
_OPERATOR_NAMES = frozenset("""
    getitem add sub mul truediv floordiv mod pow neg pos abs invert and_ or_ xor not_ eq ne lt
    le gt ge lshift rshift matmul truth index
""".split())
_TORCH_SYM_NAMES = frozenset("""
    sym_int sym_float sym_max sym_min sym_not sym_ite sym_sum sym_sqrt _sym_sqrt sym_fresh_size
    _assert _check _check_is_size _assert_async _assert_scalar
""".split())


def _target_problem(target: str) -> str | None:
    """Why a node's call target is unsafe (None if it is a PyTorch operator or a plain
    arithmetic function), resolved as torch's deserializer resolves it."""
    if target.startswith("#"):
        return "an extension operator, which loading resolves by running registered code"
    if target.startswith("_operator"):
        names = target.split(".")[1:]
        if len(names) == 1 and names[0] in _OPERATOR_NAMES:
            return None
        return "which is not an arithmetic operator"
    if target.startswith("math"):
        names = target.split(".")[1:]
        import math
        if len(names) == 1 and re.fullmatch(r"[a-z][a-z0-9]*", names[0]) \
                and callable(getattr(math, names[0], None)):
            return None
        return "which is not a math function"
    if not target.startswith("torch"):
        # torch 2.13 keeps such a target as a string, but a later version may resolve more
        # prefixes (builtins.eval ...): refuse what is not known to be safe.
        return "which is not a PyTorch operator or an arithmetic function"
    names = target.split(".")[1:]
    if len(names) == 1 and names[0] in _TORCH_SYM_NAMES:
        return None
    if len(names) < 3 or names[0] != "ops" or not all(
            re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", n) for n in names[1:]):
        return "which is not a PyTorch operator (torch.ops.NAMESPACE.OP)"
    import torch
    from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket
    value = torch
    for part in names:
        if not hasattr(value, part):
            return "which this PyTorch does not have"
        value = getattr(value, part)
    if isinstance(value, (OpOverload, OpOverloadPacket, HigherOrderOperator)):
        return None
    return "which is not a PyTorch operator"


# ------------------------------------------------------------------------ symbolic expressions
# Loading parses each expression with sympy.sympify, that is eval: only arithmetic on shape
# symbols (s0, u1, zuf0 ...) and these sympy names may reach it.
_SYMPY_NAMES = frozenset("""
    FloorDiv ModularIndexing Where PythonMod Mod CleanDiv CeilToInt FloorToInt CeilDiv LShift
    RShift PowByNatural FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator
    TruncToFloat TruncToInt RoundToInt RoundDecimal ToFloat Identity Max Min Abs Eq Ne Lt Le Gt
    Ge And Or Not True False oo floor ceiling sqrt Piecewise Integer Rational
""".split())
_EXPR_CHARS = re.compile(r"[A-Za-z0-9_ +\-*/%(),.<>=!&|~]*")


def _plain_expr(text: str) -> bool:
    if not _EXPR_CHARS.fullmatch(text) or re.search(r"\.\s*[A-Za-z_]", text):
        return False
    # sympify evaluates numbers as it parses: 9**9**9**9 would not finish (torch writes powers
    # as PowByNatural, sizes in under 19 digits)
    if "**" in text or re.search(r"[0-9]{19}", text) or len(text) > 10_000:
        return False
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
        if word not in _SYMPY_NAMES and not re.fullmatch(r"[a-z]+[0-9]+", word):
            return False
    return True


# ----------------------------------------------------------------------------------- treespecs
# Default factories of defaultdict contexts that build an empty container and nothing else.
_DEFAULT_FACTORIES = frozenset(("builtins", name) for name in
                               ("list", "dict", "set", "tuple", "int", "float", "str")) | {
    ("collections", "OrderedDict")}

def _treespec_problem(text: str) -> str | None:
    # A context decoded with torch's enum hook imports the module that "__enum__" names; a
    # defaultdict context imports its default factory's module.
    try:
        spec = json.loads(text)
    except ValueError:
        return None                  # torch fails on it, importing nothing
    for node in _walk(spec):
        if isinstance(node, dict) and isinstance(node.get("context"), str):
            try:
                context = json.loads(node["context"])
            except ValueError:
                continue
            for item in _walk(context):
                if isinstance(item, dict) and "__enum__" in item:
                    return f"names the enum {item.get('fqn')!r}, whose module loading imports"
                if isinstance(item, dict) and "default_factory_module" in item and (
                        item.get("default_factory_module"),
                        item.get("default_factory_name")) not in _DEFAULT_FACTORIES:
                    return (f"names the default factory {item.get('default_factory_module')}."
                            f"{item.get('default_factory_name')}, which loading imports and "
                            f"calls")
    return None

