import math

import pytest

from sepbench import RunConfig, train
from sepbench.train.loop import Trainer, lr_factor


def quick(**train_overrides) -> RunConfig:
    return RunConfig.build({
        "task": {"name": "index_lookup", "length": 20},
        "model": {"name": "transformer", "layers": 1, "width": 64},
        "train": {"steps": 600, "eval_every": 50, "eval_samples": 1000, **train_overrides},
        "device": "cpu",
    })


def test_one_layer_transformer_learns_index_lookup():
    result = train(quick())
    assert result.accuracy >= 0.95, result.curve
    assert result.status == "solved" and result.steps_to_threshold is not None
    assert result.steps == result.steps_to_threshold <= 600  # early stop at the threshold
    assert result.parameters > 0 and result.state_floats == 2 * 64 * 21  # K and V for 21 tokens, one layer
    assert result.curve[-1].accuracy == result.accuracy


def test_same_seed_same_metrics():
    cfg = quick(steps=120, early_stop=False, eval_every=40)
    a, b = train(cfg), train(cfg)
    assert a.metrics == b.metrics
    assert [p.loss for p in a.curve] == [p.loss for p in b.curve]


def test_fixed_data_mode_and_extra_eval_lengths():
    cfg = quick(steps=60, data="fixed", train_size=256, eval_every=30)
    cfg = RunConfig.build({**cfg.model_dump(), "task": {**cfg.task.model_dump(), "eval_lengths": [10, 15]}})
    trainer = Trainer(cfg)
    assert not trainer.fresh_data() and trainer.fixed.inputs.shape[0] == 256
    rows = {tuple(row.tolist()) for row in trainer.fixed.inputs}
    for _ in range(3):
        batch = trainer.next_batch()
        width = batch.inputs.shape[1]
        assert all(tuple(row.tolist()) in {r[:width] for r in rows} for row in batch.inputs)
    result = train(cfg)
    assert {"accuracy", "loss", "accuracy@10", "accuracy@15"} <= set(result.metrics)


def test_divergence_is_a_status_not_a_crash():
    result = train(quick(steps=50, lr=1e12, grad_clip=None, warmup_steps=0))
    assert result.status == "diverged" and "non-finite" in result.error
    assert "accuracy" not in result.metrics and math.isnan(result.metrics["loss"])  # no score for broken weights


def test_learning_rate_schedule():
    cfg = quick(steps=100, warmup_steps=10, schedule="linear").train
    assert lr_factor(0, cfg) == pytest.approx(0.1) and lr_factor(9, cfg) == 1.0
    assert lr_factor(55, cfg) == pytest.approx(0.5) and lr_factor(100, cfg) == 0.0
    cos = quick(steps=100, warmup_steps=0, schedule="cosine").train
    assert lr_factor(50, cos) == pytest.approx(0.5) and math.isclose(lr_factor(100, cos), 0.0, abs_tol=1e-12)
