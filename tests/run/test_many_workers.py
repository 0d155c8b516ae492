"""Many runs on a Dask cluster of process workers, one database; a worker dies mid-run.

Runs ``examples/many_workers.py`` on a real ``LocalCluster`` with two worker
processes. One run's ``report`` step SIGKILLs its own worker the first time it
runs; the cluster hands the run to a worker again, which resumes it from the
database: every step whose output was recorded before the kill ran exactly once.
A run handed to both workers at once runs on one of them: the other is refused
by the run's claim before anything runs, and the claim of a killed owner is
free at once for the worker that resumes the run. The side effects are counted
from the log the steps write (``run_id step pid start|end|killed``).
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from executionkit import WorkflowCheckpoint

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUNS = ("run-a", "run-b", "run-c")
STEPS = ("fetch", "summary_en", "summary_fr", "report")
REPORT = "report(summary_en(fetch()),summary_fr(fetch()))"
TIMEOUT = 60  # seconds; a healthy run of this file takes a few


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A cluster of two single-threaded worker processes that import the example."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", f"{EXAMPLES}:{':'.join(sys.path)}")
    dask: Any = importlib.import_module("dask")
    distributed: Any = importlib.import_module("distributed")
    scratch = tmp_path / "dask"
    scratch.mkdir()
    settings = {
        "temporary-directory": str(scratch),
        # A task stays on the worker it was given to, so a test can give one to each.
        "distributed.scheduler.work-stealing": False,
    }
    with (
        dask.config.set(settings),
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            # Any free port for the scheduler's HTTP server (it has one even without a
            # dashboard): its default, 8787, may be taken by another cluster on this machine.
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.wait_for_workers(2, timeout=TIMEOUT)
        yield client


@pytest.fixture
def many_workers(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The example module, imported from examples/."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("many_workers")


@dataclass(frozen=True)
class Line:
    """One line of the steps' log: a step body of a run started, ended or was killed."""

    run: str
    step: str
    pid: int
    event: str


def read_log(log: Path) -> list[Line]:
    """The log's lines, in the order they were appended; none if it was never written."""
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [
        Line(run, step, int(pid), event)
        for run, step, pid, event in (line.split() for line in lines)
    ]


def count(lines: list[Line], event: str) -> dict[tuple[str, str], int]:
    """How many times each (run, step) logged ``event``."""
    return dict(Counter((line.run, line.step) for line in lines if line.event == event))


def overlaps(lines: list[Line]) -> list[tuple[str, str, int, int]]:
    """Each start of a (run, step) while an earlier start of it had not ended nor been killed.

    Returns ``(run, step, earlier pid, later pid)`` for each: one step of one run
    running twice at the same time.
    """
    running: dict[tuple[str, str], list[int]] = {}
    found: list[tuple[str, str, int, int]] = []
    for line in lines:
        pids = running.setdefault((line.run, line.step), [])
        if line.event == "start":
            found.extend((line.run, line.step, pid, line.pid) for pid in pids)
            pids.append(line.pid)
        elif line.event == "end":
            pids.remove(line.pid)
        else:  # killed: the process is gone, with every step it was running
            for others in running.values():
                others[:] = [pid for pid in others if pid != line.pid]
    return found


def every_step(runs: tuple[str, ...], times: int = 1) -> dict[tuple[str, str], int]:
    return {(run_id, step): times for run_id in runs for step in STEPS}


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("a s 1 start\na s 1 end\na s 2 start\na s 2 end", []),
        ("a s 1 start\na s 2 start\na s 1 end\na s 2 end", [("a", "s", 1, 2)]),
        ("a s 1 start\na s 1 start", [("a", "s", 1, 1)]),
        ("a s 1 start\na s 1 killed\na s 2 start\na s 2 end", []),
        ("a s 1 start\nb t 1 start\na s 1 killed\nb t 2 start", []),
        ("a s 1 start\nb t 3 killed\na s 2 start", [("a", "s", 1, 2)]),
        ("a s 1 start\nb s 2 start\na t 3 start", []),
    ],
)
def test_overlaps_finds_a_step_started_while_it_runs_elsewhere(
    tmp_path: Path, log: str, expected: list[tuple[str, str, int, int]]
) -> None:
    """Only a start of the same (run, step) before the earlier one ended or died counts."""
    path = tmp_path / "log"
    path.write_text(log + "\n", encoding="utf-8")
    assert overlaps(read_log(path)) == expected


def test_a_run_whose_worker_dies_is_resumed_by_another_without_paying_twice(
    client: Any, many_workers: Any, tmp_path: Path
) -> None:
    """All runs finish; the killed step ran twice, every other step exactly once."""
    database = str(tmp_path / "runs.db")
    log = tmp_path / "executions.log"
    futures = {
        run_id: client.submit(
            many_workers.run_one,
            run_id,
            database,
            str(log),
            "report" if run_id == "run-b" else None,
            pure=False,
            retries=0,
        )
        for run_id in RUNS
    }
    results = {run_id: future.result(timeout=TIMEOUT) for run_id, future in futures.items()}
    for run_id, result in results.items():
        assert result["status"] == "finished", run_id
        assert result["outputs"]["report"] == REPORT, run_id
        assert result["outputs"]["fetch"] == "fetch()"
    lines = read_log(log)
    expected = every_step(RUNS)
    expected["run-b", "report"] = 2  # killed in flight, then run again
    assert count(lines, "start") == expected
    assert count(lines, "end") == every_step(RUNS)
    assert [(line.run, line.step) for line in lines if line.event == "killed"] == [
        ("run-b", "report")
    ]
    resumed = results["run-b"]
    # The worker that took over restored what was recorded before the kill.
    assert resumed["restored"] == ["fetch", "summary_en", "summary_fr"]
    assert resumed["executed"] == ["report"]
    # Token usage counts each recorded step once: four steps of 100 input tokens.
    assert {run_id: result["cost"] for run_id, result in results.items()} == dict.fromkeys(
        RUNS, 400
    )


def test_a_run_handed_to_two_workers_at_once_runs_once_even_when_its_owner_is_killed(
    client: Any, many_workers: Any, tmp_path: Path
) -> None:
    """One of two workers given a run is refused; its owner dies; no step runs twice at once."""
    distributed: Any = importlib.import_module("distributed")
    database = str(tmp_path / "runs.db")
    log = tmp_path / "executions.log"
    gate = tmp_path / "gate"
    pids: dict[str, int] = client.run(os.getpid)
    addresses = sorted(pids)
    assert len(addresses) == 2

    # run-a goes to both workers at once, alone on the cluster. Whichever claims it
    # first waits in fetch until the gate exists, which only happens once the
    # other has come back: the two overlap, and the other must have been refused.
    duplicates = [
        client.submit(
            many_workers.run_one,
            "run-a",
            database,
            str(log),
            "report",  # the owner kills its worker in report, after the gate
            str(gate),
            workers=[address],
            allow_other_workers=True,  # so the run can move on once that worker dies
            pure=False,
            retries=0,
        )
        for address in addresses
    ]
    done, _ = distributed.wait(duplicates, timeout=TIMEOUT, return_when="FIRST_COMPLETED")
    assert len(done) == 1
    refused_at = duplicates.index(next(iter(done)))
    owner_pid = pids[addresses[1 - refused_at]]
    refused = duplicates[refused_at].result()
    assert refused == {
        "status": "owned",
        "owner_pid": owner_pid,
        "owner_host": socket.gethostname(),
        "message": f"run 'run-a' is owned by pid {owner_pid} on host {socket.gethostname()}; "
        f"nothing ran",
    }
    # The owner holds the run and has not got past fetch; the refused worker wrote nothing.
    assert set(read_log(log)) <= {Line("run-a", "fetch", owner_pid, "start")}

    # run-c meanwhile, on the other worker; then the owner may go on, and dies in report.
    other = client.submit(many_workers.run_one, "run-c", database, str(log), pure=False)
    gate.touch()
    owner = duplicates[1 - refused_at].result(timeout=TIMEOUT)
    run_c = other.result(timeout=TIMEOUT)

    # run-b to both workers (one of them restarted after the kill) at the same
    # moment, ungated: the two claims race.
    client.wait_for_workers(2, timeout=TIMEOUT)
    assert len(client.scheduler_info()["workers"]) == 2
    racing = [
        client.submit(
            many_workers.run_one, "run-b", database, str(log), workers=[address], pure=False
        )
        for address in client.scheduler_info()["workers"]
    ]
    run_b, again_b = (future.result(timeout=TIMEOUT) for future in racing)

    # The worker that took run-a over after the kill was granted its claim at
    # once and paid only for the step in flight when the owner died.
    assert owner == {
        "status": "finished",
        "outputs": {
            "fetch": "fetch()",
            "summary_en": "summary_en(fetch())",
            "summary_fr": "summary_fr(fetch())",
            "report": REPORT,
        },
        "restored": ["fetch", "summary_en", "summary_fr"],
        "executed": ["report"],
        "cost": 400,
        "stale_starts": 0,
    }
    # One of the two given run-b ran all of it; the other was refused while it
    # ran, or came after it and found the run finished (loading it again if it
    # had loaded before the first saved): which one is timing.
    ran = [result for result in (run_b, again_b) if result.get("executed")]
    assert len(ran) == 1
    idle = again_b if ran[0] is run_b else run_b
    assert ran[0]["status"] == "finished"
    assert sorted(ran[0]["executed"]) == sorted(STEPS)
    assert ran[0]["restored"] == []
    assert ran[0]["outputs"]["report"] == REPORT
    if idle["status"] == "owned":
        b_owner = {line.pid for line in read_log(log) if line.run == "run-b"}
        assert {idle["owner_pid"]} == b_owner
    else:
        assert idle["status"] == "finished"
        assert idle["executed"] == []
        assert sorted(idle["restored"]) == sorted(STEPS)
        assert idle["outputs"] == ran[0]["outputs"]
    assert run_c["status"] == "finished"
    assert run_c["outputs"]["report"] == REPORT
    assert sorted(run_c["executed"]) == sorted(STEPS)

    lines = read_log(log)
    starts = every_step(RUNS)
    starts["run-a", "report"] = 2  # in flight when its worker was killed, then run again
    assert count(lines, "start") == starts
    assert count(lines, "end") == every_step(RUNS)
    assert [line for line in lines if line.event == "killed"] == [
        Line("run-a", "report", owner_pid, "killed")
    ]
    first_of_a = next(line for line in lines if line.run == "run-a")
    assert first_of_a == Line("run-a", "fetch", owner_pid, "start")
    assert overlaps(lines) == []


def test_a_run_owned_by_another_claim_is_reported_and_nothing_runs(
    many_workers: Any, tmp_path: Path
) -> None:
    """run_one on an owned run returns who owns it; once the claim is gone, the run runs."""
    database = str(tmp_path / "runs.db")
    log = tmp_path / "executions.log"
    with SQLiteStore(database).claim("run-x"):
        refused = many_workers.run_one("run-x", database, str(log))
    host = socket.gethostname()
    assert refused == {
        "status": "owned",
        "owner_pid": os.getpid(),
        "owner_host": host,
        "message": f"run 'run-x' is owned by pid {os.getpid()} on host {host}; nothing ran",
    }
    assert read_log(log) == []
    executed = many_workers.run_one("run-x", database, str(log))["executed"]
    assert sorted(executed) == sorted(STEPS)  # the summaries run side by side, in threads


def test_a_worker_that_another_got_ahead_of_loads_again_and_pays_for_nothing(
    many_workers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker finishes the run between load and claim: run_one loads again, runs none."""
    database = str(tmp_path / "runs.db")
    log = tmp_path / "executions.log"
    loads: list[str] = []

    class OvertakenOnce(SQLiteStore):
        """Another worker runs the whole run right after this worker's first load."""

        def load(
            self, run_id: str | None = None, *, seq: int | None = None
        ) -> WorkflowCheckpoint | None:
            checkpoint = super().load(run_id, seq=seq)
            loads.append(str(run_id))
            if len(loads) == 1:
                many_workers.report_workflow(str(log)).run_sync(
                    {"run": run_id}, checkpoint_fn=SQLiteStore(database), run_id=run_id
                )
            return checkpoint

    monkeypatch.setattr(many_workers, "open_store", OvertakenOnce)
    result = many_workers.run_one("run-x", database, str(log))
    assert loads == ["run-x", "run-x"]
    assert result["status"] == "finished"
    assert result["stale_starts"] == 1
    assert result["executed"] == []
    assert sorted(result["restored"]) == sorted(STEPS)
    assert count(read_log(log), "start") == every_step(("run-x",))


def test_a_worker_always_overtaken_gives_up_after_a_few_loads(
    many_workers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_one loads again at most STALE_ATTEMPTS times, then reports it fell behind."""
    database = str(tmp_path / "runs.db")
    log = tmp_path / "executions.log"
    assert many_workers.run_one("run-x", database, str(log))["status"] == "finished"
    loads: list[str] = []

    class AlwaysBehind(SQLiteStore):
        """Every load returns nothing, as if each time another worker saved just after it."""

        def load(
            self, run_id: str | None = None, *, seq: int | None = None
        ) -> WorkflowCheckpoint | None:
            del seq
            loads.append(str(run_id))
            return None

    monkeypatch.setattr(many_workers, "open_store", AlwaysBehind)
    assert many_workers.run_one("run-x", database, str(log)) == {
        "status": "behind",
        "message": "run 'run-x': other workers saved it ahead of this one 3 times; "
        "try again later",
    }
    assert loads == ["run-x"] * many_workers.STALE_ATTEMPTS
    assert count(read_log(log), "start") == every_step(("run-x",))
