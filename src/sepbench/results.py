"""Stored runs as flat rows (one per run) and as cells aggregated over seeds, for ``sepbench results``.

A run *trained* when its status is ``solved`` or ``completed``. Failed, diverged and pruned runs are
counted on their own and never enter an accuracy mean or the solved count.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from sepbench.config import WATCH_FIELDS, ConfigError
from sepbench.files import whole_target
from sepbench.train.result import RunResult

if TYPE_CHECKING:
    from sepbench.store import Running

TRAINED = ("solved", "completed")
THRESHOLD = "config.train.threshold"
NOT_TRAINED = ("failed", "diverged", "pruned")

SUMMARY = ["config_hash", "task", "model", "length", "layers", "width", "seed", "lr", "status", "accuracy", "loss"]
DETAILS = ["steps", "steps_to_threshold", "seconds_to_threshold", "wall_seconds", "cpu_seconds", "parameters",
           "state_floats",
           "device", "compute_paths", "version", "git_commit", "created_at", "error", "resumed_from"]
CELL_KEYS = ["cell", "task", "model", "length", "layers", "width", "lr"]


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings become dotted keys; lists become JSON text, so every value fits one CSV/Parquet cell."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, (list, tuple)):
            flat[f"{prefix}{key}"] = json.dumps(value)
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def cell_hash(result: RunResult) -> str:
    """Names the seeds of one configuration: everything but the seed and the device."""
    return result.config.cell_hash()


def _metric_order(name: str) -> tuple[int, str, int]:
    base, _, at = name.partition("@")
    return ({"accuracy": 0, "loss": 1}.get(base, 2), base, int(at) if at.isdigit() else -1)


def run_rows(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run: the summary, every final metric (``accuracy@N`` included), the run's details, its cell
    (``cell_hash``) and its config as ``config.section.field`` columns (all but the unstored ``WATCH_FIELDS``)."""
    rows = []
    for r in results:
        cfg = r.config
        row = {"config_hash": r.config_hash, "cell": cell_hash(r), "task": cfg.task.name, "model": cfg.model.name,
               "length": cfg.task.length, "layers": cfg.model.layers, "width": cfg.model.width, "seed": cfg.seed,
               "lr": cfg.train.lr, "status": r.status}
        row.update({name: float(value) for name, value in r.metrics.items()})
        row.update({name: getattr(r, name) for name in DETAILS})
        row["parameters"] = r.parameters or None  # a run that failed before its model was built counted none
        row["compute_paths"] = ",".join(f"{name}={path}" for name, path in sorted(r.compute_paths.items()))
        row.update(flatten(cfg.model_dump(mode="json", exclude={"train": WATCH_FIELDS}), "config."))  # never stored
        rows.append(row)
    metrics = sorted({m for r in results for m in r.metrics} | {"accuracy", "loss"}, key=_metric_order)
    config = sorted({c for row in rows for c in row if c.startswith("config.")})
    columns = [*SUMMARY[:9], *metrics, *DETAILS, "cell", *config]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({**{m: float for m in metrics}, "parameters": "Int64", "state_floats": "Int64"})


RUNNING = ["config_hash", "task", "model", "length", "layers", "width", "lr", "seed", "step", "steps", "accuracy",
           "seconds", "eta_seconds", "state", "updated_at", "host", "pid", "resumed_from"]


def running_rows(running: Sequence[Running]) -> pd.DataFrame:
    """One row per run in training: its step of its steps, latest accuracy, seconds so far and ETA (at its mean
    seconds a step so far; an early stop ends it sooner). ``state``: training, stopped (its process on this host
    is gone: resume it by running the same command) or unknown (another host)."""
    rows = []
    for entry in running:
        r, cfg = entry.result, entry.result.config
        last = r.curve[-1] if r.curve else None
        seconds = last.seconds if last else np.nan
        eta = seconds / last.step * (cfg.train.steps - last.step) if last and last.step else np.nan
        rows.append({"config_hash": r.config_hash, "task": cfg.task.name, "model": cfg.model.name,
                     "length": cfg.task.length, "layers": cfg.model.layers, "width": cfg.model.width,
                     "lr": cfg.train.lr, "seed": cfg.seed, "step": r.steps, "steps": cfg.train.steps,
                     "accuracy": last.accuracy if last else np.nan, "seconds": seconds, "eta_seconds": eta,
                     "state": {True: "training", False: "stopped", None: "unknown"}[entry.alive],
                     "updated_at": entry.updated_at, "host": entry.host, "pid": entry.pid,
                     "resumed_from": r.resumed_from})
    return pd.DataFrame(rows, columns=RUNNING)


def ran_its_budget(result: RunResult) -> bool:
    """The run trained every step: completed, or solved without an early stop (a run that reaches its
    ``train.threshold`` with ``early_stop`` off is stored as solved and trains on)."""
    train = result.config.train
    return result.status == "completed" or (result.status == "solved" and
                                            (not train.early_stop or result.steps >= train.steps))


def stopped_early(result: RunResult) -> bool:
    """The run stopped at its ``train.threshold`` before its last step, so its accuracy is where it stopped."""
    return result.status == "solved" and not ran_its_budget(result)


def stopped_short(results: Sequence[RunResult], threshold: float) -> list[RunResult]:
    """Runs that stopped early at a ``train.threshold`` below ``threshold`` without reaching it: judged at
    ``threshold`` they read unsolved because of their own early stop, not because the model could go no further."""
    return [r for r in results if stopped_early(r) and r.config.train.threshold < threshold
            and r.metrics.get("accuracy", 0.0) < threshold]


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """The final-metric columns of a ``run_rows`` frame, in display order."""
    start, stop = frame.columns.get_loc("status") + 1, frame.columns.get_loc(DETAILS[0])
    return list(frame.columns[start:stop])


def seed_cells(runs: pd.DataFrame, threshold: float | None = None) -> pd.DataFrame:
    """Per cell (every config field equal but the seed): runs, k of m solved, accuracy mean/min/max and counts of
    runs that did not train.

    ``solved`` counts trained runs whose final accuracy is >= ``threshold`` (None: the cell's own
    ``train.threshold``, the level its runs stop early at); ``trained`` is m. Means, minima
    and maxima are over trained runs only, so a cell whose runs all failed has no accuracy (NaN), never 0.
    """
    metrics = metric_columns(runs)
    config = [c for c in runs.columns if c.startswith("config.") and c != "config.seed"]
    rows = []
    for cell, group in runs.groupby("cell", sort=False):
        ok = group[group.status.isin(TRAINED)]
        first = group.iloc[0]
        row = {key: first[key] for key in CELL_KEYS}
        row.update({"runs": len(group), "seeds": ",".join(str(s) for s in sorted(group.seed)),
                    "solved": int((ok.accuracy >= (first[THRESHOLD] if threshold is None else threshold)).sum()),
                    "trained": len(ok)})
        row.update({status: int((group.status == status).sum()) for status in NOT_TRAINED})
        for stat in ("mean", "min", "max"):
            row[f"accuracy_{stat}"] = float(ok.accuracy.agg(stat)) if len(ok) else np.nan
        row["loss_mean"] = float(ok.loss.mean()) if len(ok) else np.nan
        row.update({f"{m}_mean": float(ok[m].mean()) if len(ok) else np.nan
                    for m in metrics if m not in ("accuracy", "loss")})
        row.update({"parameters": group.parameters.max(), "state_floats": group.state_floats.max(),
                    "wall_seconds": float(group.wall_seconds.sum()),
                    "errors": "; ".join(dict.fromkeys(e for e in group.error if isinstance(e, str) and e)) or None,
                    "config_hashes": ",".join(group.config_hash)})
        row.update({c: first[c] for c in config})
        rows.append(row)
    frame = pd.DataFrame(rows)
    if rows:
        frame = frame.astype({"parameters": "Int64", "state_floats": "Int64"})
    return frame.sort_values(["task", "model", "layers", "width", "length", "lr"], ignore_index=True) if rows else frame


def not_trained_text(row: pd.Series | dict[str, Any]) -> str:
    """'1 diverged, 2 failed' for a ``seed_cells`` row; '' when every run trained."""
    return ", ".join(f"{int(row[s])} {s}" for s in NOT_TRAINED if row[s])


def write_frame(frame: pd.DataFrame, output: str, path: Path | None = None) -> None:
    """``frame`` as ``output`` (csv or json to stdout or ``path``; parquet to ``path``). A file appears whole or
    not at all."""
    if output == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("--format parquet needs pyarrow (pip install pyarrow)") from None
    if path is None:
        json_text = frame.to_json(orient="records", indent=2) + "\n"
        sys.stdout.write(frame.to_csv(index=False) if output == "csv" else json_text)
        return
    path = whole_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    try:
        if output == "parquet":
            frame.to_parquet(partial, index=False)
        elif output == "csv":
            frame.to_csv(partial, index=False)
        else:
            partial.write_text(frame.to_json(orient="records", indent=2) + "\n")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
