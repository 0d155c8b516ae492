"""PostgresStore claims against a real PostgreSQL (pgserver): one live owner per run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from executionkit import (
    ClaimLostError,
    RunClaimedError,
    StaleCheckpointError,
    Step,
    Workflow,
)
from executionkit.stores import PostgresStore

if TYPE_CHECKING:
    from collections.abc import Iterator


KINDS = ("conninfo", "connection", "pool")
# Holds a claim until its stdin closes; says so on stdout once it holds it.
WORKER = """
import sys
from executionkit.stores import PostgresStore
with PostgresStore(sys.argv[1]).claim(sys.argv[2]):
    print("claimed", flush=True)
    sys.stdin.read()
"""


def rows(uri: str, sql: str, *params: object) -> list[Any]:
    with psycopg.connect(uri, autocommit=True) as connection:
        return connection.execute(sql, params).fetchall()


def execute(uri: str, sql: str) -> None:
    with psycopg.connect(uri, autocommit=True) as connection:
        connection.execute(sql)


@contextlib.contextmanager
def store_of(kind: str, uri: str) -> Iterator[PostgresStore]:
    """A store on a connection string, on a Connection of ours, or on a pool."""
    if kind == "conninfo":
        store = PostgresStore(uri)
        try:
            yield store
        finally:
            store.close()
    elif kind == "connection":
        with psycopg.connect(uri) as connection:  # not autocommit
            yield PostgresStore(connection)
    else:
        with ConnectionPool(uri, min_size=1, max_size=2, open=True) as pool:
            yield PostgresStore(pool)


def refused(store: PostgresStore, run_id: str) -> RunClaimedError:
    with pytest.raises(RunClaimedError) as caught, store.claim(run_id):
        pytest.fail("the claim was granted")
    return caught.value


def claims_of(uri: str) -> list[tuple[str, int]]:
    return rows(uri, "SELECT run_id, backend_pid FROM executionkit_claims ORDER BY run_id")


def terminate_owner(uri: str, run_id: str) -> None:
    """End the session holding ``run_id``'s claim, and wait until it has ended."""
    ((backend,),) = rows(
        uri, "SELECT backend_pid FROM executionkit_claims WHERE run_id = %s", run_id
    )
    assert rows(uri, "SELECT pg_terminate_backend(%s, 10000)", backend) == [(True,)]


@dataclass
class Gate:
    """Where step ``a`` says it started, and waits to be let go."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def chain(calls: list[str], gate: Gate | None = None) -> Workflow:
    """first -> a -> b; ``a`` waits at ``gate``; every step body start is recorded."""

    def first(ctx: Any) -> str:
        calls.append("first")
        return "1"

    async def a(ctx: Any) -> str:
        calls.append("a")
        if gate is not None:
            gate.entered.set()
            await gate.release.wait()
        return f"a{ctx['first']}"

    def b(ctx: Any) -> str:
        calls.append("b")
        return f"b{ctx['a']}"

    return Workflow(
        [
            Step("first", first),
            Step("a", a, depends_on=("first",)),
            Step("b", b, depends_on=("a",)),
        ]
    )


def test_a_second_claimant_is_refused_naming_the_owner_until_the_first_leaves(
    pg_uri: str,
) -> None:
    """Another store, or the same one again, is refused; granted once the owner has left."""
    first, second = PostgresStore(pg_uri), PostgresStore(pg_uri)
    with first.claim("x") as stored:  # an empty database: the tables are created
        assert stored is None
        error = refused(second, "x")
        owner = error.owner
        assert owner is not None
        assert (error.run_id, owner.run_id, owner.pid, owner.host) == (
            "x",
            "x",
            os.getpid(),
            socket.gethostname(),
        )
        assert str(error) == (
            f"{second!r}: run 'x' is owned by {owner.describe()}; nothing ran. Wait for that "
            f"process to end (its claim dies with it), then resume"
        )
        assert refused(first, "x").owner == owner
    assert claims_of(pg_uri) == []
    with second.claim("x") as stored:
        assert stored is None
        assert [run for run, _ in claims_of(pg_uri)] == ["x"]
    first.close()
    second.close()


def test_two_runs_are_claimed_at_once(pg_uri: str) -> None:
    """Claims are per run: two run_ids, in one store or two, never block each other."""
    store, other = PostgresStore(pg_uri), PostgresStore(pg_uri)
    with store.claim("x"), store.claim("y"), other.claim("z"):
        assert [run for run, _ in claims_of(pg_uri)] == ["x", "y", "z"]
    store.close()
    other.close()


def test_two_stores_on_one_connection_are_not_both_granted(pg_uri: str) -> None:
    """Advisory locks are re-entrant within a session; the store refuses the second anyway."""
    with psycopg.connect(pg_uri, autocommit=True) as connection:
        first, second = PostgresStore(connection), PostgresStore(connection)
        with first.claim("x"):
            owner = refused(second, "x").owner
            assert owner is not None
            assert owner.pid == os.getpid()
        with second.claim("x"):
            pass


def test_owner_is_the_live_holder_only(pg_uri: str) -> None:
    """None when free, the RunOwner while held, None after release or a terminated session."""
    store = PostgresStore(pg_uri)
    assert store.owner("x") is None  # no tables yet
    before = datetime.now(UTC)
    with store.claim("x"):
        after = datetime.now(UTC)
        owner = store.owner("x")
        assert owner is not None
        assert (owner.run_id, owner.pid, owner.host) == ("x", os.getpid(), socket.gethostname())
        assert before <= owner.since <= after
        assert store.owner("y") is None
    assert store.owner("x") is None
    holder = PostgresStore(pg_uri)
    with holder.claim("x"):
        terminate_owner(pg_uri, "x")
        assert claims_of(pg_uri) != []  # the row stays behind...
        assert store.owner("x") is None  # ...but its session has ended
    holder.close()
    store.close()


def test_leaving_a_claim_whose_session_ended_does_not_raise(pg_uri: str) -> None:
    """The store was closed under the claim: leaving is quiet, and the run is free."""
    store, other = PostgresStore(pg_uri), PostgresStore(pg_uri)
    with store.claim("x"):
        store.close()
    with other.claim("x"):
        pass
    other.close()


def test_a_killed_owner_frees_its_run_within_a_second(pg_uri: str) -> None:
    """SIGKILL the owning process: its session ends, and the run is claimed at once."""
    with subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", WORKER, pg_uri, "x"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as worker:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "claimed\n"
        store = PostgresStore(pg_uri)
        owner = refused(store, "x").owner
        assert owner is not None
        assert owner.pid == worker.pid
        worker.kill()
        assert worker.wait(timeout=60) == -signal.SIGKILL
    began = time.monotonic()
    granted = None
    # The server needs a moment to notice the closed socket and end the session.
    while granted is None and time.monotonic() - began < 1:
        with contextlib.suppress(RunClaimedError), store.claim("x"):
            granted = time.monotonic() - began
    assert granted is not None, "not granted within a second of the kill"
    store.close()


async def test_a_second_run_of_a_claimed_run_is_refused_before_any_step_runs(
    pg_uri: str,
) -> None:
    """Workflow.run with another store: RunClaimedError, no step started, nothing written."""
    calls: list[str] = []
    gate = Gate()
    workflow = chain(calls, gate)
    owner, intruder = PostgresStore(pg_uri, history=True), PostgresStore(pg_uri, history=True)
    async with asyncio.timeout(30):
        first = asyncio.create_task(workflow.run(checkpoint_fn=owner, run_id="x"))
        await gate.entered.wait()
        written = rows(pg_uri, "SELECT seq FROM executionkit_headers ORDER BY seq")
        with pytest.raises(RunClaimedError) as caught:
            await chain(calls).run(checkpoint_fn=intruder, run_id="x")
        assert caught.value.run_id == "x"
        assert calls == ["first", "a"]
        assert rows(pg_uri, "SELECT seq FROM executionkit_headers ORDER BY seq") == written
        gate.release.set()
        result = await first
    assert calls == ["first", "a", "b"]
    assert result.outputs["b"] == "ba1"
    assert claims_of(pg_uri) == []
    owner.close()
    intruder.close()


async def test_resuming_from_an_older_checkpoint_than_the_store_holds_is_refused(
    pg_uri: str,
) -> None:
    """The store is ahead of resume_from (or holds any checkpoint, for a fresh run)."""
    calls: list[str] = []
    store = PostgresStore(pg_uri, history=True)
    await chain(calls).run(checkpoint_fn=store, run_id="x")
    kept = store.history("x")
    latest = kept[-1].seq
    assert len(kept) > 1
    with store.claim("x") as stored:
        assert stored == latest
    calls.clear()
    with pytest.raises(StaleCheckpointError) as caught:
        await chain(calls).run(checkpoint_fn=store, resume_from=kept[0])
    assert str(caught.value) == (
        f"{store!r}: refused a run resuming from checkpoint seq={kept[0].seq} of run 'x': "
        f"the store already holds checkpoint seq={latest} of that run, saved by another "
        f"process or an earlier invocation; nothing ran. Resume from the store's latest "
        f"checkpoint instead"
    )
    with pytest.raises(StaleCheckpointError):
        await chain(calls).run(checkpoint_fn=store, run_id="x")
    assert calls == []
    assert [c.seq for c in store.history("x")] == [c.seq for c in kept]
    assert claims_of(pg_uri) == []
    store.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_whose_claim_session_is_terminated_stops_at_its_next_checkpoint(
    pg_uri: str, kind: str
) -> None:
    """Its saves go through the claim's session: the next one raises ClaimLostError."""
    calls: list[str] = []
    gate = Gate()
    workflow = chain(calls, gate)
    other = PostgresStore(pg_uri)
    with store_of(kind, pg_uri) as store:
        async with asyncio.timeout(30):
            run = asyncio.create_task(workflow.run(checkpoint_fn=store, run_id="x"))
            await gate.entered.wait()
            written = rows(pg_uri, "SELECT seq FROM executionkit_runs")
            assert written == [(1,)]  # first's checkpoint, through the claim's session
            terminate_owner(pg_uri, "x")
            assert other.owner("x") is None
            with other.claim("x") as stored:  # free at once
                assert stored == 1
            gate.release.set()
            with pytest.raises(ClaimLostError) as caught:
                await run
        assert calls == ["first", "a"]
        assert caught.value.run_id == "x"
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        message = str(caught.value)
        assert message.startswith(
            f"{store!r} lost its claim on run 'x': its database session ended ("
        )
        assert message.endswith("); another process may own the run now")
        assert rows(pg_uri, "SELECT seq FROM executionkit_runs") == written
        assert rows(pg_uri, "SELECT seq FROM executionkit_headers") == written
    other.close()


def test_owner_of_a_database_without_the_claims_table_is_none(pg_uri: str) -> None:
    """Tables written before claims existed: nobody owns anything."""
    store = PostgresStore(pg_uri)
    with store.claim("x"):
        pass
    execute(pg_uri, "DROP TABLE executionkit_claims")
    other = PostgresStore(pg_uri)
    assert other.owner("x") is None
    other.close()
    store.close()


def test_a_claim_that_fails_once_locked_leaves_the_run_free(pg_uri: str) -> None:
    """The latest-seq read fails: the error is raised, and the lock is not left behind."""
    store = PostgresStore(pg_uri)
    with store.claim("x"):
        pass
    execute(pg_uri, "ALTER TABLE executionkit_runs RENAME TO executionkit_elsewhere")
    with pytest.raises(psycopg.errors.UndefinedTable), store.claim("x"):
        pytest.fail("the claim was granted")
    assert rows(pg_uri, "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory'") == [(0,)]
    execute(pg_uri, "ALTER TABLE executionkit_elsewhere RENAME TO executionkit_runs")
    with store.claim("x") as stored:
        assert stored is None
    store.close()
