"""The sketch rules of each kind of target, by target key (the most specific key first, as
kiln's strategy registry resolves schedules): "cpu" (kiln.auto_schedule.sketch) and "gpu"
(kiln.auto_schedule.sketch_gpu, for OpenCL and CUDA).

Example:
    >>> from kiln.target import Target
    >>> rules_for(Target("llvm")).key, rules_for(Target("opencl")).key
    ('cpu', 'gpu')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["SketchRules", "register_rules", "rules_for"]


@dataclass(frozen=True)
class SketchRules:
    """generate(dag) -> sketches; annotate(dag, sketch, decisions, target) -> Program."""

    key: str
    generate: Callable
    annotate: Callable


_RULES: dict[str, SketchRules] = {}


def register_rules(key: str, generate: Callable, annotate: Callable) -> None:
    """Register the sketch rules of target key `key`.

    Example:
        >>> register_rules("cpu", generate_sketches, annotate_cpu)     # doctest: +SKIP
    """
    _RULES[key] = SketchRules(key, generate, annotate)


def rules_for(target) -> SketchRules | None:
    """The rules of the target's most specific key that has some, else None."""
    for key in target.keys:
        if key in _RULES:
            return _RULES[key]
    return None


def _annotate_cpu(dag, sketch, decisions, target):
    from .sketch import annotate
    return annotate(dag, sketch, decisions)


def _annotate_gpu(dag, sketch, decisions, target):
    from .sketch_gpu import annotate_gpu
    return annotate_gpu(dag, sketch, decisions, target.max_num_threads)


def _generate_cpu(dag):
    from .sketch import generate_sketches
    return generate_sketches(dag)


def _generate_gpu(dag):
    from .sketch_gpu import generate_gpu_sketches
    return generate_gpu_sketches(dag)


register_rules("cpu", _generate_cpu, _annotate_cpu)
register_rules("gpu", _generate_gpu, _annotate_gpu)
