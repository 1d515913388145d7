"""Longest increasing subsequence (Yang et al. 2024, sec. 6.1; format of Feng et al. 2023)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field

from sepbench.tasks.base import TASKS
from sepbench.tasks.cot.base import EOS, PAD, CotOptions, CotTask

SEP, NUMBER0 = 1, 3


class LisOptions(CotOptions):
    number_range: int | None = Field(
        None, ge=3, description="values are drawn from [L+1, R); default max(250, 2L+1), the reference's 250 where it works")


@TASKS.register("lis", "length of the longest increasing subsequence, with dp[i] for each i as CoT (Yang et al. 2024)")
class LongestIncreasingSubsequence(CotTask):
    """``x_1..x_L <sep> dp_1..dp_L <sep> max dp``: dp_i is the longest strictly increasing subsequence ending at i.

    Inputs lie in [L+1, R), apart from the DP values 1..L; 1-3 increasing runs of total length 3..L are
    planted at random positions over uniform fill (Feng et al. 2023). R must be at least 2L+1 (the
    reference's fixed R = 250 fails for L >= 125). Tokens: <pad>0 <sep>1 <eos>2, numbers 0..R-1 from id 3.
    """

    Options = LisOptions
    separator = SEP

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        if length < 3:
            raise ValueError(f"lis needs length >= 3, got {length}")
        self.range = self.options.number_range or max(250, 2 * length + 1)
        if self.range < 2 * length + 1:
            raise ValueError(f"lis number_range must be at least 2L+1 = {2 * length + 1} for L = {length}, got {self.range}")

    @property
    def vocab_size(self) -> int:
        return NUMBER0 + self.range

    def max_cot_len(self, length: int) -> int:
        return 2 * length + 3

    def max_direct_len(self, length: int) -> int:
        return length + 2

    def _generate(self, n: int, rng: np.random.Generator, length: int, train: bool) -> tuple[np.ndarray, np.ndarray]:
        values = self.sequences(n, rng, length)
        dp = longest_ending_at(values)
        answer = dp.max(axis=1, keepdims=True)
        sep, eos = np.full((n, 1), SEP), np.full((n, 1), EOS)
        body = [sep, answer + NUMBER0, eos] if self.direct else [sep, dp + NUMBER0, sep, answer + NUMBER0, eos]
        return np.concatenate([values + NUMBER0, *body], axis=1), np.full(n, length + 1)

    def sequences(self, n: int, rng: np.random.Generator, length: int) -> np.ndarray:
        """Uniform fill in [L+1, R) with 1-3 strictly increasing runs planted at random positions."""
        low, spread = length + 1, self.range - length - 1
        values = rng.integers(low, self.range, (n, length))
        planted = rng.integers(3, length + 1, n)
        runs = rng.integers(1, 4, n)
        cuts = np.sort(rng.integers(0, planted[:, None] + 1, (n, 2)), axis=1)
        cuts = np.where(runs[:, None] > np.array([[1, 2]]), cuts, planted[:, None])
        bounds = np.concatenate([np.zeros((n, 1), np.int64), cuts, planted[:, None]], axis=1)
        rank = np.argsort(rng.random((n, length)), axis=1).argsort(axis=1)
        column = np.arange(length)[None, :]
        big = np.iinfo(np.int64).max // 4
        padded = np.concatenate([values, np.zeros((n, 1), np.int64)], axis=1)
        for run in range(3):
            size = bounds[:, run + 1] - bounds[:, run]
            member = (rank >= bounds[:, run, None]) & (rank < bounds[:, run + 1, None])
            draws = np.sort(np.where(column < size[:, None], rng.integers(0, spread - size[:, None] + 1, (n, length)), big), axis=1)
            increasing = draws + column + low
            where = np.sort(np.where(member, column, big), axis=1)
            index = np.where(column < size[:, None], where, length)
            np.put_along_axis(padded, index, np.where(column < size[:, None], increasing, 0), axis=1)
        return padded[:, :length]

    def solve(self, prompt: Sequence[int]) -> list[int]:
        values = [int(t) - NUMBER0 for t in prompt[:-1]]
        dp: list[int] = []
        for i, v in enumerate(values):
            dp.append(1 + max((dp[j] for j in range(i) if values[j] < v), default=0))
        tail = [NUMBER0 + max(dp), EOS]
        return tail if self.direct else [NUMBER0 + d for d in dp] + [SEP] + tail

    def check_sequence(self, tokens: Sequence[int]) -> bool:
        tokens = [int(t) for t in tokens]
        if SEP not in tokens:
            return False
        cut = self.prompt_length(tokens)
        if cut < 2 or not all(NUMBER0 <= t < NUMBER0 + self.range for t in tokens[: cut - 1]):
            return False
        return tokens[cut:] == self.solve(tokens[:cut])

    def render(self, tokens: Sequence[int]) -> str:
        names = {PAD: "<pad>", SEP: "<sep>", EOS: "<eos>"}
        return " ".join(names.get(t, str(t - NUMBER0)) for t in map(int, tokens))


def longest_ending_at(values: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """dp[:, i] = longest strictly increasing subsequence ending at i, by patience sorting on many rows at once.

    Row r's tails are offset by r * span so that the flattened tail table is sorted and one
    ``searchsorted`` finds, for every row, how many of its tails are below x_i. Rows go in chunks
    whose tail table stays in cache.
    """
    if len(values) > chunk:
        return np.concatenate([longest_ending_at(values[i : i + chunk], chunk) for i in range(0, len(values), chunk)])
    n, length = values.shape
    span = int(values.max(initial=0)) + 2
    offset = np.arange(n, dtype=np.int64)[:, None] * span
    tails = (offset + span - 1).repeat(length, axis=1).ravel()
    base = np.arange(n, dtype=np.int64) * length
    dp = np.empty((n, length), np.int64)
    for i in range(length):
        key = values[:, i] + offset[:, 0]
        below = np.searchsorted(tails, key) - base
        dp[:, i] = below + 1
        tails[base + below] = key
    return dp
