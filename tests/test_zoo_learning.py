"""Every architecture, at its default learning rate, learns a small Index Lookup (a real threshold)."""
import pytest

from sepbench.conformance import mixers

# (model, N, steps): budgets measured on CPU with a margin. The recurrent models get N = 5: at N = 20 a
# width-64 LSTM or DSS must hold all symbols in its state (Thm 3) and learns far slower; their 3000-step
# N = 20 figures are in docs/models.md.
BUDGETS = [
    ("transformer", 10, 600), ("sparse_transformer", 10, 600), ("linear_transformer", 10, 600), ("retnet", 10, 600),
    ("mamba", 5, 1500), ("dss", 5, 2500), ("lstm", 5, 3000),
]


def test_every_architecture_has_a_learning_budget():
    from sepbench.models import MODELS

    assert {name for name, _, _ in BUDGETS} == set(MODELS.names())


@pytest.mark.slow
@pytest.mark.parametrize("name,length,steps", BUDGETS)
def test_learns_short_index_lookup(name, length, steps):
    outcome = mixers.learns_index_lookup(name, length, steps, threshold=0.9)
    assert outcome.status == "pass", outcome.detail
