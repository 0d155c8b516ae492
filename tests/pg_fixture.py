"""A real PostgreSQL server for the tests: the ``pgserver`` wheel's binaries, one per session.

pgserver runs ``initdb`` and ``pg_ctl`` itself. PostgreSQL refuses to run as
root; under root (as in CI containers) pgserver creates a system user
``pgserver`` (``useradd``) and runs the server as that user, with the data
folder chowned to it. The server listens only on a Unix socket inside the
data folder (no TCP port), so parallel sessions cannot collide.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import signal
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running server; stopped when the session ends, however it ends.

    pgserver's own cleanup stops only the postmaster it started, so a server a
    test restarted (a new postmaster) would outlive the session: `stop` asks
    ``pg_ctl`` to stop whatever runs in the data folder. It also runs at exit,
    for a session interrupted before its fixtures were torn down, and SIGTERM
    interrupts the session as Ctrl-C does instead of ending it on the spot.
    """
    folder = tmp_path_factory.mktemp("pg") / "data"
    with warnings.catch_warnings():
        # Importing pgserver, platformdirs warns that XDG_RUNTIME_DIR is unset (as in
        # containers) and falls back to /tmp, which suits a test server.
        warnings.simplefilter("ignore")
        pgserver: Any = importlib.import_module("pgserver")  # untyped; only these tests use it
        server = pgserver.get_server(folder, cleanup_mode="stop")
    atexit.register(stop, server)
    # SIGTERM (a CI timeout, a killed terminal) would end the session at once, without
    # teardown: made an interrupt instead, so that the finally below runs.
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield server
    finally:
        stop(server)
        atexit.unregister(stop)
        if previous == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _interrupt(signum: int, frame: object) -> None:
    del signum, frame
    raise KeyboardInterrupt


def stop(server: Any) -> None:
    """Stop the server running in ``server``'s data folder, if one does (fast: no waiting)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):
            server.cleanup()
        if (Path(server.pgdata) / "postmaster.pid").exists():
            commands: Any = importlib.import_module("pgserver._commands")
            with contextlib.suppress(Exception):
                commands.pg_ctl(
                    ["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user
                )


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
