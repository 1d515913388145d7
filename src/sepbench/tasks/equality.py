"""String equality with a separator: Eq-random, Eq-one, Eq-ncp (Bhattamishra et al. 2024, App. H.2)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from sepbench.tasks.base import TASKS, Batch, Task


class EqualityOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alphabet_size: int = Field(2, ge=2, le=100_000, description="|Sigma| of the halves")


class LargeAlphabetOptions(EqualityOptions):
    alphabet_size: int = Field(1024, ge=2, le=100_000, description="|Sigma| of the halves; the paper uses 1024")


class Equality(Task):
    """u [sep] v with |u| = |v|; N counts the symbols of u and v, so a string has N + 1 tokens.

    Training lengths k ~ U{lo, lo+2, ..., N} with lo the smallest even number >= N/10 (App. H.2);
    evaluation is at exactly N (any even N). Tokens: symbols 0..|Sigma|-1, [sep], then the labels
    (binary variants only), then padding. Binary variants score the label at the last token.
    """

    Options = EqualityOptions
    labelled = True

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        if length % 2:
            raise ValueError(f"{type(self).__name__} needs an even length (two equal halves); got N={length}")
        self.alphabet = self.options.alphabet_size
        self.sep_id = self.alphabet
        self.false_id, self.true_id = self.alphabet + 1, self.alphabet + 2

    @property
    def vocab_size(self) -> int:
        return self.pad_id + 1

    @property
    def pad_id(self) -> int:
        return self.alphabet + (3 if self.labelled else 1)

    def max_seq_len(self, length: int | None = None) -> int:
        return (length or self.length) + 1

    def shortest_train_length(self) -> int:
        return max(2, 2 * -(-self.length // 20))

    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        lo = self.shortest_train_length()
        halves = rng.integers(lo // 2, self.length // 2 + 1, size=n)
        return self._layout(halves, rng)

    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        length = length or self.length
        if length % 2:
            raise ValueError(f"{type(self).__name__} needs an even length; cannot evaluate at {length}")
        return self._layout(np.full(n, length // 2), rng)

    def _layout(self, halves: np.ndarray, rng: np.random.Generator) -> Batch:
        n, longest = len(halves), int(halves.max())
        first = rng.integers(0, self.alphabet, size=(n, longest))
        second, labels = self.second_half(first, halves, rng)
        cols = np.arange(2 * longest + 1)[None, :]
        h = halves[:, None]
        inputs = np.full((n, 2 * longest + 1), self.pad_id, dtype=np.int64)
        rows = np.arange(n)[:, None]
        inputs[:, :longest] = np.where(cols[:, :longest] < h, first, self.pad_id)
        inputs[rows, h] = self.sep_id
        in_second = (cols > h) & (cols <= 2 * h)
        second_index = np.clip(cols - h - 1, 0, longest - 1)
        inputs = np.where(in_second, np.take_along_axis(second, np.broadcast_to(second_index, inputs.shape), 1), inputs)
        return self.score(inputs, first, halves, labels)

    def second_half(self, first: np.ndarray, halves: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The second halves and the labels (1 = equal)."""
        raise NotImplementedError

    def score(self, inputs: np.ndarray, first: np.ndarray, halves: np.ndarray, labels: np.ndarray) -> Batch:
        rows = np.arange(len(inputs))
        last = 2 * halves
        targets = np.zeros_like(inputs)
        targets[rows, last] = np.where(labels, self.true_id, self.false_id)
        mask = np.zeros(inputs.shape, dtype=bool)
        mask[rows, last] = True
        return Batch.from_numpy(inputs, targets, mask)

    @staticmethod
    def _halves(inputs: Sequence[int], sep: int, pad: int) -> tuple[list[int], list[int]]:
        tokens = [t for t in inputs if t != pad]
        cut = tokens.index(sep)
        return tokens[:cut], tokens[cut + 1 :]

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        u, v = self._halves(inputs, self.sep_id, self.pad_id)
        return [self.true_id if u == v else self.false_id]


@TASKS.register("eq_random", "is u == v in u[sep]v? second half random w.p. 1/2, |Sigma| = 2 (App. H.2 Eq-random)")
class EqRandom(Equality):
    """W.p. 1/2 the second half copies the first; otherwise it is uniform and the label is computed."""

    def second_half(self, first, halves, rng):
        fresh = rng.integers(0, self.alphabet, size=first.shape)
        copy = rng.random(len(first)) < 0.5
        second = np.where(copy[:, None], first, fresh)
        live = np.arange(first.shape[1])[None, :] < halves[:, None]
        labels = ((second == first) | ~live).all(axis=1)
        return second, labels


@TASKS.register("eq_one", "is u == v in u[sep]v? negatives change one symbol, |Sigma| = 1024 (App. H.2 Eq-one)")
class EqOne(Equality):
    """W.p. 1/2 an exact copy; otherwise a copy with exactly one position changed to another symbol."""

    Options = LargeAlphabetOptions

    def second_half(self, first, halves, rng):
        n = len(first)
        labels = rng.random(n) < 0.5
        where = rng.integers(0, halves)
        second = first.copy()
        rows = np.arange(n)
        changed = (first[rows, where] + rng.integers(1, self.alphabet, size=n)) % self.alphabet
        second[rows, where] = np.where(labels, first[rows, where], changed)
        return second, labels


@TASKS.register("eq_ncp", "next-character prediction on u[sep]u; every prefix must be right, |Sigma| = 1024 (App. H.2 Eq-ncp)")
class EqNCP(Equality):
    """Every string is u [sep] u; the model predicts the next character at every prefix.

    Before [sep] any symbol (or [sep]) is a valid continuation, so those prefixes carry no loss; they are
    still scored by ``correct``: a prediction there is right iff it is a symbol or [sep] (not padding).
    After [sep] exactly one symbol is valid, the copy, and those positions are the masked targets.
    An example is correct iff every prefix is (App. H.2). Tokens: symbols, [sep], padding.
    """

    Options = LargeAlphabetOptions
    labelled = False

    def second_half(self, first, halves, rng):
        return first, np.ones(len(first), dtype=bool)

    def score(self, inputs, first, halves, labels):
        cols = np.arange(inputs.shape[1])[None, :]
        h = halves[:, None]
        mask = (cols >= h) & (cols < 2 * h)
        targets = np.where(mask, np.take_along_axis(first, np.clip(cols - h, 0, first.shape[1] - 1), 1), 0)
        return Batch.from_numpy(inputs, targets, mask)

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        u, _ = self._halves(inputs, self.sep_id, self.pad_id)
        return list(u)

    def free_prefix(self, batch: Batch) -> torch.Tensor:
        """Bool [B, T]: the positions before [sep], where any symbol or [sep] is a right prediction."""
        return torch.cumsum((batch.inputs == self.sep_id).long(), dim=-1) == 0

    def checked_positions(self, batch: Batch) -> torch.Tensor:
        return batch.mask | self.free_prefix(batch)

    def correct_tokens(self, predicted: torch.Tensor, batch: Batch) -> torch.Tensor:
        copies_right = ~((predicted != batch.targets) & batch.mask).any(dim=-1)
        free_right = ~(self.free_prefix(batch) & (predicted == self.pad_id)).any(dim=-1)
        return copies_right & free_right
