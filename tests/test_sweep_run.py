import contextlib
import itertools
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sepbench import RunConfig, Store
from sepbench.sweep import SweepSpec, run_sweep
from sepbench.train import RunResult

SPEC = Path(__file__).parent / "data" / "sweep_quick.yaml"
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


def test_sigkilled_sweep_resumes_with_every_run_stored_once(tmp_path):
    path = tmp_path / "runs.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    expected = {cfg.config_hash() for cfg in SweepSpec.from_yaml(SPEC).expand()}
    assert len(expected) == 12
    sweep = subprocess.Popen(SWEEP + ["--store", str(path)], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(Store(path)) < 3 and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.2)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait(timeout=30)
    before = len(Store(path))
    assert sweep.returncode == -signal.SIGKILL and 3 <= before < 12
    resumed = subprocess.run(SWEEP + ["--store", str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"12 runs, {before} already in" in resumed.stdout and f"{12 - before} to train" in resumed.stdout
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT config_hash, COUNT(*) FROM runs GROUP BY config_hash").fetchall()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert {h for h, _ in rows} == expected and all(n == 1 for _, n in rows)
    assert resumed.stderr.count("[") >= 12 - before and "ETA" in resumed.stderr
    again = subprocess.run(SWEEP + ["--store", str(path)], env=env, capture_output=True, text=True, timeout=120)
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
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    sweep = subprocess.Popen([sys.executable, "-m", "sepbench", "sweep", str(spec), "--workers", "2",
                              "--store", str(tmp_path / "runs.db")], env=env, start_new_session=True,
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
    path = tmp_path / "ray.db"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src"), "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run(SWEEP + ["--backend", "ray", "--store", str(path)], env=env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "12 to train (ray, 2 workers)" in done.stdout and "12 trained" in done.stdout
    results = Store(path).results()
    assert {r.config_hash for r in results} == {c.config_hash() for c in SweepSpec.from_yaml(SPEC).expand()}
    assert all(r.status in ("completed", "solved") and r.steps == 60 for r in results)


def _spawned_workers(pid: int) -> set[int]:
    """The sweep's pool workers among its children (not multiprocessing's resource tracker)."""
    workers = set()
    for child in _children(pid):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.add(child)
    return workers


def _stored(path: Path) -> dict[str, str]:
    """config_hash -> stored result JSON, after checking the file and every row are whole."""
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT config_hash, status, steps, result FROM runs").fetchall()
    for config_hash, status, steps, text in rows:
        result = RunResult.model_validate_json(text)
        assert (result.config_hash, result.status, result.steps) == (config_hash, status, steps)
    return {config_hash: text for config_hash, _, _, text in rows}


def _interrupt_when_stored(command: list[str], path: Path, tmp_path: Path, signal_group: bool, workers: int):
    """Start ``command``, Ctrl-C it once a run is stored; (seconds to exit, exit code, stderr, worker pids)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    env.pop("SEPBENCH_THREADS", None)
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        sweep = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        while sweep.poll() is None and time.monotonic() < deadline and not (path.exists() and len(Store(path))):
            time.sleep(0.1)
        assert sweep.poll() is None, "the sweep ended before it could be interrupted"
        pool = _spawned_workers(sweep.pid)
        assert len(pool) == (workers if workers > 1 else 0)
        start = time.monotonic()
        if signal_group:
            os.killpg(sweep.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
        else:
            os.kill(sweep.pid, signal.SIGINT)
        code = sweep.wait(timeout=60)
        seconds = time.monotonic() - start
        return seconds, code, log.read_text(), _running(pool)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)


LONG_RUNS = ("name: long\nbase: {task: {name: index_lookup, length: 12}, model: {width: 8, layers: 1}, train: "
             "{steps: 300, eval_every: 300, eval_samples: 20, batch_size: 16, early_stop: false}, device: cpu}\n"
             "seeds: [0, 1, 2, 3, 4, 5]\n")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("workers, signal_group, resume", [(2, False, True), (2, True, False), (1, True, False)],
                         ids=["2 workers, SIGINT to the sweep", "2 workers, Ctrl-C to the group", "1 worker, Ctrl-C"])
def test_ctrl_c_stops_the_sweep_keeps_finished_runs_and_resumes(tmp_path, workers, signal_group, resume):
    spec, path = tmp_path / "long.yaml", tmp_path / "runs.db"
    spec.write_text(LONG_RUNS)
    command = [sys.executable, "-m", "sepbench", "sweep", str(spec), "--workers", str(workers), "--store", str(path)]
    seconds, code, stderr, survivors = _interrupt_when_stored(command, path, tmp_path, signal_group, workers)
    assert code == 130, stderr[-2000:]
    assert seconds < 3, f"took {seconds:.1f} s to stop"
    assert not survivors, f"workers {sorted(survivors)} outlived the interrupted sweep"
    assert "Traceback" not in stderr, stderr[-2000:]
    stored = _stored(path)
    assert 1 <= len(stored) < 6
    assert (f"interrupted: {len(stored)} of 6 runs finished and stored in {path}; rerun the same command to resume"
            in " ".join(stderr.split()))
    if resume:
        again = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-2000:]
        assert f"6 runs, {len(stored)} already in" in again.stdout
        assert f"{6 - len(stored)} trained" in again.stdout
        after = _stored(path)
        assert len(after) == 6 and all(after[h] == text for h, text in stored.items())


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_ctrl_c_stops_minwidth_with_its_warm_workers(tmp_path):
    path = tmp_path / "runs.db"
    command = [sys.executable, "-m", "sepbench", "minwidth", "--task", "index_lookup", "--model", "transformer",
               "--lengths", "12,16", "--widths", "8,16,32", "--steps", "300", "--workers", "2", "--store", str(path),
               "--set", "train.eval_samples=20", "--set", "train.batch_size=16", "--set", "device=cpu"]
    seconds, code, stderr, survivors = _interrupt_when_stored(command, path, tmp_path, True, 2)
    assert code == 130 and seconds < 3 and not survivors, (code, seconds, survivors, stderr[-2000:])
    assert "Traceback" not in stderr
    stored = _stored(path)
    assert f"interrupted: {len(stored)} runs finished and stored in {path}" in " ".join(stderr.split())


def _put_forever(path: str) -> None:
    store = Store(path)
    curve = [{"step": s, "loss": 1.0, "accuracy": 0.5, "seconds": 0.1} for s in range(2000)]
    for seed in itertools.count():
        cfg = RunConfig.build({"seed": seed, "device": "cpu"})
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", curve=curve, steps=seed))


def test_a_writer_killed_inside_put_leaves_no_partial_row(tmp_path):
    path = tmp_path / "s.db"
    context = multiprocessing.get_context("spawn")
    for attempt in range(4):
        writer = context.Process(target=_put_forever, args=(str(path),))
        writer.start()
        deadline = time.monotonic() + 60
        while len(Store(path)) <= attempt * 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05 * attempt)
        writer.kill()  # SIGKILL lands at some point of a put: before, inside or after its transaction
        writer.join()
        _stored(path)
    assert len(Store(path)) > 0
