"""`make demo`: a miniature of the Index Lookup separation (Bhattamishra et al. 2024, sec. 6, Fig. 2 left).

One-layer models of width 64 (a Transformer and recurrent models) learn Index Lookup at lengths where the
recurrent models still succeed with the demo's budget and at lengths where they do not, every model with the
same budget and at least two seeds. The sweep runs on two worker processes, prints the accuracy table with the
budget it used, and writes the HTML report. Runs go to ``runs/demo.db`` (a second call reuses them); the report
goes to ``runs/demo_report/``. Ctrl-C stops it as it stops ``sepbench sweep``: finished runs stay stored, the runs in
training save checkpoints, one line says what is kept, and it exits 130; the same command resumes.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from sepbench import configs
from sepbench.config import RunConfig
from sepbench.extras import MissingExtra, require
from sepbench.results import TRAINED
from sepbench.store import Store
from sepbench.sweep import SweepInterrupted, SweepSpec, pending, run_sweep
from sepbench.sweep.interrupts import interrupts_counted
from sepbench.sweep.progress import SweepProgress
from sepbench.sweep.search import SolvedRule
from sepbench.train.result import RunResult
from sepbench.wording import counted

SPEC = configs.path("demo", "index_lookup_separation.yaml")
STORE, REPORT = Path("runs/demo.db"), Path("runs/demo_report")


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the demo; ``kept`` says what it had finished and stored."""

    def __init__(self, kept: str) -> None:
        super().__init__(kept)
        self.kept = kept


def budget_text(runs: Sequence[RunConfig]) -> str:
    """The budget every run of the demo had, in one sentence (it is the same for all)."""
    first = runs[0]
    train, options = first.train, first.task.options or {}
    lrs = sorted({cfg.train.lr for cfg in runs})
    seeds = sorted({cfg.seed for cfg in runs})
    return (f"Budget, the same for every model and length: {train.steps} steps of batch {train.batch_size}, "
            f"learning rate{'s' if len(lrs) > 1 else ''} {', '.join(f'{lr:g}' for lr in lrs)} "
            f"(the best per cell by mean accuracy), {len(seeds)} seeds; alphabet of "
            f"{options.get('alphabet_size', 64)} symbols; a run stops once it reaches {train.threshold:g} accuracy "
            f"on {train.eval_samples} strings of length exactly N. A recurrent model that fails here fails with "
            f"this budget: the paper trains up to 250k steps with 7 learning rates (L866).")


def accuracy_cells(results: Sequence[RunResult]) -> dict[tuple[str, int], str]:
    """Per (model, N): mean accuracy over seeds at the best learning rate, with the seeds' range."""
    by_cell: dict[tuple[str, int], dict[float, list[RunResult]]] = {}
    for result in results:
        key = (result.config.model.name, result.config.task.length)
        by_cell.setdefault(key, {}).setdefault(result.config.train.lr, []).append(result)
    cells = {}
    for key, by_lr in by_cell.items():
        trained = {lr: [r.accuracy for r in runs if r.status in TRAINED] for lr, runs in by_lr.items()}
        trained = {lr: accs for lr, accs in trained.items() if accs}
        if not trained:  # failed, diverged or pruned: never shown as an accuracy
            cells[key] = "/".join(sorted({r.status for runs in by_lr.values() for r in runs}))
            continue
        best = max(trained.values(), key=lambda accs: sum(accs) / len(accs))
        cells[key] = f"{sum(best) / len(best):.2f} ({min(best):.2f}-{max(best):.2f})"
    return cells


def main(spec_path: Path = SPEC, store_path: Path = STORE, report_dir: Path = REPORT, workers: int = 2) -> Path:
    """Run the sweep (reusing stored runs), print the table, write the report; returns the page's path.

    Ctrl-C in the sweep or after it raises DemoInterrupted, once the runs in training have saved their checkpoints;
    before the sweep, a plain KeyboardInterrupt (nothing new is stored)."""
    require("matplotlib", "report", "the demo")
    console = Console()
    start = time.perf_counter()
    spec = SweepSpec.from_yaml(spec_path)
    runs = spec.expand()
    store = Store(store_path)
    workers = min(workers, os.cpu_count() or 1)
    todo = sorted(pending(runs, store), key=lambda cfg: -cfg.task.length)  # longest first: the workers finish together
    console.print(f"sweep '{spec.name}': {len(runs)} runs, {len(runs) - len(todo)} already in {store.path}, "
                  f"{len(todo)} to train on {workers} workers", highlight=False, soft_wrap=True)
    try:
        with SweepProgress(spec.name, len(todo), console) as progress, interrupts_counted(store) as finished:
            run_sweep(todo, store, workers=workers, on_result=finished.reporting(progress.advance))
    except SweepInterrupted as stop:
        raise DemoInterrupted(f"{stop.finished} of {counted(len(todo), 'run')} finished and stored in "
                              f"{store.path}") from None
    try:
        return _show(runs, store, report_dir, console, start)
    except KeyboardInterrupt:
        raise DemoInterrupted(f"all {counted(len(runs), 'run')} are stored in {store.path}, the report is not "
                              "written") from None


def _show(runs: Sequence[RunConfig], store: Store, report_dir: Path, console: Console, start: float) -> Path:
    """Print the accuracy table and the budget of the stored ``runs``, write the report; returns the page's path."""
    from sepbench.report import write_report

    results = [found for cfg in runs if (found := store.get(cfg.config_hash())) is not None]

    lengths = sorted({cfg.task.length for cfg in runs})
    cells = accuracy_cells(results)
    table = Table(title="Index Lookup accuracy at length N: mean over seeds (range)")
    table.add_column("model")
    for n in lengths:
        table.add_column(f"N={n}", justify="right")
    for name in dict.fromkeys(cfg.model.name for cfg in runs):
        model = next(cfg.model for cfg in runs if cfg.model.name == name)
        table.add_row(f"{name}-({model.layers}, {model.width})", *(cells.get((name, n), "-") for n in lengths))
    console.print(table)
    budget = budget_text(runs)
    console.print(budget, highlight=False, soft_wrap=True)

    report = write_report(results, report_dir, source=str(store.path), rule=SolvedRule(0.99, 1, 1),
                          flops_rule=SolvedRule(0.9, 1, 1), note=budget)
    console.print(f"done in {time.perf_counter() - start:.0f} s; report with {counted(len(report.figures), 'figure')}: "
                  f"{report.page.resolve()}", highlight=False, soft_wrap=True)
    return report.page


def run(spec_path: Path = SPEC, store_path: Path = STORE, report_dir: Path = REPORT, workers: int = 2) -> int:
    """``main`` as ``make demo`` runs it: a missing extra or Ctrl-C is one line on stderr; returns the exit code
    (0, 2 for a missing extra, 130 on Ctrl-C, as ``sepbench`` commands exit)."""
    import typer

    from sepbench.cli.app import BAD_INPUT, interrupted, warn

    since = time.time()
    try:
        main(spec_path, store_path, report_dir, workers)
    except MissingExtra as problem:
        warn(f"error: {problem}")
        return BAD_INPUT
    except KeyboardInterrupt as stop:
        kept = stop.kept if isinstance(stop, DemoInterrupted) else f"nothing new is stored in {store_path}"
        try:
            interrupted(kept, Store(store_path), since)
        except typer.Exit as leave:
            return leave.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(run())
