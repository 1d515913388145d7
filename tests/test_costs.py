"""Time estimates for runs still to train: stored runs of the same shape, steps timed now, or FLOPs."""
from __future__ import annotations

from sepbench.config import RunConfig
from sepbench.store import Store
from sepbench.sweep import costs
from sepbench.train import train


def tiny(**train_fields) -> RunConfig:
    return RunConfig.model_validate({
        "task": {"name": "index_lookup", "length": 16},
        "model": {"name": "transformer", "layers": 1, "width": 16, "heads": 2},
        "train": {"steps": 40, "eval_every": 20, "eval_samples": 64, "batch_size": 16, **train_fields},
        "device": "cpu"})


def test_each_shape_is_timed_once_and_scaled_by_its_steps(tmp_path, monkeypatch):
    timed = []
    real = costs.timed_cost
    monkeypatch.setattr(costs, "timed_cost", lambda cfg: timed.append(cfg) or real(cfg))
    configs = [tiny(lr=lr) for lr in (1e-3, 3e-3)] + [tiny(steps=400)]
    found = costs.estimate(configs, Store(tmp_path / "runs.db"))
    assert len(timed) == 1 and found.sources == {"stored": 0, "timed": 3, "flops": 0}
    cost = real(configs[0])
    assert cost.source == "timed" and cost.step_seconds > 0 and cost.eval_seconds > 0
    assert cost.run_seconds(configs[2]) > 5 * cost.run_seconds(configs[0])
    assert "3 from steps timed now" in found.text(2)


def test_a_stored_run_of_the_same_shape_gives_the_seconds_per_step(tmp_path, monkeypatch):
    store = Store(tmp_path / "runs.db")
    result = train(tiny())
    store.put(result)
    monkeypatch.setattr(costs, "timed_cost", lambda cfg: (_ for _ in ()).throw(AssertionError("timed")))
    found = costs.estimate([tiny(lr=5e-3, steps=400)], store)
    assert found.sources["stored"] == 1
    assert abs(found.seconds - result.wall_seconds / result.steps * 400) < 1e-9


def test_a_shape_too_large_to_time_falls_back_to_flops():
    huge = RunConfig.model_validate({
        "task": {"name": "index_lookup", "length": 4000},
        "model": {"name": "transformer", "layers": 8, "width": 4096, "heads": 8},
        "train": {"steps": 100, "batch_size": 64}, "device": "cpu"})
    cost = costs.timed_cost(huge)
    assert cost.source == "flops" and cost.step_seconds > costs.LARGEST_TIMED_STEP


def test_durations_read_at_every_scale():
    from sepbench.sweep.costs import duration

    assert [duration(s) for s in (42, 600, 9000, 4.2e11)] == ["42 s", "10 min", "2.5 h", "1.2e+08 h"]
