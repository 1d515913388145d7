"""RunResult: everything a finished run records."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from sepbench.config import RunConfig

RunStatus = Literal["solved", "completed", "diverged", "failed", "pruned"]


class EvalInterval(BaseModel):
    """An exact (Clopper-Pearson) interval on accuracy over ``n`` evaluation examples at ``confidence``."""

    n: int
    low: float
    high: float
    confidence: float


class EvalPoint(BaseModel):
    """One evaluation during training; ``interval`` (absent in results stored before it existed) gives the
    examples scored, fewer than the evaluation set where the adaptive budget decided the threshold early."""

    step: int
    loss: float
    accuracy: float
    seconds: float
    interval: EvalInterval | None = None


class RunResult(BaseModel):
    """One run. ``status``: solved (reached the threshold), completed (ran all steps), diverged, failed, or
    pruned (stopped early by a learning-rate search; its curve is kept, it is never read as unsolved)."""

    config: RunConfig
    config_hash: str
    status: RunStatus
    metrics: dict[str, float] = Field(default_factory=dict, description="final evaluation metrics")
    intervals: dict[str, EvalInterval] = Field(default_factory=dict, description="per final accuracy metric")
    curve: list[EvalPoint] = Field(default_factory=list)
    steps: int = 0
    steps_to_threshold: int | None = None
    seconds_to_threshold: float | None = None
    wall_seconds: float = 0.0
    parameters: int = 0
    state_floats: int = 0
    device: str = "cpu"
    version: str = ""
    git_commit: str | None = None
    created_at: str = ""
    error: str | None = None

    @property
    def accuracy(self) -> float:
        return self.metrics.get("accuracy", 0.0)
