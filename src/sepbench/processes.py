"""Whether a process of this host still runs: a zombie (exited, not yet reaped by its parent, as happens where
no init reaps orphans) counts as gone."""
from __future__ import annotations

import os
from pathlib import Path


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (or exists but is not ours to signal); False once it exited, zombie included."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: signal 0 reaching it is all there is to know
    return state not in ("Z", "X")
