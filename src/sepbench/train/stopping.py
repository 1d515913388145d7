"""Stopping at a step boundary: a signal asks every run in training to save its checkpoint and stop."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Iterator


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal at a step boundary, once its checkpoint was saved."""


_stop_requested = False
_training = 0


def stop_requested() -> bool:
    """Whether a stop signal arrived while a run that keeps checkpoints was training."""
    return _stop_requested


@contextlib.contextmanager
def training() -> Iterator[None]:
    """Marks a run that keeps checkpoints as training: a stop signal now waits for its next step boundary."""
    global _training
    _training += 1
    try:
        yield
    finally:
        _training -= 1


def _on_stop_signal(signum: int, frame: Any) -> None:
    global _stop_requested
    if _training and not _stop_requested:
        _stop_requested = True
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def stop_runs_on(*signums: int) -> None:
    """From now on in this process, ``signums`` make a training run save its checkpoint at its next step boundary
    and stop (RunInterrupted); a second signal, or one that comes while no run trains, acts as it would have."""
    for signum in signums:
        signal.signal(signum, _on_stop_signal)


@contextlib.contextmanager
def stopping_runs_on(*signums: int) -> Iterator[None]:
    """``stop_runs_on`` for the block (main thread only); the handlers before it are restored after."""
    global _stop_requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in signums}
    stop_runs_on(*signums)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stop_requested = False
