"""Sparse Transformer attention with the block pattern of Yang et al. 2024, eq. 6."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pydantic import Field

from sepbench.config import ModelConfig, StrictModel
from sepbench.models.mixers.qkv import QKVAttention
from sepbench.models.mixers.stacked_sdpa import attention
from sepbench.models.registry import MODELS


class SparseOptions(StrictModel):
    block: int | None = Field(None, ge=1, description="block size B; default 2^floor(log2 sqrt(max length))")
    k: int = Field(1, ge=1, description="the local window holds the last k*B positions")
    c: int = Field(1, ge=1, description="the last c positions of every earlier block are global")
    dense: bool = Field(False, description="use the dense-mask reference path for training")


def default_block_size(max_len: int) -> int:
    """B = 2^floor(log2 sqrt(L)) (Yang et al. 2024, sec. 6.1)."""
    return 2 ** int(math.floor(math.log2(math.sqrt(max(1, max_len)))))


def allowed_mask(length: int, block: int, k: int, c: int, device: torch.device | None = None) -> torch.Tensor:
    """[T, T] bool, True where query i may attend key j: i - kB < j <= i, or j <= i is among a block's last c."""
    i = torch.arange(length, device=device)[:, None]
    j = torch.arange(length, device=device)[None, :]
    causal = j <= i
    return causal & ((j > i - k * block) | (j % block >= block - min(c, block)))


@dataclass
class SparseCache:
    """Keys/values still reachable: the global (block-summary) positions and the local window, [B, H, t, D/H]."""

    global_keys: torch.Tensor
    global_values: torch.Tensor
    local_keys: torch.Tensor
    local_values: torch.Tensor
    position: int = 0


@MODELS.register("sparse_transformer", "Sparse Transformer: local window of kB plus the last c of every block (Yang et al. 2024, eq. 6)")
class SparseAttention(QKVAttention):
    """Multi-head softmax attention restricted to I_i = (i-kB, i] ∪ {last c of each block} (Yang et al. 2024, eq. 6).

    Training computes, per query block, scores only against its k+1 neighbouring key blocks and the
    global positions, so the work is O(T (kB + cT/B)) instead of O(T^2); ``dense`` keeps the masked O(T^2)
    reference it is tested against.
    """

    Options = SparseOptions
    default_lr = 1e-3
    default_positions = "learned"

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__(config, max_len)
        self.dropout = config.dropout
        self.block = self.options.block or default_block_size(max_len)
        self.k = self.options.k
        self.c = min(self.options.c, self.block)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._split(x))
        attend = self.dense_attention if self.options.dense else self.block_attention
        y = attend(q, k, v)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def dense_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Reference: full T x T scores with the eq. 6 mask."""
        mask = allowed_mask(q.shape[2], self.block, self.k, self.c, q.device)
        drop = self.dropout if self.training else 0.0
        return attention(q, k, v, attn_mask=mask, dropout_p=drop)

    def block_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Each query block attends to its k+1 local key blocks plus the global keys of earlier blocks."""
        batch, heads, length, dim = q.shape
        size, span = self.block, self.k + 1
        blocks = -(-length // size)
        pad = blocks * size - length
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        qb = q.view(batch, heads, blocks, size, dim)

        def gathered(t: torch.Tensor) -> torch.Tensor:
            """[B, H, nb, nb*c + (k+1)B, d]: every block's last c (shared), then blocks b-k .. b. Shifted views
            of the blocks, not ``unfold``, whose backward (a scatter-add) took ~10% of a CPU training step."""
            tb = t.view(batch, heads, blocks, size, dim)
            last = tb[:, :, :, size - self.c :].reshape(batch, heads, 1, blocks * self.c, dim)
            front = F.pad(tb, (0, 0, 0, 0, self.k, 0))  # k empty blocks before the first
            local = (front[:, :, j : j + blocks] for j in range(span))
            return torch.cat([last.expand(-1, -1, blocks, -1, -1), *local], dim=3)

        keys, values = gathered(k), gathered(v)
        mask = self._block_mask(blocks, q.device)
        drop = self.dropout if self.training else 0.0
        y = attention(qb, keys, values, attn_mask=mask, dropout_p=drop)
        return y.reshape(batch, heads, blocks * size, dim)[:, :, :length]

    def _block_mask(self, blocks: int, device: torch.device) -> torch.Tensor:
        """[nb, B, nb*c + (k+1)B] bool: which gathered keys each query may see (no key counted twice)."""
        size = self.block
        qblock = torch.arange(blocks, device=device)[:, None, None]
        i = qblock * size + torch.arange(size, device=device)[None, :, None]
        gblock = torch.arange(blocks, device=device).repeat_interleave(self.c)
        glob = (gblock[None, None, :] < qblock - self.k).expand(blocks, size, -1)
        j = (qblock - self.k) * size + torch.arange((self.k + 1) * size, device=device)[None, None, :]
        near = (j >= 0) & (j <= i) & ((j > i - self.k * size) | (j % size >= size - self.c))
        return torch.cat([glob, near], dim=2)

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> SparseCache:
        empty = torch.zeros(batch_size, self.heads, 0, self.head_dim, device=device, dtype=dtype)
        return SparseCache(empty, empty.clone(), empty.clone(), empty.clone())

    def step(self, x: torch.Tensor, state: SparseCache) -> tuple[torch.Tensor, SparseCache]:
        """Attend over the cached positions eq. 6 still allows; positions that can never be seen again are dropped."""
        q, k, v = (t.unsqueeze(2) for t in self._split(x))
        window = self.k * self.block
        local_keys = torch.cat([state.local_keys, k], dim=2)
        local_values = torch.cat([state.local_values, v], dim=2)
        global_keys, global_values = state.global_keys, state.global_values
        if local_keys.shape[2] > window:
            leaving = state.position - window  # position i - kB leaves the window at step i
            if leaving % self.block >= self.block - self.c:
                global_keys = torch.cat([global_keys, local_keys[:, :, :1]], dim=2)
                global_values = torch.cat([global_values, local_values[:, :, :1]], dim=2)
            local_keys, local_values = local_keys[:, :, 1:], local_values[:, :, 1:]
        keys = torch.cat([global_keys, local_keys], dim=2)
        values = torch.cat([global_values, local_values], dim=2)
        y = F.scaled_dot_product_attention(q, keys, values)
        state = SparseCache(global_keys, global_values, local_keys, local_values, state.position + 1)
        return self.out(y.reshape(x.shape[0], self.width)), state

    def state_floats(self, length: int) -> int:
        """Closed form: 2D floats for each cached position, window kB plus the global positions before it."""
        window = min(length, self.k * self.block)
        gone = length - window  # positions 0 .. gone-1 left the window
        full, rest = divmod(gone, self.block)
        globals_ = full * self.c + max(0, rest - (self.block - self.c))
        return 2 * self.width * (window + globals_)

    def flops(self, length: int) -> int:
        """Projections 8 T D^2; each padded query block scores nb*c global + (k+1)B local keys: 4 T' S D."""
        if self.options.dense:
            return 8 * length * self.width**2 + 4 * length**2 * self.width
        blocks = -(-length // self.block)
        keys = blocks * self.c + (self.k + 1) * self.block
        return 8 * length * self.width**2 + 4 * blocks * self.block * keys * self.width
