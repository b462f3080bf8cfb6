"""The caller's heap kept out of the cycle collector's way while kiln works.

A user's process holds a large heap when it compiles: a torch model, its exported program,
a tokenizer. Every full collection walks all of it, finding nothing, and kiln's own work (the
compile, and the first import of the compiler's modules, which create many objects) triggers
many: tenths of a second per compile. `frozen()` moves the heap as it was into the permanent
generation for the duration; what kiln creates meanwhile is still collected (with the
collector off, it piled up and made the caller's next collections slower).
"""
from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0
_ours = False       # whether the outermost frozen() froze the heap (not the application)


@contextlib.contextmanager
def frozen():
    """Freeze the heap as it is for the duration (re-entrant: the outermost one unfreezes).
    A heap the application froze itself (gc.freeze before fork) is left as it is.

    Example:
        >>> with frozen():
        ...     import kiln.driver.compile
    """
    global _depth, _ours
    with _lock:
        _depth += 1
        if _depth == 1:
            _ours = gc.get_freeze_count() == 0
            if _ours:
                gc.freeze()
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _ours:
                gc.unfreeze()
