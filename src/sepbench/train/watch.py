"""Live curves: each evaluation of a run in training goes, as it is measured, to TensorBoard (``--tensorboard``)
and to the store's table of running runs (``sepbench results --running``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from sepbench.config import RunConfig
from sepbench.train.result import EvalPoint, RunResult

TENSORBOARD_ENV = "SEPBENCH_TENSORBOARD"


def tensorboard_folder(config: RunConfig) -> Path | None:
    """``train.tensorboard``, else $SEPBENCH_TENSORBOARD; None when neither is set."""
    chosen = config.train.tensorboard or os.environ.get(TENSORBOARD_ENV, "").strip()
    return Path(chosen).expanduser() if chosen else None


def run_name(config: RunConfig) -> str:
    """A run's TensorBoard sub-folder: its cell (readable, then the cell hash) and its seed."""
    return (f"{config.task.name}-N{config.task.length}_{config.model.name}-{config.model.layers}x{config.model.width}"
            f"_lr{config.train.lr:g}_{config.cell_hash()}_seed{config.seed}")


def require_tensorboard() -> None:
    from sepbench.extras import require

    require("tensorboard", "tensorboard", "train.tensorboard (--tensorboard)")


def summary_writer(folder: Path, purge_step: int | None = None) -> Any:
    """A writer into ``folder``; ``purge_step``: events a killed run logged at or after it are dropped."""
    require_tensorboard()
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(folder), purge_step=purge_step)


class Watch:
    """Sends each evaluation of one run to TensorBoard and to the store's running table, as it comes."""

    def __init__(self, config: RunConfig, store: Path | None) -> None:
        folder = tensorboard_folder(config)
        self.folder = folder / run_name(config) if folder is not None else None
        if self.folder is not None:
            require_tensorboard()
        self.writer: Any = None
        self.store = store
        self.last: tuple[int, float] | None = None

    def point(self, result: RunResult, point: EvalPoint, lr: float) -> None:
        """Record ``point``, the newest of ``result``'s curve, taken at learning rate ``lr``."""
        if self.folder is not None:
            if self.writer is None:  # opened at the first point, so a resumed run replaces what it logged after
                self.writer = summary_writer(self.folder, purge_step=point.step)
            self._scalars(point, lr)
        if self.store is not None:
            self._show(result)

    def _show(self, result: RunResult) -> None:
        """The curve so far into the store's running table; a store that refuses it (locked, unwritable) costs
        the run nothing but this, named in one warning line, and no later try."""
        from sepbench.store import Store, StoreError

        try:
            Store(self.store).put_running(result)
        except StoreError as problem:
            sys.stderr.write(f"warning: run {result.config_hash} shows no live curve: {problem}\n")
            self.store = None

    def _scalars(self, point: EvalPoint, lr: float) -> None:
        add = self.writer.add_scalar
        add("eval/loss", point.loss, point.step)
        add("eval/accuracy", point.accuracy, point.step)
        if point.interval is not None:
            add("eval/accuracy_low", point.interval.low, point.step)
            add("eval/accuracy_high", point.interval.high, point.step)
            add("eval/examples", point.interval.n, point.step)
        add("train/lr", lr, point.step)
        if self.last is not None and point.seconds > self.last[1]:
            add("train/steps_per_second", (point.step - self.last[0]) / (point.seconds - self.last[1]), point.step)
        self.last = (point.step, point.seconds)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def open_watch(config: RunConfig, store: Path | None) -> Watch | None:
    """The run's Watch; None when it has neither a TensorBoard folder nor a store to show its curve in."""
    if store is None and tensorboard_folder(config) is None:
        return None
    return Watch(config, store)
