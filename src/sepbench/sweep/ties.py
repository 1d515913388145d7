"""When two learning rates cannot be told apart: their mean accuracies over seeds lie within the evaluations' noise.

Used by successive halving (``halving_keep_ties``: a rate tied with the worst one kept trains on) and by the
claims' verdicts (``sepbench.claims.ties``: a cut made on a tie leaves a verdict undecided).
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

from sepbench.train.result import EvalPoint, RunResult

FALLBACK_CONFIDENCE = 0.95
"""The confidence of the binomial interval taken for an evaluation stored without one."""
Z = 2.0
"""Standard errors within which two learning rates' mean accuracies count as tied."""


def evaluation_noise(point: EvalPoint, eval_samples: int) -> float:
    """Half the interval of one evaluation's accuracy: the stored Clopper-Pearson one at its own confidence (99% for
    a final evaluation, more per look of the sequential ones), else the binomial one at ``FALLBACK_CONFIDENCE``."""
    if point.interval is not None:
        return (point.interval.high - point.interval.low) / 2
    return _quantile(FALLBACK_CONFIDENCE) * standard_error(point, eval_samples)


def standard_error(point: EvalPoint, eval_samples: int) -> float:
    """One evaluation's standard error: half its stored interval over the normal quantile of that interval's
    confidence, else the binomial one over ``eval_samples`` examples."""
    if point.interval is not None:
        return (point.interval.high - point.interval.low) / 2 / _quantile(point.interval.confidence)
    p = min(max(point.accuracy, 1.0 / eval_samples), 1 - 1.0 / eval_samples)
    return math.sqrt(p * (1 - p) / eval_samples)


def _quantile(confidence: float) -> float:
    """The normal quantile of a two-sided interval at ``confidence``: its half-width in standard errors."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def mean_and_variance(runs: Sequence[RunResult], step: int) -> tuple[float, float] | None:
    """Mean accuracy over the seeds at ``step`` and the variance of that mean; None unless every seed has it."""
    points = [next((p for p in r.curve if p.step == step), None) for r in runs]
    if not runs or any(p is None for p in points):
        return None
    mean = sum(p.accuracy for p in points) / len(points)
    variance = sum(standard_error(p, r.config.train.eval_samples) ** 2 for p, r in zip(points, runs)) / len(points) ** 2
    return mean, variance


def within_noise(lower: tuple[float, float], kept: tuple[float, float]) -> tuple[bool, float]:
    """Whether the rate scored ``lower`` (mean, variance) is within ``Z`` standard errors of ``kept``, and that
    standard error."""
    noise = math.sqrt(lower[1] + kept[1])
    return lower[0] >= kept[0] - Z * noise, noise
