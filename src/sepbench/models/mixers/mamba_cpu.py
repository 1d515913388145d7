"""Mamba's fused CPU kernels (``mamba_cpu.cpp``): the selective scan with its skip and gate, and the causal
depthwise convolution with its SiLU, called inside ``autograd.Function``s (built as ``cpu_kernels`` says).
Where they cannot be built, Mamba trains with the chunked PyTorch scan (``selective_scan.py``).
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Callable

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from sepbench.models.mixers.cpu_kernels import DTYPE_SUFFIX, check_inputs, load, over_batch

SOURCE = Path(__file__).with_name("mamba_cpu.cpp")
ARGUMENTS = (("scan_forward", 12, 7), ("scan_backward", 20, 7), ("conv_forward", 4, 5), ("conv_backward", 7, 5))
"""Each kernel's name and its counts of pointer and of int64 arguments."""
SPAN = 16
"""Steps the backward recomputes from each saved state: a span's states and decays (2 x 16 x N x E floats)
stay in the L2 cache at the widths the papers use."""


def kernel_library() -> ctypes.CDLL | None:
    """The compiled kernels, or None where they cannot be built."""
    return load(SOURCE, ARGUMENTS)


def _kernel(name: str, dtype: torch.dtype) -> Callable[..., None]:
    return getattr(kernel_library(), f"{name}_{DTYPE_SUFFIX[dtype]}")


class FusedSelectiveScan(torch.autograd.Function):
    """y = scan(Delta, A, u, B, C); with ``z``, (y + D u) SiLU(z) (D optional). Delta is the given one, or
    softplus(delta + delta_bias) formed inside the kernel. Saves its inputs, the scan's output where gated, and
    one [N, E] state every ``SPAN`` steps."""

    @staticmethod
    def forward(ctx: FunctionCtx, delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor,
                c: torch.Tensor, skip: torch.Tensor | None, z: torch.Tensor | None, delta_bias: torch.Tensor | None,
                delta_softplus: bool) -> torch.Tensor:
        check_inputs("the fused selective scan", {"delta": delta, "A": a, "u": u, "B": b, "C": c, "D": skip, "z": z,
                                                  "delta_bias": delta_bias})
        if skip is not None and z is None:
            raise ValueError("the fused selective scan takes the skip D only with the gate z (Mamba's block)")
        delta, u, b, c = (v.contiguous() for v in (delta, u, b, c))
        skip, z, delta_bias = (None if v is None else v.contiguous() for v in (skip, z, delta_bias))
        a = a.t().contiguous()  # [N, E]: the kernel's loops run over channels
        batch, length, inner = u.shape
        needs_grad = any(ctx.needs_input_grad)
        saved = u.new_empty(batch, -(-length // SPAN), a.shape[0], inner) if needs_grad else None
        y = torch.empty_like(u)
        out = torch.empty_like(u) if z is not None else y
        formed = needs_grad and (delta_softplus or delta_bias is not None)
        used = torch.empty_like(delta) if formed else None  # the Delta the scan formed, for the backward
        over_batch(_kernel("scan_forward", u.dtype), [delta, u, a, b, c, skip, z, delta_bias, y, out, saved, used],
                    [length, inner, a.shape[0], SPAN, int(delta_softplus)], batch)
        if needs_grad:
            ctx.save_for_backward(used if formed else delta, delta if formed else None, a, u, b, c, skip, z,
                                  delta_bias, y if z is not None else None, saved)
            ctx.delta_softplus = delta_softplus
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        delta, pre, a, u, b, c, skip, z, delta_bias, y, saved = ctx.saved_tensors
        batch, length, inner = u.shape
        grad_delta, grad_u, grad_b, grad_c = (torch.empty_like(v) for v in (delta, u, b, c))
        grad_a = a.new_empty(batch, *a.shape)
        grad_skip, grad_bias = (None if v is None else u.new_empty(batch, inner) for v in (skip, delta_bias))
        grad_z = torch.empty_like(z) if z is not None else None
        over_batch(_kernel("scan_backward", u.dtype),
                    [delta, u, a, b, c, skip, z, pre, delta_bias, y, saved, grad_out.contiguous(), grad_delta, grad_u,
                     grad_a, grad_b, grad_c, grad_skip, grad_z, grad_bias],
                    [length, inner, a.shape[0], SPAN, int(ctx.delta_softplus)], batch)
        return (grad_delta, grad_a.sum(0).t(), grad_u, grad_b, grad_c, None if grad_skip is None else grad_skip.sum(0),
                grad_z, None if grad_bias is None else grad_bias.sum(0), None)


class FusedCausalConv(torch.autograd.Function):
    """SiLU of the causal depthwise convolution of x [B, T, E] by weight [E, 1, K] plus bias [E]."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        check_inputs("the fused causal convolution", {"x": x, "weight": weight, "bias": bias})
        x = x.contiguous()
        w = weight.squeeze(1).t().contiguous()  # [K, E]
        bias = bias.contiguous()
        batch, length, inner = x.shape
        out = torch.empty_like(x)
        over_batch(_kernel("conv_forward", x.dtype), [x, w, bias, out], [length, inner, w.shape[0]], batch)
        ctx.save_for_backward(x, w, bias)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, w, bias = ctx.saved_tensors
        batch, length, inner = x.shape
        grad_x = torch.zeros_like(x)
        grad_w = w.new_empty(batch, *w.shape)
        grad_bias = bias.new_empty(batch, inner)
        over_batch(_kernel("conv_backward", x.dtype), [x, w, bias, grad_out.contiguous(), grad_x, grad_w, grad_bias],
                    [length, inner, w.shape[0]], batch)
        return grad_x, grad_w.sum(0).t().unsqueeze(1), grad_bias.sum(0)


def fused_selective_scan(delta: torch.Tensor, a: torch.Tensor, u: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                         skip: torch.Tensor | None = None, z: torch.Tensor | None = None,
                         delta_bias: torch.Tensor | None = None, delta_softplus: bool = False) -> torch.Tensor:
    """``selective_scan_reference``'s outputs and gradients from the fused kernel (CPU, float32 or float64);
    with ``z``, the gated output (y + D u) SiLU(z) of Mamba's block (Gu & Dao 2023, Algorithm 2). With
    ``delta_bias`` and/or ``delta_softplus`` the scan's Delta is softplus(delta + delta_bias), as mamba_ssm's
    ``selective_scan_fn`` takes them."""
    return FusedSelectiveScan.apply(delta, a, u, b, c, skip, z, delta_bias, delta_softplus)


def fused_causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """SiLU(causal depthwise conv1d(x)) on [B, T, E], as Mamba's block applies it before its scan."""
    return FusedCausalConv.apply(x, weight, bias)
