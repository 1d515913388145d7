"""Lag lookup: a string, then a lag d; output the symbol d places from its end. A window of d + 1 positions
suffices, so it is the local counterpart of Index Lookup, which needs the whole string."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sepbench.tasks.base import Batch, Task


class LagLookupOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alphabet_size: int = Field(16, ge=2, le=100_000, description="symbols the string is drawn from")
    max_lag: int = Field(4, ge=1, le=1000, description="largest lag asked for")


class LagLookup(Task):
    """Strings of k ~ U[max_lag, N] symbols, then a lag token d ~ U[1, max_lag]; the target is s_{k - d + 1}.

    Tokens: symbols 0..|Sigma|-1, lag tokens |Sigma|..|Sigma|+max_lag-1 (d = 1..max_lag), then padding.
    Evaluation strings have length exactly N (any N >= max_lag: the lag tokens do not depend on N).
    """

    Options = LagLookupOptions

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        if self.options.max_lag > length:
            raise ValueError(f"max_lag {self.options.max_lag} exceeds length {length}")
        self.alphabet = self.options.alphabet_size

    @property
    def vocab_size(self) -> int:
        return self.alphabet + self.options.max_lag + 1

    @property
    def pad_id(self) -> int:
        return self.alphabet + self.options.max_lag

    def max_seq_len(self, length: int | None = None) -> int:
        return (length or self.length) + 1

    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        return self._sample(rng.integers(self.options.max_lag, self.length + 1, size=n), rng, self.length)

    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        length = length or self.length
        if length < self.options.max_lag:
            raise ValueError(f"lag_lookup needs strings of at least max_lag = {self.options.max_lag} symbols")
        return self._sample(np.full(n, length), rng, length)

    def _sample(self, lengths: np.ndarray, rng: np.random.Generator, longest: int) -> Batch:
        rows = np.arange(lengths.shape[0])
        symbols = rng.integers(0, self.alphabet, size=(lengths.shape[0], longest))
        lags = rng.integers(1, self.options.max_lag + 1, size=lengths.shape[0])
        inputs = np.where(np.arange(longest + 1) < lengths[:, None], np.pad(symbols, ((0, 0), (0, 1))), self.pad_id)
        inputs[rows, lengths] = self.alphabet + lags - 1
        targets = np.zeros_like(inputs)
        targets[rows, lengths] = symbols[rows, lengths - lags]
        mask = np.zeros(inputs.shape, dtype=bool)
        mask[rows, lengths] = True
        return Batch.from_numpy(inputs, targets, mask)

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        string: list[int] = []
        for token in inputs:
            if token < self.alphabet:
                string.append(token)
            elif token < self.pad_id:
                return [string[-(token - self.alphabet + 1)]]
        raise ValueError("example has no lag token")
