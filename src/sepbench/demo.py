"""`make demo`: the quick Index Lookup separation sweep (Transformer vs LSTM vs Mamba), then the report.

Bhattamishra et al. (2024, sec. 6, Fig. 2) find that a one-layer Transformer of width 64 solves Index
Lookup at every length while recurrent models of that size degrade as the length grows. The sweep trains
each model at a few lengths on two worker processes, prints the accuracy table and writes the HTML report.
Runs go to ``runs/demo.db`` (a second call reuses them); the report goes to ``runs/demo_report/``.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sepbench import configs
from sepbench.extras import MissingExtra, require
from sepbench.store import Store
from sepbench.sweep import SweepSpec, pending, run_sweep
from sepbench.sweep.progress import SweepProgress
from sepbench.sweep.search import SolvedRule

SPEC = configs.path("demo", "index_lookup_separation.yaml")
STORE, REPORT = Path("runs/demo.db"), Path("runs/demo_report")


def main(spec_path: Path = SPEC, store_path: Path = STORE, report_dir: Path = REPORT, workers: int = 2) -> Path:
    """Run the sweep (reusing stored runs), print the table, write the report; returns the page's path."""
    require("matplotlib", "report", "the demo")
    from sepbench.report import write_report

    console = Console()
    start = time.perf_counter()
    spec = SweepSpec.from_yaml(spec_path)
    configs = spec.expand()
    store = Store(store_path)
    workers = min(workers, os.cpu_count() or 1)
    todo = sorted(pending(configs, store), key=lambda cfg: -cfg.task.length)  # longest first: the workers finish together
    console.print(f"sweep '{spec.name}': {len(configs)} runs, {len(configs) - len(todo)} already in {store.path}, "
                  f"{len(todo)} to train on {workers} workers", highlight=False, soft_wrap=True)
    with SweepProgress(spec.name, len(todo), console) as progress:
        run_sweep(todo, store, workers=workers, on_result=progress.advance)
    results = [store.get(cfg.config_hash()) for cfg in configs]

    lengths = sorted({cfg.task.length for cfg in configs})
    table = Table(title="Index Lookup accuracy at length N")
    table.add_column("model")
    for n in lengths:
        table.add_column(f"N={n}", justify="right")
    for name in dict.fromkeys(cfg.model.name for cfg in configs):
        runs = {r.config.task.length: r for r in results if r.config.model.name == name}
        first = next(iter(runs.values())).config.model
        table.add_row(f"{name}-({first.layers}, {first.width})",
                      *(f"{runs[n].accuracy:.3f}" if n in runs else "-" for n in lengths))
    console.print(table)

    report = write_report(results, report_dir, source=str(store.path),
                          rule=SolvedRule(0.99, 1, 1), flops_rule=SolvedRule(0.9, 1, 1))
    console.print(f"done in {time.perf_counter() - start:.0f} s; report with {len(report.figures)} figures: "
                  f"{report.page.resolve()}", highlight=False, soft_wrap=True)
    return report.page


if __name__ == "__main__":
    try:
        main()
    except MissingExtra as problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
