import numpy as np
import pytest

from sepbench.tasks import TASKS, build_task
from sepbench.tasks.lookup import IndexLookup


def plain_index_lookup(tokens: list[int], alphabet: int) -> int:
    """Independent oracle: the symbol at the 1-based position named by the first index token."""
    symbols = [t for t in tokens if t < alphabet]
    index = next(t for t in tokens if t >= alphabet) - alphabet + 1
    return symbols[index - 1]


@pytest.mark.parametrize("length", [10, 20, 100])
def test_samples_pass_the_checker(length):
    task = build_task("index_lookup", length)
    rng = np.random.default_rng(1)
    for batch in (task.sample_train(10_000, rng), task.sample_eval(10_000, rng)):
        inputs, targets, mask = batch.inputs.numpy(), batch.targets.numpy(), batch.mask.numpy()
        assert (mask.sum(1) == 1).all()
        for i in range(len(inputs)):
            row = [int(t) for t in inputs[i] if t != task.pad_id]
            assert int(targets[i][mask[i]][0]) == plain_index_lookup(row, 64)
            assert task.check(inputs[i], targets[i], mask[i])


def test_checker_rejects_a_wrong_target():
    task = build_task("index_lookup", 20)
    batch = task.sample_eval(50, np.random.default_rng(0))
    targets = batch.targets.clone()
    targets[batch.mask] = (targets[batch.mask] + 1) % 64
    assert not any(task.check(batch.inputs[i], targets[i], batch.mask[i]) for i in range(50))


def test_lengths_and_positions_follow_app_h1():
    task = build_task("index_lookup", 50)
    batch = task.sample_train(20_000, np.random.default_rng(2))
    lengths = batch.mask.int().argmax(1).numpy()
    assert lengths.min() == 10 and lengths.max() == 50
    positions = batch.inputs.numpy()[np.arange(20_000), lengths] - 64 + 1
    assert (positions >= 1).all() and (positions <= lengths).all()
    assert abs(np.mean(positions / lengths) - 0.5) < 0.02  # p ~ U[1, k]
    eval_batch = task.sample_eval(1000, np.random.default_rng(3))
    assert (eval_batch.mask.int().argmax(1) == 50).all()  # evaluation at exactly N
    assert eval_batch.inputs.shape == (1000, 51)


def test_generation_is_deterministic_per_seed():
    task = build_task("index_lookup", 30, {"alphabet_size": 16})
    a = task.sample_train(500, np.random.default_rng(7))
    b = task.sample_train(500, np.random.default_rng(7))
    c = task.sample_train(500, np.random.default_rng(8))
    assert (a.inputs == b.inputs).all() and (a.targets == b.targets).all()
    assert not (a.inputs == c.inputs).all()


def test_alphabet_size_option_sets_vocabulary():
    task = build_task("index_lookup", 30, {"alphabet_size": 16})
    assert isinstance(task, IndexLookup)
    assert task.vocab_size == 16 + 30 + 1
    batch = task.sample_eval(200, np.random.default_rng(0))
    assert int(batch.targets[batch.mask].max()) < 16


def test_registry_describes_every_task():
    assert "index_lookup" in TASKS
    assert all(entry.description for entry in TASKS)
