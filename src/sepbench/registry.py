"""One small registry: a name maps to a factory and a one-line description."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that is not registered; the message lists the allowed names."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    factory: T
    description: str


class Registry(Generic[T]):
    """Name -> factory, in registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, description: str) -> Callable[[T], T]:
        def decorate(factory: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = Entry(name, factory, description)
            return factory

        return decorate

    def get(self, name: str) -> T:
        return self.entry(name).factory

    def entry(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(
                f"unknown {self.kind} '{name}'; allowed: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries.values())
