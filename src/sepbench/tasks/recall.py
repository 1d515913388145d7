"""Associative recall tasks: multi-query AR (zoology-style MQAR) and nearest neighbour (Bhattamishra et al. 2024, sec. 5)."""
from __future__ import annotations

import sys
from typing import Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sepbench.tasks.base import TASKS, Batch, Task


class MQAROptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key_vocab: int = Field(256, ge=2, le=1_000_000, description="distinct keys; must be >= N")
    value_vocab: int = Field(256, ge=2, le=1_000_000, description="distinct values")


@TASKS.register("mqar", "k1 v1 .. kN vN, then every key again in random order; recall each value (zoology MQAR)")
class MQAR(Task):
    """N key-value pairs with distinct keys, then the N keys permuted, each followed by its value.

    The model predicts the value at every query key (2N scored tokens of 4N). This is the MQAR form of
    Bhattamishra et al. 2024, L158/L729 (the second half is a permutation of the first) in the token layout
    of zoology (keys and values from disjoint vocabularies). Tokens: keys 0..K-1, values K..K+V-1, padding.
    Training and evaluation both use exactly N pairs; any N <= key_vocab can be evaluated.
    """

    Options = MQAROptions

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        self.keys, self.values = self.options.key_vocab, self.options.value_vocab
        self._check_length(length)

    def _check_length(self, length: int) -> None:
        if length > self.keys:
            raise ValueError(f"mqar needs N <= key_vocab ({self.keys}) for distinct keys; got N={length}")

    @property
    def vocab_size(self) -> int:
        return self.keys + self.values + 1

    @property
    def pad_id(self) -> int:
        return self.keys + self.values

    def max_seq_len(self, length: int | None = None) -> int:
        return 4 * (length or self.length)

    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        return self.sample_eval(n, rng, self.length)

    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        pairs = length or self.length
        self._check_length(pairs)
        inputs = np.empty((n, 4 * pairs), dtype=np.int64)
        if self.keys + self.values <= 1 << 16 and sys.byteorder == "little":
            self._write_packed(inputs, pairs, rng)
        else:
            keys = distinct_keys(n, pairs, self.keys, rng)
            values = self.keys + rng.integers(0, self.values, size=(n, pairs))
            order = uniform_orders(n, pairs, rng)
            inputs[:, 0 : 2 * pairs : 2], inputs[:, 1 : 2 * pairs : 2] = keys, values
            inputs[:, 2 * pairs :: 2] = np.take_along_axis(keys, order, 1)
            inputs[:, 2 * pairs + 1 :: 2] = np.take_along_axis(values, order, 1)
        targets = np.zeros_like(inputs)
        targets[:, 2 * pairs :: 2] = inputs[:, 2 * pairs + 1 :: 2]
        mask = np.zeros(inputs.shape, dtype=bool)
        mask[:, 2 * pairs :: 2] = True
        return Batch.from_numpy(inputs, targets, mask)

    def _write_packed(self, inputs: np.ndarray, pairs: int, rng: np.random.Generator) -> None:
        """Rows drawn as the general path draws them (the same distribution, other random calls) when every
        token fits 16 bits: each pair is one 32-bit word (key, value token), and the queries are the pairs
        sorted by 32 random bits above them, so the sort moves keys and values together and both halves are
        written from 16-bit views."""
        n = len(inputs)
        words = distinct_keys(n, pairs, self.keys, rng).astype(np.uint32)
        words |= (self.keys + rng.integers(0, self.values, (n, pairs), dtype=np.uint32)) << 16
        inputs[:, : 2 * pairs] = words.view(np.uint16)
        inputs[:, 2 * pairs :] = shuffled_rows(words, rng).view(np.uint16)

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        tokens = [t for t in inputs if t != self.pad_id]
        half = len(tokens) // 2
        memory = dict(zip(tokens[0:half:2], tokens[1:half:2]))
        return [memory[key] for key in tokens[half::2]]


def distinct_keys(n: int, pairs: int, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """[n, pairs] keys, distinct within each row, uniform over ordered choices from range(vocab).

    Each row keeps the first ``pairs`` distinct values of a few more uniform draws than ``pairs`` (rows
    with too few are redrawn): each new distinct value is uniform over the unseen ones, so the row is a
    uniform ordered choice, at O(pairs) per row instead of a permutation of the vocabulary (still the way
    when ``pairs`` is near ``vocab``).
    """
    draws = pairs + 2 * pairs * pairs // vocab + 8
    if draws > vocab // 2:
        return np.argsort(rng.random((n, vocab)), axis=1)[:, :pairs]
    first_distinct = _first_distinct_packed if vocab <= 1 << 16 and draws < 1 << 16 else _first_distinct
    out = np.empty((n, pairs), np.int64)
    todo = np.arange(n)
    while todo.size:
        found, ok = first_distinct(todo.size, pairs, draws, vocab, rng)
        out[todo[ok]] = found
        todo = todo[~ok]
    return out


def _first_distinct(n: int, pairs: int, draws: int, vocab: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The first ``pairs`` distinct values of ``draws`` uniform draws per row, for the rows that have them
    (and which rows those are)."""
    raw = rng.integers(0, vocab, (n, draws), dtype=np.uint32)
    order = np.argsort(raw, axis=1, kind="stable")  # of equal draws the earliest comes first
    ordered = np.take_along_axis(raw, order, axis=1)
    first = np.ones(raw.shape, bool)
    np.put_along_axis(first, order[:, 1:], ordered[:, 1:] != ordered[:, :-1], axis=1)
    ok = first.sum(axis=1) >= pairs
    first, raw = first[ok], raw[ok]
    keep = first & (np.cumsum(first, axis=1, dtype=np.int32) <= pairs)
    return raw[keep].reshape(-1, pairs), ok


def _first_distinct_packed(n: int, pairs: int, draws: int, vocab: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``_first_distinct`` for 16-bit values and draw counts, by two sorts of 32-bit words (numpy sorts
    these with SIMD): (value, draw) finds each value's first draw, then (first draw, value) puts the
    values found in the order they were first drawn."""
    words = rng.integers(0, vocab, (n, draws), dtype=np.uint32) << 16
    words |= np.arange(draws, dtype=np.uint32)
    words.sort(axis=1)
    value, at = words >> 16, words & 0xFFFF
    repeat = np.zeros(words.shape, bool)
    np.equal(value[:, 1:], value[:, :-1], out=repeat[:, 1:])
    at <<= 16
    at |= value
    at[repeat] = 0xFFFFFFFF
    at.sort(axis=1)
    ok = at[:, pairs - 1] != 0xFFFFFFFF
    return at[ok, :pairs] & 0xFFFF, ok


def uniform_orders(n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """[n, size] permutations of range(size), each uniform and independent."""
    return np.argsort(rng.random((n, size)), axis=1)


def shuffled_rows(words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each row of 32-bit ``words`` in a uniform random order: the words sorted by 32 random bits placed
    above them; a row whose random bits repeat (about size^2 / 2^33 of rows) is drawn again."""
    out = np.empty(words.shape, np.uint64)
    todo = np.arange(len(words))
    while todo.size:
        keyed = rng.integers(0, 1 << 32, words[todo].shape, dtype=np.uint64) << 32
        keyed |= words[todo]
        keyed.sort(axis=1)
        high = keyed >> 32
        tied = (high[:, 1:] == high[:, :-1]).any(axis=1)
        out[todo[~tied]] = keyed[~tied]
        todo = todo[tied]
    return out.astype(np.uint32)


class NearestNeighborOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dims: int = Field(8, ge=1, le=20, description="points are the 2^dims vertices of {-1,+1}^dims")
    queries: Literal["nearest", "recall", "margin"] = Field(
        "nearest", description="nearest: later points uniform; recall: each later point repeats one of the first "
        "N/2; margin: later points uniform among those whose nearest earlier point is one vector (Thm 7's margin "
        "assumption, gamma = 2/dims)"
    )
    distinct: bool = Field(False, description="the first N/2 points are distinct (needs 2^dims >= N/2)")


@TASKS.register("nearest_neighbor", "x1 y1 .. xN yN on the hypercube; for k > N/2, y_k is the label of x_k's nearest earlier point")
class NearestNeighbor(Task):
    """NstNb (Bhattamishra et al. 2024, sec. 5, L154-162; data as in their ICLR 2024 NearestNeighbours task).

    Point i is a token naming a vertex of {-1,+1}^d (bit b of the id is coordinate b), at position 2i-1;
    its label (a token for 0 or 1) follows at 2i. The first N/2 labels are uniform (an exact repeat copies
    the earlier label); every later label is the label of the earlier point with the largest inner product,
    ties going to the first occurrence. The labels of points N/2+1..N are scored where each point is read.
    Tokens: points 0..2^d-1, labels 2^d (0) and 2^d+1 (1), padding.
    """

    Options = NearestNeighborOptions

    def __init__(self, length: int, options: dict | None = None) -> None:
        super().__init__(length, options)
        if length < 2:
            raise ValueError("nearest_neighbor needs N >= 2")
        self.points = 2 ** self.options.dims
        self.label_ids = (self.points, self.points + 1)

    @property
    def vocab_size(self) -> int:
        return self.points + 3

    @property
    def pad_id(self) -> int:
        return self.points + 2

    def max_seq_len(self, length: int | None = None) -> int:
        return 2 * (length or self.length)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """The +-1 coordinates of point ids, shape [..., d]."""
        bits = (ids[..., None] >> np.arange(self.options.dims)) & 1
        return (2 * bits - 1).astype(np.int64)

    def sample_train(self, n: int, rng: np.random.Generator) -> Batch:
        return self.sample_eval(n, rng, self.length)

    def sample_eval(self, n: int, rng: np.random.Generator, length: int | None = None) -> Batch:
        total = length or self.length
        start = total // 2
        ids = rng.integers(0, self.points, size=(n, total))
        if self.options.distinct:
            if start > self.points:
                raise ValueError(f"distinct points need 2^dims >= N/2; got N={total}, dims={self.options.dims}")
            ids[:, :start] = np.argsort(rng.random((n, self.points)), axis=1)[:, :start]
        if self.options.queries == "recall":
            source = rng.integers(0, start, size=(n, total - start))
            ids[:, start:] = np.take_along_axis(ids[:, :start], source, 1)
        elif self.options.queries == "margin":
            self._redraw_until_one_nearest(ids, start, rng)
        labels = rng.integers(0, 2, size=(n, total))
        nearest = self.nearest_earlier(ids)
        for t in range(1, total):
            copies = (nearest[:, t] >= 0) if t >= start else (nearest[:, t] >= 0) & self._exact(ids, nearest, t)
            labels[:, t] = np.where(copies, labels[np.arange(n), np.maximum(nearest[:, t], 0)], labels[:, t])
        inputs = np.empty((n, 2 * total), dtype=np.int64)
        inputs[:, 0::2], inputs[:, 1::2] = ids, self.points + labels
        targets = np.zeros_like(inputs)
        targets[:, 2 * start :: 2] = self.points + labels[:, start:]
        mask = np.zeros(inputs.shape, dtype=bool)
        mask[:, 2 * start :: 2] = True
        return Batch.from_numpy(inputs, targets, mask)

    def _redraw_until_one_nearest(self, ids: np.ndarray, start: int, rng: np.random.Generator) -> None:
        """Each later point, in order, redrawn until every earlier point at its largest inner product is the same
        vector: the nearest neighbour is unique with margin 2/dims (Bhattamishra et al. 2024, L160)."""
        vectors = self.vectors(ids).astype(np.int32)
        for t in range(max(start, 1), ids.shape[1]):
            redraw = np.ones(len(ids), dtype=bool)
            while redraw.any():
                ids[redraw, t] = rng.integers(0, self.points, size=int(redraw.sum()))
                rows = np.flatnonzero(redraw)
                vectors[rows, t] = self.vectors(ids[rows, t])
                products = np.einsum("btd,bd->bt", vectors[rows, :t], vectors[rows, t])
                at_max = products == products.max(1, keepdims=True)
                first = ids[rows, :t][np.arange(len(rows)), at_max.argmax(1)]
                one_vector = ~(at_max & (ids[rows, :t] != first[:, None])).any(1)
                redraw[rows[one_vector]] = False

    @staticmethod
    def _exact(ids: np.ndarray, nearest: np.ndarray, t: int) -> np.ndarray:
        return ids[np.arange(len(ids)), np.maximum(nearest[:, t], 0)] == ids[:, t]

    def nearest_earlier(self, ids: np.ndarray, chunk: int = 256) -> np.ndarray:
        """For every position t, the first earlier position with the largest inner product (-1 at t = 0)."""
        n, total = ids.shape
        out = np.empty((n, total), dtype=np.int64)
        later = np.tril(np.ones((total, total), dtype=bool), -1)
        for lo in range(0, n, chunk):
            x = self.vectors(ids[lo : lo + chunk])
            gram = np.where(later, np.einsum("btd,bsd->bts", x, x), np.iinfo(np.int64).min)
            out[lo : lo + chunk] = gram.argmax(-1)
        out[:, 0] = -1
        return out

    def reference_answer(self, inputs: Sequence[int]) -> list[int]:
        tokens = [t for t in inputs if t != self.pad_id]
        points, labels = tokens[0::2], [t - self.points for t in tokens[1::2]]
        start = len(points) // 2
        coords = [[1 if (p >> b) & 1 else -1 for b in range(self.options.dims)] for p in points]
        answer = []
        for t in range(start, len(points)):
            scores = [sum(a * b for a, b in zip(coords[t], coords[s])) for s in range(t)]
            best = scores.index(max(scores))
            answer.append(self.points + labels[best])
        return answer
