"""Template-free auto-scheduling (Ansor, OSDI'20): search spaces generated from the tensor
expression of each kernel, sampled into complete programs and searched with a learned cost
model; see docs/auto_schedule.md.

Example:
    >>> tasks = extract_search_tasks(mod, params, "llvm")          # doctest: +SKIP
    >>> TaskScheduler(tasks).tune(512, log_file="auto.jsonl")      # doctest: +SKIP
"""
from .compute_dag import ComputeDAG, UnsupportedDAG
from .program import Program, ProgramError, State, replay
from .search import SketchSearch
from .sketch import Decisions, Sketch, annotate, generate_sketches
from .task import ProgramConfig, SearchTask, extract_search_tasks
from .task_scheduler import TaskScheduler

__all__ = ["ComputeDAG", "UnsupportedDAG", "Program", "ProgramError", "State", "replay",
           "Decisions", "Sketch", "annotate", "generate_sketches", "SketchSearch",
           "ProgramConfig", "SearchTask", "extract_search_tasks", "TaskScheduler"]
