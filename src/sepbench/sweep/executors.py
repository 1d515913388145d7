"""Run a list of configs inline, on a pool of warm worker processes, or on Ray; every result lands in the one store.

Ctrl-C (KeyboardInterrupt) stops each path within a second or two and is raised again to the caller: pool
workers are terminated, Ray tasks cancelled, and every run finished before it stays stored.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Iterable, Literal

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.pool import WorkerPool
from sepbench.sweep.runner import (  # noqa: F401  (failed_result, execute, lost_run: the sweep's API)
    Executor, OnResult, execute, failed_result, intra_op_threads, lost_run, ray_keeping, sigint_ignored, start_ray,
)
from sepbench.train.keeping import Keeping, checkpoint_file
from sepbench.train.result import RunResult

Backend = Literal["local", "ray"]


def _run_remote(config_json: str, keeping: Keeping) -> str:
    """Ray task: train wherever Ray placed it, checkpointing in a folder every worker reaches, and send the result
    back for the driver to store."""
    import torch

    torch.set_num_threads(1)
    return execute(RunConfig.model_validate_json(config_json), keeping).model_dump_json()


@dataclass(frozen=True)
class Reuse:
    """Which stored runs a sweep trains again: failed ones (``--retry-failed``), ones stored by other code
    (``--retrain-stale``), or every one (``--force``). Diverged runs are results and are kept; runs pruned by a
    halving search are always trained in full by a grid sweep."""

    retry_failed: bool = False
    retrain_stale: bool = False
    force: bool = False


@dataclass
class Plan:
    """What a sweep will do with its configs, given the store."""

    todo: list[RunConfig]
    reused: int = 0
    failed_kept: dict[str, str] = field(default_factory=dict)
    """config hash -> error of stored failed runs that are not retried"""
    stale_kept: int = 0
    """reused runs that were stored by other code (``code_version`` differs)"""
    unreadable: dict[str, str] = field(default_factory=dict)
    """config hash -> reason of stored rows this code cannot read: they hold no result, so they train again"""
    ended: list[str] = field(default_factory=list)
    """config hashes of reused runs that ended (not failed): a checkpoint of theirs is one a worker lost between
    storing the result and removing it"""


def plan(configs: Iterable[RunConfig], store: Store, reuse: Reuse = Reuse(), halving: bool = False) -> Plan:
    """Split ``configs`` into those to train and those the store already answers, under ``reuse``; a run a
    halving search pruned answers only another halving search (``halving``)."""
    from sepbench.train.environment import code_version

    current = code_version()
    stored = store.stored(current)
    outcome = Plan(todo=[])
    for cfg in configs:
        found = stored.get(cfg.config_hash())
        if found is None or reuse.force:
            outcome.todo.append(cfg)
            continue
        status, version, error = found
        if status == "unreadable":
            outcome.unreadable[cfg.config_hash()] = error or "unreadable"
            outcome.todo.append(cfg)
            continue
        retrain = (status == "failed" and reuse.retry_failed) or (version != current and reuse.retrain_stale)
        if retrain or (status == "pruned" and not halving):
            outcome.todo.append(cfg)
            continue
        outcome.reused += 1
        outcome.stale_kept += version != current
        if status == "failed":
            outcome.failed_kept[cfg.config_hash()] = error or "no reason stored"
        else:
            outcome.ended.append(cfg.config_hash())
    return outcome


def pending(configs: Iterable[RunConfig], store: Store, reuse: Reuse = Reuse()) -> list[RunConfig]:
    """The configs to train: those the store lacks, plus the stored ones ``reuse`` asks to train again."""
    return plan(configs, store, reuse).todo


def unstored(configs: Iterable[RunConfig], store: Store) -> list[RunConfig]:
    """The configs the store holds no run of, whatever its status."""
    stored = store.config_hashes()
    return [cfg for cfg in configs if cfg.config_hash() not in stored]


def run_inline(configs: list[RunConfig], store: Store, on_result: OnResult, threads: int = 1) -> None:
    """One run after another in this process, on ``threads`` intra-op threads (no pool start-up; for one worker)."""
    with intra_op_threads(threads):
        keeping = Keeping.beside(store)
        for cfg in configs:
            result = execute(cfg, keeping)
            store.put(result)
            keeping.stored(result)
            on_result(result)


def run_local(configs: list[RunConfig], store: Store, on_result: OnResult, workers: int = 1,
              pool: WorkerPool | None = None) -> None:
    """A pool of ``workers`` warm single-threaded processes (spawn: no forked torch state); or ``pool``, if given."""
    if not configs:
        return
    if pool is not None:
        pool.run(configs, store, on_result)
        return
    with WorkerPool(min(workers, len(configs))) as own:
        own.run(configs, store, on_result)


def run_ray(configs: list[RunConfig], store: Store, on_result: OnResult, workers: int = 1,
            address: str | None = None) -> None:
    """Each run a Ray task (one CPU) on the cluster at ``address``, or on a local instance of ``workers`` CPUs."""
    if not configs:
        return
    ray, started_here = start_ray(address, workers)
    remaining: list = []
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_run_remote)
        keeping = ray_keeping(store, address)
        refs = {remote.remote(cfg.model_dump_json(), keeping): cfg for cfg in configs}
        remaining = list(refs)
        while remaining:
            finished, remaining = ray.wait(remaining, num_returns=1)
            for ref in finished:
                try:
                    result = RunResult.model_validate_json(ray.get(ref))
                except Exception as error:  # noqa: BLE001 - a lost worker fails only its run
                    result = lost_run(refs[ref], error, store)
                store.put(result)
                keeping.stored(result)
                on_result(result)
    except BaseException:
        # Only a cluster's tasks outlive this process. A local instance's shutdown stops its workers, and
        # cancelling there races Ray's completion of the interrupted tasks (a RAY_CHECK abort in ray 2.x).
        if not started_here:
            with sigint_ignored():
                for ref in remaining:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref, force=True)
        raise
    finally:
        if started_here:
            with sigint_ignored():
                ray.shutdown()


def executor_for(backend: Backend, workers: int = 1, group_size: int = 1, pool: WorkerPool | None = None,
                 threads: int = 1, address: str | None = None) -> Executor:
    """The way to run a sweep's runs: on ``backend``, stacked ``group_size`` runs of a cell at a time when > 1,
    otherwise one at a time inline (one local worker and no ``pool``), on a pool of warm workers, or on Ray."""
    if backend not in ("local", "ray"):
        raise ValueError(f"unknown backend '{backend}'; allowed: local, ray")
    if group_size > 1:
        from sepbench.sweep import grouped

        if backend == "ray":
            return grouped.in_groups(group_size, partial(grouped.run_groups_ray, workers=workers, address=address))
        if workers == 1:
            return grouped.in_groups(group_size, grouped.run_groups_inline)
        return grouped.in_groups(group_size, partial(grouped.run_groups_local, workers=workers))
    if backend == "ray":
        return partial(run_ray, workers=workers, address=address)
    if pool is None and workers == 1:
        return partial(run_inline, threads=threads)
    return partial(run_local, workers=workers, pool=pool)


@dataclass
class SweepOutcome:
    """What one ``run_sweep`` call did."""

    total: int
    skipped: int
    results: list[RunResult] = field(default_factory=list)
    seconds: float = 0.0
    unreadable: dict[str, str] = field(default_factory=dict)
    """config hash -> reason of stored rows this code could not read, trained again"""

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def diverged(self) -> list[RunResult]:
        return [r for r in self.results if r.status == "diverged"]


def run_sweep(configs: list[RunConfig], store: Store, workers: int = 1, backend: Backend = "local",
              address: str | None = None, on_result: OnResult | None = None, reuse: Reuse = Reuse(),
              group_size: int = 1, pool: WorkerPool | None = None, threads: int = 1) -> SweepOutcome:
    """Run every config the store lacks (and those ``reuse`` retrains); results are stored as they finish, so a
    stopped sweep resumes.

    With ``group_size`` > 1, runs of one cell (differing only in seed and lr) train stacked, up to that many
    in one worker (``sepbench.train.group``). ``pool``: warm workers to run on (local backend; its size wins over
    ``workers``). ``threads``: intra-op threads of a one-worker sweep (several workers always run one thread
    each). Ctrl-C stops the runs in flight and propagates as KeyboardInterrupt; the runs that finished before it
    stay stored.
    """
    planned = plan(configs, store, reuse)
    todo = planned.todo
    for key in planned.ended:
        checkpoint_file(store.checkpoints, key).unlink(missing_ok=True)
    outcome = SweepOutcome(total=len(configs), skipped=len(configs) - len(todo), unreadable=planned.unreadable)
    start = time.perf_counter()

    def collect(result: RunResult) -> None:
        outcome.results.append(result)
        if on_result is not None:
            on_result(result)

    executor_for(backend, workers, group_size, pool, threads, address)(todo, store, collect)
    outcome.seconds = time.perf_counter() - start
    return outcome
