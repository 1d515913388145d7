"""The results store: SQLite in WAL mode, one row per run keyed by its config hash."""
from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from sepbench.train.result import RunResult

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_STORE = "sepbench.db"
STORE_ENV = "SEPBENCH_STORE"

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    config_hash TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    model TEXT NOT NULL,
    length INTEGER NOT NULL,
    layers INTEGER NOT NULL,
    width INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    lr REAL,
    status TEXT NOT NULL,
    accuracy REAL,
    steps INTEGER,
    steps_to_threshold INTEGER,
    wall_seconds REAL,
    created_at TEXT,
    result TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_task_model ON runs (task, model, length, width);
"""

SOFTMAX_VS_LINEAR_SCHEMA = """
CREATE TABLE IF NOT EXISTS softmax_vs_linear (
    point_key TEXT PRIMARY KEY,
    figure TEXT NOT NULL,
    parameter TEXT NOT NULL,
    value REAL NOT NULL,
    model TEXT NOT NULL,
    successes INTEGER NOT NULL,
    trials INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    exp_d0_zero INTEGER,
    exp_d1_positive INTEGER,
    lin_d0_zero INTEGER,
    lin_d1_zero INTEGER,
    seconds REAL,
    setting TEXT NOT NULL,
    created_at TEXT
);
CREATE INDEX IF NOT EXISTS softmax_vs_linear_figure ON softmax_vs_linear (figure, model, value);
"""

SOFTMAX_VS_LINEAR_COLUMNS = ["point_key", "figure", "parameter", "value", "model", "successes", "trials", "seed",
                             "exp_d0_zero", "exp_d1_positive", "lin_d0_zero", "lin_d1_zero", "seconds", "setting",
                             "created_at"]

COLUMNS = ["config_hash", "task", "model", "length", "layers", "width", "seed", "lr", "status", "accuracy",
           "steps", "steps_to_threshold", "wall_seconds", "created_at"]


def default_store_path() -> Path:
    return Path(os.environ.get(STORE_ENV) or DEFAULT_STORE)


class Store:
    """Runs on disk. Each ``put`` is one transaction, so a killed writer never leaves half a row."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()

    @contextmanager
    def _connect(self, create: bool = True) -> Iterator[sqlite3.Connection]:
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise FileNotFoundError(f"no store at {self.path}")
        with closing(sqlite3.connect(self.path, timeout=60.0)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=60000")
            conn.executescript(SCHEMA)
            conn.executescript(SOFTMAX_VS_LINEAR_SCHEMA)
            yield conn

    def put(self, result: RunResult) -> None:
        cfg = result.config
        row = (result.config_hash, cfg.task.name, cfg.model.name, cfg.task.length, cfg.model.layers, cfg.model.width,
               cfg.seed, cfg.train.lr, result.status, result.metrics.get("accuracy"), result.steps,
               result.steps_to_threshold, result.wall_seconds, result.created_at, result.model_dump_json())
        with self._connect() as conn, conn:
            conn.execute(f"INSERT OR REPLACE INTO runs VALUES ({', '.join('?' * len(row))})", row)

    def has(self, config_hash: str) -> bool:
        if not self.path.exists():
            return False
        with self._connect() as conn:
            return conn.execute("SELECT 1 FROM runs WHERE config_hash = ?", (config_hash,)).fetchone() is not None

    def get(self, config_hash: str) -> RunResult | None:
        if not self.path.exists():
            return None
        with self._connect() as conn:
            row = conn.execute("SELECT result FROM runs WHERE config_hash = ?", (config_hash,)).fetchone()
        return RunResult.model_validate_json(row[0]) if row else None

    def results(self, **where: Any) -> list[RunResult]:
        """Full results, optionally filtered on indexed columns (task=..., model=..., ...)."""
        sql, args = self._where(where)
        if not self.path.exists():
            return []
        with self._connect() as conn:
            rows = conn.execute(f"SELECT result FROM runs{sql} ORDER BY created_at, config_hash", args).fetchall()
        return [RunResult.model_validate_json(r[0]) for r in rows]

    def config_hashes(self) -> set[str]:
        """The config hash of every stored run."""
        if not self.path.exists():
            return set()
        with self._connect() as conn:
            return {row[0] for row in conn.execute("SELECT config_hash FROM runs")}

    def query(self, **where: Any) -> pd.DataFrame:
        """One row per run with the summary columns, optionally filtered (task=..., model=..., ...)."""
        import pandas as pd

        sql, args = self._where(where)
        if not self.path.exists():
            return pd.DataFrame(columns=COLUMNS)
        with self._connect() as conn:
            rows = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM runs{sql} ORDER BY created_at, config_hash", args)
            return pd.DataFrame(rows.fetchall(), columns=COLUMNS)

    def put_softmax_vs_linear(self, rows: list[dict[str, Any]]) -> None:
        """Experiment points of the softmax-vs-linear sweeps, all in one transaction (same point_key replaces)."""
        missing = [c for c in SOFTMAX_VS_LINEAR_COLUMNS if any(c not in row for row in rows)]
        if missing:
            raise ValueError(f"softmax_vs_linear rows lack {', '.join(missing)}")
        values = [tuple(row[c] for c in SOFTMAX_VS_LINEAR_COLUMNS) for row in rows]
        placeholders = ", ".join("?" * len(SOFTMAX_VS_LINEAR_COLUMNS))
        with self._connect() as conn, conn:
            conn.executemany(f"INSERT OR REPLACE INTO softmax_vs_linear VALUES ({placeholders})", values)

    def query_softmax_vs_linear(self, **where: Any) -> pd.DataFrame:
        """Stored softmax-vs-linear points, optionally filtered (figure=..., model=..., ...)."""
        import pandas as pd

        sql, args = self._where(where, SOFTMAX_VS_LINEAR_COLUMNS)
        if not self.path.exists():
            return pd.DataFrame(columns=SOFTMAX_VS_LINEAR_COLUMNS)
        with self._connect() as conn:
            rows = conn.execute(f"SELECT {', '.join(SOFTMAX_VS_LINEAR_COLUMNS)} FROM softmax_vs_linear{sql} "
                                "ORDER BY figure, model, value, seed", args)
            return pd.DataFrame(rows.fetchall(), columns=SOFTMAX_VS_LINEAR_COLUMNS)

    def __len__(self) -> int:
        if not self.path.exists():
            return 0
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    @staticmethod
    def _where(where: dict[str, Any], columns: list[str] = COLUMNS) -> tuple[str, list[Any]]:
        unknown = set(where) - set(columns)
        if unknown:
            raise ValueError(f"cannot filter on {', '.join(sorted(unknown))}; allowed: {', '.join(columns)}")
        if not where:
            return "", []
        return " WHERE " + " AND ".join(f"{k} = ?" for k in where), list(where.values())
