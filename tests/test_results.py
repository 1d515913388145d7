import io
import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from sepbench import RunConfig, Store
from sepbench.cli import app
from sepbench.config import apply_overrides
from sepbench.train.result import RunResult

runner = CliRunner()
BASE = apply_overrides({}, {"task.name": "index_lookup", "model.name": "transformer", "task.length": 12,
                            "task.eval_lengths": [24], "model.width": 8, "train.steps": 5, "device": "cpu"})
SEEDS = {0: ("solved", 1.0, None), 1: ("completed", 0.5, None), 2: ("diverged", None, "non-finite loss at step 3"),
         3: ("failed", None, "RuntimeError: out of memory [tried 2 GiB]")}


def seeded_store(path) -> list[RunResult]:
    """One cell at four seeds: two trained (accuracy 1.0 and 0.5), one diverged, one failed."""
    store, results = Store(path), []
    for seed, (status, accuracy, error) in SEEDS.items():
        cfg = RunConfig.build(apply_overrides(BASE, {"seed": seed}))
        metrics = {} if accuracy is None else {"accuracy": accuracy, "loss": 0.25 + seed, "accuracy@24": accuracy / 2}
        result = RunResult(config=cfg, config_hash=cfg.config_hash(), status=status, metrics=metrics, error=error,
                           steps=5, wall_seconds=1.5 + seed, parameters=0 if status == "failed" else 1234,
                           state_floats=56, device="cpu",
                           version="0.1.0", git_commit="abc123")
        store.put(result)
        results.append(result)
    return results


def invoke(*args):
    return runner.invoke(app, ["results", *args])


def test_by_seed_csv_has_every_metric_detail_and_the_flattened_config(tmp_path):
    results = seeded_store(tmp_path / "runs.db")
    done = invoke("--store", str(tmp_path / "runs.db"), "--format", "csv", "--by-seed")
    assert done.exit_code == 0, done.output
    frame = pd.read_csv(io.StringIO(done.stdout)).set_index("seed")
    assert len(frame) == 4 and list(frame.config_hash) == [r.config_hash for r in results]
    for column in ["loss", "accuracy@24", "parameters", "state_floats", "error", "status", "device", "version",
                   "git_commit", "wall_seconds", "config.task.length", "config.train.lr", "config.model.heads"]:
        assert column in frame.columns, column
    assert frame.loc[1, "loss"] == 1.25 and frame.loc[1, "accuracy@24"] == 0.25 and frame.loc[3, "wall_seconds"] == 4.5
    assert frame.loc[2, "error"] == "non-finite loss at step 3" and frame.loc[2, "status"] == "diverged"
    assert pd.isna(frame.loc[2, "accuracy"]) and pd.isna(frame.loc[3, "accuracy"])
    assert frame.loc[2, "parameters"] == 1234 and pd.isna(frame.loc[3, "parameters"])  # failed before its model
    assert json.loads(frame.loc[0, "config.task.eval_lengths"]) == [24] and (frame["config.task.length"] == 12).all()
    assert not {"config.train.checkpoint_every", "config.train.tensorboard"} & set(frame.columns)  # never stored


def test_default_view_aggregates_seeds_and_keeps_failures_out_of_the_accuracy(tmp_path):
    results = seeded_store(tmp_path / "runs.db")
    done = invoke("--store", str(tmp_path / "runs.db"), "--format", "json")
    assert done.exit_code == 0, done.output
    (cell,) = json.loads(done.stdout)
    assert (cell["runs"], cell["solved"], cell["trained"], cell["diverged"], cell["failed"]) == (4, 1, 2, 1, 1)
    assert (cell["accuracy_mean"], cell["accuracy_min"], cell["accuracy_max"]) == (0.75, 0.5, 1.0)
    assert cell["accuracy@24_mean"] == 0.375 and cell["loss_mean"] == 0.75 and cell["seeds"] == "0,1,2,3"
    assert "non-finite loss at step 3" in cell["errors"] and "out of memory" in cell["errors"]
    assert cell["config_hashes"].split(",") == [r.config_hash for r in results]
    assert cell["config.task.length"] == 12 and "config.seed" not in cell
    assert cell["parameters"] == 1234  # the failed seed's unknown count is not the cell's
    stricter = json.loads(invoke("--store", str(tmp_path / "runs.db"), "--format", "json", "--threshold", "0.4").stdout)
    assert stricter[0]["solved"] == 2


def test_a_cell_counts_as_solved_the_runs_at_its_own_threshold_unless_told_another(tmp_path):
    store = Store(tmp_path / "runs.db")
    for seed, accuracy in enumerate((0.92, 0.95, 0.85)):
        cfg = RunConfig.build(apply_overrides(BASE, {"seed": seed, "train.threshold": 0.9}))
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="solved" if accuracy >= 0.9 else
                            "completed", metrics={"accuracy": accuracy}, steps=5, wall_seconds=1.0))
    (cell,) = json.loads(invoke("--store", str(tmp_path / "runs.db"), "--format", "json").stdout)
    assert (cell["solved"], cell["trained"]) == (2, 3)
    strict_json = invoke("--store", str(tmp_path / "runs.db"), "--format", "json", "--threshold", "0.99").stdout
    (strict,) = json.loads(strict_json)
    assert strict["solved"] == 0
    table = runner.invoke(app, ["results", "--store", str(tmp_path / "runs.db")], terminal_width=200)
    assert "│    2/3 │" in table.stdout and "final accuracy >= the cell's own train.threshold" in table.stdout


def test_table_shows_whole_hashes_and_failures_at_80_columns(tmp_path):
    results = seeded_store(tmp_path / "runs.db")
    cells = runner.invoke(app, ["results", "--store", str(tmp_path / "runs.db")], terminal_width=80)
    assert cells.exit_code == 0, cells.output
    cell = json.loads(invoke("--store", str(tmp_path / "runs.db"), "--format", "json").stdout)[0]["cell"]
    assert f"│ {cell} │" in cells.stdout and "│    1/2 │" in cells.stdout and "1 diverged" in cells.stdout
    assert "0.7500" in cells.stdout and "…" not in cells.stdout
    runs = runner.invoke(app, ["results", "--store", str(tmp_path / "runs.db"), "--by-seed"], terminal_width=80)
    assert runs.exit_code == 0 and "…" not in runs.stdout
    assert all(f"│ {r.config_hash} │" in runs.stdout for r in results)
    assert "non-finite loss at step 3" in runs.stdout and "accuracy@24" in runs.stdout


def test_parquet_export_round_trips_and_needs_a_file(tmp_path):
    pytest.importorskip("pyarrow")
    seeded_store(tmp_path / "runs.db")
    path = tmp_path / "out" / "runs.parquet"
    done = invoke("--store", str(tmp_path / "runs.db"), "--format", "parquet", "--by-seed", "--out", str(path))
    assert done.exit_code == 0, done.output
    expected = Store(tmp_path / "runs.db").table().sort_values("seed", ignore_index=True)
    pd.testing.assert_frame_equal(pd.read_parquet(path), expected, check_dtype=False)
    assert [p.name for p in path.parent.iterdir()] == ["runs.parquet"]
    cells = invoke("--store", str(tmp_path / "runs.db"), "--format", "parquet",
                   "--out", str(tmp_path / "cells.parquet"))
    assert cells.exit_code == 0 and pd.read_parquet(tmp_path / "cells.parquet").diverged.tolist() == [1]
    missing = invoke("--store", str(tmp_path / "runs.db"), "--format", "parquet")
    assert missing.exit_code == 2 and "--format parquet needs --out FILE" in missing.stderr


@pytest.mark.parametrize("args, code, fragment", [
    (["--store", "{tmp}/missing.db"], 2, "no store at {tmp}/missing.db; run `sepbench run`"),
    (["--model", "lstm"], 1, "no runs match model=lstm in {tmp}/runs.db (4 runs stored; models stored: transformer)"),
    (["--task", "dyck", "--format", "csv"], 1, "no runs match task=dyck in"),
    (["--threshold", "0"], 2, "--threshold must be in (0, 1]"),
    (["--out", "{tmp}/x.csv"], 2, "--out writes csv, json or parquet"),
])
def test_missing_store_and_empty_selections_say_so_in_one_line(tmp_path, args, code, fragment):
    seeded_store(tmp_path / "runs.db")
    base = {"--store": str(tmp_path / "runs.db")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value.format(tmp=tmp_path)
    done = invoke(*[x for kv in base.items() for x in kv])
    assert done.exit_code == code and done.stdout == ""
    assert fragment.format(tmp=tmp_path) in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "missing.db").exists() and not (tmp_path / "x.csv").exists()


def test_a_cell_whose_runs_all_failed_shows_no_parameter_count(tmp_path):
    store = Store(tmp_path / "runs.db")
    for seed in (0, 1):
        cfg = RunConfig.build(apply_overrides(BASE, {"seed": seed}))
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="failed", error="out of memory",
                            device="cpu", version="0.1.0"))
    (cell,) = json.loads(invoke("--store", str(tmp_path / "runs.db"), "--format", "json").stdout)
    assert cell["parameters"] is None and cell["failed"] == 2
    table = runner.invoke(app, ["results", "--store", str(tmp_path / "runs.db")], terminal_width=200)
    assert table.exit_code == 0, table.output
    header, row = (next(line for line in table.stdout.splitlines() if word in line) for word in ("parameters", "│ "
                                                                                                    + cell["cell"]))
    columns = [c.strip() for c in header.split("┃")]
    assert [c.strip() for c in row.split("│")][columns.index("parameters")] == "-"
