"""The ``sepbench`` command line: each command parses, calls the library, prints."""
from __future__ import annotations

import gc
import sys
from contextlib import contextmanager, nullcontext
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, Iterator, NoReturn, Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from sepbench.config import (
    ConfigError, RunConfig, apply_overrides, describe_validation_error, load_yaml, parse_assignments,
)
from sepbench.registry import UnknownNameError

if TYPE_CHECKING:
    from sepbench.sweep.pool import WorkerPool
    from sepbench.theory.softmax_vs_linear.learned import LearnedConfig

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Measure how large each sequence model must be to solve a task as the task grows.",
)
out = Console()
err = Console(stderr=True)

BAD_INPUT = 2
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
TABLE_COLUMNS = ["config_hash", "task", "model", "length", "layers", "width", "seed", "lr", "status", "accuracy", "steps"]


@contextmanager
def bad_input_exits() -> Iterator[None]:
    """Turn a configuration problem into one line on stderr and exit code 2."""
    try:
        yield
    except (ConfigError, UnknownNameError, FileNotFoundError) as problem:
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
    out.print(table)


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
    data = load_yaml(config_file) if config_file else {}
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
    progress: Optional[bool] = typer.Option(None, help="show a progress bar [default: when on a terminal]"),
    threads: Optional[int] = typer.Option(
        None, min=1, help="intra-op CPU threads (default: $SEPBENCH_THREADS, else 1; a second thread at best halves "
        "a step on an idle machine and made steps 3-15x slower when other jobs held the cores: docs/sweeps.md)"),
) -> None:
    """Train one model on one task and store the result."""
    import torch

    from sepbench.store import Store
    from sepbench.train import train

    with bad_input_exits():
        torch.set_num_threads(_threads(threads))
        lengths = _parse_lengths(eval_lengths) if eval_lengths else None
        flags = {"task.name": task, "model.name": model, "model.layers": layers, "model.width": width,
                 "model.heads": heads, "task.length": length, "task.eval_lengths": lengths, "train.steps": steps,
                 "train.batch_size": batch_size, "train.lr": lr, "seed": seed, "device": device}
        cfg = build_run_config(config, flags, assignments)
        db = Store(store)
        key = cfg.config_hash()
        cached = None if force else db.get(key)
        if cached is None:
            try:
                result = train(cfg, progress=progress)
            except ValueError as problem:
                raise ConfigError(str(problem)) from None
            db.put(result)
        else:
            result = cached
            err.print(f"config {key} is already in {db.path}; showing the stored run (use --force to train again)")
    _print_result(result, db.path)


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


@app.command("results")
def results(
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    output: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table, csv or json"),
    task: Optional[str] = typer.Option(None, help="only this task"),
    model: Optional[str] = typer.Option(None, help="only this model"),
) -> None:
    """Show the stored runs."""
    from sepbench.store import Store

    where = {k: v for k, v in {"task": task, "model": model}.items() if v is not None}
    frame = Store(store).query(**where)
    if output is OutputFormat.csv:
        sys.stdout.write(frame.to_csv(index=False))
    elif output is OutputFormat.json:
        sys.stdout.write(frame.to_json(orient="records", indent=2) + "\n")
    else:
        frame = frame[TABLE_COLUMNS]
        table = Table(*frame.columns)
        for row in frame.itertuples(index=False):
            table.add_row(*("-" if v is None or v != v else f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
        out.print(table)
        out.print(f"{len(frame)} runs in {Store(store).path}")


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


class SweepBackend(str, Enum):
    local = "local"
    ray = "ray"


@app.command("sweep")
def sweep(
    spec_file: Path = typer.Argument(..., help="YAML sweep spec (name, base, grid, zip, seeds, lr_grid)"),
    workers: int = typer.Option(1, min=1, help="runs at the same time (processes, or Ray CPUs on a local instance)"),
    backend: SweepBackend = typer.Option(SweepBackend.local, help="local: a process pool; ray: one Ray task per run"),
    address: Optional[str] = typer.Option(None, help="Ray cluster address for ray.init [default: a local instance]"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the runs the sweep would train, train nothing"),
    device: Optional[str] = typer.Option(None, help="override every run's device (auto, cpu, cuda, cuda:N)"),
) -> None:
    """Run every run of a sweep spec that the store does not hold yet; rerun the same command to resume.

    Ctrl-C stops the sweep within a second or two (workers are terminated); finished runs stay stored.
    """
    from sepbench.store import Store
    from sepbench.sweep import SweepSpec, pending, run_sweep
    from sepbench.sweep.progress import SweepProgress

    db = Store(store)
    todo: list[RunConfig] = []
    try:
        with _warm_pool(workers if backend is SweepBackend.local and not dry_run else 1) as pool:
            with bad_input_exits():
                spec = SweepSpec.from_yaml(spec_file)
                if device is not None:
                    spec.base = apply_overrides(spec.base, {"device": device})
                configs = spec.expand()
                threads = _threads()
            todo = pending(configs, db)
            out.print(f"sweep '{spec.name}': {len(configs)} runs, {len(configs) - len(todo)} already in {db.path}, "
                      f"{len(todo)} to train ({backend.value}, {workers} workers)", highlight=False, soft_wrap=True)
            if dry_run:
                for cfg in todo:
                    flat = _flatten(cfg.model_dump(mode="json"))
                    out.print(f"{cfg.config_hash()}  " + "  ".join(f"{k}={flat[k]}" for k in spec.axes if k in flat),
                              highlight=False, soft_wrap=True)
                return
            with SweepProgress(spec.name, len(todo), err) as progress:
                try:
                    outcome = run_sweep(todo, db, workers=workers, backend=backend.value, address=address,
                                        on_result=progress.advance, pool=pool, threads=threads)
                except RuntimeError as problem:
                    err.print(f"error: {problem}", markup=False, highlight=False, soft_wrap=True)
                    raise typer.Exit(BAD_INPUT) from None
    except KeyboardInterrupt:
        left = len(pending(todo, db))
        _interrupted(f"{len(todo) - left} of {len(todo)} runs finished", db.path)
    failed = len(outcome.failed)
    out.print(f"sweep '{spec.name}' done: {len(outcome.results)} trained in {outcome.seconds:.1f} s, "
              f"{failed} failed or diverged; {len(db)} runs in {db.path}", highlight=False, soft_wrap=True)


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


def _interrupted(finished: str, path: Path) -> NoReturn:
    err.print(f"interrupted: {finished} and stored in {path}; rerun the same command to resume",
              markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(INTERRUPTED)


def _parse_ints(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option} expects comma-separated integers, got '{text}'") from None
    if not values:
        raise ConfigError(f"{option} expects at least one integer")
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
) -> None:
    """Smallest width that solves the task at each length (bisection, reusing stored runs), and its growth law."""
    from sepbench.store import Store

    db = Store(store)
    before = len(db)
    try:
        with _warm_pool(workers) as pool:
            from sepbench.sweep.progress import SweepProgress
            from sepbench.sweep.search import SolvedRule, fit_log_law, fit_power_law, search_min_width

            with bad_input_exits():
                try:
                    rule = SolvedRule(threshold, k, m)
                except ValueError as problem:
                    raise ConfigError(str(problem)) from None
                grid_lengths, grid_widths = _parse_ints(lengths, "--lengths"), _parse_ints(widths, "--widths")
                data = load_yaml(config) if config else {}
                flags = {"task.name": task, "model.name": model, "model.layers": layers, "train.steps": steps,
                         "device": device}
                base = apply_overrides(apply_overrides(data, {k: v for k, v in flags.items() if v is not None}),
                                       parse_assignments(assignments))
                for n in grid_lengths:
                    for w in grid_widths:
                        RunConfig.build(apply_overrides(base, {"task.length": n, "model.width": w}))
                threads = _threads()
            most_visited = len(set(grid_widths)).bit_length()
            progress = SweepProgress("minwidth", len(set(grid_lengths)) * most_visited * m, err, live=False)
            search = search_min_width(base, grid_lengths, grid_widths, rule, db, workers=workers,
                                      on_result=progress.advance, pool=pool, threads=threads)
    except KeyboardInterrupt:
        _interrupted(f"{len(db) - before} runs finished", db.path)
    cfg = RunConfig.build(apply_overrides(base, {"task.length": grid_lengths[0], "model.width": grid_widths[0]}))
    depth = f"{cfg.model.layers} layer{'s' if cfg.model.layers > 1 else ''}"
    table = Table(title=f"smallest width: {model}, {depth}, on {task}; solved = {rule}")
    table.add_column("length N", justify="right")
    table.add_column("smallest width", justify="right")
    table.add_column("widths evaluated")
    for n, w in search.smallest.items():
        tried = ", ".join(f"{x}:{'solved' if ok else 'no'}" for x, ok in sorted(search.checked[n].items()))
        table.add_row(str(n), "none in grid" if w is None else str(w), tried)
    out.print(table)
    try:
        power, log = fit_power_law(search.smallest, resamples=resamples), fit_log_law(search.smallest)
    except ValueError as problem:
        out.print(f"no fit: {problem}", highlight=False)
    else:
        out.print(f"width ~ c * N^alpha: alpha = {power.alpha:.3f}, {power.level:.0%} bootstrap CI "
                  f"[{power.alpha_low:.3f}, {power.alpha_high:.3f}] ({power.resamples} resamples), c = {power.c:.3g}, "
                  f"rmse = {power.rmse:.3g}", highlight=False, soft_wrap=True)
        out.print(f"width ~ a + b * log N: a = {log.a:.3g}, b = {log.b:.3g}, rmse = {log.rmse:.3g}",
                  highlight=False, soft_wrap=True)
    out.print(f"trained {search.trained} new runs; {len(db)} runs in {db.path}", highlight=False, soft_wrap=True)


@app.command("report")
def report(
    out_dir: Path = typer.Option(..., "--out", help="directory for index.html, figures/*.png|svg and min_flops.csv"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
    threshold: float = typer.Option(0.99, help="accuracy a seed must reach to count as solved"),
    k: int = typer.Option(2, "--k", help="seeds that must reach it ..."),
    m: int = typer.Option(3, "--m", help="... out of this many"),
    flops_threshold: float = typer.Option(0.9, help="threshold of the min-FLOPs table (Yang et al. 2024, Table 2)"),
) -> None:
    """Write a self-contained HTML report and every figure as PNG and SVG from the stored runs."""
    from sepbench.report import write_report
    from sepbench.store import Store
    from sepbench.sweep.search import SolvedRule

    with bad_input_exits():
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
    config_dir: Optional[Path] = typer.Option(None, help="folder of figure configs [default: configs/deng2023]"),
    lengths: Optional[str] = typer.Option(None, help="learned only: comma-separated n values"),
    steps: Optional[int] = typer.Option(None, min=1, help="learned only: training steps per classifier"),
    device: str = typer.Option("auto", help="auto (CUDA when present), cpu, cuda, cuda:N"),
    store: Optional[Path] = typer.Option(None, envvar="SEPBENCH_STORE", help="SQLite store [default: ./sepbench.db]"),
) -> None:
    """Deng et al. softmax vs linear attention (definitions reconstructed, ranges ours): one figure's sweep."""
    from sepbench.store import Store
    from sepbench.theory.softmax_vs_linear import figures

    with bad_input_exits():
        where = _device(device)
        if figure == "learned":
            learned = _learned_config(lengths, steps, seed)
        else:
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


def main() -> None:
    try:
        app()
    finally:
        gc.freeze()  # the interpreter's last collections would otherwise walk every torch object: ~0.3-1.5 s at exit


if __name__ == "__main__":
    main()
