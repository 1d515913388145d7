"""DSS's compiled CPU recurrence against its FFT convolution."""
from __future__ import annotations

import platform

import pytest
import torch

from sepbench.config import ConfigError, ModelConfig
from sepbench.models import build_model
from sepbench.models.mixers import cpu_kernels
from sepbench.models.mixers.dss import fft_length
from sepbench.models.mixers.dss_cpu import diagonal_recurrence, kernel_library

if cpu_kernels.compiler() is None:
    pytest.skip("no C++ compiler: DSS trains with the FFT convolution here", allow_module_level=True)


def test_the_kernel_builds():
    assert kernel_library() is not None


@pytest.mark.parametrize("length,width", [(1, 3), (2, 3), (16, 3), (17, 3), (40, 3), (5, 40), (3, 70)])
def test_recurrence_passes_gradcheck(length, width):
    """Widths below, between and above multiples of the kernel's 32-channel block."""
    g = torch.Generator().manual_seed(length)
    u = torch.randn(2, length, width, generator=g, dtype=torch.float64)
    magnitude = 0.5 + 0.45 * torch.rand(width, 4, generator=g, dtype=torch.float64)
    angle = torch.rand(width, 4, generator=g, dtype=torch.float64)
    parts = (u, magnitude * angle.cos(), magnitude * angle.sin(), *torch.randn(2, width, 4, generator=g, dtype=torch.float64))
    parts = tuple(p.requires_grad_() for p in parts)
    assert torch.autograd.gradcheck(lambda u, dr, di, cr, ci: diagonal_recurrence(u, torch.complex(dr, di), torch.complex(cr, ci)), parts)


def outputs_and_grads(conv: str, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = build_model(ModelConfig(name="dss", layers=2, width=16, options={"conv": conv}), 9, 120).to(dtype)
    assert model.compute_paths(torch.device("cpu")) == {"conv": conv}
    tokens = torch.randint(0, 9, (3, 117), generator=torch.Generator().manual_seed(1))
    out = model(tokens)
    out.sin().sum().backward()
    return out.detach().double(), {n: p.grad.double() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_dss_model_recurrent_matches_fft_in_float64(dtype, tolerance):
    """Float32 is held to the float64 result: there the recurrence is the closer of the two (the FFT's float32
    log_dt gradient was 5e-4 off, the recurrence's 8e-5)."""
    out, grads = outputs_and_grads("recurrent", dtype)
    expected_out, expected_grads = outputs_and_grads("fft", torch.float64)
    assert (out - expected_out).abs().max() <= tolerance * expected_out.abs().max()
    for name, grad in grads.items():
        expected = expected_grads[name]
        assert (grad - expected).abs().max() <= tolerance * expected.abs().max(), name


def test_recurrent_conv_without_a_compiler_is_refused_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "compiler", lambda: None)
    cpu_kernels._load.cache_clear()
    try:
        auto = build_model(ModelConfig(name="dss", layers=1, width=8), 5, 10)
        assert auto.compute_paths(torch.device("cpu")) == {"conv": "fft"}
        auto(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
        forced = build_model(ModelConfig(name="dss", layers=1, width=8, options={"conv": "recurrent"}), 5, 10)
        with pytest.raises(ConfigError, match="allowed elsewhere: auto, fft"):
            forced(torch.zeros(1, 4, dtype=torch.long))
    finally:
        cpu_kernels._load.cache_clear()


def test_fft_lengths_are_5_smooth_and_long_enough():
    assert [fft_length(n) for n in (-1, 0, 1, 7, 17, 203, 803)] == [1, 1, 1, 8, 18, 216, 810]


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the flush is x86's MXCSR mode")
def test_the_recurrence_reads_a_subnormal_input_as_zero_and_restores_the_mode():
    u = torch.full((1, 1, 1), 1e-39)
    decay, cb = torch.complex(torch.full((1, 1), 0.5), torch.zeros(1, 1)), torch.ones(1, 1, dtype=torch.complex64)
    assert diagonal_recurrence(u, decay, cb).item() == 0.0
    assert diagonal_recurrence(u * 1e10, decay, cb).item() == pytest.approx(1e-29)  # a normal input goes through
    assert (torch.tensor(1e-39) * 0.5).item() != 0.0
