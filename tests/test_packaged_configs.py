"""Configs ship inside the package: found from any working directory; a missing optional dependency is one line."""
import runpy
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sepbench import configs
from sepbench.cli import app

runner = CliRunner()
DEMO = "configs/demo/index_lookup_separation.yaml"


def test_the_repository_configs_folder_is_the_packaged_one():
    repo = Path(__file__).resolve().parents[1] / "configs"
    assert repo.resolve() == configs.ROOT.resolve()
    assert {"bhattamishra2024", "demo", "deng2023", "yang2024"} <= {p.name for p in configs.ROOT.iterdir()}


@pytest.mark.parametrize("name", [DEMO, "demo/index_lookup_separation.yaml"])
def test_a_config_named_as_documented_resolves_to_the_packaged_file(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert configs.locate(name) == (configs.path("demo", "index_lookup_separation.yaml"), True)


@pytest.mark.parametrize("name", ["configs/demo/nope.yaml", "../demo/index_lookup_separation.yaml", "configs", "demo"])
def test_names_without_a_packaged_file_come_back_unchanged(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert configs.locate(name) == (Path(name), False)


def test_a_local_file_wins_over_the_packaged_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = tmp_path / DEMO
    local.parent.mkdir(parents=True)
    local.write_text("name: mine\n")
    assert configs.locate(DEMO) == (Path(DEMO), False)


def test_sweep_outside_the_checkout_uses_the_packaged_spec_and_says_so(tmp_path, monkeypatch, store_path):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["sweep", DEMO, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sweep 'index_lookup_separation': 36 runs" in result.stdout
    (note,) = result.stderr.strip().splitlines()
    assert note.startswith(f"{DEMO} is not in ") and note.endswith(f"using the packaged {configs.path(DEMO[8:])}")


def test_run_and_minwidth_read_a_packaged_base_config(tmp_path, monkeypatch, store_path):
    monkeypatch.chdir(tmp_path)
    run = runner.invoke(app, ["run", "--config", "configs/yang2024/quick.yaml", "--set", "train.steps=0"])
    search = runner.invoke(app, ["minwidth", "--task", "lis", "--model", "lstm", "--lengths", "4", "--widths", "0",
                                 "--config", "yang2024/quick.yaml"])
    for result in (run, search):
        note, problem = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and "using the packaged" in note
        assert "does not exist" not in problem and ("train.steps" in problem or "model.width" in problem)
    assert not store_path.exists()


def test_a_missing_spec_is_still_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["sweep", "configs/demo/nope.yaml"])
    assert result.exit_code == 2 and result.stderr == "error: config file configs/demo/nope.yaml does not exist\n"


@pytest.fixture
def no_matplotlib(monkeypatch):
    """Make ``import matplotlib`` fail as it does where the report extra is not installed."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)


@pytest.mark.parametrize("args, command", [
    (["report", "--out", "{out}"], "sepbench report"),
    (["softmax-vs-linear", "fig4a", "--trials", "1", "--out", "{out}"], "sepbench softmax-vs-linear"),
])
def test_without_matplotlib_the_command_names_the_extra(args, command, tmp_path, store_path, no_matplotlib):
    out = tmp_path / "out"
    result = runner.invoke(app, [str(out) if a == "{out}" else a for a in args])
    assert result.exit_code == 2
    assert result.stderr == f"error: {command} needs matplotlib: pip install 'sepbench[report]'\n"
    assert not out.exists() and not store_path.exists()


def test_the_demo_without_matplotlib_names_the_extra(tmp_path, monkeypatch, capsys, no_matplotlib):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "sepbench.demo", raising=False)
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("sepbench.demo", run_name="__main__")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: the demo needs matplotlib: pip install 'sepbench[report]'\n"
    assert not (tmp_path / "runs").exists()
