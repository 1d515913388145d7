"""The Task interface: a vocabulary, vectorised samplers, an exact checker, and the metric."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Sequence

import numpy as np
import torch
from pydantic import BaseModel

from sepbench.config import NoOptions
from sepbench.registry import TASKS  # noqa: F401  (tasks register here)


@dataclass
class Batch:
    """Token ids with their targets; ``mask`` marks the positions scored by the loss and the metric."""

    inputs: torch.Tensor  # [B, T] long
    targets: torch.Tensor  # [B, T] long, meaningful where mask is True
    mask: torch.Tensor  # [B, T] bool

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(*(getattr(self, f.name).to(device, non_blocking=True) for f in fields(self)))

    def slice(self, start: int, stop: int) -> "Batch":
        return Batch(*(getattr(self, f.name)[start:stop] for f in fields(self)))

    @classmethod
    def from_numpy(cls, inputs: np.ndarray, targets: np.ndarray, mask: np.ndarray) -> "Batch":
        return cls(
            torch.from_numpy(np.ascontiguousarray(inputs, dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(mask, dtype=bool)),
        )


class Task(ABC):
    """A synthetic sequence task of size N (``length``).

    Subclasses set ``Options`` (a pydantic model of their own knobs), build the vocabulary in
    ``__init__`` and implement the samplers and the plain-Python reference answer.
    """

    Options: ClassVar[type[BaseModel]] = NoOptions
    evaluation: ClassVar[str] = "teacher_forced"
    """How the trainer scores the task: 'teacher_forced' (one forward pass) or 'generate' (greedy decoding)."""
    deduplicated_split: ClassVar[bool] = False
    """Whether ``sample_split`` builds the fixed data set (distinct training rows, test disjoint from them)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "correct" in vars(cls):
            raise TypeError(f"{cls.__name__} overrides correct; override correct_tokens (and checked_positions "
                            "where it reads unscored positions): evaluation computes logits only where those say")

    def __init__(self, length: int, options: dict[str, Any] | None = None) -> None:
        self.length = length
        self.options = self.Options.model_validate(options or {})

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids, padding included."""

    @property
    @abstractmethod
    def pad_id(self) -> int:
        """The token that fills sequences shorter than the batch."""

    @abstractmethod
    def max_seq_len(self, length: int | None = None) -> int:
        """Tokens in the longest sequence at task size ``length`` (default N)."""

    @abstractmethod
    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        """A training batch, lengths drawn as the task's paper prescribes."""

    def sample_train_streams(self, n: int, rngs: Sequence[np.random.Generator]) -> list[Batch]:
        """One training batch from each stream, as ``sample_train`` on each would give (stacked runs' data)."""
        return [self.sample_train(n, rng) for rng in rngs]

    @abstractmethod
    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        """An evaluation batch at size exactly ``length`` (default N)."""

    def sample_split(self, n_train: int, n_test: int, rng: np.random.Generator) -> tuple[Batch, Batch]:
        """A fixed training set and a test set; tasks with ``deduplicated_split`` make them distinct and disjoint."""
        return self.sample_train(n_train, rng), self.sample_eval(n_test, rng)

    @abstractmethod
    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        """Plain-Python oracle: the correct target tokens, in order, at the scored positions."""

    def check(self, inputs: Sequence[int], targets: Sequence[int], mask: Sequence[bool]) -> bool:
        """Whether one example's scored targets are exactly the oracle's answer."""
        given = [int(t) for t, m in zip(targets, mask) if m]
        return given == self.reference_answer([int(i) for i in inputs])

    def checked_positions(self, batch: Batch) -> torch.Tensor:
        """Bool [B, T]: the positions whose predictions ``correct_tokens`` reads; the scored ones, by default,
        and always at least those (the evaluation loss is taken from the logits computed here)."""
        return batch.mask

    def correct_tokens(self, predicted: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per example: True iff the predicted tokens [B, T] are right; only ``checked_positions`` are read."""
        wrong = (predicted != batch.targets) & batch.mask
        return ~wrong.any(dim=-1)

    def correct(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per example: True iff the argmax of ``logits`` [B, T, V] is right at every scored position."""
        return self.correct_tokens(logits.argmax(-1), batch)

