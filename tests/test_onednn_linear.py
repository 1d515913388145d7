"""Mamba's projections through oneDNN: the same numbers as F.linear, forward and backward, and the path recorded."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sepbench.config import ConfigError, ModelConfig
from sepbench.models import build_model
from sepbench.models.mixers import cpu_kernels, onednn_linear
from sepbench.models.mixers.cpu_kernels import pytorch_forms
from sepbench.models.mixers.onednn_linear import OneDNNLinear, linear, onednn_available

needs_onednn = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN linear on the CPU")


def relative_error(found: torch.Tensor, expected: torch.Tensor) -> float:
    return float((found - expected).abs().max().detach() / expected.abs().max().detach())


@needs_onednn
@pytest.mark.parametrize("rows, inputs, outputs, bias, strided", [
    ((64, 101), 64, 256, False, False),  # in_proj: the input narrower than the output
    ((64, 101), 128, 36, False, False),  # x_proj: the output narrower
    ((7,), 4, 128, True, True),  # dt_proj from a strided slice, with a bias
    ((2, 3, 5), 9, 9, True, False)])
def test_products_and_gradients_equal_f_linear(rows, inputs, outputs, bias, strided):
    g = torch.Generator().manual_seed(inputs)
    x = torch.randn(*rows, 2 * inputs if strided else inputs, generator=g)[..., :inputs]
    assert x.is_contiguous() != strided
    x.requires_grad_()
    weight = torch.randn(outputs, inputs, generator=g, requires_grad=True)
    b = torch.randn(outputs, generator=g, requires_grad=True) if bias else None
    leaves = [x, weight] + ([b] if bias else [])
    grad = torch.randn(*rows, outputs, generator=g)
    found, expected = OneDNNLinear.apply(x, weight, b), F.linear(x, weight, b)
    assert relative_error(found, expected) < 1e-5
    for ours, torchs in zip(torch.autograd.grad(found, leaves, grad), torch.autograd.grad(expected, leaves, grad)):
        assert ours.shape == torchs.shape and relative_error(ours, torchs) < 1e-5


def test_where_onednn_cannot_take_the_product_f_linear_does():
    x, weight = torch.randn(3, 4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    assert torch.equal(linear(x, weight, None, onednn=True), F.linear(x, weight))
    x32, w32 = x.float(), weight.float()
    with pytorch_forms():  # FLOP counting sees only PyTorch's own products
        out = linear(x32.requires_grad_(), w32, None, onednn=True)
    assert out.grad_fn.name() != "OneDNNLinearBackward"


@needs_onednn
def test_decoding_steps_agree_with_the_whole_sequence_through_onednn():
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="mamba", layers=2, width=16, options={"linear": "onednn"}), 9, 20).eval()
    assert model.compute_paths(torch.device("cpu"))["linear"] == "onednn"
    tokens = torch.randint(0, 9, (3, 12))
    with torch.no_grad():
        whole = model(tokens)
        state = model.init_state(3)
        steps = []
        for t in range(12):
            logits, state = model.step(tokens[:, t], state)
            steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), whole, rtol=1e-4, atol=1e-5)


def test_an_operator_that_fails_or_differs_is_not_used(monkeypatch):
    def broken(x, weight, bias=None):
        raise RuntimeError("no such operator signature")

    for stand_in in (broken, lambda x, weight, bias=None: F.linear(x, weight) + 1e-3):
        monkeypatch.setattr(onednn_linear, "_times_transposed", stand_in)
        onednn_linear.onednn_available.cache_clear()
        try:
            assert not onednn_available()
        finally:
            onednn_linear.onednn_available.cache_clear()


def test_asking_for_onednn_where_torch_lacks_it_is_one_line(monkeypatch):
    monkeypatch.setattr(onednn_linear, "onednn_available", lambda: False)
    monkeypatch.setattr("sepbench.models.mixers.mamba.onednn_available", lambda: False)
    model = build_model(ModelConfig(name="mamba", layers=1, width=8, options={"linear": "onednn"}), 5, 10)
    with pytest.raises(ConfigError, match="mamba linear 'onednn' needs .*allowed elsewhere: auto, torch"):
        model.compute_paths(torch.device("cpu"))
    auto = build_model(ModelConfig(name="mamba", layers=1, width=8), 5, 10)
    assert auto.compute_paths(torch.device("cpu"))["linear"] == "torch"


@needs_onednn
@pytest.mark.parametrize("vendor, path", [("GenuineIntel", "torch"), ("AuthenticAMD", "onednn"), ("", "onednn")])
def test_auto_takes_mkl_on_intel_processors_and_onednn_elsewhere(monkeypatch, vendor, path):
    monkeypatch.setattr(cpu_kernels, "cpu_vendor", lambda: vendor)
    auto = build_model(ModelConfig(name="mamba", layers=1, width=8), 5, 10)
    assert auto.compute_paths(torch.device("cpu"))["linear"] == path
    forced = build_model(ModelConfig(name="mamba", layers=1, width=8, options={"linear": "onednn"}), 5, 10)
    assert forced.compute_paths(torch.device("cpu"))["linear"] == "onednn"

