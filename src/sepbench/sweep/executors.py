"""Run a list of configs inline, on a pool of warm worker processes, or on Ray; every result lands in the one store.

Ctrl-C (KeyboardInterrupt) stops each path within a second or two and is raised again to the caller: pool
workers are terminated, Ray tasks cancelled, and every run finished before it stays stored.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import Connection, wait
from typing import Callable, Iterable, Iterator, Literal

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.train.result import RunResult

Backend = Literal["local", "ray"]
OnResult = Callable[[RunResult], None]


def failed_result(config: RunConfig, error: BaseException) -> RunResult:
    """A run that raised: recorded with its error so the sweep goes on and the grid shows the hole."""
    last = traceback.format_exception_only(type(error), error)[-1].strip()
    return RunResult(config=config, config_hash=config.config_hash(), status="failed", error=last,
                     created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def execute(config: RunConfig) -> RunResult:
    """Train one run; an exception becomes a 'failed' result instead of ending the sweep."""
    from sepbench.train import train

    try:
        return train(config, progress=False)
    except Exception as error:  # noqa: BLE001 - any crash of one run is that run's result
        return failed_result(config, error)


def warm_up(threads: int) -> None:
    """Set torch's intra-op threads and pay the one-off costs of a process's first run before it starts.

    Constructing the first ``torch.optim`` optimizer imports ``torch._dynamo`` (about as long as importing
    torch itself); a warm worker pays that once, while the parent is still setting the sweep up.
    """
    import torch

    import sepbench.train  # noqa: F401 - tasks, models and the training loop

    torch.set_num_threads(threads)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


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


def _exit_with_parent(parent: int, poll_seconds: float = 1.0) -> None:
    """Watch from a daemon thread and end this worker once ``parent`` is gone (a killed sweep leaves no orphans)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _worker_main(conn: Connection, parent: int) -> None:
    """A pool worker: warm up once, then train each (config, store) it is sent, store it, and send it back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent(parent)
    warm_up(threads=1)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            job = None
        if job is None:
            break
        config_json, store_path = job
        result = execute(RunConfig.model_validate_json(config_json))
        Store(store_path).put(result)
        conn.send(result.model_dump_json())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # every result is committed; tearing down torch's modules would only delay the sweep's end


class WorkerDied(RuntimeError):
    """A pool worker ended (killed, out of memory, crashed) while training a run."""


@dataclass(eq=False)
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    job: RunConfig | None = None


class WorkerPool:
    """``size`` spawned single-threaded worker processes, started at once; each imports torch and sepbench once
    and then takes runs one at a time until the queue is empty. A worker that dies fails only its run and is
    replaced. Leaving the ``with`` block on an exception (Ctrl-C included) terminates every worker."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {size}")
        self.size = size
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        with sigint_ignored():
            for _ in range(size):
                self._workers.append(self._start())

    def _start(self) -> _Worker:
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(target=_worker_main, args=(child_end, os.getpid()), name="sepbench-worker",
                                        daemon=True)
        process.start()
        child_end.close()
        return _Worker(process, parent_end)

    def run(self, configs: Iterable[RunConfig], store: Store, on_result: OnResult) -> None:
        """Train ``configs``, handing the next one to whichever worker finishes first."""
        queue = deque(configs)
        path = str(store.path.resolve())

        def feed(worker: _Worker) -> None:
            worker.job = queue.popleft() if queue else None
            if worker.job is not None:
                with contextlib.suppress(OSError):  # a dead worker shows as end-of-file below
                    worker.conn.send((worker.job.model_dump_json(), path))

        for worker in self._workers:
            feed(worker)
        while busy := {w.conn: w for w in self._workers if w.job is not None}:
            for conn in wait(list(busy)):
                worker = busy[conn]
                try:
                    result = RunResult.model_validate_json(conn.recv())
                except (EOFError, OSError):
                    result = self._replace(worker, store)
                    worker = self._workers[-1]
                on_result(result)
                feed(worker)

    def _replace(self, dead: _Worker, store: Store) -> RunResult:
        """Record the dead worker's run (as stored, if it got that far; else failed) and start a new worker."""
        dead.process.join(timeout=5)
        config = dead.job
        assert config is not None
        self._workers.remove(dead)
        dead.conn.close()
        with sigint_ignored():
            self._workers.append(self._start())
        stored = store.get(config.config_hash())
        if stored is not None:
            return stored
        result = failed_result(config, WorkerDied(f"worker process ended with exit code {dead.process.exitcode} "
                                                  "while training (killed, out of memory or crashed)"))
        store.put(result)
        return result

    def close(self) -> None:
        """Let every worker finish its loop and exit."""
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.conn.send(None)
        for worker in self._workers:
            worker.process.join(timeout=10)
        self.terminate()

    def terminate(self) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL for any that lingers). A worker killed inside
        ``Store.put`` leaves no partial row: each put is one SQLite transaction."""
        with sigint_ignored():
            for worker in self._workers:
                if worker.process.is_alive():
                    worker.process.terminate()
            for worker in self._workers:
                worker.process.join(timeout=2)
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join(timeout=2)
                worker.conn.close()
        self._workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()
        else:
            self.terminate()


def _run_remote(config_json: str) -> str:
    """Ray task: train wherever Ray placed it and send the result back for the driver to store."""
    import torch

    torch.set_num_threads(1)
    return execute(RunConfig.model_validate_json(config_json)).model_dump_json()


def pending(configs: Iterable[RunConfig], store: Store) -> list[RunConfig]:
    """The configs whose hash the store does not hold yet."""
    done = store.config_hashes()
    return [cfg for cfg in configs if cfg.config_hash() not in done]


def run_inline(configs: list[RunConfig], store: Store, on_result: OnResult, threads: int = 1) -> None:
    """One run after another in this process, on ``threads`` intra-op threads (no pool start-up; for one worker)."""
    with intra_op_threads(threads):
        for cfg in configs:
            result = execute(cfg)
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


def run_ray(configs: list[RunConfig], store: Store, workers: int, on_result: OnResult,
            address: str | None = None) -> None:
    """Each run a Ray task (one CPU) on the cluster at ``address``, or on a local instance of ``workers`` CPUs."""
    if not configs:
        return
    try:
        import ray
    except ImportError:
        raise RuntimeError("--backend ray needs the 'ray' package: pip install -r requirements-dev.txt") from None
    started_here = not ray.is_initialized()
    if started_here:
        options = {"address": address} if address else {"num_cpus": workers}
        with sigint_ignored():
            ray.init(include_dashboard=False, log_to_driver=False, **options)
    remaining: list = []
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_run_remote)
        refs = {remote.remote(cfg.model_dump_json()): cfg for cfg in configs}
        remaining = list(refs)
        while remaining:
            finished, remaining = ray.wait(remaining, num_returns=1)
            for ref in finished:
                try:
                    result = RunResult.model_validate_json(ray.get(ref))
                except Exception as error:  # noqa: BLE001 - a lost worker fails only its run
                    result = failed_result(refs[ref], error)
                store.put(result)
                on_result(result)
    except BaseException:
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
        return [r for r in self.results if r.status in ("failed", "diverged")]


def run_sweep(configs: list[RunConfig], store: Store, workers: int = 1, backend: Backend = "local",
              address: str | None = None, on_result: OnResult | None = None, pool: WorkerPool | None = None,
              threads: int = 1) -> SweepOutcome:
    """Run every config the store lacks; results are stored as they finish, so a stopped sweep resumes.

    ``pool``: warm workers to run on (local backend; its size wins over ``workers``). ``threads``: intra-op
    threads of a one-worker sweep (several workers always run one thread each). Ctrl-C stops the runs in
    flight and propagates as KeyboardInterrupt; the runs that finished before it stay stored.
    """
    todo = pending(configs, store)
    outcome = SweepOutcome(total=len(configs), skipped=len(configs) - len(todo))
    start = time.perf_counter()

    def collect(result: RunResult) -> None:
        outcome.results.append(result)
        if on_result is not None:
            on_result(result)

    if backend == "ray":
        run_ray(todo, store, workers, collect, address)
    elif backend == "local" and pool is None and workers == 1:
        run_inline(todo, store, collect, threads)
    elif backend == "local":
        run_local(todo, store, workers, collect, pool)
    else:
        raise ValueError(f"unknown backend '{backend}'; allowed: local, ray")
    outcome.seconds = time.perf_counter() - start
    return outcome
