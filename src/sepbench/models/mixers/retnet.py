"""Multi-scale retention (Sun et al. 2023, "Retentive Network", eqs. 5-8)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from sepbench.config import ModelConfig, StrictModel
from sepbench.models.mixers.base import Mixer
from sepbench.models.mixers.retention import retention_chunkwise, retention_parallel
from sepbench.models.registry import MODELS

CHUNKWISE_FROM = 128
"""``form: auto`` trains sequences of at least this many tokens chunkwise (measured crossover, docs/models.md)."""


class RetNetOptions(StrictModel):
    form: Literal["auto", "parallel", "chunkwise"] = Field(
        "auto", description=f"training form; auto: chunkwise from {CHUNKWISE_FROM} tokens, parallel below")
    chunk: int = Field(32, ge=1, description="chunk length of the chunkwise form")


def head_decays(heads: int) -> torch.Tensor:
    """gamma_h = 1 - 2^(-5-h), one decay per head (Sun et al. 2023, sec. 2.2)."""
    return 1.0 - 2.0 ** (-5.0 - torch.arange(heads, dtype=torch.float64))


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x * e^{i n theta} on consecutive feature pairs (the Theta of eq. 5, without xPos's length scaling); x in
    float32 or float64 (the product is complex)."""
    dim = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, dim, 2, device=x.device, dtype=x.dtype) / dim)
    angle = positions.to(x.dtype)[:, None] * theta  # [T, d/2]
    # each pair (even, odd) as one complex number times e^{i n theta}: one product where the real form took six
    # strided ones, and half their time in a CPU training step
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], dim // 2, 2).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)).flatten(-2)


@dataclass
class RetentionState:
    """Per head S_n = gamma S_{n-1} + K_n^T V_n, [B, H, d, d], and the next position."""

    s: torch.Tensor
    position: int = 0


@MODELS.register("retnet", "RetNet multi-scale retention with per-head decay, parallel or chunkwise training, recurrent decoding (Sun et al. 2023)")
class MultiScaleRetention(Mixer):
    """MSR(X) = (swish(X W_G) * GroupNorm(head_1..head_H)) W_O, head = (Q K^T * D) V (Sun et al. 2023, eqs. 5, 8)."""

    Options = RetNetOptions
    default_lr = 1e-3
    default_positions = "learned"
    uses_heads = True

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        self.heads = config.heads
        self.head_dim = config.width // config.heads
        if self.head_dim % 2:
            raise ValueError(f"retnet needs an even head size for its rotation, got width/heads = {self.head_dim}")
        self.qkv = nn.Linear(config.width, 3 * config.width, bias=False)
        self.gate = nn.Linear(config.width, config.width, bias=False)
        self.norm = nn.GroupNorm(config.heads, config.width)
        self.out = nn.Linear(config.width, config.width, bias=False)
        self.register_buffer("log_decay", head_decays(config.heads).log(), persistent=False)  # float64: cast at use
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for linear in (self.qkv, self.gate, self.out):
            nn.init.xavier_uniform_(linear.weight)
        self.norm.reset_parameters()

    def _project(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k rotated, q scaled by d^-1/2; each [..., T, H, d] with positions along dim -3."""
        *lead, _ = x.shape
        q, k, v = self.qkv(x).view(*lead, 3, self.heads, self.head_dim).unbind(-3)
        q = rotate(q.transpose(-2, -3), positions).transpose(-2, -3) * self.head_dim**-0.5
        k = rotate(k.transpose(-2, -3), positions).transpose(-2, -3)
        return q, k, v

    def _combine(self, x: torch.Tensor, heads_out: torch.Tensor) -> torch.Tensor:
        """GroupNorm over each head, swish gate, output projection; heads_out is [..., D]."""
        lead = heads_out.shape[:-1]
        normed = self.norm(heads_out.reshape(-1, self.width)).view(*lead, self.width)
        return self.out(F.silu(self.gate(x)) * normed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        positions = torch.arange(length, device=x.device)
        q, k, v = (t.transpose(1, 2) for t in self._project(x, positions))  # [B, H, T, d]
        if self.chunkwise(length):
            y = retention_chunkwise(q, k, v, self.log_decay, self.options.chunk)
        else:
            y = retention_parallel(q, k, v, self.log_decay)
        return self._combine(x, y.transpose(1, 2).reshape(batch, length, width))

    def chunkwise(self, length: int) -> bool:
        """Whether a forward over ``length`` tokens takes the chunkwise form."""
        form = self.options.form
        return form == "chunkwise" or (form == "auto" and length >= CHUNKWISE_FROM)

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> RetentionState:
        return RetentionState(torch.zeros(batch_size, self.heads, self.head_dim, self.head_dim, device=device, dtype=dtype))

    def step(self, x: torch.Tensor, state: RetentionState) -> tuple[torch.Tensor, RetentionState]:
        """S_n = gamma S_{n-1} + K_n^T V_n, o_n = Q_n S_n (eq. 6)."""
        position = torch.tensor([state.position], device=x.device)
        q, k, v = self._project(x.unsqueeze(1), position)
        q, k, v = q[:, 0], k[:, 0], v[:, 0]  # [B, H, d]
        gamma = self.log_decay.to(x.dtype).exp()[None, :, None, None]
        s = gamma * state.s + k.unsqueeze(-1) * v.unsqueeze(-2)
        y = (q.unsqueeze(-2) @ s).squeeze(-2)
        return self._combine(x, y.reshape(x.shape[0], self.width)), RetentionState(s, state.position + 1)

    def state_floats(self, length: int) -> int:
        """Closed form: H d^2 = D^2 / H, whatever the length."""
        return self.heads * self.head_dim**2

    def activation_floats(self, length: int) -> int:
        """The parallel form's two H x T x T score tensors, plus the per-position default."""
        return 2 * self.heads * length**2 + super().activation_floats(length)

    def flops(self, length: int) -> int:
        """Projections 10 T D^2; parallel: the two T x T products 4 T^2 D; chunkwise (T' = T padded to C):
        the in-chunk products 4 T' C D and the state terms K^T V and Q S, 4 T' d D."""
        projections = 10 * length * self.width**2
        if not self.chunkwise(length):
            return projections + 4 * length**2 * self.width
        chunk = min(self.options.chunk, length)
        padded = -(-length // chunk) * chunk
        return projections + 4 * padded * self.width * (chunk + self.head_dim)
