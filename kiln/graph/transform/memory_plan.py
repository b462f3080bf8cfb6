"""Static memory planning: intermediate tensors share storage when their lifetimes do not
overlap (TVM paper §3). Works on the execution order of kernels, after fusion."""
from __future__ import annotations


def plan_storage(kernels, entry_bytes: dict, pinned: set) -> tuple[dict, list]:
    """Assign a storage id to every kernel output not in `pinned` (graph outputs keep their own).

    kernels: list of (inputs, outputs) entry-id lists in execution order.
    Returns (entry → storage id, storage sizes in bytes). A storage freed after its last reader
    runs is reused by a later output of at most the same size (best fit), else grown.

    Example:
        >>> plan_storage([([0], [1]), ([1], [2]), ([2], [3])], {1: 8, 2: 8, 3: 8}, {3})
        ({1: 0, 2: 1, 3: 2}, [8, 8, 8])
    """
    last_use: dict = {}
    for k, (inputs, _) in enumerate(kernels):
        for e in inputs:
            last_use[e] = k
    storage_of: dict = {}
    sizes: list = []
    free: list = []            # storage ids available for reuse
    release_at: dict = {}      # kernel index → storages released after it runs
    for k, (_, outputs) in enumerate(kernels):
        for e in outputs:
            if e in storage_of:
                continue
            need = entry_bytes[e]
            if e in pinned:
                sid = len(sizes)
                sizes.append(need)
            else:
                sid = _best_fit(free, sizes, need)
                if sid is None:
                    sid = len(sizes)
                    sizes.append(need)
                else:
                    free.remove(sid)
                    sizes[sid] = max(sizes[sid], need)
                release_at.setdefault(last_use.get(e, k), []).append(sid)
            storage_of[e] = sid
        free.extend(release_at.pop(k, []))
    return storage_of, sizes


def _best_fit(free, sizes, need):
    fitting = [s for s in free if sizes[s] >= need]
    if fitting:
        return min(fitting, key=lambda s: sizes[s])
    if free:
        # Grow the largest free storage rather than adding a new one.
        return max(free, key=lambda s: sizes[s])
    return None
