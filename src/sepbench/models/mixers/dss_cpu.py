"""DSS's convolution as its recurrence on CPU (``dss_cpu.cpp``), called inside an ``autograd.Function``
(built as ``cpu_kernels`` says). Where it cannot be built, DSS trains with the FFT convolution."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from sepbench.models.mixers.cpu_kernels import DTYPE_SUFFIX, load, over_batch

SOURCE = Path(__file__).with_name("dss_cpu.cpp")
ARGUMENTS = (("dss_forward", 7, 6), ("dss_backward", 12, 6))
SPAN = 16


def kernel_library() -> ctypes.CDLL | None:
    """The compiled kernel, or None where it cannot be built."""
    return load(SOURCE, ARGUMENTS)


class DiagonalRecurrence(torch.autograd.Function):
    """y_t = Re(sum_n cb_n h_t,n), h_t = decay h_{t-1} + u_t, per channel; decay and cb as [D, N] real and
    imaginary parts. Saves its inputs and one complex [N, D] state every ``SPAN`` steps."""

    @staticmethod
    def forward(ctx: FunctionCtx, u: torch.Tensor, decay_re: torch.Tensor, decay_im: torch.Tensor,
                cb_re: torch.Tensor, cb_im: torch.Tensor) -> torch.Tensor:
        u = u.contiguous()
        planes = [p.t().contiguous() for p in (decay_re, decay_im, cb_re, cb_im)]  # [N, D]: loops run over channels
        batch, length, width = u.shape
        state = planes[0].shape[0]
        saved = u.new_empty(batch, -(-length // SPAN), 2, state, width) if any(ctx.needs_input_grad) else None
        y = torch.empty_like(u)
        over_batch(getattr(kernel_library(), f"dss_forward_{DTYPE_SUFFIX[u.dtype]}"), [u, *planes, y, saved],
                   [length, width, state, SPAN], batch)
        if saved is not None:
            ctx.save_for_backward(u, *planes, saved)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        u, *planes, saved = ctx.saved_tensors
        batch, length, width = u.shape
        state = planes[0].shape[0]
        grad_u = torch.empty_like(u)
        grads = [u.new_empty(batch, state, width) for _ in planes]
        over_batch(getattr(kernel_library(), f"dss_backward_{DTYPE_SUFFIX[u.dtype]}"),
                   [u, *planes, saved, grad_y.contiguous(), grad_u, *grads], [length, width, state, SPAN], batch)
        return (grad_u, *(g.sum(0).t() for g in grads))


def diagonal_recurrence(u: torch.Tensor, decay: torch.Tensor, cb: torch.Tensor) -> torch.Tensor:
    """Re of the causal convolution of u [B, T, D] with K_k = cb decay^k (complex [D, N], summed over N)."""
    return DiagonalRecurrence.apply(u, decay.real, decay.imag, cb.real, cb.imag)
