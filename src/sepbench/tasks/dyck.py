"""Bounded Dyck-(k, m) recognition (Bhattamishra et al. 2024, sec. 4 and App. E, data App. H.1)."""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sepbench.tasks.base import TASKS, Batch, Task


class DyckOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    types: int = Field(2, ge=1, le=16, description="bracket types k; the paper uses 2")
    depth: int = Field(2, ge=1, le=32, description="largest number of unclosed brackets m; the paper uses 2")


def is_dyck(tokens: Sequence[int], types: int = 2, depth: int = 2) -> bool:
    """Plain stack check: opens 0..k-1, closes k..2k-1; well matched and never deeper than ``depth``."""
    stack: list[int] = []
    for token in tokens:
        if token < types:
            stack.append(token)
            if len(stack) > depth:
                return False
        elif not stack or stack.pop() != token - types:
            return False
    return not stack


def count_dyck(length: int, types: int = 2, depth: int = 2) -> int:
    """Number of strings of exactly ``length`` in Dyck-(k, m), by dynamic programming over stack depth."""
    ways = [1] + [0] * depth
    for _ in range(length):
        nxt = [0] * (depth + 1)
        for d, w in enumerate(ways):
            if d < depth:
                nxt[d + 1] += w * types
            if d > 0:
                nxt[d - 1] += w
        ways = nxt
    return ways[0]


@lru_cache(maxsize=None)
def minimal_dfa_live_states(types: int = 2, depth: int = 2) -> int:
    """Live states of the minimal DFA of Dyck-(k, m), by Moore partition refinement of the stack automaton."""
    states: list[tuple[int, ...]] = [()]
    for stack in states:
        if len(stack) < depth:
            states.extend(stack + (t,) for t in range(types) if stack + (t,) not in states)
    dead = len(states)
    index = {s: i for i, s in enumerate(states)}

    def move(state: int, symbol: int) -> int:
        if state == dead:
            return dead
        stack = states[state]
        if symbol < types:
            return index.get(stack + (symbol,), dead)
        return index[stack[:-1]] if stack and stack[-1] == symbol - types else dead

    block = [int(i == 0) for i in range(dead + 1)]
    while True:
        signature = [(block[s], *(block[move(s, a)] for a in range(2 * types))) for s in range(dead + 1)]
        relabel = {sig: i for i, sig in enumerate(dict.fromkeys(signature))}
        refined = [relabel[sig] for sig in signature]
        if len(set(refined)) == len(set(block)):
            break
        block = refined
    return len(set(block)) - 1  # all failing stacks merge into the dead sink


@TASKS.register("dyck", "bounded Dyck-(k,m) membership of a length-N bracket string (Bhattamishra et al. 2024, App. H.1)")
class Dyck(Task):
    """Bracket strings of length exactly N; the label token at the last position says whether it is in Dyck-(k, m).

    Tokens: opens 0..k-1, closes k..2k-1, labels ``false_id`` = 2k and ``true_id`` = 2k+1, padding 2k+2.
    Positives follow App. H.1's depth-capped stack walk (forced close at depth m, forced open when empty,
    otherwise uniform over the k opens and the top's close; the last steps close what is open). Negatives
    corrupt c ~ U[1, N/10] distinct positions of a positive (type swap or open/close flip, 1/2 each) and
    redo the corruption while the string is still in the language. P(positive) = 1/2.
    """

    Options = DyckOptions

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        if length % 2:
            raise ValueError(f"dyck strings have even length; got N={length}")
        self.types, self.depth = self.options.types, self.options.depth
        self.false_id, self.true_id = 2 * self.types, 2 * self.types + 1

    @property
    def vocab_size(self) -> int:
        return 2 * self.types + 3

    @property
    def pad_id(self) -> int:
        return 2 * self.types + 2

    def max_seq_len(self, length: int | None = None) -> int:
        return length or self.length

    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        return self.sample_eval(n, rng, self.length)

    def sample_train_streams(self, n: int, rngs: Sequence[np.random.Generator]) -> list[Batch]:
        return self._sample_streams(n, rngs, self.length) if rngs else []

    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        length = length or self.length
        if length % 2:
            raise ValueError(f"dyck strings have even length; cannot evaluate at {length}")
        return self._sample_streams(n, [rng], length)[0]

    def _sample_streams(self, n: int, rngs: Sequence[np.random.Generator], length: int) -> list[Batch]:
        """A batch from each stream, walked and checked together; each stream draws what it would draw alone."""
        strings = self._positive_streams(n, length, rngs)
        labels = np.stack([rng.random(n) < 0.5 for rng in rngs])
        strings = self._corrupt_streams(strings, ~labels, rngs)
        targets = np.zeros_like(strings)
        targets[:, :, -1] = np.where(labels, self.true_id, self.false_id)
        mask = np.zeros(strings.shape, dtype=bool)
        mask[:, :, -1] = True
        return [Batch.from_numpy(*parts) for parts in zip(strings, targets, mask)]

    def positives(self, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """The depth-capped random stack walk of App. H.1, vectorised over ``n`` strings."""
        return self._positive_streams(n, length, [rng])[0]

    def _positive_streams(self, n: int, length: int, rngs: Sequence[np.random.Generator]) -> np.ndarray:
        """[streams, n, length] walks. Each step draws an open for the empty stack and an open-or-close for the
        others, whatever the state, so the walks' depths come first, from the draws alone, and each close then
        takes the type of the last open at its level."""
        k, m = self.types, self.depth
        width = n * len(rngs)
        from_empty = np.empty((length, width), dtype=np.int64)
        from_nonempty = np.empty((length, width), dtype=np.int64)
        for t in range(length):
            for j, rng in enumerate(rngs):
                from_empty[t, j * n:(j + 1) * n] = rng.integers(0, k, size=n)
                from_nonempty[t, j * n:(j + 1) * n] = rng.integers(0, k + 1, size=n)
        before = np.empty((length, width), dtype=np.int64)
        close = np.empty((length, width), dtype=bool)
        wants_close = from_nonempty == k
        depth = np.zeros(width, dtype=np.int64)
        for t in range(length):
            before[t] = depth
            close[t] = (depth == m) | (depth == length - t) | ((depth > 0) & wants_close[t])
            depth += 1 - 2 * close[t]
        out = np.where(before == 0, from_empty, from_nonempty)
        out[close] = self._matching_opens(out, before, ~close, close)[close] + k
        return np.ascontiguousarray(out.T).reshape(len(rngs), n, length)

    def _matching_opens(self, tokens: np.ndarray, before: np.ndarray, opens: np.ndarray,
                        closes: np.ndarray) -> np.ndarray:
        """[T, n]: at each close, the token of the last open made at the level it closes (-1 where there is none)."""
        steps = np.arange(len(tokens))[:, None]
        columns = np.arange(tokens.shape[1])[None, :]
        matched = np.full(tokens.shape, -1, dtype=np.int64)
        for level in range(self.depth):
            last = np.maximum.accumulate(np.where(opens & (before == level), steps, -1), axis=0)
            at = closes & (before == level + 1) & (last >= 0)
            matched[at] = tokens[np.maximum(last, 0), columns][at]
        return matched

    def corrupt(self, strings: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """App. H.1 negatives: corrupt c ~ U[1, N/10] positions, redone until the string leaves the language."""
        return self._corrupt_streams(strings[None], np.ones((1, len(strings)), dtype=bool), [rng])[0]

    def _corrupt_streams(self, strings: np.ndarray, chosen: np.ndarray,
                         rngs: Sequence[np.random.Generator]) -> np.ndarray:
        """``corrupt`` of each stream's ``chosen`` rows [streams, n], their membership checked together."""
        result = strings.copy()
        todo = [np.flatnonzero(rows) for rows in chosen]
        while any(rows.size for rows in todo):
            for j, rng in enumerate(rngs):
                if todo[j].size:
                    result[j, todo[j]] = self._corrupt_once(strings[j, todo[j]], rng)
            still = self.member(np.concatenate([result[j, rows] for j, rows in enumerate(todo)]))
            todo = [rows[kept] for rows, kept in zip(todo, np.split(still, np.cumsum([r.size for r in todo])[:-1]))]
        return result

    def _corrupt_once(self, strings: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, length = strings.shape
        k = self.types
        counts = rng.integers(1, max(1, length // 10) + 1, size=n)
        order = np.argsort(rng.random((n, length)), axis=1)
        chosen = np.zeros((n, length), dtype=bool)
        np.put_along_axis(chosen, order, np.arange(length)[None, :] < counts[:, None], axis=1)
        is_close, kind = strings >= k, strings % k
        swap = rng.random((n, length)) < 0.5
        other = (kind + rng.integers(1, max(k, 2), size=(n, length))) % k if k > 1 else kind
        swapped = other + k * is_close
        flipped = kind + k * ~is_close
        return np.where(chosen, np.where(swap & (k > 1), swapped, flipped), strings)

    def member(self, strings: np.ndarray) -> np.ndarray:
        """Vectorised Dyck-(k, m) membership: depths within [0, m] ending at 0, and each close of its open's type."""
        k, m = self.types, self.depth
        if strings.shape[1] == 0:
            return np.ones(len(strings), dtype=bool)
        tokens = strings.T
        opens = tokens < k
        after = np.cumsum(np.where(opens, 1, -1), axis=0)
        before = after - np.where(opens, 1, -1)
        inside = (after.min(0) >= 0) & (after.max(0) <= m) & (after[-1] == 0)
        closes = ~opens
        matched = self._matching_opens(tokens, before, opens, closes)
        return inside & ~(closes & (matched != tokens - k)).any(0)

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        string = [t for t in inputs if t < 2 * self.types]
        return [self.true_id if is_dyck(string, self.types, self.depth) else self.false_id]
