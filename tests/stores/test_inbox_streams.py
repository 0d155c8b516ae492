"""Streamed text in the run inbox of every bundled store: kept, read elsewhere, deleted.

`RunInbox.put_streams`, `streams` and `drop_streams` on a JSON file, a JSON Lines
file, SQLite and PostgreSQL: another store object on the same location (another
process's view) reads what one wrote; entries are replaced whole, deleted as
attempts end, and kept apart from the other kinds of entry and from other runs.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import CheckpointFormatError, Step, Workflow
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore
from executionkit.stores._inbox import STREAM_KEPT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

KINDS = ("json-file", "json-lines", "sqlite", "postgres")
KEY = r"\('talk', None\)"  # as a message names it, for a regex


def opener(kind: str, tmp_path: Path, pg_uri: str) -> Any:
    """A function opening a new store object on one location of ``kind``."""
    if kind == "json-file":
        return lambda: JsonFileStore(tmp_path / "run.json")
    if kind == "json-lines":
        return lambda: JsonLinesStore(tmp_path / "run.jsonl")
    if kind == "sqlite":
        return lambda: SQLiteStore(tmp_path / "runs.db")
    return lambda: PostgresStore(pg_uri)


@pytest.fixture(params=KINDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two store objects on one location: the writer's and a reader's."""
    uri = request.getfixturevalue("pg_uri") if request.param == "postgres" else ""
    open_one = opener(request.param, tmp_path, uri)
    writer, reader = open_one(), open_one()
    yield writer, reader
    for store in (writer, reader):
        close = getattr(store, "close", None)
        if close is not None:
            close()


def test_a_text_kept_by_one_store_object_is_read_by_another(stores: tuple[Any, Any]) -> None:
    """What one object writes, a second one on the same location reads: attempt and text."""
    writer, reader = stores
    assert reader.inbox.streams("r1") == {}
    writer.inbox.put_streams("r1", {("talk", None): (1, "The cat")})
    assert reader.inbox.streams("r1") == {("talk", None): (1, "The cat")}
    writer.inbox.put_streams("r1", {("talk", None): (1, "The cat sat.")})
    assert reader.inbox.streams("r1") == {("talk", None): (1, "The cat sat.")}


def test_items_steps_and_runs_are_kept_apart(stores: tuple[Any, Any]) -> None:
    """A map's items, a sub-workflow's steps by path, and other runs each have their entry."""
    writer, reader = stores
    writer.inbox.put_streams(
        "r1",
        {
            ("drafts", "k1"): (1, "one"),
            ("drafts", "k2"): (3, "two"),
            ("drafts", None): (1, "the step"),
            ("review/draft", None): (2, "nested"),
        },
    )
    writer.inbox.put_streams("r2", {("drafts", "k1"): (1, "other run")})
    assert reader.inbox.streams("r1") == {
        ("drafts", "k1"): (1, "one"),
        ("drafts", "k2"): (3, "two"),
        ("drafts", None): (1, "the step"),
        ("review/draft", None): (2, "nested"),
    }
    assert reader.inbox.streams("r2") == {("drafts", "k1"): (1, "other run")}


def test_a_retry_replaces_the_failed_attempts_text(stores: tuple[Any, Any]) -> None:
    """The entry holds one attempt: a higher one written replaces the text whole."""
    writer, reader = stores
    writer.inbox.put_streams("r1", {("talk", None): (1, "first try, going wro")})
    writer.inbox.put_streams("r1", {("talk", None): (2, "second")})
    assert reader.inbox.streams("r1") == {("talk", None): (2, "second")}


def test_ended_attempts_are_deleted_in_the_same_write(stores: tuple[Any, Any]) -> None:
    """``ended`` deletes those entries, the others written beside stay."""
    writer, reader = stores
    writer.inbox.put_streams("r1", {("a", None): (1, "x"), ("b", "k"): (1, "y")})
    writer.inbox.put_streams("r1", {("a", None): (1, "xx")}, ended=[("b", "k"), ("gone", None)])
    assert reader.inbox.streams("r1") == {("a", None): (1, "xx")}
    writer.inbox.put_streams("r1", {}, ended=[("a", None)])
    assert reader.inbox.streams("r1") == {}


def test_replace_all_deletes_what_an_earlier_process_left(stores: tuple[Any, Any]) -> None:
    """The first write of a run in a new process deletes every entry it did not write."""
    writer, reader = stores
    reader.inbox.put_streams("r1", {("a", None): (1, "stale"), ("b", None): (2, "stale")})
    reader.inbox.put_streams("r2", {("a", None): (1, "another run")})
    writer.inbox.put_streams("r1", {("b", None): (3, "new")}, replace_all=True)
    assert reader.inbox.streams("r1") == {("b", None): (3, "new")}
    writer.inbox.put_streams("r1", {}, replace_all=True)
    assert reader.inbox.streams("r1") == {}
    assert reader.inbox.streams("r2") == {("a", None): (1, "another run")}


def test_since_leaves_out_the_entries_written_before_it(stores: tuple[Any, Any]) -> None:
    """``since`` (an owner's claim) hides what a process that ran the run before left."""
    writer, reader = stores
    writer.inbox.put_streams("r1", {("a", None): (1, "left by a killed process")})
    claimed = datetime.now(UTC)
    writer.inbox.put_streams("r1", {("b", None): (1, "the owner's")})
    assert reader.inbox.streams("r1", since=claimed) == {("b", None): (1, "the owner's")}
    assert reader.inbox.streams("r1") == {
        ("a", None): (1, "left by a killed process"),
        ("b", None): (1, "the owner's"),
    }
    writer.inbox.put_streams("r1", {("a", None): (2, "the owner's retry")})  # written anew
    assert reader.inbox.streams("r1", since=claimed) == {
        ("a", None): (2, "the owner's retry"),
        ("b", None): (1, "the owner's"),
    }
    later = datetime.now(UTC) + timedelta(seconds=1)
    assert reader.inbox.streams("r1", since=later) == {}


def test_drop_streams_deletes_some_or_all(stores: tuple[Any, Any]) -> None:
    """`drop_streams` deletes the keys given, or every entry of the run."""
    writer, reader = stores
    writer.inbox.put_streams("r1", {("a", None): (1, "x"), ("b", None): (1, "y")})
    writer.inbox.drop_streams("r1", [("a", None)])
    assert reader.inbox.streams("r1") == {("b", None): (1, "y")}
    writer.inbox.drop_streams("r1")
    assert reader.inbox.streams("r1") == {}


def test_only_the_latest_characters_are_kept(stores: tuple[Any, Any]) -> None:
    """A text longer than 65,536 characters is kept as its latest 65,536."""
    writer, reader = stores
    text = "a" * 10 + "b" * STREAM_KEPT
    writer.inbox.put_streams("r1", {("talk", None): (1, text)})
    assert reader.inbox.streams("r1") == {("talk", None): (1, "b" * STREAM_KEPT)}


def test_any_text_is_stored_a_lone_surrogate_as_a_question_mark(
    stores: tuple[Any, Any],
) -> None:
    """Quotes, newlines, NUL, emoji and markup come back as they were; a lone surrogate as ?."""
    writer, reader = stores
    hostile = 'say "hi"\n\t\x00 </script> 🦉 ' + "\\u0000"
    writer.inbox.put_streams(
        "r1", {("talk", None): (1, hostile), ("talk", "k\ud800"): (1, "half \udc00 a pair")}
    )
    assert reader.inbox.streams("r1") == {
        ("talk", None): (1, hostile),
        ("talk", "k?"): (1, "half ? a pair"),
    }


def test_streams_stay_apart_from_the_other_entries(stores: tuple[Any, Any]) -> None:
    """Submissions and answers are not streams, and streams are none of them."""
    writer, reader = stores
    writer.inbox.submit("r1", {"topic": "owls"})
    writer.inbox.save_answer("r1", "approve", "yes")
    writer.inbox.put_streams("r1", {("talk", None): (1, "x")}, replace_all=True)
    assert reader.inbox.answers("r1") == {"approve": "yes"}
    assert [s.run_id for s in reader.inbox.submissions()] == ["r1"]
    writer.inbox.drop_streams("r1")
    assert reader.inbox.answers("r1") == {"approve": "yes"}
    assert reader.inbox.submission("r1") is not None


def test_forget_deletes_the_streams_too(stores: tuple[Any, Any]) -> None:
    """`forget(run_id)` deletes every entry of the run, its streamed text included."""
    writer, reader = stores
    writer.inbox.put_streams("r1", {("talk", None): (1, "x")})
    reader.inbox.forget("r1")
    assert writer.inbox.streams("r1") == {}


def test_a_write_with_nothing_to_do_writes_nothing(tmp_path: Path) -> None:
    """No text, nothing ended, no replace_all: no file is even created."""
    store = JsonFileStore(tmp_path / "run.json")
    store.inbox.put_streams("r1", {}, ended=[])
    assert not (tmp_path / "run.json.inbox").exists()


def test_a_sql_store_deletes_a_runs_streams_with_the_run(tmp_path: Path) -> None:
    """`SQLiteStore.delete(run_id)` deletes the run's streamed text with its checkpoints."""
    store = SQLiteStore(tmp_path / "runs.db")
    Workflow([Step("a", lambda _ctx: 1)]).run_sync(checkpoint_fn=store, run_id="r1")
    store.inbox.put_streams("r1", {("talk", None): (1, "x")})
    assert store.delete("r1")
    assert store.inbox.streams("r1") == {}


TALK = ("talk", None)
PAIR = r"\(str, str or None\)"


@pytest.mark.parametrize(
    ("texts", "error", "message"),
    [
        ({"talk": (1, "x")}, TypeError, r"a key must be a \(step, item\) tuple, got 'talk'"),
        ({("talk", 3): (1, "x")}, TypeError, rf"a key must be {PAIR}, got \(str, int\)"),
        ({("", None): (1, "x")}, ValueError, r"the step of key \('', None\) is empty"),
        ({TALK: ("1", "x")}, TypeError, rf"the attempt of {KEY} must be an int, got str"),
        ({TALK: (True, "x")}, TypeError, rf"the attempt of {KEY} must be an int, got bool"),
        ({TALK: (0, "x")}, ValueError, rf"the attempt of {KEY} must be 1 or more, got 0"),
        ({TALK: (1, b"x")}, TypeError, rf"the text of {KEY} must be a str, got bytes"),
    ],
)
def test_bad_entries_are_refused_naming_them(
    tmp_path: Path, texts: dict[Any, Any], error: type[Exception], message: str
) -> None:
    """Keys, attempts and texts are checked before anything is written; the run is named."""
    store = SQLiteStore(tmp_path / "runs.db")
    with pytest.raises(error, match=rf"streams of run 'r1': {message}"):
        store.inbox.put_streams("r1", texts)
    assert not (tmp_path / "runs.db").exists()


def test_a_damaged_entry_is_named(tmp_path: Path) -> None:
    """An entry that does not read back as a stream raises `CheckpointFormatError` naming it."""
    store = SQLiteStore(tmp_path / "runs.db")
    store.inbox.put_streams("r1", {("talk", None): (1, "x")})
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        connection.execute(
            "UPDATE executionkit_inbox SET value = ? WHERE kind = 'stream'",
            (json.dumps({"attempt": "one", "text": "x"}),),
        )
    connection.close()
    with pytest.raises(CheckpointFormatError, match="the streamed text of run 'r1' is damaged"):
        store.inbox.streams("r1")


def test_an_entry_of_no_time_is_named_damaged(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store.inbox.put_streams("r1", {("talk", None): (1, "x")})
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        connection.execute("UPDATE executionkit_inbox SET at = 'yesterday' WHERE kind = 'stream'")
    connection.close()
    with pytest.raises(CheckpointFormatError, match="written at 'yesterday' \\(expected an ISO"):
        store.inbox.streams("r1")
