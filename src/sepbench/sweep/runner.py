"""One run to a result, and the one interface every way of running a sweep's runs implements.

The executors (inline, a pool of warm workers, Ray; each alone or in stacked groups) sit above this module and
share what it holds: the failed result of a run that raised or whose worker was lost, the Ray connection, and
the way a parent keeps Ctrl-C to itself.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.train.keeping import Keeping, checkpoint_file
from sepbench.train.result import EvalPoint, RunResult

OnResult = Callable[[RunResult], None]


class Executor(Protocol):
    """Runs ``configs``: each result is stored in ``store`` and then handed to ``on_result`` as it finishes.
    Ctrl-C stops the runs in flight and propagates as KeyboardInterrupt; finished runs stay stored."""

    def __call__(self, configs: list[RunConfig], store: Store, on_result: OnResult) -> None: ...


REFUSED_FOR_MEMORY = "out of memory (estimated before training)"
"""The kind of failure of a run refused before training: its memory estimate is above what the device has free."""


def failed_result(config: RunConfig, error: BaseException, kind: str | None = None) -> RunResult:
    """A run that raised: recorded with its error so the sweep goes on and the grid shows the hole."""
    from sepbench.train.environment import code_version, package_version

    last = traceback.format_exception_only(type(error), error)[-1].strip()
    return RunResult(config=config, config_hash=config.config_hash(), status="failed",
                     error=f"{kind}: {error}" if kind else last, version=package_version(),
                     code_version=code_version(), created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def lost_run(config: RunConfig, error: BaseException, store: Store) -> RunResult:
    """The failed result of a run whose worker was lost, with the curve its checkpoint holds (what it trained up
    to its last save); it says when that checkpoint is kept to resume from."""
    result = failed_result(config, error)
    path = checkpoint_file(store.checkpoints, result.config_hash)
    if path.exists():
        result.curve = checkpointed_curve(path, config)
        result.error = f"{result.error}; its checkpoint in {store.checkpoints} is kept: --retry-failed resumes it"
    return result


class RowsBefore:
    """The stored rows of runs about to train, to tell the row a lost worker stored before it died from an older
    one that ``--force``, ``--retrain-stale`` or ``--retry-failed`` was replacing."""

    def __init__(self, configs: Iterable[RunConfig], store: Store) -> None:
        self._rows = store.texts(cfg.config_hash() for cfg in configs)

    def stored_since(self, config: RunConfig, store: Store) -> RunResult | None:
        """The run's row, if it was stored after this snapshot; None if the store holds the older row or none."""
        key = config.config_hash()
        if store.texts([key]).get(key) == self._rows.get(key):
            return None
        return store.get_readable(key)


def checkpointed_curve(path: Path, config: RunConfig) -> list[EvalPoint]:
    """The evaluations in the checkpoint at ``path`` (a solo run's or a stacked member's), if this code wrote it
    for ``config``; none otherwise. Read only, memory-mapped: the file stays for ``--retry-failed``."""
    import torch

    from sepbench.train.checkpoint import FORMAT
    from sepbench.train.environment import code_version

    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        current = (payload["format"], payload["config_hash"], payload["code_version"]) == (
            FORMAT, config.config_hash(), code_version())
        return RunResult.model_validate_json(payload["state"]["result"]).curve if current else []
    except Exception:  # noqa: BLE001 - an unreadable checkpoint has no curve to give; a resume sets it aside
        return []


def execute(config: RunConfig, keeping: Keeping | None = None) -> RunResult:
    """Train one run, keeping its progress as ``keeping`` says; a run that cannot fit, or raises, becomes a
    'failed' result instead of ending the sweep. Its checkpoint stays until the caller has stored the result and
    calls ``keeping.stored``."""
    from sepbench.train import train
    from sepbench.train.environment import resolve_device
    from sepbench.train.memory import MemoryRefused, check_memory, is_out_of_memory

    try:
        check_memory(config, resolve_device(config.device))
        return train(config, progress=False, keeping=keeping, keep_checkpoint=True)
    except MemoryRefused as error:
        return failed_result(config, error, REFUSED_FOR_MEMORY)
    except Exception as error:  # noqa: BLE001 - any crash of one run is that run's result
        return failed_result(config, error, "out of memory" if is_out_of_memory(error) else None)


@contextlib.contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` for the block, restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT for the block (main thread only): processes started here inherit the ignoring, so a
    terminal's Ctrl-C reaches only the parent, which then stops them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def start_ray(address: str | None, workers: int) -> tuple[object, bool]:
    """The ``ray`` module, connected to ``address`` or to a local instance of ``workers`` CPUs started here (then
    True: the caller shuts it down)."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("--backend ray needs the 'ray' package: pip install -r requirements-dev.txt") from None
    started_here = not ray.is_initialized()
    if started_here:
        options = {"address": address} if address else {"num_cpus": workers}
        with sigint_ignored():
            ray.init(include_dashboard=False, log_to_driver=False, **options)
    return ray, started_here


def ray_keeping(store: Store, address: str | None) -> Keeping:
    """Ray workers checkpoint in the store's checkpoint folder, which must be one they all reach (``--checkpoints``
    on shared storage for a cluster); only a local instance's workers write the curve so far into the store."""
    here = Keeping.beside(store)
    return here if address is None else Keeping(here.checkpoints)
