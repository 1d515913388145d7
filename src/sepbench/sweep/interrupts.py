"""What an interrupted command kept: the runs that finished before Ctrl-C, and the checkpoints its runs in
flight saved on the way out (each resumes from there when the same command runs again)."""
from __future__ import annotations

from pathlib import Path

from sepbench.store import Store


def finished_runs(reported: set[str], before: set[str], store: Store, planned: set[str] | None = None) -> set[str]:
    """Runs that finished since the store held ``before``: those reported (a retried run replaces its row, so
    only the report shows it), and those a worker stored but the interrupt kept from being reported (new in the
    store; only those in ``planned`` when given)."""
    new = store.config_hashes() - before
    return reported | (new if planned is None else new & planned)


def saved_checkpoints(store: Store, since: float) -> list[tuple[Path, str]]:
    """The checkpoints in the store's folder written since ``since`` (a ``time.time()``), each with its step."""
    folder = store.checkpoints
    saved = [p for p in folder.glob("*.pt") if p.stat().st_mtime >= since] if folder.is_dir() else []
    return [(path, checkpoint_step(path)) for path in saved]


def checkpoint_step(path: Path) -> str:
    """The step a checkpoint file was saved at; '?' for a file a worker was still writing."""
    import torch

    try:
        return str(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["state"]["step"])
    except Exception:  # noqa: BLE001 - a file a worker was still writing: its step is not known
        return "?"
