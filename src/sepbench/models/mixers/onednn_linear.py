"""A linear layer's products through oneDNN on CPU, forward and backward.

torch's ``F.linear`` runs float32 products on the CPU through MKL's sgemm; oneDNN (which torch's LSTM already uses)
runs the same products with the core's widest vectors. On the AMD EPYC core sepbench's CPU figures come from,
Mamba's projections at batch 64 x 101 positions took 0.85 ms through oneDNN against 1.95 ms through MKL forward,
and 1.2 against 2.4 ms for the weight's gradient (docs/models.md, "Mamba"). On an Intel Xeon MKL is the faster
of the two at all but one of those products (``onednn_preferred``). Float64 inputs (which oneDNN does not take),
CUDA tensors and ``pytorch_forms`` (FLOP counting) go through ``F.linear``.
"""
from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch.autograd.function import FunctionCtx, once_differentiable

from sepbench.models.mixers import cpu_kernels
from sepbench.models.mixers.cpu_kernels import held_back


def _times_transposed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight^T (+ bias), x [..., in] contiguous, weight [out, in] (a transposed view is read in place)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@lru_cache(maxsize=None)
def onednn_available() -> bool:
    """Whether this torch build's oneDNN linear operator (private to torch) runs here and gives x W^T."""
    if not torch.backends.mkldnn.is_available():
        return False
    x, weight = torch.linspace(-1, 1, 12).reshape(3, 4), torch.linspace(-2, 1, 20).reshape(5, 4)
    try:
        expected = (x[:, None, :] * weight[None]).sum(-1)  # F.linear's numbers, but no product a FLOP counter sees
        return torch.allclose(_times_transposed(x, weight), expected, rtol=1e-5, atol=1e-6)
    except (AttributeError, RuntimeError, TypeError):
        return False


def onednn_preferred() -> bool:
    """Whether ``auto`` takes oneDNN's products: where torch has them and the processor is not Intel's. MKL's sgemm
    runs at full speed on Intel's cores and reads a transposed factor in place: on an Intel Xeon (one thread,
    Mamba's projections at batch 64 x 101 positions) it took 0.67 ms for a weight's gradient where oneDNN took 1.08
    with its transposed copy, and 5-20% less for the forward and input-gradient products (dt_proj's weight gradient
    alone was slower: 0.26 against 0.24 ms); on an AMD EPYC core it took twice oneDNN's."""
    return onednn_available() and cpu_kernels.cpu_vendor() != "GenuineIntel"


class OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b with each of the three products (y, dL/dx, dL/dW) taken by oneDNN."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _times_transposed(x, weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        rows = grad.reshape(-1, grad.shape[-1])
        grad_x = _times_transposed(grad, weight.t()) if ctx.needs_input_grad[0] else None
        grad_weight = None
        if ctx.needs_input_grad[1]:
            inputs = x.reshape(-1, x.shape[-1])
            # oneDNN reads the second factor transposed in place; the first is copied transposed, so it is the
            # narrower of x and dy: dy^T x [out, in], or (x^T dy)^T
            if inputs.shape[1] <= rows.shape[1]:
                grad_weight = _times_transposed(inputs.t().contiguous(), rows.t()).t()
            else:
                grad_weight = _times_transposed(rows.t().contiguous(), inputs.t())
        grad_bias = rows.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, onednn: bool) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; with ``onednn``, through oneDNN where it takes the product (CPU, float32)."""
    if onednn and x.device.type == "cpu" and x.dtype == torch.float32 and onednn_available() and not held_back():
        return OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)
