"""Mamba's selective scan on CPU: the step-by-step reference and a chunked scan with its own backward pass.

Both compute y_t = C_t h_t with h_t = exp(Delta_t A) h_{t-1} + Delta_t u_t B_t (Gu & Dao 2023, eq. 2a-2b
with the simplified discretisation B-bar = Delta B). Shapes: Delta, u [B, T, E]; A [E, N]; B, C [B, T, N].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx, once_differentiable

STATES_PER_STEP = 128
"""The default chunking advances about this many [E, N] states (batch x chunks) per step: fewer leave the
steps dominated by per-call overhead, more spill out of the CPU's caches (measured in benchmarks/zoo.py)."""


def selective_scan_reference(delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """y_t = C_t h_t with h_t = exp(Delta_t A) h_{t-1} + Delta_t u_t B_t, one step at a time, every state kept (eq. 2a-2b)."""
    h = torch.zeros(*u.shape[:1], *a.shape, dtype=u.dtype, device=u.device)
    states = []
    for delta_t, u_t, b_t in zip(delta.unbind(1), u.unbind(1), b.unbind(1)):
        h = torch.exp(delta_t.unsqueeze(-1) * a) * h + (delta_t * u_t).unsqueeze(-1) * b_t.unsqueeze(-2)
        states.append(h)
    return (torch.stack(states, 1) @ c.unsqueeze(-1)).squeeze(-1)


def default_chunk(length: int, batch: int) -> int:
    """Chunk length giving about ``STATES_PER_STEP`` states per step, chunks of at least 8 steps.

    Fewer than 4 chunks are not worth the second pass: large batches take one loop over time.
    """
    chunks = min(STATES_PER_STEP // batch, length // 8)
    return length if chunks < 4 else -(-length // chunks)


def _by_offset(x: torch.Tensor, n: int, chunk: int) -> torch.Tensor:
    """[B, n * C, F] -> [C, B, n, F]: slice t holds offset t of every chunk, contiguous."""
    return x.view(x.shape[0], n, chunk, x.shape[-1]).permute(2, 0, 1, 3).contiguous()


def _from_offset(x: torch.Tensor) -> torch.Tensor:
    """[C, B, n, F] -> [B, n * C, F], the inverse of ``_by_offset``."""
    chunk, batch, n, features = x.shape
    return x.permute(1, 2, 0, 3).reshape(batch, n * chunk, features)


def _decay(delta: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """exp(Delta A): [..., E] x [E, N] -> [..., E, N]."""
    return torch.mul(delta.unsqueeze(-1), a).exp_()


def _advance(h: torch.Tensor, decay: torch.Tensor, x_t: torch.Tensor, b_t: torch.Tensor) -> torch.Tensor:
    """h <- exp(Delta_t A) h + Delta_t u_t B_t in place, for every chunk at once ([B, n, E, N])."""
    return h.mul_(decay).addcmul_(x_t.unsqueeze(-1), b_t.unsqueeze(-2))


def _chunk_starts(delta: torch.Tensor, decays: torch.Tensor, a: torch.Tensor, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The true state entering every chunk, [B, n, E, N]; inputs are offset-major [C, B, n, ...].

    One pass over the offsets scans every chunk from a zero state to its last state; one pass over the
    chunks carries the true state across boundaries (a chunk's total decay is exp(A sum Delta)).
    """
    last = x.new_zeros(decays.shape[1:])
    for t in range(delta.shape[0]):
        _advance(last, decays[t], x[t], b[t])
    total = _decay(delta.sum(0), a)
    starts = torch.zeros_like(last)
    for k in range(1, last.shape[1]):
        torch.addcmul(last[:, k - 1], total[:, k - 1], starts[:, k - 1], out=starts[:, k])
    return starts


class ChunkedSelectiveScan(torch.autograd.Function):
    """The chunked scan with a hand-written backward: no autograd graph per step, O(T/C + C) sequential steps.

    The forward keeps its inputs, the decays exp(Delta_t A) (as large as all the states together) and each
    chunk's start state; the backward rebuilds the states beside them, runs the adjoint recurrence
    g_t = C_t dy_t + exp(Delta_{t+1} A) g_{t+1} backwards in the same chunked way, and forms every gradient
    from (g_t, h_{t-1}) as it goes. Every step works in place on preallocated tensors: on CPU a fresh
    [B, n, E, N] tensor per step costs more than the arithmetic.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor,
                c: torch.Tensor, chunk: int) -> torch.Tensor:
        length = u.shape[1]
        n = -(-length // chunk)
        pad = n * chunk - length
        if pad:
            delta, u, b, c = (F.pad(v, (0, 0, 0, pad)) for v in (delta, u, b, c))
        d, x, bo, co = (_by_offset(v, n, chunk) for v in (delta, delta * u, b, c))
        decays = _decay(d, a)  # [C, B, n, E, N]
        starts = _chunk_starts(d, decays, a, x, bo) if n > 1 else x.new_zeros(decays.shape[1:])
        h = starts.clone()
        y = torch.empty_like(x)
        for t in range(chunk):
            _advance(h, decays[t], x[t], bo[t])
            torch.matmul(co[t].unsqueeze(-2), h.mT, out=y[t].unsqueeze(-2))  # row @ matrix: CPU's fast small matmul
        ctx.save_for_backward(d, a, x, bo, co, starts, u, decays)
        ctx.length = length
        return _from_offset(y)[:, :length]

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        d, a, x, bo, co, starts, u, decays = ctx.saved_tensors
        chunk, _, n, _ = d.shape
        gy = _by_offset(F.pad(grad_y, (0, 0, 0, n * chunk - ctx.length)), n, chunk)
        states = torch.empty_like(decays)
        previous = starts
        for t in range(chunk):
            previous = torch.mul(previous, decays[t], out=states[t]).addcmul_(x[t].unsqueeze(-1), bo[t].unsqueeze(-2))
        # the adjoint that enters each chunk's last state from the chunks after it
        carry = torch.zeros_like(starts)
        if n > 1:
            g = gy[-1].unsqueeze(-1) * co[-1].unsqueeze(-2)
            for t in range(chunk - 2, -1, -1):
                _advance(g, decays[t + 1], gy[t], co[t])
            g.mul_(decays[0])
            total = _decay(d.sum(0), a)
            for k in range(n - 2, -1, -1):
                torch.addcmul(g[:, k + 1], total[:, k + 1], carry[:, k + 1], out=carry[:, k])
        grad_x, grad_d, grad_b, grad_c = (torch.empty_like(v) for v in (x, d, bo, co))
        grad_a = torch.zeros_like(starts)  # per chunk, summed at the end
        grad_log_decay = torch.empty_like(starts)
        g = carry.addcmul_(gy[-1].unsqueeze(-1), co[-1].unsqueeze(-2))  # the adjoint at each chunk's last offset
        for t in range(chunk - 1, -1, -1):
            torch.matmul(gy[t].unsqueeze(-2), states[t], out=grad_c[t].unsqueeze(-2))
            torch.matmul(bo[t].unsqueeze(-2), g.mT, out=grad_x[t].unsqueeze(-2))
            torch.matmul(x[t].unsqueeze(-2), g, out=grad_b[t].unsqueeze(-2))
            g.mul_(decays[t])
            torch.mul(g, states[t - 1] if t else starts, out=grad_log_decay)  # d loss / d (Delta_t A)
            grad_a.addcmul_(grad_log_decay, d[t].unsqueeze(-1))
            torch.sum(grad_log_decay.mul_(a), -1, out=grad_d[t])
            if t:
                g.addcmul_(gy[t - 1].unsqueeze(-1), co[t - 1].unsqueeze(-2))
        length = ctx.length
        grad_x, grad_d, grad_b, grad_c = (_from_offset(v)[:, :length] for v in (grad_x, grad_d, grad_b, grad_c))
        delta = _from_offset(d)[:, :length]
        return grad_d + grad_x * u[:, :length], grad_a.sum((0, 1)), grad_x * delta, grad_b, grad_c, None


def selective_scan(delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                   chunk: int | None = None) -> torch.Tensor:
    """The reference's outputs and gradients in O(T/C + C) sequential steps.

    Time is cut into n chunks of C (default ``default_chunk``); every chunk advances one offset per step.
    With one chunk this is a single loop over time. First-order gradients only.
    """
    dtypes = {x.dtype for x in (delta, a, u, b, c)}
    if len(dtypes) > 1:
        raise TypeError(f"selective_scan needs Delta, A, u, B, C of one dtype, got {sorted(map(str, dtypes))}")
    batch, length, _ = u.shape
    return ChunkedSelectiveScan.apply(delta, a, u, b, c, min(chunk or default_chunk(length, batch), length))
