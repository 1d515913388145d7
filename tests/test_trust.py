"""A diverged, failed or refused run is data: it round-trips through the store, never breaks a later read, is
retried only when asked, and is never shown as unsolved. A bad store is found before any training."""
import importlib
import json
import math
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sepbench import RunConfig, Store
from sepbench.cli import app
from sepbench.sweep import Reuse, plan
from sepbench.train import EvalPoint, RunResult
from sepbench.train.environment import code_version
from sepbench.train.memory import estimate_memory, is_out_of_memory

runner = CliRunner()
training = importlib.import_module("sepbench.train")
TINY = ["--task", "index_lookup", "--model", "transformer", "--layers", "1", "--width", "16", "--length", "12",
        "--steps", "30", "--device", "cpu", "--set", "train.eval_every=10", "--set", "train.eval_samples=100"]


def one_line_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_non_finite_numbers_round_trip_through_the_store(tmp_path):
    cfg = RunConfig.build({"device": "cpu"})
    result = RunResult(config=cfg, config_hash=cfg.config_hash(), status="diverged",
                       metrics={"loss": math.nan, "accuracy": 0.1, "accuracy@40": math.inf},
                       curve=[EvalPoint(step=10, loss=-math.inf, accuracy=0.1, seconds=1.0)])
    store = Store(tmp_path / "s.db")
    store.put(result)
    back = store.get(cfg.config_hash())
    assert math.isnan(back.metrics["loss"]) and back.metrics["accuracy@40"] == math.inf
    assert back.curve[0].loss == -math.inf
    assert [r.config_hash for r in store.results()] == [cfg.config_hash()]


def test_a_store_written_with_json_null_for_nan_still_loads(tmp_path):
    cfg = RunConfig.build({"device": "cpu"})
    result = RunResult(config=cfg, config_hash=cfg.config_hash(), status="diverged", metrics={"accuracy": 0.1},
                       curve=[EvalPoint(step=10, loss=1.0, accuracy=0.1, seconds=1.0)])
    store = Store(tmp_path / "s.db")
    store.put(result)
    old = json.loads(result.model_dump_json())
    old["metrics"]["loss"], old["curve"][0]["loss"] = None, None
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE runs SET result = ?", (json.dumps(old),))
    back = store.get(cfg.config_hash())
    assert math.isnan(back.metrics["loss"]) and math.isnan(back.curve[0].loss)
    assert len(store.results()) == 1 and store.unreadable == []


def test_an_unreadable_row_is_left_out_and_named_not_a_crash(tmp_path):
    store = Store(tmp_path / "s.db")
    good, bad = (RunConfig.build({"seed": s, "device": "cpu"}) for s in (0, 1))
    for cfg in (good, bad):
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed"))
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE runs SET result = '{\"config\": 1}' WHERE config_hash = ?", (bad.config_hash(),))
    assert [r.config_hash for r in store.results()] == [good.config_hash()]
    assert [key for key, _ in store.unreadable] == [bad.config_hash()]


UNREADABLE_SPEC = """
name: unreadable
base: {task: {name: index_lookup, length: 12}, model: {name: transformer, layers: 1}, device: cpu,
       train: {steps: 10, eval_every: 10, eval_samples: 50}}
grid: {model.width: [8, 16]}
"""


def spoil(store: Store, config_hash: str, text: str) -> None:
    with sqlite3.connect(store.path) as conn:
        conn.execute("UPDATE runs SET result = ? WHERE config_hash = ?", (text, config_hash))


def test_a_sweep_trains_again_a_stored_row_it_cannot_read_and_says_so(store_path, tmp_path):
    spec = tmp_path / "unreadable.yaml"
    spec.write_text(UNREADABLE_SPEC)
    assert runner.invoke(app, ["sweep", str(spec)]).exit_code == 0
    store = Store(store_path)
    damaged, other = sorted(store.config_hashes())
    spoil(store, damaged, '{"config": {"task"')
    row = json.loads(store.get(other).model_dump_json())
    spoil(store, other, json.dumps({**row, "code_version": "older", "status": "half-done"}))
    again = runner.invoke(app, ["sweep", str(spec)])
    assert again.exit_code == 0, again.output
    assert "0 already in" in again.stdout and "2 to train" in again.stdout
    assert "2 stored runs cannot be read by this code" in again.stderr
    assert {r.config_hash for r in store.results()} == {damaged, other} and store.unreadable == []
    settled = runner.invoke(app, ["sweep", str(spec)])
    assert "2 already in" in settled.stdout and "cannot be read" not in settled.stderr


def test_a_row_from_this_code_is_planned_without_reading_it_whole(tmp_path):
    store = Store(tmp_path / "s.db")
    cfg = RunConfig.build({"device": "cpu"})
    store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", code_version=code_version()))
    assert plan([cfg], store).todo == [] and plan([cfg], store).unreadable == {}
    spoil(store, cfg.config_hash(), "not json")
    assert plan([cfg], store).todo == [cfg] and "JSONDecodeError" in plan([cfg], store).unreadable[cfg.config_hash()]


def test_run_trains_again_a_stored_row_it_cannot_read(store_path):
    assert runner.invoke(app, ["run", *TINY]).exit_code == 0
    store = Store(store_path)
    (key,) = store.config_hashes()
    spoil(store, key, "{")
    again = runner.invoke(app, ["run", *TINY])
    assert again.exit_code == 0, again.output
    assert f"stored run {key} cannot be read: Invalid JSON" in again.stderr and "trained again" in again.stderr
    assert store.get(key).status in ("completed", "solved")


def test_a_diverged_run_leaves_rerun_results_report_and_minwidth_working(store_path, tmp_path):
    diverging = ["run", *TINY, "--lr", "1e9"]
    first = runner.invoke(app, diverging)
    assert first.exit_code == 0, first.output
    (stored,) = Store(store_path).results()
    assert stored.status == "diverged" and math.isnan(stored.metrics["loss"])
    again = runner.invoke(app, diverging)
    assert again.exit_code == 0 and "already in" in again.stderr
    listing = runner.invoke(app, ["results", "--format", "json"])
    assert listing.exit_code == 0 and stored.config_hash in listing.stdout
    page = runner.invoke(app, ["report", "--out", str(tmp_path / "report")])
    assert page.exit_code == 0, page.output
    search = runner.invoke(app, ["minwidth", "--task", "index_lookup", "--model", "transformer", "--lengths", "12",
                                 "--widths", "16", "--layers", "1", "--steps", "30", "--k", "1", "--m", "1",
                                 "--device", "cpu", "--set", "train.lr=1e9", "--set", "train.eval_every=10",
                                 "--set", "train.eval_samples=100"])
    assert search.exit_code == 0, search.output
    assert "trained 0 new runs" in search.stdout


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_a_non_finite_learning_rate_is_bad_input(store_path, value):
    result = runner.invoke(app, ["run", *TINY, "--lr", value])
    assert result.exit_code == 2
    assert "train.lr" in one_line_error(result) and not store_path.exists()


def _unwritable_folders(tmp_path: Path) -> list[Path]:
    """Folders this process really cannot write to: a read-only one of ours (unless root), and /sys (read-only)."""
    candidates = []
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    candidates.append(locked)
    candidates.append(Path("/sys"))
    found = []
    for folder in candidates:
        try:
            (folder / ".probe").touch()
            (folder / ".probe").unlink()
        except OSError:
            found.append(folder)
    return found


def test_a_bad_store_is_refused_before_any_training(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr(training, "train", lambda *a, **k: trained.append(a) or pytest.fail("trained"))
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_text("not a database")
    folder = tmp_path / "folder.db"
    folder.mkdir()
    beside_file = tmp_path / "corrupt.db" / "runs.db"
    unwritable = [f / "runs.db" for f in _unwritable_folders(tmp_path)]
    assert unwritable, "no unwritable folder found to test with"
    spec = tmp_path / "spec.yaml"
    spec.write_text("base: {task: {length: 12}, model: {width: 8}, train: {steps: 5}, device: cpu}\n")
    for path in [corrupt, folder, beside_file, *unwritable]:
        for args in (["run", *TINY], ["sweep", str(spec)]):
            result = runner.invoke(app, [*args, "--store", str(path)])
            assert result.exit_code == 2, (path, result.output)
            assert str(path) in one_line_error(result) or str(path.parent) in one_line_error(result)
    assert trained == []
    assert corrupt.read_text() == "not a database"


def test_results_on_a_corrupt_store_is_one_line(tmp_path):
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_text("not a database")
    result = runner.invoke(app, ["report", "--out", str(tmp_path / "r"), "--store", str(corrupt)])
    assert result.exit_code == 2 and "not a database" in one_line_error(result)


def test_a_run_too_large_for_memory_is_refused_up_front_with_an_estimate(store_path):
    result = runner.invoke(app, ["run", *TINY, "--width", "65536"])
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "needs about" in line and "GiB" in line and "free" in line
    assert not store_path.exists() or len(Store(store_path)) == 0


def test_memory_estimate_grows_with_width_length_and_batch():
    base = {"task": {"length": 50}, "model": {"width": 32}, "device": "cpu"}
    small = estimate_memory(RunConfig.build(base)).total
    for change in ({"model": {"width": 128}}, {"task": {"length": 200}}, {"train": {"batch_size": 256}}):
        assert estimate_memory(RunConfig.build({**base, **change})).total > small


def test_out_of_memory_errors_are_recognised():
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_construct_refuses_a_length_that_cannot_fit():
    result = runner.invoke(app, ["construct", "index_lookup", "--length", "1000000000", "--samples", "0"])
    assert result.exit_code == 2 and "needs at least" in one_line_error(result)


FAILING_SPEC = """
name: failing
base: {task: {name: index_lookup, length: 12}, model: {width: 8}, train: {steps: 4, eval_samples: 20}, device: cpu}
cases:
  - {task.eval_lengths: [[40]]}
  - {}
"""


def test_failed_runs_make_the_sweep_exit_1_and_are_retried_only_when_asked(store_path, tmp_path):
    spec = tmp_path / "failing.yaml"
    spec.write_text(FAILING_SPEC)
    first = runner.invoke(app, ["sweep", str(spec)])
    assert first.exit_code == 1
    assert "1 trained in" in first.stdout and "(0 diverged), 1 failed;" in first.stdout, first.stdout
    assert "cannot evaluate at 40" in first.stderr
    store = Store(store_path)
    (failed,) = [r for r in store.results() if r.status == "failed"]
    resumed = runner.invoke(app, ["sweep", str(spec)])
    assert resumed.exit_code == 1 and "0 to train" in resumed.stdout and "--retry-failed" in resumed.stderr
    retried = runner.invoke(app, ["sweep", str(spec), "--retry-failed"])
    assert retried.exit_code == 1 and "1 to train" in retried.stdout
    forced = runner.invoke(app, ["sweep", str(spec), "--force"])
    assert forced.exit_code == 1 and "2 to train" in forced.stdout
    assert len(store) == 2 and store.get(failed.config_hash).status == "failed"


def test_a_failed_width_shows_as_failed_never_as_unsolved(store_path):
    args = ["minwidth", "--task", "index_lookup", "--model", "transformer", "--lengths", "12", "--widths", "8,65536",
            "--layers", "1", "--steps", "20", "--k", "1", "--m", "1", "--device", "cpu",
            "--set", "train.eval_samples=50"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "65536:failed" in result.stdout and "65536:no" not in result.stdout
    assert "out of memory (estimated before training)" in result.stderr
    assert "error: 1 width of this width search failed" in result.stderr
    assert f"trained 0 new runs (0 steps), 1 failed (1 refused for memory); 1 run in {store_path}" in result.stdout
    (failed,) = Store(store_path).results(status="failed")
    assert failed.config.model.width == 65536 and "needs about" in failed.error


def test_a_sweep_never_counts_a_run_refused_for_memory_as_trained(store_path, tmp_path):
    spec = tmp_path / "too_wide.yaml"
    spec.write_text("name: too_wide\nbase: {task: {name: index_lookup, length: 12}, model: {name: transformer, "
                    "layers: 1}, train: {steps: 4, eval_every: 2, eval_samples: 20}, device: cpu}\n"
                    "grid: {model.width: [8, 65536]}\n")
    result = runner.invoke(app, ["sweep", str(spec)])
    assert result.exit_code == 1, result.output
    assert "sweep 'too_wide' done: 1 trained in " in result.stdout, result.stdout
    assert "(0 diverged), 1 failed (1 refused for memory); 2 runs in" in result.stdout, result.stdout
    assert "out of memory (estimated before training)" in result.stderr


def test_runs_from_other_code_are_flagged_and_retrained_only_when_asked(store_path, tmp_path):
    first = runner.invoke(app, ["run", *TINY])
    assert first.exit_code == 0, first.output
    store = Store(store_path)
    (current,) = store.results()
    assert current.code_version == code_version() and len(code_version()) == 12
    store.put(current.model_copy(update={"code_version": "0ldc0de0ldc0"}))
    shown = runner.invoke(app, ["run", *TINY])
    assert shown.exit_code == 0 and "other code" in shown.stderr and "--retrain-stale" in shown.stderr
    assert store.get(current.config_hash).code_version == "0ldc0de0ldc0"
    cfg = current.config
    assert plan([cfg], store).stale_kept == 1 and plan([cfg], store).todo == []
    assert plan([cfg], store, Reuse(retrain_stale=True)).todo == [cfg]
    retrained = runner.invoke(app, ["run", *TINY, "--retrain-stale"])
    assert retrained.exit_code == 0, retrained.output
    assert store.get(current.config_hash).code_version == code_version()


def test_the_code_version_covers_only_what_decides_a_result():
    from sepbench.train.environment import RESULT_CODE

    root = Path(training.__file__).resolve().parents[1]
    assert all((root / part).exists() for part in RESULT_CODE)
    assert "cli.py" not in RESULT_CODE and "report" not in RESULT_CODE and "train" in RESULT_CODE


def test_minwidth_fits_no_law_through_widths_censored_at_the_grid_edge(store_path):
    store = Store(store_path)
    for n in (12, 14, 16):
        cfg = RunConfig.build({"task": {"name": "index_lookup", "length": n}, "seed": 0, "device": "cpu",
                               "model": {"name": "transformer", "layers": 1, "width": 8}, "train": {"steps": 2}})
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="solved", metrics={"accuracy": 1.0},
                            code_version=code_version()))
    args = ["minwidth", "--task", "index_lookup", "--model", "transformer", "--lengths", "12,14,16", "--widths", "8",
            "--layers", "1", "--steps", "2", "--k", "1", "--m", "1", "--device", "cpu"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "trained 0 new runs" in result.stdout
    assert result.stdout.count("censored at the grid's smallest width 8") == 3
    assert "no fit" in result.stdout and "alpha" not in result.stdout


def test_a_group_too_large_for_memory_is_stored_failed_per_member(store_path):
    from sepbench.sweep import run_sweep

    configs = [RunConfig.build({"task": {"length": 12}, "model": {"width": 65536}, "seed": seed, "device": "cpu"})
               for seed in (0, 1)]
    outcome = run_sweep(configs, Store(store_path), group_size=2)
    assert [r.status for r in outcome.results] == ["failed", "failed"]
    assert all("needs about" in r.error for r in Store(store_path).results())


def test_a_grid_sweep_trains_a_pruned_run_in_full(tmp_path):
    store = Store(tmp_path / "s.db")
    cfg = RunConfig.build({"task": {"length": 12}, "model": {"width": 8}, "device": "cpu"})
    store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="pruned", steps=100,
                        code_version=code_version()))
    assert plan([cfg], store).todo == [cfg]
    store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", code_version=code_version()))
    assert plan([cfg], store).todo == []
