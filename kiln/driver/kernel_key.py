"""What a compiled kernel depends on, as the keys of kiln's kernel cache.

A kernel of a model is a fused graph function; what its code depends on is that function
(exactly: its JSON form, constants to the bit), the target (triple, CPU, features, LLVM
optimization level), the configs the autotvm dispatch context answers its templates, and the
code that turns all of that into machine code: kiln's own sources (every .py, .c and .h file of
the package, hashed once per process), the lowering pipeline as registered now, LLVM's and
Python's versions. Any edit to kiln's lowering changes the source digest; a pass swapped in at
run time changes the pipeline identity; so a stale kernel is never served.

Code kiln cannot see into is not keyed, it disables caching: a kernel whose operators' compute
or schedule functions, templates or lowering passes are defined outside the kiln package (a
user's own op, say) is always built afresh, in this process.

Keys come in two steps because which templates a kernel asks for is known only once it is
scheduled: `function_key` (everything but the dispatch answers) names an index entry listing the
task keys asked, and `object_key(function_key, answers)` names the compiled object.

Example:
    >>> k1 = function_key(function_to_json(fn), Target("llvm"))         # doctest: +SKIP
    >>> k2 = object_key(k1, [dispatch_answer(k) for k in asked])        # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import json
import sys
from functools import lru_cache
from pathlib import Path

KEY_FORMAT = 1          # bump when what goes into a key changes meaning
_SOURCE_SUFFIXES = (".py", ".c", ".h")


@lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 over kiln's package sources (paths and bytes), LLVM's, llvmlite's and Python's
    versions: anything that changes what kiln generates for a given input.

    Example:
        >>> len(source_digest())
        64
    """
    import llvmlite
    import llvmlite.binding as llvm

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    h.update(f"{KEY_FORMAT}|{llvmlite.__version__}|{llvm.llvm_version_info}|"
             f"{sys.version_info[:2]}".encode())
    for path in sorted(p for p in root.rglob("*") if p.suffix in _SOURCE_SUFFIXES):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def target_identity(target) -> list:
    """What of a target reaches the code: its text and, resolved, the triple, CPU, features and
    LLVM optimization level (`llvm` alone means this machine's CPU), and the thread count the
    code is generated for.

    Example:
        >>> target_identity(Target("llvm -mcpu=skylake"))[0]     # doctest: +SKIP
        'llvm -mcpu=skylake'
    """
    from ..runtime import num_threads
    # The code generators bake the thread count into parallel loops (a loop of fewer
    # iterations than threads launches one task per iteration).
    return [str(target), target.mtriple, target.mcpu, target.features, target.opt_level,
            num_threads()]


def is_kiln_code(fn, depth: int = 0) -> bool:
    """Whether `fn` is a function of the kiln package, as are the functions its closure holds
    (a hook wrapping a user's lambda is the user's code).

    Example:
        >>> is_kiln_code(source_digest), is_kiln_code(json.dumps)
        (True, False)
    """
    module = getattr(fn, "__module__", None) or ""
    if not (module == "kiln" or module.startswith("kiln.")) or depth > 4:
        return False
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:          # an empty cell
            continue
        if callable(value) and hasattr(value, "__code__") and not is_kiln_code(value, depth + 1):
            return False
    return True


def pipeline_identity(pipeline) -> list | None:
    """The lowering passes by name and defining function, or None when one is not kiln's.

    Example:
        >>> pipeline_identity(default_pipeline())[0]      # doctest: +SKIP
        ['simplify', 'kiln.tir.transform.simplify', 'simplify']
    """
    passes = []
    for p in pipeline:
        if not is_kiln_code(p.fn):
            return None
        passes.append([p.name, p.fn.__module__, p.fn.__qualname__])
    return passes


def ops_are_kiln_code(fn, target_kind: str) -> bool:
    """Whether every operator called in the fused function `fn` computes and schedules (for
    `target_kind`) with kiln's own code.

    Example:
        >>> ops_are_kiln_code(fused_conv, "cpu")      # doctest: +SKIP
        True
    """
    from ..graph.expr import Call
    from ..graph.visitor import post_order

    for node in post_order(fn.body):
        if isinstance(node, Call) and hasattr(node.op, "compute"):
            op = node.op
            schedule = op.schedules.get(target_kind)      # a target key, e.g. "cpu"
            if not is_kiln_code(op.compute) or (schedule is not None
                                                and not is_kiln_code(schedule)):
                return False
    return True


def _sha(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":"),
                                     allow_nan=False).encode()).hexdigest()


def function_key(function_json: dict, target, pipeline_id: list) -> str:
    """The key of a fused function's index entry: all a kernel depends on but the answers of
    the dispatch context.

    Example:
        >>> function_key(function_to_json(fn), Target("llvm"), pipeline_identity(p))  # doctest: +SKIP
        '3f9c...'
    """
    return _sha("function", source_digest(), target_identity(target), pipeline_id,
                function_json)


def object_key(function_key: str, answers: list) -> str:
    """The key of a compiled kernel: its function key and the config (or None: the template's
    fallback) answered for each task key its templates asked, in the order asked.

    Example:
        >>> object_key(k1, [None])         # doctest: +SKIP
        'a41e...'
    """
    return _sha("object", function_key, answers)


def candidate_key(task_json: dict, config: dict, target) -> str | None:
    """The key of a tuning candidate (a template's task and one config of it), built by
    kiln.build: everything its code depends on, kiln's sources included; None when a lowering
    pass is not kiln's (then it is not cached).

    Example:
        >>> candidate_key(task.to_json(), cfg.to_json(), Target("llvm"))   # doctest: +SKIP
        '0c5e...'
    """
    from .pipeline import default_pipeline

    pipeline_id = pipeline_identity(default_pipeline())
    if pipeline_id is None:
        return None
    return _sha("candidate", source_digest(), target_identity(target), pipeline_id, task_json,
                config)
