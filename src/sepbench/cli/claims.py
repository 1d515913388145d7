"""``sepbench reproduce``: every claim of the papers as a verdict, its plan and costs, or a model placed beside."""
from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from sepbench.cli.app import (bad_input_exits, err, interrupted, narrowest, out, print_whole, say, warn,
                              warn_unreadable_rows)
from sepbench.cli.options import (
    checkpoints_option, group_size_option, require_folder, retry_failed_option, store_option, tensorboard_option,
    use_folders,
)
from sepbench.config import ConfigError, parse_assignments
from sepbench.wording import counted

if TYPE_CHECKING:
    from sepbench.claims.catalogue import Claim
    from sepbench.store import Store
    from sepbench.sweep.executors import OnResult
    from sepbench.train.result import RunResult


class ClaimScale(str, Enum):
    quick = "quick"
    cpu = "cpu"
    paper = "paper"


EVIDENCE_SCALE = ClaimScale.cpu
"""The scale ``--evidence`` judges unless ``--scale`` names one: the one whose learned claims ship their runs."""


def reproduce(
    ctx: typer.Context,
    paper: Optional[str] = typer.Argument(None, help="bhattamishra2024, yang2024 or deng2023 [default: all three]"),
    claim_ids: list[str] = typer.Option([], "--claim", help="only this claim (repeat for several; see --list)"),
    scale: ClaimScale = typer.Option(ClaimScale.quick, "--scale", help="quick (a smoke check, minutes to an hour "
                                     "or two per claim on 2 CPU cores), cpu (the lengths the papers name, searches "
                                     "sized for one CPU core; --dry-run prices each claim) or paper (the paper's "
                                     "protocol); --evidence alone judges the cpu scale"),
    store: Optional[Path] = store_option(),
    out_dir: Path = typer.Option(Path("reports/reproduction"), "--out", help="folder for reproduction.md and figures"),
    workers: int = typer.Option(1, min=1, help="runs at the same time"),
    assignments: list[str] = typer.Option([], "--set", help="override a field of every run, over any value the "
                                          "claim's specs sweep: section.key=value (changes the runs, e.g. "
                                          "train.steps=20 for a smoke test; a forced seed leaves one seed)"),
    list_only: bool = typer.Option(False, "--list", help="print the catalogue and exit"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the runs still to train and an estimate of the time"),
    retry_failed: bool = retry_failed_option(),
    group_size: Optional[int] = group_size_option(),
    with_model: Optional[str] = typer.Option(None, "--with-model", help="a model (package.module:Class, a plugin's "
                                             "or a built-in name) to run on the claims' specs and place in a table "
                                             "beside the catalogue's stored runs, instead of judging the claims"),
    checkpoints: Optional[Path] = checkpoints_option(),
    tensorboard: Optional[Path] = tensorboard_option(),
    evidence: bool = typer.Option(False, "--evidence", help="judge from the shipped evidence (--evidence-dir), "
                                  "training nothing; with --store (or an existing SEPBENCH_STORE), your stored runs "
                                  "are judged beside it"),
    evidence_dir: Optional[Path] = typer.Option(None, "--evidence-dir", help="the evidence folder, "
                                                "DIR/SCALE/CLAIM.jsonl [default: the evidence/ folder of the "
                                                "checkout sepbench runs from, else ./evidence]"),
    write_evidence: bool = typer.Option(False, "--write-evidence", help="write each claim's runs (or check "
                                        "result) to --evidence-dir as JSON lines: a learned claim's again as each of "
                                        "its runs finishes, every claim's after judging"),
    resume_evidence: bool = typer.Option(False, "--resume-evidence", help="first copy the shipped evidence of these "
                                         "claims (--evidence-dir) into --store, keeping the runs it holds, so that "
                                         "only the runs the evidence lacks are trained"),
    settle_ties: bool = typer.Option(False, "--settle-ties", help="also train in full the learning rates a rate "
                                     "search cut within the evaluations' noise of one it kept, where a verdict "
                                     "waits on them ('the rate search cut rates it could not rank'; see "
                                     "docs/reproduction.md)"),
) -> None:
    """Every claim of the papers as a checked verdict: run what the store misses, then judge each claim by its rule.

    Rerun the same command to resume; stored runs are reused. Verdicts (reproduced, not reproduced, inconclusive)
    are computed from the runs by the rule each claim states (see --list and docs/reproduction.md). With
    --with-model, only that model's runs are trained and shown beside the catalogue's stored runs (no verdict).
    """
    from sepbench.claims import select
    from sepbench.claims.reproduce import judge_all, plan_claim, workload
    from sepbench.claims.tables import budget_text
    from sepbench.store import Store
    from sepbench.sweep import Reuse, SweepInterrupted
    from sepbench.sweep.progress import SweepProgress
    from sepbench.train.environment import require_devices

    started = time.time()
    reuse = Reuse(retry_failed=retry_failed)
    with bad_input_exits():
        _refuse_unused(ctx, evidence, with_model is not None, list_only)
        use_folders(checkpoints=checkpoints, tensorboard=tensorboard)
        claims = select(paper, claim_ids)
        overrides = parse_assignments(assignments)
        if overrides and all(c.kind == "theory" for c in claims):
            raise ConfigError(f"--set changes the runs of learned claims; {', '.join(c.id for c in claims)} "
                              f"{'is a theory claim' if len(claims) == 1 else 'are theory claims'} with none")
        if write_evidence and overrides and _is_shipped(evidence_dir):
            raise ConfigError("--write-evidence with --set would replace the shipped evidence with overridden runs; "
                              "allowed: --set with --evidence-dir naming another folder, or --write-evidence alone")
        evidence_dir = _evidence_root(evidence_dir, must_exist=evidence or (resume_evidence and not list_only))
        if evidence:
            if getattr(ctx.get_parameter_source("scale"), "name", "") == "DEFAULT":
                scale = EVIDENCE_SCALE
            if any(claim.at(scale.value).not_run is None for claim in claims):
                _require_scale_folder(evidence_dir, scale.value)
            from_environment = getattr(ctx.get_parameter_source("store"), "name", "") == "ENVIRONMENT"
            mine = None if from_environment and store is not None and not store.exists() else store
            _from_evidence(claims, scale.value, evidence_dir, mine)
            return
        db = Store(store)
        if not list_only:
            db.check_usable()
        if not list_only and not dry_run:
            db.check_writable()
            if with_model is None:
                require_folder(out_dir)
            if write_evidence:
                _require_evidence_files(claims, scale.value, evidence_dir)
        if resume_evidence and not list_only:
            db = _resume_from_evidence(claims, scale.value, evidence_dir, db, dry_run)
        plans = ([plan_claim(c, scale.value, db, overrides, reuse, settle_ties) for c in claims]
                 if not list_only else [])
        if not dry_run:
            require_devices(cfg.device for p in plans for cfg in p.todo)
    warn_unreadable_rows({h: reason for p in plans for h, reason in p.unreadable.items()})
    stale = sum(p.stale_kept for p in plans)
    if stale:
        warn(f"note: {counted(stale, 'stored run')} of these claims came from other code than this one; they count "
             "as current, as shipped runs keep the code that trained them")
    if list_only:
        _print_catalogue(claims, scale.value)
        return
    if with_model is not None:
        _place_model(claims, with_model, scale.value, db, overrides, workers, reuse, group_size, dry_run, started,
                     Store(store).path)
        return
    if dry_run:
        _print_plan(plans, db, workers, scale.value)
        return
    todo = sum(len(p.todo) for p in plans)
    say(f"reproduce: {counted(len(claims), 'claim')} at the {scale.value} scale, {counted(todo, 'run')} to train in "
        f"{db.path}")
    try:
        with SweepProgress("reproduce", todo, err, workload=workload(plans, db)) as progress:
            advance = (_writing_evidence(progress.advance, claims, scale.value, db, evidence_dir, overrides)
                       if write_evidence else progress.advance)
            verdicts = judge_all(claims, scale.value, db, overrides, workers=workers, on_result=advance,
                                 reuse=reuse, group_size=group_size, settle_ties=settle_ties)
    except SweepInterrupted as stop:
        if write_evidence:  # what finished ships; the claim is judged inconclusive for the runs it still lacks
            _write_evidence(claims, scale.value, db, evidence_dir, overrides)
        interrupted(f"{counted(stop.finished, 'run')} finished and stored in {db.path}", db, started)
    _print_verdicts(verdicts, scale.value, overrides)
    from sepbench.claims.report import write

    page = write(verdicts, out_dir, budget_text(scale.value, overrides))
    say(f"wrote {page} with {counted(len(verdicts), 'figure')}")
    if write_evidence:
        _write_evidence(claims, scale.value, db, evidence_dir, overrides)


ALLOWED_WITH = {
    "--evidence": {"paper", "claim_ids", "scale", "store", "evidence_dir", "evidence"},
    "--with-model": {"paper", "claim_ids", "scale", "store", "workers", "assignments", "dry_run", "retry_failed",
                     "group_size", "with_model", "checkpoints", "tensorboard", "evidence_dir", "resume_evidence"},
    "--list": {"paper", "claim_ids", "scale", "list_only"},
}
"""The options each mode of ``reproduce`` uses; any other given beside it would be silently ignored."""


def _refuse_unused(ctx: typer.Context, evidence: bool, with_model: bool, list_only: bool) -> None:
    """Raise ConfigError for an option given on the command line that the chosen mode would ignore."""
    mode = "--list" if list_only else "--evidence" if evidence else "--with-model" if with_model else None
    if mode is None:
        return
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    given = [name for name in ctx.params if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"]
    unused = [flags[name] for name in given if name not in ALLOWED_WITH[mode]]
    if unused:
        allowed = ", ".join(flags[n] for n in flags if n in ALLOWED_WITH[mode] and flags[n].startswith("--")
                            and flags[n] != mode)
        raise ConfigError(f"{mode} does not use {', '.join(unused)}; allowed with it: {allowed}")


def _is_shipped(evidence_dir: Optional[Path]) -> bool:
    """Whether ``--evidence-dir`` (None: not given) names the evidence folder sepbench ships from."""
    from sepbench.claims import evidence as shipped

    return evidence_dir is None or evidence_dir.resolve() == shipped.default_root().resolve()


def _evidence_root(given: Optional[Path], must_exist: bool) -> Path:
    """``--evidence-dir``, else the checkout's evidence; a folder to read from must exist."""
    from sepbench.claims import evidence as shipped

    root = given if given is not None else shipped.default_root()
    return shipped.require_root(root) if must_exist else root


def _require_scale_folder(evidence_dir: Path, scale: str) -> None:
    """ConfigError unless ``evidence_dir`` holds a folder of evidence at ``scale``: one given without it, where a
    claim asked for was run, is another folder than the one meant."""
    if not (evidence_dir / scale).is_dir():
        held = sorted(p.name for p in evidence_dir.iterdir() if p.is_dir() and any(p.glob("*.jsonl")))
        raise ConfigError(f"--evidence-dir {evidence_dir} has no {scale}/ folder (scales it holds: "
                          f"{', '.join(held) or 'none'}); allowed: a folder of <scale>/<claim>.jsonl files, as "
                          "`sepbench reproduce --write-evidence` writes them")


def _require_evidence_files(claims: Sequence[Claim], scale: str, evidence_dir: Path) -> None:
    """Raise ConfigError unless every claim's evidence file can be written: its scale folder is, or can be made, a
    folder, and no folder stands where a file goes."""
    from sepbench.claims import evidence as shipped

    require_folder(evidence_dir / scale, given=evidence_dir, flag="--evidence-dir")
    for claim in claims:
        path = shipped.path_for(evidence_dir, scale, claim.id)
        if path.is_dir():
            raise ConfigError(f"--evidence-dir {evidence_dir}: {path} is a folder, where the evidence of {claim.id} "
                              "goes; allowed: a folder whose <scale>/<claim>.jsonl are files or absent")


def _writing_evidence(advance: OnResult, claims: Sequence[Claim], scale: str, db: Store, evidence_dir: Path,
                      overrides: dict[str, Any]) -> OnResult:
    """``advance``, then the evidence of each learned claim the finished run belongs to rewritten: a run ships as it
    finishes, so a killed process (or a lost machine whose checkout survives) loses none."""
    from sepbench.claims import evidence as shipped

    learned = [c for c in claims if c.kind != "theory" and c.at(scale).not_run is None]
    runs_of = {c.id: {cfg.config_hash() for cfg in c.configs(scale, overrides)} for c in learned}

    def advance_and_write(result: RunResult) -> None:
        advance(result)
        for claim in learned:
            if result.config_hash in runs_of[claim.id]:
                _say_dropped(claim, shipped.write(claim, scale, db, evidence_dir, overrides).dropped, overrides)

    return advance_and_write


def _write_evidence(claims, scale: str, db, evidence_dir: Path, overrides) -> None:
    """Each claim's stored runs (or check result) to ``evidence_dir`` as JSON lines."""
    from sepbench.claims import evidence as shipped

    for claim in claims:
        path, count, dropped = shipped.write(claim, scale, db, evidence_dir, overrides)
        say(f"evidence: {counted(count, 'record')} in {path}" if count else f"evidence: nothing stored for {claim.id}")
        _say_dropped(claim, dropped, overrides)


def _say_dropped(claim: Claim, dropped: int, overrides: dict[str, Any]) -> None:
    if dropped:
        spec = "the claim's spec (with --set)" if overrides else "the claim's spec"
        warn(f"evidence of {claim.id}: {counted(dropped, 'run')} of the file before left out: {spec} no longer "
             "names them")


def _resume_from_evidence(claims, scale: str, evidence_dir: Path, db, dry_run: bool):
    """The store with the shipped runs of ``claims`` copied in (a dry run gets a scratch copy, removed when the
    process ends: nothing of the user's is written)."""
    import atexit
    import shutil
    import sqlite3
    import tempfile
    from contextlib import closing

    from sepbench.claims import evidence as shipped
    from sepbench.store import Store

    if dry_run:
        if db.path.exists() and not db.path.is_file():
            raise ConfigError(f"store {db.path} is not a file; allowed: an SQLite file or a path to create")
        folder = tempfile.mkdtemp(prefix="sepbench-plan-")
        atexit.register(shutil.rmtree, folder, True)
        scratch = Path(folder) / db.path.name
        if db.path.exists():
            with closing(sqlite3.connect(db.path)) as source, closing(sqlite3.connect(scratch)) as copy:
                source.backup(copy)
        db = Store(scratch)
    missing = shipped.load(claims, scale, evidence_dir, db, keep_stored=True)
    say(f"resumed from the shipped evidence of {len(claims) - len(missing)} of {counted(len(claims), 'claim')} in "
        f"{evidence_dir / scale}")
    return db


def _from_evidence(claims, scale: str, evidence_dir: Path, store: Optional[Path]) -> None:
    """The verdict table from the shipped evidence, and, with ``store``, the verdicts of one's own runs beside it."""
    from sepbench.claims.report import tally
    from sepbench.claims.reproduce import judge_shipped
    from sepbench.claims.tables import beside_rows

    judged = judge_shipped(claims, scale, evidence_dir, store)
    run_here = sum(c.at(scale).not_run is None for c in claims)
    unrun = f"; {len(claims) - run_here} not run there" if run_here < len(claims) else ""
    say(f"judged from the shipped evidence in {evidence_dir / scale} (nothing trained): evidence for "
        f"{run_here - len(judged.missing)} of the {counted(run_here, 'claim')} run at the {scale} scale{unrun}")
    _print_verdicts(judged.verdicts, scale, {})
    if judged.mine is not None:
        table = Table(title=f"shipped evidence beside {store}")
        for column in ("claim", "shipped", "yours", "your evidence"):
            table.add_column(column, no_wrap=column == "claim")
        for row in beside_rows(judged.verdicts, judged.mine):
            table.add_row(*row)
        print_whole(table)
        say(f"yours: {tally(judged.mine)}")


def _place_model(claims, model: str, scale: str, db, overrides: dict, workers: int, reuse,
                 group_size: int | None, dry_run: bool, started: float, shown: Path) -> None:
    """``reproduce --with-model``: train ``model`` on each sweep claim's runs, then print where it stands.
    ``shown``: the user's store (``db`` is a scratch copy in a dry run with --resume-evidence)."""
    from sepbench.claims.placement import added_model_configs, place_all
    from sepbench.sweep import SweepInterrupted, plan
    from sepbench.sweep.progress import SweepProgress
    from sepbench.train.environment import require_devices

    sweeps = [c for c in claims if c.kind == "sweep" and c.at(scale).not_run is None]
    for claim in claims:
        if claim.kind == "theory":
            warn(f"note: {claim.id} is a theory claim (check {claim.check}); it has no runs to place {model} on")
        elif claim.at(scale).not_run is not None:
            warn(f"note: {claim.id} is not run at the {scale} scale; it has no runs to place {model} on")
    with bad_input_exits():
        added = {c.id: added_model_configs(c, scale, model, overrides) for c in sweeps}
        todo = sum(len(plan(configs, db, reuse).todo) for configs in added.values())
        if not dry_run:
            db.check_writable()
            require_devices(cfg.device for configs in added.values() for cfg in configs)
    out.print(f"reproduce --with-model {model}: {counted(len(sweeps), 'claim')} at the {scale} scale, "
              f"{counted(todo, 'run')} of {model} to train in {shown}; the catalogue's models are not trained, their "
              "stored runs are shown",
              highlight=False, soft_wrap=True, markup=False)
    if dry_run:
        return
    try:
        with SweepProgress("reproduce --with-model", todo, err) as progress:
            placements = place_all(sweeps, scale, db, model, overrides, workers=workers, on_result=progress.advance,
                                   reuse=reuse, group_size=group_size)
    except SweepInterrupted as stop:
        interrupted(f"{counted(stop.finished, 'run')} finished", db, started)
    for placement in placements:
        _print_placement(placement, scale)


def _print_placement(placement, scale: str) -> None:
    from sepbench.claims.tables import placement_rows

    claim = placement.claim
    table = Table(title=f"{claim.id} ({claim.paper}, {claim.where}), {scale} scale: {placement.model} beside the "
                        "catalogue's models")
    for column in ("task", "N", "model", "best lr", "accuracy", "seeds", "cell"):
        table.add_column(column, no_wrap=column != "model")
    for task, length, name, added, *rest in placement_rows(placement):
        table.add_row(task, length, Text(name, style="bold" if added else ""), *rest)
    out.print(f"claim: {claim.text}", highlight=False, soft_wrap=True, markup=False)
    print_whole(table)
    rule = placement.rule
    say(f"accuracy: mean over the seeds of the best learning rate; cell: solved when >= {rule.threshold:g} "
        f"in {rule.k} of {rule.m} seeds there. A placement, not a verdict on the claim.")
    if placement.catalogue_missing:
        warn(f"note: {counted(placement.catalogue_missing, 'run')} of the catalogue's models for {claim.id} are not "
             f"in the store and are left out (`sepbench reproduce --claim {claim.id}` with the same --scale and --set "
             "trains them)")
    if placement.added_missing:
        warn(f"note: {counted(placement.added_missing, 'run')} of {placement.model} are not in the store")


def _print_catalogue(claims, scale: str) -> None:
    """One block per claim (readable at any terminal width): id, paper and place, text, runs, verdict rule."""
    for claim in claims:
        not_run = claim.at(scale).not_run
        if claim.kind == "theory":
            runs = f"theory check {claim.check}"
        elif not_run is not None:
            runs = f"not run at the {scale} scale"
        else:
            runs = counted(len(claim.configs(scale)), f"{scale} run")
        beyond = f" [exploratory, outside the tally: {claim.exploratory_reason}]" if claim.exploratory else ""
        say(f"[bold]{claim.id}[/bold]  {claim.paper}, {claim.where}; {runs}")
        out.print(f"  claim: {claim.text}{beyond}", highlight=False, soft_wrap=True, markup=False)
        if claim.note:
            out.print(f"  note: {claim.note}", highlight=False, soft_wrap=True, markup=False)
        if not_run is not None:
            out.print(f"  not run at the {scale} scale: {not_run}", highlight=False, soft_wrap=True, markup=False)
        for condition in claim.conditions:
            out.print(f"  rule: {condition.text}", highlight=False, soft_wrap=True, markup=False)
        say(f"  verdicts need >= {counted(claim.min_seeds, 'seed')} per group")


def _print_plan(plans, db, workers: int, scale: str) -> None:
    from sepbench.claims.tables import dry_run

    planned = dry_run(plans, db)
    table = Table(title=f"reproduce --dry-run ({scale} scale)")
    table.add_column("claim", no_wrap=True)
    for column in ("runs", "stored", "to train", "core-hours", "estimate"):
        table.add_column(column)
    for row in planned.rows:
        table.add_row(*row)
    print_whole(table)
    for p in plans:
        if p.claim.at(scale).not_run is not None:
            out.print(f"{p.claim.id}: not run at the {scale} scale: {p.claim.at(scale).not_run}", highlight=False,
                      soft_wrap=True, markup=False)
    for cfg in planned.configs:
        say(f"{cfg.config_hash()}  task={cfg.task.name} N={cfg.task.length} model={cfg.model.name}-"
            f"({cfg.model.layers}, {cfg.model.width}) lr={cfg.train.lr:g} seed={cfg.seed} steps={cfg.train.steps}")
    say(f"{counted(len(planned.configs), 'run')} to train: {planned.total.text(workers)}")
    say(f"core-hours (one run on one core, every step, no early stop; runs shared by claims counted once in the "
        f"total): {planned.total.seconds / 3600:.2f} in all; per claim at most {planned.most_per_claim / 3600:.2f}")
    targets = planned.against_targets(scale)
    if targets is not None:
        say(targets)


def _print_verdict_blocks(title: str, rows: list[tuple[str, str, str, str, str]]) -> None:
    """The verdict table for a console too narrow for it: per claim, its verdict and cost, then place and evidence."""
    say(f"[bold]{title}[/bold]")
    for claim, where, evidence, verdict, cost in rows:
        say(f"[bold]{claim}[/bold]: {escape(verdict)} ({escape(cost)})")
        out.print(f"  {where}", highlight=False, soft_wrap=True, markup=False)
        for line in evidence.splitlines():
            out.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)


def _print_verdicts(verdicts, scale: str, overrides: dict) -> None:
    from sepbench.claims.report import tally
    from sepbench.claims.tables import overridden, verdict_rows

    title = f"reproduction, {scale} scale" + (f" (overridden: {overridden(overrides)})" if overrides else "")
    rows = verdict_rows(verdicts)
    table = Table(title=title)
    table.add_column("claim", no_wrap=True)
    table.add_column("where", min_width=18, ratio=1)
    table.add_column("evidence", min_width=40, ratio=3)
    table.add_column("verdict", min_width=24, ratio=2)
    table.add_column("wall, CPU", min_width=16)
    for row in rows:
        table.add_row(*row)
    if narrowest(table) <= out.width:
        print_whole(table)
    else:
        _print_verdict_blocks(title, rows)
    say(tally(verdicts))
    from sepbench.claims.verdicts import SEARCH_TIE

    tied = [v.claim.id for v in verdicts if any(SEARCH_TIE in r for o in v.outcomes for r in o.reasons)]
    if tied:
        say(f"{', '.join(tied)}: {SEARCH_TIE} rates it could not rank; `sepbench reproduce --claim ID --scale "
            f"{scale} --settle-ties` trains them in full (with --dry-run: what that costs)")
