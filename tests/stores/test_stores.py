"""executionkit.stores: atomic JSON file, JSON Lines and SQLite; each a checkpoint_fn + load()."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import random
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from executionkit import (
    CheckpointFormatError,
    CheckpointValueError,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore, StaleCheckpointError
from executionkit.stores._common import encode
from executionkit.stores._unstorable import unstorable

REFUSED = (
    "written by another writer or before this run resumed from an older checkpoint; resume "
    "from the store's load() instead"
)
DATA_HINT = (
    "stores write JSON, so steps must return dicts, lists, str, int, finite float, bool or "
    "None (or give the Step encode/decode; run with validate_json=True to catch this when the "
    "step returns)"
)


def chain(n: int, *, size: int = 10, fail_at: int | None = None) -> Workflow:
    def make(i: int) -> Step:
        def run(_ctx: Any) -> PatternResult[dict[str, Any]]:
            if i == fail_at:
                msg = f"step {i} failed"
                raise RuntimeError(msg)
            return PatternResult({"i": i, "text": "x" * size}, cost=TokenUsage(i, 1, 1))

        return Step(f"s{i}", run, depends_on=(f"s{i - 1}",) if i else ())

    return Workflow([make(i) for i in range(n)])


def checkpoints(n: int, run_id: str = "r", *, size: int = 10) -> list[WorkflowCheckpoint]:
    taken: list[WorkflowCheckpoint] = []
    chain(n, size=size).run_sync(checkpoint_fn=taken.append, run_id=run_id)
    return taken


def test_importing_executionkit_loads_no_store_and_stores_load_no_sqlite() -> None:
    """The core stays storage-free; SQLite loads only when an SQLiteStore is used."""
    code = (
        "import sys, executionkit\n"
        "print('executionkit.stores' in sys.modules, 'sqlite3' in sys.modules)\n"
        "import executionkit.stores, executionkit.conformance\n"
        "print('sqlite3' in sys.modules)\n"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False", "False"]


# --- JsonFileStore ----------------------------------------------------------------------


def test_json_file_round_trip_and_content(tmp_path: Path) -> None:
    """The file is the checkpoint's to_dict() as JSON; load() gives back an equal checkpoint."""
    store = JsonFileStore(tmp_path / "run.json")
    taken = checkpoints(3)
    for checkpoint in taken:
        store(checkpoint)
        assert JsonFileStore(store.path).load() == checkpoint
    assert json.loads(store.path.read_text(encoding="utf-8")) == taken[-1].to_dict()
    if os.name == "posix":
        assert stat.S_IMODE(store.path.stat().st_mode) == 0o600  # checkpoints may be private
    assert repr(store) == f"JsonFileStore({str(store.path)!r})"


@pytest.mark.parametrize("content", [None, b"", b"  \n"])
def test_json_file_missing_or_empty_holds_nothing(tmp_path: Path, content: bytes | None) -> None:
    """A missing file, or an empty one such as mkstemp creates, means nothing saved."""
    path = tmp_path / "run.json"
    if content is not None:
        path.write_bytes(content)
    store = JsonFileStore(path)
    assert store.load() is None
    checkpoint = checkpoints(1)[0]
    store(checkpoint)
    assert store.load() == checkpoint


@pytest.mark.parametrize(
    ("content", "message", "field"),
    [
        (
            b'{"version": 2,',
            (
                "not a checkpoint file: invalid JSON at line 1 column 15 (Expecting property "
                "name enclosed in double quotes)"
            ),
            "",
        ),
        (
            b"\xff\xfe{}",
            "not a checkpoint file: not UTF-8 text (invalid start byte at byte 0)",
            "",
        ),
        (b"[1, 2]", "checkpoint data must be a dict, got list [1, 2]", ""),
        (
            (
                b'{"step_index": 0, "outputs": {}, "cost": {"input_tokens": -1, '
                b'"output_tokens": 0, "llm_calls": 0}}'
            ),
            "checkpoint field 'cost.input_tokens' must be a non-negative int, got int -1",
            "cost.input_tokens",
        ),
    ],
    ids=["torn-json", "not-utf8", "not-a-dict", "bad-field"],
)
def test_json_file_that_is_not_a_checkpoint_is_an_error_naming_it(
    tmp_path: Path, content: bytes, message: str, field: str
) -> None:
    """load() raises CheckpointFormatError, path first; a save refuses to overwrite it."""
    path = tmp_path / "run.json"
    path.write_bytes(content)
    with pytest.raises(CheckpointFormatError) as caught:
        JsonFileStore(path).load()
    assert str(caught.value) == f"{path}: {message}"
    assert caught.value.path == field
    with pytest.raises(CheckpointFormatError):
        JsonFileStore(path)(checkpoints(1)[0])
    assert path.read_bytes() == content


def _fail_half_way(monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)


def _fail_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)


def _fail_replace(monkeypatch: pytest.MonkeyPatch) -> None:
    def replace(self: Path, target: Any) -> Path:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(Path, "replace", replace)


@pytest.mark.parametrize(
    ("break_it", "error"),
    [
        (_fail_half_way, "[Errno 28] No space left on device"),
        (_fail_fsync, "[Errno 5] Input/output error"),
        (_fail_replace, "[Errno 18] Invalid cross-device link"),
    ],
    ids=["write-half-way", "fsync", "replace"],
)
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    break_it: Any,
    error: str,
) -> None:
    """A crash mid-save (simulated by raising) keeps the previous checkpoint intact."""
    store = JsonFileStore(tmp_path / "run.json")
    taken = checkpoints(3, size=100_000)
    store(taken[0])
    before = store.path.read_bytes()
    break_it(monkeypatch)
    with pytest.raises(OSError) as caught:
        store(taken[1])
    monkeypatch.undo()
    assert str(caught.value) == error
    assert store.path.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.json"]
    assert store.load() == taken[0]
    store(taken[2])
    assert JsonFileStore(store.path).load() == taken[2]


def test_a_save_syncs_the_file_then_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync of the temporary file before the rename, of the folder after it."""
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    JsonFileStore(tmp_path / "run.json")(checkpoints(1)[0])
    assert synced == ["file", "folder"]


def test_a_reader_never_sees_a_torn_file(tmp_path: Path) -> None:
    """Loads racing large saves always get a whole checkpoint, never a partial one."""
    taken = checkpoints(30, size=20_000)
    writer_store = JsonFileStore(tmp_path / "run.json")
    writer_store(taken[0])
    done = threading.Event()
    problems: list[str] = []
    loads = 0

    def read() -> None:
        nonlocal loads
        reader = JsonFileStore(writer_store.path)
        last = 0
        while not done.is_set() or loads == 0:
            try:
                loaded = reader.load()
            except CheckpointFormatError as exc:
                problems.append(str(exc))
                return
            loads += 1
            if loaded is None:
                problems.append("load() found no checkpoint")
                return
            if loaded.seq < last:
                problems.append(f"went back from {last} to {loaded.seq}")
            last = loaded.seq

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for checkpoint in taken[1:]:
            writer_store(checkpoint)
    finally:
        done.set()
        thread.join()
    assert problems == []
    assert loads > 0


def test_a_leftover_temporary_file_is_ignored(tmp_path: Path) -> None:
    """A hard crash can leave .<name>.*.tmp behind: never read, and saving still works."""
    store = JsonFileStore(tmp_path / "run.json")
    taken = checkpoints(2)
    store(taken[0])
    leftover = tmp_path / ".run.json.abc123.tmp"
    leftover.write_text('{"torn', encoding="utf-8")
    assert store.load() == taken[0]
    store(taken[1])
    assert JsonFileStore(store.path).load() == taken[1]
    assert leftover.read_text(encoding="utf-8") == '{"torn'


def test_json_file_refuses_stale_checkpoints_from_any_writer(tmp_path: Path) -> None:
    """Older seq, or a different checkpoint with the same seq: refused; the file is untouched."""
    path = tmp_path / "run.json"
    taken = checkpoints(3)
    JsonFileStore(path)(taken[2])
    before = path.read_bytes()
    with pytest.raises(StaleCheckpointError) as caught:
        JsonFileStore(path)(taken[1])  # another store instance: it reads the file
    assert str(caught.value) == (
        f"JsonFileStore({str(path)!r}): refused checkpoint seq=2 of run 'r': the store already "
        f"holds seq=3 of that run, {REFUSED}"
    )
    assert (caught.value.run_id, caught.value.seq, caught.value.stored_seq) == ("r", 2, 3)
    sibling = checkpoints(3)[2]  # same run_id and seq, taken at another moment
    with pytest.raises(StaleCheckpointError) as caught:
        JsonFileStore(path)(sibling)
    assert str(caught.value) == (
        f"JsonFileStore({str(path)!r}): refused checkpoint seq=3 of run 'r': the store already "
        f"holds a different checkpoint with seq=3 of that run, {REFUSED}"
    )
    assert path.read_bytes() == before


def test_json_file_saving_the_same_checkpoint_again_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    checkpoint = checkpoints(1)[0]
    JsonFileStore(path)(checkpoint)
    before = path.stat()
    JsonFileStore(path)(checkpoint)
    JsonFileStore(path)(WorkflowCheckpoint.from_dict(checkpoint.to_dict()))
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_json_file_notices_another_writer(tmp_path: Path) -> None:
    """A store that wrote seq 1 still refuses seq 2 after another process wrote seq 3."""
    path = tmp_path / "run.json"
    taken = checkpoints(3)
    mine = JsonFileStore(path)
    mine(taken[0])
    JsonFileStore(path)(taken[2])
    with pytest.raises(StaleCheckpointError):
        mine(taken[1])
    assert mine.load() == taken[2]


def test_a_checkpoint_of_another_run_replaces_the_file(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path / "run.json")
    store(checkpoints(3, run_id="first")[2])
    fresh = checkpoints(1, run_id="second")[0]
    store(fresh)
    assert JsonFileStore(store.path).load() == fresh


# --- outputs JSON cannot hold ----------------------------------------------------------


class Opaque:
    def __repr__(self) -> str:
        return "Opaque()"


@pytest.mark.parametrize(
    ("output", "where", "problem"),
    [
        ({"tags": {"a"}}, " at ['tags']", "{'a'} (set) is not JSON data"),
        ([1, float("nan")], " at [1]", "float('nan') is not valid JSON"),
        (
            {"when": dt.date(2024, 5, 1)},
            " at ['when']",
            ("datetime.date(2024, 5, 1) (date) is not JSON data"),
        ),
        ({(1, 2): "pair"}, "", "key (1, 2) is not a str"),
        ((1.5, [Opaque()]), " at [1][0]", "Opaque() (Opaque) is not JSON data"),
        (Opaque(), "", "Opaque() (Opaque) is not JSON data"),
    ],
    ids=["set", "nan", "date", "tuple-key", "nested", "object"],
)
def test_an_output_json_cannot_hold_fails_the_save_naming_the_step(
    tmp_path: Path, output: object, where: str, problem: str
) -> None:
    """CheckpointValueError (a ValueError) names the store, the step and the path inside it."""
    store = JsonFileStore(tmp_path / "run.json")
    workflow = Workflow([Step("fine", lambda _ctx: "ok"), Step("odd", lambda _ctx: output)])
    with pytest.raises(CheckpointValueError) as caught:
        workflow.run_sync(checkpoint_fn=store, run_id="r")
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == (
        f"JsonFileStore({str(store.path)!r}): cannot store checkpoint seq=1 of run 'r': "
        f"the output of step 'odd'{where}: {problem}; {DATA_HINT}"
    )
    assert caught.value.path == where.removeprefix(" at ")
    assert not store.path.exists()


def test_metadata_json_cannot_hold_is_named(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    with pytest.raises(CheckpointValueError) as caught:
        chain(1).run_sync(checkpoint_fn=store, run_id="r", metadata={"client": Opaque()})
    assert str(caught.value) == (
        f"SQLiteStore({str(store.path)!r}): cannot store checkpoint seq=1 of run 'r': the "
        f"metadata value 'client': Opaque() (Opaque) is not JSON data; {DATA_HINT}"
    )


def test_a_cycle_is_named_too() -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    checkpoint = WorkflowCheckpoint(1, {"a": looped}, TokenUsage(), run_id="r", seq=1)
    with pytest.raises(CheckpointValueError) as caught:
        encode(checkpoint, "S")
    assert str(caught.value) == (
        "S: cannot store checkpoint seq=1 of run 'r': the output of step 'a' at [1]: a "
        f"container that contains itself is not valid JSON; {DATA_HINT}"
    )


def test_too_deep_for_json_is_named_after_what_json_said() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    checkpoint = WorkflowCheckpoint(1, {"a": deep}, TokenUsage(), run_id="r", seq=1)
    with pytest.raises(CheckpointValueError) as caught:
        encode(checkpoint, "S")
    assert str(caught.value).startswith(
        "S: cannot store checkpoint seq=1 of run 'r': the output of step 'a': json cannot write "
        "it (RecursionError: maximum recursion depth exceeded"
    )
    assert str(caught.value).endswith(DATA_HINT)
    assert caught.value.value is deep


def test_with_nothing_to_blame_the_message_says_what_json_said() -> None:
    """Only the whole was refused (a JSON Lines line nests outputs deeper): json's words."""
    checkpoint = WorkflowCheckpoint(1, {"a": [1]}, TokenUsage(), run_id="r", seq=1)
    error = unstorable(checkpoint, "S", RecursionError("maximum recursion depth exceeded"))
    assert str(error) == (
        f"S: cannot store checkpoint seq=1 of run 'r' as JSON: RecursionError: maximum "
        f"recursion depth exceeded; {DATA_HINT}"
    )


# --- SQLiteStore ------------------------------------------------------------------------


def test_sqlite_creates_the_documented_tables(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", history=True)
    (checkpoint,) = checkpoints(1)
    store(checkpoint)
    ended = [list(entry) for entry in checkpoint.attempts]  # format 5: when each attempt ran
    connection = sqlite3.connect(store.path)
    tables = ("executionkit_schema", "executionkit_runs", "executionkit_headers")
    try:
        columns = {
            table: [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
            for table in (
                *tables,
                "executionkit_outputs",
                "executionkit_items",
                "executionkit_ledger",
                "executionkit_attempts",
            )
        }
        runs = connection.execute("SELECT run_id, seq, written, next_ord FROM executionkit_runs")
        # An output row, a ledger row and a row per attempts entry.
        assert runs.fetchall() == [("r", 1, 1, 2 + len(ended))]
        assert connection.execute("SELECT version FROM executionkit_schema").fetchall() == [(5,)]
        rows = connection.execute("SELECT ord, name, added, dropped FROM executionkit_outputs")
        assert rows.fetchall() == [(0, "s0", 1, None)]
        ledger = connection.execute("SELECT * FROM executionkit_ledger")
        assert ledger.fetchall() == [("r", 1, 1, None, "s0", None, 1, "ok", None, 0, 1, 1)]
        attempts = connection.execute(
            "SELECT ord, added, dropped, step, item, attempt, outcome, started, ended "
            "FROM executionkit_attempts ORDER BY ord"
        )
        assert [list(row) for row in attempts] == [
            [2 + number, 1, None, *entry] for number, entry in enumerate(ended)
        ]
        mode = connection.execute("PRAGMA journal_mode").fetchone()
    finally:
        connection.close()
    assert mode == ("wal",)
    assert columns == {
        "executionkit_schema": ["version"],
        "executionkit_runs": ["run_id", "seq", "written", "next_ord"],
        "executionkit_headers": ["run_id", "seq", "created_at", "header"],
        "executionkit_outputs": ["run_id", "ord", "name", "added", "dropped", "value"],
        "executionkit_items": ["run_id", "ord", "step", "item", "added", "dropped", "value"],
        "executionkit_ledger": [
            "run_id",
            "ord",
            "added",
            "dropped",
            "step",
            "item",
            "attempt",
            "outcome",
            "model",
            "input_tokens",
            "output_tokens",
            "llm_calls",
        ],
        "executionkit_attempts": [
            "run_id",
            "ord",
            "added",
            "dropped",
            "step",
            "item",
            "attempt",
            "outcome",
            "started",
            "ended",
        ],
    }


def test_sqlite_reading_an_absent_database_creates_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    assert store.load() is None
    assert store.load("r") is None
    assert store.history("r") == []
    assert store.run_ids() == []
    assert not store.path.exists()
    sqlite3.connect(store.path).close()  # an empty database, without the tables
    assert store.load() is None
    assert store.history("r") == []
    assert store.run_ids() == []


def test_sqlite_stale_writer_on_a_second_connection_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    taken = checkpoints(3)
    SQLiteStore(path)(taken[2])
    with pytest.raises(StaleCheckpointError) as caught:
        SQLiteStore(path)(taken[0])
    assert str(caught.value) == (
        f"SQLiteStore({str(path)!r}): refused checkpoint seq=1 of run 'r': the store already "
        f"holds seq=3 of that run, {REFUSED}"
    )
    assert SQLiteStore(path).load("r") == taken[2]
    SQLiteStore(path)(taken[2])  # the same checkpoint again: harmless


def test_sqlite_waits_for_a_lock_then_fails_clearly(tmp_path: Path) -> None:
    """Each save is one write transaction; a held lock makes it wait `timeout` seconds."""
    store = SQLiteStore(tmp_path / "runs.db", timeout=0.05)
    taken = checkpoints(2)
    store(taken[0])
    blocker = sqlite3.connect(store.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            store(taken[1])
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()
    assert store.load() == taken[0]
    store(taken[1])
    assert store.load() == taken[1]


def test_sqlite_history_keeps_every_replaced_checkpoint(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", history=True)
    taken = checkpoints(4)
    for checkpoint in taken:
        store(checkpoint)
    with pytest.raises(StaleCheckpointError):
        store(checkpoints(4)[1])  # a refused checkpoint is not kept
    store(taken[3])  # neither is a repeated one
    assert store.history("r") == taken
    assert [c.seq for c in store.history("r")] == [1, 2, 3, 4]
    assert store.history("other") == []
    plain = SQLiteStore(store.path)  # without history=True: only the latest is written
    later = checkpoints(6)[4:]
    for checkpoint in later:
        plain(checkpoint)
    assert [c.seq for c in plain.history("r")] == [1, 2, 3, 6]  # 4 and 5 were not kept
    assert SQLiteStore(tmp_path / "other.db").history("r") == []


def test_sqlite_without_history_keeps_only_the_latest(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    taken = checkpoints(3)
    for checkpoint in taken:
        store(checkpoint)
    assert store.history("r") == [taken[-1]]


def test_sqlite_load_without_run_id_gives_the_run_saved_to_last(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    first = checkpoints(3, run_id="first")
    second = checkpoints(3, run_id="second")
    store(first[0])
    store(second[1])
    assert store.load() == second[1]
    store(first[1])
    assert store.load() == first[1]
    assert store.run_ids() == ["first", "second"]
    with pytest.raises(StaleCheckpointError):
        store(second[0])  # seq 1, below the seq 2 stored
    assert store.load() == first[1]  # a refused save is not the latest write
    store(second[2])
    assert store.load() == second[2]
    assert store.load("first") == first[1]
    assert store.run_ids() == ["second", "first"]


@pytest.mark.parametrize("shared", [True, False], ids=["one-store", "store-per-thread"])
def test_sqlite_concurrent_writers_never_go_backwards(tmp_path: Path, shared: bool) -> None:
    """Threads save shuffled seqs of one run; no load ever sees an older seq than before."""
    path = tmp_path / "runs.db"
    taken = checkpoints(20)
    common = SQLiteStore(path)
    start = threading.Barrier(6)
    problems: list[str] = []

    def writer(seed: int) -> None:
        store = common if shared else SQLiteStore(path)
        order = taken[:]
        random.Random(seed).shuffle(order)
        start.wait()
        seen = 0
        for checkpoint in order:
            try:
                store(checkpoint)
            except StaleCheckpointError as exc:
                seen = max(seen, exc.stored_seq)
            else:
                seen = max(seen, checkpoint.seq)
            loaded = store.load()
            if loaded is None or loaded.seq < seen:
                problems.append(f"writer {seed}: load() gave {loaded} after seq {seen}")
                return
            seen = loaded.seq

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
    assert common.load() == taken[-1]


def test_sqlite_damaged_row_is_an_error_naming_the_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store(checkpoints(1)[0])
    connection = sqlite3.connect(store.path)
    try:
        with connection:
            connection.execute("UPDATE executionkit_headers SET header = '{\"seq\": 1'")
    finally:
        connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        store.load("r")
    assert str(caught.value) == (
        f"SQLiteStore({str(store.path)!r}), run 'r': the stored checkpoint is not valid JSON "
        f"(Expecting ',' delimiter: line 1 column 10 (char 9))"
    )
    connection = sqlite3.connect(store.path)
    try:
        with connection:
            connection.execute("UPDATE executionkit_headers SET header = '{\"seq\": 1}'")
    finally:
        connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        store.load()
    assert str(caught.value) == (
        f"SQLiteStore({str(store.path)!r}), run 'r': checkpoint is missing key 'version' (a "
        f"dict without it is read as an ExecutionKit 0.4 checkpoint, which has only "
        f"'step_index', 'outputs' and 'cost', but this one also has 'seq')"
    )


def test_sqlite_refuses_memory_databases_and_checkpoints_without_run_id(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        SQLiteStore(":memory:")
    assert str(caught.value) == (
        "SQLiteStore needs a database file: each thread opens its own connection"
    )
    store = SQLiteStore(tmp_path / "runs.db")
    legacy = WorkflowCheckpoint(0, {}, TokenUsage(), version=0)
    with pytest.raises(ValueError) as caught:
        store(legacy)
    assert str(caught.value) == (
        f"SQLiteStore({str(store.path)!r}) keeps checkpoints by run_id, and this checkpoint "
        f"has none (an ExecutionKit 0.4 checkpoint?); resume from it and store the run's own"
    )


# --- every store, end to end ------------------------------------------------------------

STORES: list[tuple[str, Any]] = [
    ("json-file", lambda folder: JsonFileStore(folder / "run.json")),
    ("json-lines", lambda folder: JsonLinesStore(folder / "run.jsonl")),
    ("sqlite", lambda folder: SQLiteStore(folder / "runs.db")),
    ("sqlite-history", lambda folder: SQLiteStore(folder / "runs.db", history=True)),
]


@pytest.mark.parametrize("make", [make for _, make in STORES], ids=[name for name, _ in STORES])
def test_a_failed_run_resumes_from_the_store(tmp_path: Path, make: Any) -> None:
    """Fail at step 3 of 5; a new store on the same storage resumes, running only what is left."""
    ran: list[int] = []

    def workflow(fail_at: int | None) -> Workflow:
        def make_step(i: int) -> Step:
            def run(_ctx: Any) -> PatternResult[str]:
                ran.append(i)
                if i == fail_at:
                    msg = "rate limited"
                    raise RuntimeError(msg)
                return PatternResult(f"out {i}", cost=TokenUsage(10, 1, 1))

            return Step(f"s{i}", run, depends_on=(f"s{i - 1}",) if i else ())

        return Workflow([make_step(i) for i in range(5)])

    with pytest.raises(WorkflowFailed) as caught:
        workflow(fail_at=3).run_sync(checkpoint_fn=make(tmp_path), metadata={"job": 1})
    store = make(tmp_path)  # as a new process would
    saved = store.load()
    assert saved == caught.value.checkpoint
    assert dict(saved.errors) == {"s3": "RuntimeError: rate limited"}
    assert saved.cost == TokenUsage(30, 3, 3)

    kept: list[WorkflowCheckpoint] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        store(checkpoint)
        kept.append(checkpoint)

    result = workflow(fail_at=None).run_sync(checkpoint_fn=save, resume_from=saved)
    assert ran == [0, 1, 2, 3, 3, 4]
    assert result.executed == ("s3", "s4")
    assert make(tmp_path).load() == kept[-1]
    final = make(tmp_path).load()
    assert final is not None
    assert dict(final.outputs) == {f"s{i}": f"out {i}" for i in range(5)}
    assert final.cost == TokenUsage(50, 5, 5)
    assert final.run_id == saved.run_id
    assert workflow(fail_at=None).run_sync(resume_from=final).executed == ()
