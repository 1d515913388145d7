"""Learning-rate grids by successive halving (Jamieson & Talwalkar 2016, AISTATS; Hyperband's inner loop).

All learning rates of a cell start; at each rung the worse ones stop and are stored as ``pruned`` with their
curve, the rest train on, held in memory, so no step is trained twice. The last ``finalists`` learning rates
train to the budget, where learning-rate selection picks among them as it would over a grid. A run that
survives to the end is stored exactly as the grid would store it (same config, same hash, same curve on CPU).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Collection, Sequence

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.executors import OnResult, Reuse, failed_result, lost_run, plan
from sepbench.sweep.cells import cell_key
from sepbench.sweep.pool import run_in_processes
from sepbench.sweep.runner import RowsBefore
from sepbench.sweep.ties import mean_and_variance, within_noise
from sepbench.train import checkpoint
from sepbench.train.keeping import Keeping
from sepbench.train.loop import Trainer
from sepbench.train.result import RunResult

Score = tuple[float, float]
FINALISTS = 2
"""Learning rates that train to the budget. With one, the last cut falls at B/eta, where a learning rate that
rises first can lead one that ends better (measured on four cells in docs/sweeps.md); two reach the grid's best
accuracy within 0.01 there at 2.8x fewer steps than the grid."""


@dataclass(frozen=True)
class Rung:
    """Train every surviving learning rate to ``step``, then keep the best ``keep`` of them."""

    step: int
    keep: int


def schedule(budget: int, lrs: int, eta: float = 2.0, eval_every: int = 1, finalists: int = FINALISTS) -> list[Rung]:
    """Rungs at ``budget * eta^-k`` for k = K..1, then the budget itself, where K halvings take ``lrs`` to one.

    Each halving keeps ceil(n / eta), but never fewer than ``finalists``: those train to the budget, and a rung
    that would cut below them is dropped. A rung's step is snapped down to the evaluation grid (a multiple of
    ``eval_every``, at least one), so it is a point of every run's curve; halvings that snap to the same step
    happen there at once, and ones that would reach the budget are dropped (those lrs all train in full).
    """
    if eta <= 1:
        raise ValueError(f"eta must be > 1, got {eta}")
    if budget < 1 or lrs < 1 or eval_every < 1 or finalists < 1:
        raise ValueError(f"budget, lrs, eval_every and finalists must be >= 1, got {budget}, {lrs}, {eval_every}, "
                         f"{finalists}")
    keeps, n = [], lrs
    while n > 1:
        n = math.ceil(n / eta)
        keeps.append(n)
    rungs: list[Rung] = []
    for k, keep in zip(range(len(keeps), 0, -1), keeps):
        step = max(eval_every, math.floor(budget / eta ** k / eval_every) * eval_every)
        keep = max(keep, min(finalists, lrs))
        if step >= budget or keep == (rungs[-1].keep if rungs else lrs):
            break
        if rungs and rungs[-1].step == step:
            rungs[-1] = Rung(step, keep)
        else:
            rungs.append(Rung(step, keep))
    return rungs + [Rung(budget, rungs[-1].keep if rungs else lrs)]


def planned_steps(rungs: Sequence[Rung], lrs: int) -> int:
    """Steps per seed that a cell of ``lrs`` learning rates trains under ``rungs`` if no run stops early."""
    total, alive, done = 0, lrs, 0
    for rung in rungs:
        total += alive * (rung.step - done)
        alive, done = min(alive, rung.keep), rung.step
    return total


def planned_shares(runs: Sequence[RunConfig], lrs: int, eta: float, finalists: int) -> dict[str, float]:
    """Per config hash of a search's runs, the share of its full budget the search plans: its cell's planned steps
    (no early stop) over every learning rate's full budget, so that estimates count a search, not a grid."""
    shares = {}
    for cfg in runs:
        rungs = schedule(cfg.train.steps, lrs, eta, cfg.train.eval_every, finalists)
        shares[cfg.config_hash()] = planned_steps(rungs, lrs) / (lrs * cfg.train.steps)
    return shares


def rank(scores: dict[float, Score | None]) -> list[float]:
    """Learning rates best first: higher mean accuracy, then lower mean loss, then the order given.

    A learning rate without a score (one of its runs was cut before this rung) is left out.
    """
    scored = [(lr, score) for lr, score in scores.items() if score is not None]
    return [lr for lr, _ in sorted(scored, key=lambda item: (-item[1][0], item[1][1]))]


def _stopped_early(result: RunResult) -> bool:
    if result.status in ("solved", "diverged", "failed"):
        return True
    return (result.status == "pruned" and result.config.train.early_stop
            and result.steps_to_threshold is not None and result.steps_to_threshold == result.steps)


def _finite(loss: float) -> float:
    return loss if math.isfinite(loss) else math.inf


def score_at(result: RunResult, step: int) -> Score | None:
    """(accuracy, loss) of one run at a rung: its evaluation at ``step``, or its final metrics if it stopped
    before (solved and early-stopped); a failed or diverged run scores (0, inf) past the curve it reached, below
    every run that trained; None if it was cut before the rung."""
    for point in result.curve:
        if point.step == step:
            return point.accuracy, _finite(point.loss)
    if result.status in ("failed", "diverged"):
        return 0.0, math.inf
    if result.steps < step and _stopped_early(result):
        return result.metrics.get("accuracy", 0.0), _finite(result.metrics.get("loss", math.inf))
    return None


def lr_score(results: Sequence[RunResult], step: int) -> Score | None:
    """Mean accuracy and mean loss over the seeds of one learning rate at a rung (seeds live and die together)."""
    scores = [score_at(result, step) for result in results]
    if any(score is None for score in scores):
        return None
    return sum(s[0] for s in scores) / len(scores), sum(s[1] for s in scores) / len(scores)


class _Run:
    """One config of a cell: its stored result, or a Trainer held between rungs, or the result it finished with."""

    def __init__(self, config: RunConfig, stored: RunResult | None, keeping: Keeping) -> None:
        self.config, self.stored, self.keeping = config, stored, keeping
        self.result: RunResult | None = stored
        self.trainer: Trainer | None = None
        self.checkpoint: checkpoint.Checkpoint | None = None
        self.finished = stored is not None

    def advance(self, step: int) -> None:
        if self.finished:
            return
        try:
            if self.trainer is None:
                self.trainer = Trainer(self.config, self.keeping)
            self.result = self.trainer.train_until(step)
            if self.trainer.stopped:
                self._finish()
            else:  # held at the rung: saved now, so however the process ends the run resumes from here
                checkpoint.save_trainer(self.trainer)
        except Exception as error:  # noqa: BLE001 - a crash of one run is that run's result
            reached = list(self.result.curve) if self.result is not None else []
            failed = failed_result(self.config, error).model_copy(update={"curve": reached})
            self.result, self.trainer, self.finished = failed, None, True

    def _finish(self) -> None:
        if self.trainer is not None:  # saved as it stopped, kept until the result is stored (``stored_now``)
            checkpoint.save_trainer(self.trainer)
            self.result = self.trainer.finish(delete_checkpoint=False)
            self.checkpoint = self.trainer.checkpoint
        self.trainer, self.finished = None, True

    def stored_now(self) -> None:
        """The result is in the store: the checkpoint that could rebuild it goes."""
        if self.checkpoint is not None:
            self.checkpoint.delete()
            self.checkpoint = None

    def close(self, pruned: bool) -> RunResult | None:
        """The result to store now, ``pruned`` if cut (a diverged or failed run keeps its status), and the run marked
        as stored; None if it was stored already."""
        if self.stored is not None:
            return None
        self._finish()
        assert self.result is not None
        if pruned and self.result.status not in ("diverged", "failed"):
            self.stored = self.result.model_copy(update={"status": "pruned"})
        else:
            self.stored = self.result
        return self.stored


@dataclass
class HalvingOutcome:
    """What one ``run_halving`` call did: ``steps`` counts the optimizer steps it trained (a run resumes in the call
    that finishes it, so steps before its last checkpoint are left out), ``cut_at`` maps the
    config hash of every run whose learning rate was cut (stored now or before) to the rung step of the cut."""

    total: int
    skipped: int
    results: list[RunResult] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    cut_at: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """config hash -> reason of stored rows this code could not read, trained again"""

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if r.status in ("failed", "diverged")]


def tied_with_kept(candidates: Sequence[float], kept: Sequence[float], results: dict[float, list[RunResult]],
                   step: int) -> list[float]:
    """The ``candidates`` whose mean accuracy at ``step`` is within the evaluations' noise of the worst ``kept``
    rate's (``sweep.ties``): a rung cannot rank them below it. A rate with a seed that stopped before ``step``
    has no evaluation there and takes no part (it ranked on its final metrics)."""
    means = {lr: mean_and_variance(results[lr], step) for lr in (*kept, *candidates)}
    kept_means = [means[lr] for lr in kept if means[lr] is not None]
    if not kept_means:
        return []
    worst = min(kept_means, key=lambda mean: mean[0])
    return [lr for lr in candidates if means[lr] is not None and within_noise(means[lr], worst)[0]]


def halve_cell(configs: Sequence[RunConfig], store: Store, eta: float = 2.0,
               on_result: OnResult | None = None, finalists: int = FINALISTS,
               keep_ties: bool = False, retrain: Collection[str] = ()) -> HalvingOutcome:
    """Successive halving over the learning rates of one cell (its configs differ only in lr and seed).

    Stored runs are read instead of trained, so a rerun replays the decisions already taken and trains only
    what the store lacks (the survivors of an interrupted rung resume from their checkpoints). Once every seed of a
    learning rate has solved and early-stopped, it wins and the others stop at that rung. At the budget nothing is
    cut: each run there is stored the moment it finishes, so a kill loses no run that trained in full. With ``keep_ties``, a
    rung also keeps every rate tied with the worst one it keeps (``tied_with_kept``), so a cell where no rate has
    learned yet trains on whole; rates stored as cut by an earlier search stay cut. The stored runs of ``retrain``
    (config hashes: failed, stale or forced runs a ``Reuse`` trains again) train as if unstored.
    """
    outcome = HalvingOutcome(total=len(configs), skipped=0)
    lrs = list(dict.fromkeys(float(cfg.train.lr) for cfg in configs))
    keeping = Keeping.beside(store)
    runs = {lr: [_Run(cfg, None if cfg.config_hash() in retrain else store.get(cfg.config_hash()), keeping)
                 for cfg in configs if cfg.train.lr == lr] for lr in lrs}
    outcome.skipped = sum(run.stored is not None for group in runs.values() for run in group)
    protocol = configs[0].train

    def store_run(run: _Run, pruned: bool) -> None:
        result = run.close(pruned)
        if result is not None:
            store.put(result)
            run.stored_now()
            outcome.results.append(result)
            outcome.steps += result.steps - (result.resumed_from[-1] if result.resumed_from else 0)
            if on_result is not None:
                on_result(result)

    def close(lr: float, pruned: bool) -> None:
        for run in runs[lr]:
            store_run(run, pruned)

    alive = lrs
    for rung in schedule(protocol.steps, len(lrs), eta, protocol.eval_every, finalists):
        at_budget = rung.step >= protocol.steps
        for lr in alive:
            for run in runs[lr]:  # a stop saves the run in training; those held at a rung saved as they stopped
                run.advance(rung.step)
                if at_budget and run.finished:
                    store_run(run, pruned=False)  # nothing is cut at the budget: stored as it finishes
        if at_budget:
            for lr in alive:  # a rate an earlier search stored as cut has no score here: it stays cut where it was
                if all(run.stored is not None and run.stored.status == "pruned" for run in runs[lr]):
                    outcome.cut_at.update({run.config.config_hash(): run.stored.steps for run in runs[lr]})
            break
        winners = [lr for lr in alive if protocol.early_stop and all(
            run.finished and run.result.status == "solved" and run.result.steps <= rung.step for run in runs[lr])]
        scores = {lr: lr_score([run.result for run in runs[lr]], rung.step) for lr in alive}
        ranked = rank(scores)
        keep = set(winners or ranked[:rung.keep])
        if keep_ties and not winners:
            results = {lr: [run.result for run in runs[lr]] for lr in alive}
            keep |= set(tied_with_kept(ranked[rung.keep:], ranked[:rung.keep], results, rung.step))
        for lr in alive:
            if lr not in keep:
                outcome.cut_at.update({run.config.config_hash(): rung.step for run in runs[lr]})
                close(lr, pruned=True)
        alive = [lr for lr in alive if lr in keep]
        if winners:
            break
    for lr in alive:
        close(lr, pruned=False)
    return outcome


def group_cells(configs: Sequence[RunConfig]) -> list[list[RunConfig]]:
    """Configs grouped by cell (all but lr and seed), in first-seen order."""
    cells: dict[str, list[RunConfig]] = {}
    for cfg in configs:
        cells.setdefault(cell_key(cfg), []).append(cfg)
    return list(cells.values())


def _halve_in_worker(configs_json: list[str], store_path: str, eta: float, finalists: int, keep_ties: bool,
                     retrain: list[str]) -> tuple[list[str], int, dict[str, int]]:
    cell = halve_cell([RunConfig.model_validate_json(c) for c in configs_json], Store(store_path), eta,
                      finalists=finalists, keep_ties=keep_ties, retrain=set(retrain))
    return [r.model_dump_json() for r in cell.results], cell.steps, cell.cut_at


def run_halving(configs: Sequence[RunConfig], store: Store, workers: int = 1, eta: float = 2.0,
                on_result: OnResult | None = None, finalists: int = FINALISTS,
                keep_ties: bool = False, reuse: Reuse = Reuse()) -> HalvingOutcome:
    """Successive halving in every cell of ``configs``; cells run in parallel on ``workers`` processes.

    Each run is stored the moment its learning rate is cut or it finishes at the budget (a rate that wins before the
    budget: when its cell ends), so a killed search resumes. A cell whose runs are all stored replays nothing,
    unless ``reuse`` trains some of them again (failed ones, as a dead worker leaves them, stale ones or all).
    """
    start = time.perf_counter()
    outcome = HalvingOutcome(total=len(configs), skipped=0)
    planned = plan(configs, store, reuse, halving=True)
    to_train = {cfg.config_hash() for cfg in planned.todo}
    todo = [cell for cell in group_cells(configs) if any(cfg.config_hash() in to_train for cfg in cell)]
    outcome.skipped = len(configs) - len(to_train)
    outcome.unreadable = planned.unreadable

    def collect(result: RunResult) -> None:
        outcome.results.append(result)
        if on_result is not None:
            on_result(result)

    if workers == 1 or len(todo) <= 1:
        for cell in todo:
            done = halve_cell(cell, store, eta, collect, finalists, keep_ties, to_train)
            outcome.steps += done.steps
            outcome.cut_at.update(done.cut_at)
    else:
        path = str(store.path.resolve())
        before = RowsBefore([cfg for cell in todo for cfg in cell if cfg.config_hash() in to_train], store)

        def submit(cell: list[RunConfig]) -> tuple[Callable[..., tuple[list[str], int, dict[str, int]]], tuple]:
            return _halve_in_worker, ([c.model_dump_json() for c in cell], path, eta, finalists, keep_ties,
                                      [c.config_hash() for c in cell if c.config_hash() in to_train])

        def done(cell: list[RunConfig], value: tuple[list[str], int, dict[str, int]]) -> None:
            results, steps, cut_at = value
            outcome.steps += steps
            outcome.cut_at.update(cut_at)
            for result in results:
                collect(RunResult.model_validate_json(result))

        def lost(cell: list[RunConfig], error: BaseException) -> None:
            for cfg in (c for c in cell if c.config_hash() in to_train):
                result = before.stored_since(cfg, store)  # the worker stored the runs it cut or finished
                if result is None:
                    result = lost_run(cfg, error, store)
                    store.put(result)
                collect(result)

        run_in_processes(todo, workers, submit, done, lost)
    outcome.seconds = time.perf_counter() - start
    return outcome
