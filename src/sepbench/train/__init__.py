"""Training: ``train(RunConfig) -> RunResult``."""
from sepbench.train.loop import Trainer, train
from sepbench.train.result import EvalPoint, RunResult

__all__ = ["EvalPoint", "RunResult", "Trainer", "train"]
