"""``sepbench run``: train one model on one task, or show the run the store already holds."""
from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from sepbench.cli.app import BAD_INPUT, bad_input_exits, interrupted, print_whole, warn
from sepbench.cli.options import (
    build_run_config, checkpoints_option, data_cache_option, parse_lengths, store_option, tensorboard_option, use_folders,
)
from sepbench.config import ModelConfig, RunConfig, TaskConfig, TrainConfig


def _default(section: type, field: str) -> str:
    """The help's default for a flag that overrides a config field: the --config file's, else the field's own."""
    return f"[default: the --config file's, else {section.model_fields[field].default}]"


def run(
    task: Optional[str] = typer.Option(None, help=f"task name (see `sepbench tasks`) {_default(TaskConfig, 'name')}"),
    model: Optional[str] = typer.Option(None, help=f"model name (see `sepbench models`) "
                                        f"{_default(ModelConfig, 'name')}"),
    layers: Optional[int] = typer.Option(None, help=f"number of blocks {_default(ModelConfig, 'layers')}"),
    width: Optional[int] = typer.Option(None, help=f"hidden size {_default(ModelConfig, 'width')}"),
    heads: Optional[int] = typer.Option(None, help=f"attention heads {_default(ModelConfig, 'heads')}"),
    length: Optional[int] = typer.Option(None, help=f"task size N {_default(TaskConfig, 'length')}"),
    eval_lengths: Optional[str] = typer.Option(None, help="extra evaluation lengths, comma-separated"),
    steps: Optional[int] = typer.Option(None, help=f"training steps {_default(TrainConfig, 'steps')}"),
    batch_size: Optional[int] = typer.Option(None, help=f"examples per step {_default(TrainConfig, 'batch_size')}"),
    lr: Optional[float] = typer.Option(None, help="peak learning rate [default: the --config file's, else the "
                                       "model's]"),
    seed: Optional[int] = typer.Option(None, help=f"seed for data and initialisation {_default(RunConfig, 'seed')}"),
    device: Optional[str] = typer.Option(None, help="auto (CUDA when present), cpu, cuda, cuda:N or mps "
                                         f"{_default(RunConfig, 'device')}"),
    store: Optional[Path] = store_option(),
    config: Optional[Path] = typer.Option(None, help="YAML file with task/model/train/seed/device sections"),
    assignments: list[str] = typer.Option([], "--set", help="override any field: section.key=value (key=value where "
                                          "one section has the key)"),
    force: bool = typer.Option(False, help="train again even if the store has this config"),
    retrain_stale: bool = typer.Option(False, "--retrain-stale",
                                       help="train again if the stored run came from other code (see docs/sweeps.md)"),
    progress: Optional[bool] = typer.Option(None, help="show a progress bar [default: when on a terminal]"),
    threads: Optional[int] = typer.Option(
        None, min=1, help="intra-op CPU threads (default: $SEPBENCH_THREADS, else 1; a second thread at best halves "
        "a step on an idle machine and made steps 3-15x slower when other jobs held the cores: docs/sweeps.md)"),
    data_cache: Optional[Path] = data_cache_option(),
    checkpoints: Optional[Path] = checkpoints_option(),
    tensorboard: Optional[Path] = tensorboard_option(),
) -> None:
    """Train one model on one task and store the result.

    The run saves a checkpoint every train.checkpoint_every seconds of training and on Ctrl-C; the same command
    resumes it from there."""
    import torch

    from sepbench.store import Store
    from sepbench.sweep.single import run_stored
    from sepbench.train.environment import code_version, default_threads
    from sepbench.train.stopping import stopping_runs_on

    started = time.time()
    with bad_input_exits():
        use_folders(data_cache, checkpoints, tensorboard)
        torch.set_num_threads(default_threads(threads))
        lengths = parse_lengths(eval_lengths, "--eval-lengths") if eval_lengths else None
        flags = {"task.name": task, "model.name": model, "model.layers": layers, "model.width": width,
                 "model.heads": heads, "task.length": length, "task.eval_lengths": lengths, "train.steps": steps,
                 "train.batch_size": batch_size, "train.lr": lr, "seed": seed, "device": device}
        cfg = build_run_config(config, flags, assignments)
        db = Store(store)
        db.check_writable()
    key = cfg.config_hash()
    try:
        with bad_input_exits(), stopping_runs_on(signal.SIGINT):
            ran = run_stored(cfg, db, force=force, retrain_stale=retrain_stale, progress=progress)
    except KeyboardInterrupt:
        interrupted(f"run {key} did not finish, nothing new is stored", db, started)
    except ValueError as problem:
        warn(f"error: {problem}")
        raise typer.Exit(BAD_INPUT) from None
    if ran.replaced:
        warn(f"note: {ran.replaced}; it was trained again and its row replaced")
    if ran.reused:
        warn(f"config {key} is already in {db.path}; showing the stored run (use --force to train again)")
        if ran.stale:
            warn(f"note: that run came from other code ({_code_of(ran.result)}; this is {code_version()}); "
                 "--retrain-stale trains it again")
    _print_result(ran.result, db.path)
    if ran.result.status == "failed":
        warn(f"error: run {key} is stored as failed in {db.path} ({ran.result.error}); --force trains it again"
             if ran.reused else f"error: run {key} failed ({ran.result.error}); stored as failed in {db.path}")
        raise typer.Exit(1)


def _code_of(result) -> str:
    version = result.code_version or "unknown"
    return f"code {version}, sepbench {result.version or '?'}" + (f", commit {result.git_commit[:10]}"
                                                                   if result.git_commit else "")


def _print_result(result, path: Path) -> None:
    cfg = result.config
    table = Table(title=f"{cfg.model.name}-({cfg.model.layers}, {cfg.model.width}) on {cfg.task.name} N={cfg.task.length}")
    table.add_column("field")
    table.add_column("value")
    rows = {
        "status": result.status,
        "error": result.error,
        **{name: f"{value:.4f}" for name, value in result.metrics.items()},
        "steps": result.steps,
        "steps to threshold": result.steps_to_threshold,
        "seconds to threshold": None if result.seconds_to_threshold is None else f"{result.seconds_to_threshold:.1f}",
        "wall seconds": f"{result.wall_seconds:.1f}",
        "parameters": result.parameters,
        "state floats": result.state_floats,
        "device": result.device,
        "config hash": result.config_hash,
        "store": str(path),
    }
    for name, value in rows.items():
        table.add_row(name, "-" if value is None else str(value))
    print_whole(table)
