"""Index Lookup (Bhattamishra et al. 2024, sec. 3 and App. H.1)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sepbench.tasks.base import TASKS, Batch, Task


class IndexLookupOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alphabet_size: int = Field(64, ge=2, le=100_000, description="|Sigma|; the paper uses 64")
    min_length: int = Field(10, ge=1, description="shortest training string; the paper uses 10")


@TASKS.register("index_lookup", "s_1..s_k then a position p; output s_p (Bhattamishra et al. 2024, App. H.1)")
class IndexLookup(Task):
    """Strings of k ~ U[min_length, N] symbols, then an index token p ~ U[1, k]; the target is s_p.

    Tokens: symbols 0..|Sigma|-1, index tokens |Sigma|..|Sigma|+N-1 (p = 1..N), then padding.
    Training lengths follow App. H.1 reading "sample k symbols" (the text's "N symbols" is a typo);
    evaluation strings have length exactly N.
    """

    Options = IndexLookupOptions

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        if self.options.min_length > length:
            raise ValueError(f"options.min_length {self.options.min_length} (the shortest sequence drawn) exceeds "
                             f"length {length}; allowed: a length >= {self.options.min_length}, or a smaller "
                             f"task.options.min_length")
        self.alphabet = self.options.alphabet_size

    @property
    def vocab_size(self) -> int:
        return self.alphabet + self.length + 1

    @property
    def pad_id(self) -> int:
        return self.alphabet + self.length

    def max_seq_len(self, length: int | None = None) -> int:
        return (length or self.length) + 1

    def index_token(self, position: int) -> int:
        return self.alphabet + position - 1

    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        lengths = rng.integers(self.options.min_length, self.length + 1, size=n)
        return self._sample(lengths, rng, self.length)

    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        length = length or self.length
        if length > self.length:
            raise ValueError(f"index_lookup has index tokens up to N={self.length}; cannot evaluate at {length}")
        return self._sample(np.full(n, length), rng, length)

    def _sample(self, lengths: np.ndarray, rng: np.random.Generator, longest: int) -> Batch:
        n = lengths.shape[0]
        rows = np.arange(n)
        symbols = rng.integers(0, self.alphabet, size=(n, longest))
        positions = rng.integers(1, lengths + 1)
        inputs = np.full((n, longest + 1), self.pad_id, dtype=np.int64)
        inputs[:, :longest] = np.where(np.arange(longest) < lengths[:, None], symbols, self.pad_id)
        inputs[rows, lengths] = self.alphabet + positions - 1
        targets = np.zeros_like(inputs)
        targets[rows, lengths] = symbols[rows, positions - 1]
        mask = np.zeros(inputs.shape, dtype=bool)
        mask[rows, lengths] = True
        return Batch.from_numpy(inputs, targets, mask)

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        string: list[int] = []
        for token in inputs:
            if token < self.alphabet:
                string.append(token)
            elif token < self.pad_id:
                return [string[token - self.alphabet]]
        raise ValueError("example has no index token")
