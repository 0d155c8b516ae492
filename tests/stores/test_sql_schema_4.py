"""Schema 4 of the SQL stores: databases of schemas 2 and 3 are read, and upgraded by a write.

A write upgrades them to the current schema, 5, which adds the attempts table to 4's
layout (tests/stores/test_format_5_stores.py upgrades a schema 4 database).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

import pytest
from test_sql_fast_save import _taken

from executionkit import TokenUsage, WorkflowCheckpoint
from executionkit.stores import PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

# The tables of schema 3 that schema 4 changed, as executionkit created them.
_SCHEMA_3 = (
    """CREATE TABLE executionkit_runs (
            run_id TEXT PRIMARY KEY,
            seq INTEGER NOT NULL,
            written INTEGER NOT NULL,
            next_ord INTEGER NOT NULL
        )""",
    "CREATE INDEX executionkit_runs_written ON executionkit_runs (written)",
    """CREATE TABLE executionkit_headers (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            created_at TEXT,
            header TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
)
_DROPPED_INDEXES = tuple(
    f"CREATE INDEX executionkit_{table}_dropped ON executionkit_{table} (run_id, dropped)"
    for table in ("outputs", "items", "ledger")
)


def _as_schema_3(path: Path) -> None:
    """Give the database at ``path`` the tables and version of schema 3, rows kept."""
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        for table in ("executionkit_runs", "executionkit_headers"):
            connection.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
        connection.execute("DROP INDEX IF EXISTS executionkit_runs_written")
        for statement in (*_SCHEMA_3, *_DROPPED_INDEXES):
            connection.execute(statement)
        for table in ("executionkit_runs", "executionkit_headers"):
            connection.execute(f"INSERT INTO {table} SELECT * FROM {table}_old")  # noqa: S608
            connection.execute(f"DROP TABLE {table}_old")
        connection.execute("UPDATE executionkit_schema SET version = 3")


def _layout(path: Path) -> tuple[list[tuple[int]], dict[str, str]]:
    """The schema version, and the SQL of every table and index of the store."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        version = connection.execute("SELECT version FROM executionkit_schema").fetchall()
        found = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE name LIKE 'executionkit_%' AND sql NOT NULL"
        ).fetchall()
    return version, dict(found)


def _schema_4_layout(path: Path) -> None:
    """Schema 4's layout, as the current schema (5) keeps it, with the attempts table."""
    version, found = _layout(path)
    assert version == [(5,)]
    assert "executionkit_attempts" in found
    assert not [name for name in found if name.endswith("_dropped")]
    assert found["executionkit_runs"].endswith("WITHOUT ROWID")
    assert found["executionkit_headers"].endswith("WITHOUT ROWID")
    assert "executionkit_runs_written" in found


def test_a_new_database_has_schema_4(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store(_taken()[0])
    _schema_4_layout(store.path)
    store.close()


@pytest.mark.parametrize("history", [True, False])
def test_a_schema_3_database_is_read_then_upgraded_in_place_by_a_write(
    tmp_path: Path, history: bool
) -> None:
    taken = _taken()
    path = tmp_path / "runs.db"
    first = SQLiteStore(path, history=True)
    for checkpoint in taken[:4]:
        first(checkpoint)
    other = _taken("other")[0]
    first(other)
    first.close()
    _as_schema_3(path)
    store = SQLiteStore(path, history=history)
    assert [store.load("fast", seq=c.seq) for c in taken[:4]] == taken[:4]
    assert _layout(path)[0] == [(3,)]  # reading changes nothing
    for checkpoint in taken[4:]:
        store(checkpoint)
    _schema_4_layout(path)
    assert store.load("fast") == taken[-1]
    assert store.run_ids() == ["fast", "other"]
    kept = taken if history else [*taken[:3], taken[-1]]
    assert [info.seq for info in store.checkpoints("fast")] == [c.seq for c in kept]
    assert store.history("fast") == kept
    assert SQLiteStore(path).load("other") == other
    store.close()


def test_a_schema_2_database_is_upgraded_to_4_by_a_write(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    old = WorkflowCheckpoint(1, {"a": 1}, TokenUsage(5, 2, 1), version=3, run_id="r", seq=1)
    SQLiteStore(path, history=True)(old)
    _as_schema_3(path)
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("DROP TABLE executionkit_ledger")
        connection.execute("UPDATE executionkit_schema SET version = 2")
    store = SQLiteStore(path, history=True)
    assert store.load("r") == old
    taken = _taken("r")
    for checkpoint in taken[1:]:
        store(checkpoint)
    _schema_4_layout(path)
    assert store.load("r") == taken[-1]
    assert store.load("r", seq=1) == old
    store.close()


def test_a_postgres_schema_3_database_is_upgraded_in_place_by_a_write(pg_uri: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    taken = _taken()
    store = PostgresStore(pg_uri, history=True)
    for checkpoint in taken[:3]:
        store(checkpoint)
    store.close()
    with psycopg.connect(pg_uri) as connection:
        for statement in _DROPPED_INDEXES:
            connection.execute(statement)
        connection.execute("UPDATE executionkit_schema SET version = 3")
    store = PostgresStore(pg_uri, history=True)
    assert store.load("fast") == taken[2]
    for checkpoint in taken[3:]:
        store(checkpoint)
    assert store.history("fast") == taken
    store.close()
    with psycopg.connect(pg_uri) as connection:
        version = connection.execute("SELECT version FROM executionkit_schema").fetchall()
        indexes = connection.execute(
            "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'executionkit_%_dropped'"
        ).fetchall()
    assert version == [(5,)]
    assert indexes == []
