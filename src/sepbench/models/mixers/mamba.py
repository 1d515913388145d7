"""The Mamba block: a selective state space model (Gu & Dao 2023, "Mamba", sec. 3 and Algorithm 2)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from sepbench.config import ConfigError, ModelConfig, StrictModel
from sepbench.models.mixers.base import Mixer
from sepbench.models.mixers.cpu_kernels import choose_path
from sepbench.models.mixers.mamba_cpu import SOURCE, fused_causal_conv, fused_selective_scan, kernel_library
from sepbench.models.mixers.onednn_linear import linear, onednn_available, onednn_preferred
from sepbench.models.mixers.selective_scan import selective_scan, selective_scan_reference
from sepbench.models.registry import MODELS


class MambaOptions(StrictModel):
    state: int = Field(16, ge=1, description="SSM state size N per channel")
    expand: int = Field(2, ge=1, description="inner width = expand * width")
    conv: int = Field(4, ge=1, description="depthwise causal convolution width")
    dt_rank: int | None = Field(None, ge=1, description="rank of the Delta projection; default ceil(width / 16)")
    chunk: int | None = Field(None, ge=1, description="scan chunk length; default: chunks of >= 8 steps so that a step advances about 128 states (batch x chunks), one chunk where that gives fewer than 4")
    scan: Literal["auto", "fused", "chunked", "reference"] = Field(
        "auto", description="training scan on CPU: auto (fused where its kernel builds, else chunked), fused (the "
        "compiled kernel, an error where it does not build), chunked (PyTorch), or the step-by-step reference")
    kernel: bool = Field(True, description="use mamba_ssm's CUDA kernel when installed and on CUDA")
    linear: Literal["auto", "onednn", "torch"] = Field(
        "auto", description="the projections' products on CPU: auto (oneDNN's where torch has it and the processor "
        "is not Intel's, else torch's), onednn (an error where torch lacks it), torch (F.linear: MKL's sgemm)")


def _cuda_kernel():
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except ImportError:
        return None
    return selective_scan_fn


@dataclass
class MambaState:
    """The last conv-1 inner inputs [B, E, K-1] for the causal convolution and the SSM state [B, E, N]."""

    conv: torch.Tensor
    ssm: torch.Tensor


@MODELS.register("mamba", "Mamba selective SSM block: input-dependent Delta, B, C, causal conv, gating (Gu & Dao 2023)")
class MambaBlock(Mixer):
    """h_t = exp(Delta_t A) h_{t-1} + Delta_t B_t x_t, y_t = C_t h_t + D x_t, gated by SiLU(z) (Gu & Dao 2023, Algorithm 2, eq. 2a-2b)."""

    Options = MambaOptions
    default_lr = 2e-3
    default_positions = "none"
    default_mlp = False

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        opts = self.options
        self.inner = opts.expand * config.width
        self.state_size = opts.state
        self.dt_rank = opts.dt_rank or math.ceil(config.width / 16)
        self.in_proj = nn.Linear(config.width, 2 * self.inner, bias=False)
        self.conv = nn.Conv1d(self.inner, self.inner, opts.conv, groups=self.inner, padding=opts.conv - 1)
        self.x_proj = nn.Linear(self.inner, self.dt_rank + 2 * opts.state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.inner)
        self.a_log = nn.Parameter(torch.empty(self.inner, opts.state))
        self.skip = nn.Parameter(torch.empty(self.inner))
        self.out_proj = nn.Linear(self.inner, config.width, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """S4D-real A = -(1..N), Delta bias so softplus gives dt in [1e-3, 1e-1] (Gu & Dao 2023, sec. 3.6)."""
        self.in_proj.reset_parameters()
        self.conv.reset_parameters()
        self.x_proj.reset_parameters()
        self.out_proj.reset_parameters()
        with torch.no_grad():
            self.a_log.copy_(torch.arange(1, self.state_size + 1, dtype=torch.float32).log().expand(self.inner, -1))
            self.skip.fill_(1.0)
            nn.init.uniform_(self.dt_proj.weight, -self.dt_rank**-0.5, self.dt_rank**-0.5)
            dt = torch.exp(torch.rand(self.inner) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus

    def _ssm_inputs(self, u: torch.Tensor, onednn: bool = False, fused: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Delta [..., E], B [..., N], C [..., N] from the convolved inner activations (the selection, sec. 3.2);
        ``fused``: Delta before its bias and softplus, which the fused scan applies."""
        dt, b, c = linear(u, self.x_proj.weight, None, onednn).split([self.dt_rank, self.state_size, self.state_size],
                                                                     dim=-1)
        if onednn:
            delta = linear(dt, self.dt_proj.weight, None, onednn)
        else:
            # through a contiguous copy of the transposed weight: autograd then forms the weight's gradient as
            # dt^T @ grad [R, E], which MKL runs ~8x faster than F.linear's grad^T @ dt [E, R] (R = 4 at width 64)
            delta = dt @ self.dt_proj.weight.t().contiguous()
        return (delta if fused else F.softplus(delta + self.dt_proj.bias)), b, c

    def _in_proj(self, x: torch.Tensor, onednn: bool, fused: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's two branches u and z [..., E]; as two products where oneDNN takes them or the fused kernels
        read them, so that each output is contiguous (the kernels would otherwise copy both halves of one
        [..., 2E] product)."""
        if onednn or fused:
            return tuple(linear(x, w, None, onednn) for w in self.in_proj.weight.chunk(2, dim=0))
        return F.linear(x, self.in_proj.weight).chunk(2, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        onednn = self.linear_path(x.device) == "onednn"
        path = self.scan_path(x.device)
        u, z = self._in_proj(x, onednn, fused=path == "fused")
        if path == "fused":
            u = fused_causal_conv(u, self.conv.weight, self.conv.bias)
            delta, b, c = self._ssm_inputs(u, onednn, fused=True)
            y = fused_selective_scan(delta, -self.a_log.exp(), u, b, c, self.skip, z, self.dt_proj.bias,
                                     delta_softplus=True)
            return linear(y, self.out_proj.weight, None, onednn)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :length].transpose(1, 2))  # [B, T, E]
        delta, b, c = self._ssm_inputs(u, onednn)
        a = -self.a_log.exp()
        if path == "mamba_ssm":
            y = _cuda_kernel()(u.transpose(1, 2).contiguous(), delta.transpose(1, 2).contiguous(), a,
                               b.transpose(1, 2).contiguous(), c.transpose(1, 2).contiguous(), self.skip.float(),
                               delta_softplus=False).transpose(1, 2)
        else:
            scans = {"reference": selective_scan_reference, "chunked": partial(selective_scan, chunk=self.options.chunk)}
            y = scans[path](delta, a, u, b, c) + self.skip * u
        return linear(y * F.silu(z), self.out_proj.weight, None, onednn)

    def scan_path(self, device: torch.device) -> str:
        """The scan that trains on ``device``: mamba_ssm (CUDA kernel), fused (CPU kernel), chunked or reference."""
        if device.type == "cuda" and self.options.kernel and _cuda_kernel() is not None:
            return "mamba_ssm"
        return choose_path("mamba scan", self.options.scan, "fused", "chunked", device, kernel_library, SOURCE,
                           "auto, chunked, reference")

    def linear_path(self, device: torch.device) -> str:
        """The projections' products on ``device``: onednn (CPU, where torch has it; for auto, not on an Intel
        processor, ``onednn_preferred``) or torch."""
        choice = self.options.linear
        available = device.type == "cpu" and onednn_available()
        if choice == "onednn" and not available:
            raise ConfigError("mamba linear 'onednn' needs a CPU device and a torch built with oneDNN "
                              "(torch.backends.mkldnn); allowed elsewhere: auto, torch")
        if choice == "auto":
            return "onednn" if available and onednn_preferred() else "torch"
        return "onednn" if choice == "onednn" else "torch"

    def compute_paths(self, device: torch.device) -> dict[str, str]:
        return {"scan": self.scan_path(device), "linear": self.linear_path(device)}

    def has_batching_rule(self, device: torch.device) -> bool:
        return False  # every scan path is an autograd.Function

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> MambaState:
        conv = torch.zeros(batch_size, self.inner, self.conv.kernel_size[0] - 1, device=device, dtype=dtype)
        ssm = torch.zeros(batch_size, self.inner, self.state_size, device=device, dtype=dtype)
        return MambaState(conv, ssm)

    def step(self, x: torch.Tensor, state: MambaState) -> tuple[torch.Tensor, MambaState]:
        onednn = self.linear_path(x.device) == "onednn"
        u, z = self._in_proj(x, onednn)
        window = torch.cat([state.conv, u.unsqueeze(-1)], dim=-1)  # [B, E, K]
        u = F.silu((window * self.conv.weight.squeeze(1)).sum(-1) + self.conv.bias)
        delta, b, c = self._ssm_inputs(u, onednn)
        a = -self.a_log.exp()
        ssm = torch.exp(delta.unsqueeze(-1) * a) * state.ssm + (delta * u).unsqueeze(-1) * b.unsqueeze(-2)
        y = (ssm @ c.unsqueeze(-1)).squeeze(-1) + self.skip * u
        return linear(y * F.silu(z), self.out_proj.weight, None, onednn), MambaState(window[..., 1:], ssm)

    def state_floats(self, length: int) -> int:
        """Closed form: E (K - 1) convolution inputs plus E N SSM state, whatever the length."""
        return self.inner * (self.conv.kernel_size[0] - 1 + self.state_size)

    def activation_floats(self, length: int) -> int:
        """The scan's E N states and about 8 E-wide activations a position (measured 48 widths at the defaults)."""
        return length * self.inner * (self.state_size + 8)

    def flops(self, length: int) -> int:
        """in/out projections 6 T D E, x_proj 2 T E (R + 2N), dt_proj 2 T R E, conv 2 E K (T + K - 1), C h 2 T E N."""
        e, n, r, k = self.inner, self.state_size, self.dt_rank, self.conv.kernel_size[0]
        projections = 6 * length * self.width * e + 2 * length * e * (r + 2 * n) + 2 * length * r * e
        return projections + 2 * e * k * (length + k - 1) + 2 * length * e * n
