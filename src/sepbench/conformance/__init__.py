"""The contract a mixer or a task must keep, as checks that the test suite and ``sepbench check-plugin`` share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

Status = Literal["pass", "fail", "absent"]


@dataclass(frozen=True)
class Check:
    """One check's outcome: ``absent`` when the plugin lacks an optional part (a step path, a closed form)."""

    name: str
    status: Status
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"


class Absent(Exception):
    """An optional part the plugin does not provide; the check reports it as absent, not failed."""


def run_check(name: str, body: Callable[[], str]) -> Check:
    """``body()`` as a check: its text on success, an AssertionError's text as a failure, Absent as absent, and
    any other exception as a failure naming it."""
    try:
        return Check(name, "pass", body())
    except Absent as missing:
        return Check(name, "absent", str(missing))
    except AssertionError as wrong:
        return Check(name, "fail", first_line(wrong) or "the check's condition does not hold")
    except Exception as error:  # noqa: BLE001 - whatever a plugin raises is this check's failure
        return Check(name, "fail", f"{type(error).__name__}: {first_line(error)}")


def kind_of(name: str) -> Literal["model", "task"]:
    """Whether ``name`` (a built-in or installed plugin name, or an import path) names a mixer or a task."""
    from sepbench.models import MODELS
    from sepbench.plugins import PluginError, is_import_path, load_import_path
    from sepbench.registry import UnknownNameError
    from sepbench.tasks import TASKS

    registries = (("model", MODELS), ("task", TASKS))
    for kind, registry in registries:
        if name in registry or name in registry.plugins.installed():
            return kind
    if not is_import_path(name):
        raise UnknownNameError(f"unknown plugin '{name}'; give package.module:Class, an installed plugin's name, or a "
                               "name `sepbench models` or `sepbench tasks` lists")
    found = load_import_path(name)
    for kind, registry in registries:
        if isinstance(found, type) and issubclass(found, registry.plugins.base_class()):
            return kind
    raise PluginError(f"plugin '{name}' is neither a sepbench Mixer nor a sepbench Task subclass")


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or ""."""
    return (str(error).strip().splitlines() or [""])[0]
