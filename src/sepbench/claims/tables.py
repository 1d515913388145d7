"""What ``sepbench reproduce`` shows, as rows of text: the verdicts, the dry run's plan with its costs, a model's
placement, and the shipped evidence beside one's own runs. The command line only lays them out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sepbench.claims.catalogue import CORE_HOUR_TARGETS
from sepbench.claims.verdicts import ClaimVerdict
from sepbench.claims.placement import Placement
from sepbench.claims.report import shown_verdict
from sepbench.claims.reproduce import ClaimPlan
from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.costs import Estimate, estimate
from sepbench.wording import counted


def overridden(overrides: dict[str, Any]) -> str:
    """``key=value, ...`` of the fields every run was overridden with."""
    return ", ".join(f"{k}={v}" for k, v in overrides.items())


def budget_text(scale: str, overrides: dict[str, Any]) -> str:
    extra = f"; every run overridden with {overridden(overrides)}" if overrides else ""
    return f"Scale: {scale} (budgets in each claim's specs: docs/reproduction.md){extra}."


SHOWN_REASONS = 3
"""Reasons shown per condition in a table of several claims; a table of one claim shows every one."""


def verdict_rows(verdicts: Sequence[ClaimVerdict]) -> list[tuple[str, str, str, str, str]]:
    """Per claim: id, paper and place, each condition's verdict with its evidence, the verdict, its cost
    (``ClaimVerdict.cost``)."""
    shown = SHOWN_REASONS if len(verdicts) > 1 else None
    rows = []
    for v in verdicts:
        lines = []
        for o in v.outcomes:
            lines.append(f"{o.text}: {o.verdict}")
            lines += [f"  {e}" for e in o.evidence]
            lines += [f"  inconclusive: {r}" for r in o.reasons[:shown]]
            hidden = len(o.reasons) - len(o.reasons[:shown])
            lines += ([f"  ({counted(hidden, 'more reason')}: `--claim {v.claim.id}` shows every one)"]
                      if hidden else [])
        rows.append((v.claim.id, f"{v.claim.paper}, {v.claim.place}", "\n".join(lines), shown_verdict(v),
                     v.cost))
    return rows


def beside_rows(shipped: Sequence[ClaimVerdict], mine: Sequence[ClaimVerdict]) -> list[tuple[str, str, str, str]]:
    """Per claim: id, the shipped verdict, one's own verdict and its first piece of evidence."""
    return [(ours.claim.id, shown_verdict(ours), shown_verdict(yours),
             "; ".join(o.evidence[0] for o in yours.outcomes if o.evidence) or "no evidence")
            for ours, yours in zip(shipped, mine)]


@dataclass
class DryRun:
    """``reproduce --dry-run``: a row per claim (runs, stored, to train, core-hours, estimate), the distinct runs
    still to train, their estimate in all, and each learned claim's core-seconds still to train."""

    rows: list[tuple[str, str, str, str, str, str]]
    configs: list[RunConfig]
    total: Estimate
    claim_seconds: dict[str, float]

    @property
    def most_per_claim(self) -> float:
        return max(self.claim_seconds.values(), default=0.0)

    def against_targets(self, scale: str) -> str | None:
        """Whether the runs still to train fit the scale's ``CORE_HOUR_TARGETS``, naming each claim past its own."""
        if scale not in CORE_HOUR_TARGETS:
            return None
        per_claim, in_all = CORE_HOUR_TARGETS[scale]
        aim = f"the {scale} scale aims at <= {per_claim:g} core-hours a claim and <= {in_all:g} in all"
        over = [f"{claim} {seconds / 3600:.2f}" for claim, seconds in self.claim_seconds.items()
                if seconds / 3600 > per_claim]
        total = self.total.seconds / 3600
        if not over and total <= in_all:
            return f"{aim}: the runs still to train fit both"
        past = [f"past {per_claim:g} a claim: {', '.join(over)}"] if over else []
        if total > in_all:
            past.append(f"{total:.2f} in all, past {in_all:g}")
        return f"{aim}: the runs still to train do not fit: {'; '.join(past)}"


def dry_run(plans: Sequence[ClaimPlan], store: Store) -> DryRun:
    """Estimate each claim's runs still to train, and all of them with runs shared by claims counted once."""
    rows, every, known, claim_seconds, shares = [], [], {}, {}, {}
    for p in plans:
        if p.claim.kind == "theory":
            rows.append((p.claim.id, "-", "-", "-", "-", f"theory check {p.claim.check} (seconds to minutes)"))
            continue
        not_run = p.claim.at(p.scale).not_run
        if not_run is not None:
            rows.append((p.claim.id, "0", "-", "0", "-", f"not run at the {p.scale} scale (why: below)"))
            continue
        every += p.todo
        claim_shares = p.shares
        shares.update(claim_shares)
        found = estimate(p.todo, store, known=known, shares=claim_shares)
        claim_seconds[p.claim.id] = found.seconds
        rows.append((p.claim.id, str(len(p.configs)), str(len(p.configs) - len(p.todo)), str(len(p.todo)),
                     f"{found.seconds / 3600:.2f}", found.text(1)))
    unique = list({cfg.config_hash(): cfg for cfg in every}.values())
    return DryRun(rows, unique, estimate(unique, store, known=known, shares=shares), claim_seconds)


def placement_rows(placement: Placement) -> list[tuple[str, str, str, bool, str, str, str, str]]:
    """Per cell: task, N, model-(layers, width), whether it is the added model, best lr, mean accuracy there,
    seeds and the cell's verdict; the added model right after the catalogue's at each size."""
    cells = placement.cells.assign(added=placement.cells.model == placement.model)
    rows = []
    for row in cells.sort_values(["task", "length", "layers", "width", "added", "model"]).itertuples():
        accuracy = "-" if row.best_accuracy != row.best_accuracy else f"{row.best_accuracy:.3f}"
        best_lr = "-" if row.best_lr != row.best_lr else f"{row.best_lr:g}"
        rows.append((row.task, str(row.length), f"{row.model}-({row.layers}, {row.width})", bool(row.added),
                     best_lr, accuracy, str(row.seeds), row.verdict))
    return rows
