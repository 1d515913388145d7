"""Verdicts from data: a claim's conditions applied to stored runs (or to a theory check's series).

Rules, the same for every claim:

* A group's value at a length is the seeds of its best configuration: per member (``per`` keys, e.g. the model),
  each cell's learning rate with the highest mean accuracy over its trained seeds, then the member's best cell;
  the group's best or worst member is picked as the condition says.
* ``compare`` (a beats b by ``margin``): reproduced when even the worst seed pairing clears the margin
  (min a - max b >= margin), not reproduced when even the best does not (max a - min b < margin), inconclusive
  when the seeds straddle it. ``below`` swaps the two.
* ``level`` (at least ``threshold``): reproduced when every seed is at or above it, not reproduced when none is.
* Smallest solving widths (solved = accuracy >= threshold in k of m seeds at the best learning rate) are sets of
  grid widths the data leave possible (between the largest width decided unsolved and the smallest solved,
  unbounded when none solved): an order holds when every possible value of one side is below every possible
  value of the other, fails when the reverse holds, and is inconclusive otherwise.
* ``level`` with ``lrs`` = L: the same at each member's L-th best learning rate (it holds at L of them).
* ``rate`` (Bhattamishra et al. L293, "the rate of learning"): T = the steps the fast group's best member takes to
  reach the threshold (its best learning rate, slowest seed, from its curve); reproduced when the slow group's best
  member, read off its curves at k x T steps, is below the threshold on every seed, not reproduced when it reached
  it on every seed. Slow runs whose budget ends before k x T make it inconclusive. With ``fast_within`` = B, a
  fast side whose T is not below B steps (or that never reaches the threshold in B steps) is not reproduced.
* ``fixed_width``: one grid width <= ``max_width`` is solved at every length (reproduced), every such width is
  decided unsolved at some length (not reproduced), otherwise inconclusive.
* ``min_width_order``: per task, a's smallest solving width <= b's at every length and < at one or more; a tie at
  every length is not reproduced, as is b < a at some length.
* ``growth_order``: per model, the factor by which the smallest solving width grows from the smallest to the
  largest length is larger on task b than on task a.
* Fewer trained seeds than the claim's ``min_seeds``, runs missing from the store, failed runs, or diverged runs
  of a cell none of whose learning rates trained make a condition inconclusive, never not reproduced. So does a deciding run still learning at the end of its
  budget (``sepbench.claims.learning``): "not reproduced" becomes "inconclusive: still learning at B steps", with
  the measured slope and the budget it points to; an unsolved width whose runs are still learning is undecided.
  So does a side whose rise could change a ``compare`` or ``level`` verdict when the learning-rate search cut one of
  its rates on a tie (``sepbench.claims.ties``: within the evaluations' noise of a rate it kept, as every rate is
  while none has learned): its best configuration may be one never trained to the budget.
  A claim is reproduced when every condition is, not reproduced when any condition is, and inconclusive
  otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from sepbench.claims.catalogue import (Claim, Compare, FixedWidth, FlopsOrder, Group, GrowthOrder, Level, LogGrowth,
                                       MinWidthGrowth, MinWidthOrder, Rate, SolvedRuleFields, config_fields, group_at,
                                       in_group)
from sepbench.claims.learning import learning_reason
from sepbench.claims.ties import tied_cuts
from sepbench.config import RunConfig
from sepbench.results import TRAINED
from sepbench.sweep.search import SolvedRule, cell_key, estimate_paper_flops, select_lr, width_verdicts
from sepbench.train.result import RunResult

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
STILL_LEARNING = "still learning at"
SEEDS_STRADDLE = "seeds straddle"
SEARCH_TIE = "the rate search cut"
NO_EVIDENCE = "no evidence shipped"
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
        return f"{self.label}{who} {self.mean:.3f}{spread} ({len(self.values)} seeds{self.detail})"


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


@dataclass
class ClaimVerdict:
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
        """The verdict, as "inconclusive: still learning at B steps" when a deciding run was still learning."""
        if self.verdict != INCONCLUSIVE:
            return self.verdict
        reasons = [r for o in self.outcomes for r in o.reasons]
        for common in (NO_EVIDENCE, f"not run at the {self.scale} scale"):
            if reasons and all(r.startswith(common) for r in reasons):
                return f"{INCONCLUSIVE}: {common}"
        budgets = sorted({reason.split(STILL_LEARNING, 1)[1].split()[0] for o in self.outcomes for reason in o.reasons
                          if STILL_LEARNING in reason}, key=int)
        tied = any(SEARCH_TIE in reason for o in self.outcomes for reason in o.reasons)
        untried = ", and the rate search cut rates it could not rank" if tied else ""
        if budgets:
            return f"{INCONCLUSIVE}: {STILL_LEARNING} {'/'.join(budgets)} steps{untried}"
        if tied:
            return f"{INCONCLUSIVE}: {SEARCH_TIE} rates it could not rank"
        if any(SEEDS_STRADDLE in reason for o in self.outcomes for reason in o.reasons):
            return f"{INCONCLUSIVE}: {SEEDS_STRADDLE} the line, their curves flat"
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


def level_verdict(values: Sequence[float], threshold: float, direction: str = "at_least") -> str:
    """Every seed at/above ``threshold`` (reproduced), none (not reproduced), some (inconclusive); ``below`` flips."""
    above = [v >= threshold for v in values]
    if direction == "below":
        above = [not a for a in above]
    return REPRODUCED if all(above) else NOT_REPRODUCED if not any(above) else INCONCLUSIVE


def order_verdict(lower: Sequence[float], higher: Sequence[float]) -> str:
    """Whether every value ``lower`` may take is below every value ``higher`` may take (sets of possible values)."""
    if max(lower) < min(higher):
        return REPRODUCED
    if max(higher) <= min(lower):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def _flip(verdict: str) -> str:
    return {REPRODUCED: NOT_REPRODUCED, NOT_REPRODUCED: REPRODUCED}.get(verdict, verdict)


# ---- runs -> groups -------------------------------------------------------------------------------------------

def member_name(config: RunConfig, per: Sequence[str]) -> str:
    flat = config_fields(config)
    return "/".join(str(flat.get(key)) for key in per)


def model_label(config: RunConfig) -> str:
    """``lstm-(1, 64)``: the model, its layers and width."""
    return f"{config.model.name}-({config.model.layers}, {config.model.width})"


@dataclass
class Slot:
    """The runs of one group at one length: those expected, and those the store holds."""

    expected: list[RunConfig]
    results: list[RunResult]

    @property
    def missing(self) -> int:
        return len(self.expected) - len(self.results)

    @property
    def failed(self) -> list[RunResult]:
        """Runs that failed, and diverged runs of a cell none of whose learning rates trained: gaps, never runs that
        did not learn (a diverged learning rate beside one that trained is a losing one, as in ``select_lr``)."""
        trained = {cell_key(r.config) for r in self.results if r.status in TRAINED}
        return [r for r in self.results
                if r.status == "failed" or (r.status == "diverged" and cell_key(r.config) not in trained)]


def final_accuracy(result: RunResult) -> float:
    return result.metrics.get("accuracy", math.nan)


def group_point(slot: Slot, label: str, x: float, per: Sequence[str], pick: str, rank: int = 1,
                value: Callable[[RunResult], float] = final_accuracy) -> Point:
    """The group's value at one length: per member its best cell at its best learning rate (its ``rank``-th best
    with ``rank`` > 1); the best or worst member by mean ``value`` over the seeds of that learning rate."""
    members: dict[str, tuple[float, list[RunResult], str, int]] = {}
    by_cell: dict[str, list[RunResult]] = {}
    for result in slot.results:
        by_cell.setdefault(cell_key(result.config), []).append(result)
    for runs in by_cell.values():
        by_lr: dict[float, list[RunResult]] = {}
        for r in runs:
            if r.status in TRAINED:
                by_lr.setdefault(r.config.train.lr, []).append(r)
        ranked = sorted(by_lr.items(), key=lambda item: (-np.mean([value(r) for r in item[1]]), item[0]))
        if len(ranked) < rank:
            continue
        lr, chosen = ranked[rank - 1]
        name = member_name(runs[0].config, per)
        mean = float(np.mean([value(r) for r in chosen]))
        if name not in members or mean > members[name][0]:
            members[name] = (mean, chosen, f"{model_label(runs[0].config)} lr {lr:g}", len(by_lr))
    if not members:
        return Point(label, x, [])
    chosen_member = (max if pick == "best" else min)(members.items(), key=lambda item: item[1][0])
    _, (_, seeds, where, lrs) = chosen_member
    ordinal = "best" if rank == 1 else f"{_ordinal(rank)} best"
    return Point(label, x, [value(r) for r in seeds], member=where, detail=f", {ordinal} of {lrs} lr", runs=list(seeds))


def _ordinal(rank: int) -> str:
    suffix = "th" if 10 <= rank % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(rank % 10, "th")
    return f"{rank}{suffix}"


def _gaps(slot: Slot, min_seeds: int, point: Point) -> list[str]:
    reasons = []
    if slot.missing:
        reasons.append(f"{slot.missing} runs not in the store")
    if slot.failed:
        reasons.append(f"{len(slot.failed)} runs failed or diverged ({slot.failed[0].status}: "
                       f"{slot.failed[0].error or 'no reason stored'})")
    if len(point.values) < min_seeds:
        reasons.append(f"{point.label}: {len(point.values)} trained seeds, the rule needs {min_seeds}")
    return reasons


def _slots(configs: Sequence[RunConfig], results: dict[str, RunResult], group: Group,
           lengths: Sequence[int] | None) -> dict[int, Slot]:
    slots: dict[int, Slot] = {}
    for cfg in configs:
        if not in_group(cfg, group) or (lengths is not None and cfg.task.length not in lengths):
            continue
        slot = slots.setdefault(cfg.task.length, Slot([], []))
        slot.expected.append(cfg)
        found = results.get(cfg.config_hash())
        if found is not None:
            slot.results.append(found)
    return slots


def _group_label(group: Group) -> str:
    if isinstance(group, str):
        return group
    selectors = group if isinstance(group, list) else [group]
    parts = []
    for s in selectors:
        parts.append(" ".join(f"{k.split('.')[-1]}={'|'.join(map(str, v)) if isinstance(v, list) else v}"
                              for k, v in s.items()) or "all")
    return " or ".join(parts)


# ---- conditions on runs ---------------------------------------------------------------------------------------

def _on_lengths(condition: Compare | Level, scale: str, configs: Sequence[RunConfig],
                results: dict[str, RunResult], min_seeds: int) -> Outcome:
    lengths = condition.lengths_at(scale)
    groups = [condition.a, condition.b] if isinstance(condition, Compare) else [condition.group]
    picks = [condition.a_pick, condition.b_pick] if isinstance(condition, Compare) else [condition.pick]
    rank = condition.lrs if isinstance(condition, Level) else 1
    slot_maps = [_slots(configs, results, g, lengths) for g in groups]
    wanted = lengths if lengths is not None else sorted(set().union(*slot_maps))
    outcome = Outcome(condition.text, INCONCLUSIVE, threshold=getattr(condition, "threshold", None))
    verdicts = []
    for n in wanted:
        points, reasons, searched = [], [], []
        for group, pick, slots in zip(groups, picks, slot_maps):
            slot = slots.get(n)
            searched.append(slot.results if slot is not None else [])
            if slot is None:
                reasons.append(f"N={n}: no run of {_group_label(group)} in the claim's specs")
                points.append(Point(_group_label(group), n, []))
                continue
            point = group_point(slot, _group_label(group), n, condition.per, pick, rank)
            points.append(point)
            reasons += [f"N={n}: {r}" for r in _gaps(slot, min_seeds, point)]
        outcome.points += points
        outcome.evidence.append(f"N={n}: " + " vs ".join(p.text() for p in points))
        if reasons:
            outcome.reasons += reasons
            verdicts.append(INCONCLUSIVE)
            continue
        if isinstance(condition, Compare) and _both_reach(condition, points):
            outcome.evidence[-1] += f" (outside the claim: both reach {condition.outside_if_both_reach:g})"
            continue
        if isinstance(condition, Compare):
            verdict = compare_verdict(points[0].values, points[1].values, condition.margin, condition.direction)
        else:
            verdict = level_verdict(points[0].values, condition.threshold, condition.direction)
        learning = _still_learning_reason(condition, points) if verdict != REPRODUCED else None
        tie = _search_tie_reason(condition, verdict, searched, points, picks)
        if learning:
            outcome.reasons.append(f"N={n}: {learning}")
        elif verdict == INCONCLUSIVE and not tie:
            outcome.reasons.append(f"N={n}: {_straddle_text(condition, points)}")
        if tie:
            outcome.reasons.append(f"N={n}: {tie}")
        verdicts.append(INCONCLUSIVE if learning or tie else verdict)
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    if not verdicts and not outcome.reasons:
        outcome.reasons.append("no lengths to judge" if not wanted else
                               "every length is outside the claim: both sides reach "
                               f"{condition.outside_if_both_reach:g} there")
    return outcome


def _both_reach(condition: Compare, points: Sequence[Point]) -> bool:
    level = condition.outside_if_both_reach
    return level is not None and all(v >= level for p in points for v in p.values)


def _still_learning_reason(condition: Compare | Level, points: Sequence[Point]) -> str | None:
    """Why "not reproduced" (or seeds on both sides) is not yet decided: a run of the side that had to rise was
    still learning (None otherwise)."""
    if isinstance(condition, Level):
        rising, target = points[0].runs, condition.threshold
        if condition.direction != "at_least":
            return None
    elif condition.direction == "above":
        rising, target = points[0].runs, min(1.0, max(points[1].values) + condition.margin)
    else:
        rising, target = points[1].runs, max(0.0, max(points[0].values) - condition.margin)
    return learning_reason([r for r in rising if final_accuracy(r) < target], target)


def _search_tie_reason(condition: Compare | Level, verdict: str, searched: Sequence[Sequence[RunResult]],
                       points: Sequence[Point], picks: Sequence[str]) -> str | None:
    """Why a verdict rests on learning rates the search never trained (``sepbench.claims.ties``): a side whose
    rise could change the verdict (one that must rise and has not, or one that must stay below and has) had a
    rate cut on a tie. With ``pick: worst`` only the picked member's rise moves the group's value."""
    if isinstance(condition, Level):
        rises_help = [condition.direction == "at_least"]
    else:
        rises_help = [condition.direction == "above", condition.direction != "above"]
    cuts = []
    for helps, results, point, pick in zip(rises_help, searched, points, picks):
        if verdict == (REPRODUCED if helps else NOT_REPRODUCED):
            continue
        if pick != "best" and point.runs:
            member = member_name(point.runs[0].config, condition.per)
            results = [r for r in results if member_name(r.config, condition.per) == member]
        cuts += tied_cuts(results)
    if not cuts:
        return None
    others = f" ({len(cuts) - 1} more such cuts)" if len(cuts) > 1 else ""
    runs = sum(len(cut.hashes) for cut in cuts)
    budgets = "/".join(str(b) for b in sorted({cut.budget for cut in cuts}))
    return (f"{cuts[0].text()}{others}: the best configuration may be one the search never trained to its "
            f"budget, so the verdict waits on those rates trained in full ({runs} runs of {budgets} steps; "
            "`--settle-ties`)")


def _straddle_text(condition: Compare | Level, points: Sequence[Point]) -> str:
    """Why a condition whose deciding runs are done is still undecided: its seeds fall on both sides of the line."""
    if isinstance(condition, Level):
        line, values = f"{condition.threshold:g}", points[0].values
    else:
        line, values = f"a margin of {condition.margin:g}", [a - b for a in points[0].values for b in points[1].values]
    return (f"{SEEDS_STRADDLE} {line} ({min(values):.3f} to {max(values):.3f}) and no deciding run was still "
            "learning: the rule needs all seeds on one side")


def _accuracy_at(result: RunResult, step: float) -> float:
    """Accuracy of the last evaluation at or before ``step``; a run that stopped solved keeps its last value."""
    seen = [p.accuracy for p in result.curve if p.step <= step]
    if seen:
        return seen[-1]
    return math.nan


def _steps_to(result: RunResult, threshold: float) -> float:
    """The first evaluated step at which the run's accuracy reached ``threshold`` (inf if it never did)."""
    return next((float(p.step) for p in result.curve if p.accuracy >= threshold), INF)


def _rate(condition: Rate, scale: str, configs: Sequence[RunConfig], results: dict[str, RunResult],
          min_seeds: int) -> Outcome:
    lengths = condition.lengths_at(scale)
    fast_slots = _slots(configs, results, condition.fast, lengths)
    slow_slots = _slots(configs, results, condition.slow, lengths)
    wanted = lengths if lengths is not None else sorted(set(fast_slots) | set(slow_slots))
    outcome = Outcome(condition.text, INCONCLUSIVE, threshold=condition.threshold)
    verdicts = []
    for n in wanted:
        fast_slot, slow_slot = fast_slots.get(n), slow_slots.get(n)
        if fast_slot is None or slow_slot is None:
            outcome.reasons.append(f"N={n}: the claim's specs have no runs of one side")
            verdicts.append(INCONCLUSIVE)
            continue
        fast = group_point(fast_slot, _group_label(condition.fast), n, condition.per, "best",
                           value=lambda r: -_steps_to(r, condition.threshold))
        reasons = [f"N={n}: {r}" for r in _gaps(fast_slot, min_seeds, fast)]
        steps = max((_steps_to(r, condition.threshold) for r in fast.runs), default=INF)
        if reasons:
            outcome.reasons += reasons
            verdicts.append(INCONCLUSIVE)
            continue
        within = condition.fast_within
        if within is not None and steps >= within and (steps < INF or max(r.steps for r in fast.runs) >= within):
            reached = f"reaches it at T = {steps:.0f} steps (slowest seed)" if steps < INF else "never reaches it"
            outcome.evidence.append(f"N={n}: {fast.label} {fast.member} {reached}: not below {within} steps")
            verdicts.append(NOT_REPRODUCED)
            continue
        if steps == INF:
            budget = max(r.steps for r in fast.runs)
            outcome.evidence.append(f"N={n}: {fast.label} {fast.member} does not reach {condition.threshold:g} "
                                    f"within {budget} steps on every seed")
            learning = learning_reason(fast.runs, condition.threshold)
            outcome.reasons += [f"N={n}: {learning}"] if learning else []
            verdicts.append(INCONCLUSIVE if learning else NOT_REPRODUCED)
            continue
        horizon = condition.k * steps
        slow = group_point(slow_slot, _group_label(condition.slow), n, condition.per, "best",
                           value=lambda r: _accuracy_at(r, horizon))
        outcome.points.append(Point(f"{slow.label} at {condition.k:g} x T", n, slow.values, slow.member))
        outcome.evidence.append(f"N={n}: {fast.label} {fast.member} reaches {condition.threshold:g} at T = "
                                f"{steps:.0f} steps (slowest seed); at {condition.k:g} x T = {horizon:.0f} steps: "
                                f"{slow.text()}")
        short = [r for r in slow_slot.results if r.status == "completed" and r.steps < horizon]
        reasons = [f"N={n}: {r}" for r in _gaps(slow_slot, min_seeds, slow)]
        if short:
            reasons.append(f"N={n}: {len(short)} runs of {slow.label} stopped at {min(r.steps for r in short)} "
                           f"steps, before {condition.k:g} x T = {horizon:.0f}")
        if reasons:
            outcome.reasons += reasons
            verdicts.append(INCONCLUSIVE)
            continue
        verdicts.append(level_verdict(slow.values, condition.threshold, "below"))
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    if not verdicts:
        outcome.reasons.append("no lengths to judge")
    return outcome


BELOW_GRID = 0.0
"""A possible smallest solving width below the smallest width tried (the grid cannot tell it from that width)."""


def possible_widths(verdicts: dict[int, str]) -> list[float]:
    """Grid widths the smallest solving width may be, given each width's verdict (solved, unsolved, undecided,
    failed); ``inf`` when none solved (it may lie beyond the grid), ``BELOW_GRID`` when no width below the
    possible ones was decided unsolved (it may lie below the grid)."""
    solved = [w for w, v in verdicts.items() if v == "solved"]
    high = min(solved) if solved else INF
    unsolved = [w for w, v in verdicts.items() if v == "unsolved" and w < high]
    low = max(unsolved) if unsolved else 0
    found: list[float] = [w for w, v in sorted(verdicts.items()) if low < w <= high and v != "unsolved"]
    below = [BELOW_GRID] if not unsolved and found else []
    return below + found + ([INF] if high == INF else [])


def decided_cells(results: Sequence[RunResult], rule: SolvedRule, per: Sequence[str],
                  notes: list[str] | None = None) -> pd.DataFrame:
    """``select_lr``'s cells with their ``member``; a cell decided unsolved whose best-learning-rate runs were still
    learning counts as undecided (said in ``notes``)."""
    cells = select_lr(results, rule)
    if cells.empty:
        return cells
    names = {cell_key(r.config): member_name(r.config, per) for r in results}
    cells = cells.assign(member=[names[c] for c in cells.cell])
    by_cell: dict[str, list[RunResult]] = {}
    for r in results:
        by_cell.setdefault(cell_key(r.config), []).append(r)
    verdicts = list(cells.verdict)
    for i, (cell, verdict, best_lr) in enumerate(zip(cells.cell, cells.verdict, cells.best_lr)):
        if verdict != "unsolved":
            continue
        reason = learning_reason([r for r in by_cell[cell] if r.config.train.lr == best_lr], rule.threshold)
        if reason:
            verdicts[i] = "undecided"
            if notes is not None:
                first = by_cell[cell][0].config
                notes.append(f"{member_name(first, per)} N={first.task.length} width {first.model.width}: {reason}")
    return cells.assign(verdict=verdicts)


def width_sets(results: Sequence[RunResult], rule: SolvedRule, per: Sequence[str], notes: list[str] | None = None
               ) -> dict[str, dict[int, list[float]]]:
    """Per member, per length: the possible smallest solving widths (``possible_widths``). A width decided
    unsolved whose best-learning-rate runs were still learning counts as undecided (said in ``notes``)."""
    cells = decided_cells(results, rule, per, notes)
    if cells.empty:
        return {}
    sets: dict[str, dict[int, list[float]]] = {}
    for member, rows in cells.groupby("member"):
        for length, widths in width_verdicts(rows).groupby("length"):
            width_verdict = {int(w): v for w, v in zip(widths.width, widths.verdict)}
            sets.setdefault(member, {})[int(length)] = possible_widths(width_verdict)
    return sets


def _widths_text(values: Sequence[float]) -> str:
    finite = ["below the grid" if v == BELOW_GRID else str(int(v)) for v in values if v != INF]
    text = ",".join(finite)
    if INF in values:
        text = f"{text}, or beyond the grid" if text else "beyond the grid"
    return "{" + text + "}"


def _rule(fields: SolvedRuleFields) -> SolvedRule:
    return SolvedRule(fields.threshold, fields.k, fields.m)


def _runs_in(configs: Sequence[RunConfig], results: dict[str, RunResult], group: Group,
             lengths: Sequence[int] | None) -> tuple[list[RunResult], list[str]]:
    slots = _slots(configs, results, group, lengths)
    found = [r for slot in slots.values() for r in slot.results]
    missing = sum(slot.missing for slot in slots.values())
    failed = sum(len(slot.failed) for slot in slots.values())
    reasons = ([f"{missing} runs not in the store"] if missing else []) + ([f"{failed} runs failed"] if failed else [])
    if not slots:
        reasons.append(f"no run of {_group_label(group)} in the claim's specs")
    return found, reasons


def _width_points(label: str, per_length: dict[int, list[float]]) -> list[Point]:
    points = []
    for n, values in sorted(per_length.items()):
        finite = [v for v in values if v != INF]
        shown = [min(values)] if min(values) != INF else []
        points.append(Point(label, n, shown, detail=f", possible {_widths_text(values)}" if finite else ""))
    return points


def _min_width_growth(condition: MinWidthGrowth, scale: str, configs: Sequence[RunConfig],
                      results: dict[str, RunResult]) -> Outcome:
    found, reasons = _runs_in(configs, results, condition.group, condition.lengths_at(scale))
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons))
    verdicts = []
    for member, per_length in sorted(width_sets(found, _rule(condition.solved), condition.per, outcome.reasons).items()):
        small, large = min(per_length), max(per_length)
        outcome.evidence.append(f"{member}: smallest solving width N={small} {_widths_text(per_length[small])}, "
                                f"N={large} {_widths_text(per_length[large])}")
        outcome.points += _width_points(member, per_length)
        if small == large:
            outcome.reasons.append(f"{member}: only one length")
            verdicts.append(INCONCLUSIVE)
        elif min(per_length[small]) == INF:
            outcome.reasons.append(f"{member}: no width solves N={small}")
            verdicts.append(INCONCLUSIVE)
        else:
            grows = order_verdict(per_length[small], per_length[large])
            verdicts.append(grows if condition.grows else _flip(grows))
    if reasons or not verdicts:
        verdicts.append(INCONCLUSIVE)
    outcome.verdict = combine(verdicts)
    return outcome


def at_most_verdict(lower: Sequence[float], higher: Sequence[float]) -> str:
    """Whether every value ``lower`` may take is at most every value ``higher`` may take."""
    if max(lower) <= min(higher):
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


def _min_width_order(condition: MinWidthOrder, scale: str, configs: Sequence[RunConfig],
                     results: dict[str, RunResult]) -> Outcome:
    lengths = condition.lengths_at(scale)
    rule = _rule(condition.solved)
    runs_a, reasons_a = _runs_in(configs, results, condition.a, lengths)
    runs_b, reasons_b = _runs_in(configs, results, condition.b, lengths)
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=reasons_a + reasons_b)
    verdicts = [INCONCLUSIVE] if outcome.reasons else []
    sets_a = width_sets(runs_a, rule, ["task.name"], outcome.reasons)
    sets_b = width_sets(runs_b, rule, ["task.name"], outcome.reasons)
    label_a, label_b = _group_label(condition.a), _group_label(condition.b)
    tasks = sorted(set(sets_a) & set(sets_b)) if set(sets_a) & set(sets_b) else [None]
    for task in tasks:
        # a task of its own on each side (ED_Local against ED) pairs the two sides' only tasks
        side_a = sets_a.get(task) if task else next(iter(sets_a.values()), {})
        side_b = sets_b.get(task) if task else next(iter(sets_b.values()), {})
        pairs = []
        for n in sorted(set(side_a) | set(side_b)):
            if n not in side_a or n not in side_b:
                outcome.reasons.append(f"N={n}: only one side has runs")
                verdicts.append(INCONCLUSIVE)
                continue
            where = f"{task} " if task else ""
            outcome.evidence.append(f"{where}N={n}: {label_a} {_widths_text(side_a[n])} vs {label_b} "
                                    f"{_widths_text(side_b[n])}")
            outcome.points += _width_points(label_a, {n: side_a[n]}) + _width_points(label_b, {n: side_b[n]})
            if min(side_a[n]) == INF and min(side_b[n]) == INF:
                outcome.reasons.append(f"{where}N={n}: no width solves either side")
                verdicts.append(INCONCLUSIVE)
            else:
                pairs.append((side_a[n], side_b[n]))
        if pairs:
            verdicts.append(weak_order_verdict(pairs))
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    return outcome


def _fixed_width(condition: FixedWidth, scale: str, configs: Sequence[RunConfig],
                 results: dict[str, RunResult]) -> Outcome:
    lengths = condition.lengths_at(scale)
    found, reasons = _runs_in(configs, results, condition.group, lengths)
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons))
    verdicts = [INCONCLUSIVE] if reasons else []
    cells = decided_cells(found, _rule(condition.solved), condition.per, outcome.reasons)
    if cells.empty:
        outcome.reasons.append("no runs")
        return outcome
    for member, rows in cells.groupby("member"):
        table = width_verdicts(rows)
        table = table[table.width <= condition.max_width]
        sizes = sorted(set(table.length))
        per_width = {int(w): dict(zip(g.length, g.verdict)) for w, g in table.groupby("width")}
        solving = [w for w, by_n in per_width.items() if all(by_n.get(n) == "solved" for n in sizes)]
        ruled_out = [w for w, by_n in per_width.items() if "unsolved" in by_n.values()]
        if solving:
            outcome.evidence.append(f"{member}: width {min(solving)} solves N = {', '.join(map(str, sizes))}")
            verdicts.append(REPRODUCED)
        elif len(ruled_out) == len(per_width):
            outcome.evidence.append(f"{member}: every width <= {condition.max_width} "
                                    f"({', '.join(map(str, sorted(per_width)))}) is unsolved at some N")
            verdicts.append(NOT_REPRODUCED)
        else:
            open_widths = sorted(set(per_width) - set(ruled_out))
            outcome.evidence.append(f"{member}: no width <= {condition.max_width} solves every N; widths "
                                    f"{', '.join(map(str, open_widths))} are undecided at some N")
            verdicts.append(INCONCLUSIVE)
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    return outcome


def _growth_factor(per_length: dict[int, list[float]]) -> list[float] | None:
    """Possible factors (smallest width at the largest length / at the smallest); None when undefined."""
    small, large = per_length[min(per_length)], per_length[max(per_length)]
    if min(small) == INF or len(per_length) < 2:
        return None
    factors = {(b / a if b != INF else INF) for a in small if a != BELOW_GRID for b in large}
    if BELOW_GRID in small:
        factors.add(INF)
    return sorted(factors)


def _growth_order(condition: GrowthOrder, scale: str, configs: Sequence[RunConfig],
                  results: dict[str, RunResult]) -> Outcome:
    found, reasons = _runs_in(configs, results, condition.group, condition.lengths_at(scale))
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons))
    verdicts = [INCONCLUSIVE] if reasons else []
    sets = width_sets(found, _rule(condition.solved), ["model.name", "task.name"], outcome.reasons)
    for model in sorted({r.config.model.name for r in found}):
        factors = {task: _growth_factor(sets.get(f"{model}/{task}", {0: [INF]})) for task in (condition.a, condition.b)}
        text = ", ".join(f"{task} x{'|'.join('>grid' if f == INF else f'{f:g}' for f in v) if v else ' undefined'}"
                         for task, v in factors.items())
        outcome.evidence.append(f"{model}: growth of the smallest solving width, smallest to largest size: {text}")
        if factors[condition.a] is None or factors[condition.b] is None:
            outcome.reasons.append(f"{model}: no width solves the smallest size of a task, or only one size")
            verdicts.append(INCONCLUSIVE)
        else:
            verdicts.append(order_verdict(factors[condition.a], factors[condition.b]))
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    return outcome


def _flops_order(condition: FlopsOrder, scale: str, configs: Sequence[RunConfig],
                 results: dict[str, RunResult]) -> Outcome:
    found, reasons = _runs_in(configs, results, condition.group, condition.lengths_at(scale))
    rule = _rule(condition.solved)
    notes: list[str] = []
    sets = width_sets(found, rule, ["model.name", "task.name"], notes)
    sample = {(r.config.model.name, r.config.task.name, r.config.task.length): r.config for r in found}
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons) + notes)
    verdicts = [INCONCLUSIVE] if reasons else []
    tasks = sorted({r.config.task.name for r in found})
    for task in tasks:
        lengths = sorted({n for m in condition.order for n in sets.get(f"{m}/{task}", {})})
        for n in lengths:
            flops: dict[str, list[float]] = {}
            for model in condition.order:
                widths = sets.get(f"{model}/{task}", {}).get(n)
                base = sample.get((model, task, n))
                if widths is None or base is None:
                    continue
                flops[model] = [INF if w == INF else 0.0 if w == BELOW_GRID else estimate_paper_flops(
                    base.model_copy(update={"model": base.model.model_copy(update={"width": int(w)})})) / 1e9
                    for w in widths]
            missing = [m for m in condition.order if m not in flops]
            text = ", ".join(f"{m} {_gflops_text(v)}" for m, v in flops.items())
            outcome.evidence.append(f"{task} N={n}: fewest GFLOPs among solving widths: {text}")
            for model, values in flops.items():
                shown = [min(values)] if min(values) != INF else []
                outcome.points.append(Point(f"{model} ({task})", n, shown))
            if missing:
                outcome.reasons.append(f"{task} N={n}: no runs of {', '.join(missing)}")
                verdicts.append(INCONCLUSIVE)
                continue
            pair_verdicts = []
            for low, high in zip(condition.order, condition.order[1:]):
                if min(flops[low]) == INF and min(flops[high]) == INF:
                    outcome.reasons.append(f"{task} N={n}: neither {low} nor {high} solves")
                    pair_verdicts.append(INCONCLUSIVE)
                else:
                    pair_verdicts.append(order_verdict(flops[low], flops[high]))
            verdicts.append(combine(pair_verdicts))
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    if not verdicts:
        outcome.reasons.append("no runs")
    return outcome


def _gflops_text(values: Sequence[float]) -> str:
    finite = [f"{v:.3g}" for v in values if v != INF]
    text = "|".join(finite)
    if INF in values:
        text = f"{text} or more" if text else "none solved"
    return text


def evaluate_runs(claim: Claim, scale: str, configs: Sequence[RunConfig], results: dict[str, RunResult]) -> list[Outcome]:
    """Each condition of a sweep claim on the stored runs of its configs (``results``: config hash -> run)."""
    outcomes = []
    for condition in claim.conditions:
        groups = {name: group_at(getattr(condition, name), scale) for name in ("a", "b", "group", "fast", "slow")
                  if hasattr(condition, name)}
        condition = condition.model_copy(update=groups)
        if isinstance(condition, (Compare, Level)):
            outcomes.append(_on_lengths(condition, scale, configs, results, claim.min_seeds))
        elif isinstance(condition, Rate):
            outcomes.append(_rate(condition, scale, configs, results, claim.min_seeds))
        elif isinstance(condition, MinWidthGrowth):
            outcomes.append(_min_width_growth(condition, scale, configs, results))
        elif isinstance(condition, MinWidthOrder):
            outcomes.append(_min_width_order(condition, scale, configs, results))
        elif isinstance(condition, FixedWidth):
            outcomes.append(_fixed_width(condition, scale, configs, results))
        elif isinstance(condition, GrowthOrder):
            outcomes.append(_growth_order(condition, scale, configs, results))
        elif isinstance(condition, FlopsOrder):
            outcomes.append(_flops_order(condition, scale, configs, results))
        else:
            outcomes.append(Outcome(condition.text, INCONCLUSIVE, reasons=[f"{condition.kind} needs a theory series"]))
    return outcomes


# ---- conditions on theory series ------------------------------------------------------------------------------

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
                outcome.reasons += [f"{_x_text(x, swept)}: {p.label} has {len(p.values)} values, the rule needs "
                                    f"{claim.min_seeds}" for p in short]
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
    """value / log2(N) at every N within ``slack`` times its value at the smallest N (the largest seed's value)."""
    by_x = series.get(condition.group, {})
    lengths = condition.lengths_at(scale) or sorted(by_x)
    outcome = Outcome(condition.text, INCONCLUSIVE)
    present = [n for n in lengths if by_x.get(n)]
    if len(present) < 2 or min(present) < 2:
        outcome.reasons.append(f"{condition.group}: needs values at two or more lengths >= 2")
        return outcome
    ratios = {n: max(by_x[n]) / math.log2(n) for n in present}
    base = ratios[min(present)]
    outcome.points = [Point(condition.group, n, list(by_x[n])) for n in present]
    outcome.evidence.append(", ".join(f"N={n}: {condition.group} {max(by_x[n]):g} = {ratios[n]:.2f} log2 N"
                                      for n in present))
    worst = max(ratios.values()) / base
    outcome.evidence.append(f"largest ratio to the smallest N's: x{worst:.2f} (allowed: x{condition.slack:g}; "
                            f"N grows x{max(present) / min(present):g})")
    outcome.verdict = REPRODUCED if worst <= condition.slack else NOT_REPRODUCED
    return outcome


def _point_text(point: Point) -> str:
    """A point of a series with no swept parameter (a bound's one number): its value alone."""
    return f"{point.label} {point.values[0]:g}" if len(point.values) == 1 else point.text()


def _x_text(x: float, swept: str = "N") -> str:
    if swept == "N":
        return f"N={int(x)}" if float(x).is_integer() else f"x={x:g}"
    return f"{swept}={x:g}"
