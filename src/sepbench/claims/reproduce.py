"""``sepbench reproduce``: run what a claim's specs still miss (through the sweep machinery), then judge it."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from sepbench.claims.catalogue import Claim
from sepbench.claims.checks import cached
from sepbench.claims.evaluate import ClaimVerdict, combine, evaluate_runs, evaluate_series
from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.executors import OnResult, Reuse, plan, run_sweep

FLOP_RATES = {"transformer": 11e9, "lstm": 18e9, "mamba": 3.4e9}
"""Training FLOP/s of one single-threaded CPU worker per model, measured on the 2-core machine of
docs/reproduction.md (60 steps of batch 64 at N = 100, width 64); other models use ``FLOP_RATE``."""
FLOP_RATE = 5e9


@dataclass
class Estimate:
    """Seconds the runs still to train would take (an upper bound: early stops are not foreseen)."""

    seconds: float
    from_stored: int
    from_flops: int

    def text(self, workers: int) -> str:
        how = []
        if self.from_stored:
            how.append(f"{self.from_stored} from stored runs of the same model and task size (seconds per step)")
        if self.from_flops:
            how.append(f"{self.from_flops} from forward FLOPs at a measured rate per model (3-18 GFLOP/s per worker)")
        return (f"about {_duration(self.seconds / max(workers, 1))} on {workers} worker(s) at most "
                f"({'; '.join(how) or 'nothing to train'}; runs that stop early take less)")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _shape(cfg: RunConfig) -> tuple:
    return (cfg.task.name, cfg.task.length, cfg.model.name, cfg.model.layers, cfg.model.width, cfg.train.batch_size)


def step_costs(store: Store) -> dict[tuple, float]:
    """Seconds per training step of stored runs, per (task, N, model, layers, width, batch): the median."""
    import numpy as np

    found: dict[tuple, list[float]] = {}
    for result in store.results():
        if result.steps > 0 and result.wall_seconds > 0 and result.status in ("solved", "completed"):
            found.setdefault(_shape(result.config), []).append(result.wall_seconds / result.steps)
    return {shape: float(np.median(values)) for shape, values in found.items()}


def estimate(configs: Sequence[RunConfig], store: Store) -> Estimate:
    """Stored seconds per step of the same shape when there, else a FLOPs cost model (``FLOP_RATE``)."""
    from sepbench.sweep.search import estimate_forward_flops

    costs = step_costs(store)
    total, stored, modelled = 0.0, 0, 0
    for cfg in configs:
        per_step = costs.get(_shape(cfg))
        if per_step is not None:
            total += per_step * cfg.train.steps
            stored += 1
            continue
        forward = estimate_forward_flops(cfg)
        train = 3 * forward * cfg.train.batch_size * cfg.train.steps
        evals = (cfg.train.steps // cfg.train.eval_every + 1) * cfg.train.eval_samples * forward
        total += (train + evals) / FLOP_RATES.get(cfg.model.name, FLOP_RATE)
        modelled += 1
    return Estimate(total, stored, modelled)


@dataclass
class ClaimPlan:
    claim: Claim
    configs: list[RunConfig]
    todo: list[RunConfig]
    failed_kept: int


def plan_claim(claim: Claim, scale: str, store: Store, overrides: dict[str, Any] | None = None,
               reuse: Reuse = Reuse()) -> ClaimPlan:
    if claim.kind == "theory":
        return ClaimPlan(claim, [], [], 0)
    configs = claim.configs(scale, overrides)
    outcome = plan(configs, store, reuse)
    return ClaimPlan(claim, configs, outcome.todo, len(outcome.failed_kept))


def judge(claim: Claim, scale: str, store: Store, overrides: dict[str, Any] | None = None,
          workers: int = 1, on_result: OnResult | None = None, reuse: Reuse = Reuse(),
          train: bool = True) -> ClaimVerdict:
    """Train the claim's missing runs (or run its theory check), then evaluate its conditions.

    ``wall_seconds`` is the stored wall time of the claim's runs (or its check), whether trained now or before.
    """
    if claim.kind == "theory":
        params = claim.at(scale).params
        series, seconds, _ = cached(claim.check, params, store.path, refresh=reuse.force)
        outcomes = evaluate_series(claim, scale, series)
        return ClaimVerdict(claim, scale, combine([o.verdict for o in outcomes]), outcomes, seconds, 0)
    claim_plan = plan_claim(claim, scale, store, overrides, reuse)
    if train and claim_plan.todo:
        run_sweep(claim_plan.todo, store, workers=min(workers, len(claim_plan.todo)), on_result=on_result,
                  reuse=reuse)
    results = {}
    for cfg in claim_plan.configs:
        found = store.get(cfg.config_hash())
        if found is not None:
            results[cfg.config_hash()] = found
    outcomes = evaluate_runs(claim, scale, claim_plan.configs, results)
    wall = sum(r.wall_seconds for r in results.values())
    return ClaimVerdict(claim, scale, combine([o.verdict for o in outcomes]), outcomes, wall, len(results))
