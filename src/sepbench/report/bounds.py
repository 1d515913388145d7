"""The theory's lower bounds on width, as curves for the smallest-width plot (Bhattamishra et al. 2024)."""
from __future__ import annotations

from typing import Callable, Sequence

from sepbench.theory.bounds import BOUNDS

BoundsProvider = Callable[[str, Sequence[str], Sequence[int]], dict[str, list[float]]]

TRAINING_PRECISION = 32  # p in bits: float32 training
ONE_LAYER = {"transformer"}
RECURRENT = {"lstm", "dss", "mamba", "linear_transformer", "retnet"}


def theory_bounds(task: str, models: Sequence[str], lengths: Sequence[int],
                  precision: int = TRAINING_PRECISION) -> dict[str, list[float]]:
    """Per bound that constrains one of ``models`` on ``task``: its width bound at each length.

    Recurrent bounds limit the width m; the one-layer Transformer bounds limit m x heads, drawn as m with
    one head. A one-layer bound is drawn only for ``transformer``; the plot says which depth each curve has.
    """
    present = set(models)
    curves: dict[str, list[float]] = {}
    for bound in BOUNDS.get(task, []):
        sample = bound(max(2, lengths[0]), precision)
        family = RECURRENT if sample.architecture.startswith("recurrent") else ONE_LAYER
        if not family & present:
            continue
        label = f"{sample.theorem}, {sample.architecture}: {sample.statement} (p = {precision})"
        curves[label] = [bound(n, precision).value for n in lengths]
    return curves
