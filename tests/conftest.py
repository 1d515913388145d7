import os
from pathlib import Path

import pytest
import torch

# Subprocesses of the tests import this checkout's sepbench first, and whatever else the caller's PYTHONPATH holds.
SOURCE = str(Path(__file__).resolve().parents[1] / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE, os.environ.get("PYTHONPATH")) if p)

torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, torch.get_num_threads()))


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    monkeypatch.setenv("SEPBENCH_STORE", str(path))
    return path


@pytest.fixture(autouse=True)
def plain_console(monkeypatch):
    """Tables and messages as plain text whatever the caller's terminal asks (FORCE_COLOR puts escapes in lines)."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
