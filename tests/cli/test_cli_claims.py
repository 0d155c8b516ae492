"""The command line and claims: one ``executionkit run`` per run at a time.

A second ``run`` of a run in progress runs nothing and exits 4 with one line naming
the owner; a run whose store moved on since the command loaded it does the same;
``inspect`` says who claims a run. The held run is a real process stopped inside a
step: the step says it is inside through one pipe and waits on another until the
test releases it, so nothing here waits on a clock. Every step appends ``PID NAME``
to ``steps.log``, so a test counts what each process ran.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_runner import Outcome, run_subprocess, subprocess_env

from executionkit import _cli as cli_module
from executionkit._cli import EXIT_CLAIMED, main
from executionkit._cli._location import DatabaseLocation, FileLocation
from executionkit.stores import JsonFileStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from executionkit import WorkflowCheckpoint

HOST = socket.gethostname()
SINCE = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"

# What a step does to be held: say so on HOLD_READY_FD, then wait for HOLD_GO_FD to be
# written (or closed). Without those variables (any process the test does not hold) it
# goes straight on, so a step that should not have run shows in steps.log, never as a hang.
HOLD = """\
import asyncio
import os

from executionkit import Step, Workflow, current_step


def log(name):
    with open("steps.log", "a") as steps:
        steps.write(f"{os.getpid()} {name}\\n")


async def hold():
    if "HOLD_GO_FD" not in os.environ:
        return
    go = int(os.environ["HOLD_GO_FD"])
    released = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(go, released.set)
    try:
        os.write(int(os.environ["HOLD_READY_FD"]), b"inside\\n")
        await released.wait()
    finally:
        loop.remove_reader(go)
"""

STEPS = (
    HOLD
    + """

def first(ctx):
    log("first")
    return 1


async def held(ctx):
    log("held")
    await hold()
    return 2


def last(ctx):
    log("last")
    return ctx["first"] + ctx["held"]


workflow = Workflow(
    [
        Step("first", first),
        Step("held", held, depends_on=("first",)),
        Step("last", last, depends_on=("held",)),
    ]
)
"""
)

ITEMS = (
    HOLD
    + """

def split(ctx):
    log("split")
    return ["alpha", "beta", "gamma", "delta"]


async def summarise(chunk, ctx):
    log(f"item {current_step().item_key}")
    if chunk == "beta":
        await hold()
    return chunk.upper()


workflow = Workflow(
    [
        Step("split", split),
        Step.map("summaries", summarise, over="split", max_concurrency=1),
    ]
)
"""
)

# (the --checkpoint given, the label the messages name, the run_id if the location names it)
LOCATIONS = [
    pytest.param("run.json", "run.json", None, id="json-file"),
    pytest.param("sqlite:///runs.db?run_id=night", "sqlite:///runs.db", "night", id="sqlite"),
]


class Held:
    """An ``executionkit`` process that the test holds inside a step until it releases it."""

    def __init__(self, cwd: Path, *args: str) -> None:
        """Start ``python -m executionkit ARGS`` in ``cwd``, with the two pipes of `HOLD`."""
        ready_read, ready_write = os.pipe()
        go_read, go_write = os.pipe()
        env = {**subprocess_env(), "HOLD_READY_FD": str(ready_write), "HOLD_GO_FD": str(go_read)}
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter
            [sys.executable, "-m", "executionkit", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            pass_fds=(ready_write, go_read),
        )
        os.close(ready_write)
        os.close(go_read)
        self._ready = ready_read
        self._go: int | None = go_write
        self.pid = self.process.pid

    def wait_inside(self) -> None:
        """Return once the held step has started; fail if the process ended first."""
        readable, _, _ = select.select([self._ready], [], [], 60)
        said = os.read(self._ready, 64) if readable else b"(nothing within 60 s)"
        assert said == b"inside\n", said

    def release(self) -> Outcome:
        """Let the held step go on, and wait for the command to end."""
        self._let_go()
        out, err = self.process.communicate(timeout=60)
        return Outcome(self.process.returncode, out, err)

    def stop(self, sig: signal.Signals) -> Outcome:
        """Send ``sig`` while the step is held, and wait for the command to end."""
        self.process.send_signal(sig)
        out, err = self.process.communicate(timeout=60)
        return Outcome(self.process.returncode, out, err)

    def close(self) -> None:
        """Kill the process if a failed test left it running; close the pipes."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate(timeout=60)
        if self._go is not None:
            os.close(self._go)
        os.close(self._ready)

    def _let_go(self) -> None:
        assert self._go is not None, "released twice"
        os.write(self._go, b"go\n")
        os.close(self._go)
        self._go = None


@contextlib.contextmanager
def held(cwd: Path, *args: str) -> Iterator[Held]:
    """A `Held` command, held inside its step on entering; never left running."""
    command = Held(cwd, *args)
    try:
        command.wait_inside()
        yield command
    finally:
        command.close()


def ran(folder: Path) -> list[tuple[int, str]]:
    """(pid, step or item) of every step and item run so far, in order."""
    path = folder / "steps.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(pid), name) for pid, name in (line.split(" ", 1) for line in lines)]


def stored(folder: Path, checkpoint: str) -> WorkflowCheckpoint | None:
    """The latest checkpoint the location holds, read through its store."""
    if checkpoint.startswith("sqlite:"):
        return SQLiteStore(folder / "runs.db").load("night")
    return JsonFileStore(folder / "run.json").load()


def owned_line(run_id: str, label: str, pid: int) -> str:
    """The pattern of the one line a refused ``run`` prints."""
    return (
        re.escape(f"executionkit: run {run_id!r} in {label} is owned by process {pid} on host ")
        + re.escape(repr(HOST))
        + f" since {SINCE}"
        + re.escape("; nothing ran. Run again once it has ended to resume.")
        + "\n"
    )


# --- two commands on one run ------------------------------------------------------------------


@pytest.mark.parametrize(("checkpoint", "label", "named"), LOCATIONS)
def test_a_second_run_of_a_run_in_progress_runs_nothing_and_exits_4(
    tmp_path: Path, checkpoint: str, label: str, named: str | None
) -> None:
    """The second command names the first as owner, runs no step, saves nothing; the first ends."""
    (tmp_path / "steps.py").write_text(STEPS)
    run = ("run", "steps:workflow", "--checkpoint", checkpoint)
    with held(tmp_path, *run) as first:
        before = stored(tmp_path, checkpoint)
        assert before is not None  # 'first' is saved before 'held' starts
        assert dict(before.outputs) == {"first": 1}
        raw = (tmp_path / "run.json").read_bytes() if named is None else None
        second = run_subprocess(tmp_path, *run)
        assert (second.code, second.out) == (EXIT_CLAIMED, "")
        run_id = named or before.run_id
        assert run_id is not None
        assert re.fullmatch(owned_line(run_id, label, first.pid), second.err), second.err
        assert [pid for pid, _ in ran(tmp_path)] == [first.pid, first.pid]
        assert stored(tmp_path, checkpoint) == before
        if raw is not None:
            assert (tmp_path / "run.json").read_bytes() == raw
        done = first.release()
    assert (done.code, json.loads(done.out)) == (0, {"first": 1, "held": 2, "last": 3}), done.err
    assert ran(tmp_path) == [(first.pid, "first"), (first.pid, "held"), (first.pid, "last")]
    again = run_subprocess(tmp_path, *run)  # once the owner has ended, a run goes on at once
    assert (again.code, json.loads(again.out)) == (0, {"first": 1, "held": 2, "last": 3})
    assert len(ran(tmp_path)) == 3


@pytest.mark.parametrize(("checkpoint", "label", "named"), LOCATIONS)
def test_no_item_of_a_map_runs_twice_across_two_commands(
    tmp_path: Path, checkpoint: str, label: str, named: str | None
) -> None:
    """The first command holds item 1 of the map; the second runs no item; each runs once."""
    (tmp_path / "items.py").write_text(ITEMS)
    run = ("run", "items:workflow", "--checkpoint", checkpoint)
    with held(tmp_path, *run) as first:
        before = stored(tmp_path, checkpoint)
        assert before is not None
        second = run_subprocess(tmp_path, *run)
        assert second.code == EXIT_CLAIMED, second.err
        run_id = named or before.run_id
        assert run_id is not None
        assert re.fullmatch(owned_line(run_id, label, first.pid), second.err), second.err
        assert stored(tmp_path, checkpoint) == before
        done = first.release()
    assert (done.code, json.loads(done.out)["summaries"]) == (
        0,
        ["ALPHA", "BETA", "GAMMA", "DELTA"],
    ), done.err
    assert ran(tmp_path) == [
        (first.pid, name) for name in ("split", "item 0", "item 1", "item 2", "item 3")
    ]


def test_a_resumed_run_stopped_again_books_the_step_it_was_about_to_start(
    tmp_path: Path,
) -> None:
    """Commands stopped by SIGTERM: the first saves seq 1; the resumed one books 'held'.

    Seq 1 lists 'held', the step about to start, in flight: a resume cannot tell a
    kill while it spent from a clean stop, so it books that attempt as "unknown"
    (never as zero) and saves that, as seq 2, when it is stopped in turn; a third
    run stopped the same way has nothing new to save.
    """
    (tmp_path / "steps.py").write_text(STEPS)
    run = ("run", "steps:workflow", "--checkpoint", "run.json")
    with held(tmp_path, *run) as first:
        fresh = first.stop(signal.SIGTERM)
    assert fresh.code == 143, fresh.err
    assert fresh.err.splitlines()[-1] == (
        "executionkit: terminated; checkpoint saved to run.json (seq 1, 1 of 3 steps "
        "recorded); run again with the same --checkpoint to resume"
    )
    with held(tmp_path, *run) as second:
        resumed = second.stop(signal.SIGTERM)
    assert resumed.code == 143, resumed.err
    assert resumed.err.splitlines()[-1] == (
        "executionkit: terminated; checkpoint saved to run.json (seq 2, 1 of 3 steps "
        "recorded); run again with the same --checkpoint to resume"
    )
    # Seq 2 lists nothing in flight (it was taken as that run ended): a third stop has
    # nothing new to save.
    with held(tmp_path, *run) as third:
        again = third.stop(signal.SIGTERM)
    assert again.code == 143, again.err
    assert again.err.splitlines()[-1] == (
        "executionkit: terminated; nothing new was saved to run.json (it holds seq 2, 1 of 3 "
        "steps recorded); run again with the same --checkpoint to resume"
    )
    assert [name for _, name in ran(tmp_path)] == ["first", "held", "held", "held"]


# --- a store that moved on --------------------------------------------------------------------


@pytest.fixture
def forget_modules(tmp_path: Path) -> Iterator[None]:
    """Forget the workflow modules a test imported from its folder: tests reuse names."""
    before = set(sys.modules)
    path = list(sys.path)
    yield
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None)
        if file is not None and Path(file).resolve().is_relative_to(tmp_path.resolve()):
            del sys.modules[name]
    sys.path[:] = path


@pytest.mark.parametrize(
    ("checkpoint", "label", "fresh"),
    [
        pytest.param("run.json", "run.json", False, id="json-file"),
        pytest.param("sqlite:///runs.db?run_id=night", "sqlite:///runs.db", False, id="sqlite"),
        pytest.param("sqlite:///runs.db?run_id=night", "sqlite:///runs.db", True, id="sqlite-new"),
    ],
)
def test_a_run_saved_by_another_process_since_it_was_loaded_runs_nothing_and_exits_4(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    forget_modules: None,
    *,
    checkpoint: str,
    label: str,
    fresh: bool,
) -> None:
    """Another command runs the run between this one's load and its claim: this one runs nothing.

    The race is made real, not simulated: the location's ``load`` is wrapped so that
    right after it has read the store, another ``executionkit run`` (a subprocess)
    runs the same run to its end.
    """
    (tmp_path / "steps.py").write_text(STEPS)
    monkeypatch.chdir(tmp_path)
    run = ["run", "steps:workflow", "--checkpoint", checkpoint]
    if not fresh:
        with held(tmp_path, *run) as first:  # leaves seq 1 saved: 'first' recorded
            assert first.stop(signal.SIGTERM).code == 143
    racing: list[Outcome] = []

    load_file, load_database = FileLocation.load, DatabaseLocation.load

    def load_then_race(
        location: FileLocation | DatabaseLocation, *, missing_ok: bool
    ) -> WorkflowCheckpoint | None:
        if isinstance(location, FileLocation):
            loaded = load_file(location, missing_ok=missing_ok)
        else:
            loaded = load_database(location, missing_ok=missing_ok)
        racing.append(run_subprocess(tmp_path, *run))
        return loaded

    monkeypatch.setattr(FileLocation, "load", load_then_race)
    monkeypatch.setattr(DatabaseLocation, "load", load_then_race)
    before = len(ran(tmp_path))
    importlib.invalidate_caches()
    code = main(run)
    captured = capsys.readouterr()
    assert [outcome.code for outcome in racing] == [0], racing
    latest = stored(tmp_path, checkpoint)
    assert latest is not None
    loaded = "it found none" if fresh else "it loaded seq 1"
    assert (code, captured.out) == (EXIT_CLAIMED, "")
    assert captured.err == (
        f"executionkit: the checkpoint of run {latest.run_id!r} in {label} moved on since "
        f"this command loaded it ({loaded}; another process has saved seq {latest.seq} "
        f"since); nothing ran. Run the same command again to resume from seq "
        f"{latest.seq}.\n"
    )
    pids = {pid for pid, _ in ran(tmp_path)[before:]}
    assert os.getpid() not in pids  # every step after the load ran in the racing command
    assert stored(tmp_path, checkpoint) == latest


def test_a_save_refused_mid_run_says_so_in_terms_of_the_command(tmp_path: Path) -> None:
    """A writer that takes no claim saves a later seq mid-run: exit 1, advice without load()."""
    behind = STEPS.replace(
        '    log("held")\n',
        '    log("held")\n'
        "    from executionkit import WorkflowCheckpoint\n"
        "    from executionkit.stores import JsonFileStore\n"
        '    outside = JsonFileStore("run.json")\n'
        "    ahead = outside.load().to_dict()\n"
        '    ahead["seq"] += 5\n'
        "    outside(WorkflowCheckpoint.from_dict(ahead))\n",
    )
    assert behind != STEPS
    (tmp_path / "steps.py").write_text(behind)
    outcome = run_subprocess(tmp_path, "run", "steps:workflow", "--checkpoint", "run.json")
    assert (outcome.code, outcome.out) == (1, ""), outcome.err
    assert outcome.err.splitlines()[-1] == (
        "executionkit: could not save checkpoint seq 2 to run.json: another process saved "
        "seq 6 of this run meanwhile; run the same command again to resume from it"
    )
    assert "load()" not in outcome.err


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_claim_file_that_is_not_one_is_bad_input_for_run_and_inspect(
    tmp_path: Path, kind: str
) -> None:
    """``run.json.claim`` as a named pipe or a folder: one error line, exit 2, nothing run."""
    (tmp_path / "steps.py").write_text(STEPS)
    run = ("run", "steps:workflow", "--checkpoint", "run.json")
    assert run_subprocess(tmp_path, *run).code == 0
    (tmp_path / "steps.log").unlink()
    claim = tmp_path / "run.json.claim"
    claim.unlink()
    if kind == "fifo":
        os.mkfifo(claim)
        problem = "CheckpointFormatError: run.json.claim: not a claim's lock file: it is a FIFO, "
    else:
        claim.mkdir()
        problem = "IsADirectoryError: [Errno 21] Is a directory: 'run.json.claim'"
    refused = run_subprocess(tmp_path, *run)
    assert (refused.code, refused.out) == (2, "")
    assert refused.err.startswith(
        f"executionkit: error: run.json: could not claim the run: {problem}"
    ), refused.err
    assert len(refused.err.splitlines()) == 1
    assert not (tmp_path / "steps.log").exists()
    shown = run_subprocess(tmp_path, "inspect", "run.json")
    assert (shown.code, shown.out) == (2, "")
    assert shown.err.startswith(f"executionkit: error: run.json: {problem}"), shown.err
    assert len(shown.err.splitlines()) == 1


# --- inspect ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("checkpoint", "label", "named"), LOCATIONS)
def test_inspect_says_who_claims_the_run_while_it_runs_and_nobody_after(
    tmp_path: Path, checkpoint: str, label: str, named: str | None
) -> None:
    """Text and JSON name the process holding the run, then no one once it has ended."""
    del label
    (tmp_path / "steps.py").write_text(STEPS)
    with held(tmp_path, "run", "steps:workflow", "--checkpoint", checkpoint) as first:
        text = run_subprocess(tmp_path, "inspect", checkpoint)
        shown = run_subprocess(tmp_path, "inspect", checkpoint, "--json")
        assert first.release().code == 0
    assert (text.code, text.err) == (0, "")
    (line,) = [line for line in text.out.splitlines() if line.startswith("claimed_by")]
    expected = f"claimed_by  process {first.pid} on host {HOST!r} since {SINCE}"
    assert re.fullmatch(expected, line), line
    claimed_by = json.loads(shown.out)["claimed_by"]
    run_id = json.loads(shown.out)["run_id"]
    assert run_id == (named or run_id)
    assert claimed_by == {
        "run_id": run_id,
        "pid": first.pid,
        "host": HOST,
        "since": claimed_by["since"],
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", claimed_by["since"])
    after = run_subprocess(tmp_path, "inspect", checkpoint)
    assert "claimed_by  nobody" in after.out.splitlines()
    assert (
        json.loads(run_subprocess(tmp_path, "inspect", checkpoint, "--json").out)["claimed_by"]
        is None
    )


def test_inspect_lists_who_claims_each_run_of_a_database(tmp_path: Path) -> None:
    """The listing gives each run's owner: the held run's process, no one for the other."""
    (tmp_path / "steps.py").write_text(STEPS)
    done = run_subprocess(
        tmp_path, "run", "steps:workflow", "--checkpoint", "sqlite:///runs.db?run_id=done"
    )
    assert done.code == 0, done.err
    where = "sqlite:///runs.db?run_id=night"
    with held(tmp_path, "run", "steps:workflow", "--checkpoint", where) as first:
        text = run_subprocess(tmp_path, "inspect", "sqlite:///runs.db")
        shown = run_subprocess(tmp_path, "inspect", "sqlite:///runs.db", "--json")
        assert first.release().code == 0
    lines = text.out.splitlines()
    assert re.fullmatch(
        r"  night: seq 1, 1 recorded, 0 failed, saved \S+, claimed by process "
        f"{first.pid} on host {re.escape(repr(HOST))} since {SINCE}",
        lines[2],
    ), lines
    assert lines[3].startswith("  done: seq 3, 3 recorded, 0 failed, saved ")
    assert "claimed" not in lines[3]
    runs = json.loads(shown.out)["runs"]
    assert [(run["run_id"], run["claimed_by"] and run["claimed_by"]["pid"]) for run in runs] == [
        ("night", first.pid),
        ("done", None),
    ]


# --- help and exports -------------------------------------------------------------------------


def test_run_help_lists_exit_status_4(tmp_path: Path) -> None:
    """``run --help`` explains status 4; the package exports it."""
    outcome = run_subprocess(tmp_path, "run", "--help")
    assert outcome.code == 0
    assert "\n  4    another process owns the run (it is running it now), or saved it" in (
        outcome.out
    )
    assert cli_module.EXIT_CLAIMED == EXIT_CLAIMED == 4
    assert "EXIT_CLAIMED" in cli_module.__all__
