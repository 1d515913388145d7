"""Retention over whole sequences: the parallel form (the reference) and the chunkwise recurrent form.

Both map q, k, v [B, H, T, d] and per-head log decays [H] to o_n = sum_{m <= n} gamma^(n-m) (q_n . k_m) v_m.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def decay_mask(log_decay: torch.Tensor, size: int) -> torch.Tensor:
    """D [H, size, size], D_nm = gamma^(n-m) for n >= m, else 0 (Sun et al. 2023, eq. 5)."""
    positions = torch.arange(size, device=log_decay.device)
    offset = positions[:, None] - positions[None, :]
    decay = torch.exp(offset.clamp(min=0).to(log_decay.dtype) * log_decay[:, None, None])
    return decay.masked_fill(offset < 0, 0.0)


def retention_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor) -> torch.Tensor:
    """(Q K^T * D) V, O(T^2) work and memory (Sun et al. 2023, eq. 5)."""
    return ((q @ k.transpose(-1, -2)) * decay_mask(log_decay.to(q.dtype), q.shape[2])) @ v


def retention_chunkwise(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor,
                        chunk: int) -> torch.Tensor:
    """The chunkwise recurrent form (Sun et al. 2023, eq. 7), O(T (C + d) d) work.

    Inside each chunk of C positions the parallel form with the decay mask; across chunks the state
    R_i = gamma^C R_{i-1} + (K_i * zeta)^T V_i, zeta_j = gamma^(C-1-j), enters as (Q_i * xi) R_{i-1},
    xi_j = gamma^(j+1). Every decay is gamma to a non-negative power, so nothing overflows.
    """
    batch, heads, length, dim = q.shape
    chunk = min(chunk, length)
    n = -(-length // chunk)
    pad = n * chunk - length
    q, k, v = (F.pad(t, (0, 0, 0, pad)).view(batch, heads, n, chunk, t.shape[-1]) for t in (q, k, v))
    log_decay = log_decay.to(q.dtype)
    offsets = torch.arange(chunk, device=q.device, dtype=q.dtype)
    inner = ((q @ k.transpose(-1, -2)) * decay_mask(log_decay, chunk)[:, None]) @ v
    into_state = torch.exp((chunk - 1 - offsets) * log_decay[:, None])[None, :, None, :, None]  # zeta
    from_state = torch.exp((offsets + 1) * log_decay[:, None])[None, :, None, :, None]  # xi
    updates = (k * into_state).transpose(-1, -2) @ v  # [B, H, n, d, d_v]
    carry = torch.exp(chunk * log_decay)[None, :, None, None]
    state = torch.zeros_like(updates[:, :, 0])
    states = []
    for i in range(n):
        states.append(state)
        if i + 1 < n:
            state = carry * state + updates[:, :, i]
    cross = (q * from_state) @ torch.stack(states, dim=2)
    return (inner + cross).reshape(batch, heads, n * chunk, -1)[:, :, :length]
