"""Chain-of-thought tasks (Yang et al. 2024, sec. 6; formats of Feng et al. 2023): shared layout and data sets.

A sample is one token row: prompt (ending in its separator), then the CoT and the answer (or the answer
alone in ``direct`` mode), then ``<eos>``. The loss and the metrics cover everything after the prompt.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sepbench.tasks.base import Batch, Task
from sepbench.tasks.cot.distinct import SeenRows

PAD, EOS = 0, 2
PATIENCE = 20_000
"""Draws in a row that find no new distinct sample before a materialised split gives up (at least 4 per row
asked); the reference draws on until its set is full, forever where the task has fewer samples."""


class CotOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["cot", "direct"] = Field("cot", description="cot: prompt, CoT, answer; direct: prompt, answer")


def _narrowed(rows: np.ndarray, width: int, block: int = 1 << 16) -> np.ndarray:
    """The first ``width`` columns of C-contiguous ``rows``, moved to the front of its own buffer (no second copy
    of a large data set): row i goes to [i * width, (i + 1) * width), never past where it was read from."""
    if width == rows.shape[1]:
        return rows
    flat, n = rows.reshape(-1), rows.shape[0]
    for start in range(0, n, block):
        stop = min(n, start + block)
        part = rows[start:stop, :width]
        flat[start * width : stop * width].reshape(stop - start, width)[...] = part  # numpy buffers overlapping copies
    return flat[: n * width].reshape(n, width)


@dataclass
class Rows:
    """A materialised CoT data set: PAD-padded token rows (with <eos>) in a narrow dtype and prompt lengths."""

    tokens: np.ndarray
    prompts: np.ndarray

    def __len__(self) -> int:
        return len(self.prompts)

    def take(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``index`` as int64, cut to the longest of them, with their prompt lengths."""
        rows = self.tokens[index]
        used = max(2, int((rows != PAD).sum(axis=1).max(initial=2)))
        return rows[:, :used].astype(np.int64), self.prompts[index].astype(np.int64)


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
    def token_dtype(self) -> type[np.unsignedinteger]:
        """The narrowest unsigned dtype holding every token id, in which rows are generated and stored."""
        return np.uint8 if self.vocab_size <= 256 else np.uint16

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
        """``n`` samples as PAD-padded rows ending in <eos>, as wide as the longest of them (the split relies on
        it), and each row's prompt length."""

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
        """Padded full rows (with <eos>) in ``token_dtype`` and prompt lengths; the entry point of both data modes."""
        if length is not None and length != self.length:
            self.check_other_length(length)
        rows, prompts = self._generate(n, rng, length or self.length, train)
        return rows.astype(self.token_dtype, copy=False), prompts

    def check_other_length(self, length: int) -> None:
        """Refuse a length other than N that this task cannot write for a model trained at N: one the task
        refuses at that size, or one whose rows need tokens past N's vocabulary."""
        try:
            other = type(self)(length, self.options.model_dump())
        except ValueError as problem:
            raise ValueError(f"cannot evaluate at {length}: {problem}") from None
        if other.vocab_size > self.vocab_size:
            raise ValueError(f"at {length} the task needs {other.vocab_size} tokens, more than the "
                             f"{self.vocab_size} of N={self.length}; cannot evaluate at {length}")

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
        """``split_rows`` as two batches (int64 tensors: for small sets; the trainer keeps the rows)."""
        train, test = self.split_rows(n_train, n_test, rng)
        return self.to_batch(train.tokens, train.prompts), self.to_batch(test.tokens, test.prompts)

    def split_rows(self, n_train: int, n_test: int, rng: np.random.Generator) -> tuple["Rows", "Rows"]:
        """A materialised data set as the reference builds it: ``n_train`` distinct training rows, then
        ``n_test`` distinct test rows none of which equals a training row (compared on the whole sequence).

        Rows are drawn in chunks, stored in the narrowest unsigned dtype and deduplicated by 64-bit hashes
        (``SeenRows``: equal rows always collide; two distinct rows are taken for one with chance ~2^-64,
        which only drops one of them), so memory is the data set plus one chunk.
        """
        seen = SeenRows(n_train + n_test)
        train = self._distinct(n_train, rng, self.split_stages(n_train), seen)
        test = self._distinct(n_test, rng, [(None, "test")], seen)
        return train, test

    def split_stages(self, n_train: int) -> list[tuple[int | None, object]]:
        """How the training set is drawn: (draws, stage) in order; draws None fills up to ``n_train``."""
        return [(None, "train")]

    def stage_rows(self, n: int, rng: np.random.Generator, stage: object) -> tuple[np.ndarray, np.ndarray]:
        """``n`` rows of one stage of ``split_stages`` (or of the test set, stage 'test'), as wide as the longest."""
        return self.generate_rows(n, rng, train=stage == "train")

    def _distinct(self, n: int, rng: np.random.Generator, stages: list[tuple[int | None, object]],
                  seen: SeenRows) -> "Rows":
        """``n`` rows, drawn stage by stage, that equal neither each other nor a row ``seen`` holds; they are
        added to ``seen`` as its last store."""
        width = self.max_seq_len() + 1
        tokens = np.full((n, width), PAD, self.token_dtype)  # touched in order first: faster than by scattered rows
        prompts = np.zeros(n, np.int32)
        place = rng.permutation(n)  # the i-th distinct row lands at place[i], so the set comes out shuffled
        store, filled, used = seen.attach(tokens), 0, 1
        chunk = int(np.clip(4_000_000 // width, 1024, 50_000))  # ~4 MB of rows: fewer page faults than 8 MB
        patience = max(PATIENCE, 4 * n)
        for draws, stage in stages:
            left, stale = draws, 0
            while filled < n and (left is None or left > 0) and stale < patience:
                size = min(chunk, left) if left is not None else min(chunk, (n - filled) + (n - filled) // 8 + 64)
                rows, row_prompts = self.stage_rows(size, rng, stage)
                rows = rows.astype(self.token_dtype, copy=False)
                left = None if left is None else left - size
                to = place[filled:]
                fresh = seen.keep(rows, to)
                stale = 0 if len(fresh) else stale + size
                if len(fresh) == len(rows):  # generated rows are as wide as the longest of them
                    block, width_used = rows, rows.shape[1]
                else:
                    block = rows.take(fresh, axis=0)
                    columns = np.flatnonzero(np.bitwise_or.reduce(block, axis=0))
                    width_used = int(columns[-1]) + 1 if columns.size else 1
                used = max(used, width_used)
                tokens[to[: len(fresh)], : block.shape[1]] = block
                prompts[to[: len(fresh)]] = row_prompts[fresh]
                filled += len(fresh)
        if filled < n:
            raise ValueError(f"{type(self).__name__} at size {self.length} has fewer than {n} distinct samples")
        rows = Rows(_narrowed(tokens, used), prompts)
        seen.replace(store, rows.tokens)
        return rows

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
