"""What several commands share: reading a model file into kiln's graph IR (by suffix), the
--target and --input-shape options, loading a compiled library and checking an inputs .npz
against it. Tensor types and sizes print as kiln.runtime.describe writes them.

Example:
    >>> parse_input_shape("data:1x3x224x224")
    ('data', (1, 3, 224, 224))
    >>> format_shape((1, 3, 224, 224))
    '1x3x224x224'
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import zipfile
from pathlib import Path

import numpy as np

from kiln.runtime.describe import byte_text, tensor_text
from kiln.runtime.model import TensorSpec

from .errors import CLIError, one_line

SHAPE_FORM = "NAME:DIMS such as data:1x3x224x224"
MAX_COUNT = 1_000_000          # the largest --number, --repeat, --trials
MAX_ELEMENTS = 2 ** 31 - 1     # elements of one tensor


def format_shape(shape) -> str:
    """A shape as the CLI writes it: dimensions joined by "x" ("scalar" for no dimensions).

    Example:
        >>> format_shape((1, 3, 32, 32)), format_shape(())
        ('1x3x32x32', 'scalar')
    """
    return "x".join(str(int(d)) for d in shape) if len(shape) else "scalar"


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """(name, shape) from an --input-shape value "NAME:D1xD2x...". The name is everything before
    the last colon, so names with colons ("input:0") work; commas may separate dimensions too.

    Example:
        >>> parse_input_shape("input:0:1,3,8,8")
        ('input:0', (1, 3, 8, 8))
    """
    name, colon, dims = str(text).rpartition(":")
    if not colon or not name:
        raise CLIError(f"bad --input-shape {text!r}: expected {SHAPE_FORM}")
    words = dims.replace(",", "x").split("x")
    if not all(w.strip().isdigit() and int(w) > 0 for w in words):
        raise CLIError(f"bad --input-shape {text!r}: dimensions must be positive integers "
                       f"joined by 'x' (expected {SHAPE_FORM})")
    shape = tuple(int(w) for w in words)
    elements = math.prod(shape)
    if elements > MAX_ELEMENTS:
        raise CLIError(f"bad --input-shape {text!r}: {elements:,} elements; kiln's kernels index "
                       f"a tensor with 32-bit integers, so at most {MAX_ELEMENTS:,}")
    return name, shape


def parse_input_shapes(values) -> dict[str, tuple[int, ...]]:
    """{name: shape} from repeated --input-shape values (None or [] -> {}).

    Example:
        >>> parse_input_shapes(["a:1x4", "b:2"])
        {'a': (1, 4), 'b': (2,)}
    """
    shapes: dict = {}
    for text in values or ():
        name, shape = parse_input_shape(text)
        if name in shapes:
            raise CLIError(f"--input-shape gives input {name!r} twice")
        shapes[name] = shape
    return shapes


def positive_int(text: str) -> int:
    """An argparse `type` for options that take a positive integer (--trials, --number ...), at
    most MAX_COUNT: a larger count is a typo, and would run for days.

    Example:
        >>> positive_int("8")
        8
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 0 < value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected a positive integer of at most {MAX_COUNT:,}, "
                                         f"got {text!r}")
    return value


def seed_int(text: str) -> int:
    """An argparse `type` for --seed: an integer from 0 to 2**32 - 1 (what the search's random
    generators take).

    Example:
        >>> seed_int("7")
        7
    """
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2 ** 32:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {2 ** 32 - 1}, got "
                                         f"{text!r}")
    return value


def existing_file(path, what: str = "file") -> Path:
    """`path` as a Path, or a CLIError saying that it is missing or not a file.

    Example:
        >>> existing_file("/etc/hostname").name                # doctest: +SKIP
        'hostname'
    """
    path = Path(path)
    if not path.exists():
        raise CLIError(f"{path}: no such {what}")
    if not path.is_file():
        raise CLIError(f"{path}: not a file")
    return path


def output_path(path, what: str = "output", option: str = "-o", inputs=None) -> Path:
    """`path` (given as `option`) as a Path whose directory exists and that is none of the files
    the command reads: `inputs` maps how a message names each one ("the model", "the --inputs
    file") to its path, None for an option not given. Writing over an input would destroy it,
    so that is a CLIError, raised before anything is written.

    Example:
        >>> output_path("model.so")
        PosixPath('model.so')
        >>> output_path("m.onnx", "library", inputs={"the model": "m.onnx"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        kiln.cli.errors.CLIError: -o m.onnx is the model m.onnx: refusing to write the library ...
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"cannot write {what} {path}: directory {parent} does not exist")
    if path.is_dir():
        raise CLIError(f"cannot write {what} {path}: it is a directory")
    for label, source in (inputs or {}).items():
        if source is not None and same_file(path, source):
            raise CLIError(f"{option} {path} is {label} {source}: refusing to write the {what} "
                           f"over it; choose another file")
    return path


def same_file(a, b) -> bool:
    """Whether paths a and b name one file: through symlinks and hard links when both exist
    (device and inode), by their resolved paths otherwise.

    Example:
        >>> same_file("model.onnx", "./model.onnx")
        True
    """
    try:
        return os.path.samefile(a, b)
    except OSError:         # one is missing (or unreadable): compare where they point
        return os.path.realpath(a) == os.path.realpath(b)


def add_model_arguments(parser) -> None:
    """--target, --input-shape, --trust and --fallback, shared by the commands that read a model
    file.

    Example:
        >>> add_model_arguments(argparse.ArgumentParser())    # doctest: +SKIP
    """
    parser.add_argument("--target", default="llvm",
                        help="compilation target, e.g. 'llvm' (default: the host CPU), "
                             "'llvm -mcpu=skylake-avx512', 'opencl' or 'cuda -arch=sm_80'")
    parser.add_argument("--input-shape", action="append", metavar="NAME:DIMS",
                        help="the shape of an input, e.g. data:1x3x224x224 (repeat for several "
                             "inputs; needed for ONNX inputs with dynamic dimensions)")
    parser.add_argument("--trust", action="store_true",
                        help="load a .pt2 file even if loading it runs code it carries "
                             "(pickled objects, native code); only for files from a source you "
                             "trust")
    parser.add_argument("--fallback", choices=["onnxruntime"], default=None,
                        help="run the ONNX nodes kiln cannot import in ONNX Runtime instead of "
                             "refusing the model (.onnx only)")


def parse_target(text: str):
    """The kiln Target for a --target value (a CLIError naming the problem otherwise).

    Example:
        >>> parse_target("llvm").kind
        'llvm'
    """
    from kiln.target import Target
    try:
        return Target(text)
    except ValueError as err:
        raise CLIError(f"bad --target: {err}") from None


def _load_onnx(path: Path, shapes: dict, trust: bool = False, fallback: str | None = None):
    from kiln.frontend import from_onnx
    _check_onnx_inputs(path, shapes)
    return from_onnx(str(path), shape_dict=shapes or None, fallback=fallback)


def _onnx_inputs(path: Path) -> dict | None:
    """{input name: dims (int, or the dim_param / "?" of a dynamic one)}, None when the file
    cannot be read (from_onnx then says why)."""
    import onnx
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:       # protobuf and onnx raise several kinds; from_onnx reports them
        return None
    weights = {init.name for init in graph.initializer}
    inputs = {}
    for info in graph.input:
        if info.name in weights or not info.type.tensor_type.HasField("shape"):
            continue
        inputs[info.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                             for d in info.type.tensor_type.shape.dim]
    return inputs


def _check_onnx_inputs(path: Path, shapes: dict) -> None:
    # Checked here, not left to from_onnx, so the message names the CLI option (--input-shape),
    # not the Python argument (shape_dict).
    inputs = _onnx_inputs(path)
    if inputs is None:
        return
    for name in shapes:
        if name not in inputs:
            raise CLIError(f"--input-shape names {name!r}, which is not an input of {path}; its "
                           f"inputs are {', '.join(inputs) or 'none'}")
    for name, shape in shapes.items():
        dims = inputs[name]
        fixed = [d for d in dims if isinstance(d, int)]
        if fixed and (len(dims) != len(shape) or any(
                isinstance(d, int) and d != s for d, s in zip(dims, shape))):
            # Allowed (re-batching a static model is common), but said: the file fixed it.
            shown = "x".join(str(d) for d in dims)
            logging.getLogger("kiln").warning(
                f"note: --input-shape {name}:{format_shape(shape)} overrides the shape {shown} "
                f"that {path} gives input {name!r}")
    for name, dims in inputs.items():
        if name not in shapes and not all(isinstance(d, int) for d in dims):
            shown = "x".join(str(d) for d in dims)
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
            raise CLIError(f"{path}: input {name!r} has dynamic shape {shown}; give its shape "
                           f"with --input-shape {name}:{example}")


def _load_pt2(path: Path, shapes: dict, trust: bool = False, fallback: str | None = None):
    if fallback is not None:
        raise CLIError(f"{path}: --fallback {fallback} applies to ONNX models; a PyTorch "
                       f"model runs the ops kiln lacks in PyTorch through "
                       f"torch.compile(backend='kiln')")
    try:
        import torch  # noqa: F401  (only to say what is missing)
    except ImportError:
        raise CLIError(f"{path}: reading a .pt2 program needs PyTorch (pip install torch)",
                       status=1) from None
    from kiln.frontend import FrontendError, from_pytorch
    from kiln.frontend.pt2 import UntrustedModelError, load_exported_program
    if not zipfile.is_zipfile(path):
        raise CLIError(f"{path}: not a readable torch.export program (not a zip archive; write "
                       f"one with torch.export.save)")
    # On a bad archive torch.export.load logs the real error with its traceback, then raises
    # "check the warnings above": keep the log quiet and report the logged error instead.
    # (torch._export's serializer logs its unpickling fallback with a broken format string.)
    with _captured_exceptions("torch.export") as logged, _captured_exceptions("torch._export"):
        try:
            program = load_exported_program(path, trust=trust)
        except UntrustedModelError as err:
            raise CLIError(f"{path}: refusing to load: {err.reason}; if you trust where the "
                           f"file came from, rerun with --trust") from None
        except FrontendError as err:
            raise CLIError(one_line(err)) from None
        except Exception as err:        # torch raises many kinds for a file it cannot read
            cause = logged[-1] if logged else err
            raise CLIError(f"{path}: not a readable torch.export program "
                           f"({type(cause).__name__}: {one_line(cause)})") from err
    mod, params = from_pytorch(program)
    _check_fixed_shapes(path, mod, params, shapes)
    return mod, params


@contextlib.contextmanager
def _captured_exceptions(logger_name: str):
    """Within the block, what `logger_name` logs is not shown; the exceptions it logs (with
    exc_info) are collected in the list yielded."""
    logger = logging.getLogger(logger_name)
    caught: list = []
    handler = logging.Handler()
    handler.emit = lambda record: caught.append(record.exc_info[1]) if record.exc_info else None
    # torch attaches its own handler to its loggers: replace the handlers, not just propagation.
    saved = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [handler], False
    try:
        yield caught
    finally:
        logger.handlers, logger.propagate = saved


def _check_fixed_shapes(path, mod, params, shapes: dict) -> None:
    # A saved torch.export program fixes its input shapes: --input-shape may only repeat them.
    inputs = {s.name: s for s in model_inputs(mod, params)}
    for name, shape in shapes.items():
        if name not in inputs:
            raise CLIError(f"--input-shape names {name!r}, which is not an input of {path}; its "
                           f"inputs are {', '.join(inputs) or 'none'}")
        if tuple(inputs[name].shape) != tuple(shape):
            raise CLIError(f"--input-shape {name}:{format_shape(shape)} differs from the shape "
                           f"{format_shape(inputs[name].shape)} that {path} was exported with "
                           f"(a .pt2 program fixes its input shapes; export it again)")


# Model file suffix -> loader(path, {input name: shape}, trust) -> (IRModule, params).
LOADERS = {".onnx": _load_onnx, ".pt2": _load_pt2}


def load_model(path, input_shapes: dict | None = None, trust: bool = False,
               fallback: str | None = None):
    """(IRModule, params) from a model file, chosen by suffix: .onnx (input_shapes set or
    override input shapes) or .pt2 (a saved torch.export program; input_shapes may only repeat
    the exported shapes; one whose loading would run code it carries is refused unless
    `trust`, see kiln.frontend.load_exported_program; `fallback` as from_onnx's). Unknown
    suffixes and missing files raise CLIError.

    Example:
        >>> mod, params = load_model("model.onnx", {"data": (1, 3, 224, 224)})  # doctest: +SKIP
    """
    path = existing_file(path, "model file")
    loader = LOADERS.get(path.suffix.lower())
    if loader is None:
        raise CLIError(f"{path}: unsupported model file type {path.suffix or '(no suffix)'!r}; "
                       f"kiln reads {', '.join(LOADERS)}")
    return loader(path, dict(input_shapes or {}), trust, fallback)


def model_inputs(mod, params) -> list[TensorSpec]:
    """The inputs of a graph module's main that params does not bind, in order.

    Example:
        >>> [str(s) for s in model_inputs(mod, params)]       # doctest: +SKIP
        ['x: float32[1x3x32x32]']
    """
    bound = set(params or ())
    return [TensorSpec(p.name_hint, tuple(int(d) for d in p.checked_type.shape),
                       str(p.checked_type.dtype))
            for p in mod["main"].params if p.name_hint not in bound]


def load_library(path):
    """A model library from a path, with one-line errors for missing or foreign files (a model
    file given where a library is expected says how to compile it).

    Example:
        >>> lib = load_library("model.so")                      # doctest: +SKIP
    """
    from kiln.runtime import ModelError, load_module
    path = existing_file(path, "model library")
    if path.suffix.lower() in LOADERS:
        raise CLIError(f"{path} is a model, not a compiled library; compile it first: "
                       f"kiln compile {path} -o {path.with_suffix('.so').name}")
    try:
        return load_module(str(path))
    except ModelError as err:
        raise CLIError(str(err)) from None


def out_of_memory(err: MemoryError, path, lib) -> CLIError:
    """The error to raise when running the library at `path` ran out of memory: names the
    input shapes it was compiled for, the usual cause.

    Example:
        >>> raise out_of_memory(err, "model.so", lib)          # doctest: +SKIP
        kiln: error: model.so: not enough memory to run it (Unable to allocate 56.1 GiB ...); ...
    """
    specs = ", ".join(str(s) for s in lib.input_specs()) or "none"
    return CLIError(f"{path}: not enough memory to run it ({one_line(err)}); it was compiled "
                    f"for inputs {specs}: compile it again with smaller --input-shape values",
                    status=1)


def read_inputs(path, lib) -> dict[str, np.ndarray]:
    """The arrays of an .npz file checked against the library's inputs: every input present,
    no extra key, each of the input's exact shape and dtype.

    Example:
        >>> read_inputs("inputs.npz", lib)["x"].shape           # doctest: +SKIP
        (1, 3, 32, 32)
    """
    specs = lib.input_specs()
    if path is None:
        if specs:
            raise CLIError(f"the model needs inputs ({', '.join(map(str, specs))}): give them "
                           f"with --inputs FILE.npz")
        return {}
    path = existing_file(path, "inputs file")
    if not zipfile.is_zipfile(path):    # np.load would take it for a .npy or a pickle
        raise CLIError(f"{path}: not a readable .npz file of arrays (not a zip archive; write "
                       f"one with np.savez)")
    try:
        # allow_pickle=False: an .npz of plain arrays is all kiln reads (no code from files).
        with np.load(str(path), allow_pickle=False) as loaded:
            arrays = {key: loaded[key] for key in loaded.files}
    except Exception as err:    # zipfile, pickle refusal, truncated data: all "unreadable"
        raise CLIError(f"{path}: not a readable .npz file of arrays ({type(err).__name__}: "
                       f"{one_line(err)})") from None
    names = [s.name for s in specs]
    extra = [key for key in arrays if key not in names]
    if extra:
        raise CLIError(f"{path}: {', '.join(map(repr, extra))} "
                       f"{'is not an input' if len(extra) == 1 else 'are not inputs'} of the "
                       f"model; its inputs are {', '.join(map(str, specs))}")
    for spec in specs:
        if spec.name not in arrays:
            raise CLIError(f"{path}: no array for input {spec.name!r} (expected "
                           f"{spec.type_text()})")
        got = arrays[spec.name]
        # a symbolic size (a str) takes any size here: the executor checks it and its range
        if len(got.shape) != len(spec.shape) or any(
                isinstance(d, int) and d != n for d, n in zip(spec.shape, got.shape)) or \
                got.dtype != np.dtype(spec.dtype):
            raise CLIError(f"{path}: input {spec.name!r} is "
                           f"{tensor_text(got.dtype, got.shape)}, expected {spec.type_text()}")
    return arrays


def file_size(path) -> str:
    """A file's size for humans (kiln.runtime.describe.byte_text).

    Example:
        >>> file_size("model.so")                               # doctest: +SKIP
        '1.2 MB'
    """
    return byte_text(os.path.getsize(path))
