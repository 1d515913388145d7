"""Where a run in training keeps its progress: its checkpoint, and its curve so far in the store."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sepbench.store import Store


@dataclass(frozen=True)
class Keeping:
    """``checkpoints``: the folder of checkpoints (``sepbench.train.checkpoint``); ``store``: the store whose
    table of running runs shows the curve so far (``sepbench results --running``). None: not kept there."""

    checkpoints: Path | None = None
    store: Path | None = None

    @classmethod
    def beside(cls, store: Store) -> Keeping:
        """Checkpoints in the store's checkpoint folder, the curve so far in the store itself."""
        return cls(store.checkpoints.resolve(), store.path.resolve())
