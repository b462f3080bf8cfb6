"""The CLI's error type and the one line every error is reported as.

Example:
    >>> one_line(CLIError("bad --input-shape 'x'"))
    "bad --input-shape 'x'"
    >>> one_line(ValueError("2 unsupported op types (3 nodes):\\n  Bar: n2\\n  Foo: n1, n7"))
    '2 unsupported op types (3 nodes): Bar: n2; Foo: n1, n7'
"""
from __future__ import annotations

EXIT_INTERRUPTED = 130      # the shell's status after Ctrl-C (128 + SIGINT)

# Past this length a message (a linker's stderr, say) is cut: --verbose shows all of it.
MAX_MESSAGE_CHARS = 400


class CLIError(Exception):
    """A user error (bad file, bad option value ...): main prints `kiln: error: <message>` and
    exits with `status` (2 by default; 1 for failures at run time).

    Example:
        >>> raise CLIError("model.tflite: unsupported model file; kiln reads .onnx, .pt2")  # doctest: +SKIP
    """

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def _os_error_text(err: OSError) -> str:
    # "[Errno 2] No such file or directory: 'x'" reads worse than "x: No such file or directory".
    if err.filename is not None and err.strerror:
        return f"{err.filename}: {err.strerror}"
    return str(err)


# Exception types whose default text is not a sentence; everything else uses str(err).
_TEXT_OF = {OSError: _os_error_text}


def one_line(err: BaseException) -> str:
    """`err`'s message on one line: a multi-line message (the frontends list unsupported ops one
    per line) is joined with "; ", an empty one becomes the exception's type name.

    Example:
        >>> one_line(FileNotFoundError(2, "No such file or directory", "m.onnx"))
        'm.onnx: No such file or directory'
    """
    text = next((fmt(err) for kind, fmt in _TEXT_OF.items() if isinstance(err, kind)), str(err))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    head, rest = lines[0], lines[1:]
    if rest:
        text = head + (" " if head.endswith(":") else "; ") + "; ".join(rest)
    else:
        text = head
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS - 3].rstrip() + "..."
    return text
