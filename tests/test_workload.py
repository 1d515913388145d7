"""The progress line's ETA: the work left (``sweep.workload``) at the pace of the work done."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from sepbench import RunConfig
from sepbench.store import Store
from sepbench.sweep.halving import planned_shares
from sepbench.sweep.progress import SweepProgress
from sepbench.sweep.workload import Cell, Workload, resumed_at, step_seconds, workload
from sepbench.train.result import EvalPoint, RunResult

RATES = (1e-2, 1e-3, 1e-4, 1e-5)


def config(lr: float = 1e-3, width: int = 8, steps: int = 1000, **train: object) -> RunConfig:
    return RunConfig.build({"task": {"name": "index_lookup", "length": 10}, "model": {"name": "lstm", "width": width},
                            "train": {"lr": lr, "steps": steps, "eval_every": 100, **train}, "device": "cpu"})


def result(cfg: RunConfig, status: str, steps: int, **fields: object) -> RunResult:
    return RunResult(config=cfg, config_hash=cfg.config_hash(), status=status, steps=steps,
                     metrics={"accuracy": 0.1}, **fields)


def test_a_search_cell_counts_the_steps_its_search_plans_whichever_runs_train_them(tmp_path):
    """Four rates, two finalists: every rate to the rung at step 200, then two to 1000: 2400 steps, not 4000."""
    store = Store(tmp_path / "s.db")
    runs = [config(lr) for lr in RATES]
    shares = planned_shares(runs, len(RATES), 2.0, 2)
    found = workload(runs, store, [(cfg, shares[cfg.config_hash()]) for cfg in runs])
    assert [c.steps_left for c in found.cells] == [pytest.approx(2400.0)]
    for cfg in runs[:2]:
        store.put(result(cfg, "pruned", 200))
    rest = workload(runs[2:], store, [(cfg, shares[cfg.config_hash()]) for cfg in runs])
    assert [(set(c.runs), c.steps_left) for c in rest.cells] == [
        ({cfg.config_hash() for cfg in runs[2:]}, pytest.approx(2000.0))]


def test_the_eta_is_the_work_left_at_the_pace_so_far_runs_in_training_included(tmp_path):
    """One worker halves the cell above at a second a step: when the two cut rates are reported, 800 s have gone
    (every rate trained to step 200) and the finalists, in the running table at step 200, have 1600 s to go, where
    the mean finished run would say 800 s."""
    store = Store(tmp_path / "s.db")
    runs = [config(lr) for lr in RATES]
    shares = planned_shares(runs, len(RATES), 2.0, 2)
    plan = workload(runs, store, [(cfg, shares[cfg.config_hash()]) for cfg in runs])
    now = [0.0]
    out = io.StringIO()
    with SweepProgress("sweep", 4, Console(file=out, width=200), live=False, workload=plan,
                       clock=lambda: now[0]) as progress:
        now[0] = 800.0
        for cfg in runs[2:]:
            store.put_running(result(cfg, "completed", 200))
        for cfg in runs[:2]:
            progress.advance(result(cfg, "pruned", 200, wall_seconds=200.0))
        assert progress.eta_seconds() == pytest.approx(1600.0)
        assert out.getvalue().splitlines()[-1].endswith("; ETA 1600 s")
        now[0] = 1400.0
        for cfg in runs[2:]:
            store.put_running(result(cfg, "completed", 500))
        assert progress.eta_seconds() == pytest.approx(1000.0)
        now[0] = 2400.0
        for cfg in runs[2:]:
            progress.advance(result(cfg, "completed", 1000, wall_seconds=1000.0))
        assert progress.eta_seconds() == 0.0


def test_a_cell_whose_runs_all_finished_has_no_work_left_though_they_stopped_early(tmp_path):
    store = Store(tmp_path / "s.db")
    quick, slow = config(1e-3), config(1e-4)
    plan = workload([quick, slow], store)
    now = [0.0]
    with SweepProgress("sweep", 2, Console(file=io.StringIO()), live=False, workload=plan,
                       clock=lambda: now[0]) as progress:
        now[0] = 100.0
        progress.advance(result(quick, "solved", 100, wall_seconds=100.0))
        assert progress.eta_seconds() == pytest.approx(1000.0)  # the other run: 1000 steps, at 100 steps in 100 s


def test_a_slow_shape_weighs_more_than_a_fast_one_and_an_unstored_shape_is_scaled_from_the_stored_ones(tmp_path):
    store = Store(tmp_path / "s.db")
    fast, slow, unseen = config(width=8), config(width=64), config(width=32)
    store.put(result(fast.model_copy(update={"seed": 5}), "completed", 1000, wall_seconds=10.0))
    store.put(result(slow.model_copy(update={"seed": 5}), "completed", 1000, wall_seconds=80.0))
    seconds = step_seconds([fast, slow, unseen], store)
    assert seconds[fast.config_hash()] == pytest.approx(0.01) and seconds[slow.config_hash()] == pytest.approx(0.08)
    assert seconds[fast.config_hash()] < seconds[unseen.config_hash()] < seconds[slow.config_hash()]


def test_a_run_resumes_from_its_checkpoints_step_as_the_running_table_or_its_lost_result_holds_it(tmp_path):
    store = Store(tmp_path / "s.db")
    paused, lost, fresh, unkept = config(1e-2), config(1e-3), config(1e-4), config(1e-5)
    store.put_running(result(paused, "completed", 400))
    store.put(result(lost, "failed", 0, error="worker lost", curve=[EvalPoint(step=600, loss=1.0, accuracy=0.1,
                                                                               seconds=6.0)]))
    store.put_running(result(unkept, "completed", 300))
    store.checkpoints.mkdir()
    for cfg in (paused, lost, fresh):
        (store.checkpoints / f"{cfg.config_hash()}.pt").write_bytes(b"")
    found = resumed_at([paused, lost, fresh, unkept], store)
    assert found == {paused.config_hash(): 400, lost.config_hash(): 600, fresh.config_hash(): 0,
                     unkept.config_hash(): 0}
    plan = workload([paused, lost], store)
    assert sorted(c.steps_left for c in plan.cells) == [400.0, 600.0]


def test_nothing_to_train_is_no_work_and_the_eta_falls_back_to_the_mean_run(tmp_path):
    empty = workload([], Store(tmp_path / "none.db"))
    assert empty.cells == [] and empty.progress({}) == (0.0, 0.0)
    other = config()
    now = [0.0]
    with SweepProgress("sweep", 3, Console(file=io.StringIO()), live=False, workload=empty,
                       clock=lambda: now[0]) as progress:
        now[0] = 50.0
        progress.advance(result(other, "completed", 1000, wall_seconds=50.0))
        assert progress.eta_seconds() == pytest.approx(100.0)


def test_a_workload_by_hand_weighs_each_cell_by_its_own_step_cost():
    plan = Workload({"a": 1.0, "b": 3.0}, [Cell(("a",), 100.0), Cell(("b",), 100.0)], {})
    assert plan.progress({}) == (0.0, 400.0) and plan.progress({"a": 100}) == (100.0, 300.0)


def refused(cfg: RunConfig) -> RunResult:
    """A run refused for memory before training: failed at once, no step trained."""
    return result(cfg, "failed", 0, error="out of memory (estimated before training): this run needs about 964 GiB")


def test_runs_refused_for_memory_do_not_shorten_the_eta_of_the_runs_that_train():
    """One run trained in 100 s, then two were refused at once: the one left costs 100 s, not a third of it."""
    trained, wide, wider = config(width=8), config(width=4096), config(width=8192)
    now = [0.0]
    out = io.StringIO()
    with SweepProgress("minwidth", 4, Console(file=out, width=200), live=False, clock=lambda: now[0]) as progress:
        now[0] = 100.0
        progress.advance(result(trained, "completed", 1000, wall_seconds=100.0))
        progress.advance(refused(wide))
        progress.advance(refused(wider))
        assert progress.eta_seconds() == pytest.approx(100.0)
        assert out.getvalue().splitlines()[-1].endswith("; ETA 100 s")


def test_the_eta_waits_for_a_run_that_trained_when_the_first_ones_were_refused(tmp_path):
    """With or without a workload, runs refused at once give no pace: no ETA rather than 0 s."""
    wide, wider, small = config(width=4096), config(width=8192), config(width=8)
    for plan in (None, workload([wide, wider, small], Store(tmp_path / "s.db"))):
        now = [0.0]
        out = io.StringIO()
        with SweepProgress("sweep", 3, Console(file=out, width=200), live=False, workload=plan,
                           clock=lambda: now[0]) as progress:
            now[0] = 0.01
            progress.advance(refused(wide))
            progress.advance(refused(wider))
            assert progress.eta_seconds() is None
            assert out.getvalue().splitlines()[-1].endswith("; ETA -")
            now[0] = 50.0
            progress.advance(result(small, "completed", 1000, wall_seconds=50.0))
            assert progress.eta_seconds() == 0.0


def test_a_run_its_device_cannot_hold_is_no_work(tmp_path):
    """A run the memory check will refuse ends at once: its budget would hold the ETA at days until it is refused."""
    small, huge = config(width=8), config(width=65536)  # ~0.5 TB of LSTM weights and Adam moments
    found = workload([small, huge], Store(tmp_path / "s.db"))
    assert [c.runs for c in found.cells] == [(small.config_hash(),)]
    assert found.progress({}) == workload([small], Store(tmp_path / "s.db")).progress({})
