"""Sweeps: a grid of runs from one YAML spec, run on a process pool or Ray, resumable through the store."""
from sepbench.sweep.driver import SpecOutcome, SpecPlan, run_spec
from sepbench.sweep.executors import Plan, Reuse, SweepOutcome, execute, failed_result, pending, plan, run_sweep
from sepbench.sweep.interrupts import SweepInterrupted
from sepbench.sweep.single import StoredRun, run_stored
from sepbench.sweep.spec import SweepSpec

__all__ = ["Plan", "Reuse", "SpecOutcome", "SpecPlan", "StoredRun", "SweepInterrupted", "SweepOutcome", "SweepSpec",
           "execute", "failed_result", "pending", "plan", "run_spec", "run_stored", "run_sweep"]
