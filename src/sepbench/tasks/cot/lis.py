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
        """Inputs sampled as the reference samples them (Feng et al. 2023, LIS/data.py): 1-3 runs of total
        size T uniform in 3..L (two runs: the first 1..T//2+1; three: 1..T//3+1, then 1..(T-first)//2+1,
        the rest last), each a sorted sample without replacement of [L+1, R); T sorted random positions
        take the runs one after another, and the other positions are uniform in [L+1, R)."""
        low = length + 1
        values = rng.integers(low, self.range, (n, length))
        runs = rng.integers(1, 4, n)
        total = rng.integers(3, length + 1, n)
        first = np.where(runs == 1, total, rng.integers(1, np.where(runs == 2, total // 2, total // 3) + 2))
        second = np.where(runs == 3, rng.integers(1, (total - first) // 2 + 2), total - first)
        second = np.where(runs == 1, 0, second)
        sizes = np.stack([first, second, total - first - second], axis=1)
        places = _sorted_subsets(total[:, None], length, rng)[:, 0]
        numbers = _sorted_subsets(sizes, self.range - low, rng).reshape(n, -1)
        row, column = np.nonzero(places)
        values[row, column] = low + np.nonzero(numbers)[1] % (self.range - low)
        return values

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


def _sorted_subsets(sizes: np.ndarray, universe: int, rng: np.random.Generator) -> np.ndarray:
    """Masks [n, k, universe] of uniform random subsets of range(universe) of the given sizes [n, k], by
    selection sampling (Knuth's algorithm S): element j is taken with chance (still needed) / (left to see)."""
    need = sizes.astype(np.int64).copy()
    mask = np.empty(sizes.shape + (universe,), bool)
    for j in range(universe):
        take = rng.random(sizes.shape) * (universe - j) < need
        mask[..., j] = take
        need -= take
    return mask


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
