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

from sepbench.report.bounds import BoundsProvider, theory_bounds  # noqa: E402
from sepbench.sweep.search import SolvedRule, fit_power_law, min_width_table, select_lr  # noqa: E402
from sepbench.train.result import RunResult  # noqa: E402

SOFTMAX, LINEAR = "transformer", "linear_transformer"


@dataclass
class Figure:
    """One drawn figure: ``slug`` names its files, ``mirrors`` the paper figure it reproduces."""

    slug: str
    title: str
    mirrors: str
    caption: str
    figure: MplFigure


def size_cells(results: Sequence[RunResult], rule: SolvedRule) -> pd.DataFrame:
    """Per (task, model, layers, width, length): the best accuracy over learning rates (mean over seeds)."""
    cells = select_lr(results, rule)
    if cells.empty:
        return cells
    keys = ["task", "model", "layers", "width", "length"]
    return cells.groupby(keys, as_index=False).agg(accuracy=("best_accuracy", "max"), solved=("solved", "any"))


def heatmaps(cells: pd.DataFrame) -> list[Figure]:
    """Accuracy over width x length, one panel per task x model (best over depth and learning rate)."""
    if cells.empty:
        return []
    best = cells.groupby(["task", "model", "width", "length"], as_index=False).accuracy.max()
    tasks, models = sorted(best.task.unique()), sorted(best.model.unique())
    fig, axes = plt.subplots(len(models), len(tasks), figsize=(3.6 * len(tasks) + 1, 2.8 * len(models)),
                             squeeze=False, constrained_layout=True)
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
            image = ax.imshow(grid.to_numpy(dtype=float), vmin=0, vmax=1, cmap="viridis", aspect="auto")
            ax.set_xticks(range(grid.shape[1]), [str(w) for w in grid.columns], fontsize=8)
            ax.set_yticks(range(grid.shape[0]), [str(n) for n in grid.index], fontsize=8)
            ax.set_xlabel("width (embedding size)", fontsize=8)
            ax.set_ylabel("length N", fontsize=8)
            for (r, c), value in np.ndenumerate(grid.to_numpy(dtype=float)):
                if not np.isnan(value):
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if value > 0.6 else "white")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="accuracy")
    return [Figure("heatmaps", "Accuracy over width and problem size", "Yang et al. 2024, Fig. 1",
                   "Each panel is one task and model; cells show the best accuracy over depth and learning rate "
                   "(mean over seeds) at each width (x) and problem size (y).", fig)]


def _label(model: str, layers: int, width: int) -> str:
    return f"{model}-({layers}, {width})"


def accuracy_vs_length(cells: pd.DataFrame, models: Sequence[str] | None = None, slug: str = "accuracy_vs_length",
                       mirrors: str = "Bhattamishra et al. 2024, Fig. 2 (left)") -> list[Figure]:
    """Per task: accuracy against length for each model, best over its sizes and learning rates."""
    if models is not None:
        cells = cells[cells.model.isin(models)]
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
                              "rates (mean over seeds).", fig))
    return figures


def validation_curves(results: Sequence[RunResult]) -> list[Figure]:
    """Per task, at its largest length: each model's best run's evaluation accuracy over training steps."""
    with_curves = [r for r in results if r.curve]
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
                              "Evaluation accuracy during training of each model's best run at the largest stored "
                              "length.", fig))
    return figures


def min_width_vs_length(results: Sequence[RunResult], rule: SolvedRule,
                        bounds: BoundsProvider = theory_bounds) -> list[Figure]:
    """Per task: smallest solving width against length per (model, depth), with the fitted power law and bounds."""
    table = min_width_table(results, rule)
    figures = []
    for task, group in table.groupby("task"):
        solved = group.dropna(subset=["min_width"])
        if solved.empty:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.8), constrained_layout=True)
        for (model, layers), rows in solved.groupby(["model", "layers"]):
            points = {int(n): int(w) for n, w in zip(rows.length, rows.min_width)}
            label = f"{model}, {layers} layer{'s' if layers > 1 else ''}"
            try:
                fit = fit_power_law(points, resamples=500)
            except ValueError:
                fit = None
            else:
                label += f": alpha = {fit.alpha:.2f} [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]"
            line = ax.plot(sorted(points), [points[n] for n in sorted(points)], marker="o", linestyle="none",
                           label=label)[0]
            if fit is not None:
                span = np.linspace(min(points), max(points), 50)
                ax.plot(span, fit.predict(span), color=line.get_color(), linewidth=1)
        lengths = sorted(int(n) for n in group.length.unique())
        for name, values in bounds(task, sorted(solved.model.unique()), lengths).items():
            ax.plot(lengths, values, linestyle="--", color="grey", label=f"bound: {name}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("length N")
        ax.set_ylabel("smallest solving width")
        ax.set_title(task)
        ax.legend(fontsize=7)
        figures.append(Figure(f"min_width_{task}", f"Smallest solving width against length: {task}",
                              "Bhattamishra et al. 2024, Fig. 3 and Thms. 3, 5 (size against N)",
                              f"Smallest width whose best learning rate is solved ({rule}); lines are width ~ c N^alpha "
                              "fits with 95% bootstrap intervals on alpha; dashed: the paper's lower bounds at p = 32 "
                              "bits for the plotted architectures.", fig))
    return figures


def softmax_vs_linear(cells: pd.DataFrame) -> list[Figure]:
    """Tasks where both softmax and linear attention were trained: their accuracy against length side by side."""
    both = [task for task, group in cells.groupby("task") if {SOFTMAX, LINEAR} <= set(group.model)] if len(cells) else []
    return accuracy_vs_length(cells[cells.task.isin(both)], models=[SOFTMAX, LINEAR], slug="softmax_vs_linear",
                              mirrors="Deng et al., Figs. 3-5 and 7 (learned counterpart)") if both else []


FigureMaker = Callable[[Sequence[RunResult], pd.DataFrame, SolvedRule], list[Figure]]

SECTIONS: list[tuple[str, FigureMaker]] = [
    ("Accuracy over width and problem size", lambda runs, cells, rule: heatmaps(cells)),
    ("Accuracy against length", lambda runs, cells, rule: accuracy_vs_length(cells)),
    ("Validation curves", lambda runs, cells, rule: validation_curves(runs)),
    ("Smallest solving width", lambda runs, cells, rule: min_width_vs_length(runs, rule)),
    ("Softmax against linear attention", lambda runs, cells, rule: softmax_vs_linear(cells)),
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
