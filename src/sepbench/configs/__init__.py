"""The configs that ship with sepbench (sweep specs, figure panels, run protocols), found without the source tree.

The folders here are package data; the repository's ``configs/`` links to this folder, so a documented path
``configs/<paper>/<file>.yaml`` names the same file from a checkout and, through :func:`locate`, from any install.
"""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path

ROOT = Path(str(files(__name__)))
PREFIX = "configs"


def path(*parts: str) -> Path:
    """The packaged file or folder ``parts`` (e.g. ``path("demo", "index_lookup_separation.yaml")``)."""
    return ROOT.joinpath(*parts)


def packaged(name: str | Path) -> Path | None:
    """The packaged file a relative ``name`` means (``configs/demo/x.yaml`` or ``demo/x.yaml``), or None."""
    name = Path(name)
    if name.is_absolute() or ".." in name.parts:
        return None
    parts = name.parts[1:] if name.parts[:1] == (PREFIX,) else name.parts
    candidate = path(*parts) if parts else None
    return candidate if candidate is not None and candidate.is_file() else None


def locate(name: str | Path) -> tuple[Path, bool]:
    """``name`` itself when it exists (relative to the working directory), else its packaged file if there is one.

    Returns the path and whether it is the packaged one; a name that is neither comes back unchanged so the
    caller's own "does not exist" message names what was typed.
    """
    name = Path(name)
    if name.exists():
        return name, False
    found = packaged(name)
    return (found, True) if found is not None else (name, False)
