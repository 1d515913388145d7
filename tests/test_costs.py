"""Time estimates for runs still to train: stored runs of the same shape, steps timed now, or FLOPs."""
from __future__ import annotations

import time

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
    assert len(timed) == 1 and found.sources == {"stored": 0, "timed": 3, "scaled": 0, "flops": 0}
    cost = real(configs[0])
    assert cost.source == "timed" and cost.step_seconds > 0 and cost.eval_seconds > 0
    assert cost.run_seconds(configs[2]) > 5 * cost.run_seconds(configs[0])
    assert "3 from steps timed now" in found.text(2)


def test_a_stored_run_of_the_same_shape_gives_the_seconds_per_step(tmp_path, monkeypatch):
    store = Store(tmp_path / "runs.db")
    result = train(tiny())
    assert result.cpu_seconds is not None and result.cpu_seconds > 0
    store.put(result)
    monkeypatch.setattr(costs, "timed_cost", lambda cfg: (_ for _ in ()).throw(AssertionError("timed")))
    found = costs.estimate([tiny(lr=5e-3, steps=400)], store)
    assert found.sources["stored"] == 1
    counted = min(result.cpu_seconds, result.wall_seconds)  # several threads: CPU seconds may pass the wall's
    assert abs(found.seconds - counted / result.steps * 400) < 1e-9


def test_a_stored_runs_cpu_seconds_count_where_it_has_them_else_its_wall_time(tmp_path):
    store = Store(tmp_path / "runs.db")
    paused = train(tiny()).model_copy(update={"steps": 40, "wall_seconds": 400.0, "cpu_seconds": 4.0})
    store.put(paused)
    assert costs.stored_costs(store)[costs.shape(paused.config)].step_seconds == 0.1
    store.put(paused.model_copy(update={"cpu_seconds": None}))
    assert costs.stored_costs(store)[costs.shape(paused.config)].step_seconds == 10.0
    store.put(paused.model_copy(update={"cpu_seconds": 1600.0}))  # four threads busy all along
    assert costs.stored_costs(store)[costs.shape(paused.config)].step_seconds == 10.0


def test_only_runs_of_this_code_on_the_device_they_would_use_here_give_a_cost(tmp_path):
    store = Store(tmp_path / "runs.db")
    result = train(tiny())
    key = costs.shape(result.config)
    store.put(result.model_copy(update={"device": "cuda"}))  # a device="cpu" config that ran on a GPU elsewhere
    assert key not in costs.stored_costs(store)
    store.put(result.model_copy(update={"code_version": "0" * 12}))  # e.g. a kernel since rewritten
    assert key not in costs.stored_costs(store)
    gpu_planned = result.model_copy(update={"config": result.config.model_copy(update={"device": "cuda"})})
    store.put(gpu_planned)  # a config this CPU machine cannot run as written
    assert costs.shape(gpu_planned.config) not in costs.stored_costs(store)
    store.put(result)
    assert costs.stored_costs(store)[key].source == "stored"


def test_a_shape_too_large_to_time_falls_back_to_flops():
    huge = RunConfig.model_validate({
        "task": {"name": "index_lookup", "length": 4000},
        "model": {"name": "transformer", "layers": 8, "width": 4096, "heads": 8},
        "train": {"steps": 100, "batch_size": 64}, "device": "cpu"})
    cost = costs.timed_cost(huge)
    assert cost.source == "flops" and cost.step_seconds > costs.LARGEST_TIMED_STEP


def test_a_shape_too_large_to_time_is_timed_shorter_and_scaled_by_flops(monkeypatch):
    from sepbench.sweep.search import estimate_forward_flops

    cfg = tiny(steps=100)
    cfg = RunConfig.model_validate({**cfg.model_dump(), "task": {"name": "index_lookup", "length": 64}})
    limit = costs.flops_cost(cfg).step_seconds * 0.5  # N = 64 is "too large"; N = 32 is not
    monkeypatch.setattr(costs, "LARGEST_TIMED_STEP", limit)
    monkeypatch.setattr(costs, "LARGEST_TIMED_WHOLE", limit)
    probed = []
    monkeypatch.setattr(costs, "time_shape", lambda probe: probed.append(probe) or costs.ShapeCost(0.01, 0.2, "timed"))
    cost = costs.timed_cost(cfg)
    assert [p.task.length for p in probed] == [32] and costs.flops_cost(probed[0]).step_seconds <= limit
    ratio = estimate_forward_flops(cfg) / estimate_forward_flops(probed[0])
    assert ratio > 2 and cost.source == "scaled"
    assert abs(cost.step_seconds - 0.01 * ratio) < 1e-12 and abs(cost.eval_seconds - 0.2 * ratio) < 1e-12
    assert "1 from steps timed now at a shorter length" in costs.Estimate(1.0, {"scaled": 1}).text(1)


def test_where_the_task_refuses_a_shorter_length_a_smaller_batch_is_timed(monkeypatch):
    cfg = RunConfig.model_validate({**tiny(steps=100).model_dump(), "task": {"name": "index_lookup", "length": 64}})
    monkeypatch.setattr(costs, "LARGEST_TIMED_STEP", costs.flops_cost(cfg).step_seconds * 0.5)
    monkeypatch.setattr(costs, "LARGEST_TIMED_WHOLE", costs.flops_cost(cfg).step_seconds * 0.5)

    def time_shape(probe: RunConfig) -> costs.ShapeCost:
        if probe.task.length != 64:
            raise ValueError("length refused")
        return costs.ShapeCost(0.01, 0.2, "timed")

    monkeypatch.setattr(costs, "time_shape", time_shape)
    cost = costs.timed_cost(cfg)
    assert cost.source == "scaled"
    assert abs(cost.step_seconds - 0.01 * 2) < 1e-12 and abs(cost.eval_seconds - 0.2) < 1e-12  # batch 16 -> 8


def test_a_shape_no_length_brings_under_the_limit_keeps_the_flops_estimate(monkeypatch):
    monkeypatch.setattr(costs, "time_shape", lambda probe: (_ for _ in ()).throw(AssertionError("timed")))
    monkeypatch.setattr(costs, "LARGEST_TIMED_STEP", 1e-12)
    monkeypatch.setattr(costs, "LARGEST_TIMED_WHOLE", 1e-12)
    assert costs.timed_cost(tiny()).source == "flops"


def test_a_shape_a_few_seconds_a_step_is_timed_whole_on_one_step(monkeypatch):
    cfg = RunConfig.model_validate({**tiny(steps=100).model_dump(), "task": {"name": "index_lookup", "length": 64}})
    rough = costs.flops_cost(cfg).step_seconds
    monkeypatch.setattr(costs, "LARGEST_TIMED_STEP", rough * 0.5)
    monkeypatch.setattr(costs, "LARGEST_TIMED_WHOLE", rough * 2)
    timed = []
    real = costs.time_shape
    monkeypatch.setattr(costs, "time_shape", lambda probe, *how: timed.append((probe, how)) or real(probe, *how))
    cost = costs.timed_cost(cfg)
    assert [(p.task.length, how) for p, how in timed] == [(64, (costs.LARGE_TIMED_STEPS, costs.LARGE_TIMED_EVAL_ROWS))]
    assert cost.source == "timed" and cost.step_seconds > 0 and cost.eval_seconds > 0


def test_durations_read_at_every_scale():
    from sepbench.sweep.costs import duration

    assert [duration(s) for s in (42, 600, 9000, 4.2e11)] == ["42 s", "10 min", "2.5 h", "1.2e+08 h"]


def test_the_timed_steps_hold_no_evaluation(monkeypatch):
    from sepbench.train.loop import Trainer

    calls = []
    real = Trainer.assess
    monkeypatch.setattr(Trainer, "assess",
                        lambda self, *a, **k: calls.append(self.config.train.steps) or real(self, *a, **k))
    cost = costs.time_shape(tiny(steps=100))
    assert len(calls) == 1 and cost.step_seconds > 0 and cost.eval_seconds > 0


def test_a_shape_is_timed_with_the_threads_its_run_will_have(monkeypatch):
    """Runs train on one intra-op thread unless $SEPBENCH_THREADS says otherwise; timing a shape on torch's
    default (every core) read 2-3x high on a busy machine. The caller's thread count comes back after."""
    import torch

    from sepbench.train.loop import Trainer

    seen = []
    real = Trainer.train_until
    monkeypatch.setattr(Trainer, "train_until",
                        lambda self, *a, **k: seen.append(torch.get_num_threads()) or real(self, *a, **k))
    monkeypatch.delenv("SEPBENCH_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        costs.time_shape(tiny(steps=100))
        assert seen and set(seen) == {1} and torch.get_num_threads() == 2
        assert costs.clock("cpu") is time.perf_counter  # several threads: CPU seconds would add up across them
        torch.set_num_threads(1)
        assert costs.clock("cpu") is time.process_time
    finally:
        torch.set_num_threads(before)
