import math

import pytest

from sepbench.config import ModelConfig
from sepbench.models import build_model
from sepbench.models.accounting import state_size
from sepbench.report.bounds import BoundCurve, Series, theory_bounds, width_holding
from sepbench.theory.bounds import one_layer_dyck, one_layer_equality, rnn_equality, rnn_index_lookup

P = 32


def series(name: str, layers: int = 1, **fields) -> Series:
    return Series((ModelConfig(name=name, layers=layers, **fields),))


def state_at(config: ModelConfig, width: int, length: int) -> int:
    return state_size(build_model(config.model_copy(update={"width": width}), 8, length), length)


def test_an_lstm_curve_is_the_width_whose_h_and_c_over_all_layers_hold_m_numbers():
    lengths = [1000, 4096, 5000]
    (curve,) = theory_bounds("index_lookup", [series("lstm", 2)], lengths)
    assert curve.series == "lstm, 2 layers" and curve.label.startswith("lstm, 2 layers: Thm 3, ")
    assert curve.label.endswith("m >= N / p (p = 32); m = state floats")
    assert curve.widths == [math.ceil(n / P / (2 * 2)) for n in lengths] == [8, 32, 40]
    config = ModelConfig(name="lstm", layers=2)
    for n, width in zip(lengths, curve.widths):
        m = rnn_index_lookup(n, P).value
        assert state_at(config, width, n) >= m > state_at(config, width - 1, n)


@pytest.mark.parametrize("name", ["lstm", "dss", "mamba", "linear_transformer", "retnet"])
@pytest.mark.parametrize("layers", [1, 2])
def test_every_recurrent_curve_is_the_smallest_width_whose_state_holds_the_bound(name, layers):
    lengths = [4096, 16384]
    (curve,) = theory_bounds("eq_random", [series(name, layers)], lengths)
    assert curve.label.startswith(f"{name}, {counted_layers(layers)}: Thm 11, ")
    config = ModelConfig(name=name, layers=layers)
    step = {"linear_transformer": config.heads, "retnet": 2 * config.heads}.get(name, 1)
    for n, width in zip(lengths, curve.widths):
        m = rnn_equality(n, P).value
        if math.isnan(width):  # the smallest model already holds m: the bound rules out no width
            assert state_at(config, step, n) >= m
            continue
        assert width % step == 0 and state_at(config, width, n) >= m
        assert width > step and state_at(config, width - step, n) < m


def counted_layers(layers: int) -> str:
    return "1 layer" if layers == 1 else f"{layers} layers"


def theorem(curve: BoundCurve) -> str:
    return curve.label.removeprefix(f"{curve.series}: ").split(",")[0]


def test_the_curve_follows_the_series_own_config():
    small = series("mamba", options={"expand": 1, "state": 4})
    default, narrow = theory_bounds("index_lookup", [series("mamba"), small], [16384])
    assert default.widths == [14] and narrow.widths == [74]  # E (K - 1 + N) floats: 2w (3 + 16) and w (3 + 4)


def test_a_series_of_several_configs_gets_the_smallest_width_any_of_them_allows():
    both = Series((ModelConfig(name="mamba", options={"expand": 1, "state": 4}), ModelConfig(name="mamba")))
    (curve,) = theory_bounds("index_lookup", [both], [16384])
    assert curve.widths == [14]
    mixed = Series((ModelConfig(name="transformer", heads=2), ModelConfig(name="transformer", heads=4)))
    (curve,) = theory_bounds("dyck", [mixed], [4096])
    assert curve.widths == [one_layer_dyck(4096, P).value / 4] and "; as m at H = 2/4" in curve.label


def test_a_width_past_the_widest_model_is_not_drawn():
    assert width_holding(ModelConfig(name="lstm"), 2 * 65536 + 1, 10) is None
    (curve,) = theory_bounds("index_lookup", [series("lstm")], [4096, 10**7])
    assert curve.widths[0] == 64 and math.isnan(curve.widths[1])


def test_one_layer_bounds_are_drawn_only_for_one_layer_transformers_with_their_own_heads():
    lengths = [4096, 16384]
    plotted = [series("transformer", 1, heads=2), series("transformer", 2), series("lstm"), series("mamba", 1)]
    (curve,) = theory_bounds("dyck", plotted, lengths)
    assert curve.series == "transformer, 1 layer" and curve.label.startswith("transformer, 1 layer: Thm 5, ")
    assert "(p = 32); as m at H = 2" in curve.label
    assert curve.widths == [one_layer_dyck(n, P).value / 2 for n in lengths]
    curves = {(c.series, theorem(c)): c for c in theory_bounds("eq_random", plotted, lengths)}
    assert sorted(curves) == [("lstm, 1 layer", "Thm 11"), ("mamba, 1 layer", "Thm 11"),
                              ("transformer, 1 layer", "Thm 12")]
    assert curves["transformer, 1 layer", "Thm 12"].widths == [one_layer_equality(n, P).value / 2 for n in lengths]
    assert theory_bounds("dyck", [series("transformer", 2), series("lstm", 3)], lengths) == []


def test_a_bound_every_width_meets_is_not_a_curve():
    """Thm 5 at N = 64 asks mH >= 0.55: every one-layer Transformer meets it; Thm 3 at N = 64 asks 2 state floats,
    which the narrowest LSTM holds."""
    assert theory_bounds("dyck", [series("transformer", 1, heads=2)], [64]) == []
    assert theory_bounds("index_lookup", [series("lstm")], [64]) == []
    (curve,) = theory_bounds("index_lookup", [series("lstm")], [64, 4096])
    assert math.isnan(curve.widths[0]) and curve.widths[1] == 64


def test_a_plugin_attention_over_a_window_shorter_than_n_gets_the_recurrent_bounds_and_full_attention_none(
        monkeypatch):
    """The recurrent bounds are about a state that stops growing with N, whatever the model is called: a sliding
    window of 8 positions holds a fixed state at N = 4096, a full KV cache does not."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples" / "sepbench-window" / "src"))
    window = series("sepbench_window.mixer:SlidingWindowAttention", options={"window": 8})
    (curve,) = theory_bounds("eq_random", [window], [4096, 16384])
    assert theorem(curve) == "Thm 11" and curve.label.endswith("m = state floats")
    assert not [c for c in theory_bounds("eq_random", [series("transformer", 2)], [4096, 16384])]
