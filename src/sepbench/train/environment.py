"""Where a run happens: device choice, seeding, and the code version it ran."""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from sepbench.config import ConfigError
from sepbench.wording import counted


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else CPU; an explicit device must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device '{name}' requested but CUDA is not available; allowed here: auto, cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ValueError(f"device '{name}' does not exist: this machine has {counted(count, 'CUDA device')}; allowed here: "
                         f"auto, cpu, cuda, cuda:0 to cuda:{count - 1}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device '{name}' requested but MPS is not available; allowed here: auto, cpu")
    return device


def require_devices(names: Iterable[str]) -> None:
    """Raise ConfigError unless every device in ``names`` exists on this machine (checked before local runs
    start, so that a missing GPU is one message rather than a store of failed runs)."""
    for name in sorted(set(names)):
        try:
            resolve_device(name)
        except (ValueError, RuntimeError) as problem:
            raise ConfigError(str(problem).splitlines()[0]) from None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def data_rng(seed: int, stream: int) -> np.random.Generator:
    """Independent numpy streams per purpose (0 = training data, 1 = evaluation data, ...)."""
    return np.random.default_rng([seed, stream])


@lru_cache(maxsize=1)
def package_version() -> str:
    try:
        return metadata.version("sepbench")
    except metadata.PackageNotFoundError:
        from sepbench._version import __version__

        return __version__


RESULT_CODE = ("config.py", "registry.py", "tasks", "models", "train")
"""The parts of the package a run's result depends on; a change anywhere else (CLI, report, sweeps) keeps
stored runs current."""


SOURCE_SUFFIXES = (".py", ".cpp", ".h")


@lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of the source that decides a run's result (``RESULT_CODE``), the same for a checkout and an install."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for part in RESULT_CODE:
        path = root / part
        for source in sorted(f for f in path.rglob("*") if f.suffix in SOURCE_SUFFIXES) if path.is_dir() else [path]:
            digest.update(source.relative_to(root).as_posix().encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the sepbench checkout, when it runs from one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


THREADS_ENV = "SEPBENCH_THREADS"


def default_threads(requested: int | None = None) -> int:
    """Intra-op threads for a run alone in its process: ``requested``, else $SEPBENCH_THREADS, else 1.

    One thread by default: a second one can at best halve a step on an idle machine, but on a shared machine
    it made steps 3-15x slower (docs/sweeps.md, "Workers and threads"). A bad count is a ConfigError.
    """
    if requested is None:
        text = os.environ.get(THREADS_ENV, "").strip()
        if not text:
            return 1
        try:
            requested = int(text)
        except ValueError:
            raise ConfigError(f"{THREADS_ENV} must be a whole number of threads >= 1, got '{text}'") from None
    if requested < 1:
        raise ConfigError(f"intra-op threads must be >= 1, got {requested}")
    return requested
