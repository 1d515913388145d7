"""How long runs still to train will take: stored runs of the same shape, else a few steps timed now (at a
shorter length, scaled by forward FLOPs, for a shape too large to time whole)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.train.environment import code_version, default_threads, resolve_device
from sepbench.train.result import RunResult
from sepbench.wording import counted

TIMED_STEPS = 4
"""Training steps timed per shape, after one untimed step (the first pays for allocations)."""
TIMED_EVAL_ROWS = 256
"""Evaluation rows timed per shape; the cost of a full evaluation is scaled from them."""
LARGE_TIMED_STEPS = 1
LARGE_TIMED_EVAL_ROWS = 64
"""Steps and evaluation rows timed for a shape between ``LARGEST_TIMED_STEP`` and ``LARGEST_TIMED_WHOLE``."""
FLOP_RATE = 5e9
"""Training FLOP/s assumed, before any timing, to decide whether a shape is small enough to time (a cautious
rate: measured steps run 10-25x faster than it predicts on one CPU thread), and for a shape no shorter length
brings under ``LARGEST_TIMED_STEP``."""
LARGEST_TIMED_STEP = 2.0
"""Seconds one step may be expected to take (forward FLOPs at ``FLOP_RATE``) for its shape to be timed."""
LARGEST_TIMED_WHOLE = 60.0
"""Up to these expected seconds a step, the shape is still timed whole, on one step and a few evaluation rows
(``FLOP_RATE`` is cautious, so such a step takes a few seconds); above, a smaller shape is timed and scaled."""


@dataclass(frozen=True)
class ShapeCost:
    step_seconds: float
    eval_seconds: float
    source: str
    """"stored", "timed", "scaled" or "flops"."""

    def run_seconds(self, cfg: RunConfig) -> float:
        """Upper bound for ``cfg``'s run: every step, and a full evaluation at each ``eval_every`` and at the end."""
        return self.step_seconds * cfg.train.steps + self.eval_seconds * (cfg.train.steps // cfg.train.eval_every + 1)


@dataclass
class Estimate:
    """Seconds the runs still to train would take (an upper bound: early stops are not foreseen)."""

    seconds: float
    sources: dict[str, int] = field(default_factory=dict)
    """Runs estimated from each source."""
    searched: int = 0
    """Runs of a learning-rate search counted at the share of their budget that the search plans."""

    def text(self, workers: int) -> str:
        words = {"stored": "stored runs of the same shape", "timed": "steps timed now",
                 "scaled": "steps timed now at a shorter length, scaled by forward FLOPs",
                 "flops": f"forward FLOPs at {FLOP_RATE / 1e9:g} GFLOP/s (too large to time here)"}
        how = [f"{count} from {words[source]}" for source, count in self.sources.items() if count]
        if self.searched:
            how.append(f"{self.searched} of a successive-halving search, at the steps it plans")
        return (f"about {duration(self.seconds / max(workers, 1))} on {counted(workers, 'worker')} at most "
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


def stored_costs(store: Store, any_code: bool = False) -> dict[tuple, ShapeCost]:
    """Per shape, the median seconds per step of stored finished runs (their evaluations included): a CPU run's
    CPU seconds where it counted them and they are fewer than its wall seconds (on one thread a shared core or a
    paused process inflates only the wall time; on several, CPU seconds count every thread), else wall seconds.
    Only runs that would run alike here count (``comparable``); ``any_code``: whichever code trained them."""
    import numpy as np

    found: dict[tuple, list[float]] = {}
    current = None if any_code else code_version()
    for result in filter(lambda result: comparable(result, current), store.results()):
        seconds = result.wall_seconds
        if result.device == "cpu" and result.cpu_seconds:
            seconds = min(result.cpu_seconds, seconds) if seconds > 0 else result.cpu_seconds
        if result.steps > 0 and seconds > 0 and result.status in ("solved", "completed"):
            found.setdefault(shape(result.config), []).append(seconds / result.steps)
    return {key: ShapeCost(float(np.median(values)), 0.0, "stored") for key, values in found.items()}


def comparable(result: RunResult, current_code: str | None) -> bool:
    """Whether ``result``'s speed says what its shape costs here: trained by this code (a kernel change alters
    a step's cost; None: by any) on the kind of device its config resolves to here (a GPU run does not time a CPU
    plan). Two devices of one type (two CPUs, two GPUs) are not told apart: a store filled on another machine
    plans at that machine's speed."""
    try:
        here = resolve_device(result.config.device).type
    except (ValueError, RuntimeError):
        return False
    return current_code in (None, result.code_version) and torch.device(result.device).type == here


def timed_cost(cfg: RunConfig) -> ShapeCost:
    """``cfg``'s shape timed on its device; a shape too large to time, timed smaller (``smaller_probes``) and
    scaled by forward FLOPs; ``flops_cost`` where nothing smaller can be timed."""
    from sepbench.sweep.search import estimate_forward_flops

    rough = flops_cost(cfg)
    if rough.step_seconds <= LARGEST_TIMED_STEP:
        return time_shape(cfg)
    if rough.step_seconds <= LARGEST_TIMED_WHOLE:
        return time_shape(cfg, LARGE_TIMED_STEPS, LARGE_TIMED_EVAL_ROWS)
    for probe in smaller_probes(cfg):
        try:
            measured = time_shape(probe)
        except ValueError:  # a length the task's own checks refuse
            continue
        per_row = estimate_forward_flops(cfg) / estimate_forward_flops(probe)
        per_step = per_row * cfg.train.batch_size / probe.train.batch_size
        return ShapeCost(measured.step_seconds * per_step, measured.eval_seconds * per_row, "scaled")
    return rough


def smaller_probes(cfg: RunConfig) -> Iterator[RunConfig]:
    """``cfg`` made small enough to time (a step ``FLOP_RATE`` puts under ``LARGEST_TIMED_STEP``): first at the
    longest of N/2, N/4, ... (the same batch, so the same efficiency per row), then, should the task refuse that
    length, at the largest of batch/2, batch/4, ... (an upper bound: smaller batches run less efficiently)."""
    def small(probe: RunConfig) -> bool:
        return flops_cost(probe).step_seconds <= LARGEST_TIMED_STEP

    def changed(section: str, field_name: str, value: int) -> RunConfig | None:
        data = cfg.model_dump()
        data[section] = {**data[section], field_name: value}
        try:
            return RunConfig.model_validate(data)
        except ValueError:
            return None

    for field_name, section in (("length", "task"), ("batch_size", "train")):
        value = getattr(getattr(cfg, section), field_name) // 2
        while value >= 1:
            probe = changed(section, field_name, value)
            if probe is not None and small(probe):
                yield probe
                break
            value //= 2


def clock(device: str) -> Callable[[], float]:
    """The clock a shape is timed by: on one CPU thread, this process's CPU seconds (core-seconds, which other
    jobs on the machine barely change, where wall time grows with them); else wall time."""
    on_one_thread = resolve_device(device).type == "cpu" and torch.get_num_threads() == 1
    return time.process_time if on_one_thread else time.perf_counter


def time_shape(cfg: RunConfig, steps: int = TIMED_STEPS, eval_rows: int = TIMED_EVAL_ROWS) -> ShapeCost:
    """Time ``steps`` training steps and ``eval_rows`` evaluation rows of ``cfg``'s shape on its device, with the
    intra-op threads its run will have (``default_threads``; fresh data: a fixed training set is not built)."""
    from sepbench.train.loop import Trainer

    rows = min(eval_rows, cfg.train.eval_samples)
    budget = steps + 2  # the timed steps end before the last one, which would evaluate
    probe = cfg.model_copy(update={"train": cfg.train.model_copy(update={
        "steps": budget, "eval_every": budget, "eval_samples": rows, "data": "fresh"})})
    prior = torch.get_num_threads()
    torch.set_num_threads(default_threads())  # the threads a run of a sweep or claim trains with
    try:
        trainer = Trainer(probe)
        trainer.train_until(1)
        now = clock(cfg.device)
        start = now()
        trainer.train_until(1 + steps)
        step = (now() - start) / steps
        start = now()
        trainer.assess(full=True)
        evaluation = (now() - start) * cfg.train.eval_samples / rows
    finally:
        torch.set_num_threads(prior)
    return ShapeCost(step, evaluation, "timed")


def estimate(configs: Sequence[RunConfig], store: Store, known: dict[tuple, ShapeCost] | None = None,
             shares: dict[str, float] | None = None) -> Estimate:
    """Seconds to train ``configs``: a stored shape's seconds per step, else its steps timed now (each shape
    once; at a shorter length scaled by FLOPs for a shape too large to time), else forward FLOPs at ``FLOP_RATE``.
    ``known``: costs found by an earlier call, extended by this one (each shape is timed once). ``shares``: per
    config hash, the share of its run a learning-rate search plans (1 where absent)."""
    costs = known if known is not None else {}
    if not costs:
        costs.update(stored_costs(store))
    result = Estimate(0.0, {"stored": 0, "timed": 0, "scaled": 0, "flops": 0})
    shares = shares or {}
    for cfg in configs:
        key = shape(cfg)
        if key not in costs:
            costs[key] = timed_cost(cfg)
        cost = costs[key]
        share = shares.get(cfg.config_hash())
        result.seconds += cost.run_seconds(cfg) * (1.0 if share is None else share)
        result.sources[cost.source] += 1
        result.searched += share is not None
    return result


def flops_cost(cfg: RunConfig) -> ShapeCost:
    """Forward FLOPs at ``FLOP_RATE``: three forwards' worth per training step, one forward per evaluation row."""
    from sepbench.sweep.search import estimate_forward_flops

    forward = estimate_forward_flops(cfg)
    return ShapeCost(3 * forward * cfg.train.batch_size / FLOP_RATE, cfg.train.eval_samples * forward / FLOP_RATE,
                     "flops")
