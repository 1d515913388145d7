"""Where a run in training keeps its progress: its checkpoint, and its curve so far in the store."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sepbench.store import Store
    from sepbench.train.result import RunResult


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

    def stored(self, result: RunResult) -> None:
        """``result`` is in the store: the checkpoint of a run that ended goes, while a failed run's stays for
        ``--retry-failed`` to resume."""
        if self.checkpoints is not None and result.status != "failed":
            checkpoint_file(self.checkpoints, result.config_hash).unlink(missing_ok=True)


def checkpoint_file(folder: str | Path, config_hash: str) -> Path:
    """The checkpoint of the run ``config_hash`` in ``folder``."""
    return Path(folder) / f"{config_hash}.pt"
