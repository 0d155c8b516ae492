"""SIGTERM while run_sync runs: handled like Ctrl-C, then SystemExit(143); handlers restored.

Process managers, containers and deploys stop programs with SIGTERM. A real signal
is sent to a child process; the in-process tests check which handler is installed
while a run goes on, and that it is the previous one afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def default_sigterm() -> Iterator[None]:
    """Each test starts from SIGTERM's default action, whatever the test runner installed.

    A pytest-xdist worker handles SIGTERM itself; a program run by a user usually
    does not, and that default is what run_sync installs its handler over.
    """
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


SCRIPT = """
import asyncio, json, signal, sys
from executionkit import Step, Workflow

path = sys.argv[1]

def done(ctx):
    return {"answer": 42}

async def waiting(ctx):
    print("waiting", flush=True)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        print("waiting cancelled", flush=True)
        raise

def save(checkpoint):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(checkpoint.to_dict(), file)
    print("checkpoint saved", flush=True)

workflow = Workflow([
    Step("done", done),
    Step("gate", lambda ctx: "gate", depends_on=["done"]),
    Step("waiting", waiting, depends_on=["done"]),
    Step("after", lambda ctx: "never", depends_on=["waiting"]),
])
try:
    workflow.run_sync(checkpoint_fn=save)
except SystemExit as exit:
    print(f"SystemExit {exit.code}", flush=True)
    print("default restored", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    raise
"""


def test_sigterm_checkpoints_what_completed_and_exits_143(tmp_path: Path) -> None:
    """The running step is cancelled, the finished ones are saved, the process exits 143."""
    path = tmp_path / "checkpoint.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", SCRIPT, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    watchdog = threading.Timer(30, process.kill)  # never let a broken run hang the suite
    watchdog.start()
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while (line := process.stdout.readline()) not in ("", "waiting\n"):
            lines.append(line)
        assert line == "waiting\n", lines
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        watchdog.cancel()
    assert process.returncode == 143, err
    assert "Traceback" not in err
    # 'done' was saved with its batch; 'gate', whose batch never ended, on the signal.
    assert lines == ["checkpoint saved\n"]
    assert out.splitlines() == [
        "waiting cancelled",
        "checkpoint saved",
        "SystemExit 143",
        "default restored True",
    ]
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))
    assert dict(checkpoint.outputs) == {"done": {"answer": 42}, "gate": "gate"}


def handler_seen_by_a_step() -> tuple[Any, Any]:
    """Run a one-step workflow with run_sync; return the SIGTERM handler inside and after."""
    seen: list[Any] = []
    Workflow([Step("look", lambda ctx: seen.append(signal.getsignal(signal.SIGTERM)))]).run_sync()
    return seen[0], signal.getsignal(signal.SIGTERM)


def test_run_sync_installs_its_handler_only_for_the_call() -> None:
    """Over the default action, a handler of run_sync's own is in place during the run only."""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    inside, after = handler_seen_by_a_step()
    assert callable(inside)
    assert after is signal.SIG_DFL


@pytest.mark.parametrize("own", ["handler", "ignore"])
def test_a_program_that_handles_sigterm_itself_keeps_its_handler(own: str) -> None:
    """run_sync never replaces a handler the program installed, or SIG_IGN."""

    def mine(signum: int, frame: object) -> None:  # pragma: no cover - never signalled
        pass

    previous = signal.signal(signal.SIGTERM, mine if own == "handler" else signal.SIG_IGN)
    try:
        inside, after = handler_seen_by_a_step()
    finally:
        signal.signal(signal.SIGTERM, previous)
    expected = mine if own == "handler" else signal.SIG_IGN
    assert inside is expected
    assert after is expected


def test_run_sync_in_another_thread_installs_nothing() -> None:
    """Only the main thread can handle signals: elsewhere run_sync leaves them alone."""
    results: list[tuple[Any, Any]] = []
    thread = threading.Thread(target=lambda: results.append(handler_seen_by_a_step()))
    thread.start()
    thread.join(30)
    assert results == [(signal.SIG_DFL, signal.SIG_DFL)]


EXECUTOR_SCRIPT = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from executionkit import Step, Workflow

path = sys.argv[1]

def make(number):
    def step(ctx):
        print(f"started {number}", flush=True)
        if number == 2:
            sys.stdin.readline()  # blocks this worker thread until the test says go
        return number
    return step

def save(checkpoint):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(checkpoint.to_dict(), file)

steps = [Step("s0", run=make(0))]
steps += [Step(f"s{n}", run=make(n), depends_on=[f"s{n - 1}"]) for n in range(1, 10)]
with ThreadPoolExecutor(2) as executor:
    Workflow(steps).run_sync(checkpoint_fn=save, executor=executor)
print("finished", flush=True)
"""


def test_sigterm_while_a_chain_step_runs_in_an_executor_stops_the_run(tmp_path: Path) -> None:
    """The signal lands while a plain step of a chain blocks in an executor's thread.

    The step running when the signal came finishes and is recorded (it was paid
    for), and nothing starts after it: the process exits 143 with the steps that
    completed in its last checkpoint. (A chain's step is awaited in the run's
    own task; the run took the cancellation as the step's, and went on.)
    """
    script = tmp_path / "chain.py"
    script.write_text(EXECUTOR_SCRIPT, encoding="utf-8")
    saved = tmp_path / "checkpoint.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(  # noqa: S603 - our own script
        [sys.executable, str(script), str(saved)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        assert process.stdin is not None
        lines = []
        for line in process.stdout:
            lines.append(line.strip())
            if line.strip() == "started 2":
                break
        process.send_signal(signal.SIGTERM)
        # The step finishes only after the signal was sent: it cannot have ended first.
        process.stdin.write("go\n")
        process.stdin.flush()
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines += rest.split()
    assert process.returncode == 143
    assert "started 3" not in " ".join(lines)
    assert "finished" not in lines
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(saved.read_text(encoding="utf-8")))
    assert sorted(checkpoint.outputs) == ["s0", "s1", "s2"]
