"""The analysis the papers did by eye: the solved rule, learning-rate selection, smallest solving width, FLOPs."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from sepbench.config import RunConfig, apply_overrides
from sepbench.results import TRAINED
from sepbench.store import Store
from sepbench.sweep.cells import cell_key, cut_rates  # noqa: F401  (cell_key: part of the search's API)
from sepbench.sweep.executors import OnResult, Reuse, run_sweep
from sepbench.sweep.pool import WorkerPool
from sepbench.train.result import RunResult
from sepbench.wording import counted


@dataclass(frozen=True)
class SolvedRule:
    """Solved = accuracy >= ``threshold`` in at least ``k`` of ``m`` seeds (seeds 0..m-1 when searching).

    ``threshold=None`` takes each cell's own ``train.threshold``, the level its runs stop early at (``for_cell``)."""

    threshold: float | None = 0.99
    k: int = 2
    m: int = 3

    def __post_init__(self) -> None:
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if not 1 <= self.k <= self.m:
            raise ValueError(f"need 1 <= k <= m, got k={self.k}, m={self.m}")

    def for_cell(self, cell_threshold: float) -> SolvedRule:
        """The rule a cell whose runs have ``train.threshold == cell_threshold`` is judged by."""
        return self if self.threshold is not None else SolvedRule(cell_threshold, self.k, self.m)

    def solved(self, accuracies: Sequence[float]) -> bool:
        return sum(a >= self._level() for a in accuracies) >= self.k

    def verdict(self, accuracies: Sequence[float]) -> str:
        """'solved', 'unsolved' (the seeds still missing from m could not make k) or 'undecided' (they could)."""
        hits = sum(a >= self._level() for a in accuracies)
        if hits >= self.k:
            return "solved"
        return "unsolved" if hits + max(0, self.m - len(accuracies)) < self.k else "undecided"

    def _level(self) -> float:
        if self.threshold is None:
            raise ValueError("a rule at each cell's own threshold judges a cell only through for_cell")
        return self.threshold

    def levels(self, results: Sequence[RunResult]) -> set[float]:
        """The thresholds the rule judges the trained runs of ``results`` at."""
        if self.threshold is not None:
            return {self.threshold}
        return {r.config.train.threshold for r in results if r.status in TRAINED}

    def judges_like(self, other: SolvedRule, results: Sequence[RunResult]) -> bool:
        """Whether the two rules judge every cell of ``results`` alike."""
        return (self.k, self.m) == (other.k, other.m) and self.levels(results) == other.levels(results)

    def text_for(self, results: Sequence[RunResult]) -> str:
        """The rule in words; at each cell's own threshold, with the thresholds the trained runs have."""
        levels = sorted(self.levels(results))
        if self.threshold is not None or not levels:
            return str(self)
        return f"{self} ({'here ' if len(levels) > 1 else ''}{', '.join(f'{t:g}' for t in levels)})"

    def __str__(self) -> str:
        level = f"{self.threshold:g}" if self.threshold is not None else "the cell's own train.threshold"
        return f"accuracy >= {level} in >= {self.k} of {self.m} seeds"


def runs_frame(results: Sequence[RunResult]) -> pd.DataFrame:
    """One row per run with the fields the analysis groups on. ``trained`` is False for failed, diverged and
    pruned runs, whose accuracy is NaN: they never count as a seed that did not reach the threshold."""
    rows = [{"cell": cell_key(r.config), "task": r.config.task.name, "model": r.config.model.name,
             "length": r.config.task.length, "layers": r.config.model.layers, "width": r.config.model.width,
             "lr": r.config.train.lr, "seed": r.config.seed, "threshold": r.config.train.threshold,
             "status": r.status, "trained": r.status in TRAINED,
             "accuracy": r.metrics.get("accuracy", np.nan) if r.status in TRAINED else np.nan,
             "error": r.error, "config_hash": r.config_hash}
            for r in results]
    columns = ["cell", "task", "model", "length", "layers", "width", "lr", "seed", "threshold", "status", "trained",
               "accuracy", "error", "config_hash"]
    return pd.DataFrame(rows, columns=columns).astype({"accuracy": float})


def _failure(group: pd.DataFrame) -> str:
    """'2 diverged, 1 failed (first error)' for runs none of which trained."""
    errors = [e for e in group.error if isinstance(e, str) and e]
    return ", ".join(f"{n} {s}" for s, n in group.status.value_counts().items()) + (f" ({errors[0]})" if errors else "")


def select_lr(results: Sequence[RunResult], rule: SolvedRule = SolvedRule(None)) -> pd.DataFrame:
    """Per cell: the best learning rate (highest mean accuracy over seeds) and the median over learning rates.

    Both are kept, since a best-of over a tuning grid flatters a model that the median does not. Only runs that
    trained count: a diverged learning rate is a losing one while another learning rate of the cell trained, and a
    cell none of whose runs trained has verdict 'failed' (its accuracies NaN). ``verdict`` is the rule's at the best
    learning rate ('solved', 'unsolved', 'undecided' while too few seeds are stored, or 'failed'); ``reason`` says
    why a cell is undecided or failed, and ``failure`` names the statuses of a failed cell's runs. Runs pruned by a
    learning-rate search are left out: they are neither the best nor unsolved; so are the other seeds of a rate cut
    on some seed (a settling of its tie stopped part-way), which is not ranked on fewer seeds than the rest. A cell
    every rate of which was cut on some seed (a search stopped part-way) is undecided.
    """
    cut = cut_rates(results)
    runs = runs_frame(results)
    columns = ["cell", "task", "model", "length", "layers", "width", "best_lr", "best_accuracy", "median_accuracy",
               "learning_rates", "seeds", "solved", "verdict", "reason", "runs", "not_trained", "failure"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for cell, whole in runs.groupby("cell", sort=False):
        first = whole.iloc[0]
        group = whole[[(cell, lr) not in cut for lr in whole.lr]]
        row = {"cell": cell, "task": first.task, "model": first.model, "length": int(first.length),
               "layers": int(first.layers), "width": int(first.width), "runs": len(group),
               "not_trained": int((~group.trained).sum()), "failure": ""}
        if group.empty:
            rows.append({**row, "best_lr": np.nan, "best_accuracy": np.nan, "median_accuracy": np.nan,
                         "learning_rates": 0, "seeds": 0, "solved": False, "verdict": "undecided",
                         "reason": f"every learning rate of {whole.lr.nunique()} was cut by a search on some seed"})
            continue
        trained = group[group.trained]
        if trained.empty:
            rows.append({**row, "best_lr": np.nan, "best_accuracy": np.nan, "median_accuracy": np.nan,
                         "learning_rates": int(group.lr.nunique()), "seeds": 0, "solved": False, "verdict": "failed",
                         "reason": _failure(group), "failure": "/".join(sorted(set(group.status)))})
            continue
        per_lr = trained.groupby("lr")["accuracy"].agg(["mean", list])
        best_lr = float(per_lr["mean"].idxmax())
        accuracies = per_lr.loc[best_lr, "list"]
        cell_rule = rule.for_cell(float(first.threshold))
        verdict = cell_rule.verdict(accuracies)
        reason = f"needs {rule.m} seeds, has {len(accuracies)}" if verdict == "undecided" else ""
        crashed = _crashes_that_could_solve(group, cell_rule) if verdict == "unsolved" else ""
        if crashed:
            verdict, reason, row["failure"] = "failed", crashed, "failed"
        rows.append({**row, "best_lr": best_lr, "best_accuracy": float(per_lr["mean"].max()),
                     "median_accuracy": float(per_lr["mean"].median()), "learning_rates": len(per_lr),
                     "seeds": len(accuracies), "solved": verdict == "solved", "verdict": verdict, "reason": reason})
    return pd.DataFrame(rows, columns=columns).sort_values(["task", "model", "layers", "width", "length"],
                                                           ignore_index=True)


def _crashes_that_could_solve(group: pd.DataFrame, rule: SolvedRule) -> str:
    """Why an unsolved cell is not decided: a learning rate whose failed runs (a crash, out of memory: no result
    about learning) would solve it had they reached accuracy 1; '' if none would."""
    for lr, runs in group.groupby("lr"):
        crashed = runs[runs.status == "failed"]
        if not crashed.empty and rule.verdict([*runs.accuracy.dropna(), *[1.0] * len(crashed)]) != "unsolved":
            return f"lr {lr:g}: {_failure(crashed)}"
    return ""


def why_unsolved(cells: pd.DataFrame) -> str:
    """Why none of ``select_lr`` rows ``cells`` is solved: counts of unsolved, undecided and failed cells."""
    parts = []
    for verdict in ("unsolved", "undecided", "failed"):
        these = cells[cells.verdict == verdict]
        if these.empty:
            continue
        reasons = sorted(set(r for r in these.reason if r))
        detail = f" ({'; '.join(reasons[:3])}{'; ...' if len(reasons) > 3 else ''})" if reasons else ""
        parts.append(f"{counted(len(these), f'{verdict} cell')}{detail}")
    return ", ".join(parts) if parts else "no runs"


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
    """Smallest solving width per length, the widths evaluated to find it, and the widths whose verdict failed
    runs left open (length -> width -> reason); bisection moves past those as if unsolved, so a smallest width
    above a failed one is an upper bound."""

    rule: SolvedRule
    smallest: dict[int, int | None] = field(default_factory=dict)
    checked: dict[int, dict[int, bool]] = field(default_factory=dict)
    failed: dict[int, dict[int, str]] = field(default_factory=dict)
    trained: int = 0
    steps: int = 0
    unreadable: dict[str, str] = field(default_factory=dict)
    """config hash -> reason of stored rows this code could not read, trained again"""

    def undetermined_below(self, length: int) -> list[int]:
        """Failed widths under the smallest solving width found at ``length`` (all of them when none solved)."""
        found = self.smallest.get(length)
        return sorted(w for w in self.failed.get(length, {}) if found is None or w < found)

    def left_out(self, widths: Sequence[int]) -> dict[int, str]:
        """The lengths whose smallest width in the grid ``widths`` is not exact, so no growth fit may use them,
        each with its reason: a failed width leaves it open, it is censored at the grid's smallest width, or no
        width solved."""
        lowest = min(widths)
        return {n: "a failed width leaves it open" if self.undetermined_below(n) else
                f"censored at the grid's smallest width {lowest}" if w == lowest else "no width solved"
                for n, w in self.smallest.items() if w is None or w == lowest or self.undetermined_below(n)}

    def exact(self, widths: Sequence[int]) -> dict[int, int]:
        """The smallest widths a growth fit may use (length -> width): every length not ``left_out``."""
        left = self.left_out(widths)
        return {n: w for n, w in self.smallest.items() if n not in left}


def search_min_width(base: dict[str, Any], lengths: Sequence[int], widths: Sequence[int], rule: SolvedRule,
                     store: Store, workers: int = 1, on_result: OnResult | None = None,
                     reuse: Reuse = Reuse(), lrs: Sequence[float] | None = None, lr_search: str = "grid",
                     eta: float = 2.0, pool: WorkerPool | None = None, threads: int = 1,
                     finalists: int | None = None) -> WidthSearch:
    """For each length, bisect ``widths``; a width is judged from seeds 0..m-1, reusing every stored run.

    With ``lrs``, each width tries every learning rate (``lr_search``: the full grid, or successive halving with
    ``finalists`` learning rates trained to the budget, by default ``halving.FINALISTS``) and is judged as
    ``select_lr`` judges a cell. All lengths bisect in lockstep, so each round's runs (one width per length)
    train together; with several workers one pool of warm workers (``pool``, or one started here) serves every
    round of a grid search. A width ``select_lr`` judges failed (no run trained, or a learning rate's crashed
    runs could have solved it) is neither solved nor unsolved: it is recorded in ``failed`` with the reason.
    """
    if lr_search not in ("grid", "halving"):
        raise ValueError(f"lr_search must be grid or halving, got '{lr_search}'")
    if pool is None and workers > 1 and lr_search == "grid":
        with WorkerPool(workers) as own:
            return search_min_width(base, lengths, widths, rule, store, workers, on_result, reuse=reuse, lrs=lrs,
                                    pool=own, threads=threads)
    search = WidthSearch(rule=rule)
    lr_points = [{"train.lr": lr} for lr in lrs] if lrs else [{}]

    def judge(asked: dict[int, int]) -> dict[int, bool]:
        configs = {length: [RunConfig.build(apply_overrides(base, {"task.length": length, "model.width": width,
                                                                   "seed": seed, **lr}))
                            for lr in lr_points for seed in range(rule.m)]
                   for length, width in asked.items()}
        every = [cfg for group in configs.values() for cfg in group]
        if lr_search == "halving":
            from sepbench.sweep.halving import FINALISTS, run_halving

            outcome = run_halving(every, store, workers=workers, eta=eta, on_result=on_result,
                                  finalists=finalists or FINALISTS, reuse=reuse)
            search.steps += outcome.steps
        else:
            outcome = run_sweep(every, store, workers=min(workers, len(every)), on_result=on_result, reuse=reuse,
                                pool=pool, threads=threads)
            search.steps += sum(r.steps for r in outcome.results)
        search.trained += len(outcome.results)
        search.unreadable.update(outcome.unreadable)
        verdicts = {}
        for length, group in configs.items():
            runs = [store.get(cfg.config_hash()) for cfg in group]
            cells = select_lr(runs, rule)
            verdicts[length] = bool(len(cells)) and bool(cells.solved.iloc[0])
            if len(cells) and cells.verdict.iloc[0] == "failed":
                failure = cells.failure.iloc[0]
                status = "failed" if "failed" in failure.split("/") else failure
                search.failed.setdefault(length, {})[asked[length]] = f"{status}: {cells.reason.iloc[0]}"
        return verdicts

    search.smallest, search.checked = bisect_widths(widths, sorted(set(lengths)), judge)
    return search


MIN_FIT_POINTS = 3
"""Exact smallest widths (not censored at the grid's edge, not left open by failures) a growth-law fit needs."""


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


VERDICT_ORDER = ("solved", "undecided", "failed", "unsolved")
WIDTH_KEYS = ("task", "model", "layers", "length", "width")


def width_verdicts(cells: pd.DataFrame, keys: Sequence[str] = WIDTH_KEYS) -> pd.DataFrame:
    """``select_lr`` rows reduced to one per ``keys`` (by default per task, model, layers, length and width): the
    first of solved, undecided, failed, unsolved among its cells (cells differing in other fields, e.g. heads),
    with that cell's reason. A width is unsolved only where every cell of it is."""
    keys = list(keys)
    ranked = cells.assign(rank=cells.verdict.map(VERDICT_ORDER.index)).sort_values(keys + ["rank"])
    return ranked.drop_duplicates(keys)[keys + ["verdict", "reason"]].reset_index(drop=True)


def _min_width_row(widths: pd.DataFrame) -> dict[str, Any]:
    """Smallest solved width of one length's widths, whether it is exact and, if not or if none, why."""
    solved = widths[widths.verdict == "solved"].width
    if solved.empty:
        return {"min_width": None, "exact": False, "reason": "none solved: " + why_unsolved(widths)}
    smallest = int(solved.min())
    below = widths[widths.width < smallest]
    if below.empty:
        return {"min_width": smallest, "exact": False, "reason": f"at most {smallest}: no smaller width tried"}
    nearest = below.loc[below.width.idxmax()]
    if nearest.verdict == "unsolved":
        return {"min_width": smallest, "exact": True, "reason": ""}
    detail = f" ({nearest.reason})" if nearest.reason else ""
    return {"min_width": smallest, "exact": False,
            "reason": f"at most {smallest}: width {int(nearest.width)} {nearest.verdict}{detail}"}


def min_width_table(results: Sequence[RunResult], rule: SolvedRule = SolvedRule(None)) -> pd.DataFrame:
    """From stored runs alone: per (task, model, layers, length), the smallest width whose best-lr cell solves.

    ``exact`` holds when the next smaller stored width is decided unsolved; otherwise the true smallest width may
    be lower (``reason`` says why: no smaller width tried, or it is undecided or failed). Where no width solves,
    ``min_width`` is None and ``reason`` counts the unsolved, undecided and failed widths.
    """
    cells = select_lr(results, rule)
    columns = ["task", "model", "layers", "length", "min_width", "widths_tried", "exact", "max_width", "reason"]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (task, model, layers, length), widths in width_verdicts(cells).groupby(["task", "model", "layers", "length"]):
        rows.append({"task": task, "model": model, "layers": layers, "length": length, "widths_tried": len(widths),
                     "max_width": int(widths.width.max()), **_min_width_row(widths)})
    return pd.DataFrame(rows, columns=columns).astype({"min_width": "Int64"})


@lru_cache(maxsize=256)
def _forward_flops(config_json: str, length: int) -> int:
    import torch

    from sepbench.models import build_model
    from sepbench.models.accounting import forward_flops
    from sepbench.tasks import build_task

    config = RunConfig.model_validate_json(config_json)
    task = build_task(config.task.name, length, config.task.options)
    tokens = task.max_seq_len(length)
    with torch.device("meta"):  # shapes only: nothing allocated, however large the model
        model = build_model(config.model, task.vocab_size, tokens)
    return forward_flops(model, tokens)


def estimate_forward_flops(config: RunConfig, length: int | None = None) -> int:
    """FLOPs of one forward pass over one sequence of a length-N instance (2 per multiply-accumulate).

    The closed form of ``models.accounting.forward_flops`` (attention over the full computed square
    included), over the task's whole token sequence.
    """
    return _forward_flops(config.model_copy(update={"device": "cpu"}).model_dump_json(), length or config.task.length)


def estimate_paper_flops(config: RunConfig) -> float:
    """FLOPs as Yang et al. 2024 count them in Table 2 (no attention term; see ``accounting.paper_flops``), over
    the task's whole sequence at size N (a CoT task's longest CoT), not over N; on Arithmetic at Table 2's sizes,
    over Table 2's own L (87 at n = 6, where the longest CoT is 85)."""
    from sepbench.models.accounting import paper_flops
    from sepbench.models.flops_table import PAPER_ARITHMETIC_LENGTHS
    from sepbench.tasks import build_task

    tokens = PAPER_ARITHMETIC_LENGTHS.get(config.task.length) if config.task.name == "arithmetic" else None
    if tokens is None:
        tokens = build_task(config.task.name, config.task.length, config.task.options).max_seq_len()
    return paper_flops(config.model.name, config.model.width, config.model.layers, tokens)


def min_flops_table(results: Sequence[RunResult], rule: SolvedRule = SolvedRule(None)) -> pd.DataFrame:
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
