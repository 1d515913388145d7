"""A whole sweep spec in one call: its plan against the store, the pool it runs on, the grid, stacked or halving
runs, and what a Ctrl-C kept. ``sepbench sweep`` is this call between parsing and printing."""
from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Callable

from sepbench.config import ConfigError, RunConfig
from sepbench.store import Store
from sepbench.sweep.executors import Backend, OnResult, Plan, Reuse, plan, run_sweep
from sepbench.sweep.interrupts import FinishedRuns, SweepInterrupted
from sepbench.sweep.pool import warm_pool
from sepbench.sweep.spec import SweepSpec
from sepbench.train.result import RunResult
from sepbench.train.stopping import stopping_runs_on


@dataclass
class SpecPlan:
    """What ``run_spec`` is about to do, known before any run trains."""

    spec: SweepSpec
    configs: list[RunConfig]
    """every run of the spec"""
    plan: Plan
    """which of them train and which the store answers"""
    group_size: int

    @property
    def trains(self) -> list[RunConfig]:
        """The runs whose results come, one each (a halving search stores a cut run as pruned)."""
        return self.plan.todo

    @property
    def halving(self) -> bool:
        return self.spec.lr_search == "halving"

    @property
    def full_steps(self) -> int:
        """Steps the runs to train would take if none stopped early (what a halving search saves from)."""
        return sum(cfg.train.steps for cfg in self.trains)


@dataclass
class SpecOutcome:
    """What one ``run_spec`` call did: its plan, the runs it trained (each stored as it finished), the seconds
    that took and, for halving, the optimizer steps trained."""

    planned: SpecPlan
    results: list[RunResult] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0

    def with_status(self, *statuses: str) -> list[RunResult]:
        """The runs trained now whose status is one of ``statuses``."""
        return [r for r in self.results if r.status in statuses]

    @property
    def failed(self) -> dict[str, str]:
        """Config hash -> reason of every failed run of the spec: stored earlier and not retried, or failed now."""
        now = {r.config_hash: r.error or "no reason stored" for r in self.with_status("failed")}
        return {**self.planned.plan.failed_kept, **now}


def run_spec(spec: SweepSpec, store: Store, *, workers: int = 1, backend: Backend = "local",
             address: str | None = None, reuse: Reuse = Reuse(), group_size: int | None = None,
             threads: int | None = None, dry_run: bool = False, on_plan: Callable[[SpecPlan], None] | None = None,
             on_result: OnResult | None = None) -> SpecOutcome:
    """Train every run of ``spec`` that ``store`` lacks (and those ``reuse`` retrains); rerun to resume.

    A local pool of ``workers`` warm processes starts first, so they import torch while the plan is made; halving
    and stacked sweeps (``group_size`` > 1; by default the device's, ``grouped.DEFAULT_GROUP_SIZE``) start their
    own processes instead. ``on_plan`` hears the plan before anything trains; ``dry_run`` stops there.
    ``threads``: intra-op threads of a one-worker sweep (default ``$SEPBENCH_THREADS``, else 1).

    Raises ConfigError for bad input (a spec's run, the store, threads, halving off the local backend, a backend
    that cannot start) and SweepInterrupted on Ctrl-C, once the workers are stopped and the runs in training
    have saved their checkpoints.
    """
    from sepbench.train.environment import default_threads, require_devices

    finished: FinishedRuns | None = None
    try:
        with stopping_runs_on(signal.SIGINT), warm_pool(workers if backend == "local" and not dry_run else 1) as pool:
            configs = spec.expand()
            threads = default_threads(threads)
            if not dry_run:
                store.check_writable()
                if backend == "local":
                    require_devices(cfg.device for cfg in configs)
            halving = spec.lr_search == "halving"
            if halving and backend != "local":
                raise ConfigError("lr_search: halving runs on the local backend only; use --backend local")
            todo = plan(configs, store, reuse, halving=halving)
            finished = FinishedRuns(store, todo.todo)
            planned = SpecPlan(spec, configs, todo, _group_size(group_size, todo.todo))
            if on_plan is not None:
                on_plan(planned)
            outcome = SpecOutcome(planned)
            if dry_run:
                return outcome
            if pool is not None and (halving or planned.group_size > 1):
                pool.close()  # halving and stacked sweeps run their own worker processes
                pool = None
            collect = finished.reporting(on_result)
            if halving:
                from sepbench.sweep.halving import run_halving

                halved = run_halving(configs, store, workers=workers, eta=spec.halving_eta, on_result=collect,
                                     finalists=spec.halving_finalists, keep_ties=spec.halving_keep_ties, reuse=reuse)
                outcome.results, outcome.seconds, outcome.steps = halved.results, halved.seconds, halved.steps
                return outcome
            try:
                swept = run_sweep(todo.todo, store, workers=workers, backend=backend, address=address,
                                  on_result=collect, reuse=reuse, group_size=planned.group_size, pool=pool,
                                  threads=threads)
            except RuntimeError as problem:  # a backend that cannot start: Ray missing or not reached
                raise ConfigError(str(problem)) from None
            outcome.results, outcome.seconds = swept.results, swept.seconds
            return outcome
    except KeyboardInterrupt:
        raise (finished.interrupted() if finished is not None else SweepInterrupted(0, 0)) from None


def _group_size(requested: int | None, todo: list[RunConfig]) -> int:
    """``requested``, else the default of the first run's device (1 when nothing trains)."""
    if requested is not None:
        return requested
    from sepbench.sweep.grouped import default_group_size

    return default_group_size(todo[0].device) if todo else 1
