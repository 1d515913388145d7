"""Commands that train many runs: a sweep spec's grid, and the search for the smallest solving width."""
from __future__ import annotations

import math
import time
from contextlib import ExitStack
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import typer
from rich.table import Table

from sepbench.cli.app import (bad_input_exits, err, exit_on_failures, interrupted, print_whole, say, warn,
                              warn_unreadable_rows)
from sepbench.cli.options import (
    base_config, checkpoints_option, data_cache_option, group_size_option, packaged_config, parse_ints, parse_lrs,
    retry_failed_option, store_option, tensorboard_option, use_folders,
)
from sepbench.config import ConfigError, RunConfig, TrainConfig, apply_overrides, parse_assignments
from sepbench.wording import counted

if TYPE_CHECKING:
    from sepbench.store import Store
    from sepbench.sweep.driver import SpecPlan
    from sepbench.sweep.workload import Workload
    from sepbench.train.result import RunResult


def failed_text(results: Sequence[RunResult]) -> str:
    """'2 failed (1 refused for memory)': how many of ``results`` failed, and how many of those never trained."""
    from sepbench.sweep.runner import REFUSED_FOR_MEMORY

    failed = [r for r in results if r.status == "failed"]
    refused = sum(1 for r in failed if (r.error or "").startswith(REFUSED_FOR_MEMORY))
    return f"{len(failed)} failed" + (f" ({refused} refused for memory)" if refused else "")


def trained_count(results: Sequence[RunResult]) -> int:
    """How many of ``results`` trained: every one but the failed (a diverged or pruned run trained its steps)."""
    return sum(1 for r in results if r.status != "failed")


class SweepBackend(str, Enum):
    local = "local"
    ray = "ray"


def sweep(
    spec_file: Path = typer.Argument(..., help="YAML sweep spec (name, base, grid, zip, seeds, lr_grid, lr_search)"),
    workers: int = typer.Option(1, min=1, help="runs at the same time (processes, or Ray CPUs on a local instance)"),
    backend: SweepBackend = typer.Option(SweepBackend.local, help="local: a process pool; ray: one Ray task per run"),
    address: Optional[str] = typer.Option(None, help="Ray cluster address for ray.init [default: a local instance]"),
    store: Optional[Path] = store_option(),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the runs the sweep would train, train nothing"),
    device: Optional[str] = typer.Option(None, help="override every run's device (auto, cpu, cuda, cuda:N or mps)"),
    retry_failed: bool = retry_failed_option(),
    retrain_stale: bool = typer.Option(False, "--retrain-stale", help="train again the runs stored by other code"),
    force: bool = typer.Option(False, "--force", help="train every run again, stored or not"),
    group_size: Optional[int] = group_size_option(),
    data_cache: Optional[Path] = data_cache_option(),
    checkpoints: Optional[Path] = checkpoints_option(),
    tensorboard: Optional[Path] = tensorboard_option(),
) -> None:
    """Run every run of a sweep spec that the store does not hold yet; rerun the same command to resume.

    Exits 1 when any run of the sweep is failed (now or stored earlier), listing each with its reason.
    Ctrl-C stops the sweep within a second or two (workers are terminated); finished runs stay stored and the
    runs in training save checkpoints that the same command resumes from.
    """
    from sepbench.store import Store
    from sepbench.sweep import Reuse, SweepInterrupted, SweepSpec, run_spec
    from sepbench.sweep.progress import SweepProgress

    started = time.time()
    with bad_input_exits():
        use_folders(data_cache, checkpoints, tensorboard)
    db = Store(store)
    progress: list[SweepProgress] = []
    try:
        with bad_input_exits(), ExitStack() as shown:
            spec = SweepSpec.from_yaml(packaged_config(spec_file))
            if device is not None:
                spec.base = apply_overrides(spec.base, {"device": device})

            def planned(p: SpecPlan) -> None:
                _say_plan(p, db, backend, workers)
                if not dry_run:
                    bar = SweepProgress(spec.name, len(p.trains), err, workload=_workload(p, db))
                    progress.append(shown.enter_context(bar))

            outcome = run_spec(spec, db, workers=workers, backend=backend.value, address=address,
                               reuse=Reuse(retry_failed=retry_failed, retrain_stale=retrain_stale, force=force),
                               group_size=group_size, dry_run=dry_run, on_plan=planned,
                               on_result=lambda result: progress[0].advance(result))
    except SweepInterrupted as stop:
        interrupted(f"{stop.finished} of {counted(stop.total, 'run')} finished and stored in {db.path}", db, started)
    if dry_run:
        for cfg in outcome.planned.plan.todo:
            say(f"{cfg.config_hash()}  {spec.describe(cfg)}")
        return
    if outcome.planned.halving:
        say(f"sweep '{spec.name}' done by successive halving (eta {spec.halving_eta:g}): {len(outcome.results)} "
            f"stored in {outcome.seconds:.1f} s, {len(outcome.with_status('pruned'))} pruned, "
            f"{failed_text(outcome.results)}, {len(outcome.with_status('diverged'))} diverged, {outcome.steps} steps "
            f"trained of {outcome.planned.full_steps} a full grid would take at most; {counted(len(db), 'run')} in "
            f"{db.path}")
    else:
        say(f"sweep '{spec.name}' done: {trained_count(outcome.results)} trained in {outcome.seconds:.1f} s "
            f"({len(outcome.with_status('diverged'))} diverged), {failed_text(outcome.results)}; "
            f"{counted(len(db), 'run')} in {db.path}")
    exit_on_failures(outcome.failed, "sweep")


def _workload(planned: SpecPlan, db: Store) -> Workload:
    """What the sweep's runs to train should cost, for its progress line's ETA (``sweep.workload``)."""
    from sepbench.sweep.halving import planned_shares
    from sepbench.sweep.workload import workload

    spec, searched = planned.spec, []
    if planned.halving:
        shares = planned_shares(planned.configs, len(spec.lr_grid or []), spec.halving_eta, spec.halving_finalists)
        searched = [(cfg, shares[cfg.config_hash()]) for cfg in planned.configs]
    return workload(planned.trains, db, searched)


def _say_plan(planned: SpecPlan, db: Store, backend: SweepBackend, workers: int) -> None:
    """The sweep's first line, and a note for the stored runs it keeps as they are."""
    todo = planned.plan
    how = f", groups of up to {planned.group_size}" if planned.group_size > 1 else ""
    if planned.halving:
        how = ", by successive halving: the worse learning rates stop early"
    say(f"sweep '{planned.spec.name}': {counted(len(planned.configs), 'run')}, {todo.reused} already in {db.path}, "
        f"{len(todo.todo)} to train ({backend.value}, {counted(workers, 'worker')}{how})")
    if todo.stale_kept:
        warn(f"note: {counted(todo.stale_kept, 'stored run')} came from other code than this one; they are reused "
             "(--retrain-stale trains them again)")
    if todo.failed_kept:
        warn(f"note: {counted(len(todo.failed_kept), 'stored run')} failed and not retried "
             "(--retry-failed trains them again)")
    warn_unreadable_rows(todo.unreadable)


class LrSearch(str, Enum):
    grid = "grid"
    halving = "halving"


SEARCHED = {"task.length": "--lengths", "model.width": "--widths", "seed": "--m (seeds 0 to m-1)"}
"""The fields a width search sets for each run, and the flag that gives them."""


def _refuse_searched(assignments: list[str], lrs_given: bool) -> None:
    """ConfigError for a ``--set`` of a field the search sets itself, which it would override without a word."""
    searched = {**SEARCHED, **({"train.lr": "--lrs"} if lrs_given else {})}
    for key in parse_assignments(assignments):
        field = next((f for f in searched if key in (f, f.rsplit(".", 1)[-1])), None)
        if field is not None:
            raise ConfigError(f"--set {key}: minwidth sets {field} for each run; give it with {searched[field]}")


def minwidth(
    task: str = typer.Option(..., help="task name (see `sepbench tasks`)"),
    model: str = typer.Option(..., help="model name (see `sepbench models`)"),
    lengths: str = typer.Option(..., help="task sizes N, comma-separated"),
    widths: str = typer.Option(..., help="width grid to search, comma-separated"),
    layers: Optional[int] = typer.Option(None, help="number of blocks"),
    steps: Optional[int] = typer.Option(None, help="training steps per run"),
    threshold: Optional[float] = typer.Option(None, help="accuracy a seed must reach [default: the runs' own "
                                              "train.threshold, the level they stop early at]"),
    k: int = typer.Option(2, "--k", help="seeds that must reach it ..."),
    m: int = typer.Option(3, "--m", help="... out of this many (seeds 0..m-1)"),
    workers: int = typer.Option(1, min=1, help="runs at the same time"),
    device: Optional[str] = typer.Option(None, help="auto (CUDA when present), cpu, cuda, cuda:N or mps"),
    store: Optional[Path] = store_option(),
    config: Optional[Path] = typer.Option(None, help="YAML base config for every run"),
    assignments: list[str] = typer.Option([], "--set", help="override any base field: section.key=value (key=value "
                                          "where one section has the key)"),
    resamples: int = typer.Option(2000, min=10, help="bootstrap resamples for the interval on alpha"),
    retry_failed: bool = retry_failed_option(),
    retrain_stale: bool = typer.Option(False, "--retrain-stale", help="train again the runs stored by other code"),
    force: bool = typer.Option(False, "--force", help="train every run the search visits again"),
    lrs: Optional[str] = typer.Option(None, help="learning rates tried at each width, comma-separated"),
    lr_search: LrSearch = typer.Option(LrSearch.grid, help="grid: every lr in full; halving: successive halving"),
    eta: float = typer.Option(2.0, help="halving keeps 1/eta of the learning rates at each rung"),
    finalists: int = typer.Option(2, min=1, help="learning rates halving trains to the budget (see docs/sweeps.md)"),
    data_cache: Optional[Path] = data_cache_option(),
    checkpoints: Optional[Path] = checkpoints_option(),
    tensorboard: Optional[Path] = tensorboard_option(),
) -> None:
    """Smallest width that solves the task at each length (bisection, reusing stored runs), and its growth law.

    A width whose runs failed (out of memory, a crash) shows as failed, never as unsolved; the command then
    exits 1.
    """
    from sepbench.store import Store
    from sepbench.sweep import Reuse, SweepInterrupted
    from sepbench.sweep.interrupts import interrupts_counted
    from sepbench.sweep.pool import warm_pool
    from sepbench.train.environment import default_threads, require_devices

    started = time.time()
    db = Store(store)
    with bad_input_exits():
        use_folders(data_cache, checkpoints, tensorboard)
        db.check_usable()
    new: list[RunResult] = []
    try:
        with interrupts_counted(db) as finished, warm_pool(workers if lr_search == LrSearch.grid else 1) as pool:
            from sepbench.sweep.progress import SweepProgress
            from sepbench.sweep.search import SolvedRule, search_min_width

            with bad_input_exits():
                try:
                    rule = SolvedRule(threshold, k, m)
                except ValueError as problem:
                    raise ConfigError(str(problem)) from None
                grid_lengths = parse_ints(lengths, "--lengths", at_least_one=True)
                grid_widths = parse_ints(widths, "--widths", at_least_one=True)
                grid_lrs = parse_lrs(lrs) if lrs is not None else None
                if lr_search == LrSearch.halving and not grid_lrs:
                    raise ConfigError("--lr-search halving needs --lrs, the learning rates to search")
                if not 1 < eta < math.inf:
                    raise ConfigError(f"--eta must be a finite number > 1, got {eta:g}")
                _refuse_searched(assignments, lrs_given=grid_lrs is not None)
                flags = {"task.name": task, "model.name": model, "model.layers": layers, "train.steps": steps,
                         "device": device}
                base = base_config(config, flags, assignments)
                _require_reachable(threshold, RunConfig.build(apply_overrides(
                    base, {"task.length": grid_lengths[0], "model.width": grid_widths[0]})).train)
                require_devices(RunConfig.build(apply_overrides(base, {"task.length": n, "model.width": w})).device
                                for n in grid_lengths for w in grid_widths)
                threads = default_threads()
                db.check_writable()
            most_visited = len(set(grid_widths)).bit_length()
            progress = SweepProgress("minwidth", len(set(grid_lengths)) * most_visited * m * len(grid_lrs or [None]),
                                     err, live=False, at_most=True)
            reuse = Reuse(retry_failed=retry_failed, retrain_stale=retrain_stale, force=force)

            def seen(result: RunResult) -> None:
                new.append(result)
                progress.advance(result)

            with bad_input_exits():  # a grid point whose config does not build
                search = search_min_width(base, grid_lengths, grid_widths, rule, db, workers=workers,
                                          on_result=finished.reporting(seen), reuse=reuse, lrs=grid_lrs,
                                          lr_search=lr_search.value, eta=eta, pool=pool, threads=threads,
                                          finalists=finalists)
    except SweepInterrupted as stop:
        interrupted(f"{counted(stop.finished, 'run')} finished and stored in {db.path}", db, started)
    cfg = RunConfig.build(apply_overrides(base, {"task.length": grid_lengths[0], "model.width": grid_widths[0]}))
    depth = counted(cfg.model.layers, "layer")
    tuned = f"; best of {counted(len(grid_lrs), 'lr')} ({lr_search.value})" if grid_lrs else ""
    shown = rule.for_cell(cfg.train.threshold)
    warn_unreadable_rows(search.unreadable)
    _print_search(search, f"smallest width: {model}, {depth}, on {task}; solved = {shown}{tuned}", grid_widths,
                  resamples)
    failures = f", {failed_text(new)}" if trained_count(new) < len(new) else ""
    say(f"trained {counted(trained_count(new), 'new run')} ({search.steps} steps){failures}; {counted(len(db), 'run')} "
        f"in {db.path}")
    exit_on_failures({f"N={n} width {w}": reason for n, widths_ in search.failed.items()
                      for w, reason in widths_.items() if reason.startswith("failed")}, "width search", "width")


def _require_reachable(threshold: float | None, train: TrainConfig) -> None:
    """Refuse a --threshold above the level the runs stop early at: their last accuracy rarely passes it, so every
    width would read unsolved for a reason of the runs' own settings, not of the model."""
    if threshold is None or threshold <= train.threshold or not train.early_stop:
        return
    raise ConfigError(f"--threshold {threshold:g} is above the runs' train.threshold {train.threshold:g}, where they "
                      f"stop early; give --threshold <= {train.threshold:g}, --set train.threshold={threshold:g} "
                      "or --set train.early_stop=false")


def _print_search(search, title: str, grid_widths: list[int], resamples: int) -> None:
    """The smallest width per length with the widths evaluated, and the growth laws fitted to the exact ones."""
    from sepbench.sweep.search import MIN_FIT_POINTS, fit_log_law, fit_power_law

    table = Table(title=title)
    table.add_column("length N", justify="right")
    table.add_column("smallest width", justify="right")
    table.add_column("widths evaluated")
    for n, w in search.smallest.items():
        failed = search.failed.get(n, {})
        tried = ", ".join(f"{x}:{'solved' if ok else failed[x].split(':')[0] if x in failed else 'no'}"
                          for x, ok in sorted(search.checked[n].items()))
        open_below = search.undetermined_below(n)
        found = "none in grid" if w is None else str(w)
        if open_below:
            found = f"{found} (width {', '.join(map(str, open_below))} did not train: undetermined)"
        table.add_row(str(n), found, tried)
    print_whole(table)
    for n, reason in search.left_out(grid_widths).items():
        say(f"left out of the fits: N={n} ({reason})")
    determined = search.exact(grid_widths)
    if len(determined) < MIN_FIT_POINTS:
        say(f"no fit: a growth law needs an exact smallest width at >= {MIN_FIT_POINTS} lengths, "
            f"got {len(determined)}")
        return
    power, log = fit_power_law(determined, resamples=resamples), fit_log_law(determined)
    say(f"width ~ c * N^alpha: alpha = {power.alpha:.3f}, {power.level:.0%} bootstrap CI "
        f"[{power.alpha_low:.3f}, {power.alpha_high:.3f}] ({power.resamples} resamples), c = {power.c:.3g}, "
        f"rmse = {power.rmse:.3g}")
    say(f"width ~ a + b * log N: a = {log.a:.3g}, b = {log.b:.3g}, rmse = {log.rmse:.3g}")
