"""Diagonal state space layer DSS-exp (Gupta et al. 2022, "Diagonal State Spaces are as Effective as Structured State Spaces")."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from typing import Literal

from pydantic import Field, model_validator
from torch import nn

from sepbench.config import ModelConfig, StrictModel
from sepbench.models.mixers.base import Mixer
from sepbench.models.mixers.cpu_kernels import choose_path
from sepbench.models.mixers.dss_cpu import SOURCE, diagonal_recurrence, kernel_library
from sepbench.models.registry import MODELS


class DSSOptions(StrictModel):
    state: int = Field(32, ge=1, description="complex state size N per channel")
    dt_min: float = Field(1e-3, gt=0.0)
    dt_max: float = Field(1e-1, gt=0.0)
    conv: Literal["auto", "recurrent", "fft"] = Field(
        "auto", description="training convolution: auto (the compiled CPU recurrence on CPU where it builds, else "
        "the FFT), recurrent (an error where it does not build), or fft")

    @model_validator(mode="after")
    def _ordered_steps(self) -> "DSSOptions":
        if self.dt_min > self.dt_max:
            raise ValueError(f"dt_min {self.dt_min} is above dt_max {self.dt_max}; give dt_min <= dt_max")
        return self


def fft_length(n: int) -> int:
    """The smallest length >= n with no prime factor above 5: pocketfft's fast sizes (2T = 204 took 1.7x as
    long as 216 for a DSS layer's transforms at T = 102)."""
    n = max(n, 1)
    while True:
        m = n
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def hippo_normal_eigenvalues(n: int) -> torch.Tensor:
    """The N eigenvalues with positive imaginary part of the normal part of HiPPO-LegS of size 2N (Gupta et al. 2022, sec. 3.3)."""
    size = 2 * n
    idx = torch.arange(size, dtype=torch.float64, device="cpu")  # init-time numerics, also under a meta device
    scale = torch.sqrt(2 * idx + 1)
    skew = 0.5 * scale[:, None] * scale[None, :]
    skew = torch.where(idx[:, None] > idx[None, :], -skew, skew)
    skew.fill_diagonal_(0.0)
    imag = torch.linalg.eigvalsh(1j * skew.to(torch.complex128)).real  # eigvals of a skew matrix are i*real
    imag = imag[imag > 0].sort().values[:n]
    return torch.complex(torch.full_like(imag, -0.5), imag)


@MODELS.register("dss", "DSS-exp diagonal state space layer, FFT convolution training, recurrent decoding (Gupta et al. 2022)")
class DiagonalSSM(Mixer):
    """Per channel y = Re(K * u) + D u with K_k = Re(W (e^{dt Lambda} - 1)/Lambda e^{k dt Lambda}) (Gupta et al. 2022, eq. 6, DSS-exp).

    Then GELU and a position-wise output projection, as in the S4/DSS layers.
    """

    Options = DSSOptions
    default_lr = 1e-3
    default_positions = "none"
    default_mlp = True

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        width, state = config.width, self.options.state
        self.state_size = state
        self.log_neg_real = nn.Parameter(torch.empty(state))
        self.imag = nn.Parameter(torch.empty(state))
        self.w = nn.Parameter(torch.empty(width, state, 2))
        self.log_dt = nn.Parameter(torch.empty(width))
        self.skip = nn.Parameter(torch.empty(width))
        self.out = nn.Linear(width, width)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        eig = hippo_normal_eigenvalues(self.state_size)
        with torch.no_grad():
            self.log_neg_real.copy_((-eig.real).log())
            self.imag.copy_(eig.imag)
            self.w.normal_(0.0, 0.5**0.5)
            low, high = math.log(self.options.dt_min), math.log(self.options.dt_max)
            self.log_dt.uniform_(low, high)
            self.skip.normal_(0.0, 1.0)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def _discrete(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per channel and state: dt*Lambda [D, N], the input weight (e^{dt Lambda}-1)/Lambda and C = W."""
        lam = torch.complex(-self.log_neg_real.exp(), self.imag)  # [N]
        dt_lam = self.log_dt.exp()[:, None] * lam  # [D, N]
        b_bar = (dt_lam.exp() - 1.0) / lam
        return dt_lam, b_bar, torch.view_as_complex(self.w.contiguous())

    def kernel(self, length: int) -> torch.Tensor:
        """K [D, T] (Gupta et al. 2022, eq. 6, DSS-exp)."""
        dt_lam, b_bar, c = self._discrete()
        powers = torch.exp(dt_lam[:, :, None] * torch.arange(length, device=dt_lam.device, dtype=dt_lam.real.dtype))
        return torch.einsum("dn,dnt->dt", c * b_bar, powers).real

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv_path(x.device) == "recurrent":
            dt_lam, b_bar, c = self._discrete()
            y = diagonal_recurrence(x, dt_lam.exp(), c * b_bar)
            return self.out(F.gelu(y + self.skip * x))
        length = x.shape[1]
        k = self.kernel(length)  # [D, T]
        size = fft_length(2 * length - 1)  # no wrap-around into the first T outputs
        u = torch.fft.rfft(x.transpose(1, 2), n=size)
        y = torch.fft.irfft(u * torch.fft.rfft(k, n=size), n=size)[..., :length].transpose(1, 2)
        return self.out(F.gelu(y + self.skip * x))

    def conv_path(self, device: torch.device) -> str:
        """The convolution that trains on ``device``: recurrent (compiled CPU kernel) or fft."""
        return choose_path("dss conv", self.options.conv, "recurrent", "fft", device, kernel_library, SOURCE,
                           "auto, fft")

    def compute_paths(self, device: torch.device) -> dict[str, str]:
        return {"conv": self.conv_path(device)}

    def has_batching_rule(self, device: torch.device) -> bool:
        return self.conv_path(device) == "fft"

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        return torch.zeros(batch_size, self.width, self.state_size, device=device, dtype=complex_dtype)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h_k = e^{dt Lambda} h_{k-1} + B_bar u_k, y_k = Re(W h_k) + D u_k: the recurrence behind the kernel."""
        dt_lam, b_bar, c = self._discrete()
        state = dt_lam.exp() * state + b_bar * x.unsqueeze(-1)
        y = (c * state).sum(-1).real
        return self.out(F.gelu(y + self.skip * x)), state

    def state_floats(self, length: int) -> int:
        """Closed form: D N complex numbers, 2 D N floats, whatever the length."""
        return 2 * self.width * self.state_size

    def flops(self, length: int) -> int:
        """Output projection 2 T D^2 and the kernel 2 D N T (complex products counted once); the FFTs are not counted."""
        return 2 * length * self.width**2 + 2 * self.width * self.state_size * length
