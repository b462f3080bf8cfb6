"""Rendering DOT text with Graphviz's `dot` program, and kiln.viz.draw: any drawable kiln
object (graph module, loop program, compiled model) to DOT, SVG or PNG.

`draw` looks the object's class up in a registry filled by the drawing modules
(register_drawer); rendering needs the `dot` binary (Debian: `apt-get install graphviz`),
DOT text does not.

Example:
    >>> import kiln.viz
    >>> svg = kiln.viz.draw(mod, stage="fused", params=params)   # doctest: +SKIP
    >>> kiln.viz.draw(prim_func, "loops.png")                      # doctest: +SKIP
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

# format -> (what `dot -T` takes, whether the result is text); "dot" needs no Graphviz
FORMATS = {"dot": (None, True), "svg": ("svg", True), "png": ("png", False)}
DEFAULT_FORMAT = "svg"
SUFFIX_FORMATS = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png"}
INSTALL_HINT = "apt-get install graphviz"


class VizError(RuntimeError):
    """Drawing failed: Graphviz rejected the DOT text or could not run."""


class GraphvizNotFoundError(VizError):
    """Rendering SVG/PNG needs Graphviz's `dot` program, which is not installed."""


def render(dot_text: str, format: str = DEFAULT_FORMAT):
    """DOT text rendered to `format`: "dot" (the text itself), "svg" (text) or "png" (bytes).

    Example:
        >>> render('digraph { a -> b }', "dot")
        'digraph { a -> b }'
    """
    tool_format, is_text = _format_info(format)
    if tool_format is None:
        return dot_text
    dot = find_dot(format)
    result = subprocess.run([dot, f"-T{tool_format}"], input=dot_text.encode(),
                            capture_output=True)
    if result.returncode != 0:
        raise VizError(f"dot -T{tool_format} failed (exit {result.returncode}): "
                       f"{result.stderr.decode(errors='replace').strip()[:500]}")
    return result.stdout.decode() if is_text else result.stdout


def find_dot(format: str = "svg") -> str:
    """The path of Graphviz's `dot`, which rendering `format` needs; GraphvizNotFoundError,
    saying how to install it, when it is not on PATH.

    Example:
        >>> find_dot("png")          # doctest: +SKIP
        '/usr/bin/dot'
    """
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizNotFoundError(
            f"rendering {format} needs Graphviz's `dot` program, which is not on PATH: install "
            f"it with `{INSTALL_HINT}`, or draw with format=\"dot\" for the DOT text")
    return dot


def needs_dot(format: str) -> bool:
    """Whether rendering `format` runs Graphviz (every format but "dot").

    Example:
        >>> needs_dot("dot"), needs_dot("png")
        (False, True)
    """
    return _format_info(format)[0] is not None


def _format_info(format: str):
    try:
        return FORMATS[format]
    except KeyError:
        raise ValueError(f"unknown drawing format {format!r}; formats: "
                         f"{', '.join(FORMATS)}") from None


# class -> function(obj, stage=None, **options) -> DOT text
_DRAWERS: dict = {}


def register_drawer(*classes):
    """Register the function drawing objects of `classes` as DOT text; draw() finds it
    through the object's class hierarchy.

    Example:
        >>> @register_drawer(MyIR)                  # doctest: +SKIP
        ... def _draw_my_ir(obj, stage=None): return my_ir_to_dot(obj)
    """
    def deco(fn):
        for cls in classes:
            _DRAWERS[cls] = fn
        return fn
    return deco


def to_dot(obj, stage: str | None = None, **options) -> str:
    """DOT text of a drawable kiln object (see draw).

    Example:
        >>> text = to_dot(mod, stage="fused", params=params)   # doctest: +SKIP
    """
    for cls in type(obj).__mro__:
        drawer = _DRAWERS.get(cls)
        if drawer is not None:
            return drawer(obj, stage=stage, **options)
    kinds = ", ".join(sorted(c.__name__ for c in _DRAWERS))
    raise TypeError(f"kiln.viz cannot draw a {type(obj).__name__}; it draws {kinds}")


def draw(obj, path=None, format: str | None = None, stage: str | None = None, **options):
    """Draw a graph module or Function (stage: "imported", "optimized" or "fused", with the
    model's `params` and `target`; fused kernels are coloured clusters), a loop program
    (PrimFunc) or a compiled model's execution graph. Returns the DOT or SVG text or the PNG
    bytes, and writes them to `path` when given. The format defaults to path's suffix, else svg.

    Example:
        >>> svg = draw(mod, stage="fused", params=params)          # doctest: +SKIP
        >>> draw(kiln.lower(s, [A, B, C]), "loops.dot")             # doctest: +SKIP
    """
    if format is None:
        suffix = Path(path).suffix.lower() if path is not None else ""
        format = SUFFIX_FORMATS.get(suffix, DEFAULT_FORMAT)
    _format_info(format)                 # a bad format fails before any drawing work
    out = render(to_dot(obj, stage=stage, **options), format)
    if path is not None:
        if isinstance(out, str):
            Path(path).write_text(out)
        else:
            Path(path).write_bytes(out)
    return out
