"""What one evaluation found: the teacher-forced sums per length and the metrics with their intervals, as the
training loop keeps them and a checkpoint stores them."""
from __future__ import annotations

from dataclasses import dataclass, field

from sepbench.train.result import EvalInterval, EvalPoint
from sepbench.train.sequential import Interval


@dataclass
class Tally:
    """Running sums of one teacher-forced evaluation: the first ``examples`` rows, how many were right,
    and the summed loss over their ``scored`` tokens."""

    examples: int = 0
    correct: int = 0
    scored: int = 0
    loss_sum: float = 0.0

    @property
    def loss(self) -> float:
        return self.loss_sum / max(1, self.scored)

    @property
    def accuracy(self) -> float:
        return self.correct / max(1, self.examples)


@dataclass
class Assessment:
    """One evaluation of the model: metrics by name, an accuracy interval per accuracy metric, and the
    teacher-forced sums per evaluation length (so a later full evaluation can resume them)."""

    metrics: dict[str, float]
    intervals: dict[str, Interval] = field(default_factory=dict)
    tallies: dict[int, Tally] = field(default_factory=dict)

    def point(self, step: int, seconds: float) -> EvalPoint:
        return EvalPoint(step=step, loss=self.metrics["loss"], accuracy=self.metrics["accuracy"], seconds=seconds,
                         interval=stored_interval(self.intervals.get("accuracy")))


def stored_interval(interval: Interval | None) -> EvalInterval | None:
    if interval is None:
        return None
    return EvalInterval(n=interval.n, low=interval.low, high=interval.high, confidence=interval.confidence)
