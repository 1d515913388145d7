"""The CoT samplers draw from the reference's distribution (Feng et al. 2023): two-sample tests at fixed seeds
between the vectorised samplers and the plain-Python restatement of the reference's loops
(``sepbench.tasks.cot.reference``). The seeds are fixed, so each p-value is a fixed number; the earlier
samplers gave p < 1e-5 on each of these tests."""
import numpy as np
import pytest
import torch

from sepbench.tasks import build_task
from sepbench.tasks.cot import reference
from sepbench.tasks.cot.base import PAD

ALPHA = 1e-3


def chi_square_p(x: np.ndarray, y: np.ndarray, rare: int = 20) -> float:
    """p-value of the chi-square test that two samples of a categorical variable share one distribution
    (categories seen fewer than ``rare`` times in both together are pooled)."""
    categories, index = np.unique(np.concatenate([x, y]), return_inverse=True)
    table = np.stack([np.bincount(index[: len(x)], minlength=len(categories)),
                      np.bincount(index[len(x):], minlength=len(categories))]).astype(float)
    small = table.sum(axis=0) < rare
    table = np.concatenate([table[:, ~small], table[:, small].sum(axis=1, keepdims=True)], axis=1)
    table = table[:, table.sum(axis=0) > 0]
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    stat, df = float(((table - expected) ** 2 / expected).sum()), table.shape[1] - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def mean_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of the large-sample z test that two samples have the same mean."""
    z = (x.mean() - y.mean()) / np.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
    return float(torch.special.erfc(torch.tensor(abs(z) / np.sqrt(2), dtype=torch.float64)))


def test_the_tests_tell_distributions_apart():
    rng = np.random.default_rng(0)
    same = chi_square_p(rng.integers(0, 4, 20000), rng.integers(0, 4, 20000))
    shifted = chi_square_p(rng.integers(0, 4, 20000), rng.choice(4, 20000, p=[0.27, 0.27, 0.23, 0.23]))
    assert same > ALPHA > shifted
    assert mean_p(rng.normal(0, 1, 20000), rng.normal(0, 1, 20000)) > ALPHA > mean_p(rng.normal(0, 1, 20000), rng.normal(0.1, 1, 20000))


def ours(name: str, length: int, n: int, seed: int) -> list[list[int]]:
    rows, _ = build_task(name, length).generate_rows(n, np.random.default_rng(seed))
    return [[int(t) for t in row if t != PAD] for row in rows]


def theirs(name: str, length: int, n: int, seed: int) -> list[list[int]]:
    draw = reference.sampler(name, length, seed)
    return [draw() for _ in range(n)]


def test_arithmetic_expansion_follows_the_reference():
    """One expansion x -> a op b: operator shares and the joint (a, op, b), where invalid draws are redrawn."""
    a, b = ours("arithmetic", 1, 30000, 1), theirs("arithmetic", 1, 30000, 1)
    joint = lambda rows: np.array([(r[0] * 32 + r[1]) * 32 + r[2] for r in rows])  # noqa: E731
    operator = lambda rows: np.array([r[1] for r in rows])  # noqa: E731
    assert chi_square_p(operator(a), operator(b)) > ALPHA
    assert chi_square_p(joint(a), joint(b)) > ALPHA


def test_arithmetic_expressions_follow_the_reference():
    """n = 4: operator shares, brackets (prompt lengths), leading numbers and answers."""
    a, b = ours("arithmetic", 4, 20000, 2), theirs("arithmetic", 4, 20000, 2)

    def statistics(rows):
        prompts = [r[: r.index(9)] for r in rows]
        return {"operators": np.array([t for p in prompts for t in p if 3 <= t <= 6]),
                "prompt length": np.array([len(p) for p in prompts]),
                "first token": np.array([p[0] for p in prompts]),
                "answer": np.array([r[-2] for r in rows])}

    for (name, x), y in zip(statistics(a).items(), statistics(b).values()):
        assert chi_square_p(x, y) > ALPHA, name
    assert mean_p(statistics(a)["answer"], statistics(b)["answer"]) > ALPHA


@pytest.mark.parametrize("length,n", [(4, 40000), (16, 30000)])
def test_edit_distance_pairs_follow_the_reference(length, n):
    """Length pairs and answers (the DP of both samples by the same exact code; its correctness is tested
    elsewhere). Short strings (L = 4) reach 2 letters, where the reference inserts instead of deleting;
    long ones (L = 16) show that a rejected pair keeps its number of edits."""
    task = build_task("edit_distance", length)
    ours_pairs = task.string_pairs(n, np.random.default_rng(3), length)
    draw = np.random.RandomState(3)
    pairs = [reference.edit_distance_pair(draw, length) for _ in range(n)]
    a = np.full((n, length), -1)
    b = np.full((n, length + 2), -1)
    for i, (first, second) in enumerate(pairs):
        a[i, : len(first)], b[i, : len(second)] = first, second
    theirs_pairs = (a, np.array([len(p[0]) for p in pairs]), b, np.array([len(p[1]) for p in pairs]))

    def statistics(a, a_len, b, b_len):
        answer = task.table(a, a_len, b, b_len)[np.arange(len(a)), a_len, b_len]
        return a_len * 100 + b_len, answer

    (x_pair, x_answer), (y_pair, y_answer) = statistics(*ours_pairs), statistics(*theirs_pairs)
    assert chi_square_p(x_pair, y_pair) > ALPHA
    assert chi_square_p(x_answer, y_answer) > ALPHA
    assert mean_p(x_answer, y_answer) > ALPHA


def test_lis_follows_the_reference():
    """LIS lengths, dp at the middle and the number of rises: the planted runs' sizes, order and values."""
    length, n = 12, 12000
    a, b = ours("lis", length, n, 4), theirs("lis", length, n, 4)

    def statistics(rows):
        return {"answer": np.array([r[-2] for r in rows]),
                "middle dp": np.array([r[length + 1 + length // 2] for r in rows]),
                "rises": np.array([sum(r[i + 1] > r[i] for i in range(length - 1)) for r in rows])}

    for (name, x), y in zip(statistics(a).items(), statistics(b).values()):
        assert chi_square_p(x, y) > ALPHA, name
        assert mean_p(x, y) > ALPHA, name


@pytest.mark.parametrize("modulus", [11, 3])
def test_arithmetic_text_form_is_the_same_samples(modulus):
    """The published loop's form of the restatement (string tokens, table lookups, token-by-token inserts),
    which the benchmark times, makes the same rows from the same draws, and the same data sets."""
    task = build_task("arithmetic", 5, {"modulus": modulus})
    ids = reference.sampler("arithmetic", 5, 7, {"modulus": modulus})
    text = reference.sampler("arithmetic", 5, 7, {"modulus": modulus}, text=True)
    for operators in [1, 2, 5] * 300:
        assert ids(operators) == task.encode(" ".join(text(operators))) + [reference.EOS]
    if modulus == 11:  # the sets the reference builds (its modulus is fixed there)
        train, test = reference.split("arithmetic", 4, 400, 40, seed=3)
        text_train, text_test = reference.split("arithmetic", 4, 400, 40, seed=3, text=True)
        as_ids = lambda rows: {tuple(task.encode(" ".join(row)) + [reference.EOS]) for row in rows}  # noqa: E731
        assert as_ids(text_train) == train and as_ids(text_test) == test
