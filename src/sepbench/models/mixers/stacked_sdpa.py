"""Scaled dot-product attention that keeps PyTorch's fused kernels when runs train stacked under ``torch.func.vmap``.

Under vmap, SDPA's own batching rule hands CUDA's memory-efficient kernel a log-sum-exp whose strides its backward
rejects ("LSE is not correctly aligned (strideH)", torch 2.11 on an H100). Folding the members into the batch
dimension gives the kernel the plain tensors of a solo run; the batch rows stay independent, so every member
computes what it computes alone.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch._C._functorch import is_batchedtensor  # private; present from torch 2.0 through 2.13 (checked on 2.11, 2.13)

from sepbench.models.vmap_only import VmapOnlyFunction


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
              is_causal: bool = False, dropout_p: float = 0.0) -> torch.Tensor:
    """``F.scaled_dot_product_attention``; under vmap, one call over the members folded into the batch."""
    if any(is_batchedtensor(t) for t in (q, k, v)):
        return _MembersFolded.apply(q, k, v, attn_mask, is_causal, dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p)


class _MembersFolded(VmapOnlyFunction):
    """SDPA over the members folded into the batch (its vmap rule)."""

    @staticmethod
    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,  # type: ignore[override]
                is_causal: bool, dropout_p: float) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p)

    @staticmethod
    def vmap(info: Any, in_dims: tuple, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             attn_mask: torch.Tensor | None, is_causal: bool, dropout_p: float) -> tuple[torch.Tensor, int]:
        members = info.batch_size
        if in_dims[3] is not None:
            raise ValueError("stacked attention takes one mask shared by every member")
        if dropout_p > 0:
            raise ValueError("stacked attention takes no dropout (each member would draw other masks than alone)")

        def fold(t: torch.Tensor, dim: int | None) -> torch.Tensor:
            t = t.expand(members, *t.shape) if dim is None else t.movedim(dim, 0)
            return t.reshape(members * t.shape[1], *t.shape[2:])

        dims = q.dim() - (in_dims[0] is not None)  # q's dims as each member sees them
        if attn_mask is not None and attn_mask.dim() == dims and attn_mask.shape[0] > 1:
            attn_mask = fold(attn_mask, None)  # a mask per batch row: each member's rows get it
        y = F.scaled_dot_product_attention(fold(q, in_dims[0]), fold(k, in_dims[1]), fold(v, in_dims[2]),
                                           attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p)
        return y.view(members, -1, *y.shape[1:]), 0
