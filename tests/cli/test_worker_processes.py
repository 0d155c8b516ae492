"""Three ``executionkit worker`` processes on one database, two killed with kill -9.

Fifty submitted runs of `worker_flow.workflow` (a map, a question answered with
``executionkit answer``, a 2-second timer, a deadline with a default) on one SQLite
file and on one PostgreSQL database. Two of the three workers are killed with
SIGKILL at random moments; the third carries every run to its end. Then:

- every run finished, with the outputs of an uninterrupted run;
- no step or item ran twice unless the earlier run of it was in a process that was
  killed (a step recorded by a living worker never ran again);
- the last worker stops on SIGTERM with exit 143, holding no claim.

The random moments come from a seed printed in the failure message.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from cli_runner import ROOT
from worker_flow import expected, workflow

from executionkit._define import _questions as questions
from executionkit.stores import PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

RUNS = 50
WORKERS = 3
DEADLINE = 120.0  # seconds for everything; it takes about ten


def _env(log: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    return {**os.environ, "PYTHONPATH": path, "EK_WORKER_LOG": str(log)}


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "executionkit", *args]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts, each killed at the end in every outcome."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def _carry(location: str, store: Any, tmp_path: Path, started: list[Any], seed: int) -> None:
    log = tmp_path / "ran.log"
    env = _env(log)
    workers = [
        subprocess.Popen(  # noqa: S603 - our own interpreter
            _command(
                "worker",
                location,
                "--workflow",
                "worker_flow:workflow",
                "--poll",
                "0.2",
                "--concurrency",
                "8",
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(WORKERS)
    ]
    started.extend(workers)
    run_ids = [f"run-{index:02d}" for index in range(RUNS)]
    for run_id in run_ids:
        workflow.submit(store, {"seed": run_id}, run_id=run_id)
    chance = random.Random(seed)
    kills = sorted(chance.uniform(0.3, 4.0) for _ in range(2))
    doomed = chance.sample(workers, 2)
    killed: set[int] = set()
    operator = _Operator(location, store, env, seed)
    begin = time.monotonic()
    while len(operator.finished) < RUNS:
        elapsed = time.monotonic() - begin
        assert elapsed < DEADLINE, f"seed {seed}: {len(operator.finished)} of {RUNS} finished"
        while kills and elapsed >= kills[0]:
            kills.pop(0)
            victim = doomed.pop()
            victim.send_signal(signal.SIGKILL)
            killed.add(victim.pid)
        operator.look()
        time.sleep(0.1)  # polling the store, as an operator's script would
    assert not kills, f"seed {seed}: every run finished before the kills; tune the test"
    for run_id in run_ids:
        final = store.load(run_id)
        assert final is not None
        assert dict(final.outputs) == expected(run_id, f"ok {run_id}"), f"seed {seed}: {run_id}"
        assert not final.errors
    survivor = next(worker for worker in workers if worker.pid not in killed)
    survivor.send_signal(signal.SIGTERM)
    _out, err = survivor.communicate(timeout=60)
    assert survivor.returncode == 143, err
    assert "stopped; what every run completed is saved" in err
    for run_id in run_ids:
        assert store.owner(run_id) is None
    _check_nothing_ran_twice(log, killed, seed)
    operator.close()


class _Operator:
    """Answers each run's question with ``executionkit answer`` once it is asked."""

    def __init__(self, location: str, store: Any, env: dict[str, str], seed: int) -> None:
        self.location, self.store, self.env, self.seed = location, store, env, seed
        self.finished: set[str] = set()
        self.answered: set[str] = set()
        self.answering: list[subprocess.Popen[str]] = []
        self.seen: dict[str, int] = {}

    def look(self) -> None:
        for run_id, seq in self.store.run_seqs().items():
            if run_id in self.finished or self.seen.get(run_id) == seq:
                continue
            self.seen[run_id] = seq
            checkpoint = self.store.load(run_id)
            if "final" in checkpoint.outputs:
                self.finished.add(run_id)
            elif "approve" in checkpoint.pending and run_id not in self.answered:
                self.answered.add(run_id)
                self.answering.append(self._answer(run_id))
        for process in self.answering:
            if process.poll() is not None:
                _, err = process.communicate()
                assert process.returncode == 0, f"seed {self.seed}: answer failed: {err}"
        self.answering = [process for process in self.answering if process.returncode is None]

    def _answer(self, run_id: str) -> subprocess.Popen[str]:
        return subprocess.Popen(  # noqa: S603 - our own interpreter
            _command("answer", self.location, "--run", run_id, "--answer", f"approve=ok {run_id}"),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def close(self) -> None:
        for process in self.answering:
            process.communicate(timeout=30)


def _check_nothing_ran_twice(log: Path, killed: set[int], seed: int) -> None:
    """Every run of a step or item but its last was in a process that was killed."""
    runs: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for line in log.read_text().splitlines():
        pid, run_id, step, key = line.split()
        runs[run_id, step, key].append(int(pid))
    assert len(runs) == RUNS * 5  # topics, three drafts items, final
    twice = {what: pids for what, pids in runs.items() if len(pids) > 1}
    for what, pids in twice.items():
        assert set(pids[:-1]) <= killed, f"seed {seed}: {what} ran again after {pids}"


def test_three_workers_on_sqlite_two_killed(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    seed = random.randrange(1 << 30)
    store = SQLiteStore(tmp_path / "runs.db")
    _carry(f"sqlite:///{tmp_path}/runs.db", store, tmp_path, processes, seed)


def test_three_workers_on_postgres_two_killed(
    tmp_path: Path, pg_uri: str, processes: list[subprocess.Popen[str]]
) -> None:
    seed = random.randrange(1 << 30)
    store = PostgresStore(pg_uri)
    try:
        _carry(pg_uri, store, tmp_path, processes, seed)
    finally:
        store.close()


def test_the_expected_outputs_are_those_of_an_uninterrupted_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`worker_flow.expected` is what the workflow really gives, run in one process."""
    now = [datetime(2026, 12, 2, 9, 0, tzinfo=UTC)]
    monkeypatch.setattr(questions, "utc_now", lambda: now[0])
    saved: list[Any] = []

    def resume(**more: Any) -> Any:
        last = saved[-1] if saved else None
        return workflow.run_sync(
            {"seed": "s"}, resume_from=last, checkpoint_fn=saved.append, sleep_up_to=0, **more
        )

    assert list(resume().pending) == ["approve"]
    assert list(resume(answers={"approve": "ok s"}).waits) == ["cool"]
    now[0] += timedelta(seconds=2)
    assert list(resume().pending) == ["extra"]
    now[0] += timedelta(seconds=1, microseconds=1)
    assert dict(resume().outputs) == expected("s", "ok s")
