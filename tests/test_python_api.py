"""The library calls the commands make, as a notebook makes them."""
import subprocess
import sys

import pytest

from sepbench import RunConfig, Store
from sepbench.config import ConfigError
from sepbench.sweep import run_stored

TINY = {"task": {"name": "index_lookup", "length": 10}, "model": {"name": "lstm", "width": 8},
        "train": {"steps": 5, "eval_every": 5, "eval_samples": 50, "warmup_steps": 0}, "device": "cpu"}


def test_run_stored_trains_once_then_returns_the_stored_run(tmp_path):
    store = Store(tmp_path / "runs.db")
    cfg = RunConfig.build(TINY)
    first = run_stored(cfg, store)
    assert not first.reused and store.get(cfg.config_hash()) is not None
    again = run_stored(cfg, store)
    assert again.reused and not again.stale and again.result.created_at == first.result.created_at
    forced = run_stored(cfg, store, force=True)
    assert not forced.reused and len(store) == 1


def test_run_stored_refuses_a_run_that_cannot_fit_before_training(tmp_path, monkeypatch):
    from sepbench.train import memory

    monkeypatch.setattr(memory, "free_memory", lambda device: 1)
    store = Store(tmp_path / "runs.db")
    with pytest.raises(ConfigError, match="this run needs about"):
        run_stored(RunConfig.build(TINY), store)
    assert store.config_hashes() == set()


def test_a_run_that_crashes_is_stored_failed_and_its_error_propagates(tmp_path, monkeypatch):
    import importlib

    def crash(*args, **kwargs):
        raise RuntimeError("boom in a kernel")

    monkeypatch.setattr(importlib.import_module("sepbench.train"), "train", crash)  # the package, not its function
    store, cfg = Store(tmp_path / "runs.db"), RunConfig.build(TINY)
    with pytest.raises(RuntimeError, match="boom in a kernel"):
        run_stored(cfg, store)
    stored = store.get(cfg.config_hash())
    assert stored.status == "failed" and stored.error == "RuntimeError: boom in a kernel"


@pytest.mark.parametrize("code, expected", [
    ("from sepbench.config import TaskConfig; print(TaskConfig(name='dyck', length=8).name)", "dyck"),
    ("from sepbench.registry import MODELS; print('lstm' in MODELS, MODELS.names()[0])", "True transformer"),
])
def test_a_registry_finds_its_built_ins_without_their_modules_imported_first(code, expected):
    """config imports neither tasks nor models; the registries import their built-ins on their first lookup."""
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == expected


def test_importing_the_config_imports_no_task_or_model():
    code = "import sys, sepbench.config; print(sorted(m for m in sys.modules if m.startswith(('sepbench.tasks', 'sepbench.models'))))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_run_spec_trains_a_spec_once_then_reuses_it_and_a_dry_run_trains_nothing(tmp_path):
    from sepbench.sweep import SweepSpec, run_spec

    spec = SweepSpec.build({"name": "tiny", "base": TINY, "seeds": [0, 1]})
    store = Store(tmp_path / "runs.db")
    plans = []
    dry = run_spec(spec, store, dry_run=True, on_plan=plans.append)
    assert [len(p.plan.todo) for p in plans] == [2] and dry.results == [] and not store.path.exists()
    seen = []
    first = run_spec(spec, store, on_result=seen.append)
    assert sorted(r.config.seed for r in first.results) == [0, 1] and seen == first.results
    assert first.failed == {} and store.config_hashes() == {cfg.config_hash() for cfg in spec.expand()}
    again = run_spec(spec, store, on_plan=plans.append)
    assert again.results == [] and (plans[-1].plan.reused, plans[-1].plan.todo) == (2, [])


def test_run_spec_says_how_many_runs_a_ctrl_c_left_stored(tmp_path):
    from sepbench.sweep import SweepInterrupted, SweepSpec, run_spec

    spec = SweepSpec.build({"name": "tiny", "base": TINY, "seeds": [0, 1, 2]})
    store = Store(tmp_path / "runs.db")

    def ctrl_c(result):
        raise KeyboardInterrupt  # as a Ctrl-C right after the first run is stored

    with pytest.raises(SweepInterrupted) as stop:
        run_spec(spec, store, on_result=ctrl_c)
    assert (stop.value.finished, stop.value.total) == (1, 3) and len(store) == 1
