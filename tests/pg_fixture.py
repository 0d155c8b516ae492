"""A real PostgreSQL server for the tests: the ``pgserver`` wheel's binaries, one per session.

pgserver runs ``initdb`` and ``pg_ctl`` itself. PostgreSQL refuses to run as
root; under root (as in CI containers) pgserver creates a system user
``pgserver`` (``useradd``) and runs the server as that user, with the data
folder chowned to it. The server listens only on a Unix socket inside the
data folder (no TCP port), so parallel sessions cannot collide.
"""

from __future__ import annotations

import importlib
import uuid
import warnings
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running server; stopped when the session ends."""
    folder = tmp_path_factory.mktemp("pg") / "data"
    with warnings.catch_warnings():
        # Importing pgserver, platformdirs warns that XDG_RUNTIME_DIR is unset (as in
        # containers) and falls back to /tmp, which suits a test server.
        warnings.simplefilter("ignore")
        pgserver: Any = importlib.import_module("pgserver")  # untyped; only these tests use it
        server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()


def new_database(server: Any) -> str:
    """Create an empty database on ``server``; return its connection string."""
    import psycopg  # noqa: PLC0415

    name = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(server.get_uri(), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return str(server.get_uri(name))


@pytest.fixture
def pg_uri(pg_server: Any) -> str:
    """The connection string of a new, empty database."""
    return new_database(pg_server)


def restart(server: Any) -> None:
    """Stop the server (fast: clients are disconnected) and start it again, same socket."""
    commands: Any = importlib.import_module("pgserver._commands")
    commands.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user)
