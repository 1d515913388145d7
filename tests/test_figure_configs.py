"""The paper's figure specs in configs/bhattamishra2024 expand to valid runs."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "configs" / "bhattamishra2024").rglob("*.yaml"))
_spec = importlib.util.spec_from_file_location("run_quick_separation", ROOT / "scripts" / "run_quick_separation.py")
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_spec_expands_to_distinct_valid_runs(path):
    configs = runner.expand(path)
    assert configs and len({c.config_hash() for c in configs}) == len(configs)


def test_quick_specs_hold_the_issue_comparisons():
    quick = {p.stem: runner.expand(p) for p in SPECS if p.parent.name == "quick"}
    (tf,), (lstm,) = quick["index_lookup_transformer"], quick["index_lookup_lstm"]
    assert (tf.model.name, tf.model.layers, tf.model.width, tf.task.length) == ("transformer", 1, 64, 100)
    assert (lstm.model.name, lstm.model.width, lstm.task.length) == ("lstm", 256, 100)
    assert tf.train == lstm.train
    (dyck_lstm,), (dyck_tf,) = quick["dyck_lstm"], quick["dyck_transformer"]
    assert (dyck_lstm.model.name, dyck_lstm.model.width, dyck_tf.model.layers) == ("lstm", 64, 1)
    assert dyck_lstm.train == dyck_tf.train and dyck_lstm.task == dyck_tf.task


def test_paper_scale_lengths():
    index_lookup = runner.expand(ROOT / "configs" / "bhattamishra2024" / "fig2_index_lookup_transformer.yaml")
    assert sorted({c.task.length for c in index_lookup}) == [20, 50, 100, 200, 400]
    assert {c.train.steps for c in index_lookup} == {250_000}


def test_unknown_section_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: {task: {name: dyck, length: 20}}\ngrids: {}\n")
    with pytest.raises(SystemExit, match="unknown sections \\['grids'\\]; allowed: base, grid, seeds"):
        runner.expand(bad)
