"""Run a list of configs inline, on a pool of warm worker processes, or on Ray; every result lands in the one store.

Ctrl-C (KeyboardInterrupt) stops each path within a second or two and is raised again to the caller: pool
workers are terminated, Ray tasks cancelled, and every run finished before it stays stored.
"""
from __future__ import annotations

import contextlib
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Iterator, Literal

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.pool import OnResult, WorkerPool, sigint_ignored
from sepbench.train.keeping import Keeping
from sepbench.train.result import RunResult

Backend = Literal["local", "ray"]


def failed_result(config: RunConfig, error: BaseException, kind: str | None = None) -> RunResult:
    """A run that raised: recorded with its error so the sweep goes on and the grid shows the hole."""
    from sepbench.train.environment import code_version, package_version

    last = traceback.format_exception_only(type(error), error)[-1].strip()
    return RunResult(config=config, config_hash=config.config_hash(), status="failed",
                     error=f"{kind}: {error}" if kind else last, version=package_version(),
                     code_version=code_version(), created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def lost_run(config: RunConfig, error: BaseException, store: Store) -> RunResult:
    """The failed result of a run whose worker was lost; it says when the run's checkpoint is kept to resume from."""
    result = failed_result(config, error)
    if (store.checkpoints / f"{result.config_hash}.pt").exists():
        result.error = f"{result.error}; its checkpoint in {store.checkpoints} is kept: --retry-failed resumes it"
    return result


def execute(config: RunConfig, keeping: Keeping | None = None) -> RunResult:
    """Train one run, keeping its progress as ``keeping`` says; a run that cannot fit, or raises, becomes a
    'failed' result instead of ending the sweep."""
    from sepbench.train import train
    from sepbench.train.environment import resolve_device
    from sepbench.train.memory import MemoryRefused, check_memory, is_out_of_memory

    try:
        check_memory(config, resolve_device(config.device))
        return train(config, progress=False, keeping=keeping)
    except MemoryRefused as error:
        return failed_result(config, error, "out of memory (estimated before training)")
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


def plan(configs: Iterable[RunConfig], store: Store, reuse: Reuse = Reuse(), halving: bool = False) -> Plan:
    """Split ``configs`` into those to train and those the store already answers, under ``reuse``; a run a
    halving search pruned answers only another halving search (``halving``)."""
    from sepbench.train.environment import code_version

    stored, current = store.stored(), code_version()
    outcome = Plan(todo=[])
    for cfg in configs:
        found = stored.get(cfg.config_hash())
        if found is None or reuse.force:
            outcome.todo.append(cfg)
            continue
        status, version, error = found
        retrain = (status == "failed" and reuse.retry_failed) or (version != current and reuse.retrain_stale)
        if retrain or (status == "pruned" and not halving):
            outcome.todo.append(cfg)
            continue
        outcome.reused += 1
        outcome.stale_kept += version != current
        if status == "failed":
            outcome.failed_kept[cfg.config_hash()] = error or "no reason stored"
    return outcome


def pending(configs: Iterable[RunConfig], store: Store, reuse: Reuse = Reuse()) -> list[RunConfig]:
    """The configs to train: those the store lacks, plus the stored ones ``reuse`` asks to train again."""
    return plan(configs, store, reuse).todo


def run_inline(configs: list[RunConfig], store: Store, on_result: OnResult, threads: int = 1) -> None:
    """One run after another in this process, on ``threads`` intra-op threads (no pool start-up; for one worker)."""
    with intra_op_threads(threads):
        for cfg in configs:
            result = execute(cfg, Keeping.beside(store))
            store.put(result)
            on_result(result)


def run_local(configs: list[RunConfig], store: Store, workers: int, on_result: OnResult,
              pool: WorkerPool | None = None) -> None:
    """A pool of ``workers`` warm single-threaded processes (spawn: no forked torch state); or ``pool``, if given."""
    if not configs:
        return
    if pool is not None:
        pool.run(configs, store, on_result)
        return
    with WorkerPool(min(workers, len(configs))) as own:
        own.run(configs, store, on_result)


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


def run_ray(configs: list[RunConfig], store: Store, workers: int, on_result: OnResult,
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


@dataclass
class SweepOutcome:
    """What one ``run_sweep`` call did."""

    total: int
    skipped: int
    results: list[RunResult] = field(default_factory=list)
    seconds: float = 0.0

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
    todo = pending(configs, store, reuse)
    outcome = SweepOutcome(total=len(configs), skipped=len(configs) - len(todo))
    start = time.perf_counter()

    def collect(result: RunResult) -> None:
        outcome.results.append(result)
        if on_result is not None:
            on_result(result)

    if group_size > 1 and backend in ("local", "ray"):
        from sepbench.sweep import grouped

        groups = grouped.make_groups(todo, group_size)
        if backend == "ray":
            grouped.run_groups_ray(groups, store, workers, collect, address)
        elif workers == 1:
            grouped.run_groups_inline(groups, store, collect)
        else:
            grouped.run_groups_local(groups, store, workers, collect)
    elif backend == "ray":
        run_ray(todo, store, workers, collect, address)
    elif backend == "local" and pool is None and workers == 1:
        run_inline(todo, store, collect, threads)
    elif backend == "local":
        run_local(todo, store, workers, collect, pool)
    else:
        raise ValueError(f"unknown backend '{backend}'; allowed: local, ray")
    outcome.seconds = time.perf_counter() - start
    return outcome
