"""A grid cell's name: what a learning-rate search compares across, below both the search and the halving."""
from __future__ import annotations

import hashlib
import json

from sepbench.config import RunConfig


def cell_key(config: RunConfig) -> str:
    """Names a grid cell: the config without its seed and learning rate."""
    data = config.identity("device", "seed")
    data["train"].pop("lr")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
