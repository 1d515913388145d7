"""Autograd functions applied only under ``torch.func.vmap`` (runs trained stacked), each with a vmap rule of its own."""
from __future__ import annotations

from typing import Any

import torch


class VmapOnlyFunction(torch.autograd.Function):
    """Base of a function whose ``vmap`` rule computes on the unwrapped tensors with ordinary ops, which autograd
    records as usual: it needs no ``backward`` of its own, and outside vmap it is never applied."""

    generate_vmap_rule = False

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> None:  # pragma: no cover - only ever applied under vmap
        raise RuntimeError("this function is only differentiable under vmap")
