"""Every run of the Yang et al. 2024 sweep specs in configs/yang2024/ is a valid RunConfig."""
from pathlib import Path

import pytest

from sepbench import configs as packaged
from sepbench.config import RunConfig, load_yaml
from sepbench.sweep import SweepSpec

ROOT = packaged.path("yang2024")
SPECS = sorted(p for p in ROOT.glob("fig*.yaml"))


def expand(spec_path: Path) -> list[RunConfig]:
    return SweepSpec.from_yaml(spec_path).expand()


def test_protocol_is_the_papers():
    cfg = RunConfig.build(load_yaml(ROOT / "protocol.yaml"))
    assert (cfg.model.layers, cfg.model.heads, cfg.model.positions, cfg.model.dropout) == (3, 4, "sinusoidal", 0.1)
    assert (cfg.train.optimizer, cfg.train.lr, cfg.train.weight_decay, cfg.train.betas) == ("adamw", 1e-4, 0.01, (0.9, 0.999))
    assert cfg.train.batch_size * cfg.train.steps == pytest.approx(100 * 1_000_000, rel=1e-5)  # 100 epochs
    assert (cfg.train.train_size, cfg.train.eval_samples) == (1_000_000, 100_000)


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_sweep_specs_expand_to_valid_runs(spec):
    configs = expand(spec)
    assert configs and len({c.config_hash() for c in configs}) == len(SweepSpec.from_yaml(spec).points())
    assert {c.model.name for c in configs} <= {"transformer", "sparse_transformer", "linear_transformer"}


def test_fig1_covers_the_papers_grid():
    runs = expand(ROOT / "fig1.yaml")
    cells = {(r.task.name, r.task.length, r.model.name, r.model.width) for r in runs}
    assert len(cells) == len(runs) == 3 * 4 * (5 + 6 + 6)
    assert ("arithmetic", 16, "linear_transformer", 512) in cells and ("lis", 250, "sparse_transformer", 1024) in cells


def test_quick_specs_keep_the_comparisons_and_share_the_ed_runs():
    fig1, fig2, fig3 = (expand(ROOT / f"fig{i}_quick.yaml") for i in (1, 2, 3))
    models = {"transformer", "sparse_transformer", "linear_transformer"}
    for task in ("arithmetic", "lis"):
        runs = [r for r in fig1 if r.task.name == task]
        assert {r.model.name for r in runs} == models and len({r.task.length for r in runs}) == 2
        assert len({r.model.width for r in runs}) >= 3
    assert {r.task.options.get("order") for r in fig1 if r.task.name == "arithmetic"} == {"leftmost"}
    assert {r.task.name for r in fig2} == {"edit_distance", "ed_local"}
    assert {r.model.layers for r in fig3} == {3, 5} and {r.model.name for r in fig3} == models
    shared = {r.config_hash() for r in fig2 if r.task.name == "edit_distance"}
    assert shared and shared <= {r.config_hash() for r in fig3}
    assert len({r.train.model_dump_json() for r in fig1 + fig2 + fig3}) == 1
