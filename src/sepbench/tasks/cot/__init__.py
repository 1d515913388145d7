"""Chain-of-thought dynamic-programming tasks of Yang et al. 2024 in the formats of Feng et al. 2023."""
from sepbench.tasks.cot import arithmetic, edit_distance, lis  # noqa: F401  (register the tasks)
from sepbench.tasks.cot.base import CotTask

__all__ = ["CotTask"]
