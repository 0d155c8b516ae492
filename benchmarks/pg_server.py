"""A throwaway PostgreSQL server for ``stores.py --postgres auto``, and a fresh database per case.

The server comes from the ``pgserver`` wheel (in the dev extra), as in the
tests (``tests/pg_fixture.py``): its own ``initdb`` and ``pg_ctl``, listening
only on a Unix socket inside a new temporary data folder, with PostgreSQL's
default settings (``fsync`` and ``synchronous_commit`` on). Under root, pgserver
runs it as a system user ``pgserver`` that it creates. The server is stopped
and its folder deleted when the benchmark ends.

Every case gets an empty database of its own (`fresh_database`), dropped after
it, so that no case sees the tables or rows another left behind. `databases`
gives the stores a benchmark measures: SQLite, and PostgreSQL when asked.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def throwaway_server() -> Iterator[str]:
    """Start a server in a new temporary folder; yield its connection string; delete it."""
    folder = Path(tempfile.mkdtemp(prefix="ek-bench-pg-"))
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (containers) and uses /tmp.
        warnings.simplefilter("ignore")
        pgserver: Any = importlib.import_module("pgserver")  # untyped; dev extra only
        server = pgserver.get_server(folder / "data", cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def databases(postgres: str | None, folder: Path) -> Iterator[list[tuple[str, str, Any]]]:
    """(name, location, store) of each database measured; every store closed after.

    SQLite in ``folder`` always; PostgreSQL too when ``postgres`` is a connection
    string, or ``"auto"`` for a `throwaway_server`.
    """
    from executionkit.stores import PostgresStore, SQLiteStore  # noqa: PLC0415 - on the path now

    found: list[tuple[str, str, Any]] = [
        ("SQLite", f"sqlite:///{folder}/runs.db", SQLiteStore(folder / "runs.db"))
    ]
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [store.close() for _, _, store in found])
        if postgres is not None:
            uri = stack.enter_context(throwaway_server()) if postgres == "auto" else postgres
            found.append(("PostgreSQL", uri, PostgresStore(uri)))
        yield found


@contextlib.contextmanager
def fresh_database(dsn: str) -> Iterator[str]:
    """Create an empty database on the server ``dsn`` reaches; yield its DSN; drop it after."""
    psycopg: Any = importlib.import_module("psycopg")
    name = f"bench_{uuid.uuid4().hex}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield str(psycopg.conninfo.make_conninfo(dsn, dbname=name))
    finally:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wal_position(dsn: str) -> int:
    """The server's write-ahead log insert position, in bytes: its growth is what it wrote.

    Server-wide, so it counts every database's writes; on the throwaway server,
    during one case, those are the case's own (and autovacuum's, if it runs).
    """
    psycopg: Any = importlib.import_module("psycopg")
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"
        ).fetchone()
    return int(row[0])
