"""Evaluation and loss at the scored positions, memory-sized chunks, and the sequential evaluation budget."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sepbench import RunConfig, train
from sepbench.config import ModelConfig
from sepbench.models import build_model
from sepbench.tasks import Task, build_task
from sepbench.train.loop import Trainer, evaluate, evaluate_rows, masked_loss
from sepbench.train.memory import CPU_BUDGET_BYTES, chunk_rows, row_bytes
from sepbench.train.result import RunResult
from sepbench.train.sequential import look_confidence, looks, clopper_pearson, run_looks

CPU = torch.device("cpu")


def double_model(name: str, task, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    config = ModelConfig(name=name, layers=layers, width=16, heads=2)
    return build_model(config, task.vocab_size, task.max_seq_len()).double().eval()


@pytest.mark.parametrize("name", ["transformer", "lstm", "mamba", "retnet"])
def test_logits_at_given_positions_are_the_full_heads(name):
    task = build_task("index_lookup", 12)
    model = double_model(name, task)
    inputs = task.sample_train(6, np.random.default_rng(0)).inputs
    positions = torch.from_numpy(np.random.default_rng(1).random(inputs.shape) < 0.3)
    with torch.no_grad():
        full, scored = model(inputs), model(inputs, positions=positions)
    assert scored.shape == (int(positions.sum()), task.vocab_size)
    torch.testing.assert_close(scored, full[positions], rtol=0, atol=1e-12)


def test_scored_loss_and_its_gradients_match_the_full_head():
    task = build_task("index_lookup", 12)
    batch = task.sample_train(8, np.random.default_rng(2))
    grads = []
    for scored in (False, True):
        model = double_model("transformer", task)
        logits = model(batch.inputs, positions=batch.mask) if scored else model(batch.inputs)
        loss = masked_loss(logits, batch)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (full_loss, full_grads), (loss, scored_grads) = grads
    torch.testing.assert_close(loss, full_loss, rtol=0, atol=1e-12)
    for a, b in zip(scored_grads, full_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("task_name", ["index_lookup", "eq_ncp"])
def test_evaluation_matches_the_full_head_path(task_name):
    """eq_ncp also reads predictions before [sep], outside the loss mask; a 2-letter alphabet gives mixed results."""
    task = build_task(task_name, 10, {"alphabet_size": 2})
    batch = task.sample_eval(300, np.random.default_rng(3))
    model = double_model("transformer", task, seed=4)
    with torch.no_grad():
        logits = model(batch.inputs)
    full_loss = float(F.cross_entropy(logits[batch.mask], batch.targets[batch.mask]))
    full_accuracy = float(task.correct(logits, batch).double().mean())
    assert 0.0 < full_accuracy < 1.0
    loss, accuracy = evaluate(model, task, batch, chunk=64, device=CPU)
    assert accuracy == full_accuracy
    assert math.isclose(loss, full_loss, rel_tol=1e-12)


def test_a_task_that_scores_logits_itself_is_refused_at_definition():
    with pytest.raises(TypeError, match="override correct_tokens"):
        type("LogitTask", (Task,), {"correct": lambda self, logits, batch: logits.argmax(-1) == batch.targets})


def test_chunks_are_sized_by_memory_and_do_not_change_the_result():
    task = build_task("index_lookup", 500)
    model = build_model(ModelConfig(name="transformer"), task.vocab_size, task.max_seq_len())
    rows = chunk_rows(model, 501, 1, CPU_BUDGET_BYTES, cap=1000)
    assert 1 <= rows < 1000 and rows * row_bytes(model, 501, 1) <= CPU_BUDGET_BYTES
    assert chunk_rows(model, 501, 1, budget=1, cap=1000) == 1
    small = build_task("index_lookup", 10)
    assert chunk_rows(model, 11, 1, CPU_BUDGET_BYTES, cap=1000) == 1000
    batch = small.sample_eval(200, np.random.default_rng(5))
    tiny = double_model("transformer", small)
    a, b = evaluate_rows(tiny, small, batch, 7, CPU), evaluate_rows(tiny, small, batch, 1000, CPU)
    assert (a.examples, a.correct, a.scored) == (b.examples, b.correct, b.scored) == (200, b.correct, 200)
    assert math.isclose(a.loss, b.loss, rel_tol=1e-12)


def binomial_tail(k_from: int, k_to: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k_from, k_to + 1))


def test_clopper_pearson_bounds_put_half_the_risk_in_each_binomial_tail():
    for correct, n in [(7, 50), (48, 50), (95, 100)]:
        interval = clopper_pearson(correct, n, 0.99)
        assert math.isclose(binomial_tail(correct, n, n, interval.low), 0.005, rel_tol=1e-6)
        assert math.isclose(binomial_tail(0, correct, n, interval.high), 0.005, rel_tol=1e-6)
    assert clopper_pearson(0, 50).low == 0.0 and clopper_pearson(50, 50).high == 1.0
    assert math.isclose(clopper_pearson(50, 50, 0.99).low, 0.005 ** (1 / 50))
    assert looks(5000) == [256, 512, 1024, 2048, 4096, 5000] and looks(100) == [100]
    assert math.isclose(look_confidence(5000), 1 - 0.01 / 6)


@pytest.mark.parametrize("accuracy, wrong", [(0.99, "below"), (0.9895, "above")])
def test_adaptive_decisions_err_at_most_one_percent_at_the_threshold(accuracy, wrong):
    """The hardest case: accuracy right at (or just under) the threshold, 1000 simulated evaluations."""
    rng = np.random.default_rng(6)
    right = np.cumsum(rng.random((1000, 5000)) < accuracy, axis=1)
    errors = 0
    for row in right:
        interval = run_looks(lambda n: int(row[n - 1]), 5000, threshold=0.99)
        decided_below, decided_above = interval.high < 0.99, interval.n < 5000 and interval.low >= 0.99
        errors += decided_below if wrong == "below" else decided_above
    assert errors / 1000 <= 0.01


def test_adaptive_evaluation_stops_early_and_resumes_to_the_full_set():
    config = RunConfig.build({"task": {"name": "index_lookup", "length": 12, "eval_lengths": [8]},
                              "train": {"eval_samples": 2000, "eval_budget": "adaptive"}, "device": "cpu"})
    trainer = Trainer(config)
    partial = trainer.assess()
    assert partial.intervals["accuracy"].n == 256 == partial.intervals["accuracy@8"].n  # untrained: far below
    assert partial.intervals["accuracy"].high < config.train.threshold
    resumed, fresh = trainer.assess(full=True, resume=partial), trainer.assess(full=True)
    assert resumed.metrics == fresh.metrics and resumed.intervals == fresh.intervals
    assert fresh.intervals["accuracy"].n == 2000 and fresh.intervals["accuracy"].confidence == 0.99


def test_a_run_stores_each_evaluations_n_and_interval_and_a_full_final_one():
    config = RunConfig.build({"task": {"name": "index_lookup", "length": 10},
                              "train": {"steps": 20, "eval_every": 10, "eval_samples": 600}, "device": "cpu"})
    result = train(config)
    assert [p.interval.n for p in result.curve] == [256, 256]
    final = result.intervals["accuracy"]
    assert final.n == 600 and final.low <= result.accuracy <= final.high
    stored = result.model_dump(mode="json")
    del stored["intervals"]
    for point in stored["curve"]:
        del point["interval"]
    old = RunResult.model_validate(stored)
    assert old.intervals == {} and old.curve[0].interval is None
