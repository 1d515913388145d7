"""Files written whole: a kill or a full disk leaves the old file or the new one, never part of one."""
from __future__ import annotations

import os
from pathlib import Path


class NotARegularFile(ValueError):
    """A path to write whole is a folder, a device, a pipe or a socket."""


def whole_target(path: Path) -> Path:
    """The file a whole write to ``path`` replaces: the one a link there points to (a rename over the link would
    replace the link). A folder, device, pipe or socket is refused: a rename would replace it, not write to it."""
    try:
        target = path.resolve(strict=False) if path.is_symlink() else path
    except (OSError, RuntimeError) as problem:  # a loop of links
        raise NotARegularFile(f"{path} is a link that leads to no file ({problem})") from None
    if target.exists() and not target.is_file():
        kind = "a folder" if target.is_dir() else "not a regular file (a device, pipe or socket)"
        raise NotARegularFile(f"{path} is {kind}; write to a regular file or a new path")
    return target


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (``whole_target``) through a hidden partial file beside it, synced, then renamed
    over it; a failed write removes the partial file and leaves ``path`` as it was."""
    path = whole_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
