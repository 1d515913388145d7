"""``sepbench reproduce``: run what a claim's specs still miss (through the sweep machinery), then judge it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sepbench.claims.catalogue import Claim
from sepbench.claims.checks import NotComputed, cached, swept_parameter
from sepbench.claims.evaluate import evaluate_runs
from sepbench.claims.series_rules import evaluate_series
from sepbench.claims.verdicts import INCONCLUSIVE, SEARCH_TIE, ClaimVerdict, Outcome, combine
from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.executors import OnResult, Reuse, plan, run_sweep
from sepbench.sweep.interrupts import interrupts_counted
from sepbench.sweep.spec import SweepSpec
from sepbench.train.result import RunResult

if TYPE_CHECKING:
    from sepbench.sweep.workload import Workload


@dataclass
class ClaimPlan:
    claim: Claim
    configs: list[RunConfig]
    todo: list[RunConfig]
    failed_kept: int
    scale: str
    searches: list[tuple[SweepSpec, list[RunConfig]]] = field(default_factory=list)
    """The claim's specs that search learning rates by successive halving, with their runs (``halving_specs``)."""
    settled: set[str] = field(default_factory=set)
    """Config hashes of the runs of rates the search cut on a tie, to train in full (``settle_ties``)."""
    settle_first: list[str] = field(default_factory=list)
    """Those of ``settled`` that one condition waits on, first in ``todo``, in order: a round of ``train_claims``
    trains the first rates of them, then plans again, as the rest may no longer count."""
    stale_kept: int = 0
    """Stored runs reused that other code trained (``code_version`` differs): they count as current."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Config hash -> reason of stored rows this code cannot read, in ``todo`` to train again."""

    @property
    def shares(self) -> dict[str, float]:
        """Per config hash of a halving run (not one settled), the share of its full budget the search plans
        (``halving.planned_shares``)."""
        from sepbench.sweep.halving import planned_shares

        shares = {}
        for spec, runs in self.searches:
            searched = [cfg for cfg in runs if cfg.config_hash() not in self.settled]
            shares.update(planned_shares(searched, len(spec.lr_grid or []), spec.halving_eta, spec.halving_finalists))
        return shares


def workload(plans: Sequence[ClaimPlan], store: Store) -> Workload:
    """What the plans' runs to train should cost, for the progress line's ETA (``sweep.workload``)."""
    from sepbench.sweep.workload import workload as expected

    shares = {h: share for p in plans for h, share in p.shares.items()}
    searched = [(cfg, shares[cfg.config_hash()]) for p in plans for _, runs in p.searches for cfg in runs
                if cfg.config_hash() in shares]
    return expected([cfg for p in plans for cfg in p.todo], store, searched)


def plan_claim(claim: Claim, scale: str, store: Store, overrides: dict[str, Any] | None = None,
               reuse: Reuse = Reuse(), settle_ties: bool = False) -> ClaimPlan:
    """What the claim's runs still need. ``settle_ties``: the runs of the learning rates its searches cut on a tie
    (``sepbench.claims.ties``) that its verdicts wait on train in full, as a grid trains them, replacing their
    pruned rows. Those a condition waits on for its ties alone come first in ``todo``, so that a stop part-way
    through leaves whole conditions decided rather than every condition half settled."""
    if claim.kind == "theory":
        return ClaimPlan(claim, [], [], 0, scale)
    configs = claim.configs(scale, overrides)
    searches = halving_specs(claim, scale, overrides)
    groups = waited_on(claim, scale, configs, store) if settle_ties else []
    settling = [h for group in groups for h in group]
    settled = set(settling)
    halved = {cfg.config_hash() for _, runs in searches for cfg in runs} - settled
    by_grid = plan([cfg for cfg in configs if cfg.config_hash() not in halved], store, reuse)
    by_halving = plan([cfg for cfg in configs if cfg.config_hash() in halved], store, reuse, halving=True)
    todo = {cfg.config_hash() for cfg in by_grid.todo + by_halving.todo}
    rank = {h: i for i, h in enumerate(settling)}
    ordered = sorted((cfg for cfg in configs if cfg.config_hash() in todo),
                     key=lambda cfg: rank.get(cfg.config_hash(), len(rank)))
    return ClaimPlan(claim, configs, ordered, len(by_grid.failed_kept) + len(by_halving.failed_kept), scale,
                     searches, settled, groups[0] if groups else [], by_grid.stale_kept + by_halving.stale_kept,
                     {**by_grid.unreadable, **by_halving.unreadable})


def waited_on(claim: Claim, scale: str, configs: Sequence[RunConfig], store: Store) -> list[list[str]]:
    """Config hashes of the runs of every learning rate a search cut on a tie that the claim's verdicts, judged on
    the stored runs, wait on (a side whose rise could change a verdict; ``Outcome.waits_on``), one group per
    condition, those of conditions that wait on nothing else first. A tie on a side whose rise could not change
    its verdict is left as the search cut it."""
    outcomes = evaluate_runs(claim, scale, configs, _stored(configs, store))
    ordered = sorted(outcomes, key=lambda o: not (o.reasons and all(SEARCH_TIE in reason for reason in o.reasons)))
    position = {cfg.config_hash(): i for i, cfg in enumerate(configs)}
    groups, seen = [], set()
    for outcome in ordered:
        group = [h for h in sorted(outcome.waits_on, key=position.__getitem__) if h not in seen]
        seen.update(group)
        if group:
            groups.append(group)
    return groups


def _stored(configs: Sequence[RunConfig], store: Store) -> dict[str, RunResult]:
    """The stored results of ``configs``, by config hash (those not stored are left out)."""
    found = ((cfg.config_hash(), store.get(cfg.config_hash())) for cfg in configs)
    return {h: result for h, result in found if result is not None}


def halving_specs(claim: Claim, scale: str, overrides: dict[str, Any] | None = None
                  ) -> list[tuple[SweepSpec, list[RunConfig]]]:
    """The claim's specs that search learning rates by successive halving (``lr_search: halving``), with their
    runs: a run such a search pruned is stored as ``pruned`` and answers only another halving search."""
    found = []
    for ref in claim.at(scale).specs:
        spec = ref.load(overrides)
        if spec.lr_search == "halving":
            found.append((spec, ref.kept(spec.expand(), scale, overrides)))
    return found


def judge(claim: Claim, scale: str, store: Store, overrides: dict[str, Any] | None = None,
          workers: int = 1, on_result: OnResult | None = None, reuse: Reuse = Reuse(),
          train: bool = True, group_size: int | None = None, settle_ties: bool = False) -> ClaimVerdict:
    """Train the claim's missing runs (``train_claims``) or run its theory check, then evaluate its conditions.

    ``wall_seconds`` is the stored wall time of the claim's runs (or its check), whether trained now or before;
    ``cpu_seconds`` the CPU time of those CPU runs that counted it.
    ``train`` False trains nothing and runs no theory check: the verdict is judged from what the store holds.
    """
    if train:
        train_claims([claim], scale, store, overrides, workers, on_result, reuse, group_size, settle_ties)
    return _verdict(claim, scale, store, overrides, reuse, compute=train)


def _verdict(claim: Claim, scale: str, store: Store, overrides: dict[str, Any] | None, reuse: Reuse,
             compute: bool) -> ClaimVerdict:
    """The claim judged on the runs the store holds (a theory claim on its check, run when ``compute``)."""
    if claim.kind == "theory":
        params = claim.at(scale).params
        try:
            series, seconds, _ = cached(claim.check, params, store.path, refresh=reuse.force, compute=compute)
        except NotComputed as missing:
            return ClaimVerdict(claim, scale, INCONCLUSIVE, [Outcome(c.text, INCONCLUSIVE, reasons=[str(missing)])
                                                             for c in claim.conditions], 0.0, 0)
        except Exception as error:  # noqa: BLE001 - a check that fails is this claim's result, not the command's end
            reason = f"the check {claim.check} failed: {type(error).__name__}: {error}"
            return ClaimVerdict(claim, scale, INCONCLUSIVE, [Outcome(c.text, INCONCLUSIVE, reasons=[reason])
                                                             for c in claim.conditions], 0.0, 0)
        outcomes = evaluate_series(claim, scale, series, swept_parameter(params))
        return ClaimVerdict(claim, scale, combine([o.verdict for o in outcomes]), outcomes, seconds, 0)
    not_run = claim.at(scale).not_run
    if not_run is not None:
        reason = f"not run at the {scale} scale: {not_run}"
        return ClaimVerdict(claim, scale, INCONCLUSIVE, [Outcome(c.text, INCONCLUSIVE, reasons=[reason])
                                                         for c in claim.conditions], 0.0, 0)
    configs = claim.configs(scale, overrides)
    results = _stored(configs, store)
    outcomes = evaluate_runs(claim, scale, configs, results)
    wall = sum(r.wall_seconds for r in results.values())
    counted = [r.cpu_seconds for r in results.values() if r.cpu_seconds is not None and r.device == "cpu"]
    return ClaimVerdict(claim, scale, combine([o.verdict for o in outcomes]), outcomes, wall, len(results),
                        sum(counted), len(counted))


def train_claims(claims: Sequence[Claim], scale: str, store: Store, overrides: dict[str, Any] | None = None,
                 workers: int = 1, on_result: OnResult | None = None, reuse: Reuse = Reuse(),
                 group_size: int | None = None, settle_ties: bool = False) -> None:
    """Train what the learned claims still need: each claim's learning-rate searches in turn, then the grid runs
    of all of them (settled rates included) as one sweep, so that ``workers`` are shared across claims, stacked by
    the device's group size unless ``group_size`` says. ``settle_ties``: the rates the searches cut on a tie that
    a verdict waits on (``plan_claim``), a few rates of one condition a round (``_first_rates``), planning again
    after each: a settled rate can decide its condition (the rest of its ties then no longer count) or tie
    further cuts to it.
    """
    from sepbench.sweep.grouped import default_group_size
    from sepbench.sweep.halving import run_halving

    learned = [c for c in claims if c.kind != "theory" and c.at(scale).not_run is None]
    trained: set[str] = set()
    searched: set[str] = set()
    while True:
        plans = [plan_claim(c, scale, store, overrides, reuse, settle_ties) for c in learned]
        todo = {cfg.config_hash() for p in plans for cfg in p.todo}
        if todo <= trained:
            return
        searching = False
        grid: dict[str, RunConfig] = {}
        for claim_plan in plans:
            halved: set[str] = set()
            for spec, runs in claim_plan.searches:
                hashes = {cfg.config_hash() for cfg in runs} - claim_plan.settled
                if hashes & todo and not hashes <= searched:
                    run_halving(runs, store, workers=workers, eta=spec.halving_eta, on_result=on_result,
                                finalists=spec.halving_finalists, keep_ties=spec.halving_keep_ties, reuse=reuse)
                    searching = True
                halved |= hashes
            searched |= halved
            grid.update((cfg.config_hash(), cfg) for cfg in claim_plan.todo
                        if cfg.config_hash() not in halved | claim_plan.settled | trained)
            grid.update((cfg.config_hash(), cfg) for cfg in _first_rates(claim_plan, trained, workers, group_size))
        if grid:
            size = group_size or default_group_size(next(iter(grid.values())).device)
            run_sweep(list(grid.values()), store, workers=min(workers, len(grid)), on_result=on_result,
                      reuse=reuse, group_size=size)
        if not settle_ties or not (searching or grid):
            return
        trained |= set(grid)


def _first_rates(claim_plan: ClaimPlan, trained: set[str], workers: int, group_size: int | None
                 ) -> list[RunConfig]:
    """The runs of the first tied rates of ``claim_plan.settle_first`` not yet trained: whole rates (every seed),
    at least one, and as many as fill the workers and their stacks in whole waves where the rates allow (three
    seeds on two workers: two rates, six runs, not three runs leaving a worker idle for the second wave), at most
    twice the room they give."""
    from sepbench.sweep.grouped import default_group_size

    first = set(claim_plan.settle_first) - trained
    waiting = [cfg for cfg in claim_plan.todo if cfg.config_hash() in first]
    if not waiting:
        return []
    room = workers * (group_size or default_group_size(waiting[0].device))
    picked: list[RunConfig] = []
    cells: set[str] = set()
    for cfg in waiting:
        cell = cfg.cell_hash()
        if cell not in cells and _fills_waves(len(picked), room):
            break
        cells.add(cell)
        picked.append(cfg)
    return picked


def _fills_waves(runs: int, room: int) -> bool:
    """Whether ``runs`` fill the ``room`` of the workers' slots: every slot of each wave, or two rooms' worth."""
    return runs >= room and (runs % room == 0 or runs >= 2 * room)


def judge_all(claims: Sequence[Claim], scale: str, store: Store, overrides: dict[str, Any] | None = None,
              workers: int = 1, on_result: OnResult | None = None, reuse: Reuse = Reuse(),
              group_size: int | None = None, settle_ties: bool = False) -> list[ClaimVerdict]:
    """Train what the claims need (``train_claims``), run their theory checks, and judge each. Ctrl-C raises
    SweepInterrupted (how many runs finished) once the runs in training have saved their checkpoints."""
    with interrupts_counted(store) as finished:
        train_claims(claims, scale, store, overrides, workers, finished.reporting(on_result), reuse, group_size,
                     settle_ties)
        return [_verdict(claim, scale, store, overrides, reuse, compute=True) for claim in claims]


@dataclass
class ShippedVerdicts:
    """``reproduce --evidence``: the verdicts of the shipped evidence, the claims it lacks, and (given a store of
    one's own runs) the verdicts of those."""

    verdicts: list[ClaimVerdict]
    missing: list[str]
    mine: list[ClaimVerdict] | None = None


def judge_shipped(claims: Sequence[Claim], scale: str, evidence_dir: Path, mine: Path | None = None
                  ) -> ShippedVerdicts:
    """Judge every claim from the evidence in ``evidence_dir`` (loaded into a scratch store: nothing trained, no
    check run), and, with ``mine``, from the runs in that store too."""
    import tempfile

    from sepbench.claims import evidence as shipped
    from sepbench.config import ConfigError

    with tempfile.TemporaryDirectory(prefix="sepbench-evidence-") as scratch:
        if mine is not None and not Path(mine).exists():
            raise ConfigError(f"--store {mine} does not exist; with --evidence it names a store of your runs to "
                              f"judge beside the shipped ones")
        if mine is not None:
            Store(mine).check_usable()
        store = Store(Path(scratch) / "evidence.db")
        by_id = {c.id: c for c in claims}
        missing = [i for i in shipped.load(claims, scale, evidence_dir, store) if by_id[i].at(scale).not_run is None]
        verdicts = [shipped.unshipped(c, scale, evidence_dir) if c.id in missing
                    else judge(c, scale, store, train=False) for c in claims]
        own = [judge(c, scale, Store(mine), train=False) for c in claims] if mine is not None else None
    return ShippedVerdicts(verdicts, missing, own)
