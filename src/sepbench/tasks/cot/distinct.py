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
        part = words[:, start : start + block].T.copy()  # a copy (never a view of the rows), summed row by row
        part ^= _SALTS[start : start + len(part), None]
        _mix(part)
        part -= _SALTS_MIXED[start : start + len(part), None]
        out += part.sum(axis=0, dtype=np.uint64)
    return out


class SeenRows:
    """The rows kept so far, in one or more stores (token arrays, one row per kept row), in a hash table.

    An entry packs the high bits of a row's prefix hash (of its first ``PREFIX_BYTES`` bytes) above 1 + the
    row's index across the stores; entries live in an open-addressing table (linear probing, at most half
    full) at the slot the top bits of the hash name. A drawn row whose prefix hash matches no entry and no
    other draw is new, and the rest of it is never hashed; rows whose prefixes do match are told apart by
    hashes of the whole rows, theirs and the stored ones they match. Equal rows are always found; two
    distinct rows are taken for one only if both hashes collide (chance ~2^-64 per pair).
    """

    def __init__(self, capacity: int) -> None:
        """``capacity``: the most rows all stores will hold."""
        self.bits = max(1, int(capacity + 1).bit_length())
        self.index_mask = np.uint64((1 << self.bits) - 1)
        slots = max(10, int(2 * capacity).bit_length())
        if self.bits + slots > 64:
            raise ValueError(f"SeenRows holds at most 2^30 rows, not {capacity}")
        self.shift = np.uint64(64 - slots)
        self.table = np.zeros(1 << slots, np.uint64)
        self.stores: list[np.ndarray] = []
        self.bases: list[int] = []

    def attach(self, tokens: np.ndarray) -> int:
        """Add a store (rows are recorded into it by ``keep``); returns its index, to ``replace`` it later."""
        self.bases.append(self.bases[-1] + len(self.stores[-1]) if self.stores else 0)
        if self.bases[-1] + len(tokens) >= 1 << self.bits:
            raise ValueError(f"SeenRows holds fewer than {1 << self.bits} rows")
        self.stores.append(tokens)
        return len(self.stores) - 1

    def replace(self, store: int, tokens: np.ndarray) -> None:
        """The same rows of a store, now in ``tokens`` (e.g. narrowed)."""
        self.stores[store] = tokens

    def keep(self, rows: np.ndarray, places: np.ndarray) -> np.ndarray:
        """Ascending indices of the first ``len(places)`` rows that equal no stored row and no earlier row
        of ``rows``; they are recorded as the rows at ``places`` of the last store (the caller puts them there)."""
        keys = row_hashes(rows[:, : max(1, PREFIX_BYTES // rows.itemsize)]) & ~self.index_mask
        fresh = np.arange(min(len(rows), len(places)))
        if not self._insert(self._entries(keys[: len(fresh)], places), unless_known=True):
            fresh = self._unmatched_whole(rows, keys)[: len(places)]
            self._insert(self._entries(keys.take(fresh), places))
        return fresh

    def _entries(self, keys: np.ndarray, places: np.ndarray) -> np.ndarray:
        """Table entries of rows with prefix hashes ``keys`` (index bits clear) at the first ``places`` of the last store."""
        return keys | (np.uint64(self.bases[-1] + 1) + places[: len(keys)].astype(np.uint64))

    def _unmatched_whole(self, rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Ascending indices of the first occurrences, by whole-row hash, of rows equal to no stored row
        that shares their prefix hash."""
        whole = row_hashes(rows)
        matched = np.unique(self._matches(keys) & self.index_mask).astype(np.int64) - 1
        unique, first = np.unique(whole, return_index=True)
        new = ~np.isin(unique, row_hashes(self._rows(matched)))
        return np.sort(first[new])

    def _matches(self, keys: np.ndarray) -> np.ndarray:
        """The entries whose prefix hash is one of ``keys``."""
        last = len(self.table) - 1
        at = (keys >> self.shift).astype(np.int64)
        todo = np.arange(len(keys))
        found = [np.zeros(0, np.uint64)]
        while todo.size:
            entry = self.table.take(at)
            hit = ((entry & ~self.index_mask) == keys.take(todo)) & (entry != 0)
            found.append(entry[hit])
            go = entry != 0
            todo, at = todo[go], (at[go] + 1) & last
        return np.concatenate(found)

    def _insert(self, entries: np.ndarray, unless_known: bool = False) -> bool:
        """Each entry into the first free slot from its own (several may race for one: one of them wins it).
        With ``unless_known``, an entry whose prefix hash is already in the table (stored, or another of
        ``entries``) undoes the call: the table is left as it was and False returned."""
        last = len(self.table) - 1
        at = (entries >> self.shift).astype(np.int64)
        keys = entries & ~self.index_mask
        filled = []
        while entries.size:
            current = self.table.take(at)
            free = current == 0
            if unless_known and ((current & ~self.index_mask) == keys)[~free].any():
                if filled:
                    self.table[np.concatenate(filled)] = 0  # these slots were empty, so no older probe ran through them
                return False
            self.table[at[free]] = entries[free]
            placed = free & (self.table.take(at) == entries)
            if unless_known:
                filled.append(at[placed])
            at = np.where(free, at, (at + 1) & last)[~placed]
            entries, keys = entries[~placed], keys[~placed]
        return True

    def _rows(self, index: np.ndarray) -> np.ndarray:
        """The stored rows at global ``index``, zero-padded to the widest store."""
        width = max((tokens.shape[1] for tokens in self.stores), default=1)
        out = np.zeros((len(index), width), self.stores[0].dtype if self.stores else np.uint8)
        store = np.searchsorted(self.bases, index.astype(np.int64), side="right") - 1
        for s, (base, tokens) in enumerate(zip(self.bases, self.stores)):
            here = np.flatnonzero(store == s)
            out[here, : tokens.shape[1]] = tokens.take(index[here].astype(np.int64) - base, axis=0)
        return out
