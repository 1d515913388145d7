"""The model registry: a name maps to the Mixer class that the shared backbone stacks."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sepbench.plugins import MIXER_PLUGINS
from sepbench.registry import Registry

if TYPE_CHECKING:
    from sepbench.models.mixers.base import Mixer

MODELS: "Registry[type[Mixer]]" = Registry("model", MIXER_PLUGINS)
