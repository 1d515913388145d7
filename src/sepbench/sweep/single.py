"""One run through the store, as ``sepbench run`` does it: reuse the stored result, or train and store it."""
from __future__ import annotations

from dataclasses import dataclass

from sepbench.config import ConfigError, RunConfig
from sepbench.store import Store, UnreadableRun
from sepbench.sweep.runner import failed_result
from sepbench.train.result import RunResult


@dataclass
class StoredRun:
    """A run's result, and whether it was reused from the store (``stale``: stored by other code than this)."""

    result: RunResult
    reused: bool = False
    stale: bool = False
    replaced: str | None = None
    """why the stored row this run replaced could not be read (``UnreadableRun``); None if there was none"""


def run_stored(config: RunConfig, store: Store, force: bool = False, retrain_stale: bool = False,
               progress: bool | None = None) -> StoredRun:
    """The stored result of ``config``, unless ``force`` (or ``retrain_stale`` and other code stored it, or its
    row cannot be read); else train it, checkpointing beside the store (resuming a checkpoint found there), and
    store the result.

    A run that cannot fit in memory is a ConfigError before training; one that runs out of memory while training
    is stored as failed, and one that crashes otherwise (not a ValueError, which names a setting this machine
    cannot run) is stored as failed before its error propagates. Within ``stopping_runs_on(SIGINT)``, Ctrl-C
    saves a checkpoint and raises KeyboardInterrupt, storing nothing.
    """
    from sepbench.train import train
    from sepbench.train.environment import code_version, resolve_device
    from sepbench.train.keeping import Keeping
    from sepbench.train.memory import MemoryRefused, check_memory, is_out_of_memory

    replaced = None
    try:
        cached = None if force else store.get(config.config_hash())
    except UnreadableRun as problem:
        cached, replaced = None, str(problem)
    stale = cached is not None and cached.code_version != code_version()
    if cached is not None and not (stale and retrain_stale):
        return StoredRun(cached, reused=True, stale=stale)
    keeping = Keeping.beside(store)
    try:
        check_memory(config, resolve_device(config.device))
    except (MemoryRefused, ValueError) as problem:
        raise ConfigError(str(problem)) from None
    try:
        result = train(config, progress=progress, keeping=keeping, keep_checkpoint=True)
    except ValueError:  # a setting this machine cannot run (a kernel it lacks): bad input, nothing stored
        raise
    except Exception as problem:  # noqa: BLE001 - a crash is this run's result, stored as failed
        if not is_out_of_memory(problem):
            store.put(failed_result(config, problem))
            raise  # with its traceback: a crash that is not an allocation failure is a bug to report
        result = failed_result(config, problem, "out of memory")
    store.put(result)
    keeping.stored(result)
    return StoredRun(result, replaced=replaced)
