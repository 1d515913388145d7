"""The fixed-point precision a hand-set Transformer needs (Bhattamishra et al. 2024, App. B.2).

B.2 works with p-bit numbers on a grid of step N^-Kc over [-N^Kc, N^Kc], every parameter and intermediate value
rounded down onto it, and Thms 1, 6 and 7 state p = O(log N). Here the step is 2^-F: the parameters and the output
of every leaf module (embeddings, positions, each linear map, the activations, the readout) are rounded down to
multiples of 2^-F, so the residual stream, a sum of such outputs, stays on the grid. The softmax inside the
attention kernel (scores, weights, the weighted sum) is computed in float64 between those roundings.
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
"""Past 40 fractional bits the rounding of values up to 2^12 nears float64's 52-bit mantissa."""


@dataclass(frozen=True)
class Precision:
    """Fractional bits F that keep the construction exact, the integer bits I its largest value needs, and
    p = 1 + I + F (a sign bit); ``exact`` False where no F up to ``MAX_FRACTION_BITS`` keeps it exact."""

    fraction_bits: int
    integer_bits: int
    exact: bool

    @property
    def bits(self) -> int:
        return 1 + self.integer_bits + self.fraction_bits


def round_down(values: torch.Tensor, fraction_bits: int) -> torch.Tensor:
    scale = 2.0**fraction_bits
    return torch.floor(values * scale) / scale


@contextmanager
def fixed_point(model: nn.Module, fraction_bits: int, peak: list[float]) -> Iterator[None]:
    """``model`` with its parameters and every leaf module's output rounded down to multiples of 2^-F; the
    largest magnitude seen is kept in ``peak[0]``. The parameters are restored on exit."""
    saved = {name: value.clone() for name, value in model.state_dict().items()}

    def round_output(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        peak[0] = max(peak[0], float(output.abs().max()) if output.numel() else 0.0)
        return round_down(output, fraction_bits)

    leaves = [m for m in model.modules() if not any(m.children()) and not isinstance(m, (nn.Dropout, nn.Identity))]
    hooks = [m.register_forward_hook(round_output) for m in leaves]
    try:
        with torch.no_grad():
            for name, value in model.state_dict().items():
                peak[0] = max(peak[0], float(saved[name].abs().max()) if value.numel() else 0.0)
                value.copy_(round_down(saved[name], fraction_bits))
        yield
    finally:
        for hook in hooks:
            hook.remove()
        with torch.no_grad():
            for name, value in model.state_dict().items():
                value.copy_(saved[name])


def measure_precision(built: Construction, samples: int, seed: int, step: int = 8) -> Precision:
    """The fewest fractional bits F (0 to ``MAX_FRACTION_BITS``) at which ``built`` scores accuracy 1.0 on the
    evaluation draw of ``seed``: F = 8, 16, ... until exact, then bisection below it (which assumes that more
    bits keep an exact model exact), and the integer bits of the largest magnitude at that F."""
    def exact_at(bits: int) -> tuple[bool, float]:
        peak = [0.0]
        with fixed_point(built.model, bits, peak):
            return built.accuracy(samples, seed) == 1.0, peak[0]

    low, high = -1, min(step, MAX_FRACTION_BITS)
    exact, peak = exact_at(high)
    while not exact and high < MAX_FRACTION_BITS:
        low, high = high, min(high + step, MAX_FRACTION_BITS)
        exact, peak = exact_at(high)
    if not exact:
        return Precision(MAX_FRACTION_BITS, integer_bits(peak), False)
    while high - low > 1:
        middle = (low + high) // 2
        ok, seen = exact_at(middle)
        if ok:
            high, peak = middle, seen
        else:
            low = middle
    return Precision(high, integer_bits(peak), True)


def integer_bits(peak: float) -> int:
    """Bits of the integer part of magnitudes up to ``peak``."""
    return max(0, math.floor(math.log2(peak)) + 1) if peak >= 1 else 0
