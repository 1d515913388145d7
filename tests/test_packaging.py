"""A plain (non-editable) install: build the wheel, install it in a fresh venv, run the demo and a figure elsewhere."""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO_STEP = """
import sys
from pathlib import Path

import yaml

import sepbench
from sepbench import demo

assert Path(sepbench.__file__).is_relative_to(sys.prefix), sepbench.__file__
from sepbench.models.mixers.mamba_cpu import SOURCE, kernel_library
assert SOURCE.is_relative_to(sys.prefix) and kernel_library() is not None, "Mamba's CPU kernels not packaged"
spec = yaml.safe_load(demo.SPEC.read_text())
spec["base"]["train"].update(steps=10, eval_every=10, eval_samples=50)
spec["base"]["device"] = "cpu"
spec["grid"]["task.length"] = spec["grid"]["task.length"][:1]
Path("tiny.yaml").write_text(yaml.safe_dump(spec))
print(demo.main(Path("tiny.yaml"), Path("runs/demo.db"), Path("runs/report"), workers=1))
"""


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEPBENCH_STORE")}
    result = subprocess.run([str(a) for a in args], cwd=cwd, env={**env, "OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow
def test_a_plain_install_runs_the_demo_and_a_figure_outside_the_checkout(tmp_path):
    venv = install_wheel(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    page = Path(run(venv / "bin" / "python", "-c", DEMO_STEP, cwd=work).stdout.strip().splitlines()[-1])
    assert page == Path("runs/report/index.html") and (work / page).is_file()

    sepbench = venv / "bin" / "sepbench"
    figure = run(sepbench, "softmax-vs-linear", "fig4a", "--trials", "2", "--device", "cpu", "--store", "s.db",
                 "--out", "out", cwd=work)
    assert "8 points stored" in figure.stdout and (work / "out" / "fig4a.png").is_file()
    spec = "configs/demo/index_lookup_separation.yaml"
    sweep = run(sepbench, "sweep", spec, "--dry-run", "--store", "s.db", cwd=work)
    assert "36 runs" in sweep.stdout
    assert f"using the packaged {venv}" in sweep.stderr and "site-packages/sepbench/configs/demo" in sweep.stderr


def install_wheel(root: Path) -> Path:
    """A venv holding only the wheel built from this checkout; the dependencies come from this interpreter's."""
    tree = root / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, tree)
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
        "-w", root / "dist", tree, cwd=root)
    (wheel,) = (root / "dist").glob("sepbench-*.whl")
    packaged = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("sepbench/configs/")}
    source = REPO / "src" / "sepbench" / "configs"
    expected = {f"sepbench/configs/{p.relative_to(source).as_posix()}" for p in source.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}
    assert packaged == expected

    venv = root / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel, cwd=root)
    # A path line only: the .pth files in that folder (an editable sepbench among them) are not read.
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=root).stdout.strip()
    (Path(site) / "sepbench_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv
