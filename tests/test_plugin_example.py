"""The example plugin package (examples/sepbench-window) down the whole path docs/extending.md walks: checked,
swept on two pool workers, and placed on a claim, by import path here and installed by its entry points in a venv."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sepbench.claims import select
from sepbench.claims.placement import added_model_configs
from sepbench.cli import app
from sepbench.config import parse_assignments
from sepbench.store import Store

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "sepbench-window"
MIXER, TASK = "sepbench_window.mixer:SlidingWindowAttention", "sepbench_window.task:LagLookup"
TINY = ["--set", "train.steps=2", "--set", "train.eval_every=2", "--set", "train.eval_samples=20", "--set", "device=cpu"]


def tiny_spec(folder: Path, mixer: str, task: str) -> Path:
    """The example's sweep spec with its plugins named ``mixer`` and ``task``, a few steps per run."""
    spec = yaml.safe_load((EXAMPLE / "sweep.yaml").read_text())
    spec["base"]["task"]["name"] = task
    spec["base"]["model"]["name"] = mixer
    spec["base"]["train"].update(steps=3, eval_every=3, eval_samples=20)
    spec["cases"][0]["model.name"] = mixer
    spec["zip"][0]["task.name"][0] = task
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_by_import_path_checked_swept_on_two_workers_and_placed(tmp_path, monkeypatch, store_path):
    from sepbench import cli

    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))  # spawned pool workers start with this process's path
    monkeypatch.setattr(cli.out, "width", 240)  # the console's width is fixed when sepbench.cli is first imported
    runner = CliRunner()
    mixer = runner.invoke(app, ["check-plugin", MIXER, "--learn-steps", "400"])
    assert mixer.exit_code == 0 and "8 passed, 0 failed, 0 absent" in mixer.stdout, mixer.output
    task = runner.invoke(app, ["check-plugin", TASK, "--length", "20", "--samples", "500"])
    assert task.exit_code == 0 and "5 passed, 0 failed, 0 absent" in task.stdout, task.output

    swept = runner.invoke(app, ["sweep", str(tiny_spec(tmp_path, MIXER, TASK)), "--workers", "2"])
    assert swept.exit_code == 0, swept.output
    assert "8 trained" in swept.stdout and "2 workers" in swept.stdout
    runs = Store(store_path).results()
    assert {r.status for r in runs} <= {"solved", "completed"}
    assert {(r.config.model.name, r.config.task.name) for r in runs} == {
        (MIXER, TASK), (MIXER, "index_lookup"), ("transformer", TASK), ("transformer", "index_lookup")}

    placed = runner.invoke(app, ["reproduce", "--claim", "il-tf-vs-recurrent", "--with-model", MIXER, *TINY])
    assert placed.exit_code == 0, placed.output
    (claim,) = select(None, ["il-tf-vs-recurrent"])
    overrides = parse_assignments(TINY[1::2])
    added = len(added_model_configs(claim, "quick", MIXER, overrides))
    catalogue = len({c.config_hash() for spec in claim.sweep_specs("quick", overrides) for c in spec.expand()})
    assert f"{added} runs of" in placed.stdout and f"{MIXER}-(1, 64)" in placed.stdout
    assert f"{catalogue} runs of the catalogue's models for il-tf-vs-recurrent are not in the store" in placed.stderr


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEPBENCH_STORE")}
    result = subprocess.run([str(a) for a in args], cwd=cwd, env={**env, "OMP_NUM_THREADS": "1", "COLUMNS": "200"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def venv_with_the_example(root: Path) -> Path:
    """A venv where this checkout's sepbench is importable and the example is installed editable (``pip install
    -e``), so its entry points name the plugins; the dependencies come from this interpreter's."""
    venv = root / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
    python = venv / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=root).stdout.strip()
    (Path(site) / "sepbench_test_deps.pth").write_text(f"{REPO / 'src'}\n{sysconfig.get_paths()['purelib']}\n")
    package = root / "sepbench-window"
    shutil.copytree(EXAMPLE, package, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-build-isolation", "--no-index",
        "-q", "-e", package, cwd=root)
    return venv


@pytest.fixture(scope="module")
def example_venv(tmp_path_factory) -> Path:
    return venv_with_the_example(tmp_path_factory.mktemp("example"))


@pytest.mark.slow
def test_installed_by_entry_points_in_a_venv(example_venv, tmp_path):
    sepbench = [example_venv / "bin" / "python", "-m", "sepbench"]
    listed = run(*sepbench, "models", cwd=tmp_path).stdout
    assert "sliding_window" in listed and "sepbench-window" in listed
    assert "5 passed, 0 failed" in run(*sepbench, "check-plugin", "lag_lookup", "--length", "20", "--samples", "200",
                                       cwd=tmp_path).stdout
    swept = run(*sepbench, "sweep", tiny_spec(tmp_path, "sliding_window", "lag_lookup"), "--workers", "2",
                "--store", "runs.db", cwd=tmp_path)
    assert "8 trained" in swept.stdout
    read_there = "from sepbench.store import Store; print(sorted({r.config.model.name for r in Store('runs.db').results()}))"
    assert run(example_venv / "bin" / "python", "-c", read_there, cwd=tmp_path).stdout.strip() == \
        "['sliding_window', 'transformer']"
    here = Store(tmp_path / "runs.db")
    assert {r.config.model.name for r in here.results()} == {"transformer"}  # no plugin installed in this process
    assert len(here.unreadable) == 6 and all("sliding_window" in why or "lag_lookup" in why for _, why in here.unreadable)


@pytest.mark.slow
def test_installed_plugins_run_on_a_local_ray_instance(example_venv, tmp_path):
    pytest.importorskip("ray")
    on_ray = run(example_venv / "bin" / "python", "-m", "sepbench", "sweep",
                 tiny_spec(tmp_path, "sliding_window", "lag_lookup"), "--workers", "2", "--backend", "ray",
                 "--store", "ray.db", cwd=tmp_path)
    assert "8 to train (ray, 2 workers)" in on_ray.stdout and "8 trained" in on_ray.stdout
    assert "0 failed" in on_ray.stdout
