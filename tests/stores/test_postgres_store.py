"""PostgresStore against a real PostgreSQL (pgserver): conformance, workers, kills, restarts."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from pg_fixture import new_database, restart
from sql_store_cases import (
    assert_exact,
    chain_checkpoints,
    racing_writer,
    run_story,
    stuck_writer,
)

from executionkit import CheckpointFormatError, WorkflowCheckpoint
from executionkit.conformance import RUN_ID, check_store
from executionkit.stores import PostgresStore, StaleCheckpointError, _sql


def rows(uri: str, sql: str, *params: object) -> list[Any]:
    with psycopg.connect(uri) as connection:
        return connection.execute(sql, params).fetchall()


@pytest.mark.parametrize("history", [False, True], ids=["latest-only", "history"])
def test_passes_the_conformance_kit(pg_server: Any, history: bool) -> None:
    stores: list[PostgresStore] = []

    def make_store() -> tuple[Any, Any]:
        store = PostgresStore(new_database(pg_server), history=history)
        stores.append(store)
        return store, lambda: store.load(RUN_ID)

    try:
        check_store(make_store, stale_error=StaleCheckpointError)
    finally:
        for store in stores:
            store.close()
    assert len(stores) >= 5


def test_every_checkpoint_of_a_run_that_resumes_every_way_is_rebuilt_exactly(
    pg_server: Any, pg_uri: str
) -> None:
    store = PostgresStore(pg_uri, history=True)
    taken = run_story(store, lambda: store.load("story"))
    assert_exact(store.history("story"), taken)
    fresh = PostgresStore(pg_uri)
    assert_exact([fresh.load()], taken[-1:])
    fresh.close()
    copies = [WorkflowCheckpoint.from_dict(json.loads(json.dumps(c.to_dict()))) for c in taken]
    other = PostgresStore(new_database(pg_server), history=True)
    for checkpoint in copies:
        other(checkpoint)
    assert_exact(other.history("story"), taken)
    assert other.run_ids() == ["story"]
    store.close()
    other.close()


def test_each_save_writes_one_row_per_new_output(
    pg_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    diffs: list[int] = []
    original = _sql.SqlCheckpoints._diff

    def counted(self: Any, *args: Any) -> Any:
        diffs.append(args[2].seq)
        return original(self, *args)

    monkeypatch.setattr(_sql.SqlCheckpoints, "_diff", counted)
    store = PostgresStore(pg_uri)
    taken = chain_checkpoints(200)
    for checkpoint in taken:
        store(checkpoint)
    assert diffs == [1]
    added = dict(rows(pg_uri, "SELECT added, COUNT(*) FROM executionkit_outputs GROUP BY added"))
    assert added == {c.seq: len(c.new_outputs) for c in taken}
    assert rows(pg_uri, "SELECT seq FROM executionkit_headers") == [(taken[-1].seq,)]
    assert_exact([store.load()], taken[-1:])
    store.close()


def test_prune_and_delete(pg_uri: str) -> None:
    store = PostgresStore(pg_uri, history=True)
    taken = run_story(store, lambda: store.load("story"))
    assert store.prune("story", keep_last=3) == len(taken) - 3
    assert_exact(store.history("story"), taken[-3:])
    assert rows(
        pg_uri,
        "SELECT COUNT(*) FROM executionkit_outputs WHERE dropped <= %s",
        taken[-3].seq,
    ) == [(0,)]
    assert store.prune(keep_last=1) == 2
    assert_exact(store.history("story"), taken[-1:])
    with pytest.raises(ValueError, match=r"keep_last must be an int of at least 1, got -1$"):
        store.prune(keep_last=-1)
    assert store.delete("story") is True
    assert store.delete("story") is False
    assert store.run_ids() == []
    assert store.load() is None
    store.close()


def test_reads_of_an_empty_database_create_nothing(pg_uri: str) -> None:
    store = PostgresStore(pg_uri)
    assert store.load() is None
    assert store.history("r") == []
    assert store.run_ids() == []
    assert store.prune(keep_last=1) == 0
    assert rows(pg_uri, "SELECT to_regclass('executionkit_runs')") == [(None,)]
    store.close()


def test_a_damaged_header_is_named_and_never_replaced(pg_uri: str) -> None:
    store = PostgresStore(pg_uri)
    first, second = chain_checkpoints(2)
    store(first)
    with psycopg.connect(pg_uri) as connection:
        connection.execute("UPDATE executionkit_headers SET header = '{\"torn'")
    for call in (store.load, lambda: store(second)):
        with pytest.raises(CheckpointFormatError) as caught:
            call()
        assert str(caught.value) == (
            f"{store!r}, run 'w': the stored checkpoint is not valid JSON (Unterminated "
            f"string starting at: line 1 column 2 (char 1))"
        )
    assert rows(pg_uri, "SELECT seq, header FROM executionkit_headers") == [(1, '{"torn')]
    store.close()


def test_tables_of_another_schema_version_are_refused(pg_uri: str) -> None:
    store = PostgresStore(pg_uri)
    store(chain_checkpoints(1)[0])
    with psycopg.connect(pg_uri) as connection:
        connection.execute("UPDATE executionkit_schema SET version = 7")
    for call in (store.load, lambda: PostgresStore(pg_uri)(chain_checkpoints(1)[0])):
        with pytest.raises(CheckpointFormatError) as caught:
            call()
        assert str(caught.value).endswith(
            ": the executionkit tables have schema version [7], this version of executionkit "
            "reads [2, 3, 4, 5]"
        )
    store.close()


def test_processes_racing_on_one_run_never_move_it_backwards(pg_uri: str) -> None:
    """Four processes save one run's 12 checkpoints, shuffled: the row lock orders them."""
    taken = chain_checkpoints(12)
    dicts = [json.dumps(c.to_dict()) for c in taken]
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(4)
    out = context.Queue()
    workers = [
        context.Process(target=racing_writer, args=("postgres", pg_uri, dicts, seed, start, out))
        for seed in range(4)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    for _, accepted, refused in results:
        assert accepted == sorted(accepted)
        assert all(stored >= seq for seq, stored in refused)
    store = PostgresStore(pg_uri, history=True)
    history = store.history("w")
    assert [c.seq for c in history] == sorted({s for _, got, _ in results for s in got})
    assert history[-1].seq == 12
    assert_exact(history, [taken[c.seq - 1] for c in history])
    store.close()


def test_a_worker_killed_inside_a_save_leaves_the_previous_checkpoint(pg_uri: str) -> None:
    taken = chain_checkpoints(2)
    dicts = [json.dumps(c.to_dict()) for c in taken]
    context = multiprocessing.get_context("spawn")
    inside = context.Event()
    worker = context.Process(target=stuck_writer, args=("postgres", pg_uri, dicts, inside))
    worker.start()
    assert inside.wait(timeout=120)  # rows written and the run row locked, uncommitted
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(timeout=60)
    assert worker.exitcode == -signal.SIGKILL
    store = PostgresStore(pg_uri)
    assert_exact([store.load()], taken[:1])
    # The server ends the dead client's transaction and frees the row lock.
    store(taken[1])
    assert_exact([store.load()], taken[1:])
    store.close()


def test_a_server_restart_between_saves_reconnects_once(pg_server: Any) -> None:
    uri = new_database(pg_server)
    store = PostgresStore(uri, history=True)
    taken = chain_checkpoints(3)
    store(taken[0])
    owned = psycopg.connect(uri, autocommit=True)
    given = PostgresStore(owned)
    assert given.load() == taken[0]
    restart(pg_server)
    store(taken[1])  # the store's connection died with the server: it reconnects
    assert_exact(store.history("w"), taken[:2])
    with pytest.raises(psycopg.OperationalError):  # a connection you own is yours to renew
        given(taken[2])
    owned.close()
    store.close()


def test_psycopg_is_imported_only_on_first_use_and_its_absence_names_the_extra() -> None:
    code = (
        "import sys\n"
        "import executionkit, executionkit.stores\n"
        "from executionkit.stores import PostgresStore\n"
        "store = PostgresStore('postgresql://nobody@/nowhere')\n"
        "print('psycopg' in sys.modules, repr(store))\n"
        "sys.modules['psycopg'] = None  # as if not installed\n"
        "try:\n"
        "    store.load()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [
        "False PostgresStore('postgresql://nobody@/nowhere')",
        (
            "PostgresStore needs psycopg 3, which is not installed: "
            "pip install 'executionkit[postgres]'"
        ),
    ]


def test_targets_it_cannot_use_and_passwords_in_messages() -> None:
    with pytest.raises(TypeError) as caught:
        PostgresStore(42)
    assert str(caught.value) == (
        "PostgresStore needs a connection string, a psycopg Connection or a ConnectionPool, "
        "got int"
    )
    assert repr(PostgresStore("postgresql://me:s3cret@db/app")) == (
        "PostgresStore('postgresql://me:***@db/app')"
    )
    assert repr(PostgresStore("host=db password=s3cret user=me")) == (
        "PostgresStore('host=db password=*** user=me')"
    )


def test_a_pool_or_a_connection_you_own_work_as_a_connection_string_does(pg_uri: str) -> None:
    from psycopg_pool import ConnectionPool  # noqa: PLC0415

    taken = chain_checkpoints(3)
    with ConnectionPool(pg_uri, min_size=1, max_size=2, open=True) as pool:
        pooled = PostgresStore(pool, history=True)
        assert repr(pooled) == "PostgresStore(<ConnectionPool>)"
        for checkpoint in taken[:2]:
            pooled(checkpoint)
        assert_exact(pooled.history("w"), taken[:2])
    with psycopg.connect(pg_uri) as owned:  # not autocommit: a save joins your transaction
        mine = PostgresStore(owned)
        with owned.transaction():
            mine(taken[2])
            with pytest.raises(StaleCheckpointError):
                mine(taken[0])
        assert_exact([mine.load()], taken[2:])
    other = PostgresStore(pg_uri)
    assert_exact([other.load()], taken[2:])
    other.close()
