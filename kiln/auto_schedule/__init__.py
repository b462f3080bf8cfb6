"""Template-free auto-scheduling (Ansor, OSDI'20): search spaces generated from the tensor
expression of each kernel, sampled into complete programs and searched with a learned cost
model; see docs/auto_schedule.md.
"""
from .compute_dag import ComputeDAG, UnsupportedDAG
from .program import Program, ProgramError, State, replay
from .sketch import Decisions, Sketch, annotate, generate_sketches

__all__ = ["ComputeDAG", "UnsupportedDAG", "Program", "ProgramError", "State", "replay",
           "Decisions", "Sketch", "annotate", "generate_sketches"]
