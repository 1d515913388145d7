"""One small registry: a name maps to a factory and a one-line description; plugins are found on demand.

The task and model registries live here, below the config that validates names through them and below the
modules that register into them. A registry imports its built-in entries by module name on its first lookup
(as an installed plugin is imported by its entry point), so neither side imports the other.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, Iterator, TypeVar

from sepbench.plugins import MIXER_PLUGINS, TASK_PLUGINS, PluginKind

if TYPE_CHECKING:
    from sepbench.models.mixers.base import Mixer
    from sepbench.tasks.base import Task

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
    plugin (an import path or an installed entry point) and kept apart from the registered names. ``builtins``
    names the module whose import registers the built-in entries; it is imported on the first lookup."""

    def __init__(self, kind: str, plugins: PluginKind | None = None, builtins: str | None = None) -> None:
        self.kind = kind
        self.plugins = plugins
        self.builtins = builtins
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
        self._load_builtins()
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
        self._load_builtins()
        return list(self._entries)

    def _load_builtins(self) -> None:
        if self.builtins is not None:
            module, self.builtins = self.builtins, None
            importlib.import_module(module)

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        self._load_builtins()
        return iter(self._entries.values())


TASKS: "Registry[type[Task]]" = Registry("task", TASK_PLUGINS, builtins="sepbench.tasks")
MODELS: "Registry[type[Mixer]]" = Registry("model", MIXER_PLUGINS, builtins="sepbench.models.mixers")
