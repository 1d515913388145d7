"""Training: ``train(RunConfig) -> RunResult``. torch is imported on first use, so reading results stays light."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sepbench.train.result import EvalPoint, RunResult

if TYPE_CHECKING:
    from sepbench.config import RunConfig
    from sepbench.train.keeping import Keeping
    from sepbench.train.loop import Trainer

__all__ = ["EvalPoint", "RunResult", "Trainer", "train"]


def train(config: RunConfig, progress: bool | None = None, keeping: Keeping | None = None,
          keep_checkpoint: bool = False) -> RunResult:
    """Train one model on one task as ``config`` says and return what happened; ``keeping`` says where the run
    keeps its checkpoint (resuming from one found there) and its curve so far. ``keep_checkpoint``: the finished
    run's checkpoint stays for the caller to discard once the result is stored (``Keeping.stored``)."""
    from sepbench.train.loop import Trainer

    return Trainer(config, keeping).run(progress=progress, delete_checkpoint=not keep_checkpoint)


def __getattr__(name: str) -> Any:
    if name == "Trainer":
        from sepbench.train.loop import Trainer

        return Trainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
