"""Deduplicating a drawn data set row by row: 64-bit row hashes and an index of the rows kept so far."""
from __future__ import annotations

import numpy as np

PREFIX_BYTES = 64
"""Rows are first told apart by a hash of this many leading bytes; only rows it cannot tell apart are hashed whole."""

_SALTS = np.random.default_rng(12345).integers(0, 2**63, size=4096, dtype=np.uint64) * np.uint64(2)


def _mix(words: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place: a bijection of uint64 that spreads every input bit."""
    words ^= words >> np.uint64(33)
    words *= np.uint64(0xFF51AFD7ED558CCD)
    words ^= words >> np.uint64(33)
    words *= np.uint64(0xC4CEB9FE1A85EC53)
    words ^= words >> np.uint64(33)
    return words


_SALTS_MIXED = _mix(_SALTS.copy())


def row_hashes(rows: np.ndarray, block: int = 32) -> np.ndarray:
    """A 64-bit hash per row: its bytes in 8-byte words, each salted by its place and mixed, summed (mod 2^64)
    less the mixed salts, so all-zero words (trailing PAD) add nothing; equal rows (of one dtype) collide,
    whatever their padding, and distinct ones almost never."""
    rows = np.ascontiguousarray(rows)
    n, size = rows.shape[0], rows.shape[1] * rows.itemsize
    data = rows.view(np.uint8).reshape(n, size)
    if size % 8:
        data = np.zeros((n, size + 8 - size % 8), np.uint8)
        data[:, :size] = rows.view(np.uint8).reshape(n, size)
    words = data.view(np.uint64)
    out = np.zeros(n, np.uint64)
    for start in range(0, words.shape[1], block):
        part = words[:, start : start + block]
        part = _mix(part ^ _SALTS[start : start + part.shape[1]])
        part -= _SALTS_MIXED[start : start + part.shape[1]]
        out += part.sum(axis=1, dtype=np.uint64)
    return out


class SeenRows:
    """The rows kept so far, in one or more stores (token arrays, one row per kept row), indexed for lookup.

    Each entry packs the high bits of a row's prefix hash (``PREFIX_BYTES``) above the row's index across
    the stores; entries are sorted. A drawn row whose prefix hash matches no entry and no other draw is new,
    and the rest of it is never hashed; rows whose prefixes do match are told apart by hashes of the whole
    rows, theirs and the stored ones they match. Equal rows are always found; two distinct rows are taken
    for one only if both hashes collide (chance ~2^-64 per pair).
    """

    def __init__(self, capacity: int) -> None:
        """``capacity``: the most rows all stores will hold."""
        self.bits = max(1, int(capacity).bit_length())
        self.index_mask = np.uint64((1 << self.bits) - 1)
        self.entries = np.zeros(0, np.uint64)
        self.stores: list[np.ndarray] = []
        self.bases: list[int] = []

    def attach(self, tokens: np.ndarray) -> int:
        """Add a store (rows are recorded into it by ``keep``); returns its index, to ``replace`` it later."""
        self.bases.append(self.bases[-1] + len(self.stores[-1]) if self.stores else 0)
        if self.bases[-1] + len(tokens) > 1 << self.bits:
            raise ValueError(f"SeenRows holds at most {1 << self.bits} rows")
        self.stores.append(tokens)
        return len(self.stores) - 1

    def replace(self, store: int, tokens: np.ndarray) -> None:
        """The same rows of a store, now in ``tokens`` (e.g. narrowed)."""
        self.stores[store] = tokens

    def keep(self, rows: np.ndarray, places: np.ndarray) -> np.ndarray:
        """Ascending indices of the first ``len(places)`` rows that equal no stored row and no earlier row
        of ``rows``; they are recorded as the rows at ``places`` of the last store (the caller puts them there)."""
        keys = row_hashes(rows[:, : max(1, PREFIX_BYTES // rows.itemsize)]) & ~self.index_mask
        order = np.argsort(keys)
        ordered = keys.take(order)
        at = np.searchsorted(self.entries, ordered)
        clash = bool((ordered[1:] == ordered[:-1]).any())
        if len(self.entries) and not clash:
            clash = bool(((self.entries.take(np.minimum(at, len(self.entries) - 1)) & ~self.index_mask) == ordered).any())
        base = np.uint64(self.bases[-1])
        if not clash:
            fresh = np.arange(min(len(rows), len(places)))
            kept = order < len(fresh)
            order, ordered, at = order[kept], ordered[kept], at[kept]
            self.entries = np.insert(self.entries, at, ordered | (base + places.take(order).astype(np.uint64)))
            return fresh
        fresh = self._unmatched_whole(rows, keys)[: len(places)]
        added = np.sort(keys.take(fresh) | (base + places[: len(fresh)].astype(np.uint64)))
        self.entries = np.insert(self.entries, np.searchsorted(self.entries, added), added)
        return fresh

    def _unmatched_whole(self, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Ascending indices of the first occurrences, by whole-row hash, of rows equal to no stored row
        that shares their prefix hash."""
        whole = row_hashes(rows)
        low = np.searchsorted(self.entries, keys)
        high = np.searchsorted(self.entries, keys | self.index_mask, side="right")
        matched = np.unique(self.entries.take(_ranges(low, high)) & self.index_mask)
        unique, first = np.unique(whole, return_index=True)
        new = ~np.isin(unique, row_hashes(self._rows(matched)))
        return np.sort(first[new])

    def _rows(self, index: np.ndarray) -> np.ndarray:
        """The stored rows at global ``index``, zero-padded to the widest store."""
        width = max((tokens.shape[1] for tokens in self.stores), default=1)
        out = np.zeros((len(index), width), self.stores[0].dtype if self.stores else np.uint8)
        store = np.searchsorted(self.bases, index.astype(np.int64), side="right") - 1
        for s, (base, tokens) in enumerate(zip(self.bases, self.stores)):
            here = np.flatnonzero(store == s)
            out[here, : tokens.shape[1]] = tokens.take(index[here].astype(np.int64) - base, axis=0)
        return out


def _ranges(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(low[i], high[i])`` over i."""
    counts = high - low
    offsets = np.cumsum(counts) - counts
    return np.repeat(low - offsets, counts) + np.arange(int(counts.sum()))
