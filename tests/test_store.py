import sqlite3

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
