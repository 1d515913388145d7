"""One small registry: a name maps to a factory and a one-line description; plugins are found on demand."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

from sepbench.plugins import PluginKind

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that is not registered; the message lists the allowed names."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    factory: T
    description: str


class Registry(Generic[T]):
    """Name -> factory, in registration order. With ``plugins``, a name not registered here is looked up as a
    plugin (an import path or an installed entry point) and kept apart from the registered names."""

    def __init__(self, kind: str, plugins: PluginKind | None = None) -> None:
        self.kind = kind
        self.plugins = plugins
        self._entries: dict[str, Entry[T]] = {}
        self._plugin_entries: dict[str, Entry[T]] = {}

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
        found = self._entries.get(name) or self._plugin_entries.get(name)
        if found is not None:
            return found
        factory = self.plugins.find(name) if self.plugins is not None else None
        if factory is None:
            raise UnknownNameError(f"unknown {self.kind} '{name}'; allowed: {self._allowed()}") from None
        doc = (factory.__doc__ or "").strip().splitlines()
        self._plugin_entries[name] = Entry(name, factory, doc[0] if doc else f"plugin {name}")
        return self._plugin_entries[name]

    def _allowed(self) -> str:
        allowed = ", ".join(self.names())
        if self.plugins is None:
            return allowed
        installed = sorted(set(self.plugins.installed()) - set(self._entries))
        extra = f", installed plugins {', '.join(installed)}" if installed else ""
        return f"{allowed}{extra}, or a plugin's import path package.module:Class"

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries.values())
