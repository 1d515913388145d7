"""Lower-bound calculators and the protocols their proofs run (Thm 2 and Thm 4) on random models."""
import math

import pytest
import torch
from typer.testing import CliRunner

from sepbench.cli import app
from sepbench.config import ModelConfig
from sepbench.models import build_model
from sepbench.theory import bounds as B
from sepbench.theory.protocols import one_way_protocol, partition_protocol

runner = CliRunner()


def test_recurrent_index_lookup_bound_bites_past_8k_for_128_by_64():
    assert B.rnn_index_lookup(1000, 32).minimum == math.ceil(1000 / 32)
    assert B.rnn_index_lookup(8192, 64).allows(128) and not B.rnn_index_lookup(8193, 64).allows(128)
    assert B.first_length_that_bites(B.rnn_index_lookup, 128, 64) == 8193  # sec. 6, L180


@pytest.mark.parametrize("n, p", [(20, 8), (400, 16), (1000, 32), (10_000, 64)])
def test_each_theorem_matches_its_statement(n, p):
    assert B.one_layer_dyck(n, p).value == pytest.approx((n - 1) / (3 * (p + math.log2(n))))
    assert B.rnn_nearest_neighbor(n, p).value * p == pytest.approx(n / 2)
    assert B.rnn_equality(n, p).value * p == pytest.approx(n / 2)
    thm12 = B.one_layer_equality(n, p)
    assert 3 * thm12.value * (p + math.log2(n)) == pytest.approx(n / 2)  # Thm 4's bits meet Fact 2's N/2
    assert B.rnn_associative_recall(n, p).value == pytest.approx(n / p)
    for bound in (B.one_layer_dyck(n, p), thm12, B.rnn_equality(n, p)):
        assert bound.minimum - 1 < bound.value <= bound.minimum


def test_bounds_grow_with_length_and_shrink_with_precision():
    for task in B.BOUNDS:
        short, long = B.bounds_for(task, 100, 16), B.bounds_for(task, 1000, 16)
        coarse, fine = B.bounds_for(task, 1000, 8), B.bounds_for(task, 1000, 64)
        for a, b, c, d in zip(short, long, coarse, fine):
            assert a.value < b.value and c.value > d.value


def test_bound_table_rows_and_bad_input():
    frame = B.bound_table("eq_random", [100, 200], 32)
    assert list(frame["theorem"]) == ["Thm 11", "Thm 12", "Thm 11", "Thm 12"]
    assert list(frame["length"]) == [100, 100, 200, 200]
    with pytest.raises(ValueError, match="no lower bound for task 'nope'; allowed: index_lookup"):
        B.bounds_for("nope", 10, 8)
    with pytest.raises(ValueError, match="precision must be >= 1"):
        B.bounds_for("dyck", 10, 0)
    with pytest.raises(ValueError, match="dyck instances have even length; got N=11"):
        B.bounds_for("dyck", 11, 8)
    assert B.bounds_for("nearest_neighbor", 11, 8)[0].minimum == 1


def test_bounds_cli():
    result = runner.invoke(app, ["bounds", "--task", "index_lookup", "--length", "8193", "--precision", "64",
                                 "--format", "csv"])
    assert result.exit_code == 0, result.output
    header, row = result.stdout.strip().splitlines()
    assert header.startswith("task,length,precision,theorem") and ",Thm 3," in row and ",129," in row
    table = runner.invoke(app, ["bounds", "--task", "dyck", "--lengths", "100,400", "--precision", "16"])
    assert table.exit_code == 0 and "Thm 5" in table.stdout
    bad = runner.invoke(app, ["bounds", "--task", "dyck", "--precision", "16"])
    assert bad.exit_code == 2 and "give --length" in bad.stderr
    bad = runner.invoke(app, ["bounds", "--task", "x", "--length", "10"])
    assert bad.exit_code == 2 and "allowed: index_lookup" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    for task in ("dyck", "eq_one"):  # no instance has odd length
        odd = runner.invoke(app, ["bounds", "--task", task, "--lengths", "100,10001", "--precision", "8"])
        assert odd.exit_code == 2 and "expects even task sizes" in odd.stderr and not odd.stdout


def _random_model(name: str, layers: int, width: int, heads: int = 1) -> torch.nn.Module:
    torch.manual_seed(0)
    config = ModelConfig(name=name, layers=layers, width=width, heads=heads)
    return build_model(config, vocab_size=11, max_len=40).double().eval()


@pytest.mark.parametrize("name", ["lstm", "linear_transformer", "retnet", "dss", "mamba"])
def test_thm2_state_split_reproduces_the_recurrent_output(name):
    model = _random_model(name, 2, 16, heads=2 if name == "retnet" else 1)
    tokens = torch.randint(0, 11, (4, 30), generator=torch.Generator().manual_seed(1))
    full = model(tokens)[:, -1]
    sizes = set()
    for split in (1, 7, 29):
        transcript = one_way_protocol(model, tokens, split)
        torch.testing.assert_close(transcript.logits, full, rtol=1e-7, atol=1e-7)
        sizes.add(transcript.numbers_sent)
    assert len(sizes) == 1  # the message is the state, whose size does not depend on the split
    if name == "lstm":
        assert sizes == {2 * 2 * 16}  # h and c of two layers


@pytest.mark.parametrize("heads", [1, 4])
def test_thm4_partition_protocol_reproduces_the_last_token(heads):
    model = _random_model("transformer", 1, 32, heads)
    generator = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 11, (5, 33), generator=generator)
    full = model(tokens)[:, -1]
    sent = set()
    for trial in range(4):
        alice = torch.rand(33, generator=generator) < 0.5
        alice[-1] = True
        if trial == 0:
            alice[:-1] = False  # Bob holds every other position
        transcript = partition_protocol(model, tokens, alice)
        torch.testing.assert_close(transcript.logits, full, rtol=1e-9, atol=1e-9)
        sent.add(transcript.numbers_sent)
    assert sent == {32 + heads * (4 + 2 * (32 // heads))}


def test_thm4_protocol_refuses_what_it_does_not_cover():
    tokens = torch.zeros(1, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="last position"):
        partition_protocol(_random_model("transformer", 1, 8), tokens, torch.tensor([True] * 4 + [False]))
    with pytest.raises(ValueError, match="one-layer softmax"):
        partition_protocol(_random_model("transformer", 2, 8), tokens, torch.ones(5, dtype=torch.bool))
    for attention in ("linear_transformer", "sparse_transformer"):  # their scores are not Thm 4's softmax sums
        with pytest.raises(ValueError, match=r"one-layer softmax Transformers, not 1 layer\(s\) of (Linear|Sparse)"):
            partition_protocol(_random_model(attention, 1, 8), tokens, torch.ones(5, dtype=torch.bool))
