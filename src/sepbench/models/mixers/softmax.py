"""Causal multi-head softmax attention (Vaswani et al. 2017), through PyTorch's fused SDPA kernel."""
from __future__ import annotations

import torch

from sepbench.config import ModelConfig
from sepbench.models.mixers.kv_cache import KVCache, append, attend, empty_cache
from sepbench.models.mixers.qkv import QKVAttention
from sepbench.models.mixers.stacked_sdpa import attention
from sepbench.models.registry import MODELS


@MODELS.register("transformer", "decoder-only softmax Transformer, pre-LN, GELU MLP (Vaswani et al. 2017)")
class SoftmaxAttention(QKVAttention):
    """softmax(Q K^T / sqrt(d)) V with a causal mask (Bhattamishra et al. 2024, sec. 2)."""

    default_lr = 1e-3
    default_positions = "learned"

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._split(x))
        drop = self.dropout if self.training else 0.0
        y = attention(q, k, v, is_causal=True, dropout_p=drop)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> KVCache:
        """An empty KV cache preallocated to ``max_len`` positions."""
        return empty_cache(batch_size * self.heads, self.head_dim, self.max_len, device, dtype)

    def step(self, x: torch.Tensor, state: KVCache) -> tuple[torch.Tensor, KVCache]:
        rows = x.shape[0] * self.heads
        q, k, v = (t.reshape(rows, self.head_dim) for t in self._split(x))
        state = append(state, k, v)
        y = attend(q, state, self.head_dim**-0.5)
        return self.out(y.reshape(x.shape[0], self.width)), state

    def state_floats(self, length: int) -> int:
        """Closed form: the KV cache, 2 D floats per position."""
        return 2 * self.width * length

    def flops(self, length: int) -> int:
        """QKV and output projections 8 T D^2, scores and weighted sum 4 T^2 D (the full square, as kernels count it)."""
        return 8 * length * self.width**2 + 4 * length**2 * self.width
