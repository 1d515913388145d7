import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from sepbench import RunConfig, Store
from sepbench.train import RunResult


def fake_result(seed: int) -> RunResult:
    """A stored-shape result without training (the store does not care how it was made)."""
    cfg = RunConfig.build({"seed": seed, "device": "cpu"})
    return RunResult(config=cfg, config_hash=cfg.config_hash(), status="completed", metrics={"accuracy": 0.5, "loss": 1.0},
                     steps=10, created_at=f"2026-01-0{seed + 1}")


def test_round_trip(tmp_path):
    store = Store(tmp_path / "s.db")
    assert len(store) == 0 and not store.has("x") and store.get("x") is None
    results = [fake_result(s) for s in range(3)]
    for r in results:
        store.put(r)
    assert len(store) == 3
    assert store.get(results[1].config_hash) == results[1]
    frame = store.query(seed=2)
    assert list(frame.config_hash) == [results[2].config_hash]
    assert [r.config.seed for r in store.results()] == [0, 1, 2]
    store.put(results[0])
    assert len(store) == 3  # one row per config hash
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


UNPRIVILEGED = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner",
                "--inh-caps=-dac_override,-dac_read_search,-fowner"]


def obeying_permissions(command: list[str]) -> list[str]:
    """``command`` as a process that file permissions bind (root first drops the capabilities that skip them)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None or subprocess.run([*UNPRIVILEGED, "true"]).returncode != 0:
        pytest.skip("root obeys file permissions only through setpriv, which cannot drop capabilities here")
    return [*UNPRIVILEGED, *command]


def test_a_store_on_a_read_only_mount_is_read(tmp_path):
    """SQLite reports a read-only mount as 'unable to open database file', not as 'readonly'."""
    folder, mount = tmp_path / "files", tmp_path / "mount"
    mount.mkdir()
    store = Store(folder / "runs.db")
    store.put(fake_result(0))
    read = (f"mount --bind {folder} {mount} && mount -o remount,ro,bind {mount} && "
            f"{sys.executable} -m sepbench results --store {mount / 'runs.db'} --by-seed --format json")
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        pytest.skip("mounting needs unshare -m, which is not allowed here")
    shown = subprocess.run(["unshare", "-m", "sh", "-c", read], capture_output=True, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert shown.returncode == 0, shown.stderr
    assert [row["seed"] for row in json.loads(shown.stdout)] == [0]


def test_a_store_in_a_read_only_folder_is_read_as_it_is_and_left_unchanged(tmp_path):
    folder = tmp_path / "shared"
    store = Store(folder / "runs.db")
    for seed in range(2):
        store.put(fake_result(seed))
    with sqlite3.connect(store.path) as conn:
        conn.execute("DROP TABLE softmax_vs_linear")  # as a store from before that table
    files, before = sorted(p.name for p in folder.iterdir()), store.path.read_bytes()
    sepbench = [sys.executable, "-m", "sepbench"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    store.path.chmod(0o444)
    folder.chmod(0o555)
    try:
        shown = subprocess.run(obeying_permissions([*sepbench, "results", "--store", str(store.path), "--by-seed",
                                                    "--format", "json"]), capture_output=True, text=True, env=env)
        running = subprocess.run(obeying_permissions([*sepbench, "results", "--store", str(store.path), "--running"]),
                                 capture_output=True, text=True, env=env)
        trained = subprocess.run(obeying_permissions([*sepbench, "run", "--store", str(store.path), "--steps", "2"]),
                                 capture_output=True, text=True, env=env)
        report = [*sepbench, "report", "--store", str(store.path), "--out", str(tmp_path / "report")]
        reported = subprocess.run(obeying_permissions(report), capture_output=True, text=True, env=env)
    finally:
        folder.chmod(0o755)
        store.path.chmod(0o644)
    assert shown.returncode == 0, shown.stderr
    assert sorted(row["seed"] for row in json.loads(shown.stdout)) == [0, 1]
    assert running.returncode == 0 and "no runs in training" in running.stdout, running.stderr
    assert trained.returncode == 2 and f"store folder {folder} is not writable" in trained.stderr
    assert reported.returncode == 0, reported.stderr  # it reads the missing softmax_vs_linear table as empty
    assert (tmp_path / "report" / "index.html").is_file()
    assert sorted(p.name for p in folder.iterdir()) == files and store.path.read_bytes() == before


def test_a_store_another_process_holds_locked_past_the_wait_says_so_in_one_line(tmp_path, monkeypatch):
    import sepbench.store as store_module
    from sepbench.store import StoreError

    monkeypatch.setattr(store_module, "BUSY_SECONDS", 0.2)
    store = Store(tmp_path / "runs.db")
    store.put(fake_result(0))
    holder = sqlite3.connect(store.path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError) as refused:
            store.put(fake_result(1))
    finally:
        holder.close()
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"store {store.path} cannot be used: database is locked")
    assert message.endswith("(another process held it for over 0.2 s; try again once that process is done)")
    store.put(fake_result(1))
    assert len(store) == 2


def test_texts_reads_the_stored_rows_asked_for_unparsed_in_one_pass(tmp_path):
    store = Store(tmp_path / "runs.db")
    assert store.texts(["0123456789abcdef"]) == {}
    results = [fake_result(seed) for seed in range(3)]
    for result in results:
        store.put(result)
    asked = [results[0].config_hash, "0123456789abcdef", results[2].config_hash] * 400  # over one query's 500
    found = store.texts(asked)
    assert set(found) == {results[0].config_hash, results[2].config_hash}
    assert RunResult.model_validate_json(found[results[2].config_hash]) == store.get(results[2].config_hash)
