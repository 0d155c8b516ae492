"""SQLiteStore: exact rebuilds of every checkpoint, constant work per save, workers, retention."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import warnings
from typing import TYPE_CHECKING, Any

import pytest
from sql_store_cases import (
    assert_exact,
    chain_checkpoints,
    racing_writer,
    run_story,
    stuck_writer,
)

from executionkit import CheckpointFormatError, WorkflowCheckpoint
from executionkit.stores import SQLiteStore, StaleCheckpointError, _sql

if TYPE_CHECKING:
    from pathlib import Path


def rows(store: SQLiteStore, sql: str, *params: object) -> list[Any]:
    connection = sqlite3.connect(store.path)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


@pytest.mark.parametrize("history", [True, False], ids=["history", "latest-only"])
def test_every_checkpoint_of_a_run_that_fails_resumes_reruns_and_discards_is_rebuilt_exactly(
    tmp_path: Path, history: bool
) -> None:
    store = SQLiteStore(tmp_path / "runs.db", history=history)
    taken = run_story(store, lambda: store.load("story"))
    assert [c.seq for c in taken] == list(range(1, len(taken) + 1))
    # Mid-batch, c saved progress after f landed: f is in that checkpoint's outputs
    # before the run's log holds it.
    assert any(c.progress and c.new_outputs == ("f",) for c in taken)
    assert [list(c.outputs) for c in taken[-3:]] == [
        ["a", "d", "b", "c", "f"],  # b, c and f replaced by the rerun, moved to the end
        ["a", "d", "b", "c", "f", "z"],
        ["a", "b", "c", "f", "z", "e"],  # d discarded
    ]
    assert_exact(store.history("story"), taken if history else taken[-1:])
    assert_exact([store.load("story")], taken[-1:])
    fresh = SQLiteStore(store.path)  # another process's store: no memory of the saves
    assert_exact([fresh.load()], taken[-1:])


def test_a_run_read_back_with_from_dict_is_stored_exactly_by_comparing_outputs(
    tmp_path: Path,
) -> None:
    """Checkpoints without new_outputs (from_dict) take the slow path and stay exact."""
    original = SQLiteStore(tmp_path / "a.db", history=True)
    taken = run_story(original, lambda: original.load("story"))
    copies = [WorkflowCheckpoint.from_dict(json.loads(json.dumps(c.to_dict()))) for c in taken]
    assert all(c.new_outputs == () for c in copies)
    copy = SQLiteStore(tmp_path / "b.db", history=True)
    for checkpoint in copies:
        copy(checkpoint)
    assert_exact(copy.history("story"), taken)
    copy(copies[-1])  # the same checkpoint again: nothing written
    assert len(copy.history("story")) == len(taken)


def test_each_save_writes_one_row_per_new_output_and_compares_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The constant-cost property: rows added per checkpoint == len(new_outputs), no diff."""
    diffs: list[int] = []
    original = _sql.SqlCheckpoints._diff

    def counted(self: Any, *args: Any) -> Any:
        diffs.append(args[2].seq)
        return original(self, *args)

    monkeypatch.setattr(_sql.SqlCheckpoints, "_diff", counted)
    store = SQLiteStore(tmp_path / "runs.db")
    taken = chain_checkpoints(300)
    for checkpoint in taken:
        store(checkpoint)
    assert diffs == [1]  # only the first save of the run compares with the database
    added = dict(rows(store, "SELECT added, COUNT(*) FROM executionkit_outputs GROUP BY added"))
    assert added == {c.seq: len(c.new_outputs) for c in taken}
    assert rows(store, "SELECT seq FROM executionkit_headers") == [(taken[-1].seq,)]
    header = rows(store, "SELECT header FROM executionkit_headers")[0][0]
    assert len(header) < 400  # no output, no list of names: the same size at any length
    assert_exact([store.load()], taken[-1:])


def test_prune_keeps_the_last_checkpoints_and_the_rows_they_need(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", history=True)
    taken = run_story(store, lambda: store.load("story"))
    other = chain_checkpoints(4, run_id="other")
    for checkpoint in other:
        store(checkpoint)
    dropped_before = rows(store, "SELECT COUNT(*) FROM executionkit_outputs WHERE dropped > 0")
    assert dropped_before[0][0] > 0  # the rerun and the discard dropped rows
    assert store.prune("story", keep_last=2) == len(taken) - 2
    assert_exact(store.history("story"), taken[-2:])
    assert_exact(store.history("other"), other)  # another run is untouched
    oldest_kept = taken[-2].seq
    assert rows(
        store,
        "SELECT COUNT(*) FROM executionkit_outputs WHERE run_id = 'story' AND dropped <= ?",
        oldest_kept,
    ) == [(0,)]
    assert store.prune(keep_last=1) == 1 + 3  # every run
    assert_exact(store.history("story"), taken[-1:])
    assert_exact(store.history("other"), other[-1:])
    assert store.prune(keep_last=1) == 0
    with pytest.raises(StaleCheckpointError):  # the fence outlives pruning
        store(taken[0])


def test_delete_removes_a_whole_run_and_its_fence(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", history=True)
    taken = chain_checkpoints(3, run_id="gone")
    kept = chain_checkpoints(2, run_id="kept")
    for checkpoint in (*taken, *kept):
        store(checkpoint)
    assert store.delete("gone") is True
    assert store.delete("gone") is False
    assert store.run_ids() == ["kept"]
    assert store.load("gone") is None
    assert store.history("gone") == []
    assert rows(store, "SELECT COUNT(*) FROM executionkit_outputs WHERE run_id = 'gone'") == [(0,)]
    store(taken[0])  # no fence any more: the run starts afresh
    assert store.load("gone") == taken[0]


def test_prune_refuses_to_keep_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    assert store.prune(keep_last=3) == 0  # no database yet: nothing to do
    assert not store.path.exists()
    with pytest.raises(ValueError, match=r"prune: keep_last must be an int of at least 1, got 0$"):
        store.prune(keep_last=0)


def test_a_database_of_the_old_single_table_schema_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("CREATE TABLE executionkit_checkpoints (run_id TEXT, data TEXT)")
    connection.close()
    store = SQLiteStore(path)
    message = (
        f"{store!r}: the database holds the table executionkit_checkpoints of an unreleased "
        f"SQLiteStore that wrote each run's whole JSON; this version reads only its own "
        f"tables: save into a new database file"
    )
    for call in (
        store.load,
        store.run_ids,
        lambda: store.history("r"),
        lambda: store(chain_checkpoints(1)[0]),
    ):
        with pytest.raises(CheckpointFormatError) as caught:
            call()
        assert str(caught.value) == message


def test_tables_of_another_schema_version_are_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store(chain_checkpoints(1)[0])
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("UPDATE executionkit_schema SET version = 6")
    connection.close()
    for call in (store.load, lambda: SQLiteStore(store.path)(chain_checkpoints(2)[1])):
        with pytest.raises(CheckpointFormatError) as caught:
            call()
        assert str(caught.value) == (
            f"{store!r}: the executionkit tables have schema version [6], this version of "
            f"executionkit reads [2, 3, 4, 5]"
        )


def test_a_damaged_output_row_is_named_with_its_step(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store(chain_checkpoints(1)[0])
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("UPDATE executionkit_outputs SET value = '[\"x\"'")
    connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        store.load()
    assert str(caught.value) == (
        f"{store!r}, run 'w': the stored output of step 's0' is not valid JSON (Expecting ',' "
        f"delimiter: line 1 column 5 (char 4))"
    )
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("UPDATE executionkit_outputs SET value = '{}'")
    connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        store.load()
    assert str(caught.value) == (
        f"{store!r}, run 'w': the stored output of step 's0' must be a JSON list "
        f"[output, step info], got {{}}"
    )


def test_synchronous_is_full_or_normal(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        SQLiteStore(tmp_path / "runs.db", synchronous="OFF")
    assert str(caught.value) == "SQLiteStore: synchronous must be 'FULL' or 'NORMAL', got 'OFF'"
    store = SQLiteStore(tmp_path / "runs.db", synchronous="NORMAL")
    taken = chain_checkpoints(2)
    for checkpoint in taken:
        store(checkpoint)
    assert store.load() == taken[-1]
    store.close()
    assert store.load() == taken[-1]  # a closed store reconnects


def test_a_replaced_database_file_is_reopened(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    first = chain_checkpoints(1, run_id="one")[0]
    store(first)
    store.close()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"runs.db{suffix}").unlink(missing_ok=True)
    assert store.load() is None
    second = chain_checkpoints(1, run_id="two")[0]
    store(second)
    assert store.run_ids() == ["two"]


def test_processes_racing_on_one_run_never_move_it_backwards(tmp_path: Path) -> None:
    """Four processes save one run's 12 checkpoints, shuffled: each seq is stored once."""
    path = str(tmp_path / "runs.db")
    taken = chain_checkpoints(12)
    dicts = [json.dumps(c.to_dict()) for c in taken]
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(4)
    out = context.Queue()
    workers = [
        context.Process(target=racing_writer, args=("sqlite", path, dicts, seed, start, out))
        for seed in range(4)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    for _, accepted, refused in results:
        assert accepted == sorted(accepted)  # once refused, never accepted again below it
        assert all(stored >= seq for seq, stored in refused)
    history = SQLiteStore(path, history=True).history("w")
    assert [c.seq for c in history] == sorted({s for _, got, _ in results for s in got})
    assert history[-1].seq == 12
    assert_exact(history, [taken[c.seq - 1] for c in history])


def test_a_worker_killed_inside_a_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    taken = chain_checkpoints(2)
    dicts = [json.dumps(c.to_dict()) for c in taken]
    context = multiprocessing.get_context("spawn")
    inside = context.Event()
    worker = context.Process(target=stuck_writer, args=("sqlite", path, dicts, inside))
    worker.start()
    assert inside.wait(timeout=120)  # the second checkpoint's rows are written, uncommitted
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(timeout=60)
    assert worker.exitcode == -signal.SIGKILL
    store = SQLiteStore(path)
    assert_exact([store.load()], taken[:1])
    store(taken[1])  # the lock died with the worker
    assert_exact([store.load()], taken[1:])


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    taken = chain_checkpoints(3)
    store(taken[0])
    context = multiprocessing.get_context("fork")
    child = context.Process(target=store, args=(taken[1],))
    with warnings.catch_warnings():
        # Python 3.12+ warns about forking a process with threads; this test forks on
        # purpose, as a worker pool of the user's would.
        warnings.simplefilter("ignore", DeprecationWarning)
        child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert_exact([store.load()], taken[1:2])  # the parent's connection still works
    store(taken[2])
    assert_exact([SQLiteStore(store.path).load()], taken[2:])
