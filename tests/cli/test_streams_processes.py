"""Streamed text read from the store while another process runs the step.

An ``executionkit worker`` (SQLite, PostgreSQL) or ``executionkit run`` (SQLite)
process runs `stream_flow.workflow`, whose step streams two pieces and then
waits for a file this test creates. Meanwhile this process reads
``store.inbox.streams(run_id)`` until the text appears: the first attempt's, then,
once the first attempt was let go and failed, the retry's own text (never the
failed attempt's continued); once the second attempt was let go, the entry is gone
and the output recorded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import pytest
from cli_runner import ROOT
from stream_flow import workflow

from executionkit.stores import PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

DEADLINE = 60.0  # seconds for each thing awaited; each takes well under one
TALK = ("talk", None)
FIRST = {TALK: (1, "attempt 1: hello world")}
SECOND = {TALK: (2, "attempt 2: hello world")}


def _env(folder: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    return {**os.environ, "PYTHONPATH": path, "EK_STREAM_DIR": str(folder)}


def _start(folder: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-m", "executionkit", *args],
        env=_env(folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts, each killed at the end in every outcome."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def _poll(read: Callable[[], Any], done: Callable[[Any], bool], what: str) -> list[Any]:
    """Read every 10 ms until ``done`` says so; the values read, in order; fail at the deadline."""
    pause = threading.Event()
    seen: list[Any] = []
    for _ in range(int(DEADLINE / 0.01)):
        value = read()
        if not seen or seen[-1] != value:
            seen.append(value)
        if done(value):
            return seen
        pause.wait(0.01)
    pytest.fail(f"{what} within {DEADLINE:g} s; read {seen!r}")


def _follow(store: Any, run_id: str, folder: Path) -> None:
    """Read the step's text through both attempts and see it go; check what was read."""
    streams: Callable[[], Any] = lambda: store.inbox.streams(run_id)  # noqa: E731
    before = _poll(streams, lambda found: found == FIRST, "the first attempt's text")
    (folder / "go-1").touch()
    during = _poll(streams, lambda found: found == SECOND, "the retry's text")
    # What was read on the way: the first attempt's text growing, none (between two
    # attempts), the retry's text growing; never the retry's text after the first's.
    growing: tuple[dict[Any, Any], ...] = (
        {},
        FIRST,
        SECOND,
        {TALK: (1, "attempt 1: hello")},
        {TALK: (2, "attempt 2: hello")},
    )
    for found in [*before, *during]:
        assert found in growing, f"read {found!r} on the way"
    (folder / "go-2").touch()
    _poll(
        lambda: (store.inbox.streams(run_id), _output(store, run_id)),
        lambda found: found == ({}, "spoken"),
        "the text deleted and the output recorded",
    )


def _output(store: Any, run_id: str) -> object:
    checkpoint = store.load(run_id)
    return None if checkpoint is None else checkpoint.outputs.get("talk")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_workers_step_streams_into_the_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, processes: list[Any]
) -> None:
    """A worker's step streams into the store, read here; a retry's text is fresh; it goes."""
    if kind == "sqlite":
        location = f"sqlite:///{tmp_path / 'runs.db'}"
        store: Any = SQLiteStore(tmp_path / "runs.db")
    else:
        location = request.getfixturevalue("pg_uri")
        store = PostgresStore(location)
    workflow.submit(store, run_id="talk-1")
    worker = _start(
        tmp_path, "worker", location, "--workflow", "stream_flow:workflow", "--poll", "0.2"
    )
    processes.append(worker)
    try:
        _follow(store, "talk-1", tmp_path)
    finally:
        worker.send_signal(signal.SIGTERM)
        _out, err = worker.communicate(timeout=60)
        store.close()
    assert worker.returncode == 143, err
    assert "could not keep" not in err


def test_a_run_commands_step_streams_into_the_store(tmp_path: Path, processes: list[Any]) -> None:
    """``executionkit run --checkpoint sqlite:///...?run_id=``: the same, in a run of its own."""
    location = f"sqlite:///{tmp_path / 'runs.db'}?run_id=talk-2"
    command = _start(tmp_path, "run", "stream_flow:workflow", "--checkpoint", location)
    processes.append(command)
    store = SQLiteStore(tmp_path / "runs.db")
    _follow(store, "talk-2", tmp_path)
    out, err = command.communicate(timeout=60)
    store.close()
    assert command.returncode == 0, err
    assert '"talk": "spoken"' in out
    assert "could not keep" not in err
