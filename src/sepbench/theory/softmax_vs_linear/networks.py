"""The random readout networks: m Rademacher units, ReLU with threshold tau, summed (reconstructed, Defs 3.4-3.7)."""
from __future__ import annotations

import math

import torch
from torch import Tensor


def rademacher(batch: int, dim: int, m: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """``batch`` independent weight matrices W = [w_1 .. w_m] in {-1, +1}^{dim x m} (Deng et al. Def. 3.7)."""
    bits = torch.randint(0, 2, (batch, dim, m), generator=generator)
    return (2 * bits - 1).to(dtype)


def relu_tau(z: Tensor, tau: float) -> Tensor:
    """``ReLU_tau(z) = max(z - tau, 0)`` (Deng et al. Def. 3.4)."""
    return torch.clamp(z - tau, min=0.0)


def readout(rows: Tensor, W: Tensor, tau: float, row_counts: Tensor | None = None) -> Tensor:
    """``F = sum_i sum_l ReLU_tau(<w_l, row_i>)``: rows (B, n, dim), W (B, dim, m) -> (B,).

    ``row_counts`` weights each row by the number of identical query tokens it stands for.
    """
    return unit_sum(rows @ W, tau, row_counts)


def unit_sum(scores: Tensor, tau: float, row_counts: Tensor | None = None) -> Tensor:
    """``sum_i sum_l ReLU_tau(scores[i, l])`` from precomputed ``<w_l, row_i>``: (B, n, m) -> (B,)."""
    units = relu_tau(scores, tau).sum(dim=-1)
    if row_counts is not None:
        units = units * row_counts.to(units.dtype)
    return units.sum(dim=-1)


def hoeffding_bound(f: Tensor, t: float) -> float:
    """Hoeffding (Deng et al. Lemma 3.1) for Rademacher w: ``P[|<w, f>| >= t] <= 2 exp(-t^2 / (2 ||f||_2^2))``."""
    return min(1.0, 2.0 * math.exp(-t * t / (2.0 * float((f * f).sum()))))
