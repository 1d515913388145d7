"""Which successive-halving schedule keeps the grid's best learning rate: variants replayed over stored grids.

Trains the full 8-lr grid of the four cells of docs/sweeps.md with 3 seeds into ``--store`` (resumable; about
15-25 min on one thread), then replays each variant over the stored curves, training nothing: a replay makes the
cuts a real search makes (the search reads stored runs instead of training them). Prints, per variant and cell,
the grid's best learning rate and accuracy (``select_lr``), the variant's, their difference, and the steps the
variant would train against the grid's.

    python benchmarks/halving_variants.py --store halving_grid.db
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from _throughput_halving import CELLS, LRS, TOLERANCE, TRAIN  # noqa: E402
from sepbench.config import RunConfig  # noqa: E402
from sepbench.store import Store  # noqa: E402
from sepbench.sweep import SweepSpec, run_sweep  # noqa: E402
from sepbench.sweep.halving import Rung, halve_cell, lr_score, rank, schedule  # noqa: E402
from sepbench.sweep.search import select_lr  # noqa: E402
from sepbench.train.result import RunResult  # noqa: E402

SEEDS = [0, 1, 2]
BUDGET, EVAL_EVERY = TRAIN["steps"], TRAIN["eval_every"]


def cell_configs(cell: str) -> list[RunConfig]:
    base = {"device": "cpu", "train": TRAIN, **CELLS[cell]}
    return SweepSpec.build({"name": cell, "base": base, "lr_grid": LRS, "seeds": SEEDS}).expand()


def first_rung_at_least(fraction: float) -> list[Rung]:
    """One finalist, the cuts that fall before ``fraction`` of the budget made there at once."""
    rungs = schedule(BUDGET, len(LRS), 2.0, EVAL_EVERY, finalists=1)
    floor = max(EVAL_EVERY, math.floor(BUDGET * fraction / EVAL_EVERY) * EVAL_EVERY)
    early, rest = [r for r in rungs if r.step < floor], [r for r in rungs if r.step >= floor]
    if not early:
        return rungs
    keep = min(r.keep for r in early + [r for r in rest if r.step == floor])
    return [Rung(floor, keep)] + [r for r in rest if r.step != floor]


def replay(runs: dict[float, list[RunResult]], rungs: list[Rung]) -> tuple[list[float], dict[float, int]]:
    """The learning rates left after ``rungs`` and the step each one reached (``halve_cell``'s decisions)."""
    alive, reached = list(runs), {lr: 0 for lr in runs}
    for rung in rungs:
        reached.update({lr: rung.step for lr in alive})
        winners = [lr for lr in alive if all(r.status == "solved" and r.steps <= rung.step for r in runs[lr])]
        keep = set(winners or rank({lr: lr_score(runs[lr], rung.step) for lr in alive})[:rung.keep])
        alive = [lr for lr in alive if lr in keep]
        if winners:
            break
    return alive, reached


def brackets(runs: dict[float, list[RunResult]]) -> tuple[list[float], dict[float, int]]:
    """Hyperband-like: one-finalist searches with first rungs at B/8, B/4, B/2 over shared runs; the best of
    their finalists. A run trained further by one bracket is the same run in the others."""
    finalists: set[float] = set()
    reached = {lr: 0 for lr in runs}
    for fraction in (0.125, 0.25, 0.5):
        alive, got = replay(runs, first_rung_at_least(fraction))
        finalists.update(alive)
        reached = {lr: max(reached[lr], got[lr]) for lr in runs}
    return sorted(finalists), reached


VARIANTS: dict[str, Callable[[dict[float, list[RunResult]]], tuple[list[float], dict[float, int]]]] = {
    "one finalist (rungs B/8, B/4, B/2)": lambda runs: replay(runs, schedule(BUDGET, len(LRS), 2.0, EVAL_EVERY, 1)),
    "one finalist, first rung >= B/4": lambda runs: replay(runs, first_rung_at_least(0.25)),
    "one finalist, first rung >= B/2": lambda runs: replay(runs, first_rung_at_least(0.5)),
    "brackets B/8, B/4, B/2": brackets,
    "two finalists (the default)": lambda runs: replay(runs, schedule(BUDGET, len(LRS), 2.0, EVAL_EVERY, 2)),
}


def best(runs: dict[float, list[RunResult]], lrs: list[float]) -> tuple[float, float]:
    (row,) = select_lr([r for lr in lrs for r in runs[lr]]).itertuples()
    return row.best_lr, row.best_accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("halving_grid.db"))
    parser.add_argument("--quick", action="store_true", help="skip: the grids take 15-25 min to train")
    args = parser.parse_args()
    if args.quick:
        print("halving_variants: no quick form (its four grids train 15-25 min); skipped under --quick")
        return
    store = Store(args.store)
    torch.set_num_threads(1)
    grids = {}
    for cell in CELLS:
        configs = cell_configs(cell)
        run_sweep([c for c in configs if not store.has(c.config_hash())], store)
        results = [store.get(c.config_hash()) for c in configs]
        grids[cell] = {lr: [r for r in results if r.config.train.lr == lr] for lr in LRS}
    for cell, runs in grids.items():  # the replay above makes halve_cell's own cuts (stored runs are only read)
        cut = {store.get(h).config.train.lr for h in halve_cell(cell_configs(cell), store).cut_at}
        assert sorted(set(LRS) - cut) == sorted(VARIANTS["two finalists (the default)"](runs)[0]), cell
    print("| variant | cell | grid: best lr, acc | variant: best lr, acc | diff | steps (grid's) |")
    print("|---|---|---|---|---:|---|")
    for name, variant in VARIANTS.items():
        worst, steps, grid_steps = 0.0, 0, 0
        for cell, runs in grids.items():
            alive, reached = variant(runs)
            (glr, gacc), (vlr, vacc) = best(runs, LRS), best(runs, alive)
            cell_steps = sum(min(r.steps, reached[lr]) for lr in runs for r in runs[lr])
            cell_grid = sum(r.steps for lr in runs for r in runs[lr])
            worst, steps, grid_steps = max(worst, gacc - vacc), steps + cell_steps, grid_steps + cell_grid
            print(f"| {name} | {cell} | {glr:g}, {gacc:.3f} | {vlr:g}, {vacc:.3f} | {gacc - vacc:.3f} "
                  f"| {cell_steps} ({cell_grid}) |")
        verdict = "all within" if worst <= TOLERANCE else "NOT all within"
        print(f"| {name} | all four: {verdict} {TOLERANCE} | | | worst {worst:.3f} "
              f"| {steps} ({grid_steps}: {grid_steps / steps:.2f}x fewer) |")


if __name__ == "__main__":
    main()
