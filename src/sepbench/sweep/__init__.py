"""Sweeps: a grid of runs from one YAML spec, run on a process pool or Ray, resumable through the store."""
from sepbench.sweep.executors import SweepOutcome, execute, failed_result, pending, run_sweep
from sepbench.sweep.spec import SweepSpec

__all__ = ["SweepOutcome", "SweepSpec", "execute", "failed_result", "pending", "run_sweep"]
