"""Each new architecture, at its default learning rate, learns a small Index Lookup (a real threshold)."""
import pytest

from sepbench import RunConfig, train

# (model, steps): budgets measured on CPU with a margin; the slower learners' 3000-step figures are in docs/models.md
BUDGETS = [("sparse_transformer", 600), ("linear_transformer", 600), ("retnet", 600)]


@pytest.mark.parametrize("name,steps", BUDGETS)
def test_learns_short_index_lookup(name, steps):
    cfg = RunConfig.build({
        "task": {"name": "index_lookup", "length": 10},
        "model": {"name": name, "layers": 2, "width": 64},
        "train": {"steps": steps, "batch_size": 32, "eval_every": 50, "eval_samples": 500, "threshold": 0.9},
        "device": "cpu",
    })
    result = train(cfg)
    assert result.status == "solved" and result.accuracy >= 0.9, (result.steps, result.curve[-3:])
