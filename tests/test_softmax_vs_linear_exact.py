"""Reconstruction-independent checks of Deng et al.'s objects."""
import math

import pytest
import torch

from sepbench.theory.softmax_vs_linear import (
    SelfData, attention, attention_matrix, cross_attention, expand_tokens, hoeffding_bound, rademacher, readout,
    self_attention, tensor_trick_attention_matrix, tensor_trick_logits,
)
from sepbench.theory.softmax_vs_linear.attention import logits


def positive_tokens(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.1


@pytest.mark.parametrize("kind", ["exp", "lin"])
def test_rows_are_stochastic_and_self_is_cross_with_y_equal_x(kind):
    X, Y = positive_tokens(3, 5, 7), positive_tokens(3, 5, 4, seed=1)
    A = attention_matrix(X, Y, kind)
    assert A.shape == (3, 7, 4)
    torch.testing.assert_close(A.sum(-1), torch.ones(3, 7, dtype=torch.float64))
    assert bool((A > 0).all())
    torch.testing.assert_close(self_attention(X, kind), cross_attention(X, X, kind))
    W, W_V = positive_tokens(5, 5, seed=2), positive_tokens(5, 3, seed=3)
    torch.testing.assert_close(self_attention(X, kind, W, W_V), cross_attention(X, X, kind, W, W_V))


def test_linear_is_softmax_with_exp_replaced_by_identity():
    X, Y, W = positive_tokens(4, 6), positive_tokens(4, 5, seed=1), positive_tokens(4, 4, seed=2)
    scores = X.T @ W @ Y
    torch.testing.assert_close(attention(X, Y, "lin", W), (scores / scores.sum(1, keepdim=True)) @ Y.T)
    e = torch.exp(scores)
    torch.testing.assert_close(attention(X, Y, "exp", W), (e / e.sum(1, keepdim=True)) @ Y.T)
    with pytest.raises(ValueError, match="allowed: exp, lin"):
        attention(X, Y, "relu")


@pytest.mark.parametrize("kind", ["exp", "lin"])
def test_tensor_trick_matches_the_matrix_form(kind):
    X, Y = positive_tokens(3, 4, seed=4), positive_tokens(3, 5, seed=5)
    W = torch.randn(3, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    torch.testing.assert_close(tensor_trick_logits(X, Y, W), X.T @ W @ Y)
    if kind == "lin":
        W = W.abs()
    torch.testing.assert_close(tensor_trick_attention_matrix(X, Y, W, kind), attention_matrix(X, Y, kind, W))


@pytest.mark.parametrize("kind", ["exp", "lin"])
def test_counted_tokens_equal_the_expanded_matrix(kind):
    X, Y = positive_tokens(2, 6, 3), positive_tokens(2, 6, 4, seed=1)
    counts = torch.tensor([1, 5, 2, 3])
    counted = attention(X, Y, kind, key_counts=counts)
    torch.testing.assert_close(counted, attention(X, expand_tokens(Y, counts), kind))
    W = rademacher(2, 6, 5, torch.Generator().manual_seed(0))
    q_counts = torch.tensor([4, 1, 2])
    expanded = readout(attention(expand_tokens(X, q_counts), expand_tokens(Y, counts), kind), W, 0.1)
    torch.testing.assert_close(readout(counted, W, 0.1, q_counts), expanded)


def test_hoeffding_bound_holds_for_rademacher_sums():
    gen = torch.Generator().manual_seed(0)
    f = torch.rand(40, generator=gen, dtype=torch.float64) ** 3
    f = f / f.sum()
    w = rademacher(1, 40, 100_000, gen)[0]
    sums = (f @ w).abs()
    for t in [0.05, 0.1, 0.2, 0.3]:
        empirical = float((sums >= t).double().mean())
        assert empirical <= hoeffding_bound(f, t) + 0.005
    assert hoeffding_bound(f, 0.0) == 1.0
    assert hoeffding_bound(torch.full((4,), 0.25), 1.0) == pytest.approx(2 * math.exp(-2.0))


def fires(f: torch.Tensor, m: int, tau: float, draws: int, seed: int) -> float:
    W = rademacher(draws, f.numel(), m, torch.Generator().manual_seed(seed))
    return float((readout(f.expand(draws, 1, -1), W, tau) > 0).double().mean())


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_one_dominant_coordinate_fires_with_probability_one_minus_two_to_minus_m(m):
    n, eta = 200, 0.01
    f = torch.full((n,), eta / (n - 1), dtype=torch.float64)
    f[17] = 1 - eta
    assert fires(f, m, 0.5, 20_000, seed=m) == pytest.approx(1 - 2.0 ** -m, abs=0.015)


@pytest.mark.parametrize("support, threshold, p_unit", [(3, 2.0, 1 / 8), (2, 1.5, 1 / 4)])
def test_several_dominant_coordinates_need_all_signs_positive(support, threshold, p_unit):
    f = torch.zeros(50, dtype=torch.float64)
    f[:support] = 1.0
    for m in [1, 4]:
        assert fires(f, m, threshold - 0.5, 20_000, seed=m) == pytest.approx(1 - (1 - p_unit) ** m, abs=0.015)


def test_self_attention_data_have_the_paper_column_types():
    data = SelfData(n=20, d=30, k=5, C=4.0)
    d0, d1 = data.sample(3, torch.Generator().manual_seed(0))
    for X, spike in [(d0.columns, 1.0), (d1.columns, data.b)]:
        assert X.shape == (3, 30, 20)
        norms = X.norm(dim=1)
        torch.testing.assert_close(norms[:, 0], torch.full((3,), spike, dtype=torch.float64))
        torch.testing.assert_close(norms[:, 1:], torch.ones(3, 19, dtype=torch.float64))
        assert bool(((X[:, :, 1:-1] > 0).sum(1) == 5).all())
        anchor = X[:, :, 0].argmax(1)
        type2_on_anchor = X[torch.arange(3), anchor, 1:-1]
        torch.testing.assert_close(type2_on_anchor, torch.full((3, 18), 5 ** -0.5, dtype=torch.float64))
        off = logits(X, X)[:, 0, 1:-1]
        torch.testing.assert_close(off, torch.full_like(off, spike / 5 ** 0.5))
    e = SelfData(n=20, d=30, k=5, variant="E", anchored=0.5)
    X = e.sample(2, torch.Generator().manual_seed(1))[1].columns
    row1 = logits(X, X)[:, 0, 1:-1]
    assert sorted(set(round(v, 9) for v in row1.flatten().tolist())) == [0.0, round(e.b / 5 ** 0.5, 9)]


def test_data_constants_are_validated():
    with pytest.raises(ValueError, match="k"):
        SelfData(n=10, d=4, k=8)
