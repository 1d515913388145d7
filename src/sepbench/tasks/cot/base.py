"""Chain-of-thought tasks (Yang et al. 2024, sec. 6; formats of Feng et al. 2023): shared layout and data sets.

A sample is one token row: prompt (ending in its separator), then the CoT and the answer (or the answer
alone in ``direct`` mode), then ``<eos>``. The loss and the metrics cover everything after the prompt.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sepbench.tasks.base import Batch, Task

PAD, EOS = 0, 2


class CotOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["cot", "direct"] = Field("cot", description="cot: prompt, CoT, answer; direct: prompt, answer")


def compact(values: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pack the kept entries of each row to the left, padding with PAD; returns (rows, lengths)."""
    target = np.cumsum(keep, axis=1) - 1
    lengths = target[:, -1] + 1
    trash = max(1, int(lengths.max(initial=0)))
    out = np.full((values.shape[0], trash + 1), PAD, dtype=np.int64)
    np.put_along_axis(out, np.where(keep, target, trash), values, axis=1)
    return out[:, :trash], lengths


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """Two independent 64-bit linear hashes per row, as one [n, 2] array (duplicates collide, others almost never)."""
    weights = np.random.default_rng(12345).integers(1, 2**63, size=(2, rows.shape[1]), dtype=np.uint64) | np.uint64(1)
    data = rows.astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        return np.stack([(data * w).sum(axis=1, dtype=np.uint64) for w in weights], axis=1)


class CotTask(Task):
    """A task whose samples are prompt -> CoT -> answer -> <eos>, evaluated by greedy generation.

    Subclasses generate padded rows with ``_generate`` and give the plain-Python oracle ``solve``.
    """

    Options: ClassVar[type[BaseModel]] = CotOptions
    evaluation: ClassVar[str] = "generate"
    deduplicated_split: ClassVar[bool] = True
    separator: ClassVar[int]

    @property
    def pad_id(self) -> int:
        return PAD

    @property
    def eos_id(self) -> int:
        return EOS

    @property
    def direct(self) -> bool:
        return self.options.mode == "direct"

    @abstractmethod
    def max_cot_len(self, length: int) -> int:
        """Tokens of the longest sample without <eos> (the lengths Yang et al. report)."""

    @abstractmethod
    def max_direct_len(self, length: int) -> int:
        """Tokens of the longest direct sample without <eos>."""

    @abstractmethod
    def _generate(self, n: int, rng: np.random.Generator, length: int, train: bool) -> tuple[np.ndarray, np.ndarray]:
        """``n`` samples as PAD-padded rows ending in <eos>, and each row's prompt length."""

    @abstractmethod
    def solve(self, prompt: Sequence[int]) -> list[int]:
        """Plain-Python oracle: the tokens after ``prompt`` (CoT or not, answer, <eos>)."""

    @abstractmethod
    def check_sequence(self, tokens: Sequence[int]) -> bool:
        """Exact checker of one whole sample (prompt, CoT, answer, <eos>; no padding)."""

    @abstractmethod
    def render(self, tokens: Sequence[int]) -> str:
        """The tokens as the reference's text, one space between tokens."""

    def encode(self, text: str) -> list[int]:
        """Token ids of a text written as ``render`` writes it (the reference's data-file lines)."""
        ids = {self.render([i]): i for i in range(self.vocab_size)}
        try:
            return [ids[word] for word in text.split()]
        except KeyError as err:
            raise ValueError(f"{type(self).__name__} has no token {err.args[0]!r}") from None

    def max_seq_len(self, length: int | None = None) -> int:
        length = length or self.length
        return self.max_direct_len(length) if self.direct else self.max_cot_len(length)

    def prompt_length(self, tokens: Sequence[int]) -> int:
        """Tokens up to and including the first separator."""
        return list(tokens).index(self.separator) + 1

    def answer_of(self, tokens: Sequence[int]) -> int | None:
        """The answer: the token just before the first <eos> after the prompt, or None if there is none."""
        tokens = list(tokens)
        start = self.prompt_length(tokens)
        if EOS not in tokens[start:]:
            return None
        end = tokens.index(EOS, start)
        return tokens[end - 1] if end > start else None

    def generate_rows(self, n: int, rng: np.random.Generator, length: int | None = None,
                      train: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Padded full rows (with <eos>) and prompt lengths; the entry point of both data modes."""
        return self._generate(n, rng, length or self.length, train)

    def to_batch(self, rows: np.ndarray, prompt_lengths: np.ndarray) -> Batch:
        """Next-token targets; the mask scores the CoT, the answer and <eos>, never the prompt."""
        inputs, targets = rows[:, :-1], rows[:, 1:]
        position = np.arange(inputs.shape[1])[None, :]
        mask = (position >= prompt_lengths[:, None] - 1) & (targets != PAD)
        return Batch.from_numpy(inputs, targets, mask)

    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        return self.to_batch(*self.generate_rows(n, rng, train=True))

    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        return self.to_batch(*self.generate_rows(n, rng, length))

    def sample_split(self, n_train: int, n_test: int, rng: np.random.Generator) -> tuple[Batch, Batch]:
        """A materialised data set as the reference builds it: ``n_train`` distinct training rows, then
        ``n_test`` distinct test rows none of which equals a training row (compared on the whole sequence)."""
        train_rows, train_prompts, seen = self._distinct(n_train, rng, True, np.empty((0, 2), np.uint64))
        test_rows, test_prompts, _ = self._distinct(n_test, rng, False, seen)
        return self.to_batch(train_rows, train_prompts), self.to_batch(test_rows, test_prompts)

    def _distinct(self, n: int, rng: np.random.Generator, train: bool,
                  exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        width = self.max_seq_len() + 1
        rows = np.zeros((0, width), np.int64)
        prompts = np.zeros(0, np.int64)
        hashes = exclude
        stale = 0
        while len(rows) < n and stale < 3:
            new, new_prompts = self.generate_rows(max(1024, 2 * (n - len(rows))), rng, train=train)
            padded = np.zeros((len(new), width), np.int64)
            padded[:, : new.shape[1]] = new
            candidates = np.concatenate([hashes, row_hashes(padded)])
            _, first = np.unique(candidates, axis=0, return_index=True)
            fresh = np.sort(first[first >= len(hashes)]) - len(hashes)
            fresh = fresh[: n - len(rows)]
            stale = 0 if len(fresh) else stale + 1
            rows = np.concatenate([rows, padded[fresh]])
            prompts = np.concatenate([prompts, new_prompts[fresh]])
            hashes = np.concatenate([hashes, row_hashes(padded[fresh])])
        if len(rows) < n:
            raise ValueError(f"{type(self).__name__} at size {self.length} has fewer than {n} distinct samples")
        used = max(1, int((rows != PAD).sum(axis=1).max()))
        return rows[:, :used], prompts, hashes

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        tokens = [int(t) for t in inputs]
        return self.solve(tokens[: self.prompt_length(tokens)])

    def check(self, inputs: Sequence[int], targets: Sequence[int], mask: Sequence[bool]) -> bool:
        """The whole sample (inputs plus the last target) passes ``check_sequence``."""
        scored = [i for i, m in enumerate(mask) if m]
        if not scored:
            return False
        tokens = [int(t) for t in inputs[: scored[-1] + 1]] + [int(targets[scored[-1]])]
        return self.check_sequence(tokens)
