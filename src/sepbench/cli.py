"""The ``sepbench`` command line: each command parses, calls the library, prints."""
from __future__ import annotations

import gc
import signal
import sys
import time
from contextlib import contextmanager, nullcontext
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, Iterator, NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sepbench.config import (
    ConfigError, RunConfig, apply_overrides, describe_validation_error, load_yaml, parse_assignments,
)
from sepbench.plugins import PluginError
from sepbench.registry import UnknownNameError
from sepbench.store import StoreError

if TYPE_CHECKING:
    from sepbench.store import Store
    from sepbench.sweep.pool import WorkerPool
    from sepbench.theory.softmax_vs_linear.learned import LearnedConfig

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # rich markup would swallow the "[default: ...]" of hand-written help
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Measure how large each sequence model must be to solve a task as the task grows.",
)
out = Console()
err = Console(stderr=True)


def _print_version(requested: bool) -> None:
    if requested:
        from sepbench import __version__

        out.print(f"sepbench {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    pass


BAD_INPUT = 2

def packaged_config(path: Path) -> Path:
    """``path`` if it exists here, else the packaged config it names (said in one line on stderr)."""
    from sepbench.configs import locate

    found, is_packaged = locate(path)
    if is_packaged:
        err.print(f"{path} is not in {Path.cwd()}; using the packaged {found}", markup=False, highlight=False,
                  soft_wrap=True)
    return found

def _data_cache_option():
    return typer.Option(None, "--data-cache", envvar="SEPBENCH_DATA_CACHE",
                        help="folder where fixed CoT data sets (train.data: fixed) are kept for later runs "
                             "[default: none, each run draws its own]")

def _checkpoints_option():
    return typer.Option(None, "--checkpoints", envvar="SEPBENCH_CHECKPOINTS",
                        help="folder for the checkpoints of runs in training (every worker must reach it) "
                             "[default: the store path plus .checkpoints]")


def _tensorboard_option():
    return typer.Option(None, "--tensorboard", envvar="SEPBENCH_TENSORBOARD",
                        help="folder for TensorBoard scalars of every run as it trains, one sub-folder a run "
                             "(needs sepbench[tensorboard]) [default: none]")

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


@contextmanager
def bad_input_exits() -> Iterator[None]:
    """Turn a configuration problem into one line on stderr and exit code 2."""
    try:
        yield
    except (ConfigError, UnknownNameError, PluginError, FileNotFoundError, StoreError) as problem:
        err.print(f"error: {problem}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(BAD_INPUT) from None


class OutputFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command("tasks")
def list_tasks() -> None:
    """List the registered tasks."""
    from sepbench.tasks import TASKS

    table = Table("task", "description")
    for entry in TASKS:
        table.add_row(entry.name, entry.description)
    _add_installed_plugins(table, TASKS)
    out.print(table)


def _add_installed_plugins(table: Table, registry) -> None:
    """One row per installed plugin (entry point) of ``registry``'s kind; plugins are not imported to list them."""
    for name, point in sorted(registry.plugins.installed().items()):
        if name not in registry:
            table.add_row(name, f"plugin {point.value}" + (f" ({point.dist.name})" if point.dist else ""))


@app.command("models")
def list_models(
    details: bool = typer.Option(False, "--details", help="add parameters, state size and FLOPs at the given size"),
    width: int = typer.Option(64, min=1, help="hidden size for --details"),
    layers: int = typer.Option(2, min=1, help="number of blocks for --details"),
    heads: int = typer.Option(4, min=1, help="attention heads for --details"),
    length: int = typer.Option(512, min=1, help="sequence length for --details"),
    vocab: int = typer.Option(32, min=1, help="vocabulary size for --details"),
) -> None:
    """List the registered architectures (with --details: what each costs at one size)."""
    from sepbench.models import MODELS

    if not details:
        table = Table("model", "description")
        for entry in MODELS:
            table.add_row(entry.name, entry.description)
        _add_installed_plugins(table, MODELS)
        out.print(table)
        return
    from sepbench.models.accounting import model_cost

    title = f"width {width}, {layers} layers, {heads} heads, length {length}, vocabulary {vocab}"
    table = Table(title=title)
    table.add_column("model", no_wrap=True)
    for column in ("parameters", "state", "FLOPs", "Table-2 FLOPs"):
        table.add_column(column, justify="right", no_wrap=True)
    with bad_input_exits():
        for entry in MODELS:
            try:
                cost = model_cost(entry.name, width, layers, length, vocab_size=vocab, heads=heads)
            except ValidationError as problem:
                raise ConfigError(f"--details for {entry.name}: {describe_validation_error(problem)}") from None
            except ValueError as problem:
                raise ConfigError(f"--details for {entry.name}: {problem}") from None
            table.add_row(entry.name, f"{cost.parameters:,}", f"{cost.state_floats:,}", f"{cost.flops:.4g}",
                          f"{cost.paper_flops:.4g}")
    out.print(table)
    out.print("state: floats per example after `length` tokens; FLOPs: matrix products of one forward pass "
              "(2 per multiply-add); Table-2 FLOPs: Yang et al.'s convention, (L+2)(24 layers d^2 + 1.4e4)")


@app.command("flops")
def flops(
    model: str = typer.Option(..., help="model name (see `sepbench models`)"),
    width: int = typer.Option(..., min=1, help="hidden size d"),
    layers: int = typer.Option(3, min=1, help="number of blocks"),
    length: int = typer.Option(..., min=1, help="CoT length L; the sequence holds L + 2 tokens (Table 2's convention)"),
    heads: int = typer.Option(4, min=1, help="attention heads"),
    vocab: int = typer.Option(21, min=1, help="vocabulary size (21: Arithmetic)"),
) -> None:
    """Forward FLOPs of one CoT sequence: Yang et al.'s Table 2 convention and the true count."""
    from sepbench.models.flops_table import sequence_flops

    with bad_input_exits():
        cost = _model_call(model, lambda: sequence_flops(model, width, layers, length, heads=heads, vocab_size=vocab))
    out.print(f"{model}, width {width}, {layers} layers, CoT length {length} ({cost.tokens} tokens)")
    out.print(f"paper convention (Table 2): {cost.paper / 1e9:.4f} GFLOPs")
    out.print(f"true count:                 {cost.true / 1e9:.4f} GFLOPs")


@app.command("table2")
def table2(
    dims: list[str] = typer.Option([], "--dims", help="MODEL=d1,d2,...: smallest solving width per length "
                                   "[default: the widths Table 2 implies for the three Transformers]"),
    lengths: str = typer.Option("87,221,355,505", help="CoT lengths, comma-separated"),
    layers: int = typer.Option(3, min=1, help="number of blocks"),
) -> None:
    """Yang et al. 2024 Table 2: minimum GFLOPs to reach 90%, from the smallest solving widths."""
    from sepbench.models.flops_table import PAPER_MIN_WIDTHS, table2 as build_table

    with bad_input_exits():
        columns = tuple(_parse_lengths(lengths))
        widths = dict(_parse_dims(item) for item in dims) if dims else dict(PAPER_MIN_WIDTHS)
        rows = _model_call("--dims", lambda: build_table(widths, columns, layers))
    for convention in ("paper", "true"):
        title = "GFLOPs, Table 2 convention" if convention == "paper" else "GFLOPs, true count (attention included)"
        table = Table("model", *(f"L={n}" for n in columns), title=title)
        for model, cells in rows.items():
            table.add_row(model, *(f"{getattr(c, convention) / 1e9:.3f}" for c in cells))
        out.print(table)


def _parse_dims(item: str) -> tuple[str, tuple[int, ...]]:
    model, sep, values = item.partition("=")
    try:
        if not sep:
            raise ValueError
        return model.strip(), tuple(int(v) for v in values.split(","))
    except ValueError:
        raise ConfigError(f"--dims expects MODEL=d1,d2,... (e.g. transformer=64,128,128,128), got '{item}'") from None


def _model_call(what: str, call):
    """Run ``call``; a bad model size becomes a ConfigError naming ``what``."""
    try:
        return call()
    except ValidationError as problem:
        raise ConfigError(f"{what}: {describe_validation_error(problem)}") from None
    except ValueError as problem:
        raise ConfigError(f"{what}: {problem}") from None


def build_run_config(config_file: Path | None, flags: dict[str, object], assignments: list[str]) -> RunConfig:
    """Defaults < config file < explicit flags < --set assignments."""
    data = load_yaml(packaged_config(config_file)) if config_file else {}
    data = apply_overrides(data, {k: v for k, v in flags.items() if v is not None})
    data = apply_overrides(data, parse_assignments(assignments))
    return RunConfig.build(data)


@app.command("run")
def run(
    task: Optional[str] = typer.Option(None, help="task name (see `sepbench tasks`)"),
    model: Optional[str] = typer.Option(None, help="model name (see `sepbench models`)"),
    layers: Optional[int] = typer.Option(None, help="number of blocks"),
    width: Optional[int] = typer.Option(None, help="hidden size"),
    heads: Optional[int] = typer.Option(None, help="attention heads"),
    length: Optional[int] = typer.Option(None, help="task size N"),
    eval_lengths: Optional[str] = typer.Option(None, help="extra evaluation lengths, comma-separated"),
    steps: Optional[int] = typer.Option(None, help="training steps"),
    batch_size: Optional[int] = typer.Option(None, help="examples per step"),
    lr: Optional[float] = typer.Option(None, help="peak learning rate (default: the model's)"),
    seed: Optional[int] = typer.Option(None, help="seed for data and initialisation"),
    device: Optional[str] = typer.Option(None, help="auto (CUDA when present), cpu, cuda, cuda:N"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    config: Optional[Path] = typer.Option(None, help="YAML file with task/model/train/seed/device sections"),
    assignments: list[str] = typer.Option([], "--set", help="override any field: section.key=value"),
    force: bool = typer.Option(False, help="train again even if the store has this config"),
    retrain_stale: bool = typer.Option(False, "--retrain-stale",
                                       help="train again if the stored run came from other code (see docs/sweeps.md)"),
    progress: Optional[bool] = typer.Option(None, help="show a progress bar [default: when on a terminal]"),
    threads: Optional[int] = typer.Option(
        None, min=1, help="intra-op CPU threads (default: $SEPBENCH_THREADS, else 1; a second thread at best halves "
        "a step on an idle machine and made steps 3-15x slower when other jobs held the cores: docs/sweeps.md)"),
    data_cache: Optional[Path] = _data_cache_option(),
    checkpoints: Optional[Path] = _checkpoints_option(),
    tensorboard: Optional[Path] = _tensorboard_option(),
) -> None:
    """Train one model on one task and store the result.

    The run saves a checkpoint every train.checkpoint_every seconds of training and on Ctrl-C; the same command
    resumes it from there."""
    import torch

    from sepbench.store import Store
    from sepbench.sweep.executors import failed_result
    from sepbench.train import train
    from sepbench.train.stopping import stopping_runs_on
    from sepbench.train.environment import code_version, resolve_device
    from sepbench.train.keeping import Keeping
    from sepbench.train.memory import MemoryRefused, check_memory, is_out_of_memory

    started = time.time()
    with bad_input_exits():
        _use_data_cache(data_cache)
        _use_watch_folders(checkpoints, tensorboard)
        torch.set_num_threads(_threads(threads))
        lengths = _parse_lengths(eval_lengths) if eval_lengths else None
        flags = {"task.name": task, "model.name": model, "model.layers": layers, "model.width": width,
                 "model.heads": heads, "task.length": length, "task.eval_lengths": lengths, "train.steps": steps,
                 "train.batch_size": batch_size, "train.lr": lr, "seed": seed, "device": device}
        cfg = build_run_config(config, flags, assignments)
        db = Store(store)
        db.check_writable()
        key = cfg.config_hash()
        cached = None if force else db.get(key)
        stale = cached is not None and cached.code_version != code_version()
        if cached is None or (stale and retrain_stale):
            try:
                check_memory(cfg, resolve_device(cfg.device))
            except (MemoryRefused, ValueError) as problem:
                raise ConfigError(str(problem)) from None
    if cached is not None and not (stale and retrain_stale):
        err.print(f"config {key} is already in {db.path}; showing the stored run (use --force to train again)",
                  markup=False, highlight=False, soft_wrap=True)
        if stale:
            err.print(f"note: that run came from other code ({_code_of(cached)}; this is {code_version()}); "
                      "--retrain-stale trains it again", markup=False, highlight=False, soft_wrap=True)
        _print_result(cached, db.path)
        return
    try:
        with stopping_runs_on(signal.SIGINT):
            result = train(cfg, progress=progress, keeping=Keeping.beside(db))
    except KeyboardInterrupt:
        _interrupted(f"run {key} did not finish, nothing new is stored", db, started)
    except ValueError as problem:
        err.print(f"error: {problem}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(BAD_INPUT) from None
    except Exception as problem:  # noqa: BLE001 - an allocation failure is this run's result, stored as failed
        if not is_out_of_memory(problem):
            raise
        result = failed_result(cfg, problem, "out of memory")
    db.put(result)
    _print_result(result, db.path)
    if result.status == "failed":
        err.print(f"error: run {key} failed ({result.error}); stored as failed in {db.path}",
                  markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _use_data_cache(folder: Path | None) -> None:
    """Cache fixed CoT data sets in ``folder`` for this process and the workers it starts (docs/cot_tasks.md)."""
    from sepbench.train.data_cache import CACHE_ENV

    _folder_for_workers(folder, CACHE_ENV, "--data-cache")


def _folder_for_workers(folder: Path | None, variable: str, flag: str) -> None:
    """Create ``folder`` (given as ``flag``) and name it, absolute, in ``variable`` for this process and the
    workers it starts; nothing when ``folder`` is None."""
    import os

    if folder is None:
        return
    folder = folder.expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        raise ConfigError(f"{flag} {folder} cannot be used as a folder ({problem.strerror}); give a "
                          "writable folder") from None
    os.environ[variable] = str(folder.resolve())


def _code_of(result) -> str:
    version = result.code_version or "unknown"
    return f"code {version}, sepbench {result.version or '?'}" + (f", commit {result.git_commit[:10]}"
                                                                   if result.git_commit else "")


def _parse_lengths(text: str, flag: str = "--eval-lengths") -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{flag} expects comma-separated integers, got '{text}'") from None


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
    out.print(table)


class ResultsFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


RUN_VIEW = {"config_hash": "config hash", "task": "task", "model": "model", "length": "N", "layers": "layers",
            "width": "width", "lr": "lr", "seed": "seed", "status": "status"}
CELL_VIEW = {"cell": "cell", "task": "task", "model": "model", "length": "N", "layers": "layers", "width": "width",
             "lr": "lr", "runs": "runs", "seeds": "seeds"}


@app.command("results")
def results(
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    output: ResultsFormat = typer.Option(ResultsFormat.table, "--format", help="table, csv, json or parquet"),
    out_file: Optional[Path] = typer.Option(None, "--out", help="write csv, json or parquet to this file "
                                            "[default: stdout; parquet needs it]"),
    task: Optional[str] = typer.Option(None, help="only this task"),
    model: Optional[str] = typer.Option(None, help="only this model"),
    by_seed: bool = typer.Option(False, "--by-seed", help="one row per run instead of one per cell over seeds"),
    threshold: float = typer.Option(0.99, help="final accuracy a run needs to count as solved in a cell's k/m"),
    running: bool = typer.Option(False, "--running", help="the runs in training instead: step, latest accuracy, ETA"),
) -> None:
    """Show the stored runs: one row per cell (every config field equal but the seed) aggregated over its seeds,
    or one row per run with --by-seed; or, with --running, the runs in training."""
    from sepbench.results import run_rows, running_rows, seed_cells
    from sepbench.store import Store

    with bad_input_exits():
        db = Store(store)
        if not db.path.exists():
            raise FileNotFoundError(f"no store at {db.path}; run `sepbench run` or `sepbench sweep` first, or pass "
                                    "--store PATH")
        if not 0 < threshold <= 1:
            raise ConfigError(f"--threshold must be in (0, 1], got {threshold}")
        if output is ResultsFormat.parquet and out_file is None:
            raise ConfigError("--format parquet needs --out FILE")
        if output is ResultsFormat.table and out_file is not None:
            raise ConfigError("--out writes csv, json or parquet; add --format csv, json or parquet")
        if out_file is not None and out_file.is_dir():
            raise ConfigError(f"--out must be a file, but {out_file} is a directory")
        where = {k: v for k, v in {"task": task, "model": model}.items() if v is not None}
        if running:
            chosen = [r for r in db.running() if task in (None, r.result.config.task.name)
                      and model in (None, r.result.config.model.name)]
            _show_running(running_rows(chosen), db.path, output, out_file)
            return
        runs = run_rows(db.results(**where))
    if runs.empty:
        matching = f"runs match {', '.join(f'{k}={v}' for k, v in where.items())}" if where else "runs"
        err.print(f"no {matching} in {db.path} ({len(db)} runs stored)", markup=False, highlight=False,
                  soft_wrap=True)
        raise typer.Exit(1)
    runs = runs.sort_values(["task", "model", "layers", "width", "length", "lr", "seed"], kind="stable",
                            ignore_index=True)
    frame = runs if by_seed else seed_cells(runs, threshold)
    if output is ResultsFormat.table:
        _print_results(frame, runs, by_seed, threshold, db.path)
        return
    with bad_input_exits():
        _write_frame(frame, output, out_file)
    if out_file is not None:
        unit = "runs" if by_seed else f"cells ({len(runs)} runs)"
        err.print(f"wrote {len(frame)} {unit} to {out_file}", markup=False, highlight=False, soft_wrap=True)


def _show_running(frame, path: Path, output: ResultsFormat, out_file: Path | None) -> None:
    if output is not ResultsFormat.table:
        _write_frame(frame, output, out_file)
        return
    if frame.empty:
        out.print(f"no runs in training in {path}", markup=False, highlight=False, soft_wrap=True)
        return
    table = Table()
    for header in ("config hash", "task", "model", "N", "layers", "width", "lr", "seed", "step", "accuracy",
                   "seconds", "ETA", "state", "updated"):
        table.add_column(header, no_wrap=True)
    seconds = lambda value: "-" if value != value else f"{value:.0f} s"  # noqa: E731 - NaN before a first evaluation
    for row in frame.itertuples(index=False):
        table.add_row(row.config_hash, row.task, row.model, str(row.length), str(row.layers), str(row.width),
                      f"{row.lr:g}", str(row.seed), f"{row.step}/{row.steps}", _cell_text(row.accuracy, "accuracy"),
                      seconds(row.seconds), seconds(row.eta_seconds), row.state, row.updated_at)
    _print_whole(table)
    out.print(f"{len(frame)} runs in training in {path}; ETA at each run's mean step time so far (an early stop "
              "ends a run sooner); a stopped run resumes from its checkpoint when its command runs again",
              markup=False, highlight=False, soft_wrap=True)


def _write_frame(frame, output: ResultsFormat, path: Path | None) -> None:
    """csv or json to stdout or ``path``; parquet to ``path``. A file appears whole or not at all."""
    if output is ResultsFormat.parquet:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("--format parquet needs pyarrow (pip install pyarrow)") from None
    if path is None:
        json_text = frame.to_json(orient="records", indent=2) + "\n"
        sys.stdout.write(frame.to_csv(index=False) if output is ResultsFormat.csv else json_text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        if output is ResultsFormat.parquet:
            frame.to_parquet(partial, index=False)
        elif output is ResultsFormat.csv:
            frame.to_csv(partial, index=False)
        else:
            partial.write_text(frame.to_json(orient="records", indent=2) + "\n")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _cell_text(value: object, column: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if column.startswith("accuracy") or column.endswith("_mean") else f"{value:.6g}"
    return str(value)


def _note(value: object) -> str:
    return value if isinstance(value, str) else ""


def _print_whole(table: Table) -> None:
    """Print ``table`` on a console wide enough for its every column's minimum width."""
    from rich.measure import Measurement

    needed = Measurement.get(out, out.options.update_width(1 << 16), table).minimum
    console = out if needed <= out.width else Console(width=needed)
    console.print(table)


def _print_results(frame, runs, by_seed: bool, threshold: float, path: Path) -> None:
    """A table whose every column shows whole values: the console grows to the table's width when it must."""
    from rich.text import Text

    from sepbench.results import NOT_TRAINED, metric_columns, not_trained_text

    metrics = metric_columns(runs)
    if by_seed:
        view = {**RUN_VIEW, **{m: m for m in metrics}, "steps": "steps", "parameters": "parameters",
                "state_floats": "state floats"}
        rows = [[_cell_text(row[c], c) for c in view] + [_note(row["error"])] for _, row in frame.iterrows()]
        headers = [*view.values(), "error"]
    else:
        view = {**CELL_VIEW, "solved": "solved", "accuracy_mean": "accuracy mean", "accuracy_min": "min",
                "accuracy_max": "max", "loss_mean": "loss mean",
                **{f"{m}_mean": f"{m} mean" for m in metrics if m not in ("accuracy", "loss")},
                "parameters": "parameters", "state_floats": "state floats"}
        rows = [[f"{row.solved}/{row.trained}" if c == "solved" else _cell_text(row[c], c) for c in view]
                + [": ".join(filter(None, [not_trained_text(row), _note(row.errors)]))] for _, row in frame.iterrows()]
        headers = [*view.values(), "not trained"]
    table = Table()
    for i, header in enumerate(headers):
        last = i == len(headers) - 1
        whole = max(len(header), *(len(row[i]) for row in rows))
        table.add_column(header, no_wrap=not last, overflow="fold", min_width=min(whole, 60) if last else whole,
                         justify="left" if last or i < 3 else "right")
    for row in rows:
        table.add_row(*(Text(v) for v in row))
    _print_whole(table)
    if by_seed:
        summary = f"{len(frame)} runs in {path}"
    else:
        summary = (f"{len(frame)} cells ({len(runs)} runs) in {path}; solved = k/m trained seeds with final accuracy "
                   f">= {threshold:g}; {', '.join(NOT_TRAINED)} runs are counted apart, never as unsolved; "
                   "--by-seed for one row per run")
    out.print(summary, markup=False, highlight=False, soft_wrap=True)


@app.command("construct")
def construct(
    name: str = typer.Argument(..., help="index_lookup, equality, eq_one or nearest_neighbor"),
    length: Optional[int] = typer.Option(None, help="task size N"),
    lengths: Optional[str] = typer.Option(None, help="several task sizes, comma-separated"),
    code_width: Optional[int] = typer.Option(None, help="width of the position codes [default: the smallest accepted]"),
    samples: int = typer.Option(1000, help="random instances to score at each N (0: none)"),
    verify_up_to: int = typer.Option(1000, help="score instances only at N up to this (longer: codes checked only)"),
    find_min_width: bool = typer.Option(False, "--find-min-width", help="search the smallest code width per N"),
    seed: int = typer.Option(0, help="seed for the codes and the instances"),
) -> None:
    """Build a hand-set Transformer from the separations paper and score it like a trained model."""
    from sepbench.theory.constructions import CONSTRUCTIONS, construct as build, min_code_width

    with bad_input_exits():
        if name not in CONSTRUCTIONS:
            raise ConfigError(f"unknown construction '{name}'; allowed: {', '.join(CONSTRUCTIONS)}")
        sizes = _parse_lengths(lengths, "--lengths") if lengths else [length] if length else []
        if not sizes:
            raise ConfigError("give --length N or --lengths N1,N2,...")
        small = [n for n in sizes if n < 4 or (name != "index_lookup" and n % 2)]
        if small:
            raise ConfigError(f"lengths must be >= 4 (and even for {name}); got {small}")
        if code_width is not None and code_width < 1:
            raise ConfigError(f"--code-width must be >= 1, got {code_width}")
        _refuse_constructions_that_cannot_fit(name, sizes, code_width)
    table = Table("N", "layers", "code width", "model width", "instances", "accuracy", "details",
                  title=f"{name}: {CONSTRUCTIONS[name]}")
    for n in sizes:
        width = min_code_width(name, n, seed) if find_min_width else code_width
        with bad_input_exits():
            try:
                built = build(name, n, width, seed)
            except ValueError as problem:
                raise ConfigError(str(problem)) from None
        count = samples if n <= verify_up_to else 0
        accuracy = f"{100 * built.accuracy(count, seed):.2f}%" if count else "-"
        details = ", ".join(f"{k}={v:.3g}" for k, v in built.details.items())
        table.add_row(str(n), str(built.model.config.layers), str(built.code_width), str(built.width),
                      str(count), accuracy, details)
    out.print(table)


@app.command("bounds")
def bounds(
    task: str = typer.Option(..., help="index_lookup, dyck, eq_random, eq_one, equality, nearest_neighbor, mqar, associative_recall"),
    length: Optional[int] = typer.Option(None, help="task size N"),
    lengths: Optional[str] = typer.Option(None, help="several task sizes, comma-separated"),
    precision: int = typer.Option(32, help="bits per number p"),
    output: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table, csv or json"),
) -> None:
    """The paper's lower bounds on model size for a task at size N and precision p."""
    from sepbench.theory.bounds import bound_table

    with bad_input_exits():
        sizes = _parse_lengths(lengths, "--lengths") if lengths else [length] if length else []
        if not sizes:
            raise ConfigError("give --length N or --lengths N1,N2,...")
        try:
            frame = bound_table(task, sizes, precision)
        except ValueError as problem:
            raise ConfigError(str(problem)) from None
    if output is OutputFormat.csv:
        sys.stdout.write(frame.to_csv(index=False))
    elif output is OutputFormat.json:
        sys.stdout.write(frame.to_json(orient="records", indent=2) + "\n")
    else:
        table = Table("N", "theorem", "architecture", "bounded", "bound", "smallest allowed", "statement",
                      title=f"lower bounds for {task} at p = {precision} bits")
        for row in frame.itertuples(index=False):
            table.add_row(str(row.length), row.theorem, row.architecture, row.quantity, f"{row.value:.4g}",
                          str(row.minimum), row.statement)
        out.print(table)


def _refuse_constructions_that_cannot_fit(name: str, sizes: list[int], code_width: int | None) -> None:
    import torch

    from sepbench.theory.constructions import memory_floor
    from sepbench.train.memory import free_memory, gib

    free = free_memory(torch.device("cpu"))
    if free is None:
        return
    for n in sizes:
        need = memory_floor(name, n, code_width)
        if need > free:
            raise ConfigError(f"{name} at N={n} needs at least {gib(need)} (position codes and tables"
                              f"{', N x N scores' if name == 'nearest_neighbor' else ''}) but the machine has "
                              f"{gib(free)} free; choose a smaller --length")


class SweepBackend(str, Enum):
    local = "local"
    ray = "ray"


@app.command("sweep")
def sweep(
    spec_file: Path = typer.Argument(..., help="YAML sweep spec (name, base, grid, zip, seeds, lr_grid, lr_search)"),
    workers: int = typer.Option(1, min=1, help="runs at the same time (processes, or Ray CPUs on a local instance)"),
    backend: SweepBackend = typer.Option(SweepBackend.local, help="local: a process pool; ray: one Ray task per run"),
    address: Optional[str] = typer.Option(None, help="Ray cluster address for ray.init [default: a local instance]"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the runs the sweep would train, train nothing"),
    device: Optional[str] = typer.Option(None, help="override every run's device (auto, cpu, cuda, cuda:N)"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="train again the runs stored as failed"),
    retrain_stale: bool = typer.Option(False, "--retrain-stale", help="train again the runs stored by other code"),
    force: bool = typer.Option(False, "--force", help="train every run again, stored or not"),
    group_size: Optional[int] = typer.Option(None, "--group-size", min=1,
                                             help="runs of one cell (seeds, lrs) trained stacked in one worker "
                                                  "[default: per device, 1 on CPU; see docs/sweeps.md]"),
    data_cache: Optional[Path] = _data_cache_option(),
    checkpoints: Optional[Path] = _checkpoints_option(),
    tensorboard: Optional[Path] = _tensorboard_option(),
) -> None:
    """Run every run of a sweep spec that the store does not hold yet; rerun the same command to resume.

    Exits 1 when any run of the sweep is failed (now or stored earlier), listing each with its reason.
    Ctrl-C stops the sweep within a second or two (workers are terminated); finished runs stay stored and the
    runs in training save checkpoints that the same command resumes from.
    """
    from sepbench.store import Store
    from sepbench.sweep import Reuse, SweepSpec, plan, run_sweep
    from sepbench.sweep.grouped import default_group_size
    from sepbench.sweep.progress import SweepProgress
    from sepbench.train.stopping import stopping_runs_on

    started = time.time()
    with bad_input_exits():
        _use_data_cache(data_cache)
        _use_watch_folders(checkpoints, tensorboard)
    reuse = Reuse(retry_failed=retry_failed, retrain_stale=retrain_stale, force=force)
    db = Store(store)
    todo = progress = None
    before: set[str] = set()
    try:
        with stopping_runs_on(signal.SIGINT), \
                _warm_pool(workers if backend is SweepBackend.local and not dry_run else 1) as pool:
            with bad_input_exits():
                spec = SweepSpec.from_yaml(packaged_config(spec_file))
                if device is not None:
                    spec.base = apply_overrides(spec.base, {"device": device})
                configs = spec.expand()
                threads = _threads()
                if not dry_run:
                    db.check_writable()
                todo = plan(configs, db, reuse, halving=spec.lr_search == "halving")
                before = db.config_hashes()
            if group_size is None:
                group_size = default_group_size(todo.todo[0].device) if todo.todo else 1
            how = f", groups of up to {group_size}" if group_size > 1 else ""
            if spec.lr_search == "halving":
                how = ", by successive halving: the worse learning rates stop early"
            out.print(f"sweep '{spec.name}': {len(configs)} runs, {todo.reused} already in {db.path}, "
                      f"{len(todo.todo)} to train ({backend.value}, {workers} workers{how})", highlight=False,
                      soft_wrap=True)
            _say_reused(todo)
            if dry_run:
                for cfg in todo.todo:
                    flat = _flatten(cfg.model_dump(mode="json"))
                    out.print(f"{cfg.config_hash()}  " + "  ".join(f"{k}={flat[k]}" for k in spec.axes if k in flat),
                              highlight=False, soft_wrap=True)
                return
            if pool is not None and (spec.lr_search == "halving" or group_size > 1):
                pool.close()  # halving and stacked sweeps run their own worker processes
                pool = None
            if spec.lr_search == "halving":
                halved = _sweep_by_halving(spec, configs, db, workers, backend)
                _exit_on_failures({**todo.failed_kept, **{r.config_hash: r.error or "no reason stored"
                                                          for r in halved if r.status == "failed"}}, "sweep")
                return
            with SweepProgress(spec.name, len(todo.todo), err) as progress:
                try:
                    outcome = run_sweep(todo.todo, db, workers=workers, backend=backend.value, address=address,
                                        on_result=progress.advance, reuse=reuse, group_size=group_size, pool=pool,
                                        threads=threads)
                except RuntimeError as problem:
                    err.print(f"error: {problem}", markup=False, highlight=False, soft_wrap=True)
                    raise typer.Exit(BAD_INPUT) from None
    except KeyboardInterrupt:
        total = len(todo.todo) if todo is not None else 0
        planned = {cfg.config_hash() for cfg in todo.todo} if todo is not None else set()
        reported = progress.finished if progress is not None else set()
        _interrupted(f"{len(_finished_runs(reported, before, db, planned))} of {total} runs finished and stored in "
                     f"{db.path}", db, started)
    failed = {r.config_hash: r.error or "no reason stored" for r in outcome.results if r.status == "failed"}
    out.print(f"sweep '{spec.name}' done: {len(outcome.results)} trained in {outcome.seconds:.1f} s, "
              f"{len(failed)} failed, {len(outcome.diverged)} diverged; {len(db)} runs in {db.path}",
              highlight=False, soft_wrap=True)
    _exit_on_failures({**todo.failed_kept, **failed}, "sweep")


def _say_reused(todo) -> None:
    if todo.stale_kept:
        err.print(f"note: {todo.stale_kept} stored runs came from other code than this one; they are reused "
                  "(--retrain-stale trains them again)", markup=False, highlight=False, soft_wrap=True)
    if todo.failed_kept:
        err.print(f"note: {len(todo.failed_kept)} stored runs are failed and are not retried "
                  "(--retry-failed trains them again)", markup=False, highlight=False, soft_wrap=True)


def _exit_on_failures(failed: dict[str, str], command: str) -> None:
    """List the failed runs of this command, one line each, and exit 1; nothing when none failed."""
    if not failed:
        return
    for key, reason in failed.items():
        err.print(f"failed: {key}: {reason}", markup=False, highlight=False, soft_wrap=True)
    err.print(f"error: {len(failed)} runs of this {command} failed (listed above); fix the cause and rerun with "
              "--retry-failed", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _sweep_by_halving(spec, configs: list[RunConfig], db, workers: int, backend: "SweepBackend") -> list:
    """``lr_search: halving``: successive halving per cell on local processes (one cell per worker)."""
    from sepbench.sweep.halving import run_halving
    from sepbench.sweep.progress import SweepProgress

    if backend != SweepBackend.local:
        err.print("error: lr_search: halving runs on the local backend only; use --backend local",
                  markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(BAD_INPUT)
    done = set(db.query().config_hash) if db.path.exists() else set()
    todo = sum(cfg.config_hash() not in done for cfg in configs)
    with SweepProgress(spec.name, todo, err) as progress:
        outcome = run_halving(configs, db, workers=workers, eta=spec.halving_eta, on_result=progress.advance)
    pruned = sum(r.status == "pruned" for r in outcome.results)
    out.print(f"sweep '{spec.name}' done by successive halving (eta {spec.halving_eta:g}): {len(outcome.results)} "
              f"stored in {outcome.seconds:.1f} s, {pruned} pruned, {len(outcome.failed)} failed or diverged, "
              f"{outcome.steps} steps trained of {sum(c.train.steps for c in configs if c.config_hash() not in done)} "
              f"a full grid would take at most; {len(db)} runs in {db.path}", highlight=False, soft_wrap=True)
    return outcome.results


def _warm_pool(workers: int) -> ContextManager[WorkerPool | None]:
    """With several workers, start them at once: they import torch while this process reads the spec."""
    if workers == 1:
        return nullcontext()
    from sepbench.sweep.pool import WorkerPool

    return WorkerPool(workers)


def _threads(requested: int | None = None) -> int:
    from sepbench.train.environment import default_threads

    try:
        return default_threads(requested)
    except ValueError as problem:
        raise ConfigError(str(problem)) from None


def _finished_runs(reported: set[str], before: set[str], db: Store, planned: set[str] | None = None) -> set[str]:
    """Runs that finished since the store held ``before``: those reported (a retried run replaces its row, so
    only the report shows it), and those a worker stored but the interrupt kept from being reported (new in the
    store; only those in ``planned`` when given)."""
    new = db.config_hashes() - before
    return reported | (new if planned is None else new & planned)


def _interrupted(finished: str, db: Store, since: float) -> NoReturn:
    """Say what an interrupted command kept: ``finished`` runs, and the checkpoints written since ``since``
    (the runs in training when the interrupt came, and any that saved one on the way)."""
    folder = db.checkpoints
    saved = [p for p in folder.glob("*.pt") if p.stat().st_mtime >= since] if folder.is_dir() else []
    if saved:
        err.print(f"checkpointed {len(saved)} run{'s' if len(saved) > 1 else ''} in flight in {folder} "
                  f"(at step{'s' if len(saved) > 1 else ''} {', '.join(str(_checkpoint_step(p)) for p in saved)})",
                  markup=False, highlight=False, soft_wrap=True)
    err.print(f"interrupted: {finished}; rerun the same command to resume", markup=False, highlight=False,
              soft_wrap=True)
    raise typer.Exit(INTERRUPTED)


def _checkpoint_step(path: Path) -> str:
    import torch

    try:
        return str(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["state"]["step"])
    except Exception:  # noqa: BLE001 - a file a worker was still writing: its step is not known
        return "?"


def _use_watch_folders(checkpoints: Path | None, tensorboard: Path | None) -> None:
    """``--checkpoints`` and ``--tensorboard`` for this process and the workers it starts, as absolute paths."""
    from sepbench.extras import require
    from sepbench.store import CHECKPOINTS_ENV
    from sepbench.train.watch import TENSORBOARD_ENV

    if tensorboard is not None:
        require("tensorboard", "tensorboard", "--tensorboard")
    _folder_for_workers(checkpoints, CHECKPOINTS_ENV, "--checkpoints")
    _folder_for_workers(tensorboard, TENSORBOARD_ENV, "--tensorboard")


def _parse_ints(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option} expects comma-separated integers, got '{text}'") from None
    if not values:
        raise ConfigError(f"{option} expects at least one integer")
    return values


class LrSearch(str, Enum):
    grid = "grid"
    halving = "halving"


def _parse_lrs(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--lrs expects comma-separated positive numbers, got '{text}'") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"--lrs expects comma-separated positive numbers, got '{text}'")
    return values


@app.command("minwidth")
def minwidth(
    task: str = typer.Option(..., help="task name (see `sepbench tasks`)"),
    model: str = typer.Option(..., help="model name (see `sepbench models`)"),
    lengths: str = typer.Option(..., help="task sizes N, comma-separated"),
    widths: str = typer.Option(..., help="width grid to search, comma-separated"),
    layers: Optional[int] = typer.Option(None, help="number of blocks"),
    steps: Optional[int] = typer.Option(None, help="training steps per run"),
    threshold: float = typer.Option(0.99, help="accuracy a seed must reach"),
    k: int = typer.Option(2, "--k", help="seeds that must reach it ..."),
    m: int = typer.Option(3, "--m", help="... out of this many (seeds 0..m-1)"),
    workers: int = typer.Option(1, min=1, help="runs at the same time"),
    device: Optional[str] = typer.Option(None, help="auto (CUDA when present), cpu, cuda, cuda:N"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    config: Optional[Path] = typer.Option(None, help="YAML base config for every run"),
    assignments: list[str] = typer.Option([], "--set", help="override any base field: section.key=value"),
    resamples: int = typer.Option(2000, min=10, help="bootstrap resamples for the interval on alpha"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="train again the runs stored as failed"),
    retrain_stale: bool = typer.Option(False, "--retrain-stale", help="train again the runs stored by other code"),
    force: bool = typer.Option(False, "--force", help="train every run the search visits again"),
    lrs: Optional[str] = typer.Option(None, help="learning rates tried at each width, comma-separated"),
    lr_search: LrSearch = typer.Option(LrSearch.grid, help="grid: every lr in full; halving: successive halving"),
    eta: float = typer.Option(2.0, help="halving keeps 1/eta of the learning rates at each rung"),
    data_cache: Optional[Path] = _data_cache_option(),
    checkpoints: Optional[Path] = _checkpoints_option(),
    tensorboard: Optional[Path] = _tensorboard_option(),
) -> None:
    """Smallest width that solves the task at each length (bisection, reusing stored runs), and its growth law.

    A width whose runs failed (out of memory, a crash) shows as failed, never as unsolved; the command then
    exits 1.
    """
    from sepbench.store import Store
    from sepbench.sweep import Reuse
    from sepbench.train.stopping import stopping_runs_on

    started = time.time()
    with bad_input_exits():
        _use_data_cache(data_cache)
        _use_watch_folders(checkpoints, tensorboard)
    db = Store(store)
    before = db.config_hashes()
    progress = None
    try:
        with stopping_runs_on(signal.SIGINT), _warm_pool(workers if lr_search == LrSearch.grid else 1) as pool:
            from sepbench.sweep.progress import SweepProgress
            from sepbench.sweep.search import (
                MIN_FIT_POINTS, SolvedRule, fit_log_law, fit_power_law, search_min_width,
            )

            with bad_input_exits():
                try:
                    rule = SolvedRule(threshold, k, m)
                except ValueError as problem:
                    raise ConfigError(str(problem)) from None
                grid_lengths, grid_widths = _parse_ints(lengths, "--lengths"), _parse_ints(widths, "--widths")
                grid_lrs = _parse_lrs(lrs) if lrs is not None else None
                if lr_search == LrSearch.halving and not grid_lrs:
                    raise ConfigError("--lr-search halving needs --lrs, the learning rates to search")
                if eta <= 1:
                    raise ConfigError(f"--eta must be > 1, got {eta:g}")
                data = load_yaml(packaged_config(config)) if config else {}
                flags = {"task.name": task, "model.name": model, "model.layers": layers, "train.steps": steps,
                         "device": device}
                base = apply_overrides(apply_overrides(data, {k: v for k, v in flags.items() if v is not None}),
                                       parse_assignments(assignments))
                for n in grid_lengths:
                    for w in grid_widths:
                        RunConfig.build(apply_overrides(base, {"task.length": n, "model.width": w}))
                threads = _threads()
                db.check_writable()
            most_visited = len(set(grid_widths)).bit_length()
            progress = SweepProgress("minwidth", len(set(grid_lengths)) * most_visited * m * len(grid_lrs or [None]),
                                     err, live=False)
            reuse = Reuse(retry_failed=retry_failed, retrain_stale=retrain_stale, force=force)
            search = search_min_width(base, grid_lengths, grid_widths, rule, db, workers=workers,
                                      on_result=progress.advance, reuse=reuse, lrs=grid_lrs,
                                      lr_search=lr_search.value, eta=eta, pool=pool, threads=threads)
    except KeyboardInterrupt:
        reported = progress.finished if progress is not None else set()
        _interrupted(f"{len(_finished_runs(reported, before, db))} runs finished and stored in {db.path}", db, started)
    cfg = RunConfig.build(apply_overrides(base, {"task.length": grid_lengths[0], "model.width": grid_widths[0]}))
    depth = f"{cfg.model.layers} layer{'s' if cfg.model.layers > 1 else ''}"
    tuned = f"; best of {len(grid_lrs)} lrs ({lr_search.value})" if grid_lrs else ""
    table = Table(title=f"smallest width: {model}, {depth}, on {task}; solved = {rule}{tuned}")
    table.add_column("length N", justify="right")
    table.add_column("smallest width", justify="right")
    table.add_column("widths evaluated")
    for n, w in search.smallest.items():
        failed = search.failed.get(n, {})
        tried = ", ".join(f"{x}:{'solved' if ok else 'failed' if x in failed else 'no'}"
                          for x, ok in sorted(search.checked[n].items()))
        open_below = search.undetermined_below(n)
        found = "none in grid" if w is None else str(w)
        if open_below:
            found = f"{found} (width {', '.join(map(str, open_below))} failed: undetermined)"
        table.add_row(str(n), found, tried)
    out.print(table)
    reasons = {n: "a failed width leaves it open" if search.undetermined_below(n) else
               f"censored at the grid's smallest width {min(grid_widths)}" if w == min(grid_widths) else
               "no width solved" for n, w in search.smallest.items()
               if w is None or w == min(grid_widths) or search.undetermined_below(n)}
    determined = {n: w for n, w in search.smallest.items() if n not in reasons}
    for n, reason in reasons.items():
        out.print(f"left out of the fits: N={n} ({reason})", highlight=False, soft_wrap=True)
    if len(determined) < MIN_FIT_POINTS:
        out.print(f"no fit: a growth law needs an exact smallest width at >= {MIN_FIT_POINTS} lengths, "
                  f"got {len(determined)}", highlight=False, soft_wrap=True)
    else:
        power, log = fit_power_law(determined, resamples=resamples), fit_log_law(determined)
        out.print(f"width ~ c * N^alpha: alpha = {power.alpha:.3f}, {power.level:.0%} bootstrap CI "
                  f"[{power.alpha_low:.3f}, {power.alpha_high:.3f}] ({power.resamples} resamples), c = {power.c:.3g}, "
                  f"rmse = {power.rmse:.3g}", highlight=False, soft_wrap=True)
        out.print(f"width ~ a + b * log N: a = {log.a:.3g}, b = {log.b:.3g}, rmse = {log.rmse:.3g}",
                  highlight=False, soft_wrap=True)
    out.print(f"trained {search.trained} new runs ({search.steps} steps); {len(db)} runs in {db.path}", highlight=False,
              soft_wrap=True)
    _exit_on_failures({f"N={n} width {w}": reason for n, widths_ in search.failed.items()
                       for w, reason in widths_.items()}, "width search")


@app.command("report")
def report(
    out_dir: Path = typer.Option(..., "--out", help="directory for index.html, figures/*.{png,svg,json}, min_flops.csv"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    threshold: float = typer.Option(0.99, help="accuracy a seed must reach to count as solved"),
    k: int = typer.Option(2, "--k", help="seeds that must reach it ..."),
    m: int = typer.Option(3, "--m", help="... out of this many"),
    flops_threshold: float = typer.Option(0.9, help="threshold of the min-FLOPs table (Yang et al. 2024, Table 2)"),
) -> None:
    """Write a self-contained HTML report and every figure as PNG and SVG from the stored runs."""
    from sepbench.extras import require
    from sepbench.store import Store
    from sepbench.sweep.search import SolvedRule

    with bad_input_exits():
        require("matplotlib", "report", "sepbench report")
        from sepbench.report import write_report

        try:
            rule, flops_rule = SolvedRule(threshold, k, m), SolvedRule(flops_threshold, k, m)
        except ValueError as problem:
            raise ConfigError(str(problem)) from None
        db = Store(store)
        if not db.path.exists():
            raise FileNotFoundError(f"no store at {db.path}; run `sepbench sweep` or `sepbench run` first")
        if out_dir.exists() and not out_dir.is_dir():
            raise ConfigError(f"--out must be a directory, but {out_dir} is a file")
        results, random_networks = db.results(), db.query_softmax_vs_linear()
    for key, reason in db.unreadable:
        err.print(f"warning: stored run {key} cannot be read and is left out ({reason})", markup=False,
                  highlight=False, soft_wrap=True)
    outcome = write_report(results, out_dir, source=str(db.path), rule=rule, flops_rule=flops_rule,
                           random_networks=random_networks)
    out.print(f"report of {outcome.runs} runs: {len(outcome.figures)} figures ({', '.join(outcome.figures) or 'none'})",
              highlight=False, soft_wrap=True)
    out.print(f"open {outcome.page.resolve()}", highlight=False, soft_wrap=True)


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@app.command("softmax-vs-linear")
def softmax_vs_linear(
    figure: str = typer.Argument(..., help="a figure id (fig3a, fig3b, fig4a-f, fig5a-f, fig7a-e) or 'learned'"),
    out_dir: Path = typer.Option(Path("results/deng2023"), "--out", help="folder for the PNG and CSV"),
    trials: Optional[int] = typer.Option(None, min=1, help="random networks per point [default: the config's, 100]"),
    seed: Optional[int] = typer.Option(None, help="base seed; point i uses seed + i [default: the config's]"),
    config_dir: Optional[Path] = typer.Option(None, help="folder of figure configs "
                                              "[default: the packaged configs/deng2023]"),
    lengths: Optional[str] = typer.Option(None, help="learned only: comma-separated n values"),
    steps: Optional[int] = typer.Option(None, min=1, help="learned only: training steps per classifier"),
    device: str = typer.Option("auto", help="auto (CUDA when present), cpu, cuda, cuda:N"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
) -> None:
    """Deng et al. softmax vs linear attention (definitions reconstructed, ranges ours): one figure's sweep."""
    from sepbench.extras import require
    from sepbench.store import Store
    from sepbench.theory.softmax_vs_linear import figures

    with bad_input_exits():
        where = _device(device)
        Store(store).check_writable()
        if figure == "learned":
            learned = _learned_config(lengths, steps, seed)
        else:
            require("matplotlib", "report", "sepbench softmax-vs-linear")
            config = figures.load_figure(figure, config_dir or figures.CONFIG_DIR)
    if figure == "learned":
        _run_learned(learned, out_dir, where)
        return
    err.print(f"{config.figure}: {config.title} ({figures.RECONSTRUCTED})", markup=False, highlight=False)
    frame = figures.run_figure(config, trials, seed, where, on_point=lambda row: err.print(
        f"  {row['parameter']}={row['value']:g}: E {row['successes']}/{row['trials']} ({row['seconds']:.2f}s)",
        markup=False, highlight=False))
    csv, png = figures.write_outputs(frame, config, out_dir)
    db = Store(store)
    db.put_softmax_vs_linear(figures.store_rows(frame))
    table = Table(config.parameter, "E", "trials", "F_exp(D0)=0", "F_exp(D1)>0", "F_lin(D0)=0", "F_lin(D1)=0",
                  title=f"{config.figure}: {config.title}", caption=figures.RECONSTRUCTED)
    for row in frame.itertuples(index=False):
        table.add_row(f"{row.value:g}", str(row.successes), str(row.trials), str(row.exp_d0_zero),
                      str(row.exp_d1_positive), str(row.lin_d0_zero), str(row.lin_d1_zero))
    out.print(table)
    out.print(f"wrote {csv} and {png}; {len(frame)} points stored in {db.path}")


def _device(name: str) -> str:
    from sepbench.train.environment import resolve_device

    try:
        return str(resolve_device(name))
    except (ValueError, RuntimeError) as problem:
        raise ConfigError(f"--device: {problem}".splitlines()[0]) from None


def _learned_config(lengths: str | None, steps: int | None, seed: int | None) -> LearnedConfig:
    from sepbench.theory.softmax_vs_linear.learned import LearnedConfig
    from sepbench.train.result import RunResult

    fields = {"lengths": _parse_lengths(lengths, "--lengths") if lengths else None, "steps": steps, "seed": seed}
    try:
        return LearnedConfig(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as problem:
        first = problem.errors()[0]
        raise ConfigError(f"learned {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def _run_learned(config: LearnedConfig, out_dir: Path, device: str) -> None:
    from sepbench.theory.softmax_vs_linear.learned import run_learned

    err.print(f"learned classifiers on R2 data ({config.describe()})", markup=False, highlight=False)
    frame = run_learned(config, device, on_result=lambda row: err.print(
        f"  n={row['n']} {row['kind']}: test accuracy {row['test_accuracy']:.3f} ({row['seconds']:.1f}s)",
        markup=False, highlight=False))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "learned.csv"
    path.write_text("# learned one-layer classifiers on reconstructed R2 data (docs/softmax_vs_linear.md); settings ours\n"
                    + frame.to_csv(index=False))
    wide = frame.pivot(index="n", columns="kind", values="test_accuracy")
    table = Table("n", "softmax test acc", "linear test acc", title="learned D0-vs-D1 classifiers (R2 data, reconstructed)")
    for n, row in wide.iterrows():
        table.add_row(str(n), f"{row['exp']:.3f}", f"{row['lin']:.3f}")
    out.print(table)
    out.print(f"wrote {path}")


class ClaimScale(str, Enum):
    quick = "quick"
    cpu = "cpu"
    paper = "paper"


@app.command("reproduce")
def reproduce(
    paper: Optional[str] = typer.Argument(None, help="bhattamishra2024, yang2024 or deng2023 [default: all three]"),
    claim_ids: list[str] = typer.Option([], "--claim", help="only this claim (repeat for several; see --list)"),
    scale: ClaimScale = typer.Option(ClaimScale.quick, "--scale", help="quick (a smoke check, about an hour per claim "
                                     "on 2 CPU cores), cpu (the lengths the papers name, <= 6 core-hours per claim) "
                                     "or paper (the paper's protocol)"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    out_dir: Path = typer.Option(Path("reports/reproduction"), "--out", help="folder for reproduction.md and figures"),
    workers: int = typer.Option(1, min=1, help="runs at the same time"),
    assignments: list[str] = typer.Option([], "--set", help="override a field of every run: section.key=value "
                                          "(changes the runs, e.g. train.steps=20 for a smoke test)"),
    list_only: bool = typer.Option(False, "--list", help="print the catalogue and exit"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the runs still to train and an estimate of the time"),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="train again the runs stored as failed"),
    group_size: Optional[int] = typer.Option(None, "--group-size", min=1,
                                             help="runs of one cell (seeds, lrs) trained stacked in one worker "
                                                  "[default: per device, 1 on CPU; see docs/sweeps.md]"),
    with_model: Optional[str] = typer.Option(None, "--with-model", help="a model (package.module:Class, a plugin's "
                                             "or a built-in name) to run on the claims' specs and place in a table "
                                             "beside the catalogue's stored runs, instead of judging the claims"),
    checkpoints: Optional[Path] = _checkpoints_option(),
    tensorboard: Optional[Path] = _tensorboard_option(),
    evidence: bool = typer.Option(False, "--evidence", help="judge from the shipped evidence (--evidence-dir), "
                                  "training nothing; with --store, your stored runs are judged beside it"),
    evidence_dir: Path = typer.Option(Path("evidence"), "--evidence-dir", help="the evidence folder: "
                                      "<dir>/<scale>/<claim>.jsonl"),
    write_evidence: bool = typer.Option(False, "--write-evidence", help="after judging, write each claim's runs "
                                        "(or check result) to --evidence-dir as JSON lines"),
) -> None:
    """Every claim of the papers as a checked verdict: run what the store misses, then judge each claim by its rule.

    Rerun the same command to resume; stored runs are reused. Verdicts (reproduced, not reproduced, inconclusive)
    are computed from the runs by the rule each claim states (see --list and docs/reproduction.md). With
    --with-model, only that model's runs are trained and shown beside the catalogue's stored runs (no verdict).
    """
    from sepbench.claims import select
    from sepbench.claims.reproduce import judge, plan_claim
    from sepbench.sweep.costs import estimate
    from sepbench.store import Store
    from sepbench.sweep import Reuse
    from sepbench.sweep.progress import SweepProgress
    from sepbench.train.stopping import stopping_runs_on

    started = time.time()
    with bad_input_exits():
        _use_watch_folders(checkpoints, tensorboard)
        claims = select(paper, claim_ids)
        overrides = parse_assignments(assignments)
        if evidence and (overrides or dry_run or write_evidence):
            raise ConfigError("--evidence judges the shipped runs as they are; allowed with it: --claim, --scale, "
                              "--store, --evidence-dir (not --set, --dry-run or --write-evidence)")
        if evidence:
            _reproduce_from_evidence(claims, scale.value, evidence_dir, store)
            return
        db = Store(store)
        plans = [plan_claim(c, scale.value, db, overrides, Reuse(retry_failed=retry_failed))
                 for c in claims] if not list_only else []
        if not list_only and not dry_run:
            db.check_writable()
    if list_only:
        _print_catalogue(claims, scale.value)
        return
    if with_model is not None:
        _place_model(claims, with_model, scale.value, db, overrides, workers, Reuse(retry_failed=retry_failed),
                     group_size, dry_run)
        return
    if dry_run:
        _print_plan(plans, db, workers, scale.value, estimate)
        return
    verdicts = []
    todo = sum(len(p.todo) for p in plans)
    out.print(f"reproduce: {len(claims)} claims at the {scale.value} scale, {todo} runs to train in {db.path}",
              highlight=False, soft_wrap=True)
    before = db.config_hashes()
    progress = SweepProgress("reproduce", todo, err)
    try:
        with stopping_runs_on(signal.SIGINT), progress:
            for claim in claims:
                verdicts.append(judge(claim, scale.value, db, overrides, workers=workers, on_result=progress.advance,
                                      reuse=Reuse(retry_failed=retry_failed), group_size=group_size))
    except KeyboardInterrupt:
        _interrupted(f"{len(_finished_runs(progress.finished, before, db))} runs finished and stored in {db.path}", db,
                     started)
    _print_verdicts(verdicts, scale.value, overrides)
    from sepbench.claims.report import write

    page = write(verdicts, out_dir, _budget_text(scale.value, overrides))
    out.print(f"wrote {page} with {len(verdicts)} figures", highlight=False, soft_wrap=True)
    if write_evidence:
        from sepbench.claims import evidence as shipped

        for claim in claims:
            path, count = shipped.write(claim, scale.value, db, evidence_dir, overrides)
            out.print(f"evidence: {count} records in {path}" if count else f"evidence: nothing stored for {claim.id}",
                      highlight=False, soft_wrap=True)


def _reproduce_from_evidence(claims, scale: str, evidence_dir: Path, store: Optional[Path]) -> None:
    """The verdict table from the shipped evidence (a scratch store, nothing trained), and, with ``store``, the
    verdicts of the user's own stored runs beside it."""
    import tempfile

    from sepbench.claims import evidence as shipped
    from sepbench.claims.reproduce import judge
    from sepbench.store import Store

    with tempfile.TemporaryDirectory(prefix="sepbench-evidence-") as scratch, bad_input_exits():
        if store is not None and not Path(store).is_file():
            raise ConfigError(f"--store {store} does not exist; with --evidence it names a store of your runs to "
                              f"judge beside the shipped ones")
        db = Store(Path(scratch) / "evidence.db")
        missing = shipped.load(claims, scale, evidence_dir, db)
        verdicts = [shipped.unshipped(c, scale) if c.id in missing else judge(c, scale, db, train=False)
                    for c in claims]
        mine = [judge(c, scale, Store(store), train=False) for c in claims] if store is not None else None
    out.print(f"judged from the shipped evidence in {evidence_dir / scale} (nothing trained); "
              f"{len(missing)} of {len(claims)} claims have none", highlight=False, soft_wrap=True)
    _print_verdicts(verdicts, scale, {})
    if mine is not None:
        from sepbench.claims.report import shown_verdict, tally

        table = Table(title=f"shipped evidence beside {store}")
        for column in ("claim", "shipped", "yours", "your evidence"):
            table.add_column(column, no_wrap=column == "claim")
        for ours, yours in zip(verdicts, mine):
            first = "; ".join(o.evidence[0] for o in yours.outcomes if o.evidence) or "no runs"
            table.add_row(ours.claim.id, shown_verdict(ours), shown_verdict(yours), first)
        out.print(table)
        out.print(f"yours: {tally(mine)}", highlight=False, soft_wrap=True)


def _place_model(claims, model: str, scale: str, db: Store, overrides: dict, workers: int, reuse,
                 group_size: int | None, dry_run: bool) -> None:
    """``reproduce --with-model``: train ``model`` on each sweep claim's runs, then print where it stands."""
    from sepbench.claims.placement import added_model_configs, place
    from sepbench.sweep import plan
    from sepbench.sweep.progress import SweepProgress

    sweeps = [c for c in claims if c.kind == "sweep"]
    for claim in claims:
        if claim.kind == "theory":
            err.print(f"note: {claim.id} is a theory claim (check {claim.check}); it has no runs to place {model} on",
                      markup=False, highlight=False, soft_wrap=True)
    with bad_input_exits():
        added = {c.id: added_model_configs(c, scale, model, overrides) for c in sweeps}
        todo = sum(len(plan(configs, db, reuse).todo) for configs in added.values())
        if not dry_run:
            db.check_writable()
    out.print(f"reproduce --with-model {model}: {len(sweeps)} claims at the {scale} scale, {todo} runs of {model} "
              f"to train in {db.path}; the catalogue's models are not trained, their stored runs are shown",
              highlight=False, soft_wrap=True, markup=False)
    if dry_run:
        return
    progress = SweepProgress("reproduce --with-model", todo, err)
    before = db.config_hashes()
    placements = []
    try:
        with progress:
            for claim in sweeps:
                placements.append(place(claim, scale, db, model, overrides, workers=workers,
                                        on_result=progress.advance, reuse=reuse, group_size=group_size))
    except KeyboardInterrupt:
        _interrupted(f"{len(_finished_runs(progress.finished, before, db))} runs finished", db.path)
    for placement in placements:
        _print_placement(placement, scale)


def _print_placement(placement, scale: str) -> None:
    claim = placement.claim
    table = Table(title=f"{claim.id} ({claim.paper}, {claim.where}), {scale} scale: {placement.model} beside the "
                        "catalogue's models")
    for column in ("task", "N", "model", "best lr", "accuracy", "seeds", "cell"):
        table.add_column(column, no_wrap=column != "model")
    cells = placement.cells.assign(added=placement.cells.model == placement.model)
    for row in cells.sort_values(["task", "length", "layers", "width", "added", "model"]).itertuples():
        accuracy = "-" if row.best_accuracy != row.best_accuracy else f"{row.best_accuracy:.3f}"
        best_lr = "-" if row.best_lr != row.best_lr else f"{row.best_lr:g}"
        name = Text(f"{row.model}-({row.layers}, {row.width})", style="bold" if row.added else "")
        table.add_row(row.task, str(row.length), name, best_lr, accuracy, str(row.seeds), row.verdict)
    out.print(f"claim: {claim.text}", highlight=False, soft_wrap=True, markup=False)
    out.print(table)
    rule = placement.rule
    out.print(f"accuracy: mean over the seeds of the best learning rate; cell: solved when >= {rule.threshold:g} "
              f"in {rule.k} of {rule.m} seeds there. A placement, not a verdict on the claim.",
              highlight=False, soft_wrap=True)
    if placement.catalogue_missing:
        err.print(f"note: {placement.catalogue_missing} runs of the catalogue's models for {claim.id} are not in the "
                  f"store and are left out (`sepbench reproduce --claim {claim.id}` with the same --scale and --set "
                  "trains them)", markup=False, highlight=False, soft_wrap=True)
    if placement.added_missing:
        err.print(f"note: {placement.added_missing} runs of {placement.model} are not in the store",
                  markup=False, highlight=False, soft_wrap=True)


def _budget_text(scale: str, overrides: dict) -> str:
    extra = f"; every run overridden with {', '.join(f'{k}={v}' for k, v in overrides.items())}" if overrides else ""
    return f"Scale: {scale} (budgets in each claim's specs: docs/reproduction.md){extra}."


def _print_catalogue(claims, scale: str) -> None:
    """One block per claim (readable at any terminal width): id, paper and place, text, runs, verdict rule."""
    for claim in claims:
        runs = f"{len(claim.configs(scale))} {scale} runs" if claim.kind == "sweep" else f"theory check {claim.check}"
        beyond = " [exploratory: beyond the paper, outside the tally]" if claim.exploratory else ""
        out.print(f"[bold]{claim.id}[/bold]  {claim.paper}, {claim.where}; {runs}", highlight=False, soft_wrap=True)
        out.print(f"  claim: {claim.text}{beyond}", highlight=False, soft_wrap=True, markup=False)
        if claim.note:
            out.print(f"  note: {claim.note}", highlight=False, soft_wrap=True, markup=False)
        for condition in claim.conditions:
            out.print(f"  rule: {condition.text}", highlight=False, soft_wrap=True, markup=False)
        out.print(f"  verdicts need >= {claim.min_seeds} seeds per group", highlight=False, soft_wrap=True)


def _print_plan(plans, db, workers: int, scale: str, estimate) -> None:
    table = Table(title=f"reproduce --dry-run ({scale} scale)")
    table.add_column("claim", no_wrap=True)
    for column in ("runs", "stored", "to train", "core-hours", "estimate"):
        table.add_column(column)
    every, known, claim_seconds = [], {}, {}
    for p in plans:
        if p.claim.kind == "theory":
            table.add_row(p.claim.id, "-", "-", "-", "-", f"theory check {p.claim.check} (seconds to minutes)")
            continue
        every += p.todo
        found = estimate(p.todo, db, known=known)
        claim_seconds[p.claim.id] = found.seconds
        table.add_row(p.claim.id, str(len(p.configs)), str(len(p.configs) - len(p.todo)), str(len(p.todo)),
                      f"{found.seconds / 3600:.2f}", found.text(1))
    out.print(table)
    unique = list({cfg.config_hash(): cfg for cfg in every}.values())
    for cfg in unique:
        out.print(f"{cfg.config_hash()}  task={cfg.task.name} N={cfg.task.length} model={cfg.model.name}-"
                  f"({cfg.model.layers}, {cfg.model.width}) lr={cfg.train.lr:g} seed={cfg.seed} steps={cfg.train.steps}",
                  highlight=False, soft_wrap=True)
    total = estimate(unique, db, known=known)
    out.print(f"{len(unique)} runs to train: {total.text(workers)}", highlight=False, soft_wrap=True)
    out.print(f"core-hours (one run on one core, every step, no early stop; runs shared by claims counted once in the "
              f"total): {total.seconds / 3600:.2f} in all; per claim at most "
              f"{max(claim_seconds.values(), default=0.0) / 3600:.2f}", highlight=False, soft_wrap=True)


def _print_verdicts(verdicts, scale: str, overrides: dict) -> None:
    from sepbench.claims.report import shown_verdict, tally

    table = Table(title=f"reproduction, {scale} scale"
                  + (" (overridden: " + ", ".join(f"{k}={v}" for k, v in overrides.items()) + ")" if overrides else ""))
    table.add_column("claim", no_wrap=True)
    table.add_column("where")
    table.add_column("evidence")
    table.add_column("verdict", no_wrap=True)
    table.add_column("wall", no_wrap=True)
    for v in verdicts:
        lines = []
        for o in v.outcomes:
            lines.append(f"{o.text}: {o.verdict}")
            lines += [f"  {e}" for e in o.evidence]
            lines += [f"  inconclusive: {r}" for r in o.reasons[:3]]
        table.add_row(v.claim.id, f"{v.claim.paper}, {v.claim.place}", "\n".join(lines), shown_verdict(v),
                      f"{v.wall_seconds:.0f} s")
    out.print(table)
    out.print(tally(verdicts), highlight=False, soft_wrap=True)


@app.command("check-plugin")
def check_plugin(
    plugin: str = typer.Argument(..., help="a mixer or task: package.module:Class, an installed plugin's name, or a "
                                 "built-in name"),
    learn_steps: int = typer.Option(1500, "--learn-steps", min=0,
                                    help="most steps of a mixer's learning check (0 skips it)"),
    length: int = typer.Option(12, min=2, help="task size N a task is checked at"),
    samples: int = typer.Option(2000, min=1, help="rows of a task's sampling check"),
) -> None:
    """Run on a plugin the checks every built-in mixer (or task) passes; exit 1 when one fails.

    A mixer without a step path (``step`` raising NotImplementedError) or without a closed-form state size or
    FLOP count is reported as absent, not failed: it trains, but cannot be scored by generation.
    """
    import torch

    from sepbench.conformance import kind_of

    with bad_input_exits():
        kind = kind_of(plugin)
        found = _registry(kind).get(plugin)
    torch.set_num_threads(_threads())
    if kind == "model":
        from sepbench.conformance.mixers import all_checks

        checks = all_checks(plugin, learn_steps=learn_steps)
    else:
        from sepbench.conformance.tasks import all_checks

        checks = all_checks(plugin, length, samples)
    table = Table("check", "result", "detail", title=f"{kind} {plugin} ({found.__module__}.{found.__name__})")
    style = {"pass": "green", "fail": "bold red", "absent": "yellow"}
    for check in checks:
        table.add_row(check.name, f"[{style[check.status]}]{check.status}[/]", Text(check.detail))
    out.print(table)
    counts = {status: sum(c.status == status for c in checks) for status in style}
    out.print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['absent']} absent", highlight=False)
    if counts["fail"]:
        raise typer.Exit(1)


def _registry(kind: str):
    if kind == "model":
        from sepbench.models import MODELS

        return MODELS
    from sepbench.tasks import TASKS

    return TASKS


def main() -> None:
    try:
        app()
    finally:
        gc.freeze()  # the interpreter's last collections would otherwise walk every torch object: ~0.3-1.5 s at exit


if __name__ == "__main__":
    main()
