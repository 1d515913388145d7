"""How long runs still to train will take: stored runs of the same shape, else a few steps timed now."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from sepbench.config import RunConfig
from sepbench.store import Store

TIMED_STEPS = 4
"""Training steps timed per shape, after one untimed step (the first pays for allocations)."""
TIMED_EVAL_ROWS = 256
"""Evaluation rows timed per shape; the cost of a full evaluation is scaled from them."""
FLOP_RATE = 5e9
"""Training FLOP/s assumed for a shape too large to time here (one CPU thread; a GPU is faster)."""
LARGEST_TIMED_STEP = 2.0
"""Seconds one step may be expected to take (forward FLOPs at ``FLOP_RATE``) for its shape to be timed."""


@dataclass(frozen=True)
class ShapeCost:
    step_seconds: float
    eval_seconds: float
    source: str
    """"stored", "timed" or "flops"."""

    def run_seconds(self, cfg: RunConfig) -> float:
        """Upper bound for ``cfg``'s run: every step, and a full evaluation at each ``eval_every`` and at the end."""
        return self.step_seconds * cfg.train.steps + self.eval_seconds * (cfg.train.steps // cfg.train.eval_every + 1)


@dataclass
class Estimate:
    """Seconds the runs still to train would take (an upper bound: early stops are not foreseen)."""

    seconds: float
    sources: dict[str, int] = field(default_factory=dict)
    """Runs estimated from each source."""

    def text(self, workers: int) -> str:
        words = {"stored": "stored runs of the same shape", "timed": "steps timed now",
                 "flops": f"forward FLOPs at {FLOP_RATE / 1e9:g} GFLOP/s (too large to time here)"}
        how = [f"{count} from {words[source]}" for source, count in self.sources.items() if count]
        return (f"about {duration(self.seconds / max(workers, 1))} on {workers} worker(s) at most "
                f"({'; '.join(how) or 'nothing to train'}; runs that stop early take less)")


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 3600 * 10_000:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 3600:.1e} h"


def shape(cfg: RunConfig) -> tuple:
    """What a step's and an evaluation's cost depend on; runs differing only in lr, seed or steps share it."""
    return (cfg.task.name, cfg.task.length, repr(sorted((cfg.task.options or {}).items())),
            cfg.model.model_dump_json(), cfg.train.batch_size, cfg.train.eval_samples, cfg.device)


def stored_costs(store: Store) -> dict[tuple, ShapeCost]:
    """Per shape, the median seconds per step of stored finished runs (their evaluations included)."""
    import numpy as np

    found: dict[tuple, list[float]] = {}
    for result in store.results():
        if result.steps > 0 and result.wall_seconds > 0 and result.status in ("solved", "completed"):
            found.setdefault(shape(result.config), []).append(result.wall_seconds / result.steps)
    return {key: ShapeCost(float(np.median(values)), 0.0, "stored") for key, values in found.items()}


def timed_cost(cfg: RunConfig) -> ShapeCost:
    """Time ``TIMED_STEPS`` training steps and ``TIMED_EVAL_ROWS`` evaluation rows of ``cfg``'s shape on its
    device (fresh data: a fixed training set is not built), or ``flops_cost`` for a shape too large to time."""
    from sepbench.train.loop import Trainer

    rough = flops_cost(cfg)
    if rough.step_seconds > LARGEST_TIMED_STEP:
        return rough

    rows = min(TIMED_EVAL_ROWS, cfg.train.eval_samples)
    probe = cfg.model_copy(update={"train": cfg.train.model_copy(update={
        "steps": TIMED_STEPS + 1, "eval_every": TIMED_STEPS + 1, "eval_samples": rows, "data": "fresh"})})
    trainer = Trainer(probe)
    trainer.train_until(1)
    start = time.perf_counter()
    trainer.train_until(1 + TIMED_STEPS)
    step = (time.perf_counter() - start) / TIMED_STEPS
    start = time.perf_counter()
    trainer.assess(full=True)
    evaluation = (time.perf_counter() - start) * cfg.train.eval_samples / rows
    return ShapeCost(step, evaluation, "timed")


def estimate(configs: Sequence[RunConfig], store: Store, known: dict[tuple, ShapeCost] | None = None) -> Estimate:
    """Seconds to train ``configs``: a stored shape's seconds per step, else its steps timed now (each shape
    once), else, for a shape too large to time, forward FLOPs at ``FLOP_RATE``.
    ``known``: costs found by an earlier call, extended by this one (each shape is timed once)."""
    costs = known if known is not None else {}
    if not costs:
        costs.update(stored_costs(store))
    result = Estimate(0.0, {"stored": 0, "timed": 0, "flops": 0})
    for cfg in configs:
        key = shape(cfg)
        if key not in costs:
            costs[key] = timed_cost(cfg)
        cost = costs[key]
        result.seconds += cost.run_seconds(cfg)
        result.sources[cost.source] += 1
    return result


def flops_cost(cfg: RunConfig) -> ShapeCost:
    """Forward FLOPs at ``FLOP_RATE``: three forwards' worth per training step, one forward per evaluation row."""
    from sepbench.sweep.search import estimate_forward_flops

    forward = estimate_forward_flops(cfg)
    return ShapeCost(3 * forward * cfg.train.batch_size / FLOP_RATE, cfg.train.eval_samples * forward / FLOP_RATE,
                     "flops")
