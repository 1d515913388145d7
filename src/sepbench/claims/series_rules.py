"""Conditions on theory series (constructions, bounds, random networks): values per swept x instead of runs."""
from __future__ import annotations

import math
from typing import Sequence

from sepbench.claims.catalogue import Claim, Compare, Level, LogGrowth
from sepbench.claims.verdicts import (INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Outcome, Point, combine,
                                      compare_verdict, level_verdict)
from sepbench.wording import counted

Series = dict[str, dict[float, list[float]]]
"""label -> x -> one value per seed (or per repetition)."""


def evaluate_series(claim: Claim, scale: str, series: Series, swept: str = "N") -> list[Outcome]:
    """Each ``compare`` / ``level`` condition of a theory claim, its groups naming series labels and its x the
    values of the ``swept`` parameter ("" for a series of one number); a level condition over several values also
    says at which it holds."""
    outcomes = []
    for condition in claim.conditions:
        if isinstance(condition, LogGrowth):
            outcomes.append(_log_growth(condition, scale, series))
            continue
        if not isinstance(condition, (Compare, Level)):
            outcomes.append(Outcome(condition.text, INCONCLUSIVE, reasons=[f"{condition.kind} needs sweep runs"]))
            continue
        labels = [condition.a, condition.b] if isinstance(condition, Compare) else [condition.group]
        lengths = condition.lengths_at(scale)
        xs = lengths if lengths is not None else sorted({x for label in labels for x in series.get(str(label), {})})
        outcome = Outcome(condition.text, INCONCLUSIVE, threshold=getattr(condition, "threshold", None),
                          x_label=swept)
        verdicts = []
        for x in xs:
            points = [Point(str(label), x, list(series.get(str(label), {}).get(x, []))) for label in labels]
            outcome.points += points
            outcome.evidence.append(" vs ".join(_point_text(p) for p in points) if not swept
                                    else f"{_x_text(x, swept)}: " + " vs ".join(p.text() for p in points))
            short = [p for p in points if len(p.values) < claim.min_seeds]
            if short:
                outcome.reasons += [f"{_x_text(x, swept)}: {p.label} has {counted(len(p.values), 'value')}, "
                                    f"the rule needs {claim.min_seeds}" for p in short]
                verdicts.append(INCONCLUSIVE)
            elif isinstance(condition, Compare):
                verdicts.append(compare_verdict(points[0].values, points[1].values, condition.margin,
                                                condition.direction))
            else:
                verdicts.append(level_verdict(points[0].values, condition.threshold, condition.direction))
        outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
        if isinstance(condition, Level) and len(xs) > 1:
            outcome.evidence.append(held_at(xs, [v == REPRODUCED for v in verdicts], swept))
        outcomes.append(outcome)
    return outcomes


def held_at(xs: Sequence[float], held: Sequence[bool], swept: str) -> str:
    """'holds at 13 of 16 swept values: m = 4 to 16': the runs of consecutive swept values where it held."""
    bands, start = [], None
    for i, ok in enumerate([*held, False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            first, last = xs[start], xs[i - 1]
            bands.append(f"{first:g}" if start == i - 1 else f"{first:g} to {last:g}")
            start = None
    where = f": {swept} = {', '.join(bands)}" if bands else ""
    return f"holds at {sum(held)} of {len(xs)} swept values{where}"


def _log_growth(condition: LogGrowth, scale: str, series: Series) -> Outcome:
    """value / log2(N) at every N within ``slack`` times its value at the smallest N (the largest seed's value),
    judged only over lengths spanning ``min_span``; the evidence names the largest power of N the rule would pass."""
    by_x = series.get(condition.group, {})
    lengths = condition.lengths_at(scale) or sorted(by_x)
    outcome = Outcome(condition.text, INCONCLUSIVE)
    present = [n for n in lengths if by_x.get(n)]
    if len(present) < 2 or min(present) < 2:
        outcome.reasons.append(f"{condition.group}: needs values at two or more lengths >= 2")
        return outcome
    span = max(present) / min(present)
    if span < condition.min_span:
        outcome.reasons.append(f"{condition.group}: lengths {min(present):g} to {max(present):g} span x{span:g}, "
                               f"under the x{condition.min_span:g} that tells log N from a power of N")
        return outcome
    unmeasured = [n for n in present if not all(math.isfinite(v) for v in by_x[n])]
    if unmeasured:
        outcome.reasons.append(f"{condition.group}: beyond the range measured at N = "
                               f"{', '.join(f'{n:g}' for n in unmeasured)}")
        return outcome
    ratios = {n: max(by_x[n]) / math.log2(n) for n in present}
    base = ratios[min(present)]
    if base <= 0:
        outcome.reasons.append(f"{condition.group}: {max(by_x[min(present)]):g} at the smallest N, which no growth "
                               f"is measured from")
        return outcome
    outcome.points = [Point(condition.group, n, list(by_x[n])) for n in present]
    outcome.evidence.append(", ".join(f"N={n}: {condition.group} {max(by_x[n]):g} = {ratios[n]:.2f} log2 N"
                                      for n in present))
    worst = max(ratios.values()) / base
    low, high = min(present), max(present)
    passing_power = math.log(condition.slack * math.log2(high) / math.log2(low)) / math.log(span)
    outcome.evidence.append(f"largest ratio to the smallest N's: x{worst:.2f} (allowed: x{condition.slack:g}; "
                            f"N grows x{span:g}, over which N^a with a <= {passing_power:.2f} would pass too)")
    outcome.verdict = REPRODUCED if worst <= condition.slack else NOT_REPRODUCED
    return outcome


def _point_text(point: Point) -> str:
    """A point of a series with no swept parameter (a bound's one number): its value alone."""
    return f"{point.label} {point.values[0]:g}" if len(point.values) == 1 else point.text()


def _x_text(x: float, swept: str = "N") -> str:
    if swept == "N":
        return f"N={int(x)}" if float(x).is_integer() else f"x={x:g}"
    return f"{swept}={x:g}"
