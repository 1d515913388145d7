"""``sepbench report``: the HTML report and its figures from the stored runs."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sepbench.cli.app import bad_input_exits, say, warn, warn_stopped_short, warn_unreadable
from sepbench.cli.options import require_folder, store_option
from sepbench.config import ConfigError
from sepbench.wording import counted


def report(
    out_dir: Path = typer.Option(..., "--out", help="directory for index.html, figures/*.{png,svg,json}, min_flops.csv"),
    store: Optional[Path] = store_option(),
    threshold: Optional[float] = typer.Option(None, help="accuracy a seed must reach to count as solved [default: "
                                              "each cell's own train.threshold, the level its runs stop early at]"),
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
            rule = SolvedRule(threshold, k, m)
        except ValueError as problem:
            raise ConfigError(f"--threshold, --k, --m: {problem}") from None
        try:
            flops_rule = SolvedRule(flops_threshold, k, m)
        except ValueError as problem:
            raise ConfigError(f"--flops-threshold: {problem}") from None
        db = Store(store)
        if not db.path.exists():
            raise FileNotFoundError(f"no store at {db.path}; run `sepbench sweep` or `sepbench run` first")
        require_folder(out_dir / "figures", given=out_dir)
        for name in ("index.html", "min_flops.csv"):
            if (out_dir / name).is_dir():
                raise ConfigError(f"--out {out_dir}: {out_dir / name} is a folder, where the report writes a file")
        results, random_networks = db.results(), db.query_softmax_vs_linear()
    warn_unreadable(db)
    if not results and random_networks.empty:
        warn(f"no runs in {db.path}, and no `sepbench softmax-vs-linear` figures: nothing to report, nothing written")
        raise typer.Exit(1)
    warn_stopped_short(results, threshold, "--threshold")
    warn_stopped_short(results, flops_threshold, "--flops-threshold")
    outcome = write_report(results, out_dir, source=str(db.path), rule=rule, flops_rule=flops_rule,
                           random_networks=random_networks)
    figures = ", ".join(outcome.figures) or "none"
    say(f"report of {counted(outcome.runs, 'run')}: {counted(len(outcome.figures), 'figure')} ({figures})")
    say(f"open {outcome.page.resolve()}")
