"""Write the report: one self-contained HTML page (figures embedded) plus each figure as PNG and SVG."""
from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import pandas as pd

from sepbench.report.figures import SECTIONS, Figure, random_network_experiments, size_cells
from sepbench.sweep.search import SolvedRule, min_flops_table
from sepbench.train.result import RunResult

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; } .mirrors { font-weight: 600; }
table { border-collapse: collapse; margin: 1em 0; } td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; }
td { text-align: right; } .empty { color: #777; font-style: italic; }
"""


@dataclass
class DrawnFigure:
    """A figure rendered to bytes, so nothing is written until every figure has been drawn."""

    figure: Figure
    png: bytes
    svg: bytes


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
    plt.close(figure.figure)
    return DrawnFigure(figure, png.getvalue(), svg.getvalue())


def flops_table(results: Sequence[RunResult], rule: SolvedRule) -> pd.DataFrame:
    """Models as rows, lengths as columns: the fewest GFLOPs of a solving size, as Yang et al. 2024, Table 2."""
    best = min_flops_table(results, rule)
    if best.empty:
        return best
    best["cell"] = [f"{g:.4g} [{paper:.4g}] ({layers}, {width})"
                    for g, paper, layers, width in zip(best.gflops, best.paper_gflops, best.layers, best.width)]
    best["row"] = best.task + " / " + best.model
    return best.pivot(index="row", columns="length", values="cell").fillna("not solved")


def _figure_html(drawn: DrawnFigure) -> str:
    fig = drawn.figure
    data = base64.b64encode(drawn.png).decode("ascii")
    return (f'<figure id="{fig.slug}"><img src="data:image/png;base64,{data}" alt="{html.escape(fig.title)}">'
            f'<figcaption><span class="mirrors">{html.escape(fig.title)}; mirrors {html.escape(fig.mirrors)}.</span> '
            f'{html.escape(fig.caption)} Files: <a href="figures/{fig.slug}.png">PNG</a>, '
            f'<a href="figures/{fig.slug}.svg">SVG</a>.</figcaption></figure>')


def _table_html(table: pd.DataFrame) -> str:
    head = "".join(f"<th>N = {html.escape(str(c))}</th>" for c in table.columns)
    body = "".join(f"<tr><th>{html.escape(str(i))}</th>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row)
                   + "</tr>" for i, row in zip(table.index, table.to_numpy()))
    return f"<table><tr><th>task / model</th>{head}</tr>{body}</table>"


def build_page(sections: list[tuple[str, list[DrawnFigure]]], flops: pd.DataFrame, runs: int, source: str,
               rule: SolvedRule, flops_rule: SolvedRule) -> str:
    parts = [f"<h1>sepbench report</h1><p>{runs} runs from <code>{html.escape(source)}</code>, written "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. Solved means {html.escape(str(rule))}.</p>"]
    for title, drawn in sections:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.extend(_figure_html(d) for d in drawn)
        if not drawn:
            parts.append('<p class="empty">No stored runs for this figure.</p>')
    parts.append("<h2>Minimum FLOPs to reach the threshold</h2>"
                 f"<p>Mirrors Yang et al. 2024, Table 2: per task and model, the forward GFLOPs of one sequence for "
                 f"the cheapest size (layers, width) that is solved ({html.escape(str(flops_rule))}); in brackets, the "
                 f"same size counted by Table 2's convention (no attention term).</p>")
    parts.append(_table_html(flops) if not flops.empty else '<p class="empty">No size reaches the threshold.</p>')
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>sepbench report</title>'
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_report(results: Sequence[RunResult], out_dir: str | Path, source: str = "store",
                 rule: SolvedRule = SolvedRule(), flops_rule: SolvedRule = SolvedRule(0.9),
                 random_networks: pd.DataFrame | None = None) -> ReportOutcome:
    """Draw every figure the runs support, then write ``index.html``, ``figures/*.{png,svg}`` and ``min_flops.csv``.

    ``random_networks``: stored Deng et al. experiment points (``Store.query_softmax_vs_linear()``), if any.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out must be a directory, but {out} is a file")
    cells = size_cells(results, rule)
    sections = [(title, [_render(f) for f in make(results, cells, rule)]) for title, make in SECTIONS]
    if random_networks is not None and not random_networks.empty:
        sections.append(("Softmax against linear attention: random networks",
                         [_render(f) for f in random_network_experiments(random_networks)]))
    flops = flops_table(results, flops_rule)
    page = build_page(sections, flops, len(results), source, rule, flops_rule)

    (out / "figures").mkdir(parents=True, exist_ok=True)
    outcome = ReportOutcome(page=out / "index.html", runs=len(results))
    for _, drawn in sections:
        for d in drawn:
            for suffix, data in (("png", d.png), ("svg", d.svg)):
                path = out / "figures" / f"{d.figure.slug}.{suffix}"
                path.write_bytes(data)
                outcome.files.append(path)
            outcome.figures.append(d.figure.slug)
    flops.to_csv(out / "min_flops.csv")
    outcome.page.write_text(page, encoding="utf-8")
    outcome.files += [out / "min_flops.csv", outcome.page]
    return outcome
