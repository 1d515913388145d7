import os

import pytest
import torch

torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, torch.get_num_threads()))


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    monkeypatch.setenv("SEPBENCH_STORE", str(path))
    return path
