"""A grid cell's name: what a learning-rate search compares across, below both the search and the halving."""
from __future__ import annotations

import hashlib
import json
from typing import Iterable

from sepbench.config import RunConfig
from sepbench.train.result import RunResult


def cell_key(config: RunConfig) -> str:
    """Names a grid cell: the config without its seed and learning rate."""
    data = config.identity("device", "seed")
    data["train"].pop("lr")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def cut_rates(results: Iterable[RunResult]) -> set[tuple[str, float]]:
    """(cell, learning rate) of every rate a learning-rate search cut on some seed: such a rate is not ranked on
    the seeds trained since (a settling of its tie stopped part-way)."""
    return {(cell_key(r.config), r.config.train.lr) for r in results if r.status == "pruned"}
