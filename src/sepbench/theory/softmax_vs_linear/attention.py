"""Softmax and linear attention on column-token matrices, plain and in tensor-trick form.

Deng et al. Eq. (1): ``Att_exp(X, Y) = D^-1 exp(X^T W Y) Y^T W_V`` with ``D = diag(exp(X^T W Y) 1_n)``;
linear attention replaces exp by the identity and keeps the row normalisation (Eq. 1).
Tokens are the columns of X (queries) and Y (keys/values). Every function takes optional leading batch
dimensions and optional token multiplicities (``counts``): a key column with count c stands for c identical
columns, which is exact and lets structured datasets with many repeated columns stay O(d) per row.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Kind = Literal["exp", "lin"]
KINDS: tuple[Kind, ...] = ("exp", "lin")


def logits(X: Tensor, Y: Tensor, W: Tensor | None = None) -> Tensor:
    """``X^T W Y``: entry (i, j) is ``<x_i, W y_j>``; X is (..., d, n), Y is (..., d, n')."""
    keys = Y if W is None else W @ Y
    return X.transpose(-1, -2) @ keys


def normalise(scores: Tensor, kind: Kind, counts: Tensor | None = None) -> Tensor:
    """Rows of ``D^-1 u`` with u = exp(scores) or scores, each key weighted by its multiplicity."""
    if kind == "exp":
        if counts is not None:
            scores = scores + torch.log(counts.to(scores.dtype)).unsqueeze(-2)
        return torch.softmax(scores, dim=-1)
    if kind == "lin":
        u = scores if counts is None else scores * counts.to(scores.dtype).unsqueeze(-2)
        return u / u.sum(dim=-1, keepdim=True)
    raise ValueError(f"unknown attention kind '{kind}'; allowed: exp, lin")


def attention_matrix(X: Tensor, Y: Tensor, kind: Kind, W: Tensor | None = None,
                     key_counts: Tensor | None = None) -> Tensor:
    """The (n x n') row-stochastic matrix ``D^-1 u(X^T W Y)`` (weights per distinct key when counted)."""
    return normalise(logits(X, Y, W), kind, key_counts)


def attention(X: Tensor, Y: Tensor, kind: Kind, W: Tensor | None = None, W_V: Tensor | None = None,
              key_counts: Tensor | None = None) -> Tensor:
    """Output rows ``D^-1 u(X^T W Y) Y^T W_V``, shape (..., n, d_v); W and W_V default to the identity."""
    values = Y.transpose(-1, -2) if W_V is None else Y.transpose(-1, -2) @ W_V
    return attention_matrix(X, Y, kind, W, key_counts) @ values


def cross_attention(X: Tensor, Y: Tensor, kind: Kind, W: Tensor | None = None, W_V: Tensor | None = None) -> Tensor:
    """Cross attention: queries from X, keys and values from Y (Deng et al. Eq. (1))."""
    return attention(X, Y, kind, W, W_V)


def self_attention(X: Tensor, kind: Kind, W: Tensor | None = None, W_V: Tensor | None = None) -> Tensor:
    """Self attention, the special case Y = X (Deng et al. Thm 1.1)."""
    return attention(X, X, kind, W, W_V)


def expand_tokens(columns: Tensor, counts: Tensor) -> Tensor:
    """Repeat each column by its multiplicity: the explicit matrix a counted token set stands for."""
    return torch.repeat_interleave(columns, counts, dim=-1)


def tensor_trick_logits(X: Tensor, Y: Tensor, W: Tensor) -> Tensor:
    """``(A1 (x) A2) vec(W)`` reshaped to n x n', with A1 = X^T, A2 = Y^T and row-major vec (Deng et al. Fact A.1)."""
    A = torch.kron(X.transpose(-1, -2).contiguous(), Y.transpose(-1, -2).contiguous())
    return (A @ W.reshape(-1)).reshape(X.shape[-1], Y.shape[-1])


def tensor_trick_attention_matrix(X: Tensor, Y: Tensor, W: Tensor, kind: Kind) -> Tensor:
    """Rows ``f(x)_{j0} = alpha(x)_{j0}^-1 u(x)_{j0}`` built block by block from ``A_{j0} x`` (Deng et al. App. C)."""
    A = torch.kron(X.transpose(-1, -2).contiguous(), Y.transpose(-1, -2).contiguous())
    n, n_keys = X.shape[-1], Y.shape[-1]
    rows = []
    for j0 in range(n):
        block = A[j0 * n_keys:(j0 + 1) * n_keys]
        z = block @ W.reshape(-1)
        u = torch.exp(z) if kind == "exp" else z
        alpha = u.sum()
        rows.append(u / alpha)
    return torch.stack(rows)
