"""Linear Transformer attention (Katharopoulos et al. 2020) as in Yang et al. 2024, eqs. 7-8."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import Field

from sepbench.config import StrictModel
from sepbench.models.mixers.qkv import QKVAttention
from sepbench.models.registry import MODELS

EPS = 1e-6


class LinearOptions(StrictModel):
    chunk: int = Field(64, ge=1, description="chunk length of the parallel training form")


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 (Yang et al. 2024, eq. 8)."""
    return F.elu(x) + 1.0


@dataclass
class LinearState:
    """Per head: s = sum phi(k) v^T [B, H, d, d] and z = sum phi(k) [B, H, d] (Yang et al. 2024, eqs. 16-19)."""

    s: torch.Tensor
    z: torch.Tensor


def exclusive_cumsum(per_chunk: torch.Tensor) -> torch.Tensor:
    """The sum over earlier chunks (dim 2) only: a chunk's own terms never enter, not even as round-off."""
    total = per_chunk.cumsum(2)
    return torch.cat([torch.zeros_like(total[:, :, :1]), total[:, :, :-1]], dim=2)


def linear_attention_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    """Causal phi-attention over [B, H, T, d] inputs (already feature-mapped), chunk by chunk.

    Inside a chunk the causal scores are computed directly; earlier chunks enter through the prefix
    state (s, z), so the cost is O(T (C + d) d) rather than O(T^2 d).
    """
    batch, heads, length, dim = q.shape
    chunk = min(chunk, length)
    n = -(-length // chunk)
    pad = n * chunk - length
    q, k, v = (F.pad(t, (0, 0, 0, pad)).view(batch, heads, n, chunk, dim) for t in (q, k, v))
    s_prev = exclusive_cumsum(k.transpose(-1, -2) @ v)  # [B, H, n, d, d]
    z_prev = exclusive_cumsum(k.sum(3))  # [B, H, n, d]
    causal = torch.ones(chunk, chunk, dtype=q.dtype, device=q.device).tril()
    scores = (q @ k.transpose(-1, -2)) * causal  # [B, H, n, C, C]; a mask product: tril is ~5x slower on CPU
    numerator = q @ s_prev + scores @ v
    denominator = (q * z_prev.unsqueeze(3)).sum(-1) + scores.sum(-1)
    y = numerator / (denominator.unsqueeze(-1) + EPS)
    return y.reshape(batch, heads, n * chunk, dim)[:, :, :length]


def linear_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The quadratic form of eq. 7 with a causal mask; the chunked form is tested against it."""
    scores = (q @ k.transpose(-1, -2)).tril()
    return (scores @ v) / (scores.sum(-1, keepdim=True) + EPS)


@MODELS.register("linear_transformer", "Linear Transformer, phi = elu + 1, recurrent (s, z) decoding (Yang et al. 2024, eqs. 7-8)")
class LinearAttention(QKVAttention):
    """Multi-head linear attention, H(x, S) = sum phi(Kz)^T phi(Qx) Vz / sum phi(Kz)^T phi(Qx) (Yang et al. 2024, eq. 7)."""

    Options = LinearOptions
    default_lr = 1e-3
    default_positions = "learned"

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = super()._split(x)
        return feature_map(q), feature_map(k), v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # [B, H, T, d]
        # phi on head-major copies: on the strided projection, with its gradient arriving head-major, elu's
        # backward took ~10x as long on CPU (5.5 against 0.5 ms at B = 64, T = 201, D = 64)
        q, k = feature_map(q.contiguous()), feature_map(k.contiguous())
        y = linear_attention_chunked(q, k, v, self.options.chunk)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> LinearState:
        s = torch.zeros(batch_size, self.heads, self.head_dim, self.head_dim, device=device, dtype=dtype)
        z = torch.zeros(batch_size, self.heads, self.head_dim, device=device, dtype=dtype)
        return LinearState(s, z)

    def step(self, x: torch.Tensor, state: LinearState) -> tuple[torch.Tensor, LinearState]:
        q, k, v = self._split(x)  # [B, H, d]
        s = state.s + k.unsqueeze(-1) * v.unsqueeze(-2)
        z = state.z + k
        numerator = (q.unsqueeze(-2) @ s).squeeze(-2)
        y = numerator / ((q * z).sum(-1, keepdim=True) + EPS)
        return self.out(y.reshape(x.shape[0], self.width)), LinearState(s, z)

    def state_floats(self, length: int) -> int:
        """Closed form: H (d^2 + d) with d = D/H, whatever the length."""
        return self.heads * (self.head_dim**2 + self.head_dim)

    def flops(self, length: int) -> int:
        """Projections 8 T D^2; per chunk the state terms 4 T' d D and the in-chunk scores 4 T' C D (T' = T padded to C)."""
        chunk = min(self.options.chunk, length)
        padded = -(-length // chunk) * chunk
        return 8 * length * self.width**2 + 4 * padded * self.width * (self.head_dim + chunk)
