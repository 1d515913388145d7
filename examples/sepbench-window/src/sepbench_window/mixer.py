"""Causal softmax attention over the last ``window`` positions only: a fixed-size state, like a recurrent model."""
from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from sepbench.config import ModelConfig
from sepbench.models.mixers.base import Mixer

WindowState = tuple[torch.Tensor, torch.Tensor]
"""The keys and values of the last ``window`` positions, each [B, H, n, head width] with n <= window."""


class WindowOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    window: int = Field(8, ge=1, description="positions each token attends to, itself included")


class SlidingWindowAttention(Mixer):
    """Multi-head softmax attention in which position i sees positions i - window + 1 .. i."""

    Options = WindowOptions
    default_lr = 1e-3
    default_positions = "learned"
    uses_heads = True

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        self.window = self.options.window
        self.heads = config.heads
        self.head_dim = config.width // config.heads
        self.dropout = nn.Dropout(config.dropout)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.out = nn.Linear(config.width, config.width)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for linear in (self.qkv, self.out):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values [B, H, T, head width] of x [B, T, D]."""
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-1, -2)) * self.head_dim**-0.5
        weights = self.dropout(scores.masked_fill(~allowed, float("-inf")).softmax(-1))
        return weights @ v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self._heads(x)
        position = torch.arange(length, device=x.device)
        behind = position[:, None] - position[None, :]
        y = self._attend(q, k, v, (behind >= 0) & (behind < self.window))
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> WindowState:
        empty = torch.zeros(batch_size, self.heads, 0, self.head_dim, device=device, dtype=dtype)
        return empty, empty

    def step(self, x: torch.Tensor, state: WindowState) -> tuple[torch.Tensor, WindowState]:
        q, k, v = self._heads(x[:, None])
        keys = torch.cat([state[0], k], dim=2)[:, :, -self.window:]
        values = torch.cat([state[1], v], dim=2)[:, :, -self.window:]
        allowed = torch.ones(1, keys.shape[2], dtype=torch.bool, device=x.device)
        y = self._attend(q, keys, values, allowed)
        return self.out(y.reshape(x.shape[0], self.width)), (keys, values)

    def state_floats(self, length: int) -> int:
        """Keys and values of the last ``window`` positions: 2 D floats each."""
        return 2 * self.width * min(length, self.window)

    def flops(self, length: int) -> int:
        """Projections 8 T D^2; scores and weighted sum over the full T x T square 4 T^2 D (the mask is applied
        after the product, so the whole-sequence path pays for the square)."""
        return 8 * length * self.width**2 + 4 * length**2 * self.width
