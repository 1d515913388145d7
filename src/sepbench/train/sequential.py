"""The evaluation budget: a doubling schedule of looks and exact intervals that decide the threshold early.

Adaptive evaluation scores the evaluation set in order and, at each look (FIRST_LOOK examples, then twice as
many, ..., then all), stops once the Clopper-Pearson interval (Clopper and Pearson 1934) on accuracy lies
entirely above or below the threshold. That interval covers the true accuracy with at least its confidence for
every accuracy and n, and the per-look confidence is Bonferroni-adjusted over the schedule's looks, so the
chance that any look decides wrongly is at most 1 - CONFIDENCE. The point estimate always lies inside its
interval, so "accuracy >= threshold" gives the same verdict as the interval when a look decides.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from scipy.special import betaincinv

CONFIDENCE = 0.99
FIRST_LOOK = 256


@dataclass(frozen=True)
class Interval:
    """A confidence interval on accuracy from ``correct`` right out of ``n`` examples."""

    n: int
    correct: int
    low: float
    high: float
    confidence: float

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    def decides(self, threshold: float) -> bool:
        """Whether the interval lies entirely at or above, or entirely below, ``threshold``."""
        return self.low >= threshold or self.high < threshold


def clopper_pearson(correct: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """The two-sided exact (Clopper-Pearson) interval from beta quantiles; [0, 1] when ``n`` is 0."""
    if n == 0:
        return Interval(0, 0, 0.0, 1.0, confidence)
    tail = (1 - confidence) / 2
    p = correct / n
    low = float(betaincinv(correct, n - correct + 1, tail)) if correct > 0 else 0.0
    high = float(betaincinv(correct + 1, n - correct, 1 - tail)) if correct < n else 1.0
    return Interval(n, correct, min(p, low), max(p, high), confidence)


def looks(total: int, first: int = FIRST_LOOK) -> list[int]:
    """Example counts at which adaptive evaluation may stop: first, 2 first, 4 first, ..., then total."""
    points, n = [], first
    while n < total:
        points.append(n)
        n *= 2
    return points + [total]


def look_confidence(total: int, confidence: float = CONFIDENCE) -> float:
    """Per-look confidence that keeps ``confidence`` over all the looks of ``looks(total)`` (Bonferroni)."""
    return 1 - (1 - confidence) / len(looks(total))


def run_looks(count: Callable[[int], int], total: int, threshold: float | None = None, start: int = 0) -> Interval:
    """Walk the looks of ``looks(total)`` from ``start`` on; ``count(n)``: right answers among the first n.

    With ``threshold``, stop at the first look whose interval, at ``look_confidence``, decides it and return
    that interval. Without, go on to ``total`` and return its interval at ``CONFIDENCE``.
    """
    confidence = CONFIDENCE if threshold is None else look_confidence(total)
    interval = clopper_pearson(0, 0, confidence)
    for n in looks(total):
        if n < start:
            continue
        interval = clopper_pearson(count(n), n, confidence)
        if threshold is not None and interval.decides(threshold):
            break
    return interval
