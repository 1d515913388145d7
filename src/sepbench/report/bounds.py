"""The hook through which the theory's lower bounds reach the smallest-width plot.

When ``sepbench.theory.bounds`` exists and defines ``report_overlay(task, models, lengths)`` returning
``{label: [width bound at each length]}``, the report draws those curves; otherwise it draws none.
"""
from __future__ import annotations

import importlib
from typing import Callable, Sequence

BoundsProvider = Callable[[str, Sequence[str], Sequence[int]], dict[str, list[float]]]


def theory_bounds(task: str, models: Sequence[str], lengths: Sequence[int]) -> dict[str, list[float]]:
    """Width lower bounds per label at each length, from the theory module when it provides them."""
    try:
        module = importlib.import_module("sepbench.theory.bounds")
    except ModuleNotFoundError:
        return {}
    overlay = getattr(module, "report_overlay", None)
    if overlay is None:
        return {}
    return {str(name): [float(v) for v in values] for name, values in (overlay(task, models, lengths) or {}).items()}
