"""RunResult: everything a finished run records."""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from sepbench.config import WATCH_FIELDS, RunConfig

RunStatus = Literal["solved", "completed", "diverged", "failed", "pruned"]


NON_FINITE_JSON = ConfigDict(ser_json_inf_nan="constants")
"""Write NaN and infinities as the JSON constants NaN / Infinity, which Python and pydantic read back."""


def _null_as_nan(value: Any) -> Any:
    """Stores written before non-finite numbers round-tripped hold a diverged loss as JSON null."""
    return math.nan if value is None else value


class EvalInterval(BaseModel):
    """An exact (Clopper-Pearson) interval on accuracy over ``n`` evaluation examples at ``confidence``."""

    n: int
    low: float
    high: float
    confidence: float


class EvalPoint(BaseModel):
    """One evaluation during training; ``interval`` (absent in results stored before it existed) gives the
    examples scored, fewer than the evaluation set where the adaptive budget decided the threshold early."""

    model_config = NON_FINITE_JSON

    step: int
    loss: float
    accuracy: float
    seconds: float
    interval: EvalInterval | None = None

    @field_validator("loss", "accuracy", mode="before")
    @classmethod
    def _null_as_nan(cls, value: Any) -> Any:
        return _null_as_nan(value)


class RunResult(BaseModel):
    """One run. ``status``: solved (reached the threshold), completed (ran all steps), diverged, failed, or
    pruned (stopped early by a learning-rate search; its curve is kept, it is never read as unsolved)."""

    model_config = NON_FINITE_JSON

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
    cpu_seconds: float | None = Field(None, description="CPU seconds of the training process over the run's "
                                      "steps and evaluations, every thread counted (core-seconds); None where not "
                                      "counted: runs trained stacked, resumed from a checkpoint that did not count "
                                      "them, or stored before sepbench counted them")
    parameters: int = 0
    state_floats: int | None = Field(0, description="None: the mixer has no step path to measure")
    device: str = "cpu"
    compute_paths: dict[str, str] = Field(default_factory=dict, description="the implementation of each mixer "
                                          "computation that has several, e.g. {'scan': 'fused'} for Mamba")
    version: str = ""
    code_version: str = Field("", description="hash of the code that decides a result (environment.code_version)")
    git_commit: str | None = None
    created_at: str = ""
    error: str | None = None
    resumed_from: list[int] = Field(default_factory=list, description="steps of the checkpoints the run resumed from")

    @field_serializer("config")
    def _config_without_watch_fields(self, config: RunConfig) -> dict[str, Any]:
        """How the run was kept and watched is no part of its record (nor of its hash)."""
        return config.model_dump(mode="json", exclude={"train": WATCH_FIELDS})

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics_null_as_nan(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {name: _null_as_nan(number) for name, number in value.items()}
        return value

    @property
    def accuracy(self) -> float:
        return self.metrics.get("accuracy", 0.0)
