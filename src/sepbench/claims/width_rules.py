"""Conditions on smallest solving widths (Yang et al.'s Fig. 1 and Table 2): the widths the data leave possible per
length, their growth, their order between models or tasks, one width for every size, and the FLOPs at them."""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from sepbench.claims.catalogue import (FixedWidth, FlopsOrder, GrowthOrder, MinWidthGrowth, MinWidthOrder,
                                       SolvedRuleFields)
from sepbench.claims.groups import group_label, member_name, runs_in
from sepbench.claims.learning import learning_reason, still_learning, too_few_evaluations
from sepbench.claims.verdicts import (GRID_BOTTOM_TIE, INCONCLUSIVE, INF, NOT_REPRODUCED, REPRODUCED, RUNS_MISSING,
                                      Outcome, Point, combine, flip, order_verdict, weak_order_verdict)
from sepbench.config import RunConfig
from sepbench.results import TRAINED
from sepbench.sweep.search import SolvedRule, cell_key, estimate_paper_flops, select_lr, width_verdicts
from sepbench.train.result import RunResult
from sepbench.wording import counted


BELOW_GRID = 0.0
"""A possible smallest solving width below the smallest width tried (the grid cannot tell it from that width)."""


def _tied_at_the_grid_bottom(a: Sequence[float], b: Sequence[float]) -> bool:
    """Both sides solved at their grid's smallest width (each possible set: below the grid, or that width's value)."""
    return all(BELOW_GRID in side and len(side) == 2 for side in (a, b))


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
                  notes: list[str] | None = None, expected: Sequence[RunConfig] = ()) -> pd.DataFrame:
    """``select_lr``'s cells with their ``member``; a cell decided unsolved counts as undecided (said in ``notes``)
    where enough of its best-learning-rate runs short of the line were still learning to make it solved. Of the
    runs the specs name (``expected``), those missing or failed are gaps: a cell of several learning rates with a
    gap is undecided, solved or not, as the rate ranked best may change once they train (with one rate,
    ``select_lr``'s k of m already reads missing seeds), and a cell with no stored run is undecided too."""
    gaps: dict[str, list[RunConfig]] = {}
    rates: dict[str, set[float]] = {}
    stored = {r.config_hash: r for r in results}
    for cfg in expected:
        rates.setdefault(cell_key(cfg), set()).add(cfg.train.lr)
        found = stored.get(cfg.config_hash())
        if found is None or found.status == "failed":
            gaps.setdefault(cell_key(cfg), []).append(cfg)
    cells = select_lr(results, rule)
    if cells.empty:
        return _unstored_cells(cells, gaps, per)
    names = {cell_key(r.config): member_name(r.config, per) for r in results}
    cells = cells.assign(member=[names[c] for c in cells.cell])
    by_cell: dict[str, list[RunResult]] = {}
    for r in results:
        by_cell.setdefault(cell_key(r.config), []).append(r)
    verdicts, why = list(cells.verdict), list(cells.reason)
    solved = cells[cells.verdict == "solved"]
    narrowest_solved = solved.groupby(["member", "length", "layers"]).width.min().to_dict() if len(solved) else {}
    for i, (cell, verdict, best_lr) in enumerate(zip(cells.cell, cells.verdict, cells.best_lr)):
        if verdict in ("solved", "unsolved", "failed") and cell in gaps and len(rates[cell]) > 1:
            verdicts[i] = "undecided"
            why[i] = f"{counted(len(gaps[cell]), 'run')} of {counted(len(rates[cell]), 'learning rate')} {RUNS_MISSING}"
            continue
        if verdict != "unsolved":
            continue
        row = cells.iloc[i]
        if row.width > narrowest_solved.get((row.member, row.length, row.layers), INF):
            continue  # a narrower width solves: whether this one would moves no smallest solving width
        runs = [r for r in by_cell[cell] if r.config.train.lr == best_lr]
        cell_rule = rule.for_cell(runs[0].config.train.threshold)
        short = [r for r in runs if not r.metrics.get("accuracy", 0.0) >= cell_rule.threshold]
        rising = {r.config_hash for r, _ in still_learning(short)} | {r.config_hash for r in short
                                                                      if too_few_evaluations(r)}
        if len(runs) - len(short) + len(rising) < cell_rule.k:
            continue
        reason = learning_reason(short, cell_rule.threshold)
        if reason:
            verdicts[i] = "undecided"
            if notes is not None:
                first = by_cell[cell][0].config
                notes.append(f"{member_name(first, per)} N={first.task.length} width {first.model.width}: {reason}")
    return _unstored_cells(cells.assign(verdict=verdicts, reason=why), gaps, per)


def _unstored_cells(cells: pd.DataFrame, missing: dict[str, list[RunConfig]], per: Sequence[str]) -> pd.DataFrame:
    """``cells`` with a row, undecided, for each cell of ``missing`` that ``select_lr`` did not see (no run stored)."""
    known = set(cells.cell) if not cells.empty else set()
    rows = [{"cell": cell, "member": member_name(configs[0], per), "length": configs[0].task.length,
             "layers": configs[0].model.layers, "width": configs[0].model.width, "verdict": "undecided",
             "reason": f"{counted(len(configs), 'run')} {RUNS_MISSING}"}
            for cell, configs in missing.items() if cell not in known]
    if not rows:
        return cells
    return pd.concat([cells, pd.DataFrame(rows)], ignore_index=True) if not cells.empty else pd.DataFrame(rows)


MEMBER_WIDTH_KEYS = ("length", "width")
"""A member's cells are one per length and width, whatever depth or heads they have."""


def width_sets(results: Sequence[RunResult], rule: SolvedRule, per: Sequence[str], notes: list[str] | None = None,
               expected: Sequence[RunConfig] = ()) -> dict[str, dict[int, list[float]]]:
    """Per member, per length: the possible smallest solving widths (``possible_widths``), a width solved by any
    of the member's cells (its depths or heads) counting as solved. A width decided unsolved whose
    best-learning-rate runs were still learning counts as undecided (said in ``notes``), as does one with runs of
    ``expected`` missing (``decided_cells``)."""
    cells = decided_cells(results, rule, per, notes, expected)
    if cells.empty:
        return {}
    sets: dict[str, dict[int, list[float]]] = {}
    for member, rows in cells.groupby("member"):
        for length, widths in width_verdicts(rows, MEMBER_WIDTH_KEYS).groupby("length"):
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


def _width_points(label: str, per_length: dict[int, list[float]]) -> list[Point]:
    points = []
    for n, values in sorted(per_length.items()):
        finite = [v for v in values if v != INF]
        shown = [min(values)] if min(values) != INF else []
        points.append(Point(label, n, shown, detail=f", possible {_widths_text(values)}" if finite else ""))
    return points


def min_width_growth(condition: MinWidthGrowth, scale: str, configs: Sequence[RunConfig],
                      results: dict[str, RunResult]) -> Outcome:
    lengths = condition.lengths_at(scale)
    found, reasons, expected = runs_in(configs, results, condition.group, lengths)
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons))
    verdicts = []
    sets = width_sets(found, _rule(condition.solved), condition.per, outcome.reasons, expected)
    for member, per_length in sorted(sets.items()):
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
            verdicts.append(grows if condition.grows else flip(grows))
    if reasons or not verdicts:
        verdicts.append(INCONCLUSIVE)
    outcome.verdict = combine(verdicts)
    return outcome


def min_width_order(condition: MinWidthOrder, scale: str, configs: Sequence[RunConfig],
                     results: dict[str, RunResult]) -> Outcome:
    lengths = condition.lengths_at(scale)
    rule = _rule(condition.solved)
    runs_a, reasons_a, expected_a = runs_in(configs, results, condition.a, lengths)
    runs_b, reasons_b, expected_b = runs_in(configs, results, condition.b, lengths)
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=reasons_a + reasons_b)
    verdicts = [INCONCLUSIVE] if outcome.reasons else []
    sets_a = width_sets(runs_a, rule, ["task.name"], outcome.reasons, expected_a)
    sets_b = width_sets(runs_b, rule, ["task.name"], outcome.reasons, expected_b)
    label_a, label_b = group_label(condition.a), group_label(condition.b)
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
                if _tied_at_the_grid_bottom(side_a[n], side_b[n]):
                    outcome.reasons.append(f"{where}N={n}: both sides solve at the grid's smallest width, "
                                           f"{int(max(side_a[n]))}: {GRID_BOTTOM_TIE}")
        if pairs:
            verdicts.append(weak_order_verdict(pairs))
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    return outcome


def fixed_width(condition: FixedWidth, scale: str, configs: Sequence[RunConfig],
                 results: dict[str, RunResult]) -> Outcome:
    lengths = condition.lengths_at(scale)
    found, reasons, expected = runs_in(configs, results, condition.group, lengths)
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons))
    verdicts = [INCONCLUSIVE] if reasons else []
    cells = decided_cells(found, _rule(condition.solved), condition.per, outcome.reasons, expected)
    if cells.empty:
        outcome.reasons.append("no runs")
        return outcome
    for member, rows in cells.groupby("member"):
        if rows.layers.nunique() > 1:
            depths = ", ".join(map(str, sorted(set(rows.layers))))
            outcome.reasons.append(f"{member}: cells at depths {depths}; one width is judged at one depth")
            verdicts.append(INCONCLUSIVE)
            continue
        table = width_verdicts(rows, MEMBER_WIDTH_KEYS)
        table = table[table.width <= condition.max_width]
        sizes = sorted(set(table.length))
        per_width = {int(w): dict(zip(g.length, g.verdict)) for w, g in table.groupby("width")}
        solving = [w for w, by_n in per_width.items() if all(by_n.get(n) == "solved" for n in sizes)]
        ruled_out = [w for w, by_n in per_width.items() if "unsolved" in by_n.values()]
        if solving:
            outcome.evidence.append(f"{member}: width {min(solving)} solves N = {', '.join(map(str, sizes))}")
            verdicts.append(REPRODUCED)
        elif len(ruled_out) == len(per_width) and max(per_width) < condition.max_width:
            outcome.evidence.append(f"{member}: every width tried ({', '.join(map(str, sorted(per_width)))}) is "
                                    f"unsolved at some N")
            outcome.reasons.append(f"{member}: widths above {max(per_width)} up to {condition.max_width} are not in "
                                   f"the grid")
            verdicts.append(INCONCLUSIVE)
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


def growth_order(condition: GrowthOrder, scale: str, configs: Sequence[RunConfig],
                  results: dict[str, RunResult]) -> Outcome:
    lengths = condition.lengths_at(scale)
    found, reasons, expected = runs_in(configs, results, condition.group, lengths)
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons))
    verdicts = [INCONCLUSIVE] if reasons else []
    sets = width_sets(found, _rule(condition.solved), ["model.name", "task.name"], outcome.reasons, expected)
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


def flops_order(condition: FlopsOrder, scale: str, configs: Sequence[RunConfig],
                 results: dict[str, RunResult]) -> Outcome:
    lengths = condition.lengths_at(scale)
    found, reasons, expected = runs_in(configs, results, condition.group, lengths)
    rule = _rule(condition.solved)
    notes: list[str] = []
    sets = width_sets(found, rule, ["model.name", "task.name"], notes, expected)
    sample = {(r.config.model.name, r.config.task.name, r.config.task.length): r.config for r in found}
    depths_of: dict[tuple[str, str, int], set[int]] = {}
    for r in found:
        if r.status in TRAINED:
            depths_of.setdefault((r.config.model.name, r.config.task.name, r.config.task.length), set()).add(
                r.config.model.layers)
    outcome = Outcome(condition.text, INCONCLUSIVE, reasons=list(reasons) + notes)
    verdicts = [INCONCLUSIVE] if reasons else []
    tasks = sorted({r.config.task.name for r in found})
    for task in tasks:
        lengths = sorted({n for m in condition.order for n in sets.get(f"{m}/{task}", {})})
        for n in lengths:
            flops: dict[str, list[float]] = {}
            mixed: list[str] = []
            for model in condition.order:
                widths = sets.get(f"{model}/{task}", {}).get(n)
                base = sample.get((model, task, n))
                if widths is None or base is None:
                    continue
                depths = sorted(depths_of.get((model, task, n), ()))
                if len(depths) > 1:
                    mixed.append(f"{task} N={n}: {model} has runs at depths {', '.join(map(str, depths))}; "
                                 f"FLOPs are compared at one depth per model")
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
            outcome.reasons.extend(mixed)
            if missing or mixed:
                verdicts.append(INCONCLUSIVE)
                continue
            pair_verdicts = []
            for low, high in zip(condition.order, condition.order[1:]):
                if min(flops[low]) == INF and min(flops[high]) == INF:
                    outcome.reasons.append(f"{task} N={n}: neither {low} nor {high} solves")
                    pair_verdicts.append(INCONCLUSIVE)
                else:
                    pair_verdicts.append(order_verdict(flops[low], flops[high]))
                    if _tied_at_the_grid_bottom(flops[low], flops[high]):
                        outcome.reasons.append(f"{task} N={n}: {low} and {high} both solve at the grid's smallest "
                                               f"width: {GRID_BOTTOM_TIE}")
            verdicts.append(combine(pair_verdicts))
    outcome.verdict = combine(verdicts) if verdicts else INCONCLUSIVE
    if not verdicts:
        outcome.reasons.append("no runs")
    return outcome


def _gflops_text(values: Sequence[float]) -> str:
    """The possible GFLOPs, as ``_widths_text`` gives the widths they come from; a width below the grid (0.0) is
    "<" the smallest grid width's."""
    grid = [v for v in values if v not in (INF, BELOW_GRID)]
    below = f"<{min(grid):.3g}" if grid else "below the grid"
    finite = [below if v == BELOW_GRID else f"{v:.3g}" for v in values if v != INF]
    text = "|".join(finite)
    if INF in values:
        text = f"{text} or more" if text else "none solved"
    return text
