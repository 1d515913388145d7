"""The results store: SQLite in WAL mode, one row per run keyed by its config hash."""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import tempfile
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from pydantic import ValidationError

from sepbench.processes import process_alive
from sepbench.train.result import RunResult

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_STORE = "sepbench.db"
READ_ONLY_SIGNS = ("readonly", "unable to open database file")
"""How SQLite reports a store it may read but not write: a read-only file or folder, or a read-only mount."""
STORE_ENV = "SEPBENCH_STORE"
CHECKPOINTS_ENV = "SEPBENCH_CHECKPOINTS"

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
CREATE TABLE IF NOT EXISTS running (
    config_hash TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    result TEXT NOT NULL
);
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


@dataclass
class Running:
    """A run in training: its result so far (curve, steps) and which process last reported it, when."""

    result: RunResult
    host: str
    pid: int
    updated_at: str

    @property
    def alive(self) -> bool | None:
        """Whether the process that reported it still runs (None: it runs on another host, not known here)."""
        if self.host != socket.gethostname():
            return None
        return process_alive(self.pid)


BUSY_SECONDS = 60.0
"""How long a store waits for another process's lock (a sweep's workers write one run at a time) before it fails."""


def _hint(error: BaseException | None) -> str:
    """What a user can do about an SQLite error, in brackets."""
    if "locked" in str(error) or "busy" in str(error):
        return f" (another process held it for over {BUSY_SECONDS:g} s; try again once that process is done)"
    return " (is it a sepbench SQLite store?)"


class StoreError(ValueError):
    """The store cannot be read or written; the message is one line naming the path and the problem."""


class UnreadableRun(StoreError):
    """A stored row this code cannot read: damaged, or written by code whose results have another shape."""


class Store:
    """Runs on disk. Each ``put`` is one transaction, so a killed writer never leaves half a row."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.unreadable: list[tuple[str, str]] = []
        """(config hash, reason) of the rows the last ``results`` call could not read and left out."""

    @property
    def checkpoints(self) -> Path:
        """The folder where runs stored here keep their checkpoints: $SEPBENCH_CHECKPOINTS, else
        ``<store>.checkpoints`` beside the store."""
        chosen = os.environ.get(CHECKPOINTS_ENV, "").strip()
        return Path(chosen) if chosen else self.path.with_name(self.path.name + ".checkpoints")

    def check_usable(self) -> None:
        """Raise StoreError if the path holds something other than a store (a folder, another file); a missing
        path stays missing, and an empty file (as SQLite leaves one) is given the store's tables."""
        if self.path.is_dir():
            raise StoreError(f"store {self.path} is a directory; give a file path such as {self.path / DEFAULT_STORE}")
        if self.path.exists():
            with self._connect(create=False):
                pass

    def check_writable(self) -> None:
        """Raise StoreError unless a run could be stored here: called before any training starts."""
        self.check_usable()
        folder = self.path.parent
        blocker = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise StoreError(f"store {self.path} cannot be created: {blocker} is a file, not a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".sepbench-probe-"):
                pass
        except OSError as error:
            raise StoreError(f"store folder {folder} is not writable ({error.strerror or error})") from None
        if self.path.exists() and not os.access(self.path.resolve(), os.W_OK):
            raise StoreError(f"store {self.path} is read-only here (its file's permissions); a run cannot be stored in "
                             "it: give another --store, or make it writable")
        if self.path.exists():
            with self._connect() as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("ROLLBACK")

    @contextmanager
    def _connect(self, create: bool = True) -> Iterator[sqlite3.Connection]:
        if self.path.is_dir():
            raise StoreError(f"store {self.path} is a directory; give a file path such as {self.path / DEFAULT_STORE}")
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise FileNotFoundError(f"no store at {self.path}")
        try:
            with closing(sqlite3.connect(self.path, timeout=BUSY_SECONDS)) as conn:
                try:
                    _refuse_foreign(conn, self.path)
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute(f"PRAGMA busy_timeout={int(BUSY_SECONDS * 1000)}")
                    conn.executescript(SCHEMA)
                    conn.executescript(SOFTMAX_VS_LINEAR_SCHEMA)
                except sqlite3.OperationalError as error:  # a read-only file, folder or mount
                    if not any(sign in str(error) for sign in READ_ONLY_SIGNS) or not self.path.exists():
                        raise
                    reader = True
                else:
                    reader = False
                    yield conn
            if reader:
                with self._read_only() as conn:
                    yield conn
        except sqlite3.DatabaseError as error:
            raise StoreError(f"store {self.path} cannot be used: {error}{_hint(error)}") from None

    @contextmanager
    def _read_only(self) -> Iterator[sqlite3.Connection]:
        """A store SQLite refused to write (its file or folder read-only here), opened read-only; a table it lacks
        (a store older than that table) is an empty one of this connection alone."""
        with closing(self._open_read_only()) as conn:
            try:
                _refuse_foreign(conn, self.path)
                _add_missing_tables(conn)
                yield conn
            except sqlite3.DatabaseError as error:
                raise StoreError(f"store {self.path} is read-only here: {error}") from None

    def _open_read_only(self) -> sqlite3.Connection:
        """SQLite reads a WAL store in a folder it cannot write only as immutable, which is safe when no write-ahead
        log is beside it: none can hold rows the file lacks."""
        log = self.path.with_name(self.path.name + "-wal")
        pending = log.exists() and log.stat().st_size > 0
        uri = self.path.resolve().as_uri()
        problem: sqlite3.DatabaseError | None = None
        for mode in ("mode=ro", *(() if pending else ("immutable=1",))):
            conn = None
            try:
                conn = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=BUSY_SECONDS)
                conn.execute("SELECT name FROM sqlite_master").fetchall()
                return conn
            except sqlite3.DatabaseError as error:
                if conn is not None:
                    conn.close()
                problem = error
        if pending:
            raise StoreError(f"store {self.path} is read-only here and its write-ahead log ({log.name}) cannot be read "
                             "without write access; copy both files to a folder you can write")
        raise StoreError(f"store {self.path} cannot be read: {problem}{_hint(problem)}")

    def put(self, result: RunResult) -> None:
        cfg = result.config
        row = (result.config_hash, cfg.task.name, cfg.model.name, cfg.task.length, cfg.model.layers, cfg.model.width,
               cfg.seed, cfg.train.lr, result.status, result.metrics.get("accuracy"), result.steps,
               result.steps_to_threshold, result.wall_seconds, result.created_at, result.model_dump_json())
        with self._connect() as conn, conn:
            conn.execute(f"INSERT OR REPLACE INTO runs VALUES ({', '.join('?' * len(row))})", row)
            conn.execute("DELETE FROM running WHERE config_hash = ?", (result.config_hash,))

    def put_running(self, result: RunResult) -> None:
        """The result so far of a run in training (it leaves the running table once ``put``)."""
        row = (result.config_hash, socket.gethostname(), os.getpid(),
               datetime.now(timezone.utc).isoformat(timespec="seconds"), result.model_dump_json())
        with self._connect() as conn, conn:
            conn.execute("INSERT OR REPLACE INTO running VALUES (?, ?, ?, ?, ?)", row)

    def running(self) -> list[Running]:
        """The runs in training (or stopped in training, and not stored since), oldest report first."""
        if not self.path.exists():
            return []
        with self._connect() as conn:
            rows = conn.execute("SELECT config_hash, host, pid, updated_at, result FROM running "
                                "ORDER BY updated_at, config_hash").fetchall()
        found = []
        for config_hash, host, pid, updated_at, text in rows:
            try:
                found.append(Running(RunResult.model_validate_json(text), host, pid, updated_at))
            except ValidationError as error:
                self.unreadable.append((config_hash, _first_problem(error)))
        return found

    def discard_running(self, config_hashes: list[str]) -> None:
        """Drop these runs from the running table, all in one transaction (their checkpoints are the caller's)."""
        with self._connect() as conn, conn:
            conn.executemany("DELETE FROM running WHERE config_hash = ?", [(h,) for h in config_hashes])

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
        return self._read(config_hash, row[0]) if row else None

    def stored(self, current: str | None = None) -> dict[str, tuple[str, str, str | None]]:
        """Per stored config hash: (status, code version, error), read without parsing the full results, except
        those of rows stored by other code than ``current`` (a code version). A row that cannot be read has status
        ``"unreadable"`` and its reason as error: it holds no result to reuse."""
        if not self.path.exists():
            return {}
        with self._connect() as conn:
            rows = conn.execute("SELECT config_hash, status, result FROM runs").fetchall()
        found = {}
        for key, status, text in rows:
            try:
                data = json.loads(text)  # Python's json reads the NaN / Infinity that SQLite's json_extract refuses
                version = data.get("code_version") or ""
                if current is not None and version != current:
                    RunResult.model_validate_json(text)
            except ValidationError as error:
                found[key] = ("unreadable", version, _first_problem(error))
            except (ValueError, AttributeError) as error:
                found[key] = ("unreadable", "", f"not a stored result ({type(error).__name__})")
            else:
                found[key] = (status, version, data.get("error"))
        return found

    def results(self, **where: Any) -> list[RunResult]:
        """Full results, optionally filtered on indexed columns (task=..., model=..., ...).

        A row that cannot be read is left out and named in ``self.unreadable``, so one bad row never
        breaks a report of the rest.
        """
        sql, args = self._where(where)
        self.unreadable = []
        if not self.path.exists():
            return []
        with self._connect() as conn:
            rows = conn.execute(f"SELECT config_hash, result FROM runs{sql} ORDER BY created_at, config_hash",
                                args).fetchall()
        found = []
        for config_hash, text in rows:
            try:
                found.append(RunResult.model_validate_json(text))
            except ValidationError as error:
                self.unreadable.append((config_hash, _first_problem(error)))
        return found

    def texts(self, config_hashes: Iterable[str]) -> dict[str, str]:
        """The stored text of each of these runs that has a row, unparsed, read on one connection."""
        keys = list(dict.fromkeys(config_hashes))
        if not keys or not self.path.exists():
            return {}
        found: dict[str, str] = {}
        with self._connect() as conn:
            for start in range(0, len(keys), 500):  # under SQLite's limit on bound parameters
                chunk = keys[start:start + 500]
                marks = ", ".join("?" * len(chunk))
                found.update(conn.execute(f"SELECT config_hash, result FROM runs WHERE config_hash IN ({marks})",
                                          chunk).fetchall())
        return found

    def get_readable(self, config_hash: str) -> RunResult | None:
        """The stored run, or None where there is none or its row cannot be read (``UnreadableRun``)."""
        try:
            return self.get(config_hash)
        except UnreadableRun:
            return None

    @staticmethod
    def _read(config_hash: str, text: str) -> RunResult:
        try:
            return RunResult.model_validate_json(text)
        except ValidationError as error:
            raise UnreadableRun(f"stored run {config_hash} cannot be read: {_first_problem(error)}") from None

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

    def table(self, **where: Any) -> pd.DataFrame:
        """One row per run read from its full stored result: summary, every final metric, details, and the whole
        config as ``config.section.field`` columns (see ``sepbench.results.run_rows``)."""
        from sepbench.results import run_rows

        return run_rows(self.results(**where))

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


def _add_missing_tables(conn: sqlite3.Connection) -> None:
    """Give a read-only store's connection an empty temporary table for each store table the file lacks."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for statement in (SCHEMA + SOFTMAX_VS_LINEAR_SCHEMA).split(";"):
        if statement.strip().startswith("CREATE TABLE") and statement.split("EXISTS", 1)[1].split()[0] not in tables:
            conn.execute(statement.replace("CREATE TABLE IF NOT EXISTS", "CREATE TEMP TABLE"))


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """Raise StoreError for an SQLite file of another program (tables, none of them sepbench's): a store is never
    added to a database it does not own."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if tables and not tables & {"runs", "softmax_vs_linear"}:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"store {path} is an SQLite file of another program (tables: {shown}); allowed: a sepbench "
                         "store or a path to create one")


def _first_problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]
