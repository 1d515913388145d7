"""The reproduction section: a Markdown table of verdicts and one figure per claim (PNG), written whole."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from sepbench.claims.verdicts import ClaimVerdict

RULES = ("Verdicts follow the rule stated in each claim (sepbench.claims.evaluate): reproduced when every condition "
         "holds on every seed pairing, not reproduced when a condition fails on every pairing, inconclusive when "
         "seeds straddle the margin, runs are missing, failed, diverged or too few, or a deciding run was still "
         "learning at the end of its budget. Exploratory claims (not the papers') are outside the tally.")
VERDICT_NAMES = ("reproduced", "not reproduced", "inconclusive")


def tally(verdicts: Sequence[ClaimVerdict]) -> str:
    """'3 reproduced, 1 not reproduced, 2 inconclusive; 1 exploratory (...)': the papers' claims counted apart
    from the exploratory ones."""
    claims = [v for v in verdicts if not v.claim.exploratory]
    text = ", ".join(f"{sum(v.verdict == name for v in claims)} {name}" for name in VERDICT_NAMES)
    extra = len(verdicts) - len(claims)
    return text + (f"; {extra} exploratory (not the paper's claims)" if extra else "")


def shown_verdict(verdict: ClaimVerdict) -> str:
    """The verdict as a table shows it: still learning spelled out, exploratory claims marked."""
    return verdict.label + (" (exploratory)" if verdict.claim.exploratory else "")


def markdown(verdicts: Sequence[ClaimVerdict], budget: str, figures: dict[str, str] | None = None) -> str:
    """The verdict table, then per claim its conditions, evidence and reasons."""
    lines = ["# Reproduction of the papers' claims", "", budget, "", RULES, "", tally(verdicts) + ".", "",
             "| claim | paper, where | verdict | wall time, CPU time | evidence |", "|---|---|---|---|---|"]
    for v in verdicts:
        first = "; ".join(o.evidence[0] for o in v.outcomes if o.evidence) or "-"
        lines.append(f"| `{v.claim.id}` | {v.claim.paper}, {v.claim.place} | **{shown_verdict(v)}** | "
                     f"{v.cost} | {first.replace('|', '/')} |")
    for v in verdicts:
        lines += ["", f"## `{v.claim.id}`: {shown_verdict(v)}", "", f"{v.claim.text} ({v.claim.paper}, {v.claim.where})"
                  + (f" — exploratory: {v.claim.exploratory_reason}." if v.claim.exploratory else ""),
                  ""]
        for o in v.outcomes:
            lines.append(f"- {o.text}: **{o.verdict}**")
            lines += [f"  - {e}" for e in o.evidence]
            lines += [f"  - why inconclusive: {r}" for r in o.reasons]
        if figures and v.claim.id in figures:
            lines += ["", f"![{v.claim.id}]({figures[v.claim.id]})"]
    return "\n".join(lines) + "\n"


def draw(verdict: ClaimVerdict):
    """One panel per condition: each group's mean over seeds against N, with the seeds' range as error bars, a
    level condition's threshold as a dashed line, and accuracies on a 0-1 axis."""
    from matplotlib.figure import Figure

    outcomes = verdict.outcomes
    fig = Figure(figsize=(4.2 * len(outcomes), 3.4))
    axes = fig.subplots(1, len(outcomes), squeeze=False)[0]
    for ax, outcome in zip(axes, outcomes):
        labels = list(dict.fromkeys(p.label for p in outcome.points))
        for i, label in enumerate(labels):
            points = sorted((p for p in outcome.points if p.label == label and p.values), key=lambda p: p.x)
            if not points:
                continue
            xs = [p.x for p in points]
            means = [p.mean for p in points]
            low = [max(0.0, p.mean - min(p.values)) for p in points]  # a mean of equal values may round above them
            high = [max(0.0, max(p.values) - p.mean) for p in points]
            ax.errorbar(xs, means, yerr=[low, high], marker="o", capsize=3, label=_legend(label, points),
                        color=f"C{i}")
        if outcome.threshold is not None:
            ax.axhline(outcome.threshold, color="0.4", linestyle="--", linewidth=1, label=f"{outcome.threshold:g}")
        values = [v for p in outcome.points for v in p.values]
        if values and all(0 <= v <= 1 for v in values):
            ax.set_ylim(-0.03, 1.03)
        xs = sorted({p.x for p in outcome.points})
        if 0 < len(xs) <= 8:
            ax.set_xticks(xs)
        ax.set_title(f"{outcome.verdict}\n{_wrap(outcome.text)}", fontsize=7)
        ax.set_xlabel(outcome.x_label)
        if not outcome.x_label:
            ax.set_xticks([])
        ax.set_ylabel("mean over seeds (bars: seed range)", fontsize=7)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.suptitle(f"{verdict.claim.id} ({verdict.scale} scale): {shown_verdict(verdict)}", fontsize=9)
    fig.tight_layout()
    return fig


def _legend(label: str, points: Sequence) -> str:
    """The group's label, and the member picked from it when one member stands for it at every N."""
    members = {p.member for p in points}
    if len(members) == 1 and "" not in members and members != {label}:
        return f"{label}: {members.pop()}"
    return label


def _wrap(text: str, width: int = 60) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if len(line) + len(word) + 1 > width and line:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join(lines + [line])


def write(verdicts: Sequence[ClaimVerdict], out_dir: Path, budget: str) -> Path:
    """``out_dir/reproduction.md`` and ``out_dir/figures/claim-<id>.png``; drawn first, then moved in place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".reproduce-") as scratch:
        staging = Path(scratch)
        (staging / "figures").mkdir()
        figures = {}
        for v in verdicts:
            name = f"figures/claim-{v.claim.id}.png"
            draw(v).savefig(staging / name, dpi=110)
            figures[v.claim.id] = name
        (staging / "reproduction.md").write_text(markdown(verdicts, budget, figures))
        (out_dir / "figures").mkdir(exist_ok=True)
        for name in figures.values():
            shutil.move(str(staging / name), str(out_dir / name))
        page = out_dir / "reproduction.md"
        shutil.move(str(staging / "reproduction.md"), str(page))
    return page

