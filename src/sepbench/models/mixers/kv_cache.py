"""A key-value cache preallocated to the model's maximum length and written in place.

Appending a token writes one column instead of copying the whole cache (``torch.cat``), so a decode step costs
the attention over the cached keys and nothing more. Keys are stored transposed, [B*H, d, capacity], so the
scores of one query are a row-major matrix product.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


class KVStore:
    """The buffers behind successive cache states; ``length`` is how many positions the newest state holds."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int = 0) -> None:
        self.keys, self.values, self.length = keys, values, length

    @classmethod
    def empty(cls, rows: int, dim: int, capacity: int, device: torch.device, dtype: torch.dtype) -> KVStore:
        keys = torch.empty(rows, dim, capacity, device=device, dtype=dtype)
        return cls(keys, torch.empty(rows, capacity, dim, device=device, dtype=dtype))

    @property
    def capacity(self) -> int:
        return self.values.shape[1]


@dataclass
class KVCache:
    """Keys [B*H, d, t] and values [B*H, t, d] of the t tokens seen so far: views into ``store``."""

    keys: torch.Tensor
    values: torch.Tensor
    store: KVStore

    @property
    def length(self) -> int:
        return self.values.shape[1]


def empty_cache(rows: int, dim: int, capacity: int, device: torch.device, dtype: torch.dtype) -> KVCache:
    """A cache with room for ``capacity`` positions before it has to grow."""
    store = KVStore.empty(rows, dim, max(1, capacity), device, dtype)
    return KVCache(store.keys[:, :, :0], store.values[:, :0], store)


def append(cache: KVCache, key: torch.Tensor, value: torch.Tensor) -> KVCache:
    """The cache with one more position (``key``, ``value``: [B*H, d]), written in place.

    A state that is not the newest of its store (stepped before, e.g. a snapshot being branched) gets a
    copy first, so no other state's positions are overwritten; a full store doubles its capacity. Where
    autograd records the step, the cache is concatenated instead, since in-place writes would invalidate
    the positions earlier steps saved for the backward pass.
    """
    length, store = cache.length, cache.store
    if torch.is_grad_enabled() and (key.requires_grad or value.requires_grad or cache.values.requires_grad):
        keys = torch.cat([cache.keys, key.unsqueeze(-1)], dim=2)
        values = torch.cat([cache.values, value.unsqueeze(1)], dim=1)
        return KVCache(keys, values, KVStore(keys, values, length + 1))
    if store.length != length or length == store.capacity:
        capacity = store.capacity * (2 if length == store.capacity else 1)
        store = KVStore.empty(cache.values.shape[0], cache.values.shape[2], capacity, cache.values.device,
                              cache.values.dtype)
        store.keys[:, :, :length] = cache.keys
        store.values[:, :length] = cache.values
    store.keys[:, :, length] = key
    store.values[:, length] = value
    store.length = length + 1
    return KVCache(store.keys[:, :, : length + 1], store.values[:, : length + 1], store)


def attend(query: torch.Tensor, cache: KVCache, scale: float) -> torch.Tensor:
    """softmax(scale q K^T) V over every cached position; query [B*H, d] -> [B*H, d]."""
    scores = torch.bmm(query.unsqueeze(1) * scale, cache.keys)
    return torch.bmm(torch.softmax(scores, dim=-1), cache.values).squeeze(1)
