"""The projections the attention mixers share: x to per-head queries, keys and values, and the heads back to x."""
from __future__ import annotations

import torch
from torch import nn

from sepbench.config import ModelConfig
from sepbench.models.mixers.base import Mixer


class QKVAttention(Mixer):
    """Q, K, V = x W_qkv split into heads of width // heads; the mixed heads leave through W_out (Vaswani et al. 2017).

    Softmax, Sparse and Linear attention differ only in how they mix the heads; each initialises both maps with
    Xavier-uniform weights and zero biases.
    """

    uses_heads = True

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        self.heads = config.heads
        self.head_dim = config.width // config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.out = nn.Linear(config.width, config.width)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.qkv.weight)
        nn.init.zeros_(self.qkv.bias)
        nn.init.xavier_uniform_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of ``x`` [..., width] as [..., heads, head_dim] each."""
        *lead, _ = x.shape
        q, k, v = self.qkv(x).view(*lead, 3, self.heads, self.head_dim).unbind(-3)
        return q, k, v
