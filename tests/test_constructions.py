"""Hand-set Transformers of Thms 1, 6 and 7 reach 100% through the trainer's evaluation path."""
import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sepbench.cli import app
from sepbench.tasks.lookup import IndexLookup
from sepbench.tasks.recall import NearestNeighbor
from sepbench.theory import constructions as C

runner = CliRunner()


@pytest.mark.parametrize(
    "name, length, samples",
    [("index_lookup", 4, 200), ("index_lookup", 100, 1000), ("index_lookup", 1000, 150), ("equality", 100, 1000), ("equality", 1000, 100),
     ("eq_one", 100, 1000), ("nearest_neighbor", 40, 500), ("nearest_neighbor", 200, 20),
     ("nearest_neighbor_copy", 40, 500), ("nearest_neighbor_copy", 200, 50)],
)
def test_construction_is_exact_at_its_smallest_accepted_width(name, length, samples):
    built = C.construct(name, length)
    assert next(built.model.parameters()).dtype == torch.float64
    assert built.accuracy(samples, seed=1) == 1.0


def test_lookup_code_width_grows_like_log_n_and_is_needed():
    widths = {n: C.min_code_width("index_lookup", n) for n in (100, 1000)}
    assert widths[100] <= widths[1000] <= 8 * math.ceil(math.log2(1000))
    assert widths[1000] < 1000 // 10
    too_narrow = C.index_lookup(IndexLookup(100), code_width=widths[100] // 2)
    assert C.lookup_attention_floor(C.sign_codes(101, widths[100] // 2, np.random.default_rng(0)), C.lookup_eta(100)) <= 0.5
    assert too_narrow.accuracy(300, seed=1) < 1.0


def test_one_hot_codes_give_exact_attention():
    built = C.index_lookup(IndexLookup(50), code_width=None)
    assert built.code_width == 51 and built.details["coherence"] == 0.0
    assert C.lookup_attention_floor(C.onehot_codes(51), C.lookup_eta(50)) > 0.75  # App. C.2, L414
    assert built.accuracy(500, seed=2) == 1.0


def test_lookup_needs_eta_above_two_log_3n():
    built = C.index_lookup(IndexLookup(50), code_width=None, eta=1.0)
    assert built.accuracy(500, seed=1) < 1.0


def test_equality_rejects_every_one_symbol_change():
    built = C.construct("equality", 60)
    rng = np.random.default_rng(3)
    batch = built.task.sample_eval(200, rng)
    inputs = batch.inputs.clone()
    half = built.task.length // 2
    positions = torch.from_numpy(rng.integers(half + 1, 2 * half + 1, size=len(inputs)))
    rows = torch.arange(len(inputs))
    inputs[rows, positions] = 1 - inputs[rows, positions]
    logits = built.model(inputs)
    truth = torch.tensor([built.task.reference_answer(row.tolist())[0] for row in inputs])
    assert torch.equal(logits[rows, -1].argmax(-1), truth)


def test_nearest_neighbor_layer_one_puts_nine_tenths_on_the_first_nearest_point():
    built = C.construct("nearest_neighbor", 40)
    task: NearestNeighbor = built.task
    batch = task.sample_eval(50, np.random.default_rng(4))
    block = built.model.blocks[0]
    x = built.model._embed(batch.inputs, torch.arange(batch.inputs.shape[1]), batch.inputs.shape[1])
    q, k, _ = block.mixer.qkv(x).split(built.model.config.width, dim=-1)
    scores = q @ k.transpose(1, 2) / math.sqrt(built.model.config.width)
    scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.softmax(-1)
    nearest = torch.from_numpy(task.nearest_earlier(batch.inputs[:, 0::2].numpy()))
    start = task.length // 2
    for t in range(start, task.length):
        query = 2 * t
        target = weights[torch.arange(len(batch)), query, 2 * nearest[:, t]]
        assert bool((target >= 0.9).all())  # L842-846, on the first occurrence even when the query repeats


def test_construct_cli_prints_width_and_accuracy():
    result = runner.invoke(app, ["construct", "equality", "--length", "40", "--samples", "100"])
    assert result.exit_code == 0, result.output
    assert "100.00%" in result.stdout and "40" in result.stdout
    search = runner.invoke(app, ["construct", "index_lookup", "--lengths", "50,200", "--find-min-width",
                                 "--samples", "50", "--verify-up-to", "100"])
    assert search.exit_code == 0, search.output
    assert search.stdout.count("100.00%") == 1 and str(C.min_code_width("index_lookup", 200)) in search.stdout


def test_construct_cli_prints_the_precision_that_keeps_it_exact(monkeypatch):
    from sepbench.theory import precision

    found = precision.measure_precision(C.construct("equality", 40), 100, 0)
    args = ["construct", "equality", "--length", "40", "--samples", "100", "--precision"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"{found.bits} bits" in result.stdout and f"+ {found.fraction_bits})" in result.stdout
    monkeypatch.setattr(precision, "MAX_FRACTION_BITS", 2)
    capped = runner.invoke(app, args)
    assert capped.exit_code == 0 and "inexact up to 2 fraction bits" in capped.stdout, capped.output


@pytest.mark.parametrize(
    "args, fragment",
    [(["construct", "nope", "--length", "10"], "unknown construction 'nope'; allowed: index_lookup"),
     (["construct", "equality"], "give --length"),
     (["construct", "equality", "--length", "31"], "--length expects an even task size >= 4, got 31"),
     (["construct", "equality", "--length", "3"], "--length expects an even task size >= 4, got 3"),
     (["construct", "equality", "--lengths", "4,5,2"], "--lengths expects even task sizes >= 4, got '4,5,2'"),
     (["construct", "index_lookup", "--lengths", "10,x"], "--lengths expects comma-separated integers"),
     (["construct", "index_lookup", "--lengths", "10,,20"], "--lengths expects comma-separated integers"),
     (["construct", "index_lookup", "--length", "3"], "--length expects a task size >= 4, got 3"),
     (["construct", "index_lookup", "--lengths", "8,1"], "--lengths expects task sizes >= 4, got '8,1'"),
     (["bounds", "--task", "dyck", "--length", "1"], "--length expects an even task size >= 2, got 1"),
     (["construct", "index_lookup", "--length", "50", "--queries", "margin"],
      "--queries applies to nearest_neighbor and nearest_neighbor_copy, not index_lookup"),
     (["table2", "--lengths", "10,20"], "the default widths are Table 2's, for the lengths 87,221,355,505 only"),
     (["construct", "nearest_neighbor", "--length", "40", "--code-width", "4"], "use a larger code width"),
     (["construct", "nearest_neighbor_copy", "--length", "40", "--queries", "nearest"], "--queries must be recall or margin"),
     (["construct", "nearest_neighbor_copy", "--length", "40", "--code-width", "4"], "the same code at N=40")],
)
def test_construct_bad_input_exits_2_with_one_line(args, fragment):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_accepted_nearest_neighbor_width_is_accepted_by_the_construction_on_every_seed():
    # a coherence of exactly 1/2 (e.g. 24/48) is rejected by the width search and the build alike
    for seed in range(3):
        width = C.min_code_width("nearest_neighbor", 50, seed)
        built = C.construct("nearest_neighbor", 50, code_width=width, seed=seed)
        assert built.code_width == width and built.accuracy(100, seed=seed) == 1.0, width


def test_the_construct_command_scores_margin_queries():
    result = runner.invoke(app, ["construct", "nearest_neighbor_copy", "--length", "40", "--queries", "margin",
                                 "--samples", "50"])
    assert result.exit_code == 0, result.output
    assert "100.00%" in result.stdout


def test_margin_queries_have_one_nearest_vector_and_are_not_all_repeats():
    task = NearestNeighbor(60, {"dims": 6, "queries": "margin", "distinct": True})
    ids = task.sample_eval(40, np.random.default_rng(0)).inputs[:, 0::2].numpy()
    vectors = task.vectors(ids)
    repeats = 0
    for row, x in zip(ids, vectors):
        for k in range(30, 60):
            products = x[:k] @ x[k]
            nearest = set(row[:k][products == products.max()])
            assert len(nearest) == 1
            repeats += products.max() == 6
    assert 0 < repeats < 40 * 30  # exact repeats and queries at a margin below them both occur


@pytest.mark.parametrize("queries", ["recall", "margin"])
def test_nearest_neighbor_by_copy_is_exact_and_its_width_grows_like_log_n(queries):
    built = {n: C.construct("nearest_neighbor_copy", n, queries=queries) for n in (50, 300)}
    for n, construction in built.items():
        assert construction.accuracy(60, seed=3) == 1.0, n
    per_bit = {n: c.width / math.log2(n) for n, c in built.items()}
    assert per_bit[300] <= 1.25 * per_bit[50]
    assert built[300].width < C.construct("nearest_neighbor", 50).width  # App. G.2's one-hot layout: O(N)


def test_nearest_neighbor_by_copy_needs_its_codes_and_its_sharpness():
    task = C.nearest_neighbor_task(50, "margin")
    codes = C.sign_codes(task.max_seq_len() + 1, 8, np.random.default_rng(0))
    assert C.previous_token_floor(codes, C.previous_token_eta(0.9, 100, 6)) < 1 - 1 / 24
    with pytest.raises(ValueError, match="the same code"):  # 101 positions share 2^8 codes: two coincide
        C.nearest_neighbor_by_copy(task, code_width=8)
    width = C.min_code_width("nearest_neighbor_copy", 50)
    blunt = C.nearest_neighbor_by_copy(task, code_width=width)
    with torch.no_grad():
        blunt.model.blocks[1].mixer.qkv.weight[: blunt.width] /= 20  # eta2 / 20: labels of farther points leak in
    assert blunt.accuracy(300, seed=1) < 1.0


@pytest.mark.parametrize("name, length", [("index_lookup", 64), ("equality", 64), ("nearest_neighbor_copy", 40)])
def test_a_construction_is_exact_at_its_measured_precision_and_not_one_bit_below(name, length):
    from sepbench.theory.precision import fixed_point, measure_precision

    built = C.construct(name, length, queries="margin" if name == "nearest_neighbor_copy" else "recall")
    before = {k: v.clone() for k, v in built.model.state_dict().items()}
    found = measure_precision(built, 100, seed=0)
    assert found.exact and found.bits == 1 + found.integer_bits + found.fraction_bits
    assert all(torch.equal(before[k], v) for k, v in built.model.state_dict().items())
    with fixed_point(built.model, found.fraction_bits) as seen:
        assert built.accuracy(100, seed=0) == 1.0
        assert all(torch.equal(torch.floor(v * 2.0**found.fraction_bits), v * 2.0**found.fraction_bits)
                   for v in built.model.parameters())
    assert 2 ** (found.integer_bits - 1) <= seen.largest < 2**found.integer_bits
    if found.fraction_bits > 0:
        with fixed_point(built.model, found.fraction_bits - 1):
            assert built.accuracy(100, seed=0) < 1.0


def test_fixed_point_rounds_parameters_not_buffers_restores_them_and_ignores_infinities():
    from sepbench.theory.precision import fixed_point

    model = torch.nn.Linear(2, 1).double()
    model.register_buffer("mask", torch.tensor([-math.inf, 3.75], dtype=torch.float64))
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.3, -0.3]], dtype=torch.float64))
        model.bias.fill_(0.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="inside"):
        with fixed_point(model, 2) as seen:
            assert model.weight.tolist() == [[0.25, -0.5]] and model.mask[1] == 3.75
            out = model(torch.tensor([[1.0, math.inf]], dtype=torch.float64))
            assert out.item() == -math.inf
            raise RuntimeError("inside")
    assert seen.largest == 1.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_the_construction_check_measures_precision_growing_as_log_n(monkeypatch):
    from sepbench.claims import checks
    from sepbench.claims.catalogue import select
    from sepbench.claims.series_rules import evaluate_series
    from sepbench.claims.verdicts import INCONCLUSIVE, REPRODUCED
    from sepbench.theory import precision

    params = {"name": "index_lookup", "lengths": [16, 256], "samples": 100, "seeds": [0, 1], "precision_seeds": [0]}
    series = checks.construction(params)
    assert set(series["precision bits"]) == {16, 256} and all(len(v) == 1 for v in series["precision bits"].values())
    assert all(p == 1 + i + f for p, i, f in zip(*(
        [v[0] for v in series[label].values()] for label in ("precision bits", "integer bits", "fraction bits"))))
    (claim,) = select(None, "construct-index-lookup")
    assert [o.verdict for o in evaluate_series(claim, "quick", series)][-1] == REPRODUCED
    monkeypatch.setattr(precision, "MAX_FRACTION_BITS", 2)
    capped = checks.construction(params)
    assert capped["precision bits"][256] == [math.inf] and capped["integer bits"][256][0] < math.inf
    unmeasured = evaluate_series(claim, "quick", capped)[-1]
    assert unmeasured.verdict == INCONCLUSIVE
    assert unmeasured.reasons == ["precision bits: beyond the range measured at N = 16, 256"]
    not_a_number = {**series, "precision bits": {16: [math.nan], 256: [30.0]}}
    assert evaluate_series(claim, "quick", not_a_number)[-1].reasons == [
        "precision bits: beyond the range measured at N = 16"]
    zero = {**series, "precision bits": {16: [0.0], 256: [30.0]}}
    assert evaluate_series(claim, "quick", zero)[-1].reasons == [
        "precision bits: 0 at the smallest N, which no growth is measured from"]
