"""The model registry: a name maps to the Mixer class that the shared backbone stacks (``sepbench.registry``)."""
from sepbench.registry import MODELS

__all__ = ["MODELS"]
