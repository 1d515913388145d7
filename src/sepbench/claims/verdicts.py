"""The verdicts of claims and their parts: the three words, a condition's outcome and the numbers behind it, a
claim's verdict with its cost, and the rules that turn seeds' values into a verdict (``sepbench.claims.evaluate``
applies them to runs, ``sepbench.claims.series_rules`` to theory series)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from sepbench.claims.catalogue import Claim
from sepbench.train.result import RunResult
from sepbench.wording import counted

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
STILL_LEARNING = "still learning at"
SEEDS_STRADDLE = "seeds straddle"
SEARCH_TIE = "the rate search cut"
NO_EVIDENCE = "no evidence shipped"
TOO_FEW_EVALUATIONS = "too few evaluations to tell"
RUNS_MISSING = "missing (no result to judge)"
STOPPED_EARLY = "stopped early at"
GRID_BOTTOM_TIE = "a tie that only narrower widths can order, whatever the budget"
SHORT_OF_THE_TEXT = "stops short of the size the text names"
INF = math.inf


@dataclass
class Point:
    """One group at one x (a length, usually): the seeds behind it and where they came from."""

    label: str
    x: float
    values: list[float]
    member: str = ""
    detail: str = ""
    runs: list[RunResult] = field(default_factory=list, repr=False)
    """The runs behind ``values`` (the picked member's seeds at its chosen learning rate)."""

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else math.nan

    def text(self) -> str:
        if not self.values:
            return f"{self.label}: no data"
        spread = f" [{min(self.values):.3f}, {max(self.values):.3f}]" if len(self.values) > 1 else ""
        who = f" {self.member}" if self.member and self.member != self.label else ""
        return f"{self.label}{who} {self.mean:.3f}{spread} ({counted(len(self.values), 'seed')}{self.detail})"


@dataclass
class Outcome:
    """The verdict of one condition, the numbers behind it and why."""

    text: str
    verdict: str
    evidence: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    threshold: float | None = None
    """The level a ``level`` condition asks for (drawn as a line in the claim's figure)."""
    x_label: str = "N"
    """What the points' x is: the length, a swept parameter's name, or "" for a series of one number."""
    waits_on: set[str] = field(default_factory=set)
    """Config hashes of the runs of rates a search cut on a tie that this verdict waits on (``--settle-ties``)."""


@dataclass
class ClaimVerdict:
    """A claim's verdict at one scale: its conditions' outcomes, and what the runs behind them cost."""

    claim: Claim
    scale: str
    verdict: str
    outcomes: list[Outcome]
    wall_seconds: float = 0.0
    runs: int = 0
    cpu_seconds: float = 0.0
    """The CPU seconds of the claim's CPU runs that counted them (``RunResult.cpu_seconds``)."""
    cpu_runs: int = 0
    """How many runs ``cpu_seconds`` sums."""

    @property
    def cost(self) -> str:
        """The wall time, and the CPU time of the runs that counted it (core-hours)."""
        wall = f"{self.wall_seconds:.0f} s" if self.wall_seconds < 120 else f"{self.wall_seconds / 60:.1f} min"
        if not self.cpu_runs:
            return wall
        counted = "" if self.cpu_runs == self.runs else f" ({self.cpu_runs} of {self.runs} runs)"
        return f"{wall}, CPU {self.cpu_seconds / 3600:.2f} core-h{counted}"

    @property
    def label(self) -> str:
        """The verdict, as "inconclusive: still learning at B steps" when a deciding run was still learning, or
        "inconclusive: runs missing" while some of the claim's runs have no result."""
        if self.verdict != INCONCLUSIVE:
            return self.verdict
        reasons = [r for o in self.outcomes for r in o.reasons]
        for common in (NO_EVIDENCE, f"not run at the {self.scale} scale"):
            if reasons and all(r.startswith(common) for r in reasons):
                return f"{INCONCLUSIVE}: {common}"
        if any(RUNS_MISSING in reason for reason in reasons):
            return f"{INCONCLUSIVE}: runs missing"
        budgets = sorted({reason.split(STILL_LEARNING, 1)[1].split()[0] for o in self.outcomes for reason in o.reasons
                          if STILL_LEARNING in reason}, key=int)
        tied = any(SEARCH_TIE in reason for o in self.outcomes for reason in o.reasons)
        untried = ", and the rate search cut rates it could not rank" if tied else ""
        if budgets:
            return f"{INCONCLUSIVE}: {STILL_LEARNING} {'/'.join(budgets)} steps{untried}"
        if tied:
            return f"{INCONCLUSIVE}: {SEARCH_TIE} rates it could not rank"
        if any(TOO_FEW_EVALUATIONS in reason for o in self.outcomes for reason in o.reasons):
            return f"{INCONCLUSIVE}: {TOO_FEW_EVALUATIONS} whether the runs stopped learning"
        if any(STOPPED_EARLY in reason for reason in reasons):
            return f"{INCONCLUSIVE}: seeds {STOPPED_EARLY} their train.threshold, short of the line"
        if any(SEEDS_STRADDLE in reason for o in self.outcomes for reason in o.reasons):
            return f"{INCONCLUSIVE}: {SEEDS_STRADDLE} the line, no deciding run still learning"
        if any(GRID_BOTTOM_TIE in reason for reason in reasons):
            return f"{INCONCLUSIVE}: tied at the grid's smallest width, which no budget orders"
        if any(SHORT_OF_THE_TEXT in reason for reason in reasons):
            return f"{INCONCLUSIVE}: this scale {SHORT_OF_THE_TEXT}"
        return self.verdict


def combine(verdicts: Sequence[str]) -> str:
    """All reproduced -> reproduced; any not reproduced -> not reproduced; otherwise inconclusive."""
    if verdicts and all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    if any(v == NOT_REPRODUCED for v in verdicts):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def compare_verdict(a: Sequence[float], b: Sequence[float], margin: float, direction: str = "above") -> str:
    """a - b >= margin on every seed pairing (reproduced), on none (not reproduced), or on some (inconclusive)."""
    low, high = min(a) - max(b), max(a) - min(b)
    if direction == "above":
        return REPRODUCED if low >= margin else NOT_REPRODUCED if high < margin else INCONCLUSIVE
    return REPRODUCED if high < margin else NOT_REPRODUCED if low >= margin else INCONCLUSIVE


def level_verdict(values: Sequence[float], threshold: float, direction: str = "at_least",
                  seeds_needed: int | None = None) -> str:
    """Every seed at/above ``threshold`` (reproduced), none (not reproduced), some (inconclusive); ``below`` flips.
    With ``seeds_needed`` = k: at least k seeds at/above it (reproduced), else not reproduced."""
    above = [v >= threshold for v in values]
    if seeds_needed is not None:
        return REPRODUCED if sum(above) >= seeds_needed else NOT_REPRODUCED
    if direction == "below":
        above = [not a for a in above]
    return REPRODUCED if all(above) else NOT_REPRODUCED if not any(above) else INCONCLUSIVE


def order_verdict(lower: Sequence[float], higher: Sequence[float]) -> str:
    """Whether every value ``lower`` may take is below every value ``higher`` may take (sets of possible values;
    ``INF``, beyond the grid, is no number: two of them have no known order)."""
    if max(lower) < min(higher):
        return REPRODUCED
    if max(higher) <= min(lower) and max(higher) < INF:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def flip(verdict: str) -> str:
    return {REPRODUCED: NOT_REPRODUCED, NOT_REPRODUCED: REPRODUCED}.get(verdict, verdict)


def at_most_verdict(lower: Sequence[float], higher: Sequence[float]) -> str:
    """Whether every value ``lower`` may take is at most every value ``higher`` may take (``INF`` as above)."""
    if max(lower) <= min(higher) and max(lower) < INF:
        return REPRODUCED
    if min(lower) > max(higher):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def weak_order_verdict(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> str:
    """a <= b at every length and a < b at one or more, from each length's possible values (a, b)."""
    at_most = [at_most_verdict(a, b) for a, b in pairs]
    below = [order_verdict(a, b) for a, b in pairs]
    if NOT_REPRODUCED in at_most or (below and all(v == NOT_REPRODUCED for v in below)):
        return NOT_REPRODUCED
    if at_most and all(v == REPRODUCED for v in at_most) and REPRODUCED in below:
        return REPRODUCED
    return INCONCLUSIVE
