"""Claims of the file stores: one live owner per run, dropped by the OS when it dies."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import select
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import CheckpointFormatError, Step, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit.stores import (
    JsonFileStore,
    JsonLinesStore,
    RunClaimedError,
    SQLiteStore,
    StaleCheckpointError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

Store = JsonFileStore | JsonLinesStore | SQLiteStore
KINDS = ("json", "jsonl", "sqlite")
FILE_KINDS = ("json", "jsonl")
WORKER = Path(__file__).resolve().parents[1] / "claim_worker.py"
ROOT = WORKER.parent.parent
TIMEOUT = 30  # seconds: a bound on waiting for the worker, never a synchronisation
WAIT = "Wait for that process to end (its claim dies with it), then resume"


def make(kind: str, tmp_path: Path) -> Store:
    """A store of ``kind`` in ``tmp_path``."""
    if kind == "json":
        return JsonFileStore(tmp_path / "run.json")
    if kind == "jsonl":
        return JsonLinesStore(tmp_path / "run.jsonl")
    return SQLiteStore(tmp_path / "runs.db")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    """Each of the three stores."""
    return str(request.param)


def refused(store: Store, run_id: str) -> RunClaimedError:
    """The error of claiming ``run_id``, which must be refused."""
    with pytest.raises(RunClaimedError) as caught, store.claim(run_id):
        pytest.fail(f"{store!r} granted a claim on {run_id!r} that is held")
    return caught.value


@contextlib.contextmanager
def worker(kind: str, path: Path, run_id: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the claim on ``run_id`` (until it is killed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(  # noqa: S603 - our own script, run by this interpreter
        [sys.executable, str(WORKER), kind, str(path), run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    try:
        ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
        assert ready, f"the worker did not claim {run_id!r} within {TIMEOUT}s"
        assert process.stdout.readline() == f"claimed {process.pid}\n"
        yield process
    finally:
        process.kill()
        process.wait(timeout=TIMEOUT)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def kill(process: subprocess.Popen[str]) -> None:
    """SIGKILL ``process`` and wait until it is gone (its files closed by the kernel)."""
    process.kill()
    process.wait(timeout=TIMEOUT)


def chain(ran: list[str], names: tuple[str, ...]) -> Workflow:
    """Steps in a line, each recording its name in ``ran`` when it runs."""

    def make_step(position: int, name: str) -> Step:
        def body(_ctx: Any) -> int:
            ran.append(name)
            return position

        return Step(name, body, depends_on=(names[position - 1],) if position else ())

    return Workflow([make_step(position, name) for position, name in enumerate(names)])


def test_a_second_claim_in_this_process_is_refused_until_the_first_leaves(
    kind: str, tmp_path: Path
) -> None:
    """Two claims in one process conflict; the error names store, run and owner."""
    store = make(kind, tmp_path)
    before = datetime.now(UTC) - timedelta(seconds=1)
    with store.claim("X") as stored:
        assert stored is None
        error = refused(store, "X")
    owner = error.owner
    assert owner is not None
    assert (owner.run_id, owner.pid, owner.host) == ("X", os.getpid(), socket.gethostname())
    assert before <= owner.since <= datetime.now(UTC)
    assert error.run_id == "X"
    assert str(error) == f"{store!r}: run 'X' is owned by {owner.describe()}; nothing ran. {WAIT}"
    assert f"process {os.getpid()} on host {socket.gethostname()!r} since " in str(error)
    with store.claim("X") as stored:
        assert stored is None


def test_a_claim_gives_the_seq_of_the_runs_latest_checkpoint(kind: str, tmp_path: Path) -> None:
    """Entering a claim reads the latest stored seq of that run, and only of that run."""
    store = make(kind, tmp_path)
    saved: list[WorkflowCheckpoint] = []
    chain([], ("a", "b", "c")).run_sync(
        checkpoint_fn=saved.append, run_id="X", checkpoint_every="step"
    )
    store(saved[-1])
    with store.claim("X") as stored:
        assert stored == saved[-1].seq
    with store.claim("other") as stored:
        assert stored is None


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_claimed_file_refuses_a_claim_for_any_other_run(kind: str, tmp_path: Path) -> None:
    """One run per file: a claim for another run is refused, naming the run that owns it."""
    store = make(kind, tmp_path)
    with store.claim("X"):
        error = refused(store, "Y")
    owner = error.owner
    assert owner is not None
    assert (owner.run_id, owner.pid) == ("X", os.getpid())
    assert error.run_id == "X"
    assert str(error) == (
        f"{store!r} holds one run at a time and refused run 'Y': run 'X' is owned by "
        f"{owner.describe()}; nothing ran. {WAIT}"
    )
    assert store.path.with_name(f"{store.path.name}.claim").is_file()  # left there


def test_two_runs_in_one_database_are_claimed_at_once(tmp_path: Path) -> None:
    """SQLiteStore claims each run apart: lock files named by a hash, in <db>.claims."""
    store = SQLiteStore(tmp_path / "runs.db")
    with store.claim("X"), store.claim("Y"), SQLiteStore(store.path).claim("Z"):
        assert store.owner("X") is not None
        assert store.owner("Y") is not None
    locks = sorted(path.name for path in (tmp_path / "runs.db.claims").iterdir())
    digests = (hashlib.sha256(run.encode()).hexdigest()[:32] for run in "XYZ")
    assert locks == sorted(f"{digest}.lock" for digest in digests)
    assert store.owner("X") is None


async def test_a_second_run_of_a_running_run_is_refused_before_any_step_runs(
    kind: str, tmp_path: Path
) -> None:
    """Workflow.run takes the claim first: the second run runs and writes nothing."""
    store = make(kind, tmp_path)
    ran: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def first(_ctx: Any) -> int:
        ran.append("first")
        return 1

    async def held(_ctx: Any) -> int:
        ran.append("held")
        started.set()
        await release.wait()
        return 2

    workflow = Workflow([Step("first", first), Step("held", held, depends_on=("first",))])
    running = asyncio.create_task(
        workflow.run(checkpoint_fn=store, run_id="X", checkpoint_every="step")
    )
    async with asyncio.timeout(TIMEOUT):
        await started.wait()
    stored = store.load()
    assert stored is not None
    assert stored.run_id == "X"
    assert list(stored.outputs) == ["first"]
    before = stored.to_dict()
    ran.clear()
    with pytest.raises(RunClaimedError) as caught:
        await workflow.run(checkpoint_fn=store, resume_from=stored)
    assert ran == []
    after = store.load()
    assert after is not None
    assert after.to_dict() == before
    owner = caught.value.owner
    assert owner is not None
    assert owner.pid == os.getpid()
    release.set()
    async with asyncio.timeout(TIMEOUT):
        result = await running
    assert dict(result.outputs) == {"first": 1, "held": 2}
    latest = store.load()
    assert latest is not None
    await workflow.run(checkpoint_fn=store, resume_from=latest)  # the claim was given up
    assert ran == []


def test_a_run_that_fails_gives_its_claim_up(kind: str, tmp_path: Path) -> None:
    """A failing step ends the run: the claim goes with it, and the run can be resumed."""
    store = make(kind, tmp_path)

    def fails(_ctx: Any) -> int:
        msg = "no"
        raise RuntimeError(msg)

    with pytest.raises(WorkflowFailed):
        Workflow([Step("fails", fails)]).run_sync(checkpoint_fn=store, run_id="X")
    assert store.owner("X") is None
    with store.claim("X"):
        pass


def test_another_process_is_refused_and_its_death_frees_the_run(kind: str, tmp_path: Path) -> None:
    """A SIGKILLed owner's claim is dropped by the OS: the next claim is granted at once."""
    store = make(kind, tmp_path)
    assert store.owner("X") is None
    with worker(kind, store.path, "X") as process:
        error = refused(store, "X")
        assert error.owner is not None
        assert error.owner.pid == process.pid
        owner = store.owner("X")
        assert owner is not None
        assert (owner.run_id, owner.pid) == ("X", process.pid)
        kill(process)
        assert store.owner("X") is None
        with store.claim("X") as stored:
            assert stored is None
            mine = store.owner("X")
            assert mine is not None
            assert mine.pid == os.getpid()


def test_a_worker_that_leaves_its_claim_frees_the_run(tmp_path: Path) -> None:
    """Leaving cleanly (stdin closed) frees the run too, and empties the lock file."""
    store = make("jsonl", tmp_path)
    with worker("jsonl", store.path, "X") as process:
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=TIMEOUT) == 0
    assert store.owner("X") is None
    assert (tmp_path / "run.jsonl.claim").read_bytes() == b""


def test_a_stale_resume_is_refused_before_any_step_runs(kind: str, tmp_path: Path) -> None:
    """A store ahead of resume_from (or holding the run at all, for a fresh run) refuses it."""
    store = make(kind, tmp_path)
    ran: list[str] = []
    names = tuple(f"s{i}" for i in range(9))
    workflow = chain(ran, names)
    saved: list[WorkflowCheckpoint] = []

    def keep(checkpoint: WorkflowCheckpoint) -> None:
        saved.append(checkpoint)
        store(checkpoint)

    workflow.run_sync(checkpoint_fn=keep, run_id="X", checkpoint_every="step")
    latest = store.load()
    assert latest is not None
    assert latest.seq == saved[-1].seq >= 9
    older = saved[3]
    ran.clear()
    with pytest.raises(StaleCheckpointError) as caught:
        workflow.run_sync(resume_from=older, checkpoint_fn=store)
    assert str(caught.value) == (
        f"{store!r}: refused a run resuming from checkpoint seq={older.seq} of run 'X': the "
        f"store already holds checkpoint seq={latest.seq} of that run, saved by another "
        f"process or an earlier invocation; nothing ran. Resume from the store's latest "
        f"checkpoint instead"
    )
    with pytest.raises(
        StaleCheckpointError, match=rf"refused a fresh run of run 'X'.*{latest.seq}"
    ):
        workflow.run_sync(checkpoint_fn=store, run_id="X")
    assert ran == []
    after = store.load()
    assert after is not None
    assert after.to_dict() == latest.to_dict()
    assert store.owner("X") is None


def test_a_fresh_run_of_another_run_id_in_the_database_is_fine(tmp_path: Path) -> None:
    """SQLiteStore: run X's checkpoints do not concern a fresh run Y."""
    store = SQLiteStore(tmp_path / "runs.db")
    ran: list[str] = []
    workflow = chain(ran, ("a", "b"))
    workflow.run_sync(checkpoint_fn=store, run_id="X")
    ran.clear()
    workflow.run_sync(checkpoint_fn=store, run_id="Y")
    assert ran == ["a", "b"]
    assert sorted(store.run_ids()) == ["X", "Y"]


def test_owner_is_none_when_free_and_the_owner_while_held(kind: str, tmp_path: Path) -> None:
    """owner() tells who holds the claim, and None before and after."""
    store = make(kind, tmp_path)
    assert store.owner("X") is None
    with store.claim("X"):
        owner = store.owner("X")
        assert owner is not None
        assert (owner.run_id, owner.pid) == ("X", os.getpid())
    assert store.owner("X") is None


def test_owner_of_the_latest_run_when_none_is_named(tmp_path: Path) -> None:
    """SQLiteStore.owner() asks about the run saved to most recently, as load() does."""
    store = SQLiteStore(tmp_path / "runs.db")
    assert store.owner() is None
    chain([], ("a",)).run_sync(checkpoint_fn=store, run_id="X")
    with store.claim("X"):
        owner = store.owner()
        assert owner is not None
        assert owner.run_id == "X"
    assert store.owner() is None


def test_probing_the_owner_never_makes_a_claim_fail(kind: str, tmp_path: Path) -> None:
    """owner() in a tight loop from a thread while another claims and leaves 200 times."""
    store = make(kind, tmp_path)
    stop, probing = threading.Event(), threading.Event()
    probes = 0

    def probe() -> None:
        nonlocal probes
        while not stop.is_set():
            store.owner("X")
            probes += 1
            probing.set()

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        assert probing.wait(TIMEOUT)
        for _ in range(200):
            with store.claim("X"):
                pass
    finally:
        stop.set()
        prober.join(TIMEOUT)
    assert probes > 0


def test_an_owner_that_has_not_written_its_details_is_another_process(
    kind: str, tmp_path: Path
) -> None:
    """A lock held with an empty lock file: refused, owner unknown (None)."""
    store = make(kind, tmp_path)
    with store.claim("X"):
        pass  # creates the lock file
    locks = [p for p in tmp_path.rglob("*") if p.suffix in {".claim", ".lock"}]
    assert len(locks) == 1
    with locks[0].open("rb") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        error = refused(store, "X")
        assert store.owner("X") is None
    assert error.owner is None
    assert str(error) == f"{store!r}: run 'X' is owned by another process; nothing ran. {WAIT}"


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_lock_path_that_is_a_fifo_is_refused(kind: str, tmp_path: Path) -> None:
    """A FIFO where the lock file should be is damage: refused, never waited on."""
    store = make(kind, tmp_path)
    lock = store.path.with_name(f"{store.path.name}.claim")
    os.mkfifo(lock)
    message = f"{lock}: not a claim's lock file: it is a FIFO, not a regular file"
    with pytest.raises(CheckpointFormatError) as caught, store.claim("X"):
        pass
    assert str(caught.value) == message
    with pytest.raises(CheckpointFormatError):
        store.owner()


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_file_in_a_missing_folder_fails_before_any_step_runs(kind: str, tmp_path: Path) -> None:
    """The claim's lock file cannot be made: the run fails at its start, not at a save."""
    store = make(kind, tmp_path / "missing")
    ran: list[str] = []
    with pytest.raises(FileNotFoundError):
        chain(ran, ("a",)).run_sync(checkpoint_fn=store, run_id="X")
    assert ran == []
