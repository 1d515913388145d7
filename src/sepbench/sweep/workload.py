"""What the runs to train should cost, for a progress line's ETA: the work left over the pace of the work done.

Work is counted in expected seconds: a run's steps at its shape's seconds a step (``step_seconds``). The work of a
cell of a learning-rate search is the steps its search plans, whichever runs train them, so a search's finalists
weigh more than the rates it cuts first. The pace, the work done in this process (finished runs, and the steps of
runs in training as the store's running table last saw them) over the time gone, takes in how many runs train at
once and how far the expected seconds are off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.costs import ShapeCost, flops_cost, shape, stored_costs
from sepbench.train.keeping import checkpoint_file


@dataclass(frozen=True)
class Cell:
    """Runs whose work is counted together, with the steps they have left: one grid run, or one cell of a search."""

    runs: tuple[str, ...]
    steps_left: float


@dataclass
class Workload:
    """The runs to train as cells of work, and what tells how far they have come."""

    step_seconds: dict[str, float]
    """Per config hash, the expected seconds of one of its steps."""
    cells: list[Cell]
    resumed_at: dict[str, int]
    """Per config hash of a run that resumes from a checkpoint, the checkpoint's step."""
    store: Store | None = None
    """Where runs in training report their steps."""

    def _cell_seconds(self, cell: Cell, steps: float) -> float:
        return self.step_seconds[cell.runs[0]] * steps

    def progress(self, finished: dict[str, int]) -> tuple[float, float]:
        """(work done, work left) in expected seconds, given the steps each finished run reached: a cell whose runs
        all finished has none left, whatever it planned (runs stop early)."""
        steps = {h: s for h, s in self._in_training().items() if h not in finished}
        steps.update(finished)
        done = left = 0.0
        for cell in self.cells:
            trained = sum(max(steps.get(h, 0) - self.resumed_at.get(h, 0), 0) for h in cell.runs)
            done += self._cell_seconds(cell, trained)
            if not all(h in finished for h in cell.runs):
                left += self._cell_seconds(cell, max(cell.steps_left - trained, 0.0))
        return done, left

    def _in_training(self) -> dict[str, int]:
        if self.store is None:
            return {}
        return {entry.result.config_hash: entry.result.steps for entry in self.store.running()
                if entry.result.config_hash in self.step_seconds and entry.alive is not False}


def workload(todo: Sequence[RunConfig], store: Store, searched: Sequence[tuple[RunConfig, float]] = ()) -> Workload:
    """What ``todo`` should cost. A grid run has its budget left; ``searched`` gives every run of the learning-rate
    searches with the share of its budget its search plans (``halving.planned_shares``), and a cell of them has the
    steps its search plans less those its stored runs trained. Either, less the step of the checkpoint a run
    resumes from (``resumed_at``)."""
    from sepbench.sweep.halving import group_cells

    refused = Refusals()
    todo = [cfg for cfg in {cfg.config_hash(): cfg for cfg in todo}.values() if not refused(cfg)]
    searched = [(cfg, share) for cfg, share in searched if not refused(cfg)]
    if not todo:
        return Workload({}, [], {}, store)
    resumed = resumed_at(todo, store)
    waiting = {cfg.config_hash() for cfg in todo}
    shares = {cfg.config_hash(): share for cfg, share in searched}
    cells: list[Cell] = []
    in_searches: set[str] = set()
    for cell in group_cells(list({cfg.config_hash(): cfg for cfg, _ in searched}.values())):
        runs = tuple(cfg.config_hash() for cfg in cell if cfg.config_hash() in waiting)
        if not runs:
            continue
        planned = sum(shares[cfg.config_hash()] * cfg.train.steps for cfg in cell)
        stored = [store.get_readable(cfg.config_hash()) for cfg in cell if cfg.config_hash() not in waiting]
        trained = sum(r.steps for r in stored if r is not None) + sum(resumed[h] for h in runs)
        cells.append(Cell(runs, max(planned - trained, 0.0)))
        in_searches.update(runs)
    cells += [Cell((cfg.config_hash(),), float(max(cfg.train.steps - resumed[cfg.config_hash()], 0)))
              for cfg in todo if cfg.config_hash() not in in_searches]
    return Workload(step_seconds(todo, store), cells, resumed, store)


class Refusals:
    """Whether a run's memory estimate is above what its device has free now (it will end at once, untrained, and
    is no work), asked once per cell: seed and learning rate do not change it. A CUDA device this process has not
    started is not asked (asking would start it in the sweep's parent)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], bool] = {}

    def __call__(self, config: RunConfig) -> bool:
        import torch

        from sepbench.sweep.cells import cell_key
        from sepbench.train.environment import resolve_device
        from sepbench.train.memory import MemoryRefused, check_memory

        device = resolve_device(config.device)
        if device.type == "cuda" and not torch.cuda.is_initialized():
            return False
        key = (cell_key(config), str(device))
        if key not in self._known:
            try:
                check_memory(config, device)
                self._known[key] = False
            except MemoryRefused:
                self._known[key] = True
        return self._known[key]


def resumed_at(todo: Sequence[RunConfig], store: Store) -> dict[str, int]:
    """Per run, the step of the checkpoint it will resume from (0 for none): that of its row in the running table,
    else, for a run stored failed with its checkpoint kept (``runner.lost_run``), its stored curve's last step."""
    if not store.checkpoints.is_dir():
        return {cfg.config_hash(): 0 for cfg in todo}
    running = {entry.result.config_hash: entry.result.steps for entry in store.running()}
    found = {}
    for cfg in todo:
        h = cfg.config_hash()
        step = 0
        if cfg.train.checkpoint_every > 0 and checkpoint_file(store.checkpoints, h).exists():
            lost = store.get_readable(h) if h not in running else None
            step = running.get(h) or (lost.curve[-1].step if lost is not None and lost.curve else 0)
        found[h] = step
    return found


def step_seconds(configs: Sequence[RunConfig], store: Store) -> dict[str, float]:
    """Per config hash, seconds a step with its evaluations spread over the steps: a stored shape's cost (by any
    code), else its forward FLOPs' cost scaled by the median ratio of stored to FLOP costs over up to
    ``RATIO_SHAPES`` stored shapes (``FLOP_RATE`` alone runs 10-25x slow). Nothing is timed."""
    import numpy as np

    stored = stored_costs(store, any_code=True)
    first: dict[tuple, RunConfig] = {}
    for cfg in configs:
        first.setdefault(shape(cfg), cfg)
    known = [key for key in first if key in stored][:RATIO_SHAPES]
    ratios = [per_step(stored[key], first[key]) / per_step(flops_cost(first[key]), first[key]) for key in known]
    scale = float(np.median(ratios)) if ratios else 1.0
    by_flops = {key: flops_cost(cfg) for key, cfg in first.items() if key not in stored}
    return {cfg.config_hash(): per_step(stored[shape(cfg)], cfg) if shape(cfg) in stored
            else scale * per_step(by_flops[shape(cfg)], cfg) for cfg in configs}


RATIO_SHAPES = 8


def per_step(cost: ShapeCost, cfg: RunConfig) -> float:
    return cost.run_seconds(cfg) / max(cfg.train.steps, 1)
