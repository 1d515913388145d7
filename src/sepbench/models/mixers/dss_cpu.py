"""DSS's convolution as its recurrence on CPU (``dss_cpu.cpp``), called inside an ``autograd.Function``
(built as ``cpu_kernels`` says). Where it cannot be built, DSS trains with the FFT convolution."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx, once_differentiable

from sepbench.models.mixers.cpu_kernels import DTYPE_SUFFIX, check_inputs, load, over_batch

SOURCE = Path(__file__).with_name("dss_cpu.cpp")
ARGUMENTS = (("dss_block", 0, 0), ("dss_forward", 6, 5), ("dss_backward", 11, 5))


def kernel_library() -> ctypes.CDLL | None:
    """The compiled kernel, or None where it cannot be built."""
    return load(SOURCE, ARGUMENTS)


def _padded(x: torch.Tensor, block: int) -> torch.Tensor:
    """x with its last dimension zero-padded to a multiple of ``block``, contiguous."""
    return F.pad(x, (0, -x.shape[-1] % block)).contiguous()


class DiagonalRecurrence(torch.autograd.Function):
    """y_t = Re(sum_n cb_n h_t,n), h_t = decay h_{t-1} + u_t, per channel; decay and cb as [D, N] real and
    imaginary parts. Channels are padded to the kernel's block with zeros (a zero decay and weight add nothing)."""

    @staticmethod
    def forward(ctx: FunctionCtx, u: torch.Tensor, decay_re: torch.Tensor, decay_im: torch.Tensor,
                cb_re: torch.Tensor, cb_im: torch.Tensor) -> torch.Tensor:
        check_inputs("the DSS recurrence", {"u": u, "decay.real": decay_re, "decay.imag": decay_im,
                                            "cb.real": cb_re, "cb.imag": cb_im})
        library = kernel_library()
        block = library.dss_block()
        batch, length, width = u.shape
        padded = _padded(u, block)
        planes = [_padded(p.t(), block) for p in (decay_re, decay_im, cb_re, cb_im)]  # [N, D]: loops over channels
        y = torch.empty_like(padded)
        over_batch(getattr(library, f"dss_forward_{DTYPE_SUFFIX[u.dtype]}"), [padded, *planes, y],
                   [length, padded.shape[-1], planes[0].shape[0]], batch)
        ctx.save_for_backward(padded, *planes)
        ctx.width = width
        return y[..., :width]

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        u, *planes = ctx.saved_tensors
        batch, length, padded_width = u.shape
        state, width = planes[0].shape[0], ctx.width
        grad_u = torch.empty_like(u)
        grads = [u.new_empty(batch, state, padded_width) for _ in planes]
        over_batch(getattr(kernel_library(), f"dss_backward_{DTYPE_SUFFIX[u.dtype]}"),
                   [u, *planes, _padded(grad_y, padded_width), grad_u, *grads], [length, padded_width, state], batch)
        return (grad_u[..., :width], *(g.sum(0)[:, :width].t() for g in grads))


def diagonal_recurrence(u: torch.Tensor, decay: torch.Tensor, cb: torch.Tensor) -> torch.Tensor:
    """Re of the causal convolution of u [B, T, D] with K_k = sum_n cb_n decay_n^k (complex [D, N])."""
    return DiagonalRecurrence.apply(u, decay.real, decay.imag, cb.real, cb.imag)
