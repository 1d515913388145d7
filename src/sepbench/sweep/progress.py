"""Sweep progress: runs done / total and an ETA, as a rich bar on a terminal or one line per run otherwise."""
from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sepbench.train.result import RunResult


def describe(result: RunResult) -> str:
    cfg = result.config
    text = (f"{cfg.model.name}-({cfg.model.layers}, {cfg.model.width}) {cfg.task.name} N={cfg.task.length} "
            f"lr={cfg.train.lr:g} seed={cfg.seed}: {result.status}")
    if result.status == "failed":
        return f"{text} ({result.error})"
    return f"{text} acc={result.accuracy:.3f} ({result.wall_seconds:.1f} s)"


class SweepProgress:
    """Counts finished runs; ``advance(result)`` after each. The ETA assumes the remaining runs cost the mean so far."""

    def __init__(self, name: str, total: int, console: Console, live: bool | None = None) -> None:
        self.name, self.total, self.console = name, total, console
        self.done = 0
        self.finished: set[str] = set()
        """config hashes of the runs advanced so far"""
        self.live = console.is_terminal if live is None else live
        self.start = time.perf_counter()
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
                             TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                             disable=not self.live)
        self._job = self._bar.add_task(name, total=total)

    def eta_seconds(self) -> float | None:
        if not self.done:
            return None
        return (time.perf_counter() - self.start) / self.done * (self.total - self.done)

    def advance(self, result: RunResult) -> None:
        self.done += 1
        self.finished.add(result.config_hash)
        if self.done > self.total:  # runs planned after the start (``reproduce --settle-ties``'s later rounds)
            self.total = self.done
            self._bar.update(self._job, total=self.total)
        if self.live:
            self._bar.update(self._job, advance=1)
            self._bar.console.print(describe(result), markup=False, highlight=False)
        else:
            eta = self.eta_seconds()
            self.console.print(f"[{self.done}/{self.total}] {describe(result)}; ETA {eta:.0f} s",
                               markup=False, highlight=False, soft_wrap=True)

    def __enter__(self) -> "SweepProgress":
        self._bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._bar.stop()
