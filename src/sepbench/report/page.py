"""Write the report: one self-contained HTML page (figures embedded) plus each figure as PNG and SVG."""
from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from sepbench.report.figures import SECTIONS, Figure, figure_data, random_network_experiments, size_cells
from sepbench.results import NOT_TRAINED
from sepbench.sweep.search import SolvedRule, cell_key, min_flops_table, runs_frame, select_lr, why_unsolved
from sepbench.train.result import RunResult
from sepbench.wording import counted

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; } .mirrors { font-weight: 600; }
table { border-collapse: collapse; margin: 1em 0; } td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; }
td { text-align: right; } .empty { color: #777; font-style: italic; }
td.failed { color: #b22222; background: repeating-linear-gradient(45deg, #eee, #eee 4px, #ddd 4px, #ddd 8px); }
td.text { text-align: left; }
"""


@dataclass
class DrawnFigure:
    """A figure rendered to bytes, so nothing is written until every figure has been drawn."""

    figure: Figure
    png: bytes
    svg: bytes
    data: list[dict]


@dataclass
class ReportOutcome:
    """Where the report went and what it holds."""

    page: Path
    files: list[Path] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    runs: int = 0


def _render(figure: Figure) -> DrawnFigure:
    png, svg = io.BytesIO(), io.BytesIO()
    figure.figure.savefig(png, format="png", dpi=110)
    figure.figure.savefig(svg, format="svg", metadata={"Date": None})
    data = figure_data(figure.figure)
    plt.close(figure.figure)
    return DrawnFigure(figure, png.getvalue(), svg.getvalue(), data)


def flops_table(results: Sequence[RunResult], rule: SolvedRule) -> pd.DataFrame:
    """Models as rows, lengths as columns: the fewest GFLOPs of a solving size, as Yang et al. 2024, Table 2.

    A length with no solving size says why: 'not solved' (every size is decided unsolved), 'undecided; ...' (some
    size is neither: seeds missing, or runs failed) or 'failed: ...' (every run of every size failed).
    """
    best = min_flops_table(results, rule)
    cells = select_lr(results, rule)
    if cells.empty:
        return pd.DataFrame()
    best["cell"] = [f"{g:.4g} [{paper:.4g}] ({layers}, {width})"
                    for g, paper, layers, width in zip(best.gflops, best.paper_gflops, best.layers, best.width)]
    rows = []
    for (task, model, length), group in cells.groupby(["task", "model", "length"]):
        found = best[(best.task == task) & (best.model == model) & (best.length == length)]
        rows.append({"row": f"{task} / {model}", "length": length,
                     "cell": found.cell.iloc[0] if len(found) else _unsolved_cell(group)})
    return pd.DataFrame(rows).pivot(index="row", columns="length", values="cell").fillna("no runs")


def _unsolved_cell(cells: pd.DataFrame) -> str:
    """A length no size solves: 'not solved' only where every size is decided unsolved; a size undecided or
    failed might have solved it."""
    if (cells.verdict == "failed").all():
        return "failed: " + "; ".join(sorted(set(cells.reason)))
    if (cells.verdict == "unsolved").all():
        return "not solved"
    return f"undecided; {why_unsolved(cells)}"


def not_trained_table(results: Sequence[RunResult], rule: SolvedRule) -> pd.DataFrame:
    """Runs that failed, diverged or were pruned, one row per (cell, learning rate, status, error), with how the
    analysis counts them: a failed cell (none of its runs trained, or crashed runs could have solved it, as
    ``select_lr`` judges), a losing learning rate (another learning rate of the cell trained) or a left-out seed
    (other seeds at this learning rate trained)."""
    bad = [r for r in results if r.status in NOT_TRAINED]
    columns = ["task", "model", "length", "layers", "width", "lr", "status", "seeds", "counts as", "reason"]
    if not bad:
        return pd.DataFrame(columns=columns)
    runs = runs_frame(results)
    trained_lrs = runs[runs.trained].groupby("cell").lr.agg(set).to_dict()
    cells = select_lr(results, rule)
    failed_cells = set(cells.cell[cells.verdict == "failed"])
    groups: dict[tuple, list[int]] = {}
    for r in bad:
        cfg = r.config
        key = (cfg.task.name, cfg.model.name, cfg.task.length, cfg.model.layers, cfg.model.width, cfg.train.lr,
               r.status, r.error or "-", cell_key(cfg))
        groups.setdefault(key, []).append(cfg.seed)
    rows = []
    for key, seeds in sorted(groups.items()):
        lrs = trained_lrs.get(key[8], set())
        if key[8] in failed_cells and key[6] == "failed" or not lrs:
            counts = "failed cell"
        else:
            counts = "left-out seed" if key[5] in lrs else "losing lr"
        rows.append(dict(zip(columns, [*key[:7], ", ".join(map(str, sorted(seeds))), counts, key[7]])))
    return pd.DataFrame(rows, columns=columns)


def _figure_html(drawn: DrawnFigure) -> str:
    fig = drawn.figure
    data = base64.b64encode(drawn.png).decode("ascii")
    axes = html.escape(json.dumps(drawn.data), quote=True)
    return (f'<figure id="{fig.slug}" data-axes="{axes}"><img src="data:image/png;base64,{data}" '
            f'alt="{html.escape(fig.title)}"><figcaption><span class="mirrors">{html.escape(fig.title)}; mirrors '
            f'{html.escape(fig.mirrors)}.</span> {html.escape(fig.caption)} Files: <a href="figures/{fig.slug}.png">'
            f'PNG</a>, <a href="figures/{fig.slug}.svg">SVG</a>, <a href="figures/{fig.slug}.json">data</a>.'
            '</figcaption></figure>')


def _table_html(table: pd.DataFrame) -> str:
    head = "".join(f"<th>N = {html.escape(str(c))}</th>" for c in table.columns)
    body = "".join(f"<tr><th>{html.escape(str(i))}</th>" + "".join(_td(v) for v in row) + "</tr>"
                   for i, row in zip(table.index, table.to_numpy()))
    return f"<table><tr><th>task / model</th>{head}</tr>{body}</table>"


def _td(value: object) -> str:
    text = str(value)
    css = ' class="failed"' if text.startswith("failed") else ""
    return f"<td{css}>{html.escape(text)}</td>"


def _runs_html(table: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f'<td class="{"failed" if c == "status" else "text"}">{html.escape(str(v))}</td>'
                                    for c, v in zip(table.columns, row)) + "</tr>" for row in table.to_numpy())
    return f"<table><tr>{head}</tr>{body}</table>"


def build_page(sections: list[tuple[str, list[DrawnFigure], list[str]]], flops: pd.DataFrame, runs: int,
               source: str, rule: str, flops_rule: str, not_trained: pd.DataFrame | None = None,
               note: str | None = None, same_rule: bool = False) -> str:
    """The page; ``rule`` and ``flops_rule``: the solved rules in words (``SolvedRule.text_for``); ``same_rule``:
    the minimum-FLOPs table judges the cells as the figures do."""
    flops_text = ("The minimum-FLOPs table uses the same rule." if same_rule else
                  f"The minimum-FLOPs table alone uses {html.escape(flops_rule)} (Yang et al. 2024, Table 2, "
                  "use 90% accuracy).")
    parts = [f"<h1>sepbench report</h1><p>{counted(runs, 'run')} from <code>{html.escape(source)}</code>, written "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.</p>"
             f'<p id="solved-rule">In every figure, solved means {html.escape(rule)} at the best learning rate; '
             f"failed, diverged and pruned runs are not seeds that missed it, and a cell whose runs all failed is "
             f"shown as failed. {flops_text}</p>"]
    if note:
        parts.append(f'<p id="note">{html.escape(note)}</p>')
    for title, drawn, notes in sections:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.extend(_figure_html(d) for d in drawn)
        parts.extend(f'<p class="empty">{html.escape(text)}</p>' for text in notes)
    parts.append("<h2>Minimum FLOPs to reach the threshold</h2>"
                 f"<p>Mirrors Yang et al. 2024, Table 2. Solved here means {html.escape(flops_rule)}. Per task "
                 f"and model, the forward GFLOPs of one sequence for the cheapest size (layers, width) that is solved; "
                 f"in brackets, the same size counted by Table 2's convention (no attention term).</p>")
    parts.append(_table_html(flops) if not flops.empty else '<p class="empty">No stored runs.</p>')
    if not_trained is not None and not not_trained.empty:
        parts.append("<h2>Runs that did not train</h2><p>Failed, diverged and pruned runs, with their reason. They "
                     "never count as unsolved: a cell none of whose runs trained is a failed cell; a learning rate "
                     "none of whose runs trained, while another learning rate of the cell did, is a losing learning "
                     "rate; a seed that failed while other seeds at its learning rate trained is left out of the "
                     "rule (so the cell may need more seeds).</p>")
        parts.append(_runs_html(not_trained))
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>sepbench report</title>'
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_report(results: Sequence[RunResult], out_dir: str | Path, source: str = "store",
                 rule: SolvedRule = SolvedRule(None), flops_rule: SolvedRule = SolvedRule(0.9),
                 random_networks: pd.DataFrame | None = None, note: str | None = None) -> ReportOutcome:
    """Draw every figure the runs support, then write ``index.html``, ``figures/*.{png,svg,json}`` (the json: each
    figure's axis limits, ticks and points) and ``min_flops.csv``. ``note``: a paragraph under the page's
    heading (e.g. the budget the runs had). ``rule``: by default at each cell's own ``train.threshold``.

    ``random_networks``: stored Deng et al. experiment points (``Store.query_softmax_vs_linear()``), if any.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out must be a directory, but {out} is a file")
    cells = size_cells(results, rule)
    sections = []
    for section in SECTIONS:
        drawn = [_render(f) for f in section.draw(results, cells, rule)]
        sections.append((section.title, drawn, section.notes(results, cells, rule, [d.figure for d in drawn])))
    if random_networks is not None and not random_networks.empty:
        sections.append(("Softmax against linear attention: random networks",
                         [_render(f) for f in random_network_experiments(random_networks)], []))
    flops = flops_table(results, flops_rule)
    not_trained = not_trained_table(results, rule)
    page = build_page(sections, flops, len(results), source, rule.text_for(results), flops_rule.text_for(results),
                      not_trained, note, same_rule=flops_rule.judges_like(rule, results))

    (out / "figures").mkdir(parents=True, exist_ok=True)
    outcome = ReportOutcome(page=out / "index.html", runs=len(results))
    for _, drawn, _ in sections:
        for d in drawn:
            files = (("png", d.png), ("svg", d.svg), ("json", json.dumps(d.data, indent=1).encode()))
            for suffix, data in files:
                path = out / "figures" / f"{d.figure.slug}.{suffix}"
                path.write_bytes(data)
                outcome.files.append(path)
            outcome.figures.append(d.figure.slug)
    flops.to_csv(out / "min_flops.csv")
    outcome.page.write_text(page, encoding="utf-8")
    outcome.files += [out / "min_flops.csv", outcome.page]
    return outcome
