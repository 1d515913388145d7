"""State size and FLOPs: measured by running each model, against each architecture's closed form."""
import pytest
import torch

from sepbench.conformance import mixers
from sepbench.models import MODELS
from sepbench.models.accounting import count_state_floats, model_cost, paper_flops, state_size

make = mixers.accounting_model


@pytest.mark.parametrize("check", [mixers.state_matches_closed_form, mixers.flops_match_closed_form],
                         ids=lambda check: check.__name__)
@pytest.mark.parametrize("name", MODELS.names())
def test_measured_state_and_flops_match_closed_forms(name, check):
    outcome = check(name)
    assert outcome.status == "pass", outcome.detail


def test_the_first_count_in_a_process_leaves_out_the_onednn_probe():
    from sepbench.models.accounting import forward_flops, measure_flops
    from sepbench.models.mixers.onednn_linear import onednn_available

    model = make("mamba")
    onednn_available.cache_clear()  # the probe runs inside the counter, as on a process's first count
    assert measure_flops(model, torch.zeros(1, 8, dtype=torch.long)) == forward_flops(model, 8)


def test_state_grows_with_length_only_for_attention_caches():
    grows = {name for name in MODELS.names() if state_size(make(name, 200), 200) > state_size(make(name, 200), 20)}
    assert grows == {"transformer", "sparse_transformer"}
    sparse = make("sparse_transformer", 200)  # B = 8: window 8 plus one global per earlier block
    assert state_size(sparse, 200) == 2 * (2 * 16 * (8 + 24))


def test_complex_state_counts_two_floats_per_number():
    assert count_state_floats([torch.zeros(3, dtype=torch.complex64), torch.zeros(2), torch.zeros(4, dtype=torch.long)]) == 8


# Yang et al. 2024, Table 2 (GFLOPs) and the minimum solving widths its numbers imply
TABLE2 = {
    "transformer": ([64, 128, 128, 128], [0.027, 0.266, 0.426, 0.605]),
    "sparse_transformer": ([128, 256, 256, 256], [0.106, 1.055, 1.690, 2.399]),
    "linear_transformer": ([256, 512, 512, 512], [0.422, 4.220, 6.756, 9.584]),
}
LENGTHS = [87, 221, 355, 505]


@pytest.mark.parametrize("name", ["transformer", "sparse_transformer"])
def test_paper_flops_reproduce_table_2_exactly(name):
    widths, printed = TABLE2[name]
    assert [round(paper_flops(name, d, 3, n) / 1e9, 3) for d, n in zip(widths, LENGTHS)] == printed


def test_paper_flops_reproduce_table_2_linear_row_within_a_fifth_of_a_percent():
    widths, printed = TABLE2["linear_transformer"]
    for d, n, gf in zip(widths, LENGTHS, printed):
        assert abs(paper_flops("linear_transformer", d, 3, n) / 1e9 - gf) / gf < 2e-3


def test_model_cost_row():
    cost = model_cost("lstm", width=8, layers=2, length=10, vocab_size=5)
    assert (cost.parameters, cost.state_floats) == (2 * (4 * 8 * (8 + 8 + 2)) + 5 * 8 + 5 * 8 + 2 * 2 * 8 + 2 * 8, 2 * 2 * 8)


def test_models_details_prints_every_architecture(tmp_path):
    from typer.testing import CliRunner

    from sepbench.cli import app

    result = CliRunner().invoke(app, ["models", "--details", "--width", "16", "--layers", "1", "--length", "64"])
    assert result.exit_code == 0, result.output
    for name in MODELS.names():
        row = next(line for line in result.output.splitlines() if f" {name} " in line)
        assert f"{model_cost(name, 16, 1, 64).parameters:,}" in row
    bad = CliRunner().invoke(app, ["models", "--details", "--width", "15"])
    assert bad.exit_code == 2 and "not divisible by heads" in bad.output


def test_both_flops_columns_count_the_same_tokens():
    from sepbench.models.accounting import paper_flops

    cost = model_cost("transformer", width=256, layers=3, length=102)
    assert cost.paper_flops == paper_flops("transformer", 256, 3, 100) == 102 * (2 * 3 * 12 * 256**2 + 1.4e4)
