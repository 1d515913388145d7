"""docs/reproduction.md states the cpu-scale verdicts and tally that the shipped evidence gives."""
from __future__ import annotations

import re
from pathlib import Path

from sepbench.claims import select
from sepbench.claims.report import tally
from sepbench.claims.reproduce import judge_shipped

ROOT = Path(__file__).resolve().parents[1]
VERDICT_ROW = re.compile(r"^\| `([a-z0-9-]+)` \| ((?:reproduced|not reproduced|inconclusive)[^|]*?) \|", re.M)
TALLY = re.compile(r"Tally at the cpu scale \(.*?\): (\d+ reproduced, \d+ not reproduced, \d+ inconclusive; \d+\s+exploratory)",
                   re.S)


def _cpu_section() -> str:
    text = (ROOT / "docs" / "reproduction.md").read_text()
    return text.split("\n## The cpu scale\n", 1)[1].split("\n## ", 1)[0]


def _plain(verdict: str) -> str:
    """'inconclusive: still learning at 12 000 steps (all 90 runs)' -> '... at 12000 steps'."""
    return re.sub(r"(\d) (\d{3})", r"\1\2", re.sub(r"\s*\([^)]*\)$", "", verdict)).strip()


def test_the_cpu_verdict_table_and_tally_match_the_shipped_evidence():
    claims = select()
    shipped = judge_shipped(claims, "cpu", ROOT / "evidence")
    judged = {v.claim.id: v for v in shipped.verdicts}
    section = _cpu_section()
    documented = {claim: _plain(verdict) for claim, verdict in VERDICT_ROW.findall(section)}
    run_here = {v.claim.id for v in shipped.verdicts if v.claim.kind != "theory" and v.claim.at("cpu").not_run is None}
    assert run_here and run_here <= set(documented), sorted(run_here - set(documented))
    wrong = {claim: (said, judged[claim].label) for claim, said in documented.items() if said != judged[claim].label}
    assert not wrong, wrong
    (said_tally,) = TALLY.findall(section)
    assert " ".join(said_tally.split()) == tally(shipped.verdicts).removesuffix(" (not the paper's claims)")


def test_the_quick_tally_matches_the_shipped_evidence():
    text = " ".join((ROOT / "docs" / "reproduction.md").read_text().split())
    (said,) = re.findall(r"Tally of the papers' claims at the quick scale: ([^;]+; \d+ exploratory)", text)
    assert said == tally(judge_shipped(select(), "quick", ROOT / "evidence").verdicts).removesuffix(
        " (not the paper's claims)")
