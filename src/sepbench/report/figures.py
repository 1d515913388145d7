"""The report's figures, each drawn from stored runs alone and naming the paper figure it mirrors."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

from sepbench.config import ModelConfig  # noqa: E402
from sepbench.report.bounds import BoundsProvider, Series, theory_bounds  # noqa: E402
from sepbench.results import TRAINED  # noqa: E402
from sepbench.sweep.search import (  # noqa: E402
    MIN_FIT_POINTS, SolvedRule, fit_power_law, min_width_table, select_lr, why_unsolved,
)
from sepbench.train.result import RunResult  # noqa: E402
from sepbench.wording import counted  # noqa: E402

SOFTMAX, LINEAR = "transformer", "linear_transformer"
FAILED_FILL, FAILED_EDGE = "#d9d9d9", "#b22222"


@dataclass
class Figure:
    """One drawn figure: ``slug`` names its files, ``mirrors`` the paper figure it reproduces."""

    slug: str
    title: str
    mirrors: str
    caption: str
    figure: MplFigure


def size_cells(results: Sequence[RunResult], rule: SolvedRule) -> pd.DataFrame:
    """Per (task, model, layers, width, length): the best accuracy over learning rates (mean over seeds).

    ``failed`` marks a size none of whose runs trained (accuracy NaN, never 0); ``failure`` names their statuses.
    """
    cells = select_lr(results, rule)
    keys = ["task", "model", "layers", "width", "length"]
    if cells.empty:
        return pd.DataFrame(columns=[*keys, "accuracy", "solved", "failed", "failure"])
    return cells.groupby(keys, as_index=False).agg(
        accuracy=("best_accuracy", "max"), solved=("solved", "any"),
        failed=("verdict", lambda v: bool((v == "failed").all())),
        failure=("failure", lambda f: "/".join(sorted({x for s in f if s for x in s.split("/")}))))


def heatmaps(cells: pd.DataFrame) -> list[Figure]:
    """Accuracy over width x length, one panel per task x model (best over depth and learning rate); a size whose
    runs all failed is a hatched grey cell labelled with their status."""
    if cells.empty:
        return []
    best = cells.groupby(["task", "model", "width", "length"], as_index=False).agg(
        accuracy=("accuracy", "max"), failed=("failed", "all"),
        failure=("failure", lambda f: "/".join(sorted({x for s in f if s for x in s.split("/")}))))
    tasks, models = sorted(best.task.unique()), sorted(best.model.unique())
    fig, axes = plt.subplots(len(models), len(tasks), figsize=(3.6 * len(tasks) + 1, 2.8 * len(models)),
                             squeeze=False, constrained_layout=True)
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    image = None
    for i, model in enumerate(models):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            panel = best[(best.model == model) & (best.task == task)]
            ax.set_title(f"{task} / {model}", fontsize=9)
            if panel.empty:
                ax.set_axis_off()
                continue
            grid = panel.pivot(index="length", columns="width", values="accuracy").sort_index(ascending=False)
            failed = panel[panel.failed].set_index(["length", "width"]).failure
            image = ax.imshow(np.ma.masked_invalid(grid.to_numpy(dtype=float)), vmin=0, vmax=1, cmap=cmap,
                              aspect="auto")
            ax.set_xticks(range(grid.shape[1]), [str(w) for w in grid.columns], fontsize=8)
            ax.set_yticks(range(grid.shape[0]), [str(n) for n in grid.index], fontsize=8)
            ax.set_xlabel("width (embedding size)", fontsize=8)
            ax.set_ylabel("length N", fontsize=8)
            for (r, c), value in np.ndenumerate(grid.to_numpy(dtype=float)):
                key = (grid.index[r], grid.columns[c])
                if key in failed.index:
                    ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=FAILED_FILL, edgecolor=FAILED_EDGE,
                                           hatch="///", linewidth=0))
                    ax.text(c, r, failed[key], ha="center", va="center", fontsize=6, color=FAILED_EDGE,
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
                elif not np.isnan(value):
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if value > 0.6 else "white")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="accuracy")
    return [Figure("heatmaps", "Accuracy over width and problem size", "Yang et al. 2024, Fig. 1",
                   "Each panel is one task and model; cells show the best accuracy over depth and learning rate "
                   "(mean over the seeds that trained) at each width (x) and problem size (y). Hatched grey cells: "
                   "every run of that size failed, diverged or was pruned (labelled with the status; reasons in the "
                   "table of runs that did not train); white: no stored run.", fig)]


def _label(model: str, layers: int, width: int) -> str:
    return f"{model}-({layers}, {width})"


def accuracy_vs_length(cells: pd.DataFrame, models: Sequence[str] | None = None, slug: str = "accuracy_vs_length",
                       mirrors: str = "Bhattamishra et al. 2024, Fig. 2 (left)") -> list[Figure]:
    """Per task: accuracy against length for each model, best over its sizes and learning rates."""
    if models is not None:
        cells = cells[cells.model.isin(models)]
    cells = cells.dropna(subset=["accuracy"])
    if cells.empty:
        return []
    figures = []
    for task, group in cells.groupby("task"):
        fig, ax = plt.subplots(figsize=(6, 3.8), constrained_layout=True)
        for model, runs in group.groupby("model"):
            best = runs.loc[runs.groupby("length").accuracy.idxmax()].sort_values("length")
            sizes = sorted({(int(r.layers), int(r.width)) for r in best.itertuples()})
            shown = _label(model, *sizes[0]) if len(sizes) == 1 else f"{model} (best of {len(sizes)} sizes)"
            ax.plot(best.length, best.accuracy, marker="o", label=shown)
        ax.set_xlabel("length N")
        ax.set_ylabel("accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(task)
        ax.legend(fontsize=8)
        figures.append(Figure(f"{slug}_{task}", f"Accuracy against length: {task}", mirrors,
                              "Final accuracy at each training length N, best over each model's sizes and learning "
                              "rates (mean over the seeds that trained); sizes whose runs all failed are left out.",
                              fig))
    return figures


def validation_curves(results: Sequence[RunResult]) -> list[Figure]:
    """Per task, at its largest length: each model's best run's evaluation accuracy over training steps."""
    with_curves = [r for r in results if r.curve and r.status in TRAINED]
    figures = []
    for task in sorted({r.config.task.name for r in with_curves}):
        runs = [r for r in with_curves if r.config.task.name == task]
        length = max(r.config.task.length for r in runs)
        fig, ax = plt.subplots(figsize=(6, 3.8), constrained_layout=True)
        for model in sorted({r.config.model.name for r in runs}):
            candidates = [r for r in runs if r.config.model.name == model and r.config.task.length == length]
            if not candidates:
                continue
            best = max(candidates, key=lambda r: (r.accuracy, -(r.steps_to_threshold or r.steps)))
            cfg = best.config
            ax.plot([p.step for p in best.curve], [p.accuracy for p in best.curve], marker=".",
                    label=_label(model, cfg.model.layers, cfg.model.width))
        ax.set_xlabel("training step")
        ax.set_ylabel("validation accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{task}, N = {length}")
        ax.legend(fontsize=8)
        figures.append(Figure(f"validation_curves_{task}", f"Validation curves: {task} at N = {length}",
                              "Bhattamishra et al. 2024, Fig. 2 (middle, right)",
                              "Evaluation accuracy during training of each model's best run (among runs that trained) "
                              "at the largest stored length.", fig))
    return figures


def _plain(value: float, _position: int | None = None) -> str:
    return f"{value:g}"


def _log_axes(ax, xs: Sequence[float], ys: Sequence[float], lengths: Sequence[int]) -> None:
    """Log-log axes whose limits hold every drawn value, with plain-number ticks: lengths on x, powers of 2 on y
    (the y range spans at least a factor 4, so at least two y ticks are visible)."""
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlim(min(xs) / 1.25, max(xs) * 1.25)
    ax.set_ylim(min(ys) / 2, max(ys) * 2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(lengths))))
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_locator(LogLocator(base=2))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_locator(NullLocator())


def _series(results: Sequence[RunResult], task: str, model: str, layers: int) -> Series:
    """The plotted series of ``model`` at ``layers`` on ``task``: its stored runs' distinct model configs."""
    configs: dict[str, ModelConfig] = {}
    for result in results:
        config = result.config.model
        if result.config.task.name == task and config.name == model and config.layers == layers:
            configs.setdefault(config.model_dump_json(exclude={"width"}), config)
    return Series(tuple(configs.values()))


def min_width_vs_length(results: Sequence[RunResult], rule: SolvedRule,
                        bounds: BoundsProvider = theory_bounds) -> list[Figure]:
    """Per task with a solved width: smallest solving width against length per (model, depth), the power law fitted
    to the exact smallest widths (at least MIN_FIT_POINTS of them), and the theory's bounds in each series' width.

    A smallest width is exact when the next smaller stored width is unsolved; otherwise it is an upper bound (open
    downward triangle). Lengths where no stored width solves show an open upward triangle at the largest width tried.
    """
    table = min_width_table(results, rule)
    figures = []
    for task, group in table.groupby("task"):
        if group.min_width.isna().all():
            continue
        fig, ax = plt.subplots(figsize=(6.4, 5.2), constrained_layout=True)
        xs: list[float] = []
        ys: list[float] = []
        colors: dict[str, str] = {}
        for (model, layers), rows in group.groupby(["model", "layers"]):
            name = f"{model}, {counted(layers, 'layer')}"
            found = rows[rows.min_width.notna()]
            exact = {int(r.length): int(r.min_width) for r in found.itertuples() if r.exact}
            at_most = {int(r.length): int(r.min_width) for r in found.itertuples() if not r.exact}
            none = {int(r.length): int(r.max_width) for r in rows[rows.min_width.isna()].itertuples()}
            fit = fit_power_law(exact, resamples=500) if len(exact) >= MIN_FIT_POINTS else None
            fitted = (f"alpha = {fit.alpha:.2f} [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]" if fit is not None else
                      f"no fit ({counted(len(exact), 'exact width')}, needs {MIN_FIT_POINTS})")
            color = None
            for points, marker, what in ((exact, "o", fitted), (at_most, "v", "at most this width"),
                                         (none, "^", "none solved up to this width")):
                if not points:
                    continue
                label = f"{name}: {what}" if color is not None or marker == "o" else f"{name}: {what}; {fitted}"
                color = ax.plot(sorted(points), [points[n] for n in sorted(points)], marker=marker, linestyle="none",
                                markerfacecolor=None if marker == "o" else "none", color=color,
                                label=label)[0].get_color()
            for points in (exact, at_most, none):
                xs += list(points)
                ys += list(points.values())
            colors[name] = color
            if fit is not None:
                span = np.geomspace(min(exact), max(exact), 50)
                ax.plot(span, fit.predict(span), color=color, linewidth=1)
                ys += list(fit.predict(span))
        lengths = sorted(int(n) for n in group.length.unique())
        series = [_series(results, str(task), model, int(layers)) for model, layers in
                  group[["model", "layers"]].drop_duplicates().itertuples(index=False)]
        drawn = bounds(task, series, lengths)
        for curve in drawn:
            ax.plot(lengths, curve.widths, linestyle="--", color=colors.get(curve.series, "grey"),
                    label=f"bound: {curve.label}")
            ys += [v for v in curve.widths if v > 0]
        _log_axes(ax, xs, ys, lengths)
        ax.set_xlabel("length N")
        ax.set_ylabel("smallest solving width")
        ax.set_title(task)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
        models = "; ".join(one.name for one in series)
        bound_text = ("dashed, in each series' colour: the smallest width that the paper's lower bounds at p = 32 "
                      "bits allow that series (a recurrent model's width whose state holds the bound's m numbers, "
                      "a one-layer Transformer's m = bound on mH / H)"
                      if drawn else f"no lower bound of Bhattamishra et al. 2024 rules out a width of {models} on "
                      f"{task} at these lengths, so none is drawn")
        figures.append(Figure(f"min_width_{task}", f"Smallest solving width against length: {task}",
                              "Bhattamishra et al. 2024, Fig. 3 and Thms. 3, 5 (size against N)",
                              f"Smallest width whose best learning rate is solved "
                              f"({rule.text_for([r for r in results if r.config.task.name == task])}). "
                              "Filled circles: exact (the next smaller stored width is unsolved); "
                              "open downward triangles: at most this width "
                              "(no smaller width tried, or it is undecided or failed); open upward triangles: no "
                              f"stored width solves. Lines: width ~ c N^alpha fitted to the exact widths when at least "
                              f"{MIN_FIT_POINTS} exist, with 95% bootstrap intervals on alpha; {bound_text}.", fig))
    return figures


def min_width_notes(results: Sequence[RunResult], rule: SolvedRule) -> list[str]:
    """Why a task has no smallest-width figure: its cells' verdicts under ``rule``."""
    if not results:
        return ["No stored runs."]
    cells = select_lr(results, rule)
    notes = []
    for task, group in cells.groupby("task"):
        if group.solved.any():
            continue
        hint = (" Store more seeds of each cell, or report single-seed runs with --k 1 --m 1."
                if (group.verdict == "undecided").any() else "")
        rule_here = rule.text_for([r for r in results if r.config.task.name == task])
        notes.append(f"{task}: no width is solved ({rule_here}): {why_unsolved(group)}.{hint}")
    return notes


def figure_data(figure: MplFigure) -> list[dict]:
    """What each axes shows, for checking a drawing without looking at it: limits, scales, the ticks inside the
    limits, and every drawn line's finite points."""
    data = []
    for ax in figure.axes:
        if not ax.get_visible() or not ax.axison or ax.get_label() == "<colorbar>":
            continue
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        inside = lambda ticks, lo, hi: [float(t) for t in ticks if min(lo, hi) <= t <= max(lo, hi)]  # noqa: E731
        series = []
        for line in ax.get_lines():
            xy = np.asarray(line.get_xydata(), dtype=float)
            xy = xy[np.isfinite(xy).all(axis=1)] if xy.size else xy.reshape(0, 2)
            series.append({"label": str(line.get_label()), "points": xy.tolist()})
        data.append({"title": ax.get_title(), "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
                     "xlim": [float(x0), float(x1)], "ylim": [float(y0), float(y1)],
                     "xticks": inside(ax.get_xticks(), x0, x1), "yticks": inside(ax.get_yticks(), y0, y1),
                     "series": series})
    return data


def softmax_vs_linear(cells: pd.DataFrame) -> list[Figure]:
    """Tasks where both softmax and linear attention were trained: their accuracy against length side by side."""
    both = [task for task, group in cells.groupby("task") if {SOFTMAX, LINEAR} <= set(group.model)] if len(cells) else []
    return accuracy_vs_length(cells[cells.task.isin(both)], models=[SOFTMAX, LINEAR], slug="softmax_vs_linear",
                              mirrors="Deng et al., Figs. 3-5 and 7 (learned counterpart)") if both else []


Notes = Callable[[Sequence[RunResult], pd.DataFrame, SolvedRule, list[Figure]], list[str]]


@dataclass
class Section:
    """One part of the page: its figures and notes saying why it has none, or why it misses a task."""

    title: str
    draw: Callable[[Sequence[RunResult], pd.DataFrame, SolvedRule], list[Figure]]
    notes: Notes


def _when_empty(reason: str) -> Notes:
    return lambda runs, cells, rule, drawn: [] if drawn else ["No stored runs."] if not runs else [reason]


SECTIONS: list[Section] = [
    Section("Accuracy over width and problem size", lambda runs, cells, rule: heatmaps(cells),
            _when_empty("No cell to draw.")),
    Section("Accuracy against length", lambda runs, cells, rule: accuracy_vs_length(cells),
            _when_empty("Every stored size failed, diverged or was pruned; see the table of runs that did not train.")),
    Section("Validation curves", lambda runs, cells, rule: validation_curves(runs),
            _when_empty("No stored run that trained has an evaluation curve.")),
    Section("Smallest solving width", lambda runs, cells, rule: min_width_vs_length(runs, rule),
            lambda runs, cells, rule, drawn: min_width_notes(runs, rule)),
    Section("Softmax against linear attention", lambda runs, cells, rule: softmax_vs_linear(cells),
            _when_empty(f"No task has runs of both {SOFTMAX} and {LINEAR}.")),
]


def _deng_panel(figure_id: str) -> str:
    match = re.fullmatch(r"fig(\d+)([a-z]?)", figure_id)
    if match is None:
        return f"Deng et al., {figure_id}"
    number, panel = match.groups()
    return f"Deng et al., Fig. {number}" + (f" ({panel})" if panel else "")


def random_network_experiments(points: pd.DataFrame) -> list[Figure]:
    """Per stored Deng et al. figure: E per 100 random networks against the swept parameter, one line per model."""
    figures = []
    for figure_id, group in points.groupby("figure"):
        fig, ax = plt.subplots(figsize=(6, 3.8), constrained_layout=True)
        for model, rows in group.groupby("model"):
            per_value = rows.groupby("value")[["successes", "trials"]].sum().sort_index()
            ax.plot(per_value.index, 100.0 * per_value.successes / per_value.trials, marker="o", label=str(model))
        parameter = str(group.parameter.iloc[0])
        ax.set_xlabel(parameter)
        ax.set_ylabel("# of E out of 100")
        ax.set_ylim(-2, 102)
        ax.set_title(str(figure_id))
        ax.legend(fontsize=8)
        figures.append(Figure(f"deng_{figure_id}", f"Softmax separates, linear does not: {figure_id}",
                              _deng_panel(str(figure_id)),
                              f"How often (per 100 random networks) event E holds as {parameter} varies; the "
                              "definitions are reconstructed and the ranges are ours (docs/softmax_vs_linear.md).",
                              fig))
    return figures
