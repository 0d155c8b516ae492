"""The SQL stores' fast save of a run's next checkpoint: what it writes, when it steps aside."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import CheckpointFormatError, Step, TokenUsage, Workflow, WorkflowCheckpoint
from executionkit._run._step_context import current_step
from executionkit.stores import (
    PostgresStore,
    SQLiteStore,
    StaleCheckpointError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

psycopg = pytest.importorskip("psycopg")


def _spend(value: Any) -> Any:
    current_step().add_usage(TokenUsage(3, 1, 1), model="m")
    return value


def _taken(run_id: str = "fast") -> list[WorkflowCheckpoint]:
    """A run with outputs, map items, ledger rows and a map that finishes, every step saved."""

    def item(value: int, _ctx: Any) -> int:
        return _spend(value * 2)  # type: ignore[no-any-return]

    steps = [
        Step("a", lambda _ctx: _spend([1, 2, 3])),
        Step.map("m", item, over="a", max_concurrency=1),
        Step("b", lambda ctx: _spend(sum(ctx["m"])), depends_on=("m",)),
        Step("c", lambda ctx: ctx["b"] + 1, depends_on=("b",)),
    ]
    taken: list[WorkflowCheckpoint] = []
    Workflow(steps).run_sync(checkpoint_fn=taken.append, checkpoint_every="step", run_id=run_id)
    return taken


@contextlib.contextmanager
def _sqlite_statements(store: SQLiteStore) -> Iterator[list[str]]:
    """The statements the store's connections run in the block."""
    seen: list[str] = []
    for connection in store._connections:
        connection.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        for connection in store._connections:
            connection.set_trace_callback(None)


@pytest.mark.parametrize("history", [True, False])
def test_sqlite_saves_every_checkpoint_exactly_and_the_next_one_without_a_read(
    tmp_path: Path, history: bool
) -> None:
    """Each save after the first: BEGIN, the fenced UPDATE, the header, the rows, COMMIT."""
    taken = _taken()
    store = SQLiteStore(tmp_path / "runs.db", history=history)
    store(taken[0])  # creates the file: the next save opens a connection to it
    store(taken[1])
    for checkpoint in taken[2:]:
        with _sqlite_statements(store) as seen:
            store(checkpoint)
        assert not any(statement.startswith("SELECT") for statement in seen), seen
        assert seen[1].startswith("UPDATE executionkit_runs SET seq"), seen
        assert store.load("fast") == checkpoint
    if history:
        assert [store.load("fast", seq=c.seq) for c in taken] == taken
    store.close()


@pytest.mark.parametrize("history", [True, False])
def test_postgres_saves_the_next_checkpoint_in_one_round_trip(
    pg_uri: str, tmp_path: Path, history: bool
) -> None:
    """One ReadyForQuery per save (libpq's trace), except the save that finishes a map.

    psycopg prepares a statement it ran ``prepare_threshold`` times, in a round trip of
    its own, once per connection and kind of parameters.
    """
    store = PostgresStore(pg_uri, history=history)
    for checkpoint in _taken("warm"):  # each shape of the statement prepared once
        store(checkpoint)
    taken = _taken()
    store(taken[0])
    trace = tmp_path / "trace"
    for checkpoint in taken[1:]:
        finishes = bool(taken[taken.index(checkpoint) - 1].items) and not checkpoint.items
        with trace.open("w") as file:
            store._own.pgconn.trace(file.fileno())
            store(checkpoint)
            store._own.pgconn.untrace()
        if not finishes:  # one round trip, and one more when psycopg prepares the statement
            text = trace.read_text()
            prepares = text.count('\tParse\t "_pg3_')
            assert prepares <= 1
            assert text.count("ReadyForQuery") == 1 + prepares
        assert store.load("fast") == checkpoint
    if history:
        assert [store.load("fast", seq=c.seq) for c in taken] == taken
    store.close()


def _stores(kind: str, tmp_path: Path, pg_uri: Callable[[], str]) -> tuple[Any, Any]:
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "runs.db"), SQLiteStore(tmp_path / "runs.db")
    uri = pg_uri()
    return PostgresStore(uri), PostgresStore(uri)


@pytest.fixture
def lazy_pg(request: pytest.FixtureRequest) -> Callable[[], str]:
    return lambda: str(request.getfixturevalue("pg_uri"))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_store_whose_run_another_saved_since_is_refused_as_stale(
    kind: str, tmp_path: Path, lazy_pg: Callable[[], str]
) -> None:
    """The fence sees the other writer: the full save raises, naming both seqs; nothing written."""
    taken = _taken()
    mine, other = _stores(kind, tmp_path, lazy_pg)
    mine(taken[0])
    mine(taken[1])
    other(taken[2])
    other(taken[3])
    with pytest.raises(StaleCheckpointError) as caught:
        mine(taken[2])
    seq = taken[3].seq
    assert str(caught.value) == str(StaleCheckpointError(repr(mine), "fast", seq - 1, seq))
    mine(taken[3])  # the same checkpoint again: nothing to do
    with pytest.raises(StaleCheckpointError) as caught:
        mine(WorkflowCheckpoint.from_dict({**taken[3].to_dict(), "metadata": {"x": 1}}))
    assert str(caught.value) == str(StaleCheckpointError(repr(mine), "fast", seq, seq))
    assert mine.load("fast") == taken[3]
    mine(taken[4])  # the run's next after the stored one: saved
    assert other.load("fast") == taken[4]
    mine.close()
    other.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_header_damaged_since_the_last_save_is_named_and_kept(
    kind: str, tmp_path: Path, lazy_pg: Callable[[], str]
) -> None:
    taken = _taken()
    store, _ = _stores(kind, tmp_path, lazy_pg)
    store(taken[0])
    store(taken[1])
    damage = "UPDATE executionkit_headers SET header = '[]'"
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(store.path)) as connection, connection:
            connection.execute(damage)
    else:
        with psycopg.connect(store.target) as connection:
            connection.execute(damage)
    with pytest.raises(CheckpointFormatError) as caught:
        store(taken[2])
    assert str(caught.value) == (
        f"{store!r}, run 'fast': the stored checkpoint must be a JSON object, got list []"
    )
    store.close()


def test_sqlite_a_schema_version_changed_since_the_last_save_is_refused(tmp_path: Path) -> None:
    taken = _taken()
    store = SQLiteStore(tmp_path / "runs.db")
    store(taken[0])
    with contextlib.closing(sqlite3.connect(store.path)) as connection, connection:
        connection.execute("UPDATE executionkit_schema SET version = 9")
    with pytest.raises(CheckpointFormatError, match=r"schema version \[9\]"):
        store(taken[1])
    store.close()


def test_sqlite_tables_dropped_since_the_last_save_are_made_again(tmp_path: Path) -> None:
    taken = _taken()
    store = SQLiteStore(tmp_path / "runs.db")
    store(taken[0])
    with contextlib.closing(sqlite3.connect(store.path)) as connection, connection:
        tables = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'executionkit_%'"
        ).fetchall()
        for (table,) in tables:
            connection.execute(f"DROP TABLE {table}")
    store(taken[1])
    assert store.load("fast") == taken[1]
    store.close()


def test_postgres_one_statement_keeps_every_character_of_names_keys_and_values(
    pg_uri: str,
) -> None:
    """The new rows travel as JSON texts: quotes, backslashes, newlines, non-ASCII survive."""
    keys = ['q"uote', "back\\slash", "new\nline", "ünï 字", "tab\tand\u0001"]

    def item(value: str, _ctx: Any) -> Any:
        return _spend({"echo": value, "raw": "\\u0000 is text here"})

    steps = [
        Step("split", lambda _ctx: {key: f"{key}!" for key in keys}),
        Step.map("each", item, over="split", max_concurrency=1),
        Step('ünïcode "step"', lambda ctx: sorted(ctx["each"]), depends_on=("each",)),
    ]
    taken: list[WorkflowCheckpoint] = []
    Workflow(steps).run_sync(checkpoint_fn=taken.append, checkpoint_every="step", run_id="odd")
    store = PostgresStore(pg_uri, history=True)
    for checkpoint in taken:
        store(checkpoint)
        assert store.load("odd") == checkpoint
    assert [store.load("odd", seq=c.seq) for c in taken] == taken
    store.close()
