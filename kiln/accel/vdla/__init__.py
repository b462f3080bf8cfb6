"""VDLA, the TVM paper's deep-learning accelerator (§6.4, Fig. 20), simulated: its instruction
set (isa.py) and a bit-exact, cycle-level simulator of its three pipelined modules (sim.py).
docs/vdla.md describes the machine.

Example:
    >>> from kiln.accel import vdla
    >>> vdla.VDLAConfig().block_in
    16
"""
from .isa import (Alu, Deps, Finish, Gemm, Load, Program, Store, VDLAConfig,
                  VDLAProgramError)
from .sim import RunStats, VDLADeadlockError, VDLARaceError, simulate

__all__ = ["Alu", "Deps", "Finish", "Gemm", "Load", "Program", "RunStats", "Store",
           "VDLAConfig", "VDLADeadlockError", "VDLAProgramError", "VDLARaceError", "simulate"]
