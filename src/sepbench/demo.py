"""`make demo`: a miniature of the Index Lookup separation (Bhattamishra et al. 2024, sec. 6, Fig. 2 left).

One-layer models of width 64 (a Transformer and recurrent models) learn Index Lookup at lengths where the
recurrent models still succeed with the demo's budget and at lengths where they do not, every model with the
same budget and at least two seeds. The sweep runs on two worker processes, prints the accuracy table with the
budget it used, and writes the HTML report. Runs go to ``runs/demo.db`` (a second call reuses them); the report
goes to ``runs/demo_report/``.
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
from sepbench.sweep import SweepSpec, pending, run_sweep
from sepbench.sweep.progress import SweepProgress
from sepbench.sweep.search import SolvedRule
from sepbench.train.result import RunResult
from sepbench.wording import counted

SPEC = configs.path("demo", "index_lookup_separation.yaml")
STORE, REPORT = Path("runs/demo.db"), Path("runs/demo_report")


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
    """Run the sweep (reusing stored runs), print the table, write the report; returns the page's path."""
    require("matplotlib", "report", "the demo")
    from sepbench.report import write_report

    console = Console()
    start = time.perf_counter()
    spec = SweepSpec.from_yaml(spec_path)
    runs = spec.expand()
    store = Store(store_path)
    workers = min(workers, os.cpu_count() or 1)
    todo = sorted(pending(runs, store), key=lambda cfg: -cfg.task.length)  # longest first: the workers finish together
    console.print(f"sweep '{spec.name}': {len(runs)} runs, {len(runs) - len(todo)} already in {store.path}, "
                  f"{len(todo)} to train on {workers} workers", highlight=False, soft_wrap=True)
    with SweepProgress(spec.name, len(todo), console) as progress:
        run_sweep(todo, store, workers=workers, on_result=progress.advance)
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


if __name__ == "__main__":
    try:
        main()
    except MissingExtra as problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
