"""A signal stops a run at once, whatever its steps are: plain functions in threads too (issue 30).

Plain (``def``) steps run in worker threads. After SIGTERM or Ctrl-C nothing new
starts; a plain step already running gets the stop's grace to finish (and is
recorded), else it is abandoned and left listed in flight; the checkpoint is
saved and ``executionkit run`` exits 143 (SIGTERM) or 130 (Ctrl-C). Every test
here sends a real signal to a real ``executionkit run`` process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from executionkit import Workflow, WorkflowCheckpoint
from executionkit.stores import JsonLinesStore

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]

STEPS = """\
import os, signal, socket, threading, time

from executionkit import Step, Workflow

MODE = os.environ.get("SIGSTEPS_MODE", "sleep")
_KEEP = []  # the socket pair a stuck step reads from, never written to


def say(line):
    os.write(1, (line + "\\n").encode())


def step(n):
    def run(ctx):
        say(f"start s{n}")
        if n == 2 and MODE == "stuck-sleep":
            time.sleep(3600)
        elif n == 2 and MODE in ("stuck-socket", "SIGTERM-in-thread", "SIGINT-in-thread"):
            left, right = socket.socketpair()
            _KEEP.append((left, right))
            if MODE.endswith("-in-thread"):  # the kernel may hand a signal to any thread
                signal.pthread_kill(threading.get_ident(), getattr(signal, MODE.split("-")[0]))
            left.recv(1)  # a blocking read that never returns
        else:
            time.sleep(0.5)
        return n

    return Step(f"s{n}", run, depends_on=[f"s{n - 1}"] if n else [])


workflow = Workflow([step(n) for n in range(10)])
"""


@pytest.fixture(autouse=True)
def default_sigterm() -> Iterator[None]:
    """The child processes start from SIGTERM's default action (dispositions are inherited)."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def start(folder: Path, module: str, *args: str, mode: str = "sleep") -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)]),
        "SIGSTEPS_MODE": mode,
    }
    return subprocess.Popen(  # noqa: S603 - our own interpreter and command
        [sys.executable, "-m", "executionkit", "run", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=folder,
        env=env,
    )


def signal_after(
    process: subprocess.Popen[str], line: str, signum: int
) -> tuple[list[str], str, str]:
    """Read stdout until ``line`` (then send ``signum``); the lines before, the rest, stderr."""
    watchdog = threading.Timer(60, process.kill)  # a run that ignores the signal fails, not hangs
    watchdog.start()
    try:
        assert process.stdout is not None
        seen: list[str] = []
        while (got := process.stdout.readline()) not in ("", line + "\n"):
            seen.append(got.rstrip("\n"))
        assert got == line + "\n", (seen, process.stderr.read() if process.stderr else "")
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        watchdog.cancel()
    return seen, out, err


def latest(path: Path) -> WorkflowCheckpoint:
    checkpoint = JsonLinesStore(path).load()
    assert checkpoint is not None
    return checkpoint


@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
    ids=["SIGTERM", "Ctrl-C"],
)
def test_a_signal_during_a_chain_of_plain_steps_saves_them_and_starts_nothing(
    tmp_path: Path, signum: int, code: int, said: str
) -> None:
    """The issue's reproducer: ten 0.5 s plain steps, a signal during the third.

    The third finishes within the grace and is recorded; the fourth never starts.
    """
    (tmp_path / "sigsteps.py").write_text(STEPS, encoding="utf-8")
    process = start(tmp_path, "sigsteps:workflow", "--checkpoint", "s.jsonl")
    seen, out, err = signal_after(process, "start s2", signum)
    assert process.returncode == code, err
    assert seen == ["start s0", "start s1"]
    assert out == ""  # no step started after the signal
    assert f"executionkit: {said};" in err
    assert "Traceback" not in err
    checkpoint = latest(tmp_path / "s.jsonl")
    assert dict(checkpoint.outputs) == {"s0": 0, "s1": 1, "s2": 2}
    assert checkpoint.in_flight == ()


@pytest.mark.parametrize("mode", ["stuck-sleep", "stuck-socket"])
def test_a_plain_step_past_the_grace_is_abandoned_left_in_flight_and_run_again(
    tmp_path: Path, mode: str
) -> None:
    """A step in time.sleep(3600) or a blocking socket read: the process exits all the same.

    Its attempt is listed in flight in the last checkpoint; the resume books it
    as unknown and runs it again (here to its end, in its plain 0.5 s form).
    """
    (tmp_path / "sigsteps.py").write_text(STEPS, encoding="utf-8")
    args = ("--checkpoint", "s.jsonl", "--stop-grace", "0.2")
    process = start(tmp_path, "sigsteps:workflow", *args, mode=mode)
    seen, out, err = signal_after(process, "start s2", signal.SIGTERM)
    assert process.returncode == 143, err
    assert seen == ["start s0", "start s1"]
    assert out == ""
    checkpoint = latest(tmp_path / "s.jsonl")
    assert dict(checkpoint.outputs) == {"s0": 0, "s1": 1}
    assert checkpoint.in_flight == (("s2", None, 1),)
    resumed = start(tmp_path, "sigsteps:workflow", "--checkpoint", "s.jsonl")
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert out.splitlines()[0] == "start s2"  # the abandoned step, run again first
    final = latest(tmp_path / "s.jsonl")
    assert dict(final.outputs) == {f"s{n}": n for n in range(10)}
    assert [(e.step, e.outcome) for e in final.ledger] == [("s2", "unknown")]


@pytest.mark.parametrize(("name", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_taken_by_a_step_thread_still_wakes_the_run(
    tmp_path: Path, name: str, code: int
) -> None:
    """A signal taken by the thread of a stuck plain step, the loop idle: the run still stops.

    A process signal goes to any thread that does not block it. Caught in a
    worker thread, it used to wait for the main thread to run Python again,
    which an event loop with nothing scheduled never did: the run hung.
    """
    (tmp_path / "sigsteps.py").write_text(STEPS, encoding="utf-8")
    args = ("--checkpoint", "s.jsonl", "--stop-grace", "0.2")
    process = start(tmp_path, "sigsteps:workflow", *args, mode=f"{name}-in-thread")
    watchdog = threading.Timer(60, process.kill)  # a run that misses the signal fails, not hangs
    watchdog.start()
    try:
        out, err = process.communicate(timeout=90)
    finally:
        watchdog.cancel()
    assert process.returncode == code, err
    assert out.splitlines() == ["start s0", "start s1", "start s2"]
    checkpoint = latest(tmp_path / "s.jsonl")
    assert dict(checkpoint.outputs) == {"s0": 0, "s1": 1}
    assert checkpoint.in_flight == (("s2", None, 1),)


SOAK = """\
import os, random, time

from executionkit import Step, Workflow


def say(line):
    os.write(1, (line + "\\n").encode())


def plain(name):
    def run(ctx):
        say(f"start {name}")
        time.sleep(random.uniform(0.005, 0.03))
        return name

    return run


def item(key, ctx):
    say(f"start m:{key}")
    time.sleep(random.uniform(0.005, 0.03))
    return key * 2


async def glue(ctx):
    say("start glue")
    return len(ctx["m"])


workflow = Workflow(
    [
        Step("a", plain("a")),
        Step("b", plain("b")),
        Step.map("m", item, over="keys", depends_on=["a"], key=str, max_concurrency=3),
        Step("c", plain("c"), depends_on=["b", "m"]),
        Step("glue", glue, depends_on=["c"]),
        Step("d", plain("d"), depends_on=["glue"]),
    ]
)
"""


ITEMS = 6


RUNNER = f"""\
import json, os, sys

from executionkit import WorkflowCheckpoint

from soak import workflow

path = sys.argv[1]


def save(checkpoint):
    with open(path + ".tmp", "w", encoding="utf-8") as file:
        json.dump(checkpoint.to_dict(), file)
    os.replace(path + ".tmp", path)


resume = None
if os.path.exists(path):
    with open(path, encoding="utf-8") as file:
        resume = WorkflowCheckpoint.from_dict(json.load(file))
workflow.run_sync(
    {{"keys": list(range({ITEMS}))}},
    checkpoint_fn=save,
    resume_from=resume,
    checkpoint_every="step",
)
"""


def recorded_now(path: Path) -> set[str]:
    """The steps and map items (``m:KEY``) the JSON file's checkpoint holds."""
    if not path.exists():
        return set()
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))
    held = set(checkpoint.outputs)
    if "m" in held:
        held |= {f"m:{key}" for key in range(ITEMS)}
    else:
        held |= {f"m:{key}" for key in checkpoint.items.get("m", {"outputs": {}})["outputs"]}
    return held


def test_a_soak_of_sigterms_never_reruns_a_recorded_step_and_always_exits_143(
    tmp_path: Path,
) -> None:
    """At least 30 SIGTERMs at random moments into runs of plain steps and plain map items.

    Every signalled process exits 143; no step or item the file recorded when a
    process began ever starts in it; the runs end with every output once. The
    processes call `run_sync` directly (the command line's signal handling is
    the tests' above): a process each signal, so the cheaper the better.
    """
    (tmp_path / "soak.py").write_text(SOAK, encoding="utf-8")
    (tmp_path / "soak_run.py").write_text(RUNNER, encoding="utf-8")
    rng = random.Random(30)
    signals = runs = 0
    while signals < 30:
        path = tmp_path / f"run{runs}.json"
        runs += 1
        while True:
            held = recorded_now(path)
            process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
                [sys.executable, "soak_run.py", path.name],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])},
            )
            assert process.stdout is not None
            wanted = rng.randint(1, 3)
            started: list[str] = []
            signalled = False
            watchdog = threading.Timer(60, process.kill)
            watchdog.start()
            try:
                for line in process.stdout:
                    if line.startswith("start "):
                        started.append(line.split()[1])
                        if len(started) == wanted:
                            process.send_signal(signal.SIGTERM)
                            signalled = True
                            break
                out, err = process.communicate(timeout=60)
            finally:
                watchdog.cancel()
            started += [line.split()[1] for line in out.splitlines() if line.startswith("start ")]
            assert not held & set(started), f"recorded steps ran again: {held & set(started)}"
            if signalled and process.returncode != 0:
                signals += 1
                assert process.returncode == 143, err
                continue
            assert process.returncode == 0, err
            break
        final = WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))
        assert final.outputs["d"] == "d"
        assert final.outputs["m"] == [key * 2 for key in range(ITEMS)]
    assert signals >= 30


def test_a_workflow_of_plain_steps_is_what_the_soak_runs() -> None:
    """The soak's module builds (a guard against testing a workflow that cannot run)."""
    namespace: dict[str, object] = {}
    exec(compile(SOAK, "soak.py", "exec"), namespace)  # noqa: S102 - our own source above
    workflow = namespace["workflow"]
    assert isinstance(workflow, Workflow)
    result = workflow.run_sync({"keys": [1, 2]})
    assert result.outputs["glue"] == 2
