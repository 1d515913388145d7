"""Verdicts from data: a claim's conditions applied to stored runs (``evaluate_runs``). The rules below are
implemented here (``compare``, ``level``, ``rate``), in ``sepbench.claims.groups`` (a group's best configuration),
``sepbench.claims.width_rules`` (smallest solving widths) and ``sepbench.claims.series_rules`` (a theory check's
series); ``sepbench.claims.verdicts`` holds the words.

Rules, the same for every claim:

* A group's value at a length is the seeds of its best configuration: per member (``per`` keys, e.g. the model),
  each cell's learning rate with the highest mean accuracy over its trained seeds, then the member's best cell;
  the group's best or worst member is picked as the condition says.
* ``compare`` (a beats b by ``margin``): reproduced when even the worst seed pairing clears the margin
  (min a - max b >= margin), not reproduced when even the best does not (max a - min b < margin), inconclusive
  when the seeds straddle it. ``below`` swaps the two.
* ``level`` (at least ``threshold``): reproduced when every seed is at or above it, not reproduced when none is;
  with ``seeds_needed`` = k, reproduced when k seeds are (members ranked by their k-th best seed), else not.
* Smallest solving widths (solved = accuracy >= threshold in k of m seeds at the best learning rate) are sets of
  grid widths the data leave possible (between the largest width decided unsolved and the smallest solved,
  unbounded when none solved): an order holds when every possible value of one side is below every possible
  value of the other, fails when the reverse holds, and is inconclusive otherwise.
* ``level`` with ``lrs`` = L: the same at each member's L-th best learning rate (it holds at L of them).
* ``rate`` (Bhattamishra et al. L293, "the rate of learning"): T = the steps the fast group's best member takes to
  reach the threshold (its best learning rate, slowest seed, from its curve); reproduced when the slow group's best
  member, read off its curves at k x T steps, is below the threshold on every seed, not reproduced when it reached
  it on every seed. Slow runs whose budget ends before k x T make it inconclusive. With ``fast_within`` = B, a
  fast side whose T is not below B steps (or that never reaches the threshold in B steps) is not reproduced; a
  fast side no rate of which reaches it on every seed is not reproduced unless a seed short of it, at any rate,
  was still learning.
* ``fixed_width``: one grid width <= ``max_width`` is solved at every length (reproduced), every such width is
  decided unsolved at some length (not reproduced), otherwise inconclusive.
* ``min_width_order``: per task, a's smallest solving width <= b's at every length and < at one or more; a tie at
  every length is not reproduced, as is b < a at some length.
* ``growth_order``: per model, the factor by which the smallest solving width grows from the smallest to the
  largest length is larger on task b than on task a.
* Fewer trained seeds than the claim's ``min_seeds``, runs missing from the store, failed runs, trained runs with
  no accuracy to read, or diverged runs of a cell none of whose learning rates trained make a condition
  inconclusive, never not reproduced. So does a
  deciding run still learning at the end of its budget (``sepbench.claims.learning``), at the rate picked or, its
  accuracy rising beyond the noise to a new low of its loss, at any other (it may overtake the pick): "not
  reproduced" becomes "inconclusive: still learning at B steps", with the measured slope and the budget it points
  to; so does "reproduced", and seeds straddling the line, when a run
  of the side that must stay below the line (a ``compare``'s b, a ``level`` below its threshold) was still
  learning toward it; a deciding run that used its budget with too few evaluations to tell leaves either verdict
  open the same way. An unsolved width whose runs are still learning is undecided.
  So does a side whose rise could change a ``compare`` or ``level`` verdict when the learning-rate search cut one of
  its rates on a tie (``sepbench.claims.ties``: within the evaluations' noise of a rate it kept, as every rate is
  while none has learned): its best configuration may be one never trained to the budget.
  So does a side that stopped early at its train.threshold short of the line the verdict turns on (or either side,
  for seeds straddling it; a ``rate``'s fast side short of its threshold, its slow side below it before k x T),
  when with its stopped seeds at 1.0 the verdict would change: where they stopped is not where they would have
  ended. A run that reached its train.threshold with early_stop off trained every step and is read for a trend.
  A claim is reproduced when every condition is, not reproduced when any condition is, and inconclusive
  otherwise.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Sequence

from sepbench.claims.catalogue import (Claim, Compare, ConditionBase, FixedWidth, FlopsOrder, GrowthOrder, Level,
                                       MinWidthGrowth, MinWidthOrder, Rate, group_at)
from sepbench.claims.groups import final_accuracy, gaps, group_label, group_point, mean_of, member_name, slots_of
from sepbench.claims.learning import learning_reason, trend
from sepbench.claims.ties import TiedCut, tied_cuts
from sepbench.claims.verdicts import (INCONCLUSIVE, INF, NOT_REPRODUCED, REPRODUCED, SEEDS_STRADDLE,
                                      SHORT_OF_THE_TEXT, STOPPED_EARLY, Outcome, Point, combine, compare_verdict,
                                      flip, level_verdict)
from sepbench.claims.width_rules import fixed_width, flops_order, growth_order, min_width_growth, min_width_order
from sepbench.config import RunConfig
from sepbench.results import TRAINED, stopped_early
from sepbench.train.result import RunResult
from sepbench.wording import counted


def _on_lengths(condition: Compare | Level, scale: str, configs: Sequence[RunConfig],
                results: dict[str, RunResult], min_seeds: int) -> Outcome:
    lengths = condition.lengths_at(scale)
    groups = [condition.a, condition.b] if isinstance(condition, Compare) else [condition.group]
    picks = [condition.a_pick, condition.b_pick] if isinstance(condition, Compare) else [condition.pick]
    rank = condition.lrs if isinstance(condition, Level) else 1
    slot_maps = [slots_of(configs, results, g, lengths) for g in groups]
    wanted = lengths if lengths is not None else sorted(set().union(*slot_maps))
    outcome = Outcome(condition.text, INCONCLUSIVE, threshold=getattr(condition, "threshold", None))
    verdicts = []
    for n in wanted:
        points, reasons, searched = [], [], []
        for group, pick, slots in zip(groups, picks, slot_maps):
            slot = slots.get(n)
            searched.append(slot.results if slot is not None else [])
            if slot is None:
                reasons.append(f"N={n}: no run of {group_label(group)} in the claim's specs")
                points.append(Point(group_label(group), n, []))
                continue
            point = group_point(slot, group_label(group), n, condition.per, pick, rank, score=_member_score(condition))
            points.append(point)
            reasons += [f"N={n}: {r}" for r in gaps(slot, min_seeds, point, rank)]
        outcome.points += points
        outcome.evidence.append(f"N={n}: " + " vs ".join(p.text() for p in points))
        if reasons:
            outcome.reasons += reasons
            verdicts.append(INCONCLUSIVE)
            continue
        if isinstance(condition, Compare) and _both_reach(condition, points):
            outcome.evidence[-1] += f" (outside the claim: both reach {condition.outside_if_both_reach:g})"
            continue
        verdict = _verdict(condition, points)
        learning = _still_learning_reason(condition, points, searched, picks) if verdict != REPRODUCED else None
        if verdict != NOT_REPRODUCED and not learning:
            learning = _staying_side_learning_reason(condition, points, searched, picks)
        learning = learning or _stopped_early_reason(condition, points, verdict)
        cuts = _deciding_tied_cuts(condition, verdict, searched, points, picks)
        outcome.waits_on.update(h for cut in cuts for h in cut.hashes)
        tie = _tie_text(cuts) if cuts else None
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


def _verdict(condition: Compare | Level, points: Sequence[Point]) -> str:
    if isinstance(condition, Compare):
        return compare_verdict(points[0].values, points[1].values, condition.margin, condition.direction)
    return level_verdict(points[0].values, condition.threshold, condition.direction, condition.seeds_needed)


def _stopped_early_reason(condition: Compare | Level, points: Sequence[Point], verdict: str) -> str | None:
    """Why a verdict is not the runs' to give: seeds of the side it turns on (the side that had to rise, for "not
    reproduced"; that had to stay below, for "reproduced"; either, for seeds straddling the line) stopped early at
    their train.threshold, so their accuracy is where they stopped, not where they would have ended, and at 1.0 the
    verdict would change (None otherwise)."""
    sides = {REPRODUCED: (False,), NOT_REPRODUCED: (True,)}.get(verdict, (True, False))
    for rising in sides:
        found = _side_and_line(condition, points, rising=rising)
        reason = _stopped_short_of(condition, points, verdict, *found) if found is not None else None
        if reason:
            return reason
    return None


def _stopped_short_of(condition: Compare | Level, points: Sequence[Point], verdict: str, side: int,
                      line: float) -> str | None:
    point = points[side]
    stopped = [i for i, (run, value) in enumerate(zip(point.runs, point.values)) if stopped_early(run) and value < 1.0]
    if not stopped:
        return None
    lifted = [replace(p, values=[1.0 if k == side and i in stopped else v for i, v in enumerate(p.values)])
              for k, p in enumerate(points)]
    if _verdict(condition, lifted) == verdict:
        return None
    levels = ", ".join(sorted({f"{point.runs[i].config.train.threshold:g}" for i in stopped}))
    return (f"{counted(len(stopped), 'seed')} of {point.label} {STOPPED_EARLY} train.threshold {levels}, short of "
            f"the line {line:.3g} the verdict turns on: where they stopped is not where they would have ended "
            f"(train them with a higher train.threshold)")


def _member_score(condition: Compare | Level) -> Callable[[Sequence[float]], Any] | None:
    """How members are ranked: for a comparison the mean over their seeds (None, ``group_point``'s own); for a level
    with ``seeds_needed`` = k the k-th best seed, so that the worst member is the one furthest from having k seeds
    at the level; for any other level the member's own verdict on every seed first, then the mean. "The worst
    member reaches it" holds only if every member does on every seed, so the pick must be the member whose seeds
    decide that, not the one of lowest mean (and "the best stays below" likewise)."""
    if not isinstance(condition, Level):
        return None
    k = condition.seeds_needed
    if k is not None:
        return lambda values: sorted(values, reverse=True)[k - 1] if len(values) >= k else -math.inf
    order = [NOT_REPRODUCED, INCONCLUSIVE, REPRODUCED]  # at_least: a higher rank is a member nearer passing
    if condition.direction == "below":
        order.reverse()  # below: a higher rank is a member nearer crossing the line
    return lambda values: (order.index(level_verdict(values, condition.threshold, condition.direction)),
                           mean_of(values))


def _both_reach(condition: Compare, points: Sequence[Point]) -> bool:
    level = condition.outside_if_both_reach
    return level is not None and all(v >= level for p in points for v in p.values)


def _side_runs(condition: Compare | Level, searched: Sequence[Sequence[RunResult]], points: Sequence[Point],
               picks: Sequence[str], side: int, line: float) -> list[RunResult]:
    """The runs whose rise could move a side's value: the picked seeds, and beside them every run of the side (each
    rate; each member, or with a ``pick`` other than best the picked member's) whose accuracy was rising beyond its
    noise to a new low of its loss (``Trend.leaving_its_level``), which may overtake the pick. A rise alone is
    what a run at chance shows now and then among a search's many runs (a dip and its recovery). Each counts
    while short of ``line``: a run past it moves the verdict only through the pick, with its rate's other seeds."""
    results, point = searched[side], points[side]
    if picks[side] != "best" and point.runs:
        member = member_name(point.runs[0].config, condition.per)
        results = [r for r in results if member_name(r.config, condition.per) == member]
    picked = {r.config_hash for r in point.runs}
    return [r for r in results
            if final_accuracy(r) < line and (r.config_hash in picked or _leaving_its_level(r))]


def _leaving_its_level(result: RunResult) -> bool:
    found = trend(result)
    return found is not None and found.leaving_its_level


def _side_and_line(condition: Compare | Level, points: Sequence[Point], rising: bool) -> tuple[int, float] | None:
    """The side that must rise past the line (``rising``) or stay below it, and the line its rise is read against;
    None when the condition has no such side (a ``level`` asks one direction)."""
    if isinstance(condition, Level):
        return (0, condition.threshold) if rising == (condition.direction == "at_least") else None
    a, b, margin = points[0].values, points[1].values, condition.margin
    if condition.direction == "above":
        return (0, min(1.0, max(b) + margin)) if rising else (1, max(0.0, min(a) - margin))
    return (1, max(0.0, max(a) - margin)) if rising else (0, min(1.0, min(b) + margin))


def _still_learning_reason(condition: Compare | Level, points: Sequence[Point],
                           searched: Sequence[Sequence[RunResult]], picks: Sequence[str]) -> str | None:
    """Why "not reproduced" (or seeds on both sides) is not yet decided: a run of the side that had to rise, at
    any of its rates, was still learning toward the line (None otherwise)."""
    found = _side_and_line(condition, points, rising=True)
    if found is None:
        return None
    side, target = found
    return learning_reason(_side_runs(condition, searched, points, picks, side, target), target)


def _staying_side_learning_reason(condition: Compare | Level, points: Sequence[Point],
                                  searched: Sequence[Sequence[RunResult]], picks: Sequence[str]) -> str | None:
    """Why "reproduced" is not yet decided: a run of the side that had to stay below the line, at any of its
    rates, was still learning toward it, so the gap may be the budget's, not the models' (None otherwise)."""
    found = _side_and_line(condition, points, rising=False)
    if found is None:
        return None
    side, line = found
    reason = learning_reason(_side_runs(condition, searched, points, picks, side, line), line)
    return f"{reason}, on the side that must stay below {line:.3g}" if reason else None


def _deciding_tied_cuts(condition: Compare | Level, verdict: str, searched: Sequence[Sequence[RunResult]],
                        points: Sequence[Point], picks: Sequence[str]) -> list[TiedCut]:
    """The rates a search cut on a tie (``sepbench.claims.ties``) that the verdict rests on: those of a side whose
    rise could change it (one that must rise and has not, or one that must stay below and has). With
    ``pick: worst`` only the picked member's rise moves the group's value."""
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
    return cuts


def _tie_text(cuts: Sequence[TiedCut]) -> str:
    """Why a verdict waits on rates the search never trained, and the budget that decides it."""
    others = f" ({counted(len(cuts) - 1, 'more such cut')})" if len(cuts) > 1 else ""
    runs = len({h for cut in cuts for h in cut.hashes})
    budgets = "/".join(str(b) for b in sorted({cut.budget for cut in cuts}))
    return (f"{cuts[0].text()}{others}: the best configuration may be one the search never trained to its "
            f"budget, so the verdict waits on those rates trained in full ({counted(runs, 'run')} of {budgets} steps; "
            "`--settle-ties`)")


def _straddle_text(condition: Compare | Level, points: Sequence[Point]) -> str:
    """Why a condition whose deciding runs are done is still undecided: its seeds fall on both sides of the line."""
    if isinstance(condition, Level):
        line, values = f"{condition.threshold:g}", points[0].values
    else:
        line, values = f"a margin of {condition.margin:g}", [a - b for a in points[0].values for b in points[1].values]
    return _seeds_straddle(line, values, " and no deciding run was still learning")


def _seeds_straddle(line: str, values: Sequence[float], why: str = "") -> str:
    return (f"{SEEDS_STRADDLE} {line} ({min(values):.4f} to {max(values):.4f}){why}: the rule needs all seeds on "
            "one side")


def _accuracy_at(result: RunResult, step: float) -> float:
    """Accuracy of the last evaluation at or before ``step``; at or past the run's last step, its final accuracy
    (scored on the whole evaluation set, where a curve point may have stopped early under the adaptive budget)."""
    if step >= result.steps and "accuracy" in result.metrics:
        return final_accuracy(result)
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
    fast_slots = slots_of(configs, results, condition.fast, lengths)
    slow_slots = slots_of(configs, results, condition.slow, lengths)
    wanted = lengths if lengths is not None else sorted(set(fast_slots) | set(slow_slots))
    outcome = Outcome(condition.text, INCONCLUSIVE, threshold=condition.threshold)
    verdicts = []
    for n in wanted:
        fast_slot, slow_slot = fast_slots.get(n), slow_slots.get(n)
        if fast_slot is None or slow_slot is None:
            outcome.reasons.append(f"N={n}: the claim's specs have no runs of one side")
            verdicts.append(INCONCLUSIVE)
            continue
        speed = lambda r: -_steps_to(r, condition.threshold)  # noqa: E731 - the value both calls read
        fast = group_point(fast_slot, group_label(condition.fast), n, condition.per, "best", value=speed)
        reasons = [f"N={n}: {r}" for r in gaps(fast_slot, min_seeds, fast, value=speed)]
        steps = max((_steps_to(r, condition.threshold) for r in fast.runs), default=INF)
        if reasons:
            outcome.reasons += reasons
            verdicts.append(INCONCLUSIVE)
            continue
        within = condition.fast_within
        if within is not None and steps >= within and (steps < INF or max(r.steps for r in fast.runs) >= within):
            reached = f"reaches it at T = {steps:.0f} steps (slowest seed)" if steps < INF else "never reaches it"
            outcome.evidence.append(f"N={n}: {fast.label} {fast.member} {reached}: not below {within} steps")
            verdicts.append(_unless_tied(outcome, n, NOT_REPRODUCED, fast_slot.results))
            continue
        if steps == INF:
            budget = max(r.steps for r in fast.runs)
            outcome.evidence.append(f"N={n}: {fast.label} does not reach {condition.threshold:g} on every seed of any "
                                    f"learning rate within {budget} steps (the best: {fast.member})")
            short = _fast_runs_short(fast_slot.results, fast.runs, condition.threshold)
            learning = (learning_reason(short, condition.threshold)
                        or _stopped_text([r for r in short if stopped_early(r)], fast.label, condition.threshold))
            outcome.reasons += [f"N={n}: {learning}"] if learning else []
            verdicts.append(INCONCLUSIVE if learning else _unless_tied(outcome, n, NOT_REPRODUCED, fast_slot.results))
            continue
        horizon = condition.k * steps
        at_horizon = lambda r: _accuracy_at(r, horizon)  # noqa: E731 - the value both calls read
        slow = group_point(slow_slot, group_label(condition.slow), n, condition.per, "best", value=at_horizon)
        outcome.points.append(Point(f"{slow.label} at {condition.k:g} x T", n, slow.values, slow.member))
        outcome.evidence.append(f"N={n}: {fast.label} {fast.member} reaches {condition.threshold:g} at T = "
                                f"{steps:.0f} steps (slowest seed); at {condition.k:g} x T = {horizon:.0f} steps: "
                                f"{slow.text()}")
        short = [r for r in slow_slot.results if r.status == "completed" and r.steps < horizon]
        stopped = [r for r in slow_slot.results
                   if stopped_early(r) and r.steps < horizon and final_accuracy(r) < condition.threshold]
        reasons = [f"N={n}: {r}" for r in gaps(slow_slot, min_seeds, slow, value=at_horizon)]
        if short:
            reasons.append(f"N={n}: {counted(len(short), 'run')} of {slow.label} stopped at "
                           f"{min(r.steps for r in short)} "
                           f"steps, before {condition.k:g} x T = {horizon:.0f}")
        if stopped:
            before = f"before {condition.k:g} x T = {horizon:.0f}"
            reasons.append(f"N={n}: {_stopped_text(stopped, slow.label, condition.threshold, before)}")
        if reasons:
            outcome.reasons += reasons
            verdicts.append(INCONCLUSIVE)
            continue
        verdict = level_verdict(slow.values, condition.threshold, "below")
        if verdict == INCONCLUSIVE:
            line = f"{condition.threshold:g} at {condition.k:g} x T"
            outcome.reasons.append(f"N={n}: {_seeds_straddle(line, slow.values)}")
        verdicts.append(_unless_tied(outcome, n, verdict, slow_slot.results) if verdict == REPRODUCED else verdict)
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    if not verdicts:
        outcome.reasons.append("no lengths to judge")
    return outcome


def _unless_tied(outcome: Outcome, n: int, verdict: str, side: Sequence[RunResult]) -> str:
    """``verdict``, or inconclusive where the side whose better rate would overturn it had rates cut on a tie (a
    faster Transformer rate, or a recurrent rate above the line, may be one the search never trained)."""
    cuts = tied_cuts(side)
    if not cuts:
        return verdict
    outcome.waits_on.update(h for cut in cuts for h in cut.hashes)
    outcome.reasons.append(f"N={n}: {_tie_text(cuts)}")
    return INCONCLUSIVE


def _fast_runs_short(results: Sequence[RunResult], picked: Sequence[RunResult], threshold: float) -> list[RunResult]:
    """The fast side's runs that never reached ``threshold`` and whose rise could change that: the picked rate's,
    and any other rate's leaving its level (with every rate a seed short, the pick is a tie)."""
    hashes = {r.config_hash for r in picked}
    return [r for r in results if r.status in TRAINED and _steps_to(r, threshold) == INF
            and (r.config_hash in hashes or _leaving_its_level(r))]


def _stopped_text(stopped: Sequence[RunResult], label: str, line: float, where: str = "") -> str | None:
    """'N runs of LABEL stopped early at train.threshold T at step S, short of LINE ...' (None for no runs)."""
    if not stopped:
        return None
    levels = ", ".join(sorted({f"{r.config.train.threshold:g}" for r in stopped}))
    return (f"{counted(len(stopped), 'run')} of {label} {STOPPED_EARLY} train.threshold {levels} at step "
            f"{min(r.steps for r in stopped)}{' ' + where if where else ''}, short of {line:g}: where they stopped is "
            "not where they would have ended (train them with a higher train.threshold)")


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
            outcomes.append(min_width_growth(condition, scale, configs, results))
        elif isinstance(condition, MinWidthOrder):
            outcomes.append(min_width_order(condition, scale, configs, results))
        elif isinstance(condition, FixedWidth):
            outcomes.append(fixed_width(condition, scale, configs, results))
        elif isinstance(condition, GrowthOrder):
            outcomes.append(growth_order(condition, scale, configs, results))
        elif isinstance(condition, FlopsOrder):
            outcomes.append(flops_order(condition, scale, configs, results))
        else:
            outcomes.append(Outcome(condition.text, INCONCLUSIVE, reasons=[f"{condition.kind} needs a theory series"]))
        _one_sided(outcomes[-1], condition, scale)
    return outcomes


def _one_sided(outcome: Outcome, condition: ConditionBase, scale: str) -> None:
    """Leave inconclusive the verdict a scale short of the text's size cannot reach (``OneSided``); an outcome
    already inconclusive says which verdict more steps could still bring at this scale, and which they cannot."""
    side = getattr(condition, "one_sided", None)
    if side is None or scale not in side.scales or outcome.verdict == side.decides:
        return
    if outcome.verdict == INCONCLUSIVE:
        outcome.reasons.append(f"the {scale} scale {SHORT_OF_THE_TEXT}: {side.why}; its runs can make it "
                               f"{side.decides} here, and only the text's size can make it {flip(side.decides)}")
        return
    outcome.reasons.append(f"the {scale} scale {SHORT_OF_THE_TEXT}: {side.why}; its runs read "
                           f"{outcome.verdict}, which only the text's size decides")
    outcome.verdict = INCONCLUSIVE
