"""The PostgreSQL server the tests start is stopped in every outcome.

A pytest session in a subprocess uses the `pg_server` fixture, and ends badly:
a test restarts the server (a new postmaster) and then fails; or the session is
interrupted with Ctrl-C (SIGINT), or SIGTERM (a CI timeout, which ended the
session without any teardown), in the middle of a test. Either way, once the
session has ended, no server runs in its data folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
INNER = """
import sys
from pathlib import Path

from pg_fixture import restart


def test_restarts_then_fails(pg_server):
    Path("pgdata.txt").write_text(str(pg_server.pgdata))
    restart(pg_server)
    assert False, "fails on purpose"


def test_waits_to_be_interrupted(pg_server):
    Path("pgdata.txt").write_text(str(pg_server.pgdata))
    print("READY", flush=True)
    sys.stdin.readline()
"""


def session(folder: Path, test: str) -> subprocess.Popen[str]:
    (folder / "conftest.py").write_text("from pg_fixture import pg_server\n", encoding="utf-8")
    (folder / "test_inner.py").write_text(INNER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    return subprocess.Popen(  # noqa: S603 - our own interpreter
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            f"--basetemp={folder / 'bt'}",
            f"test_inner.py::{test}",
        ],
        cwd=folder,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def assert_stopped(folder: Path) -> None:
    data = Path((folder / "pgdata.txt").read_text(encoding="utf-8"))
    assert data.is_dir()
    assert not (data / "postmaster.pid").exists(), "a server still runs in the data folder"


def test_a_restarted_server_is_stopped_when_the_session_fails(tmp_path: Path) -> None:
    """A failing session, after a restart, leaves no server behind."""
    process = session(tmp_path, "test_restarts_then_fails")
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 1, out
    assert "fails on purpose" in out
    assert_stopped(tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_server_is_stopped_when_the_session_is_interrupted(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Ctrl-C, or SIGTERM, in the middle of a test leaves no server behind."""
    process = session(tmp_path, "test_waits_to_be_interrupted")
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("READY"):
                break
        process.send_signal(signum)
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0
    assert_stopped(tmp_path)
