"""The analysis the papers did by eye: the solved rule, learning-rate selection, smallest solving width, FLOPs."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from sepbench.config import RunConfig, apply_overrides
from sepbench.store import Store
from sepbench.sweep.executors import OnResult, run_sweep
from sepbench.sweep.pool import WorkerPool
from sepbench.train.result import RunResult


@dataclass(frozen=True)
class SolvedRule:
    """Solved = accuracy >= ``threshold`` in at least ``k`` of ``m`` seeds (seeds 0..m-1 when searching)."""

    threshold: float = 0.99
    k: int = 2
    m: int = 3

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if not 1 <= self.k <= self.m:
            raise ValueError(f"need 1 <= k <= m, got k={self.k}, m={self.m}")

    def solved(self, accuracies: Sequence[float]) -> bool:
        return sum(a >= self.threshold for a in accuracies) >= self.k

    def __str__(self) -> str:
        return f"accuracy >= {self.threshold:g} in >= {self.k} of {self.m} seeds"


def cell_key(config: RunConfig) -> str:
    """Names a grid cell: the config without its seed and learning rate."""
    data = config.model_dump(mode="json", exclude={"device", "seed"})
    data["train"].pop("lr")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def runs_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run with the fields the analysis groups on."""
    rows = [{"cell": cell_key(r.config), "task": r.config.task.name, "model": r.config.model.name,
             "length": r.config.task.length, "layers": r.config.model.layers, "width": r.config.model.width,
             "lr": r.config.train.lr, "seed": r.config.seed, "status": r.status,
             "accuracy": r.accuracy if r.status != "failed" else 0.0, "config_hash": r.config_hash}
            for r in results]
    columns = ["cell", "task", "model", "length", "layers", "width", "lr", "seed", "status", "accuracy", "config_hash"]
    return pd.DataFrame(rows, columns=columns)


def select_lr(results: Sequence[RunResult], rule: SolvedRule = SolvedRule()) -> pd.DataFrame:
    """Per cell: the best learning rate (highest mean accuracy over seeds) and the median over learning rates.

    Both are kept, since a best-of over a tuning grid flatters a model that the median does not.
    """
    runs = runs_frame(results)
    columns = ["cell", "task", "model", "length", "layers", "width", "best_lr", "best_accuracy", "median_accuracy",
               "learning_rates", "seeds", "solved"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for cell, group in runs.groupby("cell", sort=False):
        per_lr = group.groupby("lr")["accuracy"].agg(["mean", list])
        best_lr = float(per_lr["mean"].idxmax())
        first = group.iloc[0]
        rows.append({"cell": cell, "task": first.task, "model": first.model, "length": int(first.length),
                     "layers": int(first.layers), "width": int(first.width), "best_lr": best_lr,
                     "best_accuracy": float(per_lr["mean"].max()), "median_accuracy": float(per_lr["mean"].median()),
                     "learning_rates": len(per_lr), "seeds": int(group.seed.nunique()),
                     "solved": rule.solved(per_lr.loc[best_lr, "list"])})
    return pd.DataFrame(rows, columns=columns).sort_values(["task", "model", "layers", "width", "length"],
                                                           ignore_index=True)


Judge = Callable[[dict[int, int]], dict[int, bool]]


def bisect_widths(widths: Sequence[int], keys: Sequence[int], judge: Judge
                  ) -> tuple[dict[int, int | None], dict[int, dict[int, bool]]]:
    """Bisection over the sorted grid for each key's smallest solving width, all keys in lockstep.

    Each round asks ``judge`` about one width per key still searching (so a round can train in parallel).
    Assumes success is monotone in width. Returns the width per key (None if even the largest fails) and
    every width evaluated per key.
    """
    grid = sorted(set(widths))
    bounds = {key: (0, len(grid)) for key in keys}
    checked: dict[int, dict[int, bool]] = {key: {} for key in keys}
    while open_ := {key: (lo + hi) // 2 for key, (lo, hi) in bounds.items() if lo < hi}:
        verdicts = judge({key: grid[mid] for key, mid in open_.items()})
        for key, mid in open_.items():
            checked[key][grid[mid]] = verdicts[key]
            lo, hi = bounds[key]
            bounds[key] = (lo, mid) if verdicts[key] else (mid + 1, hi)
    return {key: grid[lo] if lo < len(grid) else None for key, (lo, _) in bounds.items()}, checked


def smallest_solving(widths: Sequence[int], solves: Callable[[int], bool]) -> tuple[int | None, dict[int, bool]]:
    """``bisect_widths`` for one key: the smallest width for which ``solves`` holds, and the widths evaluated."""
    smallest, checked = bisect_widths(widths, [0], lambda asked: {0: solves(asked[0])})
    return smallest[0], checked[0]


@dataclass
class WidthSearch:
    """Smallest solving width per length, and the widths evaluated to find it."""

    rule: SolvedRule
    smallest: dict[int, int | None] = field(default_factory=dict)
    checked: dict[int, dict[int, bool]] = field(default_factory=dict)
    trained: int = 0


def search_min_width(base: dict[str, Any], lengths: Sequence[int], widths: Sequence[int], rule: SolvedRule,
                     store: Store, workers: int = 1, on_result: OnResult | None = None,
                     pool: WorkerPool | None = None, threads: int = 1) -> WidthSearch:
    """For each length, bisect ``widths``; a width is judged from seeds 0..m-1, reusing every stored run.

    All lengths bisect in lockstep, so each round's runs (one width per length, m seeds) train together. With
    several workers one pool of warm workers (``pool``, or one started here) serves every round.
    """
    if pool is None and workers > 1:
        with WorkerPool(workers) as own:
            return search_min_width(base, lengths, widths, rule, store, workers, on_result, own, threads)
    search = WidthSearch(rule=rule)

    def judge(asked: dict[int, int]) -> dict[int, bool]:
        configs = {length: [RunConfig.build(apply_overrides(base, {"task.length": length, "model.width": width,
                                                                   "seed": seed})) for seed in range(rule.m)]
                   for length, width in asked.items()}
        every = [cfg for group in configs.values() for cfg in group]
        done = run_sweep(every, store, workers=min(workers, len(every)), on_result=on_result, pool=pool, threads=threads)
        search.trained += len(done.results)
        accuracy = {r.config_hash: r.accuracy if r.status != "failed" else 0.0
                    for r in (store.get(cfg.config_hash()) for cfg in every)}
        return {length: rule.solved([accuracy[cfg.config_hash()] for cfg in group]) for length, group in configs.items()}

    search.smallest, search.checked = bisect_widths(widths, sorted(set(lengths)), judge)
    return search


@dataclass(frozen=True)
class PowerFit:
    """width ~ c * N^alpha, fitted in log-log space, with a percentile bootstrap interval on alpha."""

    c: float
    alpha: float
    alpha_low: float
    alpha_high: float
    level: float
    resamples: int
    rmse: float

    def predict(self, n: np.ndarray) -> np.ndarray:
        return self.c * np.asarray(n, dtype=float) ** self.alpha


@dataclass(frozen=True)
class LogFit:
    """width ~ a + b * log N, least squares in width; ``rmse`` in width units, as PowerFit's."""

    a: float
    b: float
    rmse: float

    def predict(self, n: np.ndarray) -> np.ndarray:
        return self.a + self.b * np.log(np.asarray(n, dtype=float))


def _distinct(points: dict[int, int | None]) -> tuple[np.ndarray, np.ndarray]:
    solved = {n: w for n, w in points.items() if w is not None}
    if len(solved) < 2:
        raise ValueError(f"a growth law needs a solving width at >= 2 lengths, got {len(solved)}")
    n = np.array(sorted(solved), dtype=float)
    return n, np.array([solved[int(x)] for x in n], dtype=float)


def fit_power_law(points: dict[int, int | None], resamples: int = 2000, level: float = 0.95, seed: int = 0) -> PowerFit:
    """Least squares of log width on log N; the interval resamples the (N, width) pairs."""
    n, w = _distinct(points)
    x, y = np.log(n), np.log(w)
    alpha, log_c = np.polyfit(x, y, 1)
    rmse = float(np.sqrt(np.mean((w - np.exp(log_c + alpha * x)) ** 2)))
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        idx = rng.integers(0, len(x), len(x))
        if np.unique(x[idx]).size >= 2:
            draws.append(np.polyfit(x[idx], y[idx], 1)[0])
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return PowerFit(float(np.exp(log_c)), _snap(alpha), _snap(low), _snap(high), level, len(draws), rmse)


def _snap(value: float, tolerance: float = 1e-9) -> float:
    """Round-off around an exact 0 (a flat law) becomes 0.0, so it never prints as -0.000."""
    return 0.0 if abs(value) < tolerance else float(value)


def fit_log_law(points: dict[int, int | None]) -> LogFit:
    n, w = _distinct(points)
    b, a = np.polyfit(np.log(n), w, 1)
    return LogFit(float(a), float(b), float(np.sqrt(np.mean((w - (a + b * np.log(n))) ** 2))))


def min_width_table(results: Sequence[RunResult], rule: SolvedRule = SolvedRule()) -> pd.DataFrame:
    """From stored runs alone: per (task, model, layers, length), the smallest width whose best-lr cell solves."""
    cells = select_lr(results, rule)
    columns = ["task", "model", "layers", "length", "min_width", "widths_tried"]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (task, model, layers, length), group in cells.groupby(["task", "model", "layers", "length"]):
        solving = group[group.solved].width
        rows.append({"task": task, "model": model, "layers": layers, "length": length,
                     "min_width": int(solving.min()) if len(solving) else None, "widths_tried": len(group)})
    return pd.DataFrame(rows, columns=columns)


@lru_cache(maxsize=256)
def _forward_flops(config_json: str, length: int) -> int:
    from sepbench.models import build_model
    from sepbench.models.accounting import forward_flops
    from sepbench.tasks import build_task

    config = RunConfig.model_validate_json(config_json)
    task = build_task(config.task.name, length, config.task.options)
    tokens = task.max_seq_len(length)
    return forward_flops(build_model(config.model, task.vocab_size, tokens), tokens)


def estimate_forward_flops(config: RunConfig, length: int | None = None) -> int:
    """FLOPs of one forward pass over one sequence of a length-N instance (2 per multiply-accumulate).

    The closed form of ``models.accounting.forward_flops`` (attention over the full computed square
    included), over the task's whole token sequence.
    """
    return _forward_flops(config.model_copy(update={"device": "cpu"}).model_dump_json(), length or config.task.length)


def estimate_paper_flops(config: RunConfig) -> float:
    """FLOPs as Yang et al. 2024 count them in Table 2 (no attention term; see ``accounting.paper_flops``)."""
    from sepbench.models.accounting import paper_flops

    return paper_flops(config.model.name, config.model.width, config.model.layers, config.task.length)


def min_flops_table(results: Sequence[RunResult], rule: SolvedRule = SolvedRule()) -> pd.DataFrame:
    """Per (task, model, length): the fewest forward FLOPs among solving cells (Yang et al. 2024, Table 2)."""
    cells = select_lr(results, rule)
    by_cell = {cell_key(r.config): r.config for r in results}
    columns = ["task", "model", "length", "layers", "width", "gflops", "paper_gflops"]
    if cells.empty or not cells.solved.any():
        return pd.DataFrame(columns=columns)
    solved = cells[cells.solved].copy()
    solved["gflops"] = [estimate_forward_flops(by_cell[c]) / 1e9 for c in solved.cell]
    solved["paper_gflops"] = [estimate_paper_flops(by_cell[c]) / 1e9 for c in solved.cell]
    best = solved.loc[solved.groupby(["task", "model", "length"]).gflops.idxmin()]
    return best[columns].sort_values(["task", "model", "length"], ignore_index=True)
