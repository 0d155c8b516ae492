"""Two processes on one run, on every shareable store: nobody pays for a step twice.

Racing answerers: a run waits for ``approve``; two worker processes resume it at
the same moment, one answering "yes" and the other "no". Over 100 seeded trials
per store the gated step runs exactly once over both processes, with the answer
the store ends up holding, and the loser is refused before any step of its own
runs (it logs nothing).

Kill soak: two processes keep restarting on one run of a map while the test
SIGKILLs one of them at seeded random moments: no item is ever run by two live
processes, and the run ends complete.

Set ``EK_RACE_REPORT=path.json`` to have the outcome counts written there (for
the closing note of issue 18); the tests never print.
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pg_fixture import new_database
from race_worker import gated, load, open_store

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence


WORKER = Path(__file__).resolve().parents[1] / "race_worker.py"
ROOT = WORKER.parent.parent
TRIALS = 100
KINDS = ["json", "jsonl", "sqlite", "postgres"]
BOUND = 60.0  # seconds a worker may take to answer before the test fails (never reached)
REPORT: dict[str, Any] = {}


def worker_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(WORKER.parent)])}


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and script
        [sys.executable, str(WORKER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=worker_env(),
    )


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


def read_line(process: subprocess.Popen[str], bound: float = BOUND) -> str:
    """The worker's next stdout line, failing the test after ``bound`` seconds."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(bound), "the worker did not answer"
    line = process.stdout.readline()
    assert line, f"the worker ended (status {process.wait()})"
    return line


@pytest.fixture(scope="module")
def report() -> Iterator[dict[str, Any]]:
    yield REPORT
    target = os.environ.get("EK_RACE_REPORT")
    if target:
        Path(target).write_text(json.dumps(REPORT, indent=2, sort_keys=True), encoding="utf-8")


def where_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """A function giving the store location of trial n (one database for the SQL stores)."""
    if kind == "postgres":
        uri = new_database(request.getfixturevalue("pg_server"))
        return lambda n: uri
    if kind == "sqlite":
        return lambda n: str(tmp_path / "runs.db")
    suffix = ".json" if kind == "json" else ".jsonl"
    return lambda n: str(tmp_path / f"run-{n}{suffix}")


@pytest.mark.parametrize("kind", KINDS)
def test_racing_answerers_run_the_gated_step_once_with_the_stored_answer(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, report: dict[str, Any]
) -> None:
    """100 seeded trials: one execute over both processes; the loser ran nothing."""
    where = where_for(kind, tmp_path, request)
    log = tmp_path / "steps.log"
    workers = [spawn("answer"), spawn("answer")]
    outcomes: Counter[str] = Counter()
    try:
        for trial in range(TRIALS):
            rng = random.Random(trial)
            run_id = f"race-{trial}"
            location = where(trial)
            store = open_store(kind, location)
            try:
                suspended = gated(str(log), "-").run_sync(
                    {"run": run_id}, checkpoint_fn=store, run_id=run_id
                )
            finally:
                getattr(store, "close", lambda: None)()
            assert suspended.pending == {"approve": "run the plan?"}
            answers = ["yes", "no"]
            rng.shuffle(answers)
            for worker, answer in zip(workers, answers, strict=True):
                command = {
                    "kind": kind,
                    "where": location,
                    "run_id": run_id,
                    "answer": answer,
                    "log": str(log),
                    "schedule": rng.choice(["batch", "eager"]),
                    "jitter": rng.choice([0, 0, 0.0005, 0.001, 0.002]),
                }
                assert worker.stdin is not None
                worker.stdin.write(json.dumps(command) + "\n")
                worker.stdin.flush()
            replies = [json.loads(read_line(worker)) for worker in workers]
            check_trial(kind, location, run_id, log, answers, replies)
            outcomes.update(reply["outcome"] for reply in replies)
    finally:
        for worker in workers:
            stop(worker)
    assert outcomes["ran"] == TRIALS
    report[f"answers/{kind}"] = dict(outcomes)


def check_trial(  # noqa: PLR0917 - one trial's facts, named at the call
    kind: str,
    location: str,
    run_id: str,
    log: Path,
    answers: list[str],
    replies: list[dict[str, Any]],
) -> None:
    lines = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    mine = [line for line in lines if line[0] == run_id and line[2] != "-"]
    executed = [line for line in mine if line[1] == "execute"]
    assert len(executed) == 1, (run_id, replies, mine)
    acted_on = executed[0][2]
    store = open_store(kind, location)
    try:
        stored = load(store, kind, run_id)
    finally:
        getattr(store, "close", lambda: None)()
    assert stored.outputs["approve"] == acted_on
    assert stored.outputs["after"] == "done"
    winner = answers.index(acted_on)
    loser = 1 - winner
    assert replies[winner]["outcome"] == "ran"
    assert replies[winner]["approve"] == acted_on
    assert replies[loser]["outcome"] in {"claimed", "stale", "not waiting"}, replies[loser]
    if replies[loser]["outcome"] == "claimed":
        assert replies[loser]["owner"] in {replies[winner]["pid"], None}
    # The loser was told before anything of its own ran.
    assert not [line for line in mine if int(line[3]) == replies[loser]["pid"]]


# --- kill soak ------------------------------------------------------------------------------

ITEMS = 24
KILLS = 4
KILLS_IN_GATE = 2


def supervise(
    commands: Sequence[tuple[str, ...]], on_line: Callable[[subprocess.Popen[str], str], None]
) -> int:
    """Keep one worker per command running until one finishes; return the refused restarts.

    ``on_line(process, line)`` sees each line a worker prints (and may SIGKILL it);
    a worker that ends other than by finishing (killed, or refused: status 4 or 5)
    is started again with its command.
    """
    slots = [spawn(*command) for command in commands]
    refused = 0
    deadline = time.monotonic() + BOUND
    try:
        with selectors.DefaultSelector() as selector:
            for slot, process in enumerate(slots):
                assert process.stdout is not None
                selector.register(process.stdout, selectors.EVENT_READ, slot)
            while True:
                assert time.monotonic() < deadline, "the runs did not finish"
                for key, _ in selector.select(1.0):
                    slot = key.data
                    process = slots[slot]
                    line = process.stdout.readline() if process.stdout else ""
                    if line:
                        on_line(process, line)
                        continue
                    status = process.wait()
                    if status == 0:
                        return refused
                    assert status in {-signal.SIGKILL, 4, 5}, status
                    refused += status in {4, 5}
                    selector.unregister(key.fileobj)
                    stop(process)
                    slots[slot] = spawn(*commands[slot])
                    assert slots[slot].stdout is not None
                    selector.register(slots[slot].stdout, selectors.EVENT_READ, slot)
    finally:
        for process in slots:
            stop(process)


@pytest.mark.parametrize("kind", KINDS)
def test_two_processes_restarting_on_one_map_under_kill_9_never_overlap(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, report: dict[str, Any]
) -> None:
    """No item is run by two live processes; the run completes; every kill is survived."""
    location = where_for(kind, tmp_path, request)(0)
    log = tmp_path / "items.log"
    rng = random.Random(f"soak-{kind}")
    args = ("map", kind, location, "soak", str(log), str(ITEMS))
    kills = 0
    countdown = rng.randint(1, 6)

    def kill_now_and_then(process: subprocess.Popen[str], line: str) -> None:
        nonlocal kills, countdown
        del line
        countdown -= 1
        if countdown <= 0 and kills < KILLS:
            with log.open("a", encoding="utf-8") as file:
                file.write(f"killing {process.pid}\n")
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
            countdown = rng.randint(1, 8)

    refused = supervise([args, args], kill_now_and_then)
    check_soak(log)
    store = open_store(kind, location)
    try:
        final = load(store, kind, "soak")
    finally:
        getattr(store, "close", lambda: None)()
    assert final.outputs["items"] == [f"done k{n}" for n in range(ITEMS)]
    report[f"soak/{kind}"] = {"kills": kills, "refused restarts": refused}


def check_soak(log: Path) -> None:
    """Each process's lines form one block; a block left with items open was killed first."""
    seen: list[str] = []
    killing: set[str] = set()
    open_items: dict[str, set[str]] = {}
    for words in (line.split() for line in log.read_text(encoding="utf-8").splitlines()):
        if words[0] == "killing":
            killing.add(words[1])
            continue
        what, key, pid = words
        if not seen or seen[-1] != pid:
            assert pid not in seen, f"process {pid} ran items again after another process"
            if seen:
                previous = seen[-1]
                assert not open_items.get(previous) or previous in killing, (
                    f"process {pid} started items while {previous} still ran "
                    f"{sorted(open_items[previous])}"
                )
            seen.append(pid)
        items = open_items.setdefault(pid, set())
        if what == "start":
            items.add(key)
        else:
            items.discard(key)


@pytest.mark.parametrize("kind", KINDS)
def test_two_answerers_restarting_under_kill_9_act_only_on_the_stored_answer(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, report: dict[str, Any]
) -> None:
    """Kills at random, restarts: the gated step only ever runs with the answer stored."""
    location = where_for(kind, tmp_path, request)(0)
    log = tmp_path / "gate.log"
    store = open_store(kind, location)
    try:
        gated(str(log), "-").run_sync({"run": "gate"}, checkpoint_fn=store, run_id="gate")
    finally:
        getattr(store, "close", lambda: None)()
    answers = ["yes", "no"]
    kills = 0
    started: list[str] = []

    def kill_in_the_gate(process: subprocess.Popen[str], line: str) -> None:
        nonlocal kills
        started.append(line.split()[1])
        if kills < KILLS_IN_GATE:  # killed inside the gated step itself
            os.kill(process.pid, signal.SIGKILL)
            kills += 1

    commands = [("answer-once", kind, location, "gate", str(log), answer) for answer in answers]
    refused = supervise(commands, kill_in_the_gate)
    store = open_store(kind, location)
    try:
        final = load(store, kind, "gate")
    finally:
        getattr(store, "close", lambda: None)()
    stored = final.outputs["approve"]
    acted = [
        line.split()[1]
        for line in log.read_text(encoding="utf-8").splitlines()
        if line.startswith("execute ")
    ]
    # A kill lands inside the gated step (rarely just after it was saved, and then
    # the run is over); each kill ran it again, with the same, stored, answer.
    assert kills >= 1
    assert len(started) >= kills
    assert set(started) == set(acted) == {stored}, (stored, started, acted)
    assert final.outputs["execute"] == f"done with {stored}"
    report[f"answers under kill/{kind}"] = {
        "kills": kills,
        "refused restarts": refused,
        "execute completions": len(acted),
    }
