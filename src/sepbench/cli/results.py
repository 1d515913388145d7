"""``sepbench results``: the stored runs as a table of cells or runs, as CSV, JSON or Parquet, or those training."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table
from rich.text import Text

from sepbench.cli.app import bad_input_exits, out, print_whole, warn, warn_stopped_short, warn_unreadable
from sepbench.cli.options import checkpoints_option, require_folder, store_option
from sepbench.config import ConfigError
from sepbench.files import NotARegularFile, whole_target
from sepbench.train.keeping import checkpoint_file
from sepbench.wording import counted

if TYPE_CHECKING:
    from sepbench.store import Store


class ResultsFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


RUN_VIEW = {"config_hash": "config hash", "task": "task", "model": "model", "length": "N", "layers": "layers",
            "width": "width", "lr": "lr", "seed": "seed", "status": "status"}
CELL_VIEW = {"cell": "cell", "task": "task", "model": "model", "length": "N", "layers": "layers", "width": "width",
             "lr": "lr", "runs": "runs", "seeds": "seeds"}


def results(
    store: Optional[Path] = store_option(),
    output: ResultsFormat = typer.Option(ResultsFormat.table, "--format", help="table, csv, json or parquet"),
    out_file: Optional[Path] = typer.Option(None, "--out", help="write csv, json or parquet to this file "
                                            "[default: stdout; parquet needs it]"),
    task: Optional[str] = typer.Option(None, help="only this task"),
    model: Optional[str] = typer.Option(None, help="only this model"),
    by_seed: bool = typer.Option(False, "--by-seed", help="one row per run instead of one per cell over seeds"),
    threshold: Optional[float] = typer.Option(None, help="final accuracy a run needs to count as solved in a cell's "
                                              "k/m [default: the cell's own train.threshold]"),
    running: bool = typer.Option(False, "--running", help="the runs in training instead: step, latest accuracy, ETA"),
    discard: list[str] = typer.Option([], "--discard", metavar="HASH",
                                      help="with --running: forget a stopped run, its row and its checkpoint, so its "
                                      "command trains it from step 0 (repeatable)"),
    checkpoints: Optional[Path] = checkpoints_option(),
) -> None:
    """Show the stored runs: one row per cell (every config field equal but the seed) aggregated over its seeds,
    or one row per run with --by-seed; or, with --running, the runs in training (--discard forgets stopped ones)."""
    from sepbench.results import run_rows, running_rows, seed_cells, write_frame
    from sepbench.store import Store

    with bad_input_exits():
        if out_file is not None:
            require_folder(out_file.parent, out_file)
        db = Store(store)
        if not db.path.exists():
            raise FileNotFoundError(f"no store at {db.path}; run `sepbench run` or `sepbench sweep` first, or pass "
                                    "--store PATH")
        if discard and not running:
            raise ConfigError("--discard forgets runs in training; add --running")
        narrowed = task is not None or model is not None or out_file is not None
        if discard and (narrowed or output is not ResultsFormat.table):
            raise ConfigError("--discard forgets the runs its hashes name and shows none; --task, --model, --format "
                              "and --out do not go with it")
        if threshold is not None and not 0 < threshold <= 1:
            raise ConfigError(f"--threshold must be in (0, 1], got {threshold}")
        if output is ResultsFormat.parquet and out_file is None:
            raise ConfigError("--format parquet needs --out FILE")
        if output is ResultsFormat.table and out_file is not None:
            raise ConfigError("--out writes csv, json or parquet; add --format csv, json or parquet")
        if out_file is not None:
            try:
                whole_target(out_file)
            except NotARegularFile as problem:
                raise ConfigError(f"--out {problem}") from None
        if running and (by_seed or threshold is not None):
            raise ConfigError("--by-seed and --threshold show stored runs; --running lists each run in training, "
                              "without them")
        where = {k: v for k, v in {"task": task, "model": model}.items() if v is not None}
        if discard:
            _discard(db, discard, Path(checkpoints) if checkpoints is not None else db.checkpoints)
            return
        if running:
            chosen = [r for r in db.running() if task in (None, r.result.config.task.name)
                      and model in (None, r.result.config.model.name)]
            frame = running_rows(chosen)
            if output is not ResultsFormat.table:
                write_frame(frame, output.value, out_file)
            else:
                _print_running(frame, db.path)
            return
        found = db.results(**where)
        runs = run_rows(found)
    warn_unreadable(db)
    warn_stopped_short(found, threshold, "--threshold")
    if runs.empty:
        matching = f"runs match {', '.join(f'{k}={v}' for k, v in where.items())}" if where else "runs"
        stored = db.query()
        held = "; ".join(f"{key}s stored: {', '.join(sorted(set(stored[key])))}" for key in where if len(stored))
        warn(f"no {matching} in {db.path} ({counted(len(db), 'run')} stored{'; ' + held if held else ''})")
        raise typer.Exit(1)
    runs = runs.sort_values(["task", "model", "layers", "width", "length", "lr", "seed"], kind="stable",
                            ignore_index=True)
    frame = runs if by_seed else seed_cells(runs, threshold)
    if output is ResultsFormat.table:
        _print_results(frame, runs, by_seed, threshold, db.path)
        return
    with bad_input_exits():
        write_frame(frame, output.value, out_file)
    if out_file is not None:
        unit = counted(len(frame), "run") if by_seed else f"{counted(len(frame), 'cell')} ({counted(len(runs), 'run')})"
        warn(f"wrote {unit} to {out_file}")


def _discard(db: Store, hashes: list[str], folder: Path) -> None:
    """Forget stopped runs: their checkpoints in ``folder``, then their rows. Every hash, and that the store can be
    written, is checked before anything is removed. A row this code cannot read is forgotten as it is."""
    entries = {entry.result.config_hash: entry for entry in db.running()}
    unreadable = dict(db.unreadable)
    for key in hashes:
        entry = entries.get(key)
        if entry is None and key not in unreadable:
            listed = ", ".join(sorted([*entries, *unreadable])) or "none"
            raise ConfigError(f"--discard {key}: no run in training with that config hash in {db.path} (there: "
                              f"{listed}); `sepbench results --running` lists them")
        if entry is not None and entry.alive is None:
            raise ConfigError(f"--discard {key}: its process ran on host {entry.host}, so whether it still trains "
                              "is not known here; discard it on that host")
        if entry is not None and entry.alive:
            raise ConfigError(f"--discard {key}: still training (pid {entry.pid}); stop it first (Ctrl-C saves a "
                              "checkpoint), then discard it")
    db.check_writable()
    chosen = list(dict.fromkeys(hashes))
    kept = {key: checkpoint_file(folder, key).exists() for key in chosen}
    for key in chosen:
        checkpoint_file(folder, key).unlink(missing_ok=True)
    db.discard_running(chosen)
    for key in chosen:
        entry = entries.get(key)
        where = (f"stopped at step {entry.result.steps} of {entry.result.config.train.steps}" if entry is not None
                 else f"its row unreadable: {unreadable[key]}")
        gone = ("its row and its checkpoint are gone" if kept[key] else
                f"its row is gone; no checkpoint of it was in {folder} (--checkpoints names the folder its run used)")
        out.print(f"discarded run {key} ({where}): {gone}; its command trains it from step 0", markup=False,
                  highlight=False, soft_wrap=True)


def _print_running(frame, path: Path) -> None:
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
    print_whole(table)
    out.print(f"{counted(len(frame), 'run')} in training in {path}; ETA at each run's mean step time so far "
              "(an early stop ends a run sooner); a stopped run resumes from its checkpoint when its command runs "
              "again (--discard HASH forgets one that no command will resume)",
              markup=False, highlight=False, soft_wrap=True)


def _cell_text(value: object, column: str) -> str:
    import pandas as pd

    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}" if column.startswith("accuracy") or column.endswith("_mean") else f"{value:.6g}"
    return str(value)


def _note(value: object) -> str:
    return value if isinstance(value, str) else ""


def _print_results(frame, runs, by_seed: bool, threshold: float | None, path: Path) -> None:
    """A table whose every column shows whole values: the console grows to the table's width when it must."""
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
    print_whole(table)
    if by_seed:
        summary = f"{counted(len(frame), 'run')} in {path}"
    else:
        line = f"{threshold:g}" if threshold is not None else "the cell's own train.threshold"
        summary = (f"{counted(len(frame), 'cell')} ({counted(len(runs), 'run')}) in {path}; solved = k/m trained "
                   f"seeds with final accuracy >= {line}; {', '.join(NOT_TRAINED)} runs are counted apart, never as "
                   "unsolved; --by-seed for one row per run")
    out.print(summary, markup=False, highlight=False, soft_wrap=True)
