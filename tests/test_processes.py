"""A process that exited but was not reaped (a zombie) no longer counts as running."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sepbench.processes import process_alive


def test_a_running_process_is_alive_and_an_unreaped_one_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_alive(child.pid) and process_alive(os.getpid())
    finally:
        child.kill()
    if Path(f"/proc/{child.pid}/stat").exists():  # killed, not yet waited for: a zombie
        deadline = time.monotonic() + 10
        while "Z" not in Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not process_alive(child.pid)
    child.wait()
    assert not process_alive(child.pid)


def _zombie() -> subprocess.Popen:
    """A child that exited and is not waited for yet."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return child


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_loading_removes_the_partial_file_of_an_unreaped_writer_and_keeps_a_live_one(tmp_path):
    import socket

    from sepbench.config import RunConfig
    from sepbench.train.checkpoint import SOLO, Checkpoint

    cfg = RunConfig.build({"task": {"name": "index_lookup", "length": 12}, "model": {"name": "lstm", "width": 8},
                           "train": {"steps": 10}, "device": "cpu"})
    saved = Checkpoint(tmp_path, cfg, SOLO)
    zombie = _zombie()
    try:
        dead = tmp_path / f".{saved.path.name}.{socket.gethostname()}.{zombie.pid}.partial"
        live = tmp_path / f".{saved.path.name}.{socket.gethostname()}.{os.getpid()}.partial"
        dead.write_bytes(b"half a checkpoint")
        live.write_bytes(b"being written")
        assert saved.load() is None  # no checkpoint itself
        assert not dead.exists() and live.exists()
    finally:
        zombie.wait()
