"""Checkpoints: a run killed in the middle resumes from its checkpoint and ends exactly as the uninterrupted run.

The tests that kill a command are marked slow for its start-up (importing torch), not for training.
"""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from sepbench import RunConfig, Store
from sepbench.sweep import SweepSpec, run_stored, run_sweep
from sepbench.sweep.halving import run_halving
from sepbench.train import checkpoint, train
from sepbench.train.group import train_group
from sepbench.train.keeping import Keeping
from sepbench.train.loop import Trainer

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SEPBENCH = [sys.executable, "-m", "sepbench"]
BASE = {"task": {"name": "index_lookup", "length": 12},
        "model": {"name": "transformer", "width": 8, "heads": 2},
        "train": {"steps": 150, "eval_every": 25, "eval_samples": 50, "batch_size": 8, "warmup_steps": 5,
                  "early_stop": False, "checkpoint_every": 0.02},
        "device": "cpu"}


def config(seed: int = 0, **train_fields) -> RunConfig:
    return RunConfig.build({**BASE, "seed": seed, "train": {**BASE["train"], **train_fields}})


def outcome(result):
    """Everything a run computes (not its timings): the same on CPU however often it was stopped."""
    return (result.status, result.steps, result.steps_to_threshold, result.metrics, result.intervals,
            [(p.step, p.loss, p.accuracy, p.interval) for p in result.curve])


def kill_after_checkpoint(command: list[str], folder: Path, ready=lambda: True,
                          signum: int = signal.SIGKILL) -> tuple[int, float, str]:
    """Start ``command``; once a checkpoint is in ``folder`` and ``ready()``, send ``signum`` to its whole process
    group (as a terminal's Ctrl-C does for SIGINT). Returns its exit code, the seconds it took to end, its stderr."""
    process = subprocess.Popen(command, env=ENV, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (any(folder.glob("*.pt")) and ready()):
            assert process.poll() is None, f"ended before a checkpoint: {process.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.01)
        start = time.monotonic()
        os.killpg(process.pid, signum)
        stderr = process.communicate(timeout=60)[1]
        return process.returncode, time.monotonic() - start, stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def write_spec(path: Path, **spec) -> Path:
    path.write_text(yaml.safe_dump({"name": "resume", "base": BASE, **spec}))
    return path


@pytest.mark.slow
def test_a_sigkilled_run_resumes_to_the_uninterrupted_result(tmp_path):
    cfg, store = config(), tmp_path / "runs.db"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**BASE, "train": {**BASE["train"], "checkpoint_every": 300}}))
    command = [*SEPBENCH, "run", "--config", str(tmp_path / "run.yaml"), "--store", str(store),
               "--set", "train.checkpoint_every=0.02"]
    kill_after_checkpoint(command, tmp_path / "runs.db.checkpoints")
    assert not Store(store).has(cfg.config_hash())
    resumed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    stored = Store(store).get(cfg.config_hash())
    assert len(stored.resumed_from) == 1 and 0 < stored.resumed_from[0] < 150
    assert f"run {cfg.config_hash()} resumes from its checkpoint at step {stored.resumed_from[0]}" in resumed.stderr
    assert outcome(stored) == outcome(train(cfg, progress=False))
    assert not list((tmp_path / "runs.db.checkpoints").iterdir())  # a finished run deletes its checkpoint
    shown = subprocess.run([*SEPBENCH, "results", "--store", str(store), "--by-seed", "--format", "json"], env=ENV,
                           capture_output=True, text=True, timeout=60)
    assert f'"resumed_from":[\n      {stored.resumed_from[0]}\n    ]' in shown.stdout


def test_checkpoint_every_and_the_folder_enter_no_hash():
    assert config(checkpoint_every=2).config_hash() == config(checkpoint_every=0).config_hash()
    assert config(tensorboard="tb").cell_hash() == config().cell_hash()
    assert "checkpoint_every" not in train(config(steps=2, checkpoint_every=2), progress=False).model_dump_json()


@pytest.mark.slow
def test_a_run_in_a_sweep_on_the_local_pool_resumes(tmp_path, monkeypatch):
    spec = write_spec(tmp_path / "sweep.yaml", seeds=[0, 1])
    store, folder = tmp_path / "runs.db", tmp_path / "shared"
    command = [*SEPBENCH, "sweep", str(spec), "--workers", "2", "--store", str(store), "--checkpoints", str(folder)]
    kill_after_checkpoint(command, folder)
    monkeypatch.setenv("SEPBENCH_CHECKPOINTS", str(folder))
    configs = SweepSpec.from_yaml(spec).expand()
    run_sweep(configs, Store(store))  # inline: the checkpoints, not the pool, carry the runs on
    results = [Store(store).get(c.config_hash()) for c in configs]
    assert any(r.resumed_from for r in results)
    for cfg, result in zip(configs, results):
        assert outcome(result) == outcome(train(cfg, progress=False))
    assert not list(folder.iterdir())


@pytest.mark.slow
def test_a_grouped_run_resumes_as_the_uninterrupted_group(tmp_path):
    spec = write_spec(tmp_path / "group.yaml", seeds=[0, 1, 2])
    store = tmp_path / "runs.db"
    folder = tmp_path / "runs.db.checkpoints"
    every_member = lambda: len(list(folder.glob("*.pt"))) == 3  # noqa: E731 - members save one after another
    kill_after_checkpoint([*SEPBENCH, "sweep", str(spec), "--group-size", "3", "--store", str(store)], folder,
                          ready=every_member)
    configs = SweepSpec.from_yaml(spec).expand()
    run_sweep(configs, Store(store), group_size=3)
    results = [Store(store).get(c.config_hash()) for c in configs]
    assert all(len(r.resumed_from) == 1 for r in results)
    assert [outcome(r) for r in results] == [outcome(r) for r in train_group(configs)]


@pytest.mark.slow
def test_the_survivors_of_an_interrupted_rung_resume(tmp_path):
    base = {**BASE, "model": {"name": "lstm", "width": 8}, "train": {**BASE["train"], "steps": 200, "eval_every": 25}}
    spec = tmp_path / "halving.yaml"
    spec.write_text(yaml.safe_dump({"name": "halving", "base": base, "lr_grid": [3e-2, 1e-2, 3e-3, 1e-3],
                                    "lr_search": "halving"}))
    store = tmp_path / "runs.db"
    pruned = lambda: store.exists() and len(Store(store).query(status="pruned")) == 2  # noqa: E731 - past rung 50
    kill_after_checkpoint([*SEPBENCH, "sweep", str(spec), "--store", str(store)], tmp_path / "runs.db.checkpoints",
                          ready=pruned)
    configs = SweepSpec.from_yaml(spec).expand()
    resumed = run_halving(configs, Store(store))
    full_store = Store(tmp_path / "full.db")
    full = run_halving(configs, full_store)
    assert resumed.skipped == 2 and len(resumed.results) == 2 and all(r.resumed_from for r in resumed.results)
    assert resumed.steps == sum(r.steps - r.resumed_from[0] for r in resumed.results) < full.steps - 2 * 50
    by_hash = {r.config_hash: outcome(r) for r in full_store.results()}
    assert {r.config_hash: outcome(r) for r in Store(store).results()} == by_hash


SHORT = config(checkpoint_every=1e-9, steps=50)


@pytest.fixture(scope="module")
def uninterrupted():
    return outcome(train(SHORT, progress=False))


def _written_checkpoint(tmp_path: Path, cfg: RunConfig) -> Path:
    trainer = Trainer(cfg, Keeping(tmp_path))
    trainer.train_until(30)
    return trainer.checkpoint.path


@pytest.mark.parametrize("spoil, reason", [
    (lambda path, payload: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]), "cannot be read"),
    (lambda path, payload: path.write_bytes(b"not a checkpoint"), "cannot be read"),
    (lambda path, payload: torch.save({**payload, "config_hash": "0123456789abcdef"}, path), "holds config"),
    (lambda path, payload: torch.save({**payload, "code_version": "000000000000"}, path), "other code wrote it"),
    (lambda path, payload: torch.save({**payload, "kind": checkpoint.MEMBER}, path), "holds a member run"),
], ids=["truncated", "corrupt", "other config", "other code", "other kind"])
def test_a_bad_checkpoint_is_set_aside_with_one_warning_and_the_run_starts_over(tmp_path, capfd, spoil, reason,
                                                                               uninterrupted):
    cfg = SHORT
    path = _written_checkpoint(tmp_path, cfg)
    spoil(path, torch.load(path, weights_only=True))
    capfd.readouterr()
    result = train(cfg, progress=False, keeping=Keeping(tmp_path))
    warning = capfd.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith(f"warning: checkpoint {path} set aside") and reason in warning[0]
    assert result.resumed_from == [] and outcome(result) == uninterrupted
    assert path.with_suffix(".bad").exists() and not path.exists()


def test_a_checkpoint_taken_at_any_step_resumes_exactly(tmp_path):
    cfg = config(checkpoint_every=1e-9, steps=80, eval_every=20)
    for stop in (2, 21, 57):
        folder = tmp_path / str(stop)
        Trainer(cfg, Keeping(folder)).train_until(stop)
        resumed = Trainer(cfg, Keeping(folder))
        assert resumed.result.steps == stop - 1 and resumed.result.resumed_from == [stop - 1]
        assert outcome(resumed.run(progress=False)) == outcome(train(cfg, progress=False))


def test_a_run_resumed_from_the_checkpoint_it_stopped_at_trains_no_further(tmp_path):
    """A halving search saves a run that stopped early at its threshold and stores it only when its learning
    rate is closed; a process that dies in between resumes it from that checkpoint, stopped where it stopped."""
    cfg = config(checkpoint_every=1e-9, steps=80, eval_every=20, early_stop=True, threshold=0.01)
    stopped = Trainer(cfg, Keeping(tmp_path))
    stopped.train_until(60)
    assert stopped.stopped and stopped.result.steps == 20
    checkpoint.save_trainer(stopped)
    resumed = Trainer(cfg, Keeping(tmp_path))
    assert resumed.stopped
    assert outcome(resumed.run(progress=False)) == outcome(train(cfg, progress=False))


def test_a_stop_during_the_final_evaluation_keeps_the_training_done(tmp_path, monkeypatch):
    cfg = config(checkpoint_every=300)  # no save falls due while it trains
    trainer = Trainer(cfg, Keeping(tmp_path))
    trainer.train_until(cfg.train.steps)

    def stopped_by_ctrl_c(result, last):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "settle", stopped_by_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        trainer.finish()
    resumed = Trainer(cfg, Keeping(tmp_path))
    assert resumed.result.steps == cfg.train.steps
    assert outcome(resumed.run(progress=False)) == outcome(train(cfg, progress=False))


class KilledWhileStoring(BaseException):
    """Stands for a kill between the end of training and the store's commit."""


@pytest.mark.parametrize("path", ["run", "sweep"])
def test_a_run_killed_before_its_result_is_stored_resumes_finished_from_its_checkpoint(tmp_path, monkeypatch, path):
    cfg = config(checkpoint_every=1e-9)  # saves as it trains; the finish brings its checkpoint to the last step
    store = Store(tmp_path / "runs.db")

    def store_it() -> None:
        if path == "run":
            run_stored(cfg, store, progress=False)
        else:
            run_sweep([cfg], store)

    def killed(self, result):
        raise KilledWhileStoring

    with monkeypatch.context() as patched:
        patched.setattr(Store, "put", killed)
        with pytest.raises(KilledWhileStoring):
            store_it()
    assert not store.has(cfg.config_hash())
    store_it()
    result = store.get(cfg.config_hash())
    assert result.resumed_from == [cfg.train.steps]
    assert outcome(result) == outcome(train(cfg, progress=False))
    assert not list(store.checkpoints.glob("*.pt"))


def test_a_resumed_run_counts_the_cpu_seconds_of_both_stretches(tmp_path):
    cfg = config(checkpoint_every=1e-9, steps=40, eval_every=20)
    first = Trainer(cfg, Keeping(tmp_path))
    first.train_until(30)
    counted = first.cpu_seconds()
    resumed = Trainer(cfg, Keeping(tmp_path))
    assert 0 < resumed.cpu_seconds() <= counted  # as saved at the start of step 30
    saved = resumed.cpu_seconds()
    assert resumed.run(progress=False).cpu_seconds > saved


def test_a_run_resumed_from_a_checkpoint_without_cpu_seconds_says_they_are_unknown(tmp_path):
    cfg = config(checkpoint_every=1e-9, steps=40, eval_every=20)
    Trainer(cfg, Keeping(tmp_path)).train_until(30)
    (path,) = tmp_path.glob("*.pt")
    payload = torch.load(path, weights_only=True)
    del payload["state"]["cpu_seconds"]
    torch.save(payload, path)
    assert Trainer(cfg, Keeping(tmp_path)).run(progress=False).cpu_seconds is None


@pytest.mark.slow
def test_ctrl_c_checkpoints_a_run_says_so_and_the_same_command_resumes_it(tmp_path):
    cfg, store = config(checkpoint_every=300), tmp_path / "runs.db"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    command = [*SEPBENCH, "run", "--config", str(tmp_path / "run.yaml"), "--store", str(store)]
    process = subprocess.Popen(command, env=ENV, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (store.exists() and Store(store).running()):  # its first evaluation is in
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()[-2000:]
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGINT)
        code, stderr = process.wait(timeout=60), process.stderr.read()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    lines = " ".join(stderr.split())
    assert code == 130 and "Traceback" not in stderr, stderr[-2000:]
    assert f"checkpointed 1 run in flight in {store}.checkpoints (at step" in lines
    assert f"interrupted: run {cfg.config_hash()} did not finish" in lines
    again = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    result = Store(store).get(cfg.config_hash())
    assert len(result.resumed_from) == 1 and outcome(result) == outcome(train(cfg, progress=False))
    assert not Store(store).running()


def _ray_task_pids() -> set[int]:
    """Processes that Ray titled as running a sweep's run (``ray::_run_remote``)."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if cmdline.read_bytes().startswith(b"ray::_run_remote"):
                found.add(int(cmdline.parent.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the Ray worker in /proc")
def test_a_killed_ray_worker_leaves_a_checkpoint_the_rerun_resumes(tmp_path):
    pytest.importorskip("ray")
    cfg, store, folder = config(steps=400), tmp_path / "runs.db", tmp_path / "shared"
    (tmp_path / "one.yaml").write_text(yaml.safe_dump({"name": "one", "base": cfg.model_dump(mode="json")}))
    command = [*SEPBENCH, "sweep", str(tmp_path / "one.yaml"), "--backend", "ray", "--workers", "1",
               "--store", str(store), "--checkpoints", str(folder)]
    env = {**ENV, "RAY_AUTH_MODE": "disabled"}
    sweep = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (any(folder.glob("*.pt")) and _ray_task_pids()):
            assert sweep.poll() is None and time.monotonic() < deadline, sweep.stderr.read()[-2000:]
            time.sleep(0.01)
        for pid in _ray_task_pids():
            os.kill(pid, signal.SIGKILL)
        _, stderr = sweep.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 1 and "--retry-failed resumes it" in " ".join(stderr.split()), stderr[-2000:]
    assert Store(store).get(cfg.config_hash()).status == "failed"
    again = subprocess.run([*command, "--retry-failed"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    result = Store(store).get(cfg.config_hash())
    assert len(result.resumed_from) == 1 and outcome(result) == outcome(train(cfg, progress=False))


def _ctrl_c_sweep(tmp_path: Path, spec: dict, options: list[str], ready) -> tuple[Path, list[RunConfig], set[str]]:
    """Ctrl-C a two-worker ``sepbench sweep`` of ``spec`` (runs of 1000 steps) once ``ready(folder, configs)``;
    its store, its configs and the config hashes it stored before it stopped."""
    path, folder = tmp_path / "runs.db", tmp_path / "runs.db.checkpoints"
    long_runs = {**BASE, "train": {**BASE["train"], "steps": 1000}}
    spec_file = write_spec(tmp_path / "spec.yaml", **{"base": long_runs, **spec})
    configs = SweepSpec.from_yaml(spec_file).expand()
    code, seconds, stderr = kill_after_checkpoint(
        [*SEPBENCH, "sweep", str(spec_file), "--workers", "2", "--store", str(path), *options], folder,
        ready=lambda: ready(folder, configs), signum=signal.SIGINT)
    assert code == 130 and "Traceback" not in stderr, stderr[-2000:]
    assert seconds < 30, f"took {seconds:.1f} s to stop"  # about 2 s alone; generous for a loaded machine
    assert f"in flight in {path}.checkpoints (at step" in " ".join(stderr.split())
    stored = {c.config_hash() for c in configs if Store(path).has(c.config_hash())}
    assert len(stored) < len(configs)
    return path, configs, stored


@pytest.mark.slow
def test_ctrl_c_checkpoints_the_runs_of_stacked_groups_in_worker_processes(tmp_path):
    every_run_saved = lambda folder, configs: len(list(folder.glob("*.pt"))) == len(configs)  # noqa: E731
    path, configs, stored = _ctrl_c_sweep(tmp_path, {"seeds": [0, 1, 2, 3]}, ["--group-size", "2"], every_run_saved)
    run_sweep(configs, Store(path), group_size=2)
    assert all(Store(path).get(c.config_hash()).resumed_from for c in configs if c.config_hash() not in stored)


@pytest.mark.slow
def test_ctrl_c_checkpoints_the_runs_halving_cells_hold_in_worker_processes(tmp_path):
    """Three rates a cell: all three train to the first rung (250 steps) and are held there; the Ctrl-C lands once
    a cell holds all three, and each run it checkpointed resumes from its file."""
    def a_cell_held_whole(folder: Path, configs: list[RunConfig]) -> bool:
        cells: dict[int, list[str]] = {}
        for c in configs:
            cells.setdefault(c.model.width, []).append(c.config_hash())
        return any(all((folder / f"{h}.pt").exists() for h in cell) for cell in cells.values())

    spec = {"grid": {"model.width": [8, 12]}, "lr_grid": [1e-2, 1e-3, 1e-4], "lr_search": "halving"}
    path, configs, stored = _ctrl_c_sweep(tmp_path, spec, [], a_cell_held_whole)
    saved = {p.stem for p in (tmp_path / "runs.db.checkpoints").glob("*.pt")} - stored
    assert len(saved) >= 3
    run_halving(configs, Store(path))
    assert all(Store(path).get(h).resumed_from for h in saved)
    # the periodic saves of a run end before its rung; the runs held there resume from the save made as they stopped
    assert sum(Store(path).get(h).resumed_from[0] == 250 for h in saved) >= 2


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_grouped_sweep_resumes_a_run_that_kept_a_solo_checkpoint(tmp_path, dropout):
    """A run whose group could not stack (dropout) or that trained in a group of one keeps a solo checkpoint;
    the next grouped call resumes that run alone from it instead of setting it aside."""
    model = {**BASE["model"], "dropout": dropout}
    first, second = (RunConfig.build({**BASE, "seed": seed, "model": model,
                                      "train": {**BASE["train"], "checkpoint_every": 1e-9, "steps": 60,
                                                "eval_every": 20}}) for seed in (0, 1))
    folder = tmp_path / "checkpoints"
    Trainer(first, Keeping(folder)).train_until(21)
    results = train_group([first, second], keeping=Keeping(folder))
    assert results[0].resumed_from == [20] and results[1].resumed_from == []
    assert not list(folder.glob("*.bad"))
    assert outcome(results[0]) == outcome(train(first, progress=False))


def test_loading_leaves_a_live_writer_s_partial_file_and_removes_a_dead_one_s(tmp_path):
    cfg = config()
    file = checkpoint.Checkpoint(tmp_path, cfg, checkpoint.SOLO)
    live = tmp_path / f".{file.path.name}.{socket.gethostname()}.{os.getpid()}.partial"
    dead = tmp_path / f".{file.path.name}.{socket.gethostname()}.999999999.partial"
    for path in (live, dead):
        path.write_bytes(b"half a checkpoint")
    assert file.load() is None
    assert live.exists() and not dead.exists()


def test_runs_with_dropout_that_take_turns_in_one_process_each_train_as_if_alone(tmp_path):
    """A halving search holds several Trainers and trains them by turns; dropout draws from torch's random state,
    which each keeps as its own, so every one ends as its uninterrupted run, and so does its checkpoint's resume."""
    configs = [RunConfig.build({**BASE, "seed": seed, "model": {**BASE["model"], "dropout": 0.3},
                                "train": {**BASE["train"], "steps": 60, "eval_every": 20}}) for seed in (0, 1)]
    alone = [outcome(train(cfg, progress=False)) for cfg in configs]
    turns = [Trainer(cfg, Keeping(tmp_path / str(i))) for i, cfg in enumerate(configs)]
    for step in (10, 25, 40):
        for trainer in turns:
            trainer.train_until(step)
    checkpoint.save_trainer(turns[0])
    resumed = Trainer(configs[0], Keeping(tmp_path / "0"))
    assert outcome(turns[1].run(progress=False)) == alone[1]
    assert outcome(resumed.run(progress=False)) == alone[0]
    assert alone[0] != outcome(train(configs[0].model_copy(update={"model": configs[0].model.model_copy(
        update={"dropout": 0.0})}), progress=False))
