"""Evidence that ships: the runs (or theory results) behind each verdict, as JSON lines in the repository.

``evidence/<scale>/<claim>.jsonl`` holds one record a line: ``{"kind": "run", "run": {...}}`` (a stored run: its
config, metrics, curve, code_version) or ``{"kind": "check", "entry": {...}, "code_version": ...}`` (a theory
check's check, params, series and seconds, and the code that wrote the record). ``sepbench reproduce --evidence`` loads them into a scratch store and judges each claim from
it, training nothing and running no check.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from pydantic import ValidationError

from sepbench.claims.catalogue import Claim
from sepbench.claims.checks import cache_entry, put_entry
from sepbench.claims.verdicts import INCONCLUSIVE, NO_EVIDENCE, ClaimVerdict, Outcome
from sepbench.config import ConfigError
from sepbench.files import write_whole
from sepbench.store import Store
from sepbench.train.result import RunResult

UNFINISHED = ("failed", "pruned")
"""Statuses of runs that did not finish: a shipped record that finished replaces them."""

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


def records(claim: Claim, scale: str, store: Store, overrides: dict[str, Any] | None = None,
            shipped: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The claim's runs at ``scale`` (or its check's cached result) as evidence records: the store's, and where it
    lacks a run of the spec, or holds it unfinished, the record of ``shipped`` (an evidence file's, by config hash;
    ``"check"``: its check record, which keeps its code_version while its entry is the store's)."""
    shipped = shipped or {}
    if claim.kind == "theory":
        from sepbench.train.environment import code_version

        entry = cache_entry(claim.check, claim.at(scale).params, store.path)
        if entry is None:
            return []
        before = shipped.get("check")
        same = before is not None and before.get("entry") == json.loads(json.dumps(entry))
        return [before if same else {"kind": "check", "entry": entry, "code_version": code_version()}]
    found = []
    for cfg in claim.configs(scale, overrides):
        config_hash = cfg.config_hash()
        result, before = store.get_readable(config_hash), shipped.get(config_hash)
        if result is not None and not (result.status in UNFINISHED and before is not None
                                       and before["run"].get("status") not in UNFINISHED):
            found.append({"kind": "run", "run": json.loads(result.model_dump_json())})
        elif before is not None:
            found.append(before)
    return found


class Written(NamedTuple):
    path: Path
    count: int
    """Records written; none when neither the store nor the file holds any of the claim's (nothing is written)."""
    dropped: int
    """Runs of the file before that this write left out, because the claim's spec no longer names them."""


def write(claim: Claim, scale: str, store: Store, root: Path, overrides: dict[str, Any] | None = None) -> Written:
    """Write the claim's evidence to ``root/<scale>/<id>.jsonl`` whole: the store's records, beside the file's own
    runs that the spec still names and the store lacks, so a write from a store without them loses none."""
    path = path_for(root, scale, claim.id)
    before = _file_records(path)
    lines = records(claim, scale, store, overrides, before)
    if not lines:
        return Written(path, 0, 0)
    kept = {line["run"]["config_hash"] for line in lines if line["kind"] == "run"}
    dropped = len(set(before) - kept - {"check"})
    write_whole(path, "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    return Written(path, len(lines), dropped)


def _file_records(path: Path) -> dict[str, dict[str, Any]]:
    """The records an evidence file holds, by run config hash (``"check"`` for a theory check's); none for a missing
    file. A line that is not a record is left out: ``load`` names it."""
    found: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
            found[record["run"]["config_hash"] if record["kind"] == "run" else "check"] = record
        except (ValueError, KeyError, TypeError):
            continue
    return found


def load(claims: Sequence[Claim], scale: str, root: Path, store: Store, keep_stored: bool = False) -> list[str]:
    """Put every shipped record of ``claims`` at ``scale`` into ``store`` (runs) and its theory cache (checks);
    with ``keep_stored``, what the store already holds stays, except a failed or pruned run where the shipped one
    finished. Returns the ids of the claims with no evidence file. A malformed line is a one-line ConfigError, raised
    before anything is stored."""
    held = _finished_or_not(store) if keep_stored else None
    missing, checked = [], []
    for claim in claims:
        path = path_for(root, scale, claim.id)
        if not path.is_file():
            missing.append(claim.id)
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                checked.append(_checked(line, f"{path}:{number}"))
    for record in checked:
        _put(record, store, held)
    return missing


def _finished_or_not(store: Store) -> dict[str, bool]:
    """Per stored config hash, whether that run finished (neither failed nor cut by a search, and readable)."""
    from sepbench.train.environment import code_version

    stored = store.stored(code_version())
    return {h: status not in (*UNFINISHED, "unreadable") for h, (status, *_) in stored.items()}


def _checked(line: str, where: str) -> RunResult | dict[str, Any]:
    """One line as what it stores: a run (its config hashing to its config_hash), or a check's cache entry; else
    a one-line ConfigError naming the line and what is wrong."""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    kind = record.get("kind") if isinstance(record, dict) else None
    try:
        if kind == "run":
            run = RunResult.model_validate(record["run"])
            if run.config.config_hash() != run.config_hash:
                raise ConfigError(f"{where}: the run's config hashes to {run.config.config_hash()}, not to its "
                                  f"config_hash {run.config_hash}; allowed: records as `sepbench reproduce "
                                  "--write-evidence` writes them, unedited")
            return run
        if kind == "check" and {"check", "params", "series", "seconds"} <= set(record["entry"]):
            return record["entry"]
    except (KeyError, TypeError, ValidationError) as problem:
        field = ""
        if isinstance(problem, ValidationError) and problem.errors():
            field = f" at {'.'.join(str(part) for part in problem.errors()[0]['loc'])}"
        raise ConfigError(f"{where}: not an evidence record ({type(problem).__name__}{field}); allowed: a run or a "
                          f"check record as `sepbench reproduce --write-evidence` writes them") from None
    raise ConfigError(f"{where}: not an evidence record; allowed: {{\"kind\": \"run\", \"run\": ...}} or "
                      f"{{\"kind\": \"check\", \"entry\": ...}}")


def _put(record: RunResult | dict[str, Any], store: Store, held: dict[str, bool] | None = None) -> None:
    """Store one checked record; ``held``: what the store holds (``_finished_or_not``), which a shipped record
    replaces only where the stored run is unfinished and the shipped one is not."""
    if isinstance(record, RunResult):
        if held is None or record.config_hash not in held or (not held[record.config_hash]
                                                               and record.status not in UNFINISHED):
            store.put(record)
        return
    if held is None or cache_entry(record["check"], record["params"], store.path) is None:
        put_entry(record, store.path)


def unshipped(claim: Claim, scale: str, root: Path) -> ClaimVerdict:
    """The verdict of a claim whose evidence is not in ``root``: inconclusive, saying so."""
    reason = f"{NO_EVIDENCE} at the {scale} scale ({path_for(root, scale, claim.id)})"
    return ClaimVerdict(claim, scale, INCONCLUSIVE, [Outcome(c.text, INCONCLUSIVE, reasons=[reason])
                                                     for c in claim.conditions])
