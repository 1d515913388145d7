"""Tasks of the separations suite: generators pass their plain-Python checkers, and the facts the paper states."""
import numpy as np
import pytest
import torch

from sepbench.conformance import tasks
from sepbench.tasks import TASKS, build_task
from sepbench.tasks.base import Batch
from sepbench.tasks.dyck import count_dyck, is_dyck, minimal_dfa_live_states

CASES = [
    ("dyck", 20, {}), ("dyck", 100, {}), ("dyck", 30, {"types": 3, "depth": 4}),
    ("eq_random", 20, {}), ("eq_random", 100, {}), ("eq_one", 40, {}), ("eq_ncp", 40, {}),
    ("mqar", 8, {}), ("mqar", 32, {}),
    ("nearest_neighbor", 12, {}), ("nearest_neighbor", 16, {"queries": "recall", "dims": 4}),
]


@pytest.mark.parametrize("name,length,options", CASES)
def test_ten_thousand_samples_pass_the_checker(name, length, options):
    outcome = tasks.samples_pass_checker(build_task(name, length, options), samples=10_000)
    assert outcome.status == "pass", outcome.detail


@pytest.mark.parametrize("name,length,options", CASES[::3])
def test_checker_rejects_a_changed_target(name, length, options):
    outcome = tasks.checker_rejects_changed_target(build_task(name, length, options))
    assert outcome.status == "pass", outcome.detail


@pytest.mark.parametrize("name,length,options", CASES[::2])
def test_same_seed_same_data(name, length, options):
    outcome = tasks.same_seed_same_data(build_task(name, length, options))
    assert outcome.status == "pass", outcome.detail


@pytest.mark.parametrize("name,length,options", [c for c in CASES if c[0] == "dyck"] + [
    ("dyck", 20, {"types": 1, "depth": 8}),  # corruptions often redone
    ("index_lookup", 20, {}),  # the default method, as every task without its own keeps it
])
def test_streams_sampled_together_are_as_alone(name, length, options):
    outcome = tasks.streams_as_alone(build_task(name, length, options))
    assert outcome.status == "pass", outcome.detail


def test_dyck_counts_and_dfa_follow_lemma_1():
    assert all(count_dyck(n) == 2 ** (n - 1) for n in range(2, 41, 2))
    assert all(count_dyck(n) == 0 for n in range(1, 40, 2))
    brute = sum(is_dyck([(m >> (2 * i)) & 3 for i in range(8)]) for m in range(4 ** 8))
    assert brute == count_dyck(8) == 128
    assert is_dyck([0, 1, 3, 2, 1, 3]) and not is_dyck([0, 1, 1, 3, 3, 2])  # "([])[]" in, "([[]])" out
    assert minimal_dfa_live_states(2, 2) == 7
    assert minimal_dfa_live_states(2, 3) == 15 and minimal_dfa_live_states(3, 2) == 13  # sum_{i<=m} k^i


@pytest.mark.parametrize("length", [20, 100, 400])
def test_dyck_generator_facts(length):
    task = build_task("dyck", length)
    rng = np.random.default_rng(3)
    positives = task.positives(2000, length, rng)
    assert positives.shape == (2000, length) and task.member(positives).all()
    negatives = task.corrupt(positives, rng)
    assert not task.member(negatives).any()
    assert np.mean([is_dyck(list(s)) for s in negatives[:300]]) == 0.0
    batch = task.sample_eval(4000, rng)
    assert abs(float((batch.targets[:, -1] == task.true_id).float().mean()) - 0.5) < 0.03


def test_dyck_corruption_count_has_the_paper_mean():
    task = build_task("dyck", 100)
    rng = np.random.default_rng(4)
    positives = task.positives(20_000, 100, rng)
    changed = (task._corrupt_once(positives, rng) != positives).sum(1)
    assert abs(changed.mean() - (1 + 100 / 10) / 2) < 0.1  # c ~ U[1, N/10]; every chosen position changes


def test_equality_lengths_and_labels_follow_app_h2():
    task = build_task("eq_random", 100)
    batch = task.sample_train(20_000, np.random.default_rng(5))
    lengths = batch.mask.int().argmax(1).numpy()
    assert set(np.unique(lengths)) == set(range(10, 101, 2))
    positive = (batch.targets[batch.mask] == task.true_id).float().mean()
    assert 0.5 < positive < 0.55  # 1/2 copies plus the rare random equal halves
    one = build_task("eq_one", 40)
    ones = one.sample_eval(5000, np.random.default_rng(6))
    x = ones.inputs.numpy()
    differences = (x[:, :20] != x[:, 21:]).sum(1)
    labels = ones.targets[:, -1].numpy() == one.true_id
    assert (differences[labels] == 0).all() and (differences[~labels] == 1).all()


def test_eq_ncp_needs_every_prefix():
    task = build_task("eq_ncp", 10)
    batch = task.sample_eval(4, np.random.default_rng(7))
    perfect = torch.full((4, 11, task.vocab_size), -5.0)
    perfect.scatter_(2, torch.where(batch.mask, batch.targets, 3)[..., None], 5.0)
    assert task.correct(perfect, batch).all()
    wrong_copy = perfect.clone()
    wrong_copy[0, 7] = 0.0
    wrong_copy[0, 7, task.pad_id] = 9.0
    padding_before_sep = perfect.clone()
    padding_before_sep[1, 2, task.pad_id] = 9.0
    assert task.correct(wrong_copy, batch).tolist() == [False, True, True, True]
    assert task.correct(padding_before_sep, batch).tolist() == [True, False, True, True]


def test_nearest_neighbor_labels_follow_the_nearest_earlier_point():
    task = build_task("nearest_neighbor", 30, {"dims": 3})
    batch = task.sample_eval(300, np.random.default_rng(8))
    x = batch.inputs.numpy()
    points, labels = x[:, 0::2], x[:, 1::2]
    vectors = task.vectors(points)
    for row in range(300):
        for t in range(15, 30):
            scores = [int(vectors[row, t] @ vectors[row, s]) for s in range(t)]
            assert labels[row, t] == labels[row, scores.index(max(scores))]


def test_every_task_is_listed():
    assert {"dyck", "eq_random", "eq_one", "eq_ncp", "mqar", "nearest_neighbor", "index_lookup"} <= set(TASKS.names())


def test_bad_lengths_are_rejected():
    with pytest.raises(ValueError, match="even"):
        build_task("dyck", 21)
    with pytest.raises(ValueError, match="key_vocab"):
        build_task("mqar", 300)
    with pytest.raises(ValueError, match="even"):
        build_task("eq_one", 20).sample_eval(2, np.random.default_rng(0), 15)


@pytest.mark.parametrize("name,length,options,other", [
    ("dyck", 20, {}, [10, 40]), ("eq_random", 20, {}, [10, 40]), ("eq_ncp", 20, {}, [8, 40]),
    ("mqar", 8, {}, [4, 16]), ("nearest_neighbor", 12, {}, [6, 24]),
])
def test_evaluation_at_other_lengths(name, length, options, other):
    task = build_task(name, length, options)
    for n in other:
        batch = task.sample_eval(500, np.random.default_rng(n), n)
        assert batch.inputs.shape[1] == task.max_seq_len(n) and tasks.all_pass(task, batch)
    from sepbench.config import RunConfig
    from sepbench.train import train

    cfg = RunConfig.build({"task": {"name": name, "length": length, "options": options, "eval_lengths": other},
                           "model": {"name": "lstm", "width": 8}, "device": "cpu",
                           "train": {"steps": 2, "eval_every": 2, "eval_samples": 50}})
    result = train(cfg, progress=False)
    assert {f"accuracy@{n}" for n in other} <= set(result.metrics)


def test_distinct_points_for_nearest_neighbor():
    task = build_task("nearest_neighbor", 40, {"dims": 5, "distinct": True, "queries": "recall"})
    batch = task.sample_eval(300, np.random.default_rng(0))
    first = batch.inputs[:, 0:40:2]
    assert all(len(set(row.tolist())) == 20 for row in first) and tasks.all_pass(task, batch)
    with pytest.raises(ValueError, match="2\\^dims >= N/2"):
        build_task("nearest_neighbor", 80, {"dims": 5, "distinct": True}).sample_eval(1, np.random.default_rng(0))


@pytest.mark.parametrize("pairs,vocab", [(64, 8192), (256, 4096), (40, 64), (64, 100_000)])  # few or many repeats; a permutation; 32-bit draws
def test_mqar_keys_are_distinct_and_uniform(pairs, vocab):
    from sepbench.tasks.recall import distinct_keys
    keys = distinct_keys(20000, pairs, vocab, np.random.default_rng(0))
    ordered = np.sort(keys, axis=1)
    assert (ordered[:, 1:] != ordered[:, :-1]).all() and keys.min() >= 0 and keys.max() < vocab
    # every position is uniform over the vocabulary (redrawing only the repeats in place would skew it)
    counts = np.bincount(keys[:, [0, pairs // 2, -1]].ravel() % 64, minlength=64)
    expected = counts.sum() / 64
    assert ((counts - expected) ** 2 / expected).sum() < 120  # chi-square, 63 df: p ~ 2e-5
    batch = build_task("mqar", pairs, {"key_vocab": vocab}).sample_train(100, np.random.default_rng(1))
    first_half = batch.inputs[:, : 2 * pairs : 2]
    assert all(len(set(row.tolist())) == pairs for row in first_half)


@pytest.mark.parametrize("options", [{"key_vocab": 4096, "value_vocab": 4096}, {"key_vocab": 70_000, "value_vocab": 320}])  # 16-bit words; general path
def test_mqar_queries_are_a_uniform_order_of_the_pairs(options):
    pairs, rows = 16, 20000
    task = build_task("mqar", pairs, options)
    batch = task.sample_train(rows, np.random.default_rng(2))
    inputs = batch.inputs.numpy()
    assert tasks.all_pass(task, Batch(batch.inputs[:200], batch.targets[:200], batch.mask[:200]))
    queries = inputs[:, 2 * pairs :: 2]
    slot_of_first_key = (queries == inputs[:, :1]).argmax(axis=1)
    assert ((queries == inputs[:, :1]).sum(axis=1) == 1).all()
    counts = np.bincount(slot_of_first_key, minlength=pairs)
    expected = rows / pairs
    assert ((counts - expected) ** 2 / expected).sum() < 45  # chi-square, 15 df: p ~ 1e-4
    values = inputs[:, 1 : 2 * pairs : 2] - options["key_vocab"]
    assert values.min() >= 0 and values.max() < options["value_vocab"]
    value_counts = np.bincount(values[:, 0] % 16, minlength=16)
    assert ((value_counts - rows / 16) ** 2 / (rows / 16)).sum() < 45
