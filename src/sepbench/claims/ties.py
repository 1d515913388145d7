"""Whether a learning-rate search cut rates it could not tell apart: a best configuration it never trained.

Successive halving (``sepbench.sweep.halving``) ranks a cell's learning rates at each rung by their mean accuracy
over seeds and stops the worse ones. Where no rate has learned yet (every one at chance) the ranking is the
evaluation's noise, and the rates that train on are a draw: a cut rate might have learned later. A cut is *tied*
when the cut rate's mean accuracy at its rung is within ``Z`` standard errors of the worst rate kept there (each
evaluation's sampling noise from its Clopper-Pearson interval, or the binomial one where none is stored); then the
cell's measured best may be below its grid's best, and a verdict that rests on it is not decided.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sepbench.sweep.cells import cell_key
from sepbench.sweep.ties import Z, mean_and_variance, within_noise
from sepbench.train.result import RunResult


@dataclass(frozen=True)
class TiedCut:
    """Learning rate ``lr`` of one cell, cut at ``step`` with mean accuracy ``cut`` while ``kept`` (the worst rate
    that trained on) was within ``Z`` x ``noise`` of it."""

    model: str
    lr: float
    step: int
    cut: float
    kept_lr: float
    kept: float
    noise: float
    hashes: tuple[str, ...] = ()
    """The config hashes of the cut rate's runs still pruned (one per seed): those settling trains in full."""
    budget: int = 0
    """The steps each of those runs would train in full (its config's ``train.steps``)."""

    def text(self) -> str:
        return (f"the rate search cut {self.model} lr {self.lr:g} at step {self.step} with mean accuracy "
                f"{self.cut:.3f}, within the evaluations' noise of lr {self.kept_lr:g} which trained on "
                f"({self.kept:.3f}; {Z:g} standard errors = {Z * self.noise:.3f})")


def tied_cuts(results: Sequence[RunResult]) -> list[TiedCut]:
    """Every cut of a learning rate among ``results`` (runs of one or more cells) made on a tie. A rate some of
    whose seeds were since trained in full (a settling stopped part-way) is still a cut until its last pruned seed
    trains: its tie is judged at the cut step over every seed, and its ``hashes`` are the seeds still pruned."""
    cells: dict[str, dict[float, list[RunResult]]] = {}
    for result in results:
        cells.setdefault(cell_key(result.config), {}).setdefault(float(result.config.train.lr), []).append(result)
    found = []
    for by_lr in cells.values():
        for lr, runs in by_lr.items():
            cut_runs = [r for r in runs if r.status == "pruned"]
            if not cut_runs:
                continue
            step = max(r.steps for r in cut_runs)
            cut = mean_and_variance([r for r in runs if any(p.step == step for p in r.curve)], step)
            kept = [(other, mean_and_variance(group, step)) for other, group in by_lr.items()
                    if other != lr and all(r.steps > step for r in group)]
            kept = [(other, score) for other, score in kept if score is not None]
            if cut is None or not kept:
                continue
            worst_lr, worst = min(kept, key=lambda item: item[1][0])
            tied, noise = within_noise(cut, worst)
            if tied:
                model = f"{runs[0].config.model.name}-({runs[0].config.model.layers}, {runs[0].config.model.width})"
                found.append(TiedCut(model, lr, step, cut[0], worst_lr, worst[0], noise,
                                     tuple(r.config_hash for r in cut_runs), runs[0].config.train.steps))
    return found
