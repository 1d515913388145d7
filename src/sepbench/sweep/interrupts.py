"""What an interrupted command kept: the runs that finished before Ctrl-C, and the checkpoints its runs in
flight saved on the way out (each resumes from there when the same command runs again)."""
from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Iterable, Iterator

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.runner import OnResult
from sepbench.train.result import RunResult
from sepbench.train.stopping import stopping_runs_on
from sepbench.wording import counted


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a command's runs once its workers had stopped: ``finished`` runs (of the ``total`` it planned,
    where it knew them in advance) are stored, and the runs in training saved checkpoints to resume from."""

    def __init__(self, finished: int, total: int | None = None) -> None:
        super().__init__(f"{finished} of {counted(total, 'run')} finished" if total is not None else
                         f"{counted(finished, 'run')} finished")
        self.finished, self.total = finished, total


class FinishedRuns:
    """The runs a command finishes from now on, as its results are reported (``reporting``) and as the store
    shows them, so that a Ctrl-C can say how many there were; ``planned``: the runs it means to train, if known."""

    def __init__(self, store: Store, planned: Iterable[RunConfig] | None = None) -> None:
        self.store, self.before = store, store.config_hashes()
        hashes = None if planned is None else [cfg.config_hash() for cfg in planned]
        self.total = None if hashes is None else len(hashes)
        self.planned = None if hashes is None else set(hashes)
        self.reported: set[str] = set()

    def reporting(self, on_result: OnResult | None = None) -> OnResult:
        """An ``on_result`` that records each result, then hands it to ``on_result``."""
        def report(result: RunResult) -> None:
            self.reported.add(result.config_hash)
            if on_result is not None:
                on_result(result)

        return report

    def interrupted(self) -> SweepInterrupted:
        """What to raise on Ctrl-C: the runs finished so far, of the planned ones."""
        return SweepInterrupted(len(finished_runs(self.reported, self.before, self.store, self.planned)), self.total)


@contextlib.contextmanager
def interrupts_counted(store: Store) -> Iterator[FinishedRuns]:
    """For the block, Ctrl-C stops each run in training at a step boundary, once it saved its checkpoint, and
    comes out as SweepInterrupted with the runs finished in the block (their results passed through
    ``reporting``, or new in ``store``)."""
    finished = FinishedRuns(store)
    try:
        with stopping_runs_on(signal.SIGINT):
            yield finished
    except KeyboardInterrupt:
        raise finished.interrupted() from None


def finished_runs(reported: set[str], before: set[str], store: Store, planned: set[str] | None = None) -> set[str]:
    """Runs that finished since the store held ``before``: those reported (a retried run replaces its row, so
    only the report shows it), and those a worker stored but the interrupt kept from being reported (new in the
    store; only those in ``planned`` when given)."""
    new = store.config_hashes() - before
    return reported | (new if planned is None else new & planned)


def saved_checkpoints(store: Store, since: float) -> list[tuple[Path, str]]:
    """The checkpoints in the store's folder written since ``since`` (a ``time.time()``), each with its step."""
    folder = store.checkpoints
    saved = [p for p in folder.glob("*.pt") if p.stat().st_mtime >= since] if folder.is_dir() else []
    return [(path, checkpoint_step(path)) for path in saved]


def checkpoint_step(path: Path) -> str:
    """The step a checkpoint file was saved at; '?' for a file a worker was still writing."""
    import torch

    try:
        return str(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["state"]["step"])
    except Exception:  # noqa: BLE001 - a file a worker was still writing: its step is not known
        return "?"
