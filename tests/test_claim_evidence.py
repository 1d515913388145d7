"""Evidence that ships: a claim's runs as JSON lines, judged again by `sepbench reproduce --evidence`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sepbench.claims import select
from sepbench.claims import evidence
from sepbench.cli import app
from sepbench.config import ConfigError
from sepbench.store import Store
from sepbench.train.result import EvalPoint, RunResult

runner = CliRunner()
CLAIM = "mamba-wide-vs-transformer"


def _store(path, transformer_accuracy: float, overrides=None) -> Store:
    """The claim's quick runs, stored with a flat curve each: TF-(1, 64) at ``transformer_accuracy``, Mamba 0.3."""
    (claim,) = select(None, CLAIM)
    store = Store(path)
    for cfg in claim.configs("quick", overrides):
        acc = transformer_accuracy if cfg.model.name == "transformer" else 0.3
        curve = [EvalPoint(step=cfg.train.steps * k // 3, loss=1.0 - acc, accuracy=acc, seconds=1.0) for k in (1, 2, 3)]
        store.put(RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", metrics={"accuracy": acc},
                            curve=curve, steps=cfg.train.steps, wall_seconds=1.0, code_version="abc"))
    return store


def test_written_evidence_is_judged_again_without_training(tmp_path):
    (claim,) = select(None, CLAIM)
    path, count, _ = evidence.write(claim, "quick", _store(tmp_path / "ours.db", 0.99), tmp_path / "evidence")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert path == tmp_path / "evidence" / "quick" / f"{CLAIM}.jsonl" and count == len(lines) == 24
    assert {"config", "metrics", "curve", "code_version"} <= set(lines[0]["run"])
    result = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--claim", "bound-8k", "--evidence", "--scale", "quick",
                                 "--evidence-dir", str(tmp_path / "evidence")], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "0 reproduced, 0 not reproduced, 2 inconclusive" in result.stdout  # Mamba-64 behind: not shown at 1024
    assert "inconclusive: this scale stops short of the size the text names" in result.stdout
    assert "inconclusive: no evidence shipped" in result.stdout  # bound-8k has no file in this folder
    not_run = runner.invoke(app, ["reproduce", "--claim", "eq-ncp", "--evidence", "--scale", "cpu", "--evidence-dir",
                                  str(tmp_path / "evidence")], terminal_width=300)
    assert not_run.exit_code == 0, not_run.output
    assert "evidence for 0 of the 0 claims run at the cpu scale; 1 not run there" in not_run.stdout and "inconclusive: not run at the cpu scale" in not_run.stdout
    yours = _store(tmp_path / "yours.db", 0.5)
    beside = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--evidence", "--scale", "quick", "--evidence-dir",
                                 str(tmp_path / "evidence"), "--store", str(yours.path)], terminal_width=300)
    assert beside.exit_code == 0, beside.output
    unset = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--evidence", "--scale", "quick", "--evidence-dir",
                                str(tmp_path / "evidence")],
                          env={"SEPBENCH_STORE": str(tmp_path / "none.db")}, terminal_width=300)
    assert unset.exit_code == 0 and "beside" not in unset.stdout, unset.output  # a default store not made yet
    from_env = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--evidence", "--scale", "quick", "--evidence-dir",
                                   str(tmp_path / "evidence")], env={"SEPBENCH_STORE": str(yours.path)}, terminal_width=300)
    assert from_env.exit_code == 0 and "yours: 0 reproduced, 1 not reproduced" in from_env.stdout, from_env.output
    row = next(line for line in beside.stdout.splitlines() if line.startswith(f"│ {CLAIM}"))
    assert "inconclusive" in row.split("│")[2] and "not" in row.split("│")[3]  # "not reproduced", folded
    assert "yours: 0 reproduced, 1 not reproduced, 0 inconclusive" in beside.stdout


def test_the_verdicts_read_whole_on_a_narrow_console_and_as_a_table_on_a_wide_one(monkeypatch):
    from sepbench.cli.app import out

    args = ["reproduce", "--claim", "il-tf-vs-recurrent", "--claim", "bound-8k", "--evidence", "--scale", "cpu"]
    monkeypatch.setattr(out, "_width", 80)
    narrow = runner.invoke(app, args)
    assert narrow.exit_code == 0, narrow.output
    assert "il-tf-vs-recurrent: reproduced (" in narrow.stdout and "┃" not in narrow.stdout
    assert "  bhattamishra2024, sec. 6, L196\n" in narrow.stdout
    assert "    N=200: name=transformer transformer-(1, 64) lr 0.0001 0.968 [0.965, 0.971]" in narrow.stdout
    monkeypatch.setattr(out, "_width", 200)
    wide = runner.invoke(app, args)
    assert wide.exit_code == 0, wide.output
    header = next(line for line in wide.stdout.splitlines() if line.startswith("┃ claim"))
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == ["claim", "where", "evidence", "verdict", "wall, CPU"]
    row = next(line for line in wide.stdout.splitlines() if line.startswith("│ il-tf-vs-recurrent "))
    assert "bhattamishra2024" in row and "reproduced" in row.split("│")[4]


def test_a_malformed_evidence_line_or_an_override_is_one_line(tmp_path):
    folder = tmp_path / "evidence" / "quick"
    folder.mkdir(parents=True)
    (folder / f"{CLAIM}.jsonl").write_text('{"kind": "run", "run": {"config": 3}}\n')
    bad = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--evidence", "--scale", "quick", "--evidence-dir",
                              str(tmp_path / "evidence")])
    assert bad.exit_code == 2 and bad.stderr.strip().count("\n") == 0, bad.output
    assert f"{CLAIM}.jsonl:1: not an evidence record" in bad.stderr
    nowhere = runner.invoke(app, ["reproduce", "--evidence", "--store", str(tmp_path / "none.db")])
    assert nowhere.exit_code == 2 and "does not exist" in nowhere.stderr and not (tmp_path / "none.db").exists()
    mixed = runner.invoke(app, ["reproduce", "--evidence", "--set", "train.steps=3"])
    assert mixed.exit_code == 2 and "--evidence does not use --set; allowed with it: --claim" in mixed.stderr
    smoke = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--set", "train.steps=3", "--write-evidence",
                                "--store", str(tmp_path / "smoke.db")])
    assert smoke.exit_code == 2 and "would replace the shipped evidence with overridden runs" in smoke.stderr
    named = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--set", "train.steps=3", "--write-evidence",
                                "--evidence-dir", str(evidence.default_root()), "--store", str(tmp_path / "smoke.db")])
    assert named.exit_code == 2 and "would replace the shipped evidence with overridden runs" in named.stderr
    assert not (tmp_path / "smoke.db").exists()


def test_a_bad_evidence_file_stores_nothing_and_an_edited_record_is_named(tmp_path):
    (claim,) = select(None, CLAIM)
    root = tmp_path / "evidence"
    path, _, _ = evidence.write(claim, "quick", _store(tmp_path / "ours.db", 0.99), root)
    good = path.read_text().splitlines()
    path.write_text("\n".join(good[:3] + ['{"kind": "run", "run": {"status": "solved"}}']) + "\n")
    store = Store(tmp_path / "resumed.db")
    with pytest.raises(ConfigError, match=rf"{CLAIM}.jsonl:4: not an evidence record \(ValidationError at "):
        evidence.load([claim], "quick", root, store)
    assert len(store) == 0
    edited = json.loads(good[1])
    edited["run"]["config"]["model"]["width"] = 256
    path.write_text("\n".join([good[0], json.dumps(edited)]) + "\n")
    with pytest.raises(ConfigError, match=rf"{CLAIM}.jsonl:2: the run's config hashes to [0-9a-f]+, not to its "
                                          rf"config_hash {edited['run']['config_hash']}"):
        evidence.load([claim], "quick", root, store)
    assert len(store) == 0


def test_a_check_written_again_keeps_the_code_that_computed_it(tmp_path):
    from sepbench.claims.checks import cache_entry

    (claim,) = select(None, "bound-8k")
    root = tmp_path / "evidence"
    shipped = evidence.path_for(evidence.default_root(), "quick", claim.id).read_text()
    record = json.loads(shipped)
    record["code_version"] = "older0code00"
    evidence.path_for(root, "quick", claim.id).parent.mkdir(parents=True)
    evidence.path_for(root, "quick", claim.id).write_text(json.dumps(record) + "\n")
    store = Store(tmp_path / "s.db")
    evidence.load([claim], "quick", root, store)
    assert cache_entry(claim.check, claim.at("quick").params, store.path) is not None
    evidence.write(claim, "quick", store, root)
    (again,) = [json.loads(line) for line in evidence.path_for(root, "quick", claim.id).read_text().splitlines()]
    assert again == record


def test_a_file_written_whole_leaves_the_old_one_and_no_partial_when_the_write_fails(tmp_path, monkeypatch):
    import os

    from sepbench.files import write_whole

    target = tmp_path / "e" / "claim.jsonl"
    write_whole(target, "old\n")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_whole(target, "new\n")
    assert target.read_text() == "old\n" and sorted(p.name for p in target.parent.iterdir()) == ["claim.jsonl"]


def test_the_shipped_evidence_is_found_from_any_folder_and_a_missing_folder_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = Path(__file__).resolve().parents[1] / "evidence"
    found = runner.invoke(app, ["reproduce", "--claim", "bound-8k", "--evidence"], terminal_width=300)
    assert found.exit_code == 0 and f"in {shipped / 'cpu'}" in found.stdout, found.output  # --evidence alone: cpu
    assert "bound-8k: reproduced" in found.stdout
    for flag in ("--evidence", "--resume-evidence"):
        missing = runner.invoke(app, ["reproduce", "--claim", CLAIM, flag, "--evidence-dir", str(tmp_path / "typo"),
                                      "--store", str(tmp_path / "s.db")])
        assert missing.exit_code == 2 and missing.stderr.strip().count("\n") == 0, missing.output
        assert f"evidence folder {tmp_path / 'typo'} does not exist" in missing.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    (tmp_path / "a_file").write_text("x")
    for flag in ("--evidence", "--resume-evidence"):
        a_file = runner.invoke(app, ["reproduce", "--claim", CLAIM, flag, "--evidence-dir", str(tmp_path / "a_file"),
                                     "--store", str(tmp_path / "s.db")])
        assert a_file.exit_code == 2 and "a_file is a file, not a folder" in a_file.stderr, a_file.output
    (tmp_path / "other" / "quick").mkdir(parents=True)
    (tmp_path / "other" / "quick" / f"{CLAIM}.jsonl").write_text("")
    elsewhere = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--evidence", "--scale", "cpu", "--evidence-dir",
                                    str(tmp_path / "other")])
    assert elsewhere.exit_code == 2 and elsewhere.stderr.strip().count("\n") == 0, elsewhere.output
    assert f"--evidence-dir {tmp_path / 'other'} has no cpu/ folder (scales it holds: quick)" in elsewhere.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--evidence", "--with-model", "lstm"], "--evidence does not use --with-model; allowed with it: --claim, "
                                             "--scale, --store, --evidence-dir"),
    (["--evidence", "--out", "{tmp}/out", "--workers", "2"], "--evidence does not use --out, --workers"),
    (["--list", "--retry-failed"], "--list does not use --retry-failed; allowed with it: --claim, --scale"),
    (["--with-model", "lstm", "--write-evidence"], "--with-model does not use --write-evidence"),
    (["--with-model", "lstm", "--settle-ties"], "--with-model does not use --settle-ties"),
    (["--claim", "deng-r1", "--set", "train.bogus=3"], "--set changes the runs of learned claims; deng-r1 is a theory"),
    (["--evidence", "--store", "{tmp}/folder"], "is a directory"),
    (["--evidence", "--store", "{tmp}/garbage.db", "--claim", "bound-8k"], "file is not a database"),
    (["--evidence", "--store", "{tmp}/foreign.db"], "foreign.db is an SQLite file of another program (tables: t)"),
    (["--dry-run", "--claim", CLAIM, "--store", "{tmp}/foreign.db"], "an SQLite file of another program"),
    (["--claim", CLAIM, "--set", "train.steps=2", "--write-evidence", "--evidence-dir", "{tmp}/garbage.db"],
     "--evidence-dir {tmp}/garbage.db: {tmp}/garbage.db is a file, not a folder"),
    (["--claim", "bound-8k", "--out", "/proc/sepbench-report"], "--out /proc/sepbench-report: /proc cannot be written"),
    (["--claim", CLAIM, "--write-evidence", "--evidence-dir", "{tmp}/ev_file"],
     "--evidence-dir {tmp}/ev_file: {tmp}/ev_file/quick is a file, not a folder"),
    (["--claim", CLAIM, "--write-evidence", "--evidence-dir", "{tmp}/ev_dir"],
     f"--evidence-dir {{tmp}}/ev_dir: {{tmp}}/ev_dir/quick/{CLAIM}.jsonl is a folder, where the evidence of {CLAIM} "
     "goes"),
])
def test_reproduce_refuses_what_its_mode_would_ignore_or_spoil_before_training(tmp_path, store_path, args, fragment):
    import sqlite3
    from contextlib import closing

    (tmp_path / "folder").mkdir()
    (tmp_path / "garbage.db").write_text("garbage\n")
    (tmp_path / "ev_file").mkdir()
    (tmp_path / "ev_file" / "quick").write_text("x")
    (tmp_path / "ev_dir" / "quick" / f"{CLAIM}.jsonl").mkdir(parents=True)
    with closing(sqlite3.connect(tmp_path / "foreign.db")) as foreign:
        foreign.execute("CREATE TABLE t (x)")
        foreign.commit()
    refused = runner.invoke(app, ["reproduce", *[a.format(tmp=tmp_path) for a in args]])
    assert refused.exit_code == 2 and refused.stderr.strip().count("\n") == 0, refused.output
    assert fragment.format(tmp=tmp_path) in refused.stderr, refused.stderr
    assert not store_path.exists() and not (tmp_path / "out").exists()
    with closing(sqlite3.connect(tmp_path / "foreign.db")) as foreign:
        assert [row[0] for row in foreign.execute("SELECT name FROM sqlite_master")] == ["t"]


def test_the_shipped_evidence_covers_every_theory_claim_and_names_its_code():
    root = Path(__file__).resolve().parents[1] / "evidence"
    missing = []
    for claim in select():
        path = evidence.path_for(root, "quick", claim.id)
        if not path.is_file():
            missing += [claim.id] if claim.kind == "theory" else []
            continue
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert (record.get("code_version") or record["run"]["code_version"]), (claim.id, line[:80])
    assert not missing


def test_every_shipped_run_keeps_its_name_under_this_code():
    """A new option or field must not rename stored runs: the shipped evidence would then read as missing."""
    from sepbench.config import RunConfig

    root = Path(__file__).resolve().parents[1] / "evidence"
    renamed = []
    for path in sorted(root.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "run":
                run = record["run"]
                if RunConfig.build(run["config"]).config_hash() != run["config_hash"]:
                    renamed.append((path.name, run["config_hash"]))
    assert not renamed, renamed[:5]


def test_a_path_option_leaves_a_runs_name_alone():
    from sepbench.config import RunConfig

    base = {"task": {"name": "index_lookup", "length": 20}, "model": {"name": "mamba", "layers": 1, "width": 16}}
    names = {RunConfig.build({**base, "model": {**base["model"], "options": options}}).config_hash()
             for options in ({}, {"linear": "torch"}, {"linear": "onednn"})}
    assert len(names) == 1
    assert RunConfig.build({**base, "model": {**base["model"], "options": {"state": 8}}}).config_hash() not in names


def test_resume_evidence_trains_only_what_the_shipped_runs_lack_and_keeps_ones_own(tmp_path):
    (claim,) = select(None, CLAIM)
    path = evidence.write(claim, "quick", _store(tmp_path / "shipped.db", 0.99), tmp_path / "evidence").path
    every_line = path.read_text().splitlines()
    dropped = claim.configs("quick")[:5]

    def ship_without(configs) -> None:
        gone = {cfg.config_hash() for cfg in configs}
        path.write_text("".join(line + "\n" for line in every_line if json.loads(line)["run"]["config_hash"] not in gone))

    ship_without(dropped)
    mine = Store(tmp_path / "mine.db")
    own = RunResult(config=dropped[0], config_hash=dropped[0].config_hash(), status="completed",
                    metrics={"accuracy": 0.42}, curve=[], steps=1, wall_seconds=1.0, code_version="mine")
    mine.put(own)
    args = ["reproduce", "--claim", CLAIM, "--resume-evidence", "--evidence-dir", str(tmp_path / "evidence"),
            "--store", str(mine.path)]
    planned = runner.invoke(app, args + ["--dry-run"], terminal_width=300)
    assert planned.exit_code == 0, planned.output
    assert "resumed from the shipped evidence of 1 of 1 claim" in planned.stdout
    assert "4 runs to train" in planned.stdout  # the 5 the evidence lacks, less the one already stored
    assert "note: 20 stored runs of these claims came from other code than this one" in " ".join(planned.stderr.split())
    assert len(Store(mine.path)) == 1  # a dry run writes nothing
    ship_without(dropped[:1])  # the evidence now lacks only the run one already has: nothing trains
    loaded = runner.invoke(app, args + ["--out", str(tmp_path / "report")], terminal_width=300)
    assert loaded.exit_code == 0, loaded.output
    assert "0 runs to train" in loaded.stdout
    assert Store(mine.path).get(own.config_hash).code_version == "mine"
    assert Store(mine.path).config_hashes() == {cfg.config_hash() for cfg in claim.configs("quick")}
    failed = RunResult(config=dropped[1], config_hash=dropped[1].config_hash(), status="failed", error="boom")
    mine.put(failed)
    ship_without([])  # a shipped finished run replaces one's failed run, never one's finished run
    assert runner.invoke(app, args + ["--out", str(tmp_path / "report")], terminal_width=300).exit_code == 0
    assert Store(mine.path).get(failed.config_hash).status == "completed"
    assert Store(mine.path).get(own.config_hash).code_version == "mine"
    both = runner.invoke(app, ["reproduce", "--evidence", "--resume-evidence"])
    assert both.exit_code == 2 and "--resume-evidence" in both.stderr


def test_a_stopped_reproduce_with_write_evidence_ships_what_finished(tmp_path, monkeypatch):
    from sepbench.claims import reproduce as reproducing
    from sepbench.sweep import SweepInterrupted

    (claim,) = select(None, CLAIM)
    store = Store(tmp_path / "runs.db")
    first = claim.configs("quick")[0]

    def stopped_after_one(claims, scale, db, *args, **kwargs):
        db.put(RunResult(config=first, config_hash=first.config_hash(), status="completed",
                         metrics={"accuracy": 0.5}, curve=[], steps=1, wall_seconds=1.0, code_version="abc"))
        raise SweepInterrupted(1, 24)

    monkeypatch.setattr(reproducing, "judge_all", stopped_after_one)
    stopped = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--store", str(store.path), "--write-evidence",
                                  "--evidence-dir", str(tmp_path / "evidence")], terminal_width=300)
    assert stopped.exit_code != 0 and "interrupted: 1 run finished" in stopped.output
    lines = evidence.path_for(tmp_path / "evidence", "quick", CLAIM).read_text().splitlines()
    assert [json.loads(line)["run"]["config_hash"] for line in lines] == [first.config_hash()]


def test_write_evidence_ships_each_run_as_it_finishes_so_a_killed_reproduce_loses_none(tmp_path, monkeypatch):
    from sepbench.claims import reproduce as reproducing

    (claim,) = select(None, CLAIM)
    store = Store(tmp_path / "runs.db")
    first, second = claim.configs("quick")[:2]
    shipped_at_each: list[list[str]] = []
    path = evidence.path_for(tmp_path / "evidence", "quick", CLAIM)

    def killed_after_two(claims, scale, db, *args, on_result, **kwargs):
        for cfg in (first, second):
            result = RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed",
                               metrics={"accuracy": 0.5}, curve=[], steps=1, wall_seconds=1.0, code_version="abc")
            db.put(result)
            on_result(result)
            shipped_at_each.append([json.loads(line)["run"]["config_hash"] for line in path.read_text().splitlines()])
        raise MemoryError("killed")  # no Ctrl-C: nothing is written on the way out

    monkeypatch.setattr(reproducing, "judge_all", killed_after_two)
    killed = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--store", str(store.path), "--write-evidence",
                                 "--evidence-dir", str(tmp_path / "evidence")], terminal_width=300)
    assert isinstance(killed.exception, MemoryError)
    assert shipped_at_each[0] == [first.config_hash()]
    assert sorted(shipped_at_each[1]) == sorted([first.config_hash(), second.config_hash()])


def test_writing_evidence_keeps_the_files_runs_of_the_spec_and_says_which_it_leaves_out(tmp_path, monkeypatch):
    """A write from a store that lacks the shipped runs (a fresh one, no --resume-evidence) keeps them: a kill after
    its first run ships them all. Only runs the spec no longer names leave the file, and it says so."""
    from sepbench.claims import reproduce as reproducing

    (claim,) = select(None, CLAIM)
    root = tmp_path / "evidence"
    full = _store(tmp_path / "full.db", 0.99)
    assert evidence.write(claim, "quick", full, root).dropped == 0
    assert evidence.write(claim, "quick", full, root).dropped == 0
    shipped = evidence.path_for(root, "quick", CLAIM).read_text()
    first = claim.configs("quick")[0]

    def one_run_in_a_new_store(claims, scale, db, *args, on_result, **kwargs):
        result = full.get(first.config_hash())
        db.put(result)
        on_result(result)
        return []

    monkeypatch.setattr(reproducing, "judge_all", one_run_in_a_new_store)
    written = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--store", str(tmp_path / "new.db"),
                                  "--write-evidence", "--evidence-dir", str(root)], terminal_width=300)
    assert written.exit_code == 0, written.output
    assert "left out" not in written.stderr and evidence.path_for(root, "quick", CLAIM).read_text() == shipped
    _store(tmp_path / "changed.db", 0.99, {"train.steps": 7})
    again = runner.invoke(app, ["reproduce", "--claim", CLAIM, "--store", str(tmp_path / "changed.db"),
                                "--write-evidence", "--evidence-dir", str(root), "--set", "train.steps=7"],
                          terminal_width=300)
    said = " ".join(again.stderr.split())
    assert f"evidence of {CLAIM}: 24 runs of the file before left out: the claim's spec (with --set) no longer " \
           "names them" in said, again.output
    assert said.count("left out") == 1 and len(evidence.path_for(root, "quick", CLAIM).read_text().splitlines()) == 24
    lines = evidence.path_for(root, "quick", CLAIM).read_text().splitlines()
    assert {json.loads(line)["run"]["config_hash"] for line in lines} == {
        cfg.config_hash() for cfg in claim.configs("quick", {"train.steps": 7})}


@pytest.mark.parametrize("claim_id", ["deng-r1", "deng-r2", "deng-r3", "deng-fig3b", "deng-fig7b", "deng-fig7e"])
def test_a_random_networks_check_computed_again_gives_its_shipped_series(claim_id):
    """The shipped series of Deng et al.'s random-network checks are what the check computes at its seeds."""
    from sepbench.claims.checks import CHECKS

    (claim,) = select(None, claim_id)
    lines = evidence.path_for(evidence.default_root(), "cpu", claim_id).read_text().splitlines()
    (record,) = [r for r in map(json.loads, lines) if r["kind"] == "check"]
    assert record["entry"]["params"] == claim.at("cpu").params

    def as_floats(series):
        return {label: {float(x): values for x, values in by_x.items()} for label, by_x in series.items()}

    computed = CHECKS[claim.check](claim.at("cpu").params)
    assert as_floats(computed) == as_floats(record["entry"]["series"])


def test_random_softmax_networks_show_the_event_about_as_often_as_one_minus_two_to_the_minus_m():
    """At small m the success event E is near 1 - 2^-m (docs/reproduction.md, Deng et al.), which is why Fig. 3(b)'s
    smallest m fail the 0.9 line: 100 draws a seed, within three binomial standard errors."""
    from sepbench.claims.checks import random_networks

    series = random_networks({"figure": "fig3b", "seeds": [0, 1, 2]})
    for m in (1, 2, 3, 4):
        expected = 1 - 2.0 ** -m
        noise = 3 * (expected * (1 - expected) / 300) ** 0.5
        assert abs(sum(series["E"][m]) / 3 - expected) <= noise, (m, series["E"][m])


def test_the_learned_check_gives_both_kinds_test_accuracy_per_length_and_seed():
    from sepbench.claims.checks import learned

    series = learned({"lengths": [8, 12], "steps": 3, "seeds": [0, 1]})
    assert set(series) == {"softmax", "linear"}
    for by_length in series.values():
        assert set(by_length) == {8, 12}
        assert all(len(v) == 2 and all(0 <= a <= 1 for a in v) for v in by_length.values())
