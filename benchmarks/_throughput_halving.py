"""Learning-rate grids by successive halving against the full grid, on real cells: steps trained, best lr found.

``measure`` gives ``halving_cell_cost`` (steps of the full 8-lr grid / steps of successive halving) on one cell.
``python benchmarks/_throughput_halving.py`` measures the four cells of docs/sweeps.md (Index Lookup and Dyck,
Transformer and LSTM) and prints their table. Both searches start from an empty store, one thread.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _throughput_common import Ratio  # noqa: E402
from sepbench.store import Store  # noqa: E402
from sepbench.sweep import SweepSpec, run_sweep  # noqa: E402
from sepbench.sweep.halving import halve_cell, lr_score, run_halving, schedule  # noqa: E402
from sepbench.sweep.search import select_lr  # noqa: E402

LRS = [1e-2, 5e-3, 1e-3, 5e-4, 1e-4, 5e-5, 1e-5, 1e-6]  # Bhattamishra et al. 2024, App. H (L866), and 1e-5
TOLERANCE = 0.02
TRAIN = {"steps": 1000, "batch_size": 64, "eval_every": 100, "eval_samples": 500, "threshold": 0.99}
TF = {"name": "transformer", "layers": 1, "width": 32, "heads": 4}
CELLS: dict[str, dict[str, Any]] = {
    "Index Lookup N=32, TF-(1, 32)": {"task": {"name": "index_lookup", "length": 32, "options": {"alphabet_size": 16}},
                                      "model": TF},
    "Index Lookup N=12, LSTM-(1, 64)": {"task": {"name": "index_lookup", "length": 12,
                                                 "options": {"alphabet_size": 16}},
                                        "model": {"name": "lstm", "layers": 1, "width": 64}},
    "Dyck-(2,2) N=20, TF-(1, 32)": {"task": {"name": "dyck", "length": 20}, "model": TF},
    "Dyck-(2,2) N=40, LSTM-(1, 32)": {"task": {"name": "dyck", "length": 40},
                                      "model": {"name": "lstm", "layers": 1, "width": 32}},
}
QUICK = {"task": {"name": "index_lookup", "length": 12, "options": {"alphabet_size": 8}},
         "model": {"name": "lstm", "layers": 1, "width": 16},
         "train": {"steps": 200, "batch_size": 32, "eval_every": 20, "eval_samples": 200, "warmup_steps": 20}}


@dataclass(frozen=True)
class Comparison:
    """One cell searched both ways."""

    cell: str
    grid_steps: int
    halving_steps: int
    grid_lr: float
    grid_accuracy: float
    halving_lr: float
    halving_accuracy: float
    grid_seconds: float
    halving_seconds: float
    rungs: tuple[int, ...] = ()
    grid_at_rungs: tuple[tuple[float, tuple[float, ...]], ...] = ()
    cut_at: tuple[tuple[float, int], ...] = ()
    replay_agrees: bool = True

    @property
    def ratio(self) -> float:
        return self.grid_steps / self.halving_steps

    @property
    def agree(self) -> bool:
        return abs(self.grid_accuracy - self.halving_accuracy) <= TOLERANCE

    def detail(self) -> str:
        return (f"{self.cell}: {self.grid_steps} vs {self.halving_steps} steps, {self.grid_seconds:.0f} vs "
                f"{self.halving_seconds:.0f} s; best lr {self.grid_lr:g} acc {self.grid_accuracy:.3f} (grid) vs "
                f"{self.halving_lr:g} acc {self.halving_accuracy:.3f} (halving): "
                f"{'within' if self.agree else 'NOT within'} {TOLERANCE}")


def compare(cell: str, base: dict[str, Any], seeds: tuple[int, ...] = (0,), eta: float = 2.0) -> Comparison:
    """Train the full grid and successive halving, each into its own empty store."""
    configs = SweepSpec.build({"name": cell, "base": {"device": "cpu", "train": TRAIN, **base}, "lr_grid": LRS,
                               "seeds": list(seeds)}).expand()
    with tempfile.TemporaryDirectory() as folder:
        grid_store, halving_store = Store(Path(folder) / "grid.db"), Store(Path(folder) / "halving.db")
        start = time.perf_counter()
        grid = run_sweep(configs, grid_store)
        grid_seconds = time.perf_counter() - start
        halving = run_halving(configs, halving_store, eta=eta)
        (by_grid,), (by_halving,) = (select_lr(s.results()).itertuples() for s in (grid_store, halving_store))
        replay = halve_cell(configs, grid_store, eta=eta)
        rungs = tuple(r.step for r in schedule(configs[0].train.steps, len(LRS), eta, configs[0].train.eval_every))
        grid_runs = grid_store.results()
        at_rungs = tuple((lr, tuple(lr_score([r for r in grid_runs if r.config.train.lr == lr], step)[0]
                                    for step in rungs)) for lr in LRS)
    by_hash = {cfg.config_hash(): cfg.train.lr for cfg in configs}
    cut_at = tuple(sorted({(by_hash[h], step) for h, step in halving.cut_at.items()}, key=lambda x: -x[1]))
    return Comparison(cell, sum(r.steps for r in grid.results), halving.steps, by_grid.best_lr, by_grid.best_accuracy,
                      by_halving.best_lr, by_halving.best_accuracy, grid_seconds, halving.seconds, rungs, at_rungs,
                      cut_at, replay.cut_at == halving.cut_at)


def measure(quick: bool) -> list[Ratio]:
    """halving_cell_cost on one cell: Dyck LSTM (QUICK: a 200-step LSTM on Index Lookup)."""
    torch.set_num_threads(1)
    name = "Dyck-(2,2) N=40, LSTM-(1, 32)"
    found = compare("quick Index Lookup N=12, LSTM-(1, 16)", QUICK) if quick else compare(name, CELLS[name])
    return [Ratio("halving_cell_cost", found.ratio, 3.0, "at_least", found.detail())]


def main() -> None:
    torch.set_num_threads(1)
    found = []
    print("| cell | grid steps | halving steps | ratio | grid: best lr, acc | halving: best lr, acc | acc diff "
          "| grid s | halving s |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|")
    for cell, base in CELLS.items():
        c = compare(cell, base)
        found.append(c)
        print(f"| {cell} | {c.grid_steps} | {c.halving_steps} | {c.ratio:.2f} | {c.grid_lr:g}, {c.grid_accuracy:.3f} "
              f"| {c.halving_lr:g}, {c.halving_accuracy:.3f} | {abs(c.grid_accuracy - c.halving_accuracy):.3f} "
              f"| {c.grid_seconds:.0f} | {c.halving_seconds:.0f} |", flush=True)
    for c in found:
        cut = dict(c.cut_at)
        print(f"\n{c.cell}: the grid's accuracy at each rung (halving's cut marked *); replaying halving over the "
              f"grid's runs gives {'the same' if c.replay_agrees else 'DIFFERENT'} cuts")
        print("| lr | " + " | ".join(f"step {step}" for step in c.rungs) + " |")
        print("|---|" + "---:|" * len(c.rungs))
        for lr, accuracies in c.grid_at_rungs:
            cells = [f"{a:.3f}" + ("*" if cut.get(lr) == step else "") for step, a in zip(c.rungs, accuracies)]
            print(f"| {lr:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
