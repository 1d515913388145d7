"""Options several commands share, and the parsing of what they are given."""
from __future__ import annotations

import os
import tempfile
from enum import Enum
from pathlib import Path
from typing import Callable, TypeVar

import typer
from pydantic import ValidationError

from sepbench.cli.app import err
from sepbench.config import (ConfigError, RunConfig, TaskConfig, apply_overrides, describe_validation_error, load_yaml,
                             parse_assignments)

T = TypeVar("T")

LONGEST = next(bound.le for bound in TaskConfig.model_fields["length"].metadata if getattr(bound, "le", None))
"""The largest task size a run takes; the commands that only count (FLOPs, sizes) take lengths and vocabularies
up to it too."""


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def require_folder(path: Path, given: Path | None = None, flag: str = "--out") -> None:
    """Raise ConfigError unless ``path`` is, or can be made, a folder: neither it nor a folder above it is a file,
    and the nearest that exists takes a file. ``given``: what the user typed, when ``path`` is derived from it."""
    blocker = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
    if not blocker.is_dir():
        raise ConfigError(f"{flag} {given or path}: {blocker} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=blocker):
            pass
    except OSError as problem:
        raise ConfigError(f"{flag} {given or path}: {blocker} cannot be written ({problem.strerror})") from None


def store_option(help: str = "SQLite store [default: ./sepbench.db]"):
    return typer.Option(None, envvar="SEPBENCH_STORE", help=help)


def retry_failed_option():
    return typer.Option(False, "--retry-failed", help="train again the runs stored as failed")


def group_size_option():
    return typer.Option(None, "--group-size", min=1, help="runs of one cell (seeds, lrs) trained stacked in one "
                        "worker [default: per device, 1 on CPU; see docs/sweeps.md]")


def data_cache_option():
    return typer.Option(None, "--data-cache", envvar="SEPBENCH_DATA_CACHE",
                        help="folder where fixed CoT data sets (train.data: fixed) are kept for later runs "
                             "[default: none, each run draws its own]")


def checkpoints_option():
    return typer.Option(None, "--checkpoints", envvar="SEPBENCH_CHECKPOINTS",
                        help="folder for the checkpoints of runs in training (every worker must reach it) "
                             "[default: the store path plus .checkpoints]")


def tensorboard_option():
    return typer.Option(None, "--tensorboard", envvar="SEPBENCH_TENSORBOARD",
                        help="folder for TensorBoard scalars of every run as it trains, one sub-folder a run "
                             "(needs sepbench[tensorboard]) [default: none]")


def packaged_config(path: Path) -> Path:
    """``path`` if it exists here, else the packaged config it names (said in one line on stderr)."""
    from sepbench.configs import locate

    found, is_packaged = locate(path)
    if is_packaged:
        err.print(f"{path} is not in {Path.cwd()}; using the packaged {found}", markup=False, highlight=False,
                  soft_wrap=True)
    return found


def build_run_config(config_file: Path | None, flags: dict[str, object], assignments: list[str]) -> RunConfig:
    """Defaults < config file < explicit flags < --set assignments."""
    return RunConfig.build(base_config(config_file, flags, assignments))


def base_config(config_file: Path | None, flags: dict[str, object], assignments: list[str]) -> dict:
    """The config file's data (packaged configs found by name), then the flags given, then --set assignments."""
    data = load_yaml(packaged_config(config_file)) if config_file else {}
    if config_file and not data:
        raise ConfigError(f"config file {config_file} is empty; allowed: a YAML mapping of sections (task, model, "
                          f"train, seed, device), or no --config for every default")
    data = apply_overrides(data, {k: v for k, v in flags.items() if v is not None})
    return apply_overrides(data, parse_assignments(assignments))


def parse_ints(text: str, flag: str, at_least_one: bool = False) -> list[int]:
    parts = text.split(",")
    try:
        if text.strip() and not all(part.strip() for part in parts):
            raise ValueError
        values = [int(part) for part in parts if part.strip()]
    except ValueError:
        raise ConfigError(f"{flag} expects comma-separated integers, got '{text}'") from None
    if at_least_one and not values:
        raise ConfigError(f"{flag} expects at least one integer")
    return values


def parse_lengths(text: str, flag: str, longest: int | None = LONGEST, shortest: int = 1,
                  even: bool = False) -> list[int]:
    """Comma-separated task sizes, at least one, each from ``shortest`` to ``longest`` (None: no bound, for what
    only counts or checks its own memory), and even where the command needs it."""
    sizes = parse_ints(text, flag, at_least_one=True)
    if any(n < shortest or (longest is not None and n > longest) or (even and n % 2) for n in sizes):
        allowed = f"from {shortest} to {longest}" if longest is not None else f">= {shortest}"
        raise ConfigError(f"{flag} expects {'even ' if even else ''}task sizes {allowed}, got '{text}'")
    return sizes


def given_lengths(length: int | None, lengths: str | None, shortest: int = 1, even: bool = False) -> list[int]:
    """``--lengths N1,N2,...`` or ``--length N``, one of them, each >= ``shortest`` and even where asked (no upper
    bound: the constructions check their own memory, and the bounds only count)."""
    if length is not None and lengths:
        raise ConfigError("give --length N or --lengths N1,N2,..., not both")
    if length is not None and (length < shortest or (even and length % 2)):
        raise ConfigError(f"--length expects {'an even' if even else 'a'} task size >= {shortest}, got {length}")
    sizes = parse_lengths(lengths, "--lengths", longest=None, shortest=shortest, even=even) if lengths else \
        [length] if length is not None else []
    if not sizes:
        raise ConfigError("give --length N or --lengths N1,N2,...")
    return sizes


def parse_lrs(text: str) -> list[float]:
    """Comma-separated learning rates, each positive and named once, no entry empty."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--lrs expects comma-separated positive numbers, got '{text}'") from None
    if any(not v > 0 or v == float("inf") for v in values):
        raise ConfigError(f"--lrs expects comma-separated positive numbers, got '{text}'")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ConfigError(f"--lrs names {', '.join(map(str, repeated))} more than once; each rate is tried once")
    return values


def model_call(what: str, call: Callable[[], T]) -> T:
    """Run ``call``, which counts (parameters, FLOPs, state) and so needs its models' shapes, not their memory: on
    the meta device, or where a model cannot be built there (a plugin's), on the CPU. A bad model size becomes a
    ConfigError naming ``what``."""
    import torch

    try:
        try:
            with torch.device("meta"):
                return call()
        except (RuntimeError, NotImplementedError):
            return call()
    except ValidationError as problem:
        raise ConfigError(f"{what}: {describe_validation_error(problem)}") from None
    except ValueError as problem:
        raise ConfigError(f"{what}: {problem}") from None


def use_folders(data_cache: Path | None = None, checkpoints: Path | None = None,
                tensorboard: Path | None = None) -> None:
    """``--data-cache``, ``--checkpoints`` and ``--tensorboard`` for this process and the workers it starts, as
    absolute paths (docs/cot_tasks.md, docs/sweeps.md)."""
    from sepbench.extras import require
    from sepbench.store import CHECKPOINTS_ENV
    from sepbench.train.data_cache import CACHE_ENV
    from sepbench.train.watch import TENSORBOARD_ENV

    _folder_for_workers(data_cache, CACHE_ENV, "--data-cache")
    if tensorboard is not None:
        require("tensorboard", "tensorboard", "--tensorboard")
    _folder_for_workers(checkpoints, CHECKPOINTS_ENV, "--checkpoints")
    _folder_for_workers(tensorboard, TENSORBOARD_ENV, "--tensorboard")


def _folder_for_workers(folder: Path | None, variable: str, flag: str) -> None:
    """Create ``folder`` (given as ``flag``) and name it, absolute, in ``variable``; nothing when it is None."""
    if folder is None:
        return
    folder = folder.expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        raise ConfigError(f"{flag} {folder} cannot be used as a folder ({problem.strerror}); give a "
                          "writable folder") from None
    os.environ[variable] = str(folder.resolve())
