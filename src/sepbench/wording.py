"""Counts in words, for every message and table: '1 seed', '3 seeds'."""
from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 claim', '3 claims'; ``plural`` for a noun that does not take an s."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
