"""The tables of the SQL stores, and the statements their shared logic runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from executionkit.stores._sql_attempts import attempt_tables
from executionkit.stores._sql_items import item_tables
from executionkit.stores._sql_ledger import ledger_tables

if TYPE_CHECKING:
    from collections.abc import Sequence


class Rows(Protocol):
    """What a DB-API cursor gives back."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Database(Protocol):
    """A connection inside an open transaction; SQL uses ``?`` placeholders."""

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows: ...


@dataclass(frozen=True)
class Dialect:
    """Where SQLite and PostgreSQL differ."""

    schema: tuple[str, ...]  # CREATE statements, each idempotent (what turns 4 into 5)
    upgrade: tuple[str, ...]  # what turns the tables of schema 2 or 3 into schema 4
    lock_run: str  # selects seq, written, next_ord of the run row, locking it
    next_written: str  # an SQL expression: the next value of the save counter
    lock_schema: str = ""  # a statement serialising schema changes, if the write lock does not


def _runs(name: str, bigint: str, keyed: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {name} (
            run_id TEXT PRIMARY KEY,
            seq {bigint} NOT NULL,
            written {bigint} NOT NULL,
            next_ord {bigint} NOT NULL
        ){keyed}"""


def _headers(name: str, bigint: str, keyed: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS {name} (
            run_id TEXT NOT NULL,
            seq {bigint} NOT NULL,
            created_at TEXT,
            header TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ){keyed}"""


_WRITTEN_INDEX = (
    "CREATE INDEX IF NOT EXISTS executionkit_runs_written ON executionkit_runs (written)"
)


def tables(bigint: str, keyed: str = "") -> tuple[str, ...]:
    """The CREATE statements of schema 5, with the integer type of the dialect.

    ``keyed`` ends the tables a save rewrites a row of (runs and headers):
    SQLite's ``" WITHOUT ROWID"`` stores them in their key's B-tree alone. No
    table has an index on ``dropped`` any more (schema 3 had three): only the
    full save and `prune` look for dropped rows, among one run's rows. Schema
    5 adds the table ``executionkit_attempts`` and changes nothing else: these
    statements alone turn a schema 4 database into a schema 5 one.
    """
    return (
        "CREATE TABLE IF NOT EXISTS executionkit_schema (version INTEGER NOT NULL)",
        _runs("executionkit_runs", bigint, keyed),
        _WRITTEN_INDEX,
        _headers("executionkit_headers", bigint, keyed),
        f"""CREATE TABLE IF NOT EXISTS executionkit_outputs (
            run_id TEXT NOT NULL,
            ord {bigint} NOT NULL,
            name TEXT NOT NULL,
            added {bigint} NOT NULL,
            dropped {bigint},
            value TEXT NOT NULL,
            PRIMARY KEY (run_id, ord)
        )""",
        *item_tables(bigint),
        *ledger_tables(bigint),
        *attempt_tables(bigint),
    )


_DROP_INDEXES = tuple(
    f"DROP INDEX IF EXISTS executionkit_{table}_dropped"
    for table in ("outputs", "items", "ledger")
)


def upgrade(bigint: str, keyed: str = "") -> tuple[str, ...]:
    """The statements that turn schema 2 or 3 tables into schema 4 (after `tables`).

    The indexes on ``dropped`` go. With ``keyed``, the runs and headers tables
    are copied into tables of that kind, which replace them (SQLite cannot
    change a table's kind in place).
    """
    if not keyed:
        return _DROP_INDEXES
    copies = []
    for table, make, columns in (
        ("executionkit_runs", _runs, "run_id, seq, written, next_ord"),
        ("executionkit_headers", _headers, "run_id, seq, created_at, header"),
    ):
        copies += [
            f"DROP TABLE IF EXISTS {table}_4",
            make(f"{table}_4", bigint, keyed),
            f"INSERT INTO {table}_4 ({columns}) SELECT {columns} FROM {table}",  # noqa: S608
            f"DROP TABLE {table}",
            f"ALTER TABLE {table}_4 RENAME TO {table}",
        ]
    return (*_DROP_INDEXES, *copies, _WRITTEN_INDEX)


SCHEMA_ROW = """INSERT INTO executionkit_schema (version)
    SELECT ? WHERE NOT EXISTS (SELECT 1 FROM executionkit_schema)"""
NEW_RUN = """INSERT INTO executionkit_runs (run_id, seq, written, next_ord) VALUES (?, -1, 0, 0)
    ON CONFLICT (run_id) DO NOTHING"""
HEADER = "SELECT header FROM executionkit_headers WHERE run_id = ? AND seq = ?"
LIVE = """SELECT ord, name, value FROM executionkit_outputs
    WHERE run_id = ? AND dropped IS NULL ORDER BY ord"""
DROP = "UPDATE executionkit_outputs SET dropped = ? WHERE run_id = ? AND ord = ?"
ADD = """INSERT INTO executionkit_outputs (run_id, ord, name, added, dropped, value)
    VALUES (?, ?, ?, ?, NULL, ?)"""
ADD_HEADER = (
    "INSERT INTO executionkit_headers (run_id, seq, created_at, header) VALUES (?, ?, ?, ?)"
)
# The header of the run's previous checkpoint becomes the new one's (a store without history).
MOVE_HEADER = """UPDATE executionkit_headers SET seq = ?, created_at = ?, header = ?
    WHERE run_id = ? AND seq = ?"""
FORGET_HEADER = "DELETE FROM executionkit_headers WHERE run_id = ? AND seq = ?"
FORGET_HEADER_RETURNING = f"{FORGET_HEADER} RETURNING header"
# Rows no kept checkpoint can see: dropped at or before the oldest kept seq.
FORGET_DROPPED = """DELETE FROM executionkit_outputs WHERE run_id = ? AND dropped IS NOT NULL
    AND dropped <= (SELECT MIN(seq) FROM executionkit_headers WHERE run_id = ?)"""
AS_OF = """SELECT name, value FROM executionkit_outputs
    WHERE run_id = ? AND added <= ? AND (dropped IS NULL OR dropped > ?) ORDER BY ord"""
ALL_ROWS = """SELECT name, value, added, dropped FROM executionkit_outputs
    WHERE run_id = ? ORDER BY ord"""
HEADERS = "SELECT seq, header FROM executionkit_headers WHERE run_id = ? ORDER BY seq"
LATEST = """SELECT run_id, seq FROM executionkit_runs WHERE seq >= 0
    ORDER BY written DESC LIMIT 1"""
RUN = "SELECT run_id, seq FROM executionkit_runs WHERE run_id = ? AND seq >= 0"
RUN_IDS = "SELECT run_id FROM executionkit_runs WHERE seq >= 0 ORDER BY written DESC"
RUN_SEQS = "SELECT run_id, seq FROM executionkit_runs WHERE seq >= 0 ORDER BY written DESC"
KEEP_FROM = """SELECT seq FROM executionkit_headers WHERE run_id = ?
    ORDER BY seq DESC LIMIT 1 OFFSET ?"""
PRUNE_HEADERS = "DELETE FROM executionkit_headers WHERE run_id = ? AND seq < ?"

# Limits shared by the processes of a database (`SQLiteStore.limit_state`): a row per key,
# its state as JSON, outside the schema version (only the limiter reads it).
LIMITS_TABLE = """CREATE TABLE IF NOT EXISTS executionkit_limits (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL
)"""
LIMITS_READ = "SELECT state FROM executionkit_limits WHERE key = ?"
LIMITS_WRITE = """INSERT INTO executionkit_limits (key, state) VALUES (?, ?)
    ON CONFLICT (key) DO UPDATE SET state = excluded.state"""
LIMITS_ROW = """INSERT INTO executionkit_limits (key, state) VALUES (?, 'null')
    ON CONFLICT (key) DO NOTHING"""
LIMITS_LOCK = "SELECT state FROM executionkit_limits WHERE key = ? FOR UPDATE"
LIMITS_UPDATE = "UPDATE executionkit_limits SET state = ? WHERE key = ?"

# The run inbox (`RunInbox`): a row per (run, kind, name), created on first use, outside the
# schema version (only workers and the commands that feed them read it).
INBOX_TABLE = """CREATE TABLE IF NOT EXISTS executionkit_inbox (
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (run_id, kind, name)
)"""
INBOX_ADD = """INSERT INTO executionkit_inbox (run_id, kind, name, value, at)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (run_id, kind, name) DO NOTHING RETURNING run_id"""
INBOX_SET = """INSERT INTO executionkit_inbox (run_id, kind, name, value, at)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (run_id, kind, name) DO UPDATE SET value = excluded.value, at = excluded.at
    RETURNING run_id"""
INBOX_DROP_KIND = "DELETE FROM executionkit_inbox WHERE run_id = ? AND kind = ?"
INBOX_DROP_NAME = "DELETE FROM executionkit_inbox WHERE run_id = ? AND kind = ? AND name = ?"
INBOX_ROWS = """SELECT run_id, name, value, at FROM executionkit_inbox WHERE kind = ?
    ORDER BY at, run_id, name"""
INBOX_RUN_ROWS = """SELECT run_id, name, value, at FROM executionkit_inbox
    WHERE kind = ? AND run_id = ? ORDER BY at, name"""
