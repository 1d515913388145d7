"""Sweep progress: runs done / total and an ETA, as a rich bar on a terminal or one line per run otherwise."""
from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sepbench.train.result import RunResult

if TYPE_CHECKING:
    from sepbench.sweep.workload import Workload


def describe(result: RunResult) -> str:
    cfg = result.config
    text = (f"{cfg.model.name}-({cfg.model.layers}, {cfg.model.width}) {cfg.task.name} N={cfg.task.length} "
            f"lr={cfg.train.lr:g} seed={cfg.seed}: {result.status}")
    if result.status in ("failed", "diverged"):
        return f"{text} ({result.error})"
    return f"{text} acc={result.accuracy:.3f} ({result.wall_seconds:.1f} s)"


def trained_any(result: RunResult) -> bool:
    """Whether the run trained at all: one refused for memory, or failed before its first step, did not."""
    return result.steps > 0 or bool(result.curve)


class SweepProgress:
    """Counts finished runs; ``advance(result)`` after each. With a ``Workload``, the ETA is the work left at the
    pace of the work done so far; without one, it assumes the remaining runs cost the mean of those that trained
    so far (a run that did not train, as one refused for memory, ends at once and says nothing of the cost)."""

    def __init__(self, name: str, total: int, console: Console, live: bool | None = None,
                 workload: Workload | None = None, clock: Callable[[], float] = time.perf_counter,
                 at_most: bool = False) -> None:
        self.name, self.total, self.console = name, total, console
        self.at_most = at_most
        """``total`` is an upper bound (a bisection visits fewer runs than it may)"""
        self.done = 0
        self.trained = 0
        """finished runs that trained at least a step (``trained_any``)"""
        self.finished: set[str] = set()
        """config hashes of the runs advanced so far"""
        self.live = console.is_terminal if live is None else live
        self.workload, self.clock = workload, clock
        self.start = clock()
        self._reached: dict[str, int] = {}
        """the steps each finished run of the workload reached"""
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
                             TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"), console=console,
                             disable=not self.live)
        self._job = self._bar.add_task(name, total=total, eta="-")

    def eta_seconds(self) -> float | None:
        """Seconds left, estimated; None until a run has trained (no pace to go by yet)."""
        if not self.done:
            return None
        elapsed = self.clock() - self.start
        if self.workload is not None:
            done, left = self.workload.progress(self._reached)
            if done > 0:
                return elapsed * left / done
        if not self.trained:
            return None
        return elapsed / self.trained * max(self.total - self.done, 0)

    def advance(self, result: RunResult) -> None:
        self.done += 1
        self.trained += int(trained_any(result))
        self.finished.add(result.config_hash)
        if self.workload is not None and result.config_hash in self.workload.step_seconds:
            self._reached[result.config_hash] = result.steps
        if self.done > self.total:  # runs planned after the start (``reproduce --settle-ties``'s later rounds)
            self.total = self.done
            self._bar.update(self._job, total=self.total)
        eta = self.eta_seconds()
        bound = "<=" if self.at_most else ""
        left = "-" if eta is None else f"{bound}{eta:.0f} s"
        if self.live:
            self._bar.update(self._job, advance=1, eta=left)
            self._bar.console.print(describe(result), markup=False, highlight=False)
        else:
            self.console.print(f"[{self.done}/{bound}{self.total}] {describe(result)}; ETA {left}",
                               markup=False, highlight=False, soft_wrap=True)

    def __enter__(self) -> "SweepProgress":
        self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.stop()
