"""Optional dependencies (pyproject's extras): a missing one is named in one line with the command that installs it."""
from __future__ import annotations

from importlib import import_module

from sepbench.config import ConfigError


class MissingExtra(ConfigError):
    """An optional dependency that a command needs is not installed."""


def require(module: str, extra: str, what: str) -> None:
    """Import ``module`` or raise MissingExtra: '<what> needs <module>: pip install 'sepbench[<extra>]''."""
    try:
        import_module(module)
    except ImportError:
        raise MissingExtra(f"{what} needs {module}: pip install 'sepbench[{extra}]'") from None
