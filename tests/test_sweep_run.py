import contextlib
import itertools
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from sepbench import RunConfig, Store
from sepbench.sweep import SweepSpec, failed_result, run_sweep
from sepbench.train import RunResult
from sepbench.wording import counted

SPEC = Path(__file__).parent / "data" / "sweep_quick.yaml"
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}
SWEEP = [sys.executable, "-m", "sepbench", "sweep", str(SPEC), "--workers", "2"]


def _put_many(path: str, writer: int, count: int) -> None:
    store = Store(path)
    for i in range(count):
        cfg = RunConfig.build({"seed": writer * 1000 + i, "device": "cpu"})
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", metrics={"accuracy": 0.5}))


def test_several_processes_writing_one_store_lose_nothing(tmp_path):
    path = str(tmp_path / "s.db")
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_put_many, args=(path, w, 30)) for w in range(3)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(timeout=120)
    assert [p.exitcode for p in writers] == [0] * 3
    assert len(Store(path)) == 90
    assert sorted(r.config.seed for r in Store(path).results()) == sorted(w * 1000 + i for w in range(3) for i in range(30))


def test_a_crashing_run_is_recorded_with_its_error_and_the_sweep_goes_on(tmp_path):
    store = Store(tmp_path / "s.db")
    base = {"task": {"length": 12}, "model": {"width": 8}, "train": {"steps": 4, "eval_samples": 20}, "device": "cpu"}
    good = RunConfig.build(base)
    crashing = RunConfig.build({**base, "task": {"length": 12, "eval_lengths": [40]}})
    outcome = run_sweep([crashing, good], store, workers=1)
    assert len(outcome.results) == 2 and outcome.skipped == 0
    failed = store.get(crashing.config_hash())
    assert failed.status == "failed" and "cannot evaluate at 40" in failed.error
    assert store.get(good.config_hash()).status in ("completed", "solved")
    assert store.query(status="failed").config_hash.tolist() == [crashing.config_hash()]
    assert run_sweep([crashing, good], store).skipped == 2


def test_a_rerun_removes_the_checkpoint_a_lost_worker_left_beside_its_stored_result(tmp_path):
    """A worker that died after storing its run but before removing its checkpoint left the file behind; a failed
    run's checkpoint stays for --retry-failed to resume."""
    from sepbench.train.keeping import checkpoint_file

    store = Store(tmp_path / "s.db")
    base = {"task": {"length": 12}, "model": {"width": 8}, "train": {"steps": 4, "eval_samples": 20}, "device": "cpu"}
    ended, failed = RunConfig.build(base), RunConfig.build({**base, "seed": 1})
    store.put(RunResult(config=ended, config_hash=ended.config_hash(), status="completed", metrics={"accuracy": 0.5}))
    store.put(failed_result(failed, RuntimeError("worker lost")))
    store.checkpoints.mkdir()
    for cfg in (ended, failed):
        checkpoint_file(store.checkpoints, cfg.config_hash()).write_bytes(b"x")
    assert run_sweep([ended, failed], store).skipped == 2
    assert not checkpoint_file(store.checkpoints, ended.config_hash()).exists()
    assert checkpoint_file(store.checkpoints, failed.config_hash()).exists()


def test_sigkilled_sweep_resumes_with_every_run_stored_once(tmp_path):
    path = tmp_path / "runs.db"
    expected = {cfg.config_hash() for cfg in SweepSpec.from_yaml(SPEC).expand()}
    assert len(expected) == 12
    sweep = subprocess.Popen(SWEEP + ["--store", str(path)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(Store(path)) < 3 and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait(timeout=30)
    before = len(Store(path))
    assert sweep.returncode == -signal.SIGKILL and 3 <= before < 12
    resumed = subprocess.run(SWEEP + ["--store", str(path)], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"12 runs, {before} already in" in resumed.stdout and f"{12 - before} to train" in resumed.stdout
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT config_hash, COUNT(*) FROM runs GROUP BY config_hash").fetchall()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert {h for h, _ in rows} == expected and all(n == 1 for _, n in rows)
    assert resumed.stderr.count("[") >= 12 - before and "ETA" in resumed.stderr
    again = subprocess.run(SWEEP + ["--store", str(path)], capture_output=True, text=True, timeout=120)
    assert "12 already in" in again.stdout and "0 to train" in again.stdout and len(Store(path)) == 12


def _process_table() -> dict[int, tuple[str, int]]:
    """pid -> (state, parent pid) of every process, from /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        table[int(stat.parent.name)] = (state, int(parent))
    return table


def _children(pid: int) -> set[int]:
    return {child for child, (_, parent) in _process_table().items() if parent == pid}


def _running(pids: set[int]) -> set[int]:
    table = _process_table()
    return {pid for pid in pids if pid in table and table[pid][0] != "Z"}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_workers_exit_when_the_sweep_process_is_killed_alone(tmp_path):
    spec = tmp_path / "long.yaml"
    spec.write_text("name: long\nbase: {task: {name: index_lookup, length: 12}, model: {width: 8, layers: 1},"
                    " train: {steps: 1000000, eval_every: 1000000, eval_samples: 20}, device: cpu}\n"
                    "seeds: [0, 1]\n")
    sweep = subprocess.Popen([sys.executable, "-m", "sepbench", "sweep", str(spec), "--workers", "2",
                              "--store", str(tmp_path / "runs.db")], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(_children(sweep.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(5)  # both workers import torch and start training
        workers = _children(sweep.pid)
        assert len(workers) >= 2
        sweep.kill()  # the sweep process only, not its process group
        sweep.wait(timeout=30)
        deadline = time.monotonic() + 30
        while (alive := _running(workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive, f"workers {sorted(alive)} outlived the killed sweep"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)  # whatever is left of the sweep's process group


def test_the_same_spec_runs_on_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray")
    path = tmp_path / "ray.db"
    done = subprocess.run(SWEEP + ["--backend", "ray", "--store", str(path)], env=ENV, capture_output=True, text=True,
                          timeout=900)  # 250 s once beside a second Ray test on a shared core
    assert done.returncode == 0, done.stderr[-2000:]
    assert "12 to train (ray, 2 workers)" in done.stdout and "12 trained" in done.stdout
    results = Store(path).results()
    assert {r.config_hash for r in results} == {c.config_hash() for c in SweepSpec.from_yaml(SPEC).expand()}
    assert all(r.status in ("completed", "solved") and r.steps == 60 for r in results)


def _descendants(pid: int) -> dict[int, bytes]:
    """pid -> command line of every process below ``pid``, multiprocessing's resource tracker left out (it
    belongs to the interpreter and ends by itself once its parent is gone)."""
    table, found, frontier = _process_table(), {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child in (c for c, (_, p) in table.items() if p == parent):
            with contextlib.suppress(OSError):
                command = Path(f"/proc/{child}/cmdline").read_bytes()
                if b"resource_tracker" not in command:
                    found[child] = command
            frontier.append(child)
    return found


def _stored(path: Path) -> dict[str, str]:
    """config_hash -> stored result JSON, after checking the file and every row are whole."""
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT config_hash, status, steps, result FROM runs").fetchall()
    for config_hash, status, steps, text in rows:
        result = RunResult.model_validate_json(text)
        assert (result.config_hash, result.status, result.steps) == (config_hash, status, steps)
    return {config_hash: text for config_hash, _, _, text in rows}


@dataclass
class Interrupted:
    seconds: float
    code: int
    stderr: str
    workers: dict[int, bytes]
    survivors: set[int]


def _interrupt_when_stored(command: list[str], path: Path, tmp_path: Path, signal_group: bool,
                           mid_run: bool = False) -> Interrupted:
    """Start ``command``; once a run is stored (and, with ``mid_run``, another has reported steps from the
    first half of its training, so that it is still training when the signal lands: a run that started beside
    the stored one may be about to finish too), Ctrl-C it and see how it ends."""
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        sweep = subprocess.Popen(command, env=ENV, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        def ready() -> bool:
            if not (path.exists() and len(Store(path))):
                return False
            return not mid_run or any(0 < r.result.steps <= r.result.config.train.steps // 2
                                      for r in Store(path).running())

        while sweep.poll() is None and time.monotonic() < deadline and not ready():
            time.sleep(0.1)
        assert sweep.poll() is None, "the sweep ended before it could be interrupted"
        workers = _descendants(sweep.pid)
        start = time.monotonic()
        if signal_group:
            os.killpg(sweep.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
        else:
            os.kill(sweep.pid, signal.SIGINT)
        code = sweep.wait(timeout=60)
        seconds = time.monotonic() - start
        return Interrupted(seconds, code, log.read_text(), workers, _running(set(workers)))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)


LONG_RUNS = ("name: long\nbase: {task: {name: index_lookup, length: 12}, model: {width: 8, layers: 1}, train: "
             "{steps: 1000, eval_every: 50, eval_samples: 20, batch_size: 16, early_stop: false}, device: cpu}\n"
             "seeds: [0, 1, 2, 3]\n")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("options, signal_group, resume, limit", [
    (["--workers", "2"], False, True, 6),  # 1 s or so, 3x that beside a loaded test run; a run left to finish takes more
    (["--workers", "2"], True, False, 6),
    (["--workers", "1"], True, False, 6),
    (["--workers", "2", "--backend", "ray"], True, False, 20),  # shutting a local Ray instance down: 1-3 s, more under load
], ids=["2 workers, SIGINT to the sweep", "2 workers, Ctrl-C", "1 worker, Ctrl-C", "ray, Ctrl-C"])
def test_ctrl_c_stops_the_sweep_keeps_finished_runs_and_resumes(tmp_path, options, signal_group, resume, limit):
    if "ray" in options:
        pytest.importorskip("ray")
    spec, path = tmp_path / "long.yaml", tmp_path / "runs.db"
    spec.write_text(LONG_RUNS)
    command = [sys.executable, "-m", "sepbench", "sweep", str(spec), "--store", str(path), *options]
    stop = _interrupt_when_stored(command, path, tmp_path, signal_group, mid_run="ray" not in options)
    assert stop.code == 130, stop.stderr[-2000:]
    assert stop.seconds < limit, f"took {stop.seconds:.1f} s to stop"
    if options == ["--workers", "2"]:
        assert sum(b"spawn_main" in command for command in stop.workers.values()) == 2
    assert not stop.survivors, f"{[stop.workers[p][:80] for p in stop.survivors]} outlived the interrupted sweep"
    assert "Traceback" not in stop.stderr, stop.stderr[-2000:]
    stored = _stored(path)
    assert 1 <= len(stored) < 4
    assert (f"interrupted: {len(stored)} of 4 runs finished and stored in {path}; rerun the same command to resume"
            in " ".join(stop.stderr.split()))
    if "ray" not in options:  # the runs in training save a checkpoint before they stop
        assert f"in flight in {path}.checkpoints (at step" in " ".join(stop.stderr.split())
    if resume:
        again = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-2000:]
        assert f"4 runs, {len(stored)} already in" in again.stdout and f"{4 - len(stored)} trained" in again.stdout
        after = _stored(path)
        assert len(after) == 4 and all(after[h] == text for h, text in stored.items())
        assert any(Store(path).get(h).resumed_from for h in set(after) - set(stored))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_ctrl_c_stops_minwidth_and_its_warm_workers(tmp_path):
    path = tmp_path / "runs.db"
    command = [sys.executable, "-m", "sepbench", "minwidth", "--task", "index_lookup", "--model", "transformer",
               "--lengths", "12,16", "--widths", "8,16,32", "--steps", "400", "--workers", "2", "--store", str(path),
               "--set", "train.eval_samples=20", "--set", "train.eval_every=20", "--set", "train.batch_size=16",
               "--set", "device=cpu"]
    stop = _interrupt_when_stored(command, path, tmp_path, signal_group=True, mid_run=True)
    assert stop.code == 130 and stop.seconds < 6 and not stop.survivors, (stop, stop.stderr[-2000:])
    assert "Traceback" not in stop.stderr
    stored = _stored(path)
    assert f"interrupted: {counted(len(stored), 'run')} finished and stored in {path}" in " ".join(stop.stderr.split())
    assert f"in flight in {path}.checkpoints (at step" in " ".join(stop.stderr.split())


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_ctrl_c_stops_the_demo_keeps_finished_runs_and_says_so(tmp_path):
    spec, path, report = tmp_path / "long.yaml", tmp_path / "runs.db", tmp_path / "report"
    spec.write_text(LONG_RUNS)
    script = ("import sys; from pathlib import Path; from sepbench import demo; "
              f"sys.exit(demo.run(Path({str(spec)!r}), Path({str(path)!r}), Path({str(report)!r}), workers=2))")
    stop = _interrupt_when_stored([sys.executable, "-c", script], path, tmp_path, signal_group=True, mid_run=True)
    assert stop.code == 130 and stop.seconds < 6 and not stop.survivors, (stop, stop.stderr[-2000:])
    assert "Traceback" not in stop.stderr, stop.stderr[-2000:]
    stored = _stored(path)
    said = " ".join(stop.stderr.split())
    assert f"interrupted: {len(stored)} of 4 runs finished and stored in {path}; rerun the same command to resume" \
        in said
    assert f"in flight in {path}.checkpoints (at step" in said
    assert not report.exists()


def _put_forever(path: str) -> None:
    store = Store(path)
    curve = [{"step": s, "loss": 1.0, "accuracy": 0.5, "seconds": 0.1} for s in range(2000)]
    for seed in itertools.count():
        cfg = RunConfig.build({"seed": seed, "device": "cpu"})
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", curve=curve, steps=seed))


def test_a_writer_killed_inside_put_leaves_no_partial_row(tmp_path):
    path = tmp_path / "s.db"
    context = multiprocessing.get_context("spawn")
    for attempt in range(3):
        writer = context.Process(target=_put_forever, args=(str(path),))
        writer.start()
        try:
            deadline = time.monotonic() + 60
            while len(Store(path)) <= attempt * 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.05 * attempt)
        finally:  # a writer left behind by a failure would put forever and slow every later test
            writer.kill()  # SIGKILL lands at some point of a put: before, inside or after its transaction
            writer.join()
        _stored(path)
    assert len(Store(path)) > 0


@pytest.mark.parametrize("retrained", [False, True], ids=["new run", "stored run trained again"])
def test_a_pool_worker_that_dies_fails_only_its_run_and_is_replaced(tmp_path, retrained):
    """Also where the run had a row already (``--retry-failed``, ``--force``): the dead worker's run is failed
    anew, not reported as the older row."""
    from sepbench.sweep.pool import WorkerPool

    store = Store(tmp_path / "runs.db")
    base = {"task": {"length": 12}, "model": {"width": 8}, "train": {"eval_samples": 20, "batch_size": 16}, "device": "cpu"}
    short, long, after = (RunConfig.build({**base, "seed": seed, "train": {**base["train"], "steps": steps}})
                          for seed, steps in ((0, 20), (1, 100_000), (2, 20)))
    if retrained:
        store.put(failed_result(long, RuntimeError("an earlier crash")))
    killed, results = [], []

    def on_result(result: RunResult) -> None:
        if not killed:
            (pid,) = [pid for pid, cfg in pool.running.items() if cfg.config_hash() == long.config_hash()]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        results.append(result)

    with WorkerPool(2) as pool:
        pool.run([short, long, after], store, on_result)
        assert not pool.running and len(pool.pids) == 2 and killed[0] not in pool.pids
    status = {r.config_hash: (r.status, r.error) for r in results}
    assert status[short.config_hash()][0] == status[after.config_hash()][0] == "completed"
    assert status[long.config_hash()][0] == "failed" and "exit code -9" in status[long.config_hash()][1]
    assert {r.config_hash: r.status for r in store.results()} == {h: s for h, (s, _) in status.items()}


def test_a_pool_worker_killed_after_a_checkpoint_stores_the_curve_that_checkpoint_holds(tmp_path):
    import threading

    import torch

    from sepbench.sweep.pool import WorkerPool

    store = Store(tmp_path / "runs.db")
    cfg = RunConfig.build({"task": {"length": 12}, "model": {"width": 8}, "device": "cpu", "seed": 0,
                           "train": {"eval_samples": 20, "batch_size": 16, "steps": 100_000, "eval_every": 5,
                                     "checkpoint_every": 0.02}})
    path = store.checkpoints / f"{cfg.config_hash()}.pt"
    saved = []

    def kill_once_the_checkpoint_holds_evaluations(pool: WorkerPool) -> None:
        deadline = time.monotonic() + 120
        try:
            while not saved and time.monotonic() < deadline:
                time.sleep(0.05)
                (pid,) = pool.running or (None,)
                if pid is None or not path.exists():
                    continue
                os.kill(pid, signal.SIGSTOP)  # no save after the one read here
                saved.extend(RunResult.model_validate_json(torch.load(path, weights_only=True)["state"]["result"]).curve)
                if not saved:
                    os.kill(pid, signal.SIGCONT)
        finally:  # found, failed or timed out: the worker ends, so pool.run returns
            _signalled(list(pool.running), signal.SIGKILL)

    results = []
    with WorkerPool(1) as pool:
        killer = threading.Thread(target=kill_once_the_checkpoint_holds_evaluations, args=(pool,))
        killer.start()
        pool.run([cfg], store, results.append)
        killer.join()
    (result,) = results
    assert result.status == "failed" and "exit code -9" in result.error and "--retry-failed resumes it" in result.error
    assert saved and result.curve == saved == store.get(cfg.config_hash()).curve
    assert path.exists()


def _signalled(pids: list[int], signum: int) -> list[int]:
    """``pids`` after sending each ``signum``, a process already gone skipped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return pids


def _long_halving_sweep(checkpoint_every: float, lr_search: str = "halving") -> list[RunConfig]:
    """Two cells of two rates each, on LSTMs whose budget outlasts any test: a worker trains until it is killed."""
    base = {"task": {"name": "index_lookup", "length": 12, "options": {"alphabet_size": 8}},
            "model": {"name": "lstm", "width": 16}, "device": "cpu",
            "train": {"steps": 100_000, "eval_every": 5, "eval_samples": 100, "batch_size": 32, "warmup_steps": 5,
                      "checkpoint_every": checkpoint_every}}
    return SweepSpec.build({"name": "halving", "base": base, "lr_grid": [1e-2, 1e-3], "seeds": [0],
                            "lr_search": lr_search, "grid": {"model.width": [8, 16]}}).expand()


def _short_cell(configs: list[RunConfig]) -> list[RunConfig]:
    """A cell of 20-step runs (width 4) beside the first two of ``configs``: it ends long before they would."""
    return [cfg.model_copy(update={"model": cfg.model.model_copy(update={"width": 4}),
                                   "train": cfg.train.model_copy(update={"steps": 20})}) for cfg in configs[:2]]


def _with_one_worker_killed(store: Store, sweep: Callable[[], object]) -> list[int]:
    """Run ``sweep`` while a thread kills one of its pool workers; the pids killed."""
    import threading

    killed: list[int] = []
    killer = threading.Thread(target=_kill_one_worker_once_two_have_evaluated, args=(store, killed))
    killer.start()
    sweep()
    killer.join()
    return killed


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the pool's workers in /proc")
def test_runs_a_dead_halving_worker_left_are_stored_failed_with_their_checkpoints_curves(tmp_path):
    """Slow for its two spawned workers' start-up (importing torch), not for training."""
    import threading

    import torch

    from sepbench.sweep.halving import run_halving
    from sepbench.train import EvalPoint

    configs = _long_halving_sweep(checkpoint_every=0.02)
    store = Store(tmp_path / "runs.db")
    saved: dict[str, list[EvalPoint]] = {}

    def workers() -> list[int]:
        return [pid for pid, command in _descendants(os.getpid()).items() if b"spawn_main" in command]

    def curve_in(path: Path) -> list[EvalPoint]:
        if not path.exists():
            return []
        return RunResult.model_validate_json(torch.load(path, weights_only=True)["state"]["result"]).curve

    def kill_the_workers_once_a_checkpoint_holds_evaluations() -> None:
        stopped: list[int] = []
        deadline = time.monotonic() + 180
        try:
            while not saved and time.monotonic() < deadline:
                time.sleep(0.05)
                stopped = _signalled(workers(), signal.SIGSTOP)  # no save after the ones read here
                curves = {c.config_hash(): curve_in(store.checkpoints / f"{c.config_hash()}.pt") for c in configs}
                if any(curves.values()):
                    saved.update(curves)
                else:
                    _signalled(stopped, signal.SIGCONT)
                    stopped = []
        finally:  # found, failed or timed out: the workers end, so run_halving returns
            _signalled(stopped or workers(), signal.SIGKILL)

    killer = threading.Thread(target=kill_the_workers_once_a_checkpoint_holds_evaluations)
    killer.start()
    run_halving(configs, store, workers=2, finalists=1)
    killer.join()
    assert any(saved.values())
    for cfg in configs:
        result = store.get(cfg.config_hash())
        assert result.status == "failed" and result.curve == saved[cfg.config_hash()]
        assert ("--retry-failed resumes it" in result.error) == (store.checkpoints / f"{cfg.config_hash()}.pt").exists()


def _kill_one_worker_once_two_have_evaluated(store: Store, killed: list[int]) -> None:
    """SIGKILL one of this process's pool workers once two of them train a run that has evaluated; whatever
    happens, the workers end (all killed if none was found in time), so the sweep under test returns."""
    def in_training() -> list[int]:
        return [pid for pid, command in _descendants(os.getpid()).items() if b"spawn_main" in command
                and any(r.pid == pid and r.result.curve for r in store.running())]

    deadline = time.monotonic() + 180
    try:
        while len(in_training()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        killed.extend(_signalled(in_training()[:1], signal.SIGKILL))
    finally:
        if not killed:
            _signalled([pid for pid, command in _descendants(os.getpid()).items() if b"spawn_main" in command],
                       signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the pool's workers in /proc")
def test_when_one_halving_worker_dies_the_others_runs_are_stored_with_their_last_checkpoints_curves(tmp_path):
    """A dead worker breaks the pool, whose executor fails every run and then sends the other workers SIGTERM, on
    which each saves its checkpoint once more: a run's stored curve is that last save, not one read before it.
    A cell the broken pool had not begun is not failed with them: it trains in a new pool."""
    import torch

    from sepbench.sweep.halving import run_halving

    configs = _long_halving_sweep(checkpoint_every=60)
    waiting = _short_cell(configs)
    store = Store(tmp_path / "runs.db")
    assert _with_one_worker_killed(store, lambda: run_halving(configs + waiting, store, workers=2, finalists=1))
    assert {store.get(cfg.config_hash()).status for cfg in waiting} <= {"completed", "solved", "pruned"}
    assert {store.get(cfg.config_hash()).steps for cfg in waiting} <= {10, 20}
    kept = {}
    for cfg in configs:
        path = store.checkpoints / f"{cfg.config_hash()}.pt"
        if path.exists():
            kept[cfg.config_hash()] = RunResult.model_validate_json(
                torch.load(path, weights_only=True)["state"]["result"]).curve
    assert kept  # the dead worker's run saved none (a save a minute); the other's run saved on its SIGTERM
    for cfg in configs:
        result = store.get(cfg.config_hash())
        assert result.status == "failed" and result.curve == kept.get(cfg.config_hash(), [])


def test_a_one_worker_sweep_trains_on_the_threads_it_is_given_and_restores_them(tmp_path):
    import torch

    cfg = RunConfig.build({"task": {"length": 12}, "model": {"width": 8}, "train": {"steps": 4, "eval_samples": 20},
                           "device": "cpu"})
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        seen = []
        run_sweep([cfg], Store(tmp_path / "runs.db"), threads=1, on_result=lambda _: seen.append(torch.get_num_threads()))
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_an_interrupted_sweep_counts_runs_stored_but_not_yet_reported(tmp_path):
    from sepbench.sweep.interrupts import finished_runs
    from sepbench.sweep.executors import plan

    store = Store(tmp_path / "s.db")
    configs = [RunConfig.build({"seed": seed, "device": "cpu"}) for seed in range(4)]
    store.put(RunResult(config=configs[0], config_hash=configs[0].config_hash(), status="failed", error="boom"))
    before = store.config_hashes()
    planned = {cfg.config_hash() for cfg in plan(configs[1:], store).todo}
    reported, unreported = (RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed")
                            for cfg in configs[1:3])
    for result in (reported, unreported):  # a worker stores its result before the sweep hears of it
        store.put(result)
    assert finished_runs({reported.config_hash}, before, store, planned) == {reported.config_hash,
                                                                             unreported.config_hash}
    assert finished_runs(set(), before, store, set()) == set()
    retried = RunResult(config=configs[0], config_hash=configs[0].config_hash(), status="completed")
    store.put(retried)  # --retry-failed replaces the failed row: the store does not grow, the report counts it
    assert len(store) == 3
    assert finished_runs({retried.config_hash}, before, store) == {retried.config_hash, reported.config_hash,
                                                                     unreported.config_hash}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_ctrl_c_stops_reproduce_and_keeps_its_finished_runs(tmp_path):
    path = tmp_path / "runs.db"
    command = [sys.executable, "-m", "sepbench", "reproduce", "bhattamishra2024", "--claim", "dyck-depth",
               "--workers", "2", "--store", str(path), "--out", str(tmp_path / "report"),
               "--set", "train.steps=1000", "--set", "train.eval_every=50", "--set", "train.eval_samples=20",
               "--set", "train.batch_size=8", "--set", "model.width=8", "--set", "task.length=20",
               "--set", "train.early_stop=false", "--set", "device=cpu"]
    stop = _interrupt_when_stored(command, path, tmp_path, signal_group=True, mid_run=True)
    assert stop.code == 130 and not stop.survivors, (stop, stop.stderr[-2000:])
    assert "Traceback" not in stop.stderr, stop.stderr[-2000:]
    stored = _stored(path)
    assert f"interrupted: {counted(len(stored), 'run')} finished and stored in {path}" in " ".join(stop.stderr.split())
    assert f"in flight in {path}.checkpoints (at step" in " ".join(stop.stderr.split())
    assert not (tmp_path / "report").exists()


def test_progress_grows_its_total_for_runs_planned_after_it_started():
    import io

    from rich.console import Console

    from sepbench import RunConfig
    from sepbench.sweep.progress import SweepProgress
    from sepbench.train.result import RunResult

    out = io.StringIO()
    cfg = RunConfig.build({"task": {"name": "index_lookup", "length": 10}, "model": {"name": "lstm", "width": 8}})
    result = RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", metrics={"accuracy": 0.5})
    with SweepProgress("reproduce", 1, Console(file=out, width=200), live=False) as progress:
        progress.advance(result)
        progress.advance(result)  # a later --settle-ties round
    assert progress.total == 2 and "[2/2]" in out.getvalue() and "[2/1]" not in out.getvalue()


def test_a_progress_total_that_is_an_upper_bound_says_so():
    """minwidth's total is the most runs its bisection may visit; it visits fewer when a length resolves early."""
    import io

    from rich.console import Console

    from sepbench import RunConfig
    from sepbench.sweep.progress import SweepProgress
    from sepbench.train.result import RunResult

    out = io.StringIO()
    cfg = RunConfig.build({"task": {"name": "index_lookup", "length": 10}, "model": {"name": "lstm", "width": 8}})
    with SweepProgress("minwidth", 4, Console(file=out, width=200), live=False, at_most=True) as progress:
        progress.advance(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", steps=10,
                                   wall_seconds=1.0, metrics={"accuracy": 0.5}))
    line = out.getvalue().strip()
    assert line.startswith("[1/<=4] lstm-(1, 8)") and "; ETA <=" in line


def _square(x: int) -> int:
    return x * x


def test_process_jobs_that_outnumber_what_the_begin_pipe_holds_all_finish():
    """Each job says it begins on a pipe of 64 KiB; read only on a failure, it would fill and hang the sweep."""
    from sepbench.sweep.pool import run_in_processes

    done: dict[int, int] = {}
    lost: list[int] = []
    run_in_processes(list(range(5000)), 2, lambda job: (_square, (job,)), done.__setitem__,
                     lambda job, error: lost.append(job))
    assert not lost and len(done) == 5000 and done[4999] == 4999 ** 2


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the pool's workers in /proc")
def test_when_a_stacked_group_s_worker_dies_the_groups_not_begun_train_in_a_new_pool(tmp_path):
    """Two long groups train on two workers, a short one waits; one worker's death breaks the pool: the begun
    groups' runs are stored failed, the waiting group trains to its end in a new pool."""
    configs = _long_halving_sweep(checkpoint_every=60, lr_search="grid")
    waiting = _short_cell(configs)
    store = Store(tmp_path / "runs.db")
    assert _with_one_worker_killed(store, lambda: run_sweep(configs + waiting, store, workers=2, group_size=2))
    assert {store.get(cfg.config_hash()).status for cfg in configs} == {"failed"}
    assert [(store.get(cfg.config_hash()).status, store.get(cfg.config_hash()).steps) for cfg in waiting] == \
        [("completed", 20)] * 2
