"""Limits shared through a store's database: several processes draw on one key.

Four worker processes (`tests/limits_worker.py`) run a map of items each, on one
SQLite file or one PostgreSQL database, every item drawing on the same `Limit`.
Each item appends a ``+`` line to a shared marks file as it starts and a ``-``
line as it ends (one ``O_APPEND`` write per line, so the file is the order of
events over all processes). Read back:

- ``concurrency=3``: at no point do more than 3 items run at once over all the
  processes, and 3 do at some point. A control with a database per process
  (so nothing is shared) and one with ``concurrency=1000`` exceed 3: the check
  can fail.
- ``tokens=600,per=0.5`` with each item estimated and reporting 100 tokens: no
  window of (about) half a second holds more than 6 starts of all processes,
  and the 32 starts are spread over at least 2.5 seconds. A control with a
  database per process holds more.

The workers wait at a start gate (a line on stdin) until all of them are up, so
they run together; every worker started is killed and waited for however the
test ends.
"""

from __future__ import annotations

import bisect
import os
import selectors
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from limits_worker import TOKENS

if TYPE_CHECKING:
    from collections.abc import Sequence

WORKER = Path(__file__).resolve().parents[1] / "limits_worker.py"
ROOT = WORKER.parent.parent
WORKERS = 4
BOUND = 60.0  # seconds a worker may take to start or finish before the test fails


@dataclass(frozen=True, slots=True)
class Mark:
    """One line of the marks file: an item starting (``+``) or ending (``-``)."""

    sign: str
    at: float
    pid: int
    item: int


def spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(WORKER.parent)])}
    return subprocess.Popen(  # noqa: S603 - our own interpreter and script
        [sys.executable, str(WORKER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def wait_ready(process: subprocess.Popen[str]) -> None:
    """Wait for the worker's ``ready`` line, failing the test after `BOUND` seconds."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(BOUND), "the worker did not start"
    line = process.stdout.readline()
    assert line == f"ready {process.pid}\n", (line, process.wait(), read_stderr(process))


def read_stderr(process: subprocess.Popen[str]) -> str:
    return "" if process.stderr is None else process.stderr.read()


def run_workers(stores: Sequence[str], key: str, items: int, marks: Path, spec: str) -> list[int]:
    """Run a worker on each store together (through the start gate); their pids.

    Fails unless every worker exits 0.
    """
    processes: list[subprocess.Popen[str]] = []
    try:
        # One by one: if a spawn fails, the workers started before it are in the list.
        processes.extend(spawn(store, key, str(items), str(marks), spec) for store in stores)
        for process in processes:
            wait_ready(process)
        for process in processes:  # all are up: open the gate
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        for process in processes:
            out, err = process.communicate(timeout=BOUND)
            assert (process.returncode, out) == (0, "done\n"), err
        return [process.pid for process in processes]
    finally:
        for process in processes:
            stop(process)


def read_marks(path: Path) -> list[Mark]:
    marks = []
    for line in path.read_text(encoding="utf-8").splitlines():
        sign, at, pid, item = line.split()
        marks.append(Mark(sign, float(at), int(pid), int(item)))
    return marks


def check_every_item_once(marks: list[Mark], pids: list[int], items: int) -> None:
    """Every item of every worker started once and ended once, and nothing else."""
    counts = Counter((mark.sign, mark.pid, mark.item) for mark in marks)
    expected = {(sign, pid, item) for sign in "+-" for pid in pids for item in range(items)}
    assert set(counts) == expected
    assert set(counts.values()) == {1}


def most_running(marks: list[Mark]) -> int:
    """The most items running at once over all the processes, in the file's order."""
    running = most = 0
    for mark in marks:
        running += 1 if mark.sign == "+" else -1
        most = max(most, running)
    return most


def concurrency_run(
    tmp_path: Path, stores: Sequence[str], spec: str, *, turns: bool = False
) -> int:
    """Four workers of 12 items on ``stores`` with the limit ``spec``: the most running.

    ``turns``: the processes take turns for a key they contend for: each starts
    an item among the first half of all starts (one holding the key for its
    whole map would start its first only after the others' 36).
    """
    path = tmp_path / "marks"
    pids = run_workers(stores, "api", 12, path, spec)
    marks = read_marks(path)
    check_every_item_once(marks, pids, 12)
    if turns:
        starts = [mark.pid for mark in marks if mark.sign == "+"]
        assert set(starts[: len(starts) // 2]) == set(pids)
    return most_running(marks)


# --- concurrency ------------------------------------------------------------------------


def test_concurrency_is_shared_by_the_processes_of_a_sqlite_file(tmp_path: Path) -> None:
    stores = [f"sqlite:{tmp_path / 'runs.db'}"] * WORKERS
    assert concurrency_run(tmp_path, stores, "concurrency=3", turns=True) == 3


def test_concurrency_is_shared_by_the_processes_of_a_postgres_database(
    tmp_path: Path, pg_uri: str
) -> None:
    assert concurrency_run(tmp_path, [pg_uri] * WORKERS, "concurrency=3", turns=True) == 3


def test_control_a_database_each_exceeds_the_limit(tmp_path: Path) -> None:
    # Each process holds to 3 with a database of its own, but nothing is shared: the
    # four together run more than 3 at once, so the check above can fail.
    stores = [f"sqlite:{tmp_path / f'runs{number}.db'}" for number in range(WORKERS)]
    assert concurrency_run(tmp_path, stores, "concurrency=3") > 3


def test_control_a_high_limit_exceeds_three(tmp_path: Path) -> None:
    stores = [f"sqlite:{tmp_path / 'runs.db'}"] * WORKERS
    assert concurrency_run(tmp_path, stores, "concurrency=1000") > 3


# --- a token window ---------------------------------------------------------------------

PER = 0.5
ALLOWED = 6  # attempts of TOKENS tokens the window holds
TOKEN_ITEMS = 8
# The limiter stamps an attempt's start (in the window it shares) a moment before the item
# writes its "+" mark: under 10 ms when measured alone, but once over 50 ms while the whole
# suite loaded the two cores (the stamp's transaction commits before the item runs). With
# that lag under SLACK, the marks inside any window of PER - SLACK seconds come from stamps
# inside one window of PER seconds, so they are at most ALLOWED. Four processes sharing
# nothing put 24 starts in such a window (the control test).
SLACK = 0.15


def token_run(tmp_path: Path, stores: Sequence[str]) -> list[float]:
    """Four workers of 8 items on ``stores``, 6 items' tokens per window: the starts, sorted."""
    path = tmp_path / "marks"
    spec = f"tokens={TOKENS * ALLOWED},per={PER}"
    pids = run_workers(stores, "llm", TOKEN_ITEMS, path, spec)
    marks = read_marks(path)
    check_every_item_once(marks, pids, TOKEN_ITEMS)
    return sorted(mark.at for mark in marks if mark.sign == "+")


def most_in_window(starts: list[float], width: float) -> int:
    """The most of the sorted ``starts`` inside any window ``[at, at + width)``."""
    return max(bisect.bisect_left(starts, at + width) - first for first, at in enumerate(starts))


def test_a_token_window_is_shared_by_the_processes_of_a_sqlite_file(tmp_path: Path) -> None:
    check_token_window(token_run(tmp_path, [f"sqlite:{tmp_path / 'runs.db'}"] * WORKERS))


def test_a_token_window_is_shared_by_the_processes_of_a_postgres_database(
    tmp_path: Path, pg_uri: str
) -> None:
    check_token_window(token_run(tmp_path, [pg_uri] * WORKERS))


def check_token_window(starts: list[float]) -> None:
    """At most ALLOWED starts in any window, and the window throttled them."""
    assert most_in_window(starts, PER - SLACK) <= ALLOWED, starts
    # Throttled: starts i and i + 6 are at least PER apart (by their stamps), so the 32
    # starts span at least 5 windows, less the lag of the first mark.
    assert starts[-1] - starts[0] >= (len(starts) - 1) // ALLOWED * PER - SLACK, starts


def test_control_a_token_window_each_exceeds_the_limit(tmp_path: Path) -> None:
    # A database per process: each holds to 6 starts a window, the four together do not.
    stores = [f"sqlite:{tmp_path / f'runs{number}.db'}" for number in range(WORKERS)]
    starts = token_run(tmp_path, stores)
    assert most_in_window(starts, PER - SLACK) > ALLOWED, starts
