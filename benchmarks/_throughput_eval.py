"""Evaluation's share of a run, and the head at the scored positions only against the head at every position.

``eval_share``: wall time inside evaluation over the run's wall time, for a default Index Lookup N=100
transformer run of 1500 steps (quick: 300) under the default (adaptive) evaluation budget; the full budget's
share is measured beside it. ``scored_head_step`` and ``scored_head_eval``: a training step and a 1000-example
evaluation (quick: 250) at N=500, the full head at every position over the head at the scored positions.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from _throughput_common import Ratio, timed
from sepbench import RunConfig
from sepbench.train.loop import Trainer, evaluate_rows, masked_loss

EVAL_SHARE_TARGET = 0.10
STEP_SPEEDUP_TARGET = 1.15
EVAL_SPEEDUP_TARGET = 1.4


def eval_share(steps: int, budget: str) -> tuple[float, int]:
    """Seconds inside ``Trainer.assess`` over the run's wall seconds, and the steps the run took."""
    config = RunConfig.build({"task": {"name": "index_lookup", "length": 100}, "device": "cpu",
                              "train": {"steps": steps, "eval_budget": budget}})
    trainer = Trainer(config)
    inner, spent = trainer.assess, [0.0]

    def assess(*args, **kwargs):
        start = time.perf_counter()
        found = inner(*args, **kwargs)
        spent[0] += time.perf_counter() - start
        return found

    trainer.assess = assess
    result = trainer.run(progress=False)
    return spent[0] / result.wall_seconds, result.steps


@torch.no_grad()
def full_head_evaluation(trainer: Trainer, batch, chunk: int = 1000) -> None:
    """The evaluation before scored-only heads: logits at every position, chunks of a fixed row count."""
    model, task = trainer.model.eval(), trainer.task
    for start in range(0, len(batch), chunk):
        part = batch.slice(start, start + chunk)
        logits = model(part.inputs)
        F.cross_entropy(logits[part.mask], part.targets[part.mask], reduction="sum")
        task.correct(logits, part)


def head_speedups(examples: int, repeats: int) -> tuple[Ratio, Ratio]:
    config = RunConfig.build({"task": {"name": "index_lookup", "length": 500}, "device": "cpu"})
    trainer = Trainer(config)
    batches = [trainer.next_batch() for _ in range(4)]
    evaluation = trainer.task.sample_eval(examples, np.random.default_rng(0))

    def steps(scored: bool) -> None:
        trainer.model.train()
        for batch in batches:
            logits = trainer.model(batch.inputs, positions=batch.mask) if scored else trainer.model(batch.inputs)
            trainer.optimizer.zero_grad(set_to_none=True)
            masked_loss(logits, batch).backward()
            trainer.optimizer.step()

    model = trainer.model
    full_step, scored_step, full_eval, scored_eval = [], [], [], []
    for _ in range(repeats):
        full_step.append(timed(lambda: steps(False), 1)[0] / len(batches))
        scored_step.append(timed(lambda: steps(True), 1)[0] / len(batches))
        full_eval.append(timed(lambda: full_head_evaluation(trainer, evaluation), 1)[0])
        scored_eval.append(timed(lambda: evaluate_rows(model, trainer.task, evaluation, 1000, trainer.device), 1)[0])

    def ratio(name: str, full: list[float], scored: list[float], target: float, what: str) -> Ratio:
        ratios = [f / s for f, s in zip(full, scored)]
        detail = (f"{what}: full head {min(full):.3g}/{statistics.median(full):.3g} s, scored only "
                  f"{min(scored):.3g}/{statistics.median(scored):.3g} s (min/median of {repeats}); "
                  f"speedup min {min(ratios):.3g}; informational")
        return Ratio(name, statistics.median(ratios), target, "at_least", detail)

    return (ratio("scored_head_step", full_step, scored_step, STEP_SPEEDUP_TARGET, "N=500 training step"),
            ratio("scored_head_eval", full_eval, scored_eval, EVAL_SPEEDUP_TARGET, f"N=500 evaluation of {examples}"))


def measure(quick: bool) -> list[Ratio]:
    steps, repeats = (300, 2) if quick else (1500, 2)
    runs = {budget: [eval_share(steps, budget) for _ in range(repeats)] for budget in ("adaptive", "full")}
    adaptive, full = ([share for share, _ in runs[budget]] for budget in ("adaptive", "full"))
    ran = sorted({took for found in runs.values() for _, took in found})
    detail = (f"N=100, {steps} steps{' (quick)' if quick else ''}, stopped after {ran}; adaptive min/median "
              f"{min(adaptive):.3f}/{statistics.median(adaptive):.3f}, full budget {min(full):.3f}/"
              f"{statistics.median(full):.3f}")
    share = Ratio("eval_share", statistics.median(adaptive), EVAL_SHARE_TARGET, "at_most", detail)
    return [share, *head_speedups(250 if quick else 1000, repeats)]
