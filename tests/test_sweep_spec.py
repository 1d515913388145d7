import pytest
from typer.testing import CliRunner

from sepbench.cli import app
from sepbench.config import ConfigError
from sepbench.sweep import SweepSpec

BASE = {"task": {"name": "index_lookup", "length": 12}, "model": {"width": 16}, "train": {"steps": 5}, "device": "cpu"}


def test_expand_is_the_product_of_grid_zip_lrs_and_seeds():
    spec = SweepSpec.build({"name": "t", "base": BASE, "grid": {"model.name": ["transformer", "lstm"]},
                            "zip": [{"task.length": [12, 16], "train.steps": [5, 7]}],
                            "lr_grid": [1e-3, 3e-3], "seeds": [0, 1]})
    configs = spec.expand()
    assert len(configs) == 2 * 2 * 2 * 2 == len({c.config_hash() for c in configs})
    points = {(c.model.name, c.task.length, c.train.steps, c.train.lr, c.seed) for c in configs}
    assert (("lstm", 16, 7, 3e-3, 1) in points) and ("lstm", 16, 5, 3e-3, 1) not in points
    assert {c.model.width for c in configs} == {16} and spec.axes == ["model.name", "task.length", "train.steps",
                                                                        "train.lr", "seed"]


def test_cases_are_unioned_and_a_list_in_a_case_is_an_axis_of_that_case_only():
    spec = SweepSpec.build({"base": BASE, "grid": {"model.name": ["transformer", "lstm"]},
                            "cases": [{"task.length": [12, 16], "model.width": 8}, {"task.length": 20, "model.width": [8, 32]}]})
    cells = {(c.model.name, c.task.length, c.model.width) for c in spec.expand()}
    assert cells == {(m, n, w) for m in ("transformer", "lstm") for n, w in [(12, 8), (16, 8), (20, 8), (20, 32)]}
    assert spec.axes == ["model.width", "task.length", "model.name", "seed"]


def test_forcing_sets_a_key_in_every_run_over_the_axes_that_would_set_it_again():
    spec = SweepSpec.build({"base": BASE, "grid": {"model.name": ["transformer", "lstm"]},
                            "cases": [{"train.steps": 50, "task.length": [12, 16]}, {"task.length": 20}],
                            "zip": [{"model.width": [8, 32], "train.eval_every": [5, 7]}],
                            "lr_grid": [1e-3, 3e-3], "lr_search": "halving", "seeds": [0, 1, 2]})
    forced = spec.forcing({"steps": 3, "model.width": 64, "train.lr": 0.02, "seed": 7})
    configs = forced.expand()
    assert {(c.train.steps, c.model.width, c.train.lr, c.seed) for c in configs} == {(3, 64, 0.02, 7)}
    assert {(c.model.name, c.task.length, c.train.eval_every) for c in configs} == {
        (m, n, e) for m in ("transformer", "lstm") for n in (12, 16, 20) for e in (5, 7)}
    assert forced.lr_search == "grid" and forced.axes == ["task.length", "model.name", "train.eval_every", "seed"]
    assert spec.forcing({}) is spec and len(spec.expand()) == 2 * 3 * 2 * 2 * 3
    options = SweepSpec.build({"base": {**BASE, "task": {"name": "arithmetic", "length": 2}},
                               "grid": {"task.options.order": ["leftmost", "rightmost"]}})
    assert {c.task.options["order"] for c in options.forcing({"task.options": {"order": "random"}}).expand()} == {
        "random"}
    whole = SweepSpec.build({"base": BASE, "cases": [{"task.options": {"alphabet_size": 8}}]})
    with pytest.raises(ConfigError, match="--set task.options.alphabet_size: the spec sets the whole of task.options"):
        whole.forcing({"task.options.alphabet_size": 16})


def test_base_may_name_a_runconfig_file_beside_the_spec(tmp_path):
    (tmp_path / "protocol.yaml").write_text("task: {name: index_lookup, length: 14}\ndevice: cpu\n")
    (tmp_path / "spec.yaml").write_text("base: protocol.yaml\ngrid: {model.width: [8, 16]}\n")
    configs = SweepSpec.from_yaml(tmp_path / "spec.yaml").expand()
    assert {(c.task.length, c.model.width) for c in configs} == {(14, 8), (14, 16)}
    (tmp_path / "orphan.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(ConfigError, match="base: config file .*missing.yaml does not exist"):
        SweepSpec.from_yaml(tmp_path / "orphan.yaml")


def test_default_seed_and_no_lr_grid_keep_the_model_default_lr():
    from sepbench.models import MODELS

    (cfg,) = SweepSpec.build({"base": {**BASE, "model": {"name": "lstm"}}}).expand()
    assert cfg.seed == 0 and cfg.train.lr == MODELS.get("lstm").default_lr


@pytest.mark.parametrize("data, fragment", [
    ({"grids": {}}, "unknown field 'grids'; allowed: name, base, cases, grid, zip, seeds, lr_grid"),
    ({"grid": {"model.depth": [1]}}, "unknown key 'model.depth'"),
    ({"grid": {"model.width": []}}, "grid axis 'model.width' has no values"),
    ({"zip": [{"task.length": [12, 16], "model.width": [8]}]}, "needs non-empty lists of one length"),
    ({"grid": {"seed": [1, 2]}}, "'seed' is swept twice"),
    ({"grid": {"lr": [1e-3]}, "lr_grid": [1e-3]}, "'train.lr' is swept twice"),
    ({"lr_grid": [0.0]}, "lr_grid values must be > 0"),
    ({"grid": {"model.width": [8]}, "cases": [{"model.width": 16}]}, "'model.width' is set in cases[0] and swept in grid"),
    ({"cases": [{"model.width": 16}, {"model.width": []}]}, "cases[1] axis 'model.width' has no values"),
    ({"grid": {"model.width": [16, 0]}}, "model.width = 0"),
    ({"base": {"model": {"nme": "lstm"}}}, "unknown field 'model.nme'"),
])
def test_bad_specs_fail_with_one_line(data, fragment):
    with pytest.raises(ConfigError) as caught:
        SweepSpec.build({"base": BASE, **data}).expand()
    message = str(caught.value)
    assert fragment in message and "\n" not in message


def test_cli_rejects_a_bad_spec_with_exit_2_and_writes_nothing(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\nbase: {device: cpu}\ngrid: {model.width: [16, 0]}\n")
    store = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["sweep", str(spec), "--store", str(store)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "model.width = 0" in result.stderr and not store.exists()


def test_dry_run_lists_every_run_and_trains_nothing(tmp_path):
    store = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["sweep", "tests/data/sweep_quick.yaml", "--store", str(store), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "12 runs, 0 already in" in result.stdout and result.stdout.count("model.name=") == 12
    assert not store.exists()
