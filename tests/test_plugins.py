"""Plugins: mixers and tasks named by import path or by an installed entry point, wherever a config is built."""
import itertools
import re
import textwrap

import pytest
from typer.testing import CliRunner

from sepbench.cli import app
from sepbench.config import ConfigError, RunConfig
from sepbench.models import MODELS
from sepbench.models.mixers.lstm import LSTMMixer
from sepbench.plugins import PluginError, load_import_path
from sepbench.store import Store
from sepbench.tasks import TASKS
from sepbench.tasks.lookup import IndexLookup

runner = CliRunner()
MODULE_NUMBERS = itertools.count()
PLUGIN_MODULE = """
import torch

from sepbench.models.mixers.lstm import LSTMMixer
from sepbench.tasks.lookup import IndexLookup


class RenamedLSTM(LSTMMixer):
    \"\"\"The LSTM mixer under a plugin's name.\"\"\"

    default_lr = 0.004


class RenamedLookup(IndexLookup):
    \"\"\"Index Lookup under a plugin's name.\"\"\"


class Stepless(LSTMMixer):
    \"\"\"An LSTM without a step path.\"\"\"

    def init_state(self, batch_size, device, dtype):
        raise NotImplementedError


class PeekingLSTM(LSTMMixer):
    \"\"\"Adds the next token's input to each output: not causal.\"\"\"

    def forward(self, x):
        return super().forward(x) + torch.roll(x, -1, dims=1)


class NeverBuilds(IndexLookup):
    \"\"\"A task that refuses every size.\"\"\"

    def __init__(self, length, options=None):
        raise ValueError("this task is broken")


class OffByOneLookup(IndexLookup):
    \"\"\"Index Lookup whose samples point one symbol too far.\"\"\"

    def sample_eval(self, n, rng, length=None):
        batch = super().sample_eval(n, rng, length)
        batch.targets[batch.mask] = (batch.targets[batch.mask] + 1) % self.vocab_size
        return batch


class NotAMixer:
    pass


VALUE = 3
"""


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch):
    """Tables as wide as their rows: the console's width is fixed when sepbench.cli is first imported."""
    from sepbench import cli

    monkeypatch.setattr(cli.out, "width", 240)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A plugin module on the path, under a name no other test uses (the import system caches modules)."""
    name = f"sepbench_test_plugin_{next(MODULE_NUMBERS)}"
    (tmp_path / f"{name}.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_import_path_names_a_mixer_and_a_task(plugin):
    cfg = RunConfig.build({"model": {"name": f"{plugin}:RenamedLSTM"},
                           "task": {"name": f"{plugin}:RenamedLookup", "length": 12}})
    mixer, task = MODELS.get(cfg.model.name), TASKS.get(cfg.task.name)
    assert issubclass(mixer, LSTMMixer) and mixer.__name__ == "RenamedLSTM"
    assert issubclass(task, IndexLookup) and task.__name__ == "RenamedLookup"
    assert cfg.train.lr == 0.004  # the plugin's own default
    assert cfg.model.name not in MODELS.names()  # plugins never join the built-in list


def test_entry_point_of_an_installed_distribution(plugin, tmp_path):
    dist = tmp_path / "my_mixers-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-mixers\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [sepbench.mixers]
        renamed_lstm_{plugin} = {plugin}:RenamedLSTM
        [sepbench.tasks]
        renamed_lookup_{plugin} = {plugin}:RenamedLookup
        """))
    cfg = RunConfig.build({"model": {"name": f"renamed_lstm_{plugin}"},
                           "task": {"name": f"renamed_lookup_{plugin}", "length": 12}})
    assert MODELS.get(cfg.model.name).__name__ == "RenamedLSTM"
    assert TASKS.get(cfg.task.name).__name__ == "RenamedLookup"
    with pytest.raises(ConfigError, match=f"installed plugins renamed_lstm_{plugin}"):
        RunConfig.build({"model": {"name": "no_such_model"}})
    listed = runner.invoke(app, ["models"])
    assert f"renamed_lstm_{plugin}" in listed.stdout and "my-mixers" in listed.stdout


@pytest.mark.parametrize("name, reason", [
    ("{plugin}:Missing", "module {plugin} has no 'Missing'"),
    ("{plugin}:NotAMixer", "is the class NotAMixer, not a subclass of sepbench.models.mixers.base.Mixer"),
    ("{plugin}:VALUE", r"not a class \(a int\)"),
    ("no_such_package_29.mixers:Mixer", "importing module no_such_package_29.mixers failed: ModuleNotFoundError"),
    ("sepbench.models.mixers.base:Mixer", "is abstract: it does not implement"),
    (":Mixer", "is not an import path"),
])
def test_bad_plugins_are_one_line_config_errors(plugin, name, reason):
    name = name.format(plugin=plugin)
    with pytest.raises(ConfigError) as caught:
        RunConfig.build({"model": {"name": name}})
    message = str(caught.value)
    assert f"model plugin '{name}'" in message and "\n" not in message
    assert re.search(reason.format(plugin=plugin), message), message


def test_a_plugin_whose_import_raises_names_the_error(tmp_path, monkeypatch):
    (tmp_path / "plugin_raising.py").write_text("raise RuntimeError('cannot start\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"^task plugin 'plugin_raising:T': importing module plugin_raising failed: "
                                          r"RuntimeError: cannot start$"):
        load_import_path("plugin_raising:T", "task")
    with pytest.raises(PluginError, match="RuntimeError: cannot start$"):
        TASKS.get("plugin_raising:T")
    (tmp_path / "plugin_exiting.py").write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(PluginError, match=r"^task plugin 'plugin_exiting:T': importing module plugin_exiting failed: "
                                          r"SystemExit: 0$"):
        load_import_path("plugin_exiting:T", "task")


def test_cli_flags_and_set_take_plugins(plugin, store_path):
    common = ["run", "--length", "12", "--width", "16", "--steps", "2", "--device", "cpu",
              "--set", "train.eval_every=2", "--set", "train.eval_samples=20"]
    by_flag = runner.invoke(app, common + ["--model", f"{plugin}:RenamedLSTM", "--task", f"{plugin}:RenamedLookup"])
    assert by_flag.exit_code == 0, by_flag.output
    by_set = runner.invoke(app, common + ["--set", f"model.name={plugin}:RenamedLSTM"])
    assert by_set.exit_code == 0, by_set.output
    assert f"{plugin}:RenamedLSTM" in by_flag.stdout
    stored = sorted((r.config.task.name, r.config.model.name) for r in Store(store_path).results())
    assert stored == [("index_lookup", f"{plugin}:RenamedLSTM"), (f"{plugin}:RenamedLookup", f"{plugin}:RenamedLSTM")]


def test_cli_refuses_a_bad_plugin_with_exit_2_and_trains_nothing(plugin, store_path):
    result = runner.invoke(app, ["run", "--model", f"{plugin}:NotAMixer", "--length", "12", "--steps", "2"])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"model plugin '{plugin}:NotAMixer'" in line
    assert not store_path.exists()


def check_plugin(*args: str):
    return runner.invoke(app, ["check-plugin", *args])


def test_check_plugin_passes_a_mixer_and_names_a_missing_step_path(plugin):
    good = check_plugin(f"{plugin}:RenamedLSTM", "--learn-steps", "0")
    assert good.exit_code == 0, good.output
    assert "7 passed, 0 failed, 0 absent" in good.stdout
    stepless = check_plugin(f"{plugin}:Stepless", "--learn-steps", "0")
    assert stepless.exit_code == 0, stepless.output
    row = next(line for line in stepless.stdout.splitlines() if "step path = whole-sequence path" in line)
    assert "absent" in row and "no step path" in row
    assert "5 passed, 0 failed, 2 absent" in stepless.stdout


def test_check_plugin_fails_a_mixer_that_sees_the_future(plugin):
    result = check_plugin(f"{plugin}:PeekingLSTM", "--learn-steps", "0")
    assert result.exit_code == 1
    row = next(line for line in result.stdout.splitlines() if "causal" in line)
    assert "fail" in row and "not causal" in row


def test_check_plugin_checks_tasks(plugin):
    good = check_plugin(f"{plugin}:RenamedLookup", "--samples", "200")
    assert good.exit_code == 0 and "5 passed, 0 failed" in good.stdout, good.output
    wrong = check_plugin(f"{plugin}:OffByOneLookup", "--samples", "200")
    assert wrong.exit_code == 1
    row = next(line for line in wrong.stdout.splitlines() if "samples pass the checker" in line)
    assert "a sample_eval row fails the task's own checker" in row
    too_short = check_plugin(f"{plugin}:RenamedLookup", "--length", "3")
    assert too_short.exit_code == 2 and too_short.stderr.startswith(f"error: --length 3: {plugin}:RenamedLookup "
                                                                    "refuses it: options.min_length 10")
    broken = check_plugin(f"{plugin}:NeverBuilds", "--length", "20")  # the task's fault, not the size's
    assert broken.exit_code == 1, broken.output
    row = next(line for line in broken.stdout.splitlines() if "builds at N=20" in line)
    assert "fail" in row and "this task is broken" in broken.stdout and "check-plugin --length" in broken.stdout


@pytest.mark.parametrize("name, message", [("{plugin}:NotAMixer", "neither a sepbench Mixer nor a sepbench Task"),
                                           ("no_such_name", "unknown plugin 'no_such_name'")])
def test_check_plugin_refuses_what_is_no_plugin(plugin, name, message):
    result = check_plugin(name.format(plugin=plugin))
    assert result.exit_code == 2 and message in result.stderr


TINY = ["--set", "train.steps=2", "--set", "train.eval_every=2", "--set", "train.eval_samples=20", "--set", "device=cpu"]


def test_added_model_takes_every_catalogue_setting_of_the_claim(plugin):
    from sepbench.claims import select
    from sepbench.claims.placement import added_model_configs

    (claim,) = select(claim_ids="dyck-depth")
    added = added_model_configs(claim, "quick", f"{plugin}:RenamedLSTM")
    catalogue = claim.configs("quick")
    assert {c.model.name for c in added} == {f"{plugin}:RenamedLSTM"}
    settings = lambda c: (c.task.model_dump_json(), c.model.layers, c.model.width, c.train.lr, c.train.steps, c.seed)  # noqa: E731
    assert {settings(c) for c in added} == {settings(c) for c in catalogue}
    assert len(added) == len({settings(c) for c in catalogue})


def test_reproduce_with_model_trains_only_the_added_model(plugin, store_path):
    trained = runner.invoke(app, ["reproduce", "--claim", "dyck-depth", "--out", str(store_path.parent / "r"), *TINY])
    assert trained.exit_code == 0, trained.output
    catalogue = {r.config_hash: r.created_at for r in Store(store_path).results()}
    placed = runner.invoke(app, ["reproduce", "--claim", "dyck-depth", "--with-model", f"{plugin}:RenamedLSTM", *TINY])
    assert placed.exit_code == 0, placed.output
    after = {r.config_hash: r for r in Store(store_path).results()}
    assert {k: after[k].created_at for k in catalogue} == catalogue  # the catalogue's runs are reused, not retrained
    added = [r for k, r in after.items() if k not in catalogue]
    assert len(added) == 12 and {r.config.model.name for r in added} == {f"{plugin}:RenamedLSTM"}
    rows = [line for line in placed.stdout.splitlines() if line.startswith("│ dyck")]
    assert [row.split("│")[3].strip() for row in rows] == [
        "lstm-(1, 64)", "transformer-(1, 64)", f"{plugin}:RenamedLSTM-(1, 64)", "transformer-(2, 64)",
        f"{plugin}:RenamedLSTM-(2, 64)"]
    assert "not a verdict" in placed.stdout and "reproduced" not in placed.stdout
    assert "solved when >= 0.95 in 2 of 3 seeds" in " ".join(placed.stdout.split())  # dyck-depth's level, not 0.99


def test_reproduce_with_a_bad_model_exits_2_and_trains_nothing(plugin, store_path):
    result = runner.invoke(app, ["reproduce", "--claim", "dyck-depth", "--with-model", f"{plugin}:NotAMixer", *TINY])
    assert result.exit_code == 2 and f"model plugin '{plugin}:NotAMixer'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not store_path.exists()


def test_a_mixer_without_a_step_path_trains_and_stores_no_state_size(plugin, store_path):
    result = runner.invoke(app, ["run", "--model", f"{plugin}:Stepless", "--length", "12", "--width", "16", "--steps",
                                 "2", "--device", "cpu", "--set", "train.eval_every=2", "--set", "train.eval_samples=20"])
    assert result.exit_code == 0, result.output
    (stored,) = Store(store_path).results()
    assert stored.status in ("completed", "solved") and stored.state_floats is None and stored.parameters > 0


@pytest.mark.parametrize("by_seed", [[], ["--by-seed"]])
def test_results_name_the_runs_of_a_plugin_that_no_longer_imports(plugin, store_path, tmp_path, by_seed,
                                                                  monkeypatch):
    import sys

    from sepbench.registry import MODELS

    common = ["run", "--length", "12", "--width", "16", "--steps", "2", "--device", "cpu",
              "--set", "train.eval_every=2", "--set", "train.eval_samples=20"]
    assert runner.invoke(app, common + ["--model", f"{plugin}:RenamedLSTM"]).exit_code == 0
    assert runner.invoke(app, common + ["--model", "lstm"]).exit_code == 0
    (tmp_path / f"{plugin}.py").unlink()
    monkeypatch.delitem(sys.modules, plugin)
    monkeypatch.delitem(MODELS._plugin_entries, f"{plugin}:RenamedLSTM")  # as a new process finds it
    shown = runner.invoke(app, ["results", *by_seed])
    assert shown.exit_code == 0, shown.output
    (warning,) = shown.stderr.strip().splitlines()
    assert warning.startswith("warning: stored run ") and f"importing module {plugin} failed" in warning, warning
    assert re.search(r"\b1 run\b", shown.stdout) and "lstm" in shown.stdout
