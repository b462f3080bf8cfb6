"""The `kiln` command line: one sub-command per user task, each in its own module.

    kiln compile model.onnx --target llvm -o model.so
    kiln run model.so --inputs inputs.npz --outputs out.npz
    kiln --verbose tune model.onnx --budget 30m -o tune.jsonl

A command module defines HELP (one line), add_arguments(parser) and run(args) -> exit status.
Only the module of the command being run is imported (`kiln run` does not load the compiler,
`kiln --help` loads no command), so the help lines live here in the registry too.

Every error ends as one line, `kiln: error: <message>`, and a non-zero exit: 2 for a user error
(CLIError, bad options), 1 for a failure while working; `--verbose` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
import warnings

from .errors import EXIT_INTERRUPTED, CLIError, one_line

# name -> (module, help line). A module's own HELP should say the same as its line here.
COMMANDS = {
    "compile": ("kiln.cli.compile_cmd",
                "compile an ONNX or .pt2 model into a shared library"),
    "run": ("kiln.cli.run_cmd",
            "run a compiled model on inputs from an .npz file"),
    "tune": ("kiln.cli.tune_cmd",
             "auto-tune a model's kernels into a tuning log (resumable)"),
    "inspect": ("kiln.cli.inspect_cmd",
                "print or draw a model's graph IR, or list a compiled model's inputs, outputs "
                "and kernels"),
    "profile": ("kiln.cli.profile_cmd",
                "time each fused kernel of a compiled model against this machine's peak"),
    "c-runtime": ("kiln.cli.c_runtime_cmd",
                  "write kiln's C runtime (header, library, an example program) for a target"),
    "device-key": ("kiln.cli.device_key_cmd",
                   "print the dask resource naming this machine's device, for tuning workers"),
    "selfcheck": ("kiln.cli.selfcheck",
                  "report what kiln found on this machine and what is missing"),
}

# Errors whose message is written for the user (kiln's own derive from these: FrontendError,
# CodegenError, CompileError, ModelError, NativeBuildError ...): shown as they are, exit 1.
EXPECTED_ERRORS = (ValueError, TypeError, OSError, NotImplementedError, RuntimeError, ImportError)


def _internal(err: BaseException) -> tuple[int, str]:
    return 1, (f"internal error ({type(err).__name__}: {one_line(err)}); rerun with --verbose "
               f"for the traceback")


def _out_of_memory(err: MemoryError) -> tuple[int, str]:
    # The commands name the shapes where they know them; elsewhere, still not a kiln bug.
    return 1, (f"out of memory ({one_line(err)}): the model's tensors are too large for this "
               f"machine; check the input shapes (--input-shape)")


# First match wins: exception type -> (exit status, message).
_REPORTS = (
    (CLIError, lambda err: (err.status, one_line(err))),
    (MemoryError, _out_of_memory),
    (EXPECTED_ERRORS, lambda err: (1, one_line(err))),
    (Exception, _internal),
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is reported like every other error: one line, exit 2."""

    def error(self, message):
        raise CLIError(f"{message} (see '{self.prog} --help')")


def _command_name(argv: list[str]) -> str | None:
    # The global options take no values, so the first word that is not an option names the
    # command.
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for `kiln`; only `command`'s module is imported, to add its options.

    Example:
        >>> build_parser().parse_args(["--verbose"]).verbose
        True
    """
    from kiln import __version__

    parser = _Parser(prog="kiln", description="kiln: an optimizing compiler for deep learning "
                     "models.", epilog="Run 'kiln COMMAND --help' for a command's options.")
    parser.add_argument("--verbose", action="store_true",
                        help="show tracebacks, warnings and progress detail")
    parser.add_argument("--version", action="version", version=f"kiln {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (module_path, help_line) in COMMANDS.items():
        p = sub.add_parser(name, help=help_line, description=help_line)
        if name == command:
            # SUPPRESS: an absent sub-command --verbose must not reset a global one.
            p.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                           help="show tracebacks, warnings and progress detail")
            _command_module(name).add_arguments(p)
    return parser


def _command_module(name: str):
    module_path = COMMANDS[name][0]
    try:
        return importlib.import_module(module_path)
    except ModuleNotFoundError as err:
        if err.name != module_path:
            raise
        raise CLIError(f"command {name!r} is not available in this installation "
                       f"({module_path} is missing)", status=1) from None


def _show_warning(message, category, filename, lineno, file=None, line=None):
    text = str(message).strip().splitlines()
    print(f"kiln: warning: {text[0] if text else category.__name__}", file=file or sys.stderr)


def _configure_output(verbose: bool) -> None:
    """kiln's log lines as `kiln: ...` on stderr; without --verbose, warnings on one line and
    library deprecation notices hidden (they are for developers, not for users of the CLI)."""
    logger = logging.getLogger("kiln")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("kiln: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    if not verbose:
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.showwarning = _show_warning


def _run(argv: list[str], verbose: bool) -> int:
    _configure_output(verbose)         # before any command module is imported
    name = _command_name(argv)
    if name is not None and name not in COMMANDS:
        raise CLIError(f"unknown command {name!r}; the commands are {', '.join(COMMANDS)} "
                       f"(see 'kiln --help')")
    parser = build_parser(name)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(_command_module(args.command).run(args) or 0)


def main(argv: list[str] | None = None) -> int:
    """Run the kiln command line on `argv` (default: sys.argv[1:]); returns the exit status.

    Example:
        >>> main(["selfcheck"])          # doctest: +SKIP
        0
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    # Known before parsing, so that imports and errors while parsing honour it too.
    verbose = "--verbose" in argv
    try:
        return _run(argv, verbose)
    except KeyboardInterrupt:
        if verbose:
            raise
        print("kiln: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:
        if verbose:
            raise
        status, text = next(report(err) for kind, report in _REPORTS if isinstance(err, kind))
        print(f"kiln: error: {text}", file=sys.stderr)
        return status
