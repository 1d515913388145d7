"""From a claim's configs and stored runs to groups: the runs of each group at each length (a ``Slot``), and a group's
value there, the seeds of its best configuration (``group_point``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from sepbench.claims.catalogue import Group, config_fields, in_group
from sepbench.claims.verdicts import RUNS_MISSING, Point
from sepbench.config import RunConfig
from sepbench.results import TRAINED
from sepbench.sweep.cells import cell_key, cut_rates
from sepbench.wording import counted
from sepbench.train.result import RunResult


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
                value: Callable[[RunResult], float] = final_accuracy,
                score: Callable[[Sequence[float]], float] | None = None) -> Point:
    """The group's value at one length: per member its best cell at its best learning rate (its ``rank``-th best
    with ``rank`` > 1, rates ranked by mean ``value``); the best or worst member by ``score`` (the mean unless
    given) of ``value`` over the seeds of that learning rate. A run without a value (NaN: no accuracy stored, or
    none evaluated by the step read) counts as one not trained. A rate a search cut on some seed (a settling of its
    tie stopped part-way) is not ranked on the seeds trained since: it stays a cut, which a verdict may wait on
    (``claims.ties``)."""
    members: dict[str, tuple[float, list[RunResult], str, str]] = {}
    by_cell: dict[str, list[RunResult]] = {}
    for result in slot.results:
        by_cell.setdefault(cell_key(result.config), []).append(result)
    for runs in by_cell.values():
        cut = {lr for _, lr in cut_rates(runs)}
        by_lr: dict[float, list[RunResult]] = {}
        for r in runs:
            if r.status in TRAINED and r.config.train.lr not in cut and not math.isnan(value(r)):
                by_lr.setdefault(r.config.train.lr, []).append(r)
        ranked = sorted(by_lr.items(), key=lambda item: (-np.mean([value(r) for r in item[1]]), item[0]))
        if len(ranked) < rank:
            continue
        lr, chosen = ranked[rank - 1]
        name = member_name(runs[0].config, per)
        scored = (score or mean_of)([value(r) for r in chosen])
        if name not in members or scored > members[name][0]:
            members[name] = (scored, chosen, f"{model_label(runs[0].config)} lr {lr:g}", rates_counted(runs, by_lr))
    if not members:
        return Point(label, x, [])
    chosen_member = (max if pick == "best" else min)(members.items(), key=lambda item: item[1][0])
    _, (_, seeds, where, lrs) = chosen_member
    ordinal = "best" if rank == 1 else f"{_ordinal(rank)} best"
    return Point(label, x, [value(r) for r in seeds], member=where, detail=f", {ordinal} of {lrs}", runs=list(seeds))


def mean_of(values: Sequence[float]) -> float:
    return float(np.mean(values))


def rates_counted(runs: Sequence[RunResult], trained: dict[float, list[RunResult]]) -> str:
    """The learning rates a pick was made among (``trained``: none of them cut on any seed) and, where a search
    cut others, how many it searched."""
    cut = {lr for _, lr in cut_rates(runs)}
    if not cut:
        return f"{len(trained)} lr"
    return f"{len(trained)} lr trained in full ({len(set(trained) | cut)} searched)"


def _ordinal(rank: int) -> str:
    suffix = "th" if 10 <= rank % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(rank % 10, "th")
    return f"{rank}{suffix}"


def gaps(slot: Slot, min_seeds: int, point: Point, rank: int = 1,
         value: Callable[[RunResult], float] = final_accuracy) -> list[str]:
    """Why the slot cannot be judged yet: runs missing or failed, trained runs without a value to read (NaN), or
    fewer seeds than ``min_seeds`` (saying so when fewer learning rates trained than the ``rank`` read)."""
    reasons = []
    if slot.missing:
        reasons.append(f"{counted(slot.missing, 'run')} {RUNS_MISSING}")
    if slot.failed:
        reasons.append(f"{counted(len(slot.failed), 'run')} failed or diverged ({slot.failed[0].status}: "
                       f"{slot.failed[0].error or 'no reason stored'})")
    trained = [r for r in slot.results if r.status in TRAINED]
    blank = [r for r in trained if math.isnan(value(r))]
    if blank:
        reasons.append(f"{counted(len(blank), 'trained run')} with no accuracy to read ({blank[0].status}, lr "
                       f"{blank[0].config.train.lr:g} seed {blank[0].config.seed}), counted as not trained")
    if len(point.values) < min_seeds:
        reasons.append(f"{point.label}: {counted(len(point.values), 'trained seed')}, the rule needs {min_seeds}"
                       f"{_why_few(trained, rank)}")
    return reasons


def _why_few(trained: Sequence[RunResult], rank: int) -> str:
    rates = max((len({r.config.train.lr for r in trained if cell_key(r.config) == cell})
                 for cell in {cell_key(r.config) for r in trained}), default=0)
    if rank > 1 and 0 < rates < rank:
        return (f" (it reads each cell's {_ordinal(rank)} best learning rate, and at most "
                f"{counted(rates, 'learning rate')} trained to the budget)")
    return ""


def slots_of(configs: Sequence[RunConfig], results: dict[str, RunResult], group: Group,
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


def group_label(group: Group) -> str:
    if isinstance(group, str):
        return group
    selectors = group if isinstance(group, list) else [group]
    parts = []
    for s in selectors:
        parts.append(" ".join(f"{k.split('.')[-1]}={'|'.join(map(str, v)) if isinstance(v, list) else v}"
                              for k, v in s.items()) or "all")
    return " or ".join(parts)


def runs_in(configs: Sequence[RunConfig], results: dict[str, RunResult], group: Group,
            lengths: Sequence[int] | None) -> tuple[list[RunResult], list[str], list[RunConfig]]:
    """The stored runs of ``group`` at ``lengths``, why some cannot be judged, and every run the specs name there."""
    slots = slots_of(configs, results, group, lengths)
    found = [r for slot in slots.values() for r in slot.results]
    missing = sum(slot.missing for slot in slots.values())
    failed = sum(len(slot.failed) for slot in slots.values())
    reasons = [text for count, text in ((missing, f"{counted(missing, 'run')} {RUNS_MISSING}"),
                                        (failed, f"{counted(failed, 'run')} failed")) if count]
    if not slots:
        reasons.append(f"no run of {group_label(group)} in the claim's specs")
    return found, reasons, [cfg for slot in slots.values() for cfg in slot.expected]
