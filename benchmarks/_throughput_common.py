"""The one line every throughput measurement prints, and a timer that repeats a callable."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Literal


@dataclass(frozen=True)
class Ratio:
    """A measured ratio against its target; ``at_least``: the ratio must reach the target, else stay under it."""

    name: str
    ratio: float
    target: float
    direction: Literal["at_least", "at_most"]
    detail: str = ""

    @property
    def met(self) -> bool:
        return self.ratio >= self.target if self.direction == "at_least" else self.ratio <= self.target

    def line(self, judged: bool = True) -> str:
        """The ratio beside its target; ``judged=False`` (a smoke run's sizes) leaves met or missed unsaid."""
        sign = ">=" if self.direction == "at_least" else "<="
        tail = f"  ({self.detail})" if self.detail else ""
        verdict = ("met" if self.met else "MISSED") if judged else "not judged"
        return f"{self.name} ratio {self.ratio:.3g} target {sign}{self.target:g} {verdict}{tail}"


def timed(call: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(min, median) wall seconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)
