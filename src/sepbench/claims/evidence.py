"""Evidence that ships: the runs (or theory results) behind each verdict, as JSON lines in the repository.

``evidence/<scale>/<claim>.jsonl`` holds one record a line: ``{"kind": "run", "run": {...}}`` (a stored run: its
config, metrics, curve, code_version) or ``{"kind": "check", "entry": {...}, "code_version": ...}`` (a theory
check's check, params, series and seconds, and the code that wrote the record). ``sepbench reproduce --evidence`` loads them into a scratch store and judges each claim from
it, training nothing and running no check.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from pydantic import ValidationError

from sepbench.claims.catalogue import Claim
from sepbench.claims.checks import cache_entry, put_entry
from sepbench.claims.verdicts import INCONCLUSIVE, NO_EVIDENCE, ClaimVerdict, Outcome
from sepbench.config import ConfigError
from sepbench.store import Store
from sepbench.train.result import RunResult

CHECKOUT_EVIDENCE = Path(__file__).resolve().parents[3] / "evidence"
"""The ``evidence/`` folder of the checkout this sepbench runs from (``src/sepbench/claims/`` lies three below)."""


def default_root() -> Path:
    """The checkout's shipped evidence, wherever the command runs from; an installed copy, without it: ./evidence."""
    return CHECKOUT_EVIDENCE if CHECKOUT_EVIDENCE.is_dir() else Path("evidence")


def require_root(root: Path) -> Path:
    """``root`` when it is a folder; otherwise a one-line ConfigError naming it and what is allowed."""
    if not Path(root).is_dir():
        problem = "is a file, not a folder" if Path(root).exists() else "does not exist"
        raise ConfigError(f"evidence folder {root} {problem}; allowed: a folder of <scale>/<claim>.jsonl files, "
                          f"as `sepbench reproduce --write-evidence` writes them (default here: {default_root()})")
    return Path(root)


def path_for(root: Path, scale: str, claim_id: str) -> Path:
    return Path(root) / scale / f"{claim_id}.jsonl"


def records(claim: Claim, scale: str, store: Store, overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The claim's runs the store holds at ``scale`` (or its check's cached result), as evidence records."""
    if claim.kind == "theory":
        from sepbench.train.environment import code_version

        entry = cache_entry(claim.check, claim.at(scale).params, store.path)
        return [{"kind": "check", "entry": entry, "code_version": code_version()}] if entry else []
    found = []
    for cfg in claim.configs(scale, overrides):
        result = store.get(cfg.config_hash())
        if result is not None:
            found.append({"kind": "run", "run": json.loads(result.model_dump_json())})
    return found


class Written(NamedTuple):
    path: Path
    count: int
    """Records written; none when the store holds nothing for the claim (the file is left as it was)."""
    dropped: int
    """Runs of the file before that this write left out: the claim's spec no longer names them, or the store
    lacks them."""


def write(claim: Claim, scale: str, store: Store, root: Path, overrides: dict[str, Any] | None = None) -> Written:
    """Write the claim's evidence to ``root/<scale>/<id>.jsonl`` whole (a partial file, then renamed)."""
    lines = records(claim, scale, store, overrides)
    path = path_for(root, scale, claim.id)
    if not lines:
        return Written(path, 0, 0)
    dropped = len(_run_hashes(path) - {line["run"]["config_hash"] for line in lines if line["kind"] == "run"})
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    partial.replace(path)
    return Written(path, len(lines), dropped)


def _run_hashes(path: Path) -> set[str]:
    """The config hashes of the runs an evidence file holds (none for a missing file or a theory check's)."""
    hashes = set()
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            hashes.add(json.loads(line)["run"]["config_hash"])
        except (ValueError, KeyError, TypeError):
            continue
    return hashes


def load(claims: Sequence[Claim], scale: str, root: Path, store: Store, keep_stored: bool = False) -> list[str]:
    """Put every shipped record of ``claims`` at ``scale`` into ``store`` (runs) and its theory cache (checks);
    with ``keep_stored``, what the store already holds stays, except a failed or pruned run where the shipped one
    finished. Returns the ids of the claims with no evidence file. A malformed line is a one-line ConfigError."""
    held = _finished_or_not(store) if keep_stored else None
    missing = []
    for claim in claims:
        path = path_for(root, scale, claim.id)
        if not path.is_file():
            missing.append(claim.id)
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            _put(record, store, f"{path}:{number}", held)
    return missing


UNFINISHED = ("failed", "pruned")


def _finished_or_not(store: Store) -> dict[str, bool]:
    """Per stored config hash, whether that run finished (neither failed nor cut by a search)."""
    return {h: status not in UNFINISHED for h, (status, *_) in store.stored().items()}


def _put(record: Any, store: Store, where: str, held: dict[str, bool] | None = None) -> None:
    """Store one record; ``held``: what the store holds (``_finished_or_not``), which a shipped record replaces
    only where the stored run is unfinished and the shipped one is not."""
    kind = record.get("kind") if isinstance(record, dict) else None
    try:
        if kind == "run":
            run = RunResult.model_validate(record["run"])
            if held is None or run.config_hash not in held or (not held[run.config_hash]
                                                                and run.status not in UNFINISHED):
                store.put(run)
            return
        if kind == "check" and {"check", "params", "series", "seconds"} <= set(record["entry"]):
            entry = record["entry"]
            if held is None or cache_entry(entry["check"], entry["params"], store.path) is None:
                put_entry(entry, store.path)
            return
    except (KeyError, TypeError, ValidationError) as problem:
        raise ConfigError(f"{where}: not an evidence record ({type(problem).__name__}); allowed: a run or a "
                          f"check record as `sepbench reproduce --write-evidence` writes them") from None
    raise ConfigError(f"{where}: not an evidence record; allowed: {{\"kind\": \"run\", \"run\": ...}} or "
                      f"{{\"kind\": \"check\", \"entry\": ...}}")


def unshipped(claim: Claim, scale: str, root: Path) -> ClaimVerdict:
    """The verdict of a claim whose evidence is not in ``root``: inconclusive, saying so."""
    reason = f"{NO_EVIDENCE} at the {scale} scale ({path_for(root, scale, claim.id)})"
    return ClaimVerdict(claim, scale, INCONCLUSIVE, [Outcome(c.text, INCONCLUSIVE, reasons=[reason])
                                                     for c in claim.conditions])
