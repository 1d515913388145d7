"""The Mixer interface: a causal token mixer with a whole-sequence path and a one-token step."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from pydantic import BaseModel
from torch import nn

from sepbench.config import ModelConfig, NoOptions


class Mixer(nn.Module, ABC):
    """Maps [B, T, D] to [B, T, D] causally; ``step`` does the same one token at a time.

    Class attributes give the defaults a model is trained with unless the config says otherwise.
    Each mixer initialises its own parameters in ``reset_parameters``; the backbone never touches them.
    """

    Options: ClassVar[type[BaseModel]] = NoOptions
    default_lr: ClassVar[float] = 1e-3
    default_positions: ClassVar[str] = "learned"
    default_mlp: ClassVar[bool] = True
    uses_heads: ClassVar[bool] = False

    def __init__(self, config: ModelConfig, max_len: int) -> None:
        super().__init__()
        self.width = config.width
        self.max_len = max_len
        self.options = self.Options.model_validate(config.options)

    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Whole-sequence (training) path."""

    @abstractmethod
    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> Any:
        """The state before the first token."""

    @abstractmethod
    def step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """One token [B, D] in, one output [B, D] and the next state out."""

    @abstractmethod
    def reset_parameters(self) -> None:
        """The mixer's own initialisation."""

    def compute_paths(self, device: torch.device) -> dict[str, str]:
        """Which implementation each of the mixer's computations runs on ``device``, where it has a choice
        (e.g. Mamba's ``{"scan": "fused"}``); recorded in every run's result."""
        return {}

    def has_batching_rule(self, device: torch.device) -> bool:
        """Whether ``torch.func.vmap`` can batch the training forward on ``device`` (stacked runs); False for
        an op or ``autograd.Function`` without a batching rule, which then runs one member at a time."""
        return True

    def state_floats(self, length: int) -> int:
        """Closed form: floats per example the step path carries after ``length`` tokens."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form state size")

    def flops(self, length: int) -> int:
        """Closed form: matrix-product FLOPs (2 per multiply-accumulate) of one forward over ``length`` tokens."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form FLOP count")

    def activation_floats(self, length: int) -> int:
        """Estimate: floats one example keeps alive at the peak of a no-grad block forward over ``length``
        tokens (sizes evaluation chunks). Default 32 widths a position, above what the zoo's per-position
        mixers were measured to take on a CPU (5 to 34)."""
        return 32 * self.width * length
