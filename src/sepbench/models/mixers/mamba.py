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

from sepbench.config import ModelConfig, StrictModel
from sepbench.models.mixers.base import Mixer
from sepbench.models.registry import MODELS


class MambaOptions(StrictModel):
    state: int = Field(16, ge=1, description="SSM state size N per channel")
    expand: int = Field(2, ge=1, description="inner width = expand * width")
    conv: int = Field(4, ge=1, description="depthwise causal convolution width")
    dt_rank: int | None = Field(None, ge=1, description="rank of the Delta projection; default ceil(width / 16)")
    chunk: int | None = Field(None, ge=1, description="scan chunk length; default T up to 128 steps (one fused loop), else 2 sqrt(T)")
    scan: Literal["chunked", "reference"] = Field("chunked", description="training scan: chunked, or the step-by-step reference")
    kernel: bool = Field(True, description="use mamba_ssm's CUDA kernel when installed and on CUDA")


def _cuda_kernel():
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except ImportError:
        return None
    return selective_scan_fn


FUSED_LOOP_MAX_LEN = 128
"""Up to this length the default scan is one fused loop over time (the fastest on CPU there); longer ones are chunked."""


def selective_scan_reference(delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """y_t = C_t h_t with h_t = exp(Delta_t A) h_{t-1} + Delta_t u_t B_t, one step at a time, every state kept (eq. 2a-2b)."""
    h = torch.zeros(*u.shape[:1], *a.shape, dtype=u.dtype, device=u.device)
    states = []
    for delta_t, u_t, b_t in zip(delta.unbind(1), u.unbind(1), b.unbind(1)):
        h = torch.exp(delta_t.unsqueeze(-1) * a) * h + (delta_t * u_t).unsqueeze(-1) * b_t.unsqueeze(-2)
        states.append(h)
    return (torch.stack(states, 1) @ c.unsqueeze(-1)).squeeze(-1)


def _scan_chunks(delta: torch.Tensor, a: torch.Tensor, drive_in: torch.Tensor, b: torch.Tensor,
                 c: torch.Tensor | None, h: torch.Tensor | None) -> torch.Tensor:
    """Run the recurrence over the offsets of every chunk at once ([B, n, C, ...] inputs, state [B, n, E, N]).

    Returns the outputs C_t h_t [B, n, C, E] when ``c`` is given, else the last state of each chunk.
    """
    ys = []
    steps = zip(delta.unbind(2), drive_in.unbind(2), b.unbind(2), c.unbind(2) if c is not None else [None] * delta.shape[2])
    for delta_t, drive_t, b_t, c_t in steps:
        drive = drive_t.unsqueeze(-1) * b_t.unsqueeze(-2)
        h = drive if h is None else torch.addcmul(drive, torch.exp(delta_t.unsqueeze(-1) * a), h)
        if c_t is not None:
            ys.append((h @ c_t.unsqueeze(-1)).squeeze(-1))
    return torch.stack(ys, 2) if c is not None else h


def selective_scan(delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                   chunk: int | None = None) -> torch.Tensor:
    """The same outputs as the reference in O(T/C + C) sequential steps, never stacking a [B, T, E, N] tensor of states.

    Time is cut into n chunks of C. A pass over the C offsets scans every chunk at once from a zero state
    and keeps only each chunk's last state; a pass over the n chunks carries the true state across chunk
    boundaries (a chunk's total decay is exp(A sum Delta)); a second pass over the offsets restarts every
    chunk from its true state and emits C_t h_t as it goes. Short sequences (the default up to
    ``FUSED_LOOP_MAX_LEN``) take one chunk, where this is a single fused loop over time.
    """
    batch, length, inner = u.shape
    chunk = chunk or (length if length <= FUSED_LOOP_MAX_LEN else 2 * math.isqrt(length))
    chunk = min(chunk, length)
    n = -(-length // chunk)
    pad = n * chunk - length
    if pad:
        delta, u, b, c = (F.pad(x, (0, 0, 0, pad)) for x in (delta, u, b, c))
    delta, b, c = delta.view(batch, n, chunk, inner), b.view(batch, n, chunk, -1), c.view(batch, n, chunk, -1)
    drive_in = delta * u.view(batch, n, chunk, inner)
    h = None
    if n > 1:
        last = _scan_chunks(delta, a, drive_in, b, None, None)
        total_decay = torch.exp(delta.sum(2).unsqueeze(-1) * a)
        start = torch.zeros_like(last[:, 0])
        starts = [start]
        for k in range(n - 1):
            start = torch.addcmul(last[:, k], total_decay[:, k], start)
            starts.append(start)
        h = torch.stack(starts, 1)
    y = _scan_chunks(delta, a, drive_in, b, c, h)
    return y.reshape(batch, n * chunk, inner)[:, :length]


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

    def _ssm_inputs(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Delta [..., E], B [..., N], C [..., N] from the convolved inner activations (the selection, sec. 3.2)."""
        dt, b, c = self.x_proj(u).split([self.dt_rank, self.state_size, self.state_size], dim=-1)
        return F.softplus(self.dt_proj(dt)), b, c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :length].transpose(1, 2))  # [B, T, E]
        delta, b, c = self._ssm_inputs(u)
        a = -self.a_log.exp()
        kernel = _cuda_kernel() if self.options.kernel and x.is_cuda else None
        if kernel is not None:
            y = kernel(u.transpose(1, 2).contiguous(), delta.transpose(1, 2).contiguous(), a,
                       b.transpose(1, 2).contiguous(), c.transpose(1, 2).contiguous(), self.skip.float(),
                       delta_softplus=False).transpose(1, 2)
        else:
            scan = selective_scan_reference if self.options.scan == "reference" else partial(selective_scan, chunk=self.options.chunk)
            y = scan(delta, a, u, b, c) + self.skip * u
        return self.out_proj(y * F.silu(z))

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> MambaState:
        conv = torch.zeros(batch_size, self.inner, self.conv.kernel_size[0] - 1, device=device, dtype=dtype)
        ssm = torch.zeros(batch_size, self.inner, self.state_size, device=device, dtype=dtype)
        return MambaState(conv, ssm)

    def step(self, x: torch.Tensor, state: MambaState) -> tuple[torch.Tensor, MambaState]:
        u, z = self.in_proj(x).chunk(2, dim=-1)
        window = torch.cat([state.conv, u.unsqueeze(-1)], dim=-1)  # [B, E, K]
        u = F.silu((window * self.conv.weight.squeeze(1)).sum(-1) + self.conv.bias)
        delta, b, c = self._ssm_inputs(u)
        a = -self.a_log.exp()
        ssm = torch.exp(delta.unsqueeze(-1) * a) * state.ssm + (delta * u).unsqueeze(-1) * b.unsqueeze(-2)
        y = (ssm @ c.unsqueeze(-1)).squeeze(-1) + self.skip * u
        return self.out_proj(y * F.silu(z)), MambaState(window[..., 1:], ssm)

    def state_floats(self, length: int) -> int:
        """Closed form: E (K - 1) convolution inputs plus E N SSM state, whatever the length."""
        return self.inner * (self.conv.kernel_size[0] - 1 + self.state_size)

    def flops(self, length: int) -> int:
        """in/out projections 6 T D E, x_proj 2 T E (R + 2N), dt_proj 2 T R E, conv 2 E K (T + K - 1), C h 2 T E N."""
        e, n, r, k = self.inner, self.state_size, self.dt_rank, self.conv.kernel_size[0]
        projections = 6 * length * self.width * e + 2 * length * e * (r + 2 * n) + 2 * length * r * e
        return projections + 2 * e * k * (length + k - 1) + 2 * length * e * n
