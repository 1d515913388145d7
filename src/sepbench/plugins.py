"""Mixers and tasks from outside sepbench: an entry point of an installed distribution, or an import path.

A name of the form ``package.module:Object`` is imported; any other name not built in is looked up in the entry
point group of its kind (``sepbench.mixers``, ``sepbench.tasks``). This module imports nothing of sepbench at
load time (the base class is imported when a plugin is checked), so every layer may use it.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points


class PluginError(ValueError):
    """A plugin that cannot be used; the message is one line naming the plugin and the reason."""


@dataclass(frozen=True)
class PluginKind:
    """Where plugins of one kind are found and what they must be."""

    kind: str
    """``model`` or ``task``: the registry's word for its names"""
    group: str
    """the entry point group that names installed plugins"""
    base: str
    """``module:Class`` of the class a plugin must subclass (imported only when a plugin is checked)"""

    def installed(self) -> dict[str, EntryPoint]:
        """The entry points of this kind's group, by name, in every installed distribution."""
        return {point.name: point for point in entry_points(group=self.group)}

    def find(self, name: str) -> type | None:
        """The plugin ``name`` names (import path or entry point), checked; None when it names no plugin."""
        if is_import_path(name):
            return self.check(name, load_import_path(name, self.kind))
        point = self.installed().get(name)
        if point is None:
            return None
        return self.check(name, _imported(name, self.kind, point.load, f"entry point {point.value}"))

    def base_class(self) -> type:
        module_name, _, attribute = self.base.partition(":")
        return getattr(importlib.import_module(module_name), attribute)

    def check(self, name: str, found: object) -> type:
        """``found`` when it is a concrete subclass of the base class; else a PluginError naming ``name``."""
        base = self.base_class()
        if not (isinstance(found, type) and issubclass(found, base)):
            what = f"the class {found.__name__}" if isinstance(found, type) else f"not a class (a {type(found).__name__})"
            raise PluginError(f"{self.kind} plugin '{name}' is {what}, not a subclass of {base.__module__}."
                              f"{base.__name__}")
        if inspect.isabstract(found):
            missing = ", ".join(sorted(getattr(found, "__abstractmethods__", ())))
            raise PluginError(f"{self.kind} plugin '{name}' is abstract: it does not implement {missing}")
        return found


def is_import_path(name: str) -> bool:
    """Whether ``name`` reads as ``package.module:Object``."""
    return ":" in name


def load_import_path(path: str, kind: str = "") -> object:
    """The object ``package.module:Object`` (``Object`` may be dotted) names; a PluginError when it cannot be had."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise PluginError(f"{_plugin(kind, path)} is not an import path; write package.module:Object")
    module = _imported(path, kind, lambda: importlib.import_module(module_name), f"module {module_name}")
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise PluginError(f"{_plugin(kind, path)}: module {module_name} has no '{attribute}'")
        found = getattr(found, part)
    return found


def _plugin(kind: str, name: str) -> str:
    """``model plugin 'x'``, or ``plugin 'x'`` where the kind is not yet known."""
    return f"{kind} plugin '{name}'" if kind else f"plugin '{name}'"


def _imported(name: str, kind: str, load, what: str) -> object:
    """``load()``, with any exception it raises as a one-line PluginError naming the plugin."""
    try:
        return load()
    except (Exception, SystemExit) as error:  # noqa: BLE001 - whatever a plugin's import raises is reported
        reason = (str(error).strip().splitlines() or [""])[0]
        raise PluginError(f"{_plugin(kind, name)}: importing {what} failed: {type(error).__name__}: {reason}") from None


MIXER_PLUGINS = PluginKind("model", "sepbench.mixers", "sepbench.models.mixers.base:Mixer")
TASK_PLUGINS = PluginKind("task", "sepbench.tasks", "sepbench.tasks.base:Task")
