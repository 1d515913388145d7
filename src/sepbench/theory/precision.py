"""The fixed-point precision a hand-set Transformer needs (Bhattamishra et al. 2024, App. B.2).

B.2 works with p-bit numbers on a grid of step N^-Kc over [-N^Kc, N^Kc], every parameter and intermediate value
rounded down onto it, and Thms 1, 6 and 7 state p = O(log N). Here the step is 2^-F: the floating-point parameters
and the output of every leaf module (embeddings, positions, each linear map, the activations, the readout) are
rounded down to multiples of 2^-F, so the residual stream, a sum of such outputs, stays on the grid. The softmax
inside the attention kernel (scores, weights, the weighted sum) is computed in float64 between those roundings,
and no value is capped: the range is measured instead, as the integer bits of the largest magnitude that a
parameter or a leaf module's input or output reaches.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn

from sepbench.theory.constructions import Construction

MAX_FRACTION_BITS = 40
"""The search's cap; it is lowered further to 52 - I, where rounding a float64 value of I integer bits stays exact."""

FLOAT64_MANTISSA_BITS = 52


@dataclass(frozen=True)
class Precision:
    """Fractional bits F that keep the construction exact, the integer bits I its largest value needs, and
    p = 1 + I + F (a sign bit); ``exact`` False where no F up to the cap keeps it exact."""

    fraction_bits: int
    integer_bits: int
    exact: bool

    @property
    def bits(self) -> int:
        """p = 1 + I + F."""
        return 1 + self.integer_bits + self.fraction_bits


@dataclass
class Range:
    """The largest finite magnitude seen (an infinity is a mask, not a number the model computes with)."""

    largest: float = 0.0

    def see(self, values: torch.Tensor) -> None:
        finite = values.detach()[torch.isfinite(values.detach())]
        if finite.numel():
            self.largest = max(self.largest, float(finite.abs().max()))


def round_down(values: torch.Tensor, fraction_bits: int) -> torch.Tensor:
    """``values`` rounded down to multiples of 2^-F (App. B.2 rounds down)."""
    scale = 2.0**fraction_bits
    return torch.floor(values * scale) / scale


@contextmanager
def fixed_point(model: nn.Module, fraction_bits: int) -> Iterator[Range]:
    """``model`` with its floating-point parameters and every leaf module's output rounded down to multiples of
    2^-F, yielding the range of the parameters and of the leaf modules' inputs and outputs seen meanwhile. The
    parameters are restored on exit."""
    seen = Range()
    parameters = [p for p in model.parameters() if p.is_floating_point()]
    saved = [p.detach().clone() for p in parameters]

    def round_output(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        for value in inputs:
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                seen.see(value)
        seen.see(output)
        return round_down(output, fraction_bits)

    leaves = [m for m in model.modules() if not any(m.children()) and not isinstance(m, (nn.Dropout, nn.Identity))]
    hooks = [m.register_forward_hook(round_output) for m in leaves]
    try:
        with torch.no_grad():
            for parameter, original in zip(parameters, saved):
                seen.see(original)
                parameter.copy_(round_down(original, fraction_bits))
        yield seen
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for parameter, original in zip(parameters, saved):
                parameter.copy_(original)


def measure_precision(built: Construction, samples: int, seed: int, step: int = 8) -> Precision:
    """The fewest fractional bits F at which ``built`` scores accuracy 1.0 on the evaluation draw of ``seed``:
    F = 8, 16, ... until exact, then bisection below it (which assumes that more bits keep an exact model exact),
    and the integer bits of the largest magnitude at that F."""
    def exact_at(bits: int) -> tuple[bool, float]:
        with fixed_point(built.model, bits) as seen:
            exact = built.accuracy(samples, seed) == 1.0
        return exact, seen.largest

    cap = MAX_FRACTION_BITS
    low, high = -1, min(step, cap)
    exact, largest = exact_at(high)
    cap = max(high, min(cap, FLOAT64_MANTISSA_BITS - integer_bits(largest)))
    while not exact and high < cap:
        low, high = high, min(high + step, cap)
        exact, largest = exact_at(high)
    if not exact:
        return Precision(high, integer_bits(largest), False)
    while high - low > 1:
        middle = (low + high) // 2
        ok, seen = exact_at(middle)
        if ok:
            high, largest = middle, seen
        else:
            low = middle
    return Precision(high, integer_bits(largest), True)


def integer_bits(largest: float) -> int:
    """Bits of the integer part of magnitudes up to ``largest``."""
    return max(0, math.floor(math.log2(largest)) + 1) if largest >= 1 else 0
