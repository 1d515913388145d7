"""The theory's lower bounds (Bhattamishra et al. 2024) as smallest widths of the smallest-width plot's series."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import torch

from sepbench.config import ModelConfig
from sepbench.models import MODELS, build_model
from sepbench.models.accounting import state_size
from sepbench.theory.bounds import BOUNDS
from sepbench.wording import counted

TRAINING_PRECISION = 32  # p in bits: float32 training
ONE_LAYER = {"transformer"}
WIDEST = min(m.le for m in ModelConfig.model_fields["width"].metadata if getattr(m, "le", None) is not None)


@dataclass(frozen=True)
class Series:
    """One plotted series: a model at one depth, as the model configs (at any width) of its stored runs."""

    configs: tuple[ModelConfig, ...]

    @property
    def model(self) -> str:
        return self.configs[0].name

    @property
    def layers(self) -> int:
        return self.configs[0].layers

    @property
    def name(self) -> str:
        return f"{self.model}, {counted(self.layers, 'layer')}"


@dataclass(frozen=True)
class BoundCurve:
    """One bound drawn for one series: its legend label and the smallest width it allows at each length (NaN: none
    up to the widest model)."""

    series: str
    label: str
    widths: list[float]


BoundsProvider = Callable[[str, Sequence[Series], Sequence[int]], list[BoundCurve]]


def _heads(config: ModelConfig) -> int:
    return config.heads if MODELS.get(config.name).uses_heads else 1


@lru_cache(maxsize=4096)
def _state_at(config_json: str, width: int, length: int) -> int | None:
    """State floats of the model at ``width`` after ``length`` tokens; None where no such model can be built."""
    try:
        config = ModelConfig.model_validate({**json.loads(config_json), "width": width})
        with torch.device("meta"):  # shapes only: nothing allocated, however wide
            model = build_model(config, 2, length)
    except ValueError:
        return None
    return state_size(model, length)


def _width_step(config: ModelConfig, length: int) -> int | None:
    """The smallest width a model of ``config`` can have, a multiple of its heads where it has heads (RetNet's head
    size must also be even); its widths are the multiples of it."""
    key = config.model_dump_json(exclude={"width"})
    base = _heads(config)
    return next((w for w in range(base, WIDEST + 1, base) if _state_at(key, w, length) is not None), None)


def width_holding(config: ModelConfig, numbers: float, length: int) -> int | None:
    """Smallest width at which ``config``'s model holds at least ``numbers`` state floats after ``length`` tokens
    (None: not even at the widest); the state grows with width, so a doubling search, then a bisection."""
    step = _width_step(config, length)
    if step is None:
        return None
    key = config.model_dump_json(exclude={"width"})
    most = WIDEST // step
    lo, hi = 1, 1
    while _state_at(key, hi * step, length) < numbers:
        if hi == most:
            return None
        lo, hi = hi + 1, min(2 * hi, most)
    while lo < hi:
        mid = (lo + hi) // 2
        if _state_at(key, mid * step, length) >= numbers:
            hi = mid
        else:
            lo = mid + 1
    return hi * step


def _fixed_state(config: ModelConfig, length: int) -> bool:
    """Whether the model's decoding state has stopped growing by ``length`` tokens (the recurrent models the
    recurrent bounds are about, and attention over a window shorter than ``length``; a full KV cache grows), told
    from its state after ``length`` and after twice as many tokens."""
    key = config.model_dump_json(exclude={"width"})
    width = _width_step(config, 2 * length)
    return width is not None and _state_at(key, width, length) == _state_at(key, width, 2 * length)


def _binding(config: ModelConfig, numbers: float, length: int) -> float | None:
    """``width_holding``, but NaN where even the smallest width holds ``numbers`` (the bound rules nothing out)."""
    width = width_holding(config, numbers, length)
    return math.nan if width is not None and width == _width_step(config, length) else width


def _least(widths: Sequence[float | None]) -> float:
    found = [w for w in widths if w is not None]
    return math.nan if not found or any(math.isnan(w) for w in found) else min(found)


def _recurrent_widths(series: Series, values: Sequence[float], lengths: Sequence[int]) -> list[float]:
    """Bhattamishra et al. 2024, Thms. 3, 8, 11 and Prop. 9 bound m, the p-bit numbers the recurrent state holds:
    per length, the smallest width whose model (any of the series' configs) holds m state floats; none where every
    width does."""
    return [_least([_binding(config, m, n) for config in series.configs]) for m, n in zip(values, lengths)]


def _one_layer_widths(series: Series, values: Sequence[float]) -> list[float]:
    """Bhattamishra et al. 2024, Thms. 5 and 12 bound width x heads mH of a one-layer Transformer: m = bound / H,
    with the most heads among the series' configs; none where that is at most one (every width meets it)."""
    heads = max(_heads(config) for config in series.configs)
    return [value / heads if value / heads > 1 else math.nan for value in values]


def theory_bounds(task: str, series: Sequence[Series], lengths: Sequence[int],
                  precision: int = TRAINING_PRECISION) -> list[BoundCurve]:
    """Per plotted series and bound on ``task`` that constrains it: the smallest width the bound allows per length
    (NaN where it rules out no width; a bound that rules out none at any of ``lengths`` is left out).

    A recurrent series gets each recurrent bound as the width whose state holds m numbers; only a one-layer
    ``transformer`` series gets the one-layer bounds on mH, as m = bound / H with its own H heads.
    """
    curves = []
    for one in series:
        for bound in BOUNDS.get(task, []):
            sample = bound(max(2, lengths[0]), precision)
            values = [bound(n, precision).value for n in lengths]
            if sample.architecture.startswith("recurrent") and _fixed_state(one.configs[0], max(lengths)):
                widths, how = _recurrent_widths(one, values, lengths), "m = state floats"
            elif sample.architecture.startswith("one-layer") and one.model in ONE_LAYER and one.layers == 1:
                heads = "/".join(str(h) for h in sorted({_heads(config) for config in one.configs}))
                widths, how = _one_layer_widths(one, values), f"as m at H = {heads}"
            else:
                continue
            if all(math.isnan(w) for w in widths):
                continue  # it rules out no width at these lengths
            label = f"{one.name}: {sample.theorem}, {sample.statement} (p = {precision}); {how}"
            curves.append(BoundCurve(one.name, label, widths))
    return curves
