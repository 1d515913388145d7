"""A pool of warm worker processes: each imports torch once, then trains runs one at a time until told to stop."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.queues import SimpleQueue
from typing import TYPE_CHECKING, Callable, ContextManager, Iterable, Iterator, Sequence, TypeVar

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep.runner import OnResult, RowsBefore, execute, lost_run, sigint_ignored
from sepbench.train.keeping import Keeping
from sepbench.train.result import RunResult

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

J = TypeVar("J")
T = TypeVar("T")


def warm_up(threads: int) -> None:
    """Set torch's intra-op threads and pay the one-off costs of a process's first run before it starts.

    Constructing the first ``torch.optim`` optimizer imports ``torch._dynamo`` (about as long as importing
    torch itself); a warm worker pays that once, while the parent is still setting the sweep up.
    """
    import torch

    import sepbench.train.loop  # noqa: F401 - tasks, models and the training loop

    torch.set_num_threads(threads)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def _exit_with_parent(parent: int, poll_seconds: float = 1.0) -> None:
    """Watch from a daemon thread and end this worker once ``parent`` is gone (a killed sweep leaves no orphans)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


_started: SimpleQueue | None = None
"""In an executor's worker: where it says which job it begins (``run_in_processes``)."""


def executor_initializer(parent: int, started: SimpleQueue | None = None) -> None:
    """Initializer for a ProcessPoolExecutor's workers (grouped and halving sweeps): one intra-op thread, SIGINT
    left to the parent, SIGTERM checkpointing the runs in training, and an exit when ``parent`` is gone."""
    import torch

    from sepbench.train.stopping import stop_runs_on

    global _started
    _started = started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop_runs_on(signal.SIGTERM)
    torch.set_num_threads(1)
    _exit_with_parent(parent)


def _begun(job: int, function: Callable[..., T], *args: object) -> T:
    """Say that ``job`` begins (a synchronous write: it is in the pipe before the worker can die), then run it; a
    worker told to stop (its pool broke) begins no new job."""
    from sepbench.train.stopping import RunInterrupted, stop_requested

    if stop_requested():
        raise RunInterrupted(f"job {job} not begun: the worker was stopped")
    if _started is not None:
        _started.put(job)
    return function(*args)


@contextlib.contextmanager
def stopped_on_interrupt(executor: ProcessPoolExecutor) -> Iterator[ProcessPoolExecutor]:
    """Leaving the block on an exception (Ctrl-C included): cancel the work not started and send SIGTERM to the
    executor's workers, so each run in training saves its checkpoint and stops instead of training to its end; then
    wait for them (a second Ctrl-C stops waiting), so what the command says it checkpointed is on disk."""
    try:
        yield executor
    except BaseException:
        workers = list((executor._processes or {}).values())  # no public handle on them; shutdown drops this one
        executor.shutdown(wait=False, cancel_futures=True)
        with sigint_ignored():
            for process in workers:
                with contextlib.suppress(OSError):
                    process.terminate()
        for process in workers:
            process.join(timeout=STOP_SECONDS)
        raise


STOP_SECONDS = 300.0
"""How long a stopped sweep waits for a worker to save its run's checkpoint and end."""


def await_the_rest(executor: ProcessPoolExecutor, error: BaseException) -> None:
    """When ``error`` is a worker's death breaking ``executor``, wait until its other workers have ended: it fails
    every run first and only then sends them SIGTERM, on which each saves its checkpoint again, so the curve of a
    run it lost (``lost_run``) must be read after that last save."""
    if isinstance(error, BrokenProcessPool):
        executor.shutdown(wait=True)


def run_in_processes(jobs: Sequence[J], workers: int, submit: Callable[[J], tuple[Callable[..., T], tuple]],
                     done: Callable[[J, T], None], lost: Callable[[J, BaseException], None]) -> None:
    """Run each job (``submit`` gives the function and arguments) in a pool of ``workers`` spawned processes,
    calling ``done`` with its value or ``lost`` with its error as each ends. A worker that dies breaks the pool and
    fails every job in it: those that had begun are ``lost``; those not begun run in a new pool, while a pool
    began any."""
    todo = list(range(len(jobs)))
    while todo:
        again: dict[int, BaseException] = {}
        context = multiprocessing.get_context("spawn")
        started = context.SimpleQueue()
        begun: set[int] = set()
        with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=context,
                                 initializer=executor_initializer, initargs=(os.getpid(), started)) as pool, \
                stopped_on_interrupt(pool):
            futures = {pool.submit(_begun, i, *_flat(submit(jobs[i]))): i for i in todo}
            remaining = set(futures)
            while remaining:
                finished, remaining = wait_futures(remaining, return_when=FIRST_COMPLETED)
                _drain(started, begun)  # each wait: a pipe left full would block the next job's start
                for future in finished:
                    i = futures[future]
                    try:
                        value = future.result()
                    except Exception as error:  # noqa: BLE001 - a job that raised, or lost to a broken pool
                        await_the_rest(pool, error)
                        _drain(started, begun)
                        if isinstance(error, BrokenProcessPool) and i not in begun:
                            again[i] = error
                        else:
                            lost(jobs[i], error)
                        continue
                    done(jobs[i], value)
        if not begun:  # a new pool would break alike
            for i, error in again.items():
                lost(jobs[i], error)
            again = {}
        todo = sorted(again)


def _drain(started: SimpleQueue, begun: set[int]) -> None:
    while not started.empty():
        begun.add(started.get())


def _flat(call: tuple[Callable[..., T], tuple]) -> tuple:
    function, args = call
    return (function, *args)


def _worker_main(conn: Connection, parent: int) -> None:
    """A pool worker: warm up once, then train each (config, store) it is sent, store it, and send it back."""
    from sepbench.train.stopping import stop_runs_on

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop_runs_on(signal.SIGTERM)  # terminate(): the run in training saves its checkpoint first
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
        store, config = Store(store_path), RunConfig.model_validate_json(config_json)
        keeping = Keeping.beside(store)
        try:
            result = execute(config, keeping)
        except KeyboardInterrupt:
            break
        store.put(result)
        keeping.stored(result)
        conn.send(result.model_dump_json())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # every result is committed; tearing down torch's modules would only delay the sweep's end


class WorkerDied(RuntimeError):
    """A pool worker ended (killed, out of memory, crashed) while training a run."""


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection
    job: RunConfig | None = None
    before: RowsBefore | None = None
    """the job's stored row when it was sent (``--force`` and the like train stored runs again)"""


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

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids."""
        return [w.process.pid for w in self._workers if w.process.pid is not None]

    @property
    def running(self) -> dict[int, RunConfig]:
        """Process id -> the run it is training, for every busy worker."""
        return {w.process.pid: w.job for w in self._workers if w.job is not None and w.process.pid is not None}

    def run(self, configs: Iterable[RunConfig], store: Store, on_result: OnResult) -> None:
        """Train ``configs``, handing the next one to whichever worker finishes first."""
        if not self._workers:
            raise RuntimeError("this worker pool is closed")
        queue = deque(configs)
        path = str(store.path.resolve())

        def feed(worker: _Worker) -> None:
            if queue:
                worker.job = queue.popleft()
                worker.before = RowsBefore([worker.job], store)
                with contextlib.suppress(OSError):  # a worker that died shows as end-of-file below
                    worker.conn.send((worker.job.model_dump_json(), path))

        for worker in self._workers:
            feed(worker)
        while busy := {w.conn: w for w in self._workers if w.job is not None}:
            for conn in wait(list(busy)):
                worker = busy[conn]
                config, before, worker.job = worker.job, worker.before, None
                try:
                    result = RunResult.model_validate_json(conn.recv())
                except (EOFError, OSError):
                    code, worker = self._replace(worker)
                    assert config is not None and before is not None
                    result = before.stored_since(config, store) or self._died(config, code, store)
                on_result(result)
                feed(worker)

    def _replace(self, dead: _Worker) -> tuple[int | None, _Worker]:
        """Start a worker in place of ``dead``; returns the dead one's exit code and the new worker."""
        dead.process.join(timeout=5)
        dead.conn.close()
        with sigint_ignored():
            fresh = self._start()
        self._workers[self._workers.index(dead)] = fresh
        return dead.process.exitcode, fresh

    @staticmethod
    def _died(config: RunConfig, code: int | None, store: Store) -> RunResult:
        """The run of a worker that ended before sending it back, stored as failed."""
        result = lost_run(config, WorkerDied(f"the worker process ended with exit code {code} before finishing this "
                                             "run (killed, out of memory or crashed)"), store)
        store.put(result)
        return result

    def close(self) -> None:
        """Stop the workers once every run is back: they are idle (or still warming up), so nothing is lost."""
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.conn.send(None)
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


def warm_pool(workers: int) -> ContextManager[WorkerPool | None]:
    """With several workers, a pool started at once (they import torch while the caller reads its spec); with
    one, nothing: the runs train in the caller's process."""
    return nullcontext() if workers == 1 else WorkerPool(workers)
