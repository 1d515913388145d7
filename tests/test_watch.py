"""Live curves: TensorBoard scalars and the store's running runs, written as each evaluation comes."""
import json

import pytest
from typer.testing import CliRunner

from sepbench import RunConfig, Store
from sepbench.cli import app
from sepbench.train import train
from sepbench.train.keeping import Keeping
from sepbench.train.loop import Trainer
from sepbench.train.watch import run_name

runner = CliRunner()
BASE = {"task": {"name": "index_lookup", "length": 12}, "model": {"name": "transformer", "width": 8, "heads": 2},
        "train": {"steps": 60, "eval_every": 20, "eval_samples": 300, "batch_size": 8, "warmup_steps": 5,
                  "schedule": "linear", "early_stop": False},
        "device": "cpu"}


def config(**train_fields) -> RunConfig:
    return RunConfig.build({**BASE, "train": {**BASE["train"], **train_fields}})


def scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of one run's event files, read back by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_gets_every_evaluation_of_a_run_in_its_own_folder(tmp_path):
    pytest.importorskip("tensorboard")
    cfg = config(tensorboard=str(tmp_path / "tb"))
    result = train(cfg, progress=False)
    (folder,) = (tmp_path / "tb").iterdir()
    assert folder.name == run_name(cfg) and folder.name.endswith(f"_{cfg.cell_hash()}_seed0")
    found = scalars(folder)
    assert found["eval/accuracy"] == [(p.step, pytest.approx(p.accuracy, rel=1e-6)) for p in result.curve]
    assert found["eval/loss"] == [(p.step, pytest.approx(p.loss, rel=1e-6)) for p in result.curve]
    assert found["eval/accuracy_low"] == [(p.step, pytest.approx(p.interval.low, rel=1e-6)) for p in result.curve]
    assert found["eval/accuracy_high"] == [(p.step, pytest.approx(p.interval.high, rel=1e-6)) for p in result.curve]
    lrs = [lr for _, lr in found["train/lr"]]
    assert [s for s, _ in found["train/lr"]] == [20, 40, 60] and lrs[0] > lrs[1] > lrs[2] == 0.0  # linear decay
    assert [s for s, _ in found["train/steps_per_second"]] == [40, 60]
    assert all(rate > 0 for _, rate in found["train/steps_per_second"])


def test_the_tensorboard_flag_gives_each_seed_its_folder_and_enters_no_hash(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SEPBENCH_TENSORBOARD", "")  # the flag sets it for this process: undone after the test
    args = ["run", "--task", "index_lookup", "--length", "12", "--width", "8", "--heads", "2", "--steps", "20",
            "--store", "runs.db", "--tensorboard", "tb", "--set", "train.eval_every=10", "--set",
            "train.eval_samples=50", "--set", "device=cpu"]
    for seed in ("0", "1"):
        assert runner.invoke(app, [*args, "--seed", seed]).exit_code == 0
    names = sorted(p.name for p in (tmp_path / "tb").iterdir())
    assert [n.rsplit("_", 1)[1] for n in names] == ["seed0", "seed1"] and len({n.rsplit("_", 1)[0] for n in names}) == 1
    plain = RunConfig.build({"task": {"length": 12}, "model": {"width": 8, "heads": 2}, "seed": 0,
                             "train": {"steps": 20, "eval_every": 10, "eval_samples": 50}})
    assert Store(tmp_path / "runs.db").has(plain.config_hash())


def test_a_run_in_training_is_listed_with_its_step_accuracy_and_eta_until_it_is_stored(tmp_path):
    store = Store(tmp_path / "runs.db")
    trainer = Trainer(config(), Keeping(store=store.path))
    trainer.train_until(40)
    (running,) = store.running()
    assert running.result.steps == 40 and [p.step for p in running.result.curve] == [20, 40] and running.alive
    shown = runner.invoke(app, ["results", "--store", str(store.path), "--running", "--format", "json"])
    (row,) = json.loads(shown.stdout)
    assert (row["step"], row["steps"], row["state"]) == (40, 60, "training")
    assert row["accuracy"] == running.result.curve[-1].accuracy
    assert row["eta_seconds"] == pytest.approx(row["seconds"] / 40 * 20)
    table = runner.invoke(app, ["results", "--store", str(store.path), "--running"])
    assert "40/60" in table.stdout and "1 run in training" in table.stdout
    store.put(trainer.finish())
    assert store.running() == []
    assert "no runs in training" in runner.invoke(app, ["results", "--store", str(store.path), "--running"]).stdout


def test_each_member_of_a_stacked_group_shows_its_curve(tmp_path):
    from sepbench.train.group import train_group

    store = Store(tmp_path / "runs.db")
    configs = [RunConfig.build({**BASE, "seed": seed, "train": {**BASE["train"], "lr": lr}})
               for seed, lr in ((0, 1e-3), (1, 3e-3))]
    seen: list[dict[str, list[int]]] = []
    train_group(configs, keeping=Keeping(store=store.path), on_result=lambda result: seen.append(
        {r.result.config_hash: [p.step for p in r.result.curve] for r in store.running()}))
    every = {c.config_hash(): [20, 40, 60] for c in configs}
    assert seen == [every, every]  # nothing stores them here, so both stay listed


def test_a_resumed_run_replaces_the_points_its_killed_run_logged_after_the_checkpoint(tmp_path):
    """A run killed after logging steps 20 and 40 but checkpointed at 20 logs 40 and 60 again on resume: the
    event files then hold each step once, with the resumed run's values."""
    pytest.importorskip("tensorboard")
    from sepbench.train.result import EvalPoint, RunResult
    from sepbench.train.watch import Watch

    cfg = config(tensorboard=str(tmp_path / "tb"))
    result = RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed")
    killed = Watch(cfg, None)
    for step, accuracy in ((20, 0.1), (40, 0.2)):
        killed.point(result, EvalPoint(step=step, loss=1.0, accuracy=accuracy, seconds=1.0), 1e-3)
    killed.close()
    resumed = Watch(cfg, None)
    for step, accuracy in ((40, 0.5), (60, 0.6)):
        resumed.point(result, EvalPoint(step=step, loss=1.0, accuracy=accuracy, seconds=1.0), 1e-3)
    resumed.close()
    (folder,) = (tmp_path / "tb").iterdir()
    assert scalars(folder)["eval/accuracy"] == [(20, pytest.approx(0.1)), (40, pytest.approx(0.5)),
                                               (60, pytest.approx(0.6))]


def _stopped(store: Store, config_hash: str) -> None:
    """Make the running row of ``config_hash`` one whose process is gone, as after a kill."""
    import sqlite3
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE running SET pid = ? WHERE config_hash = ?", (int(gone.stdout), config_hash))


def test_discard_forgets_a_stopped_run_and_its_checkpoint_so_its_command_trains_it_from_step_0(tmp_path):
    store = Store(tmp_path / "runs.db")
    cfg, other = config(checkpoint_every=1e-9), config(checkpoint_every=1e-9, lr=3e-3)
    for each in (cfg, other):
        Trainer(each, Keeping.beside(store)).train_until(40)
    key, kept = cfg.config_hash(), other.config_hash()
    checkpoint = store.checkpoints / f"{key}.pt"
    assert checkpoint.exists() and (store.checkpoints / f"{kept}.pt").exists()
    base = ["results", "--store", str(store.path), "--running"]

    alive = runner.invoke(app, [*base, "--discard", key])
    assert alive.exit_code == 2 and "still training" in alive.stderr
    _stopped(store, key)
    unknown = runner.invoke(app, [*base, "--discard", key, "--discard", "0123456789abcdef"])
    assert unknown.exit_code == 2 and "--discard 0123456789abcdef: no run in training" in unknown.stderr
    assert runner.invoke(app, ["results", "--store", str(store.path), "--discard", key]).exit_code == 2
    for extra in (["--task", ""], ["--model", "transformer"], ["--format", "json"], ["--out", str(tmp_path / "o.csv")]):
        narrowed = runner.invoke(app, [*base, "--discard", key, *extra])
        assert narrowed.exit_code == 2, extra
        assert "--task, --model, --format and --out do not go with it" in " ".join(narrowed.stderr.split())
    assert checkpoint.exists() and {r.result.config_hash for r in store.running()} == {key, kept}  # nothing removed

    done = runner.invoke(app, [*base, "--discard", key])
    assert done.exit_code == 0 and f"discarded run {key} (stopped at step 40 of 60)" in done.stdout
    assert not checkpoint.exists() and [r.result.config_hash for r in store.running()] == [kept]
    assert (store.checkpoints / f"{kept}.pt").exists()
    assert train(cfg, progress=False, keeping=Keeping.beside(store)).resumed_from == []


def test_discard_looks_in_the_checkpoints_folder_given_and_forgets_a_row_it_cannot_read(tmp_path):
    import sqlite3

    store, elsewhere = Store(tmp_path / "runs.db"), tmp_path / "shared-checkpoints"
    cfg = config(checkpoint_every=1e-9)
    Trainer(cfg, Keeping(elsewhere, store.path)).train_until(40)
    key = cfg.config_hash()
    _stopped(store, key)
    with sqlite3.connect(store.path) as conn:
        conn.execute("INSERT INTO running VALUES ('0123456789abcdef', 'here', 1, '2026-01-01', '{\"broken\": 1}')")
    base = ["results", "--store", str(store.path), "--running", "--discard"]
    missed = runner.invoke(app, [*base, key])
    assert missed.exit_code == 0 and f"no checkpoint of it was in {store.checkpoints}" in " ".join(missed.stdout.split())
    assert (elsewhere / f"{key}.pt").exists() and store.running() == []
    Trainer(cfg, Keeping(elsewhere, store.path)).train_until(40)  # resumes from the checkpoint left there
    _stopped(store, key)
    found = runner.invoke(app, [*base, key, "--checkpoints", str(elsewhere)])
    assert found.exit_code == 0 and "its row and its checkpoint are gone" in found.stdout
    assert not (elsewhere / f"{key}.pt").exists()
    broken = runner.invoke(app, [*base, "0123456789abcdef"])
    assert broken.exit_code == 0 and "its row unreadable" in broken.stdout
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM running").fetchone() == (0,)
