"""executionkit.stores against hostile values and damaged or odd storage (issue 12).

Outputs a store cannot write fail the save with `CheckpointValueError` naming
the step and leave the stored checkpoint alone; stored data that is damaged,
however oddly, fails with `CheckpointFormatError` naming the file (and line, or
run); a path that is not a regular file is refused at once instead of blocking.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointFormatError,
    CheckpointValueError,
    Step,
    Workflow,
    WorkflowCheckpoint,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore, StaleCheckpointError
from executionkit.stores._common import same_json

if TYPE_CHECKING:
    from collections.abc import Callable

DATA_HINT = (
    "stores write JSON, so steps must return dicts, lists, str, int, finite float, bool or "
    "None (or give the Step encode/decode; run with validate_json=True to catch this when the "
    "step returns)"
)
SURROGATE = "which UTF-8 cannot encode (a name os.listdir or os.fsdecode could not decode?)"
INT_LIMIT = (
    "Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; "
    "use sys.set_int_max_str_digits() to increase the limit"
)
HUGE = "1" * 5000
DEEP = "[" * 100_000 + "]" * 100_000
TOO_DEEP = "nested too deeply to read"

STORES: list[tuple[str, Callable[[Path], Any]]] = [
    ("json-file", lambda folder: JsonFileStore(folder / "run.json")),
    ("json-lines", lambda folder: JsonLinesStore(folder / "run.jsonl")),
    ("sqlite", lambda folder: SQLiteStore(folder / "runs.db")),
]
ALL_STORES = pytest.mark.parametrize(
    "make", [make for _, make in STORES], ids=[name for name, _ in STORES]
)


def two_checkpoints(output: object) -> list[WorkflowCheckpoint]:
    """seq 1 records 'good'; seq 2 adds 'odd', which returned ``output``."""
    taken: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [Step("good", lambda _ctx: "fine"), Step("odd", lambda _ctx: output, depends_on=("good",))]
    )
    workflow.run_sync(checkpoint_fn=taken.append, run_id="r")
    assert [checkpoint.seq for checkpoint in taken] == [1, 2]
    return taken


def named(store: Any) -> str:
    """How a store's CheckpointFormatError starts: the file, or the store and its file."""
    return repr(store) if isinstance(store, SQLiteStore) else str(store.path)


def refused(store: Any, kind: str) -> str:
    """The message of a store given a path that is not a regular file."""
    if isinstance(store, SQLiteStore):
        return f"{store!r}: not a database file: it is {kind}, not a regular file"
    return f"{store.path}: not a checkpoint file: it is {kind}, not a regular file"


# --- 1. lone surrogates -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "where", "problem"),
    [
        (
            {"names": ["ok", "caf\udce9"]},
            " at ['names'][1]",
            f"'caf\\udce9' (str) holds the lone surrogate '\\udce9' at index 3, {SURROGATE}",
        ),
        (
            {"caf\udce9": 1},
            "",
            f"key 'caf\\udce9' holds the lone surrogate '\\udce9' at index 3, {SURROGATE}",
        ),
        (
            "\ud800 alone",
            "",
            f"'\\ud800 alone' (str) holds the lone surrogate '\\ud800' at index 0, {SURROGATE}",
        ),
    ],
    ids=["value", "key", "whole-output"],
)
@ALL_STORES
def test_a_lone_surrogate_fails_the_save_naming_the_step_and_keeps_the_old_checkpoint(
    tmp_path: Path, make: Any, output: object, where: str, problem: str
) -> None:
    """What os.listdir gives for undecodable names: CheckpointValueError, nothing half-written."""
    store = make(tmp_path)
    first, second = two_checkpoints(output)
    store(first)
    with pytest.raises(CheckpointValueError) as caught:
        store(second)
    assert str(caught.value) == (
        f"{store!r}: cannot store checkpoint seq=2 of run 'r': the output of step 'odd'"
        f"{where}: {problem}; {DATA_HINT}"
    )
    assert caught.value.path == where.removeprefix(" at ")
    assert make(tmp_path).load() == first
    assert store.load() == first


@ALL_STORES
def test_a_surrogate_in_an_error_message_is_named_too(tmp_path: Path, make: Any) -> None:
    """A step failed on an undecodable file name: its error text is named, not a bare error."""
    store = make(tmp_path)
    first = two_checkpoints("x")[0]
    broken = WorkflowCheckpoint.from_dict(
        {**first.to_dict(), "seq": 2, "errors": {"odd": "OSError: caf\udce9"}}
    )
    with pytest.raises(CheckpointValueError) as caught:
        store(broken)
    assert str(caught.value) == (
        f"{store!r}: cannot store checkpoint seq=2 of run 'r': the error of step 'odd': "
        f"'OSError: caf\\udce9' (str) holds the lone surrogate '\\udce9' at index 12, "
        f"{SURROGATE}; {DATA_HINT}"
    )
    assert not Path(store.path).exists()


@ALL_STORES
def test_an_int_past_the_digit_limit_fails_the_save_naming_the_step(
    tmp_path: Path, make: Any
) -> None:
    store = make(tmp_path)
    with pytest.raises(CheckpointValueError) as caught:
        store(two_checkpoints({"n": [10**5000]})[1])
    assert str(caught.value).startswith(
        f"{store!r}: cannot store checkpoint seq=2 of run 'r': the output of step 'odd' at "
        f"['n'][0]: an int of 16610 bits cannot be written: Exceeds the limit (4300 digits) "
    )
    assert caught.value.value == 10**5000


@ALL_STORES
def test_an_output_too_deep_for_json_names_the_step(tmp_path: Path, make: Any) -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    store = make(tmp_path)
    with pytest.raises(CheckpointValueError) as caught:
        store(two_checkpoints(deep)[1])
    assert str(caught.value).startswith(
        f"{store!r}: cannot store checkpoint seq=2 of run 'r': the output of step 'odd': json "
        f"cannot write it (RecursionError: maximum recursion depth exceeded"
    )
    assert str(caught.value).endswith(DATA_HINT)
    assert caught.value.path == ""


# --- 2. damaged data --------------------------------------------------------------------


def test_json_lines_names_that_are_not_str_are_damage(tmp_path: Path) -> None:
    """A list where a step name is expected is a damaged line, not a TypeError."""
    path = tmp_path / "run.jsonl"
    path.write_text('{"s": 1, "n": {}, "c": [0, 0, 0], "run": {"keep": [[1]]}}\n')
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).load()
    assert str(caught.value) == (
        f"{path}:1: not a checkpoint line ('run.keep' must be a list of step names, got [1])"
    )


def write_row(store: SQLiteStore, data: object, column: str = "data") -> None:
    """Save a good checkpoint of run 'r', then damage one column: its header, seq or run_id."""
    store(two_checkpoints("x")[0])
    table, name = {
        "data": ("executionkit_headers", "header"),
        "seq": ("executionkit_runs", "seq"),
        "run_id": ("executionkit_runs", "run_id"),
    }[column]
    connection = sqlite3.connect(store.path)
    try:
        with connection:
            connection.execute(f"UPDATE {table} SET {name} = ?", (data,))  # noqa: S608
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("text", "file_problem", "line_problem", "row_problem"),
    [
        (
            f'{{"seq": {HUGE}}}',
            f"unreadable JSON ({INT_LIMIT})",
            f"unreadable JSON: {INT_LIMIT}",
            f"is unreadable JSON ({INT_LIMIT})",
        ),
        (DEEP, f"unreadable JSON ({TOO_DEEP})", f"unreadable JSON: {TOO_DEEP}", TOO_DEEP),
    ],
    ids=["huge-int", "deep"],
)
def test_json_python_cannot_read_is_damage_naming_the_file(
    tmp_path: Path, text: str, file_problem: str, line_problem: str, row_problem: str
) -> None:
    """A 5,000-digit int or a list nested 100,000 deep: CheckpointFormatError in every store."""
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(CheckpointFormatError) as caught:
        JsonFileStore(path).load()
    assert str(caught.value) == f"{path}: not a checkpoint file: {file_problem}"
    with pytest.raises(CheckpointFormatError):
        JsonFileStore(path)(two_checkpoints("x")[0])
    assert path.read_text() == text

    lines = tmp_path / "run.jsonl"
    good = '{"s": 1, "n": {}, "c": [0, 0, 0]}\n'
    for content, number in ((text + "\n" + good, 1), (good + text + "\n", 2)):
        lines.write_text(content)
        with pytest.raises(CheckpointFormatError) as caught:
            JsonLinesStore(lines).load()
        assert str(caught.value) == f"{lines}:{number}: not a checkpoint line ({line_problem})"

    db = SQLiteStore(tmp_path / "runs.db", history=True)
    write_row(db, text)
    for read in (db.load, lambda: db.load("r"), lambda: db.history("r")):
        with pytest.raises(CheckpointFormatError) as caught:
            read()
        assert str(caught.value).startswith(f"{db!r}, run 'r': the stored checkpoint ")
        assert row_problem in str(caught.value)


def test_a_json_lines_last_line_python_cannot_read_is_not_mistaken_for_a_torn_one(
    tmp_path: Path,
) -> None:
    """A torn line is cut short; a complete line holding a 5,000-digit int is damage."""
    path = tmp_path / "run.jsonl"
    path.write_text('{"s": 1, "n": {}, "c": [0, 0, 0]}\n{"s": 2, "n": {"a": [' + HUGE + ", []]}")
    assert JsonLinesStore(path).load() is not None  # torn: no newline yet
    path.write_text(path.read_text() + "\n")
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).load()
    assert str(caught.value) == f"{path}:2: not a checkpoint line (unreadable JSON: {INT_LIMIT})"


def test_json_lines_invalid_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"s": 1, "n": {"a": ["caf\xe9", []]}, "c": [0, 0, 0]}\n\n')
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).load()
    assert str(caught.value) == (
        f"{path}:1: not a checkpoint line (not UTF-8 text: invalid continuation byte at byte 25)"
    )


def test_sqlite_invalid_utf8_or_non_text_data_is_damage_naming_the_run(tmp_path: Path) -> None:
    db = SQLiteStore(tmp_path / "runs.db")
    write_row(db, b"{\xff}")
    connection = sqlite3.connect(db.path)
    try:
        with connection:  # the same bytes as TEXT, which sqlite3 cannot decode by itself
            connection.execute("UPDATE executionkit_headers SET header = CAST(header AS TEXT)")
    finally:
        connection.close()
    for read in (db.load, lambda: db.load("r"), lambda: db.history("r")):
        with pytest.raises(CheckpointFormatError) as caught:
            read()
        assert str(caught.value) == (
            f"{db!r}, run 'r': the stored checkpoint is not UTF-8 text (invalid start byte at "
            f"byte 1)"
        )
    assert db.run_ids() == ["r"]
    blob = SQLiteStore(tmp_path / "blob.db")
    write_row(blob, b'{"version": 2}')  # a BLOB of UTF-8 JSON is read like text
    with pytest.raises(
        CheckpointFormatError, match=r"'r': checkpoint field 'context_keys' is missing$"
    ):
        blob.load()


def test_sqlite_a_null_checkpoint_in_a_table_made_by_hand_is_damage(tmp_path: Path) -> None:
    """The store creates its tables only if missing; one made without NOT NULL may hold NULL."""
    db = SQLiteStore(tmp_path / "runs.db")
    db(two_checkpoints("x")[0])
    connection = sqlite3.connect(db.path)
    try:
        with connection:
            connection.execute("DROP TABLE executionkit_headers")
            connection.execute(
                "CREATE TABLE executionkit_headers (run_id TEXT, seq INTEGER, created_at TEXT, "
                "header TEXT)"
            )
            connection.execute("INSERT INTO executionkit_headers VALUES ('r', 1, NULL, NULL)")
    finally:
        connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        db.load()
    assert (
        str(caught.value)
        == f"{db!r}, run 'r': the stored checkpoint is not JSON text, got NoneType None"
    )


def test_sqlite_a_seq_that_is_not_an_int_is_damage_on_write(tmp_path: Path) -> None:
    db = SQLiteStore(tmp_path / "runs.db")
    write_row(db, "three", column="seq")
    with pytest.raises(CheckpointFormatError) as caught:
        db(two_checkpoints("x")[1])
    assert str(caught.value) == (
        f"{db!r}, run 'r': the stored seq must be an int, got str 'three'"
    )


@pytest.mark.parametrize(
    "content",
    [b"this is a text file, not a database\n" * 10, b"SQLite format 3\x00" + b"\xff" * 200],
    ids=["text", "bad-header"],
)
def test_a_file_that_is_not_an_sqlite_database_is_damage_naming_it(
    tmp_path: Path, content: bytes
) -> None:
    """On load, history, run_ids and write: CheckpointFormatError, and the file is untouched."""
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    db = SQLiteStore(path)
    calls: list[Callable[[], object]] = [
        db.load,
        lambda: db.history("r"),
        db.run_ids,
        lambda: db(two_checkpoints("x")[0]),
    ]
    for call in calls:
        with pytest.raises(CheckpointFormatError) as caught:
            call()
        assert str(caught.value).startswith(f"{db!r}: not an SQLite database (")
    assert path.read_bytes() == content


def test_sqlite_still_reports_a_locked_database_as_sqlite_does(tmp_path: Path) -> None:
    """Only damage becomes CheckpointFormatError: a lock held too long stays OperationalError."""
    db = SQLiteStore(tmp_path / "runs.db", timeout=0.01)
    first, second = two_checkpoints("x")
    db(first)
    blocker = sqlite3.connect(db.path, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            db(second)
        assert db.load() == first  # WAL: readers never wait for a writer
    finally:
        blocker.close()


@ALL_STORES
def test_a_recursion_error_from_reading_the_checkpoint_names_the_file(
    tmp_path: Path, make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deep data that json reads but from_dict cannot walk is damage too, whoever recursed."""
    store = make(tmp_path)
    store(two_checkpoints("x")[0])

    def too_deep(_data: object) -> WorkflowCheckpoint:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(WorkflowCheckpoint, "from_dict", too_deep)
    with pytest.raises(CheckpointFormatError) as caught:
        make(tmp_path).load()
    assert str(caught.value).startswith(named(store))
    assert str(caught.value).endswith(f": {TOO_DEEP}")


# --- 3. paths that are not regular files ------------------------------------------------


def bounded(call: Callable[[], object], fifo: Path) -> BaseException | None:
    """Run ``call`` in a thread for at most 10 s: what it raised, or None; fail if it blocks."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10)
    if thread.is_alive():
        # Unblock an open() stuck on the FIFO by opening its other end, then report.
        for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, flags))
        pytest.fail(f"{call} blocked on the FIFO {fifo}")
    return outcome[0]


@ALL_STORES
def test_a_fifo_is_refused_at_once_naming_it(tmp_path: Path, make: Any) -> None:
    """load() and a save raise CheckpointFormatError instead of waiting for a writer."""
    store = make(tmp_path)
    os.mkfifo(store.path)
    calls: list[Callable[[], object]] = [store.load, lambda: store(two_checkpoints("x")[0])]
    if isinstance(store, SQLiteStore):
        calls += [lambda: store.history("r"), store.run_ids]
    for call in calls:
        raised = bounded(call, store.path)
        assert isinstance(raised, CheckpointFormatError), raised
        assert str(raised) == refused(store, "a FIFO")


def test_a_device_is_refused_naming_it() -> None:
    """/dev/null reads as empty: it used to load as 'nothing saved' (and a save replaced it)."""
    device = Path(os.devnull)
    with pytest.raises(CheckpointFormatError) as caught:
        JsonFileStore(device).load()
    assert str(caught.value) == (
        f"{device}: not a checkpoint file: it is a character device, not a regular file"
    )
    with pytest.raises(CheckpointFormatError, match="it is a character device"):
        JsonLinesStore(device).load()
    with pytest.raises(CheckpointFormatError, match="not a database file: it is a character"):
        SQLiteStore(device).run_ids()


@ALL_STORES
def test_a_folder_fails_as_opening_it_does(tmp_path: Path, make: Any) -> None:
    """IsADirectoryError naming it, from every store and call (SQLite said 'unable to open')."""
    store = make(tmp_path)
    store.path.mkdir()
    calls: list[Callable[[], object]] = [store.load, lambda: store(two_checkpoints("x")[0])]
    if isinstance(store, SQLiteStore):
        calls += [lambda: store.history("r"), store.run_ids]
    for call in calls:
        with pytest.raises(IsADirectoryError) as caught:
            call()
        assert str(caught.value) == f"[Errno 21] Is a directory: {str(store.path)!r}"


# --- odd corners ------------------------------------------------------------------------


def test_a_value_whose_repr_fails_is_still_named(tmp_path: Path) -> None:
    """A set holding an int past the digit limit cannot even be shown: its type is."""
    store = JsonFileStore(tmp_path / "run.json")
    with pytest.raises(CheckpointValueError) as caught:
        store(two_checkpoints({"ids": {10**5000}})[1])
    assert "the output of step 'odd' at ['ids']: <set object> (set) is not JSON data" in str(
        caught.value
    )


@pytest.mark.parametrize("index", [0, 1], ids=["same-seq", "newer-seq"])
def test_sqlite_a_damaged_row_is_reported_on_save_never_replaced(
    tmp_path: Path, index: int
) -> None:
    """As the docs promise: the save raises CheckpointFormatError and the row stays as it was."""
    db = SQLiteStore(tmp_path / "runs.db")
    write_row(db, '{"torn')
    with pytest.raises(CheckpointFormatError) as caught:
        db(two_checkpoints("x")[index])
    assert str(caught.value) == (
        f"{db!r}, run 'r': the stored checkpoint is not valid JSON (Unterminated string "
        f"starting at: line 1 column 2 (char 1))"
    )
    connection = sqlite3.connect(db.path)
    try:
        rows = connection.execute("SELECT seq, header FROM executionkit_headers").fetchall()
    finally:
        connection.close()
    assert rows == [(1, '{"torn')]


def test_texts_that_cannot_be_compared_are_not_the_same() -> None:
    assert same_json("[1]", "[1]")
    assert same_json('{"a":1,"b":2}', '{"b":2,"a":1}')
    assert not same_json(DEEP, "[]")
    assert not same_json("1" * 5000, "1")


def test_sqlite_a_run_id_that_is_not_text_is_damage(tmp_path: Path) -> None:
    db = SQLiteStore(tmp_path / "runs.db")
    write_row(db, b"caf\xe9", column="run_id")
    connection = sqlite3.connect(db.path)
    try:
        with connection:
            connection.execute("UPDATE executionkit_runs SET run_id = CAST(run_id AS TEXT)")
    finally:
        connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        db.run_ids()
    assert str(caught.value) == f"{db!r}: a stored run_id is not text: b'caf\\xe9'"


def test_json_lines_a_stored_checkpoint_no_store_could_write_is_not_the_same(
    tmp_path: Path,
) -> None:
    """A hand-edited line holding an escaped lone surrogate: the same seq again is refused."""
    path = tmp_path / "run.jsonl"
    first = two_checkpoints("x")[0]
    JsonLinesStore(path)(first)
    path.write_text(path.read_text().replace('"fine"', '"\\udce9"'))
    assert JsonLinesStore(path).load() != first
    with pytest.raises(StaleCheckpointError):
        JsonLinesStore(path)(first)


class TooDeepToCompare(list[Any]):
    """A list whose comparison recurses too deep, as one nested a thousand levels could."""

    def __eq__(self, other: object) -> bool:
        raise RecursionError("maximum recursion depth exceeded in comparison")

    __hash__ = None


def test_json_lines_an_output_too_deep_to_compare_is_written_again(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    first, second = two_checkpoints("x")
    store = JsonLinesStore(path)
    store(first)
    again = WorkflowCheckpoint.from_dict(
        {**second.to_dict(), "outputs": {"good": TooDeepToCompare(["f"]), "odd": "x"}}
    )
    store(again)
    assert '"good":[["f"]' in path.read_text().splitlines()[1]
    assert JsonLinesStore(path).load() == WorkflowCheckpoint.from_dict(
        {**second.to_dict(), "outputs": {"good": ["f"], "odd": "x"}}
    )
