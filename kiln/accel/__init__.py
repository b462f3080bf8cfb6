"""Accelerator back-ends: each in its own folder with its ISA, simulator, code generator and
schedules (kiln/accel/vdla: the TVM paper's VDLA, simulated)."""
