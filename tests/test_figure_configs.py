"""The paper's figure specs in configs/bhattamishra2024 expand to valid runs."""
from pathlib import Path

import pytest

from sepbench import configs as packaged
from sepbench.sweep import SweepSpec

ROOT = packaged.path("bhattamishra2024")
SPECS = sorted(ROOT.rglob("*.yaml"))


def expand(path: Path):
    return SweepSpec.from_yaml(path).expand()


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_spec_expands_to_distinct_valid_runs(path):
    spec = SweepSpec.from_yaml(path)
    configs = spec.expand()
    assert configs and len({c.config_hash() for c in configs}) == len(spec.points())


def test_quick_specs_hold_the_issue_comparisons():
    quick = {p.stem: expand(p) for p in SPECS if p.parent.name == "quick"}
    (tf,), (lstm,) = quick["index_lookup_transformer"], quick["index_lookup_lstm"]
    assert (tf.model.name, tf.model.layers, tf.model.width, tf.task.length) == ("transformer", 1, 64, 100)
    assert (lstm.model.name, lstm.model.width, lstm.task.length) == ("lstm", 256, 100)
    assert tf.train == lstm.train
    (dyck_lstm,), (dyck_tf,) = quick["dyck_lstm"], quick["dyck_transformer"]
    assert (dyck_lstm.model.name, dyck_lstm.model.width, dyck_tf.model.layers) == ("lstm", 64, 1)
    assert dyck_lstm.train == dyck_tf.train and dyck_lstm.task == dyck_tf.task
    mamba = quick["mamba_width"]
    assert {c.model.name for c in mamba} == {"mamba"} and len({c.task.model_dump_json() for c in mamba}) == 1
    assert len({c.model.width for c in mamba}) >= 3 and len({c.train.model_dump_json() for c in mamba}) == 1


def test_paper_scale_lengths():
    index_lookup = expand(ROOT / "fig2_index_lookup_transformer.yaml")
    assert sorted({c.task.length for c in index_lookup}) == [20, 50, 100, 200, 400]
    assert {c.train.steps for c in index_lookup} == {250_000}


def test_paper_specs_select_the_best_of_the_papers_lr_grid_with_adam_alone():
    spec = SweepSpec.from_yaml(ROOT / "fig2_index_lookup_recurrent.yaml")
    assert spec.lr_grid == [1e-2, 5e-3, 1e-3, 5e-4, 1e-4, 5e-5, 1e-6]  # L866 lists seven rates
    assert spec.seeds == [0, 1, 2]
    trains = {(c.train.optimizer, c.train.warmup_steps, c.train.grad_clip) for c in spec.expand()}
    assert trains == {("adam", 0, None)}  # L194
