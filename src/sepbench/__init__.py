"""sepbench: how large must each kind of sequence model be to solve a task, as the task grows?"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from sepbench._version import __version__
from sepbench.config import ModelConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from sepbench.store import Store  # noqa: E402
from sepbench.train import RunResult, train  # noqa: E402

if TYPE_CHECKING:
    from sepbench.models import MODELS, build_model
    from sepbench.tasks import TASKS, build_task

_NEED_TORCH = {"MODELS": "sepbench.models", "build_model": "sepbench.models", "TASKS": "sepbench.tasks",
               "build_task": "sepbench.tasks"}

__all__ = ["MODELS", "TASKS", "ModelConfig", "RunConfig", "RunResult", "Store", "TaskConfig", "TrainConfig",
           "build_model", "build_task", "train"]


def __getattr__(name: str) -> Any:
    """The names that need torch are imported on first use: the command line starts without it."""
    if name in _NEED_TORCH:
        return getattr(import_module(_NEED_TORCH[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
