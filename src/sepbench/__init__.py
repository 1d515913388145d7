"""sepbench: how large must each kind of sequence model be to solve a task, as the task grows?"""
__version__ = "0.1.0"

from sepbench.config import ModelConfig, RunConfig, TaskConfig, TrainConfig  # noqa: E402
from sepbench.models import MODELS, build_model  # noqa: E402
from sepbench.store import Store  # noqa: E402
from sepbench.tasks import TASKS, build_task  # noqa: E402
from sepbench.train import RunResult, train  # noqa: E402

__all__ = ["MODELS", "TASKS", "ModelConfig", "RunConfig", "RunResult", "Store", "TaskConfig", "TrainConfig",
           "build_model", "build_task", "train"]
