"""A store's run inbox: runs submitted to start, answers saved, runs a worker left alone.

What is handed to a store for a run that no process is running, for a worker
(``executionkit worker``) to act on: a submitted run's inputs and metadata, the
answers people saved for its questions, and why a worker could not resume it.
Checkpoints never hold any of it: a run started any other way stores no inputs.
Beside them, while a run runs, the text its running attempts stream
(`StepContext.stream`), for a page in another process to show
(`RunInbox.put_streams`, written by `executionkit.stores.StreamPublisher`).

Each store keeps these entries beside its checkpoints (the SQL stores in the
table ``executionkit_inbox``, created on first use outside the checkpoint
tables' schema version; the file stores in a ``<file>.inbox`` file beside the
checkpoint file), through the four calls of `InboxRows`. `RunInbox` is what
every store shares on top of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from executionkit._errors import CheckpointFormatError
from executionkit._plain import plain_copy
from executionkit.stores._common import dumps, loads
from executionkit.stores._files import check_regular, read_bytes, replace_file
from executionkit.stores._sql_schema import (
    INBOX_ADD,
    INBOX_DROP_KIND,
    INBOX_DROP_NAME,
    INBOX_ROWS,
    INBOX_RUN_ROWS,
    INBOX_SET,
)

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence  # noqa: TC004 - dataclass annotations stay strings
    from pathlib import Path

    from executionkit.stores._sql_schema import Database

SUBMITTED = "submitted"
ANSWER = "answer"
LEFT = "left"
STREAM = "stream"
STREAM_KEPT = 65536
"""Characters of a running attempt's streamed text kept in the store: the latest ones."""
_COLUMNS = 5  # of a row in the inbox file

Row = tuple[str, str, str, str]
"""One entry as `InboxRows.rows` gives it: run_id, name, value (JSON text), when (ISO)."""

StreamKey = tuple[str, str | None]
"""Whose streamed text: the step's path in the run and the map item's key (None: no item)."""


class InboxRows(Protocol):
    """How a store keeps inbox entries: a row per (run, kind, name), its value as JSON text."""

    def put(
        self, run_id: str, kind: str, name: str, value: str, at: str, *, replace: bool
    ) -> bool:
        """Write one entry; without ``replace`` only if it is new. Whether it was written."""
        ...

    def rows(self, kind: str, run_id: str | None) -> list[Row]:
        """The entries of ``kind`` (of ``run_id`` only, if given), oldest first."""
        ...

    def drop(self, kind: str | None, run_id: str, names: Sequence[str] | None) -> None:
        """Delete the entries of ``run_id`` of ``kind`` (every kind if None), of ``names``."""
        ...

    def put_many(
        self,
        run_id: str,
        kind: str,
        values: Mapping[str, str],
        at: str,
        *,
        drop: Sequence[str] | None,
    ) -> None:
        """In one change: delete entries of ``run_id`` of ``kind``, then write ``values``.

        ``drop`` names the entries deleted (every one of the kind if None);
        each of ``values`` (name to JSON text) then replaces its entry.
        """
        ...


@dataclass(frozen=True, slots=True)
class Submission:
    """A run submitted to start (`Workflow.submit`): its inputs and metadata as stored.

    Attributes:
        run_id: The run's id.
        inputs: The ``initial_context`` every run and resume of it is given.
        metadata: The ``metadata`` its checkpoints carry.
        submitted_at: When it was submitted, an ISO 8601 UTC time.
        steps: The names of the submitted workflow's steps: a worker of
            another workflow sharing the database leaves the run alone.
    """

    run_id: str
    inputs: Mapping[str, Any]
    metadata: Mapping[str, Any]
    submitted_at: str
    steps: tuple[str, ...] = ()


class RunInbox:
    """What a store holds for runs a worker carries on, apart from their checkpoints.

    Every bundled store has one as ``store.inbox``. Values are plain JSON data,
    checked when they are handed over; what is stored is a copy.
    """

    def __init__(
        self, store: str, rows: InboxRows, exists: Callable[[str], bool], *, one_run: bool
    ) -> None:
        """Keep entries of the store named ``store`` through ``rows``.

        ``exists(run_id)`` says whether the store holds a checkpoint of a run;
        ``one_run`` says the store holds one run (a file), so one submission.
        """
        self._store = store
        self._rows = rows
        self._exists = exists
        self._one_run = one_run

    def __repr__(self) -> str:
        """Name the store."""
        return f"{self._store}.inbox"

    def submit(
        self,
        run_id: str,
        inputs: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        steps: Sequence[str] = (),
    ) -> Submission:
        """Record a run to start, with its inputs and metadata; `Workflow.submit` calls this.

        Raises:
            ValueError: If the store holds a checkpoint or a submission of
                ``run_id`` already (or, a file holding one run, of any run).
            CheckpointValueError: If ``inputs`` or ``metadata`` is not plain
                JSON data; the message names the key.
        """
        if not run_id:
            msg = f"{self!r}.submit: run_id must be a non-empty str, got {run_id!r}"
            raise TypeError(msg)
        stored = {
            "inputs": _plain_dict(inputs, f"inputs of run {run_id!r}"),
            "metadata": _plain_dict(metadata, f"metadata of run {run_id!r}"),
            "steps": [str(name) for name in steps],
        }
        if self._one_run:
            held = self._rows.rows(SUBMITTED, None)
            if held and held[0][0] != run_id:
                msg = (
                    f"{self._store} holds one run, and run {held[0][0]!r} was submitted to "
                    f"it already: submit {run_id!r} to a file of its own"
                )
                raise ValueError(msg)
        if self._exists(run_id):
            msg = (
                f"{self._store} holds checkpoints of run {run_id!r} already: it was started "
                f"before; submit a new run_id (or resume this one)"
            )
            raise ValueError(msg)
        at = _now()
        if not self._rows.put(run_id, SUBMITTED, "", dumps(stored), at, replace=False):
            msg = f"{self._store}: run {run_id!r} was submitted already; submit a new run_id"
            raise ValueError(msg)
        return self._submission((run_id, "", dumps(stored), at))

    def submission(self, run_id: str) -> Submission | None:
        """The submission of ``run_id``, or None if it was not submitted (or was withdrawn)."""
        rows = self._rows.rows(SUBMITTED, run_id)
        return None if not rows else self._submission(rows[0])

    def submissions(self) -> list[Submission]:
        """Every submission the store holds, the oldest first."""
        return [self._submission(row) for row in self._rows.rows(SUBMITTED, None)]

    def save_answer(self, run_id: str, question: str, value: object) -> None:
        """Save ``value`` as the answer to ``question`` of ``run_id``, replacing one saved before.

        Nothing runs: a worker resumes the run with it (`executionkit worker`),
        and an answer to a question no longer pending is ignored then. A run
        a worker left alone (say, its check refused the last answer) is taken
        back.
        ``question`` is the question's path, as ``waiting`` lists it
        (``review/approve`` in a sub-workflow).

        Raises:
            CheckpointValueError: If ``value`` is not plain JSON data.
        """
        if not question:
            msg = f"{self!r}.save_answer: question must be a non-empty str, got {question!r}"
            raise TypeError(msg)
        copy = plain_copy(value, f"answer to {question!r} of run {run_id!r}")
        self._rows.put(run_id, ANSWER, question, dumps(copy), _now(), replace=True)
        self._rows.drop(LEFT, run_id, None)  # a new answer: workers try the run again

    def answers(self, run_id: str) -> dict[str, Any]:
        """The answers saved for ``run_id``'s questions, by question path."""
        return {
            name: self._value(run_id, ANSWER, value)
            for _, name, value, _ in self._rows.rows(ANSWER, run_id)
        }

    def all_answers(self) -> dict[str, dict[str, Any]]:
        """The answers saved for every run, by run and question path, in one read."""
        found: dict[str, dict[str, Any]] = {}
        for run_id, name, value, _ in self._rows.rows(ANSWER, None):
            found.setdefault(run_id, {})[name] = self._value(run_id, ANSWER, value)
        return found

    def forget_answers(self, run_id: str, questions: Iterable[str] | None = None) -> None:
        """Delete the saved answers of ``run_id`` (to ``questions`` only, if given)."""
        self._rows.drop(ANSWER, run_id, None if questions is None else list(questions))

    def leave_alone(self, run_id: str, reason: str) -> None:
        """Record that a worker could not resume ``run_id`` and why; workers then skip it."""
        self._rows.put(run_id, LEFT, "", dumps(reason), _now(), replace=True)

    def left_alone(self) -> dict[str, str]:
        """The runs workers left alone, each with the reason, the oldest first."""
        return {
            run_id: str(self._value(run_id, LEFT, value))
            for run_id, _, value, _ in self._rows.rows(LEFT, None)
        }

    def take_back(self, run_id: str) -> None:
        """Let workers try ``run_id`` again (it was left alone)."""
        self._rows.drop(LEFT, run_id, None)

    def forget(self, run_id: str) -> None:
        """Delete every entry of ``run_id``: its submission, answers, note and streamed text."""
        self._rows.drop(None, run_id, None)

    def put_streams(
        self,
        run_id: str,
        texts: Mapping[StreamKey, tuple[int, str]],
        *,
        ended: Iterable[StreamKey] = (),
        replace_all: bool = False,
    ) -> None:
        """Keep the text each running attempt of ``run_id`` streamed so far, in one write.

        For a page in another process to show while the run runs; never part
        of a checkpoint. `StreamPublisher` calls this for a run's listeners.

        Args:
            run_id: The run (a sub-workflow's steps are the run's, by path).
            texts: For each ``(step path, item key or None)``, the running
                attempt's number and its whole text so far; it replaces the
                entry kept of that step (item). Only the latest `STREAM_KEPT`
                (65,536) characters are kept; a lone surrogate is kept as ``?``.
            ended: Steps (items) whose attempt ended: their entries are deleted.
            replace_all: Delete every other entry of the run first: what a
                process that ran it before left behind.

        Raises:
            TypeError: If a key, attempt or text is not of its type.
            ValueError: If a step path is empty or an attempt below 1.
        """
        values = {
            _stream_name(key, run_id): dumps(
                {"attempt": _attempt(attempt, key, run_id), "text": _kept(text, key, run_id)}
            )
            for key, (attempt, text) in texts.items()
        }
        gone = None if replace_all else [_stream_name(key, run_id) for key in ended]
        if gone is not None:
            gone = [name for name in gone if name not in values]
            if not gone and not values:
                return
        self._rows.put_many(run_id, STREAM, values, _now(), drop=gone)

    def streams(
        self, run_id: str, *, since: datetime | None = None
    ) -> dict[StreamKey, tuple[int, str]]:
        """The text each running attempt of ``run_id`` streamed so far, as `put_streams` kept it.

        By ``(step path, item key or None)``: the attempt's number and its text
        (the latest 65,536 characters). A step's path is its name, or
        ``sub/inner`` for a step of the sub-workflow of step ``sub``
        (``sub/key/inner`` in a map's item), each name written as question
        paths write them. An entry goes when its attempt ends; entries a
        process killed mid-step left stay until the run streams again (or is
        deleted): check that the run has an owner (``store.owner``), and pass
        its claim's time as ``since``.

        Args:
            run_id: The run.
            since: Leave out the entries last written before this moment (an
                aware datetime): those of a process that ran the run before
                its owner now claimed it (``store.owner(run_id).since``).

        Raises:
            CheckpointFormatError: If an entry is damaged.
        """
        found: dict[StreamKey, tuple[int, str]] = {}
        for _, name, value, at in self._rows.rows(STREAM, run_id):
            key, data = self._value(run_id, STREAM, name), self._value(run_id, STREAM, value)
            written = _moment(at)
            if not _stream_entry(key, data) or written is None:
                msg = (
                    f"{self._store}: the streamed text of run {run_id!r} is damaged: "
                    f"{name[:80]!r} holds {value[:80]!r}, written at {str(at)[:40]!r} "
                    f"(expected an ISO 8601 time with its offset)"
                )
                raise CheckpointFormatError(msg)
            if since is None or written >= since:
                found[key[0], key[1]] = (data["attempt"], data["text"])
        return found

    def drop_streams(self, run_id: str, keys: Iterable[StreamKey] | None = None) -> None:
        """Delete the streamed text kept of ``run_id`` (of the steps ``keys`` only, if given)."""
        names = None if keys is None else [_stream_name(key, run_id) for key in keys]
        self._rows.drop(STREAM, run_id, names)

    def _submission(self, row: Row) -> Submission:
        run_id, _, value, at = row
        data = self._value(run_id, SUBMITTED, value)
        steps = data.get("steps", []) if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("inputs"), dict)
            or not isinstance(data.get("metadata"), dict)
            or not isinstance(steps, list)
            or not all(isinstance(name, str) for name in steps)
        ):
            msg = f"{self._store}: the submission of run {run_id!r} is damaged: {value[:80]!r}"
            raise CheckpointFormatError(msg)
        inputs, metadata = _frozen(data["inputs"]), _frozen(data["metadata"])
        return Submission(run_id, inputs, metadata, at, tuple(steps))

    def _value(self, run_id: str, kind: str, text: str) -> Any:
        try:
            return loads(text)
        except ValueError as exc:
            msg = f"{self._store}: the inbox entry ({kind}) of run {run_id!r} is damaged: {exc}"
            raise CheckpointFormatError(msg) from None


def _plain_dict(value: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) and not hasattr(value, "keys"):
        msg = f"{what} must be a mapping of str keys, got {type(value).__name__}"
        raise TypeError(msg)
    copy = plain_copy(dict(value), what)
    assert isinstance(copy, dict)  # noqa: S101 - a dict copies as a dict
    return copy


def _frozen(value: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(value)


def _stream_name(key: object, run_id: str) -> str:
    """The entry name of a stream key: ``[step, item]`` as JSON, checked first."""
    if not isinstance(key, tuple) or len(key) != 2:  # noqa: PLR2004 - (step, item)
        msg = f"streams of run {run_id!r}: a key must be a (step, item) tuple, got {key!r}"
        raise TypeError(msg)
    step, item = key
    if type(step) is not str or (item is not None and type(item) is not str):
        msg = (
            f"streams of run {run_id!r}: a key must be (str, str or None), got "
            f"({type(step).__name__}, {type(item).__name__})"
        )
        raise TypeError(msg)
    if not step:
        msg = f"streams of run {run_id!r}: the step of key {key!r} is empty"
        raise ValueError(msg)
    return dumps([_storable(step), None if item is None else _storable(item)])


def _attempt(attempt: object, key: StreamKey, run_id: str) -> int:
    """``attempt``, checked: an int of 1 or more."""
    if type(attempt) is not int:
        msg = (
            f"streams of run {run_id!r}: the attempt of {key!r} must be an int, got "
            f"{type(attempt).__name__}"
        )
        raise TypeError(msg)
    if attempt < 1:
        msg = f"streams of run {run_id!r}: the attempt of {key!r} must be 1 or more, got {attempt}"
        raise ValueError(msg)
    return attempt


def _kept(text: object, key: StreamKey, run_id: str) -> str:
    """The part of ``text`` a store keeps: its latest `STREAM_KEPT` characters, storable."""
    if type(text) is not str:
        msg = (
            f"streams of run {run_id!r}: the text of {key!r} must be a str, got "
            f"{type(text).__name__}"
        )
        raise TypeError(msg)
    return _storable(text[-STREAM_KEPT:])


def _storable(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate (no character) becomes ``?``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _stream_entry(key: object, data: object) -> bool:
    """Whether a stored name and value read back as a stream entry."""
    return (
        isinstance(key, list)
        and len(key) == 2  # noqa: PLR2004 - [step, item]
        and isinstance(key[0], str)
        and (key[1] is None or isinstance(key[1], str))
        and isinstance(data, dict)
        and type(data.get("attempt")) is int
        and isinstance(data.get("text"), str)
    )


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _moment(at: str) -> datetime | None:
    """When an entry was written (``at``, as `_now` wrote it); None if that is no time."""
    try:
        written = datetime.fromisoformat(at)
    except ValueError:
        return None
    return written if written.tzinfo is not None else None


# --- the file stores' inbox: a JSON file beside the checkpoint file ----------------------


class FileRows:
    """`InboxRows` in ``<file>.inbox``: a JSON list of rows, replaced atomically under a lock.

    Every change reads the file, changes it and replaces it while holding an
    ``flock`` on ``<file>.inbox.lock``, so processes sharing the file never
    lose one another's entries.
    """

    def __init__(self, checkpoint_file: Path) -> None:
        """Keep the entries of the store of ``checkpoint_file`` beside it."""
        self.path = checkpoint_file.with_name(f"{checkpoint_file.name}.inbox")
        self._lock_path = checkpoint_file.with_name(f"{checkpoint_file.name}.inbox.lock")
        self._lock = threading.Lock()

    def put(
        self, run_id: str, kind: str, name: str, value: str, at: str, *, replace: bool
    ) -> bool:
        """Write one entry; see `InboxRows.put`."""
        with self._changing() as rows:
            for index, row in enumerate(rows):
                if row[:3] == [run_id, kind, name]:
                    if not replace:
                        return False
                    rows[index] = [run_id, kind, name, value, at]
                    return True
            rows.append([run_id, kind, name, value, at])
            return True

    def rows(self, kind: str, run_id: str | None) -> list[Row]:
        """The entries of ``kind``; see `InboxRows.rows`."""
        return [
            (row[0], row[2], row[3], row[4])
            for row in self._read()
            if row[1] == kind and (run_id is None or row[0] == run_id)
        ]

    def drop(self, kind: str | None, run_id: str, names: Sequence[str] | None) -> None:
        """Delete entries; see `InboxRows.drop`."""
        with self._changing() as rows:
            rows[:] = [
                row
                for row in rows
                if not (
                    row[0] == run_id
                    and (kind is None or row[1] == kind)
                    and (names is None or row[2] in names)
                )
            ]

    def put_many(
        self,
        run_id: str,
        kind: str,
        values: Mapping[str, str],
        at: str,
        *,
        drop: Sequence[str] | None,
    ) -> None:
        """Delete, then write, in one replacement of the file; see `InboxRows.put_many`."""
        with self._changing() as rows:
            rows[:] = [
                row
                for row in rows
                if not (
                    row[0] == run_id
                    and row[1] == kind
                    and (drop is None or row[2] in drop or row[2] in values)
                )
            ]
            rows.extend([run_id, kind, name, value, at] for name, value in values.items())

    def _read(self) -> list[list[str]]:
        read = read_bytes(self.path)
        if read is None:
            return []
        try:
            data = loads(read[0])
        except ValueError as exc:
            msg = f"{self.path}: not an inbox file: {exc}"
            raise CheckpointFormatError(msg) from None
        if not isinstance(data, list) or not all(
            isinstance(row, list) and len(row) == _COLUMNS and all(isinstance(x, str) for x in row)
            for row in data
        ):
            msg = f"{self.path}: not an inbox file (a JSON list of [run, kind, name, value, at])"
            raise CheckpointFormatError(msg)
        return data

    @contextlib.contextmanager
    def _changing(self) -> Iterator[list[list[str]]]:
        with self._lock, _locked(self._lock_path):
            rows = self._read()
            before = json.dumps(rows)
            yield rows
            if json.dumps(rows) != before:
                replace_file(self.path, dumps(rows).encode("utf-8"))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags, 0o600)
    try:
        check_regular(os.fstat(fd).st_mode, path, "not a lock file")
        if sys.platform != "win32":
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the lock


# --- the SQL stores' inbox: the table executionkit_inbox ---------------------------------


class SqlRows:
    """`InboxRows` in the table ``executionkit_inbox``, through the store's transactions.

    ``write(work)`` runs ``work(db)`` in a write transaction with the table
    created; ``read(work)`` in a read transaction, or gives None when the
    table is absent.
    """

    def __init__(
        self,
        write: Callable[[Callable[[Database], Any]], Any],
        read: Callable[[Callable[[Database], Any]], Any],
    ) -> None:
        """Use the store's ``write`` and ``read`` transactions."""
        self._write = write
        self._read = read

    def put(
        self, run_id: str, kind: str, name: str, value: str, at: str, *, replace: bool
    ) -> bool:
        """Write one entry; see `InboxRows.put`."""
        statement = INBOX_SET if replace else INBOX_ADD
        params = (run_id, kind, name, value, at)
        return bool(self._write(lambda db: db.execute(statement, params).fetchone() is not None))

    def rows(self, kind: str, run_id: str | None) -> list[Row]:
        """The entries of ``kind``; see `InboxRows.rows`."""
        query = INBOX_ROWS if run_id is None else INBOX_RUN_ROWS
        params = (kind,) if run_id is None else (kind, run_id)
        found = self._read(lambda db: db.execute(query, params).fetchall())
        return [] if found is None else [tuple(row) for row in found]

    def drop(self, kind: str | None, run_id: str, names: Sequence[str] | None) -> None:
        """Delete entries; see `InboxRows.drop`."""
        query = "DELETE FROM executionkit_inbox WHERE run_id = ?"
        params: list[object] = [run_id]
        if kind is not None:
            query += " AND kind = ?"
            params.append(kind)
        if names is not None:
            if not names:
                return
            query += f" AND name IN ({', '.join('?' * len(names))})"
            params.extend(names)
        self._write(lambda db: db.execute(query, params))

    def put_many(
        self,
        run_id: str,
        kind: str,
        values: Mapping[str, str],
        at: str,
        *,
        drop: Sequence[str] | None,
    ) -> None:
        """Delete, then write, in one transaction; see `InboxRows.put_many`."""

        def change(db: Database) -> None:
            if drop is None:
                db.execute(INBOX_DROP_KIND, (run_id, kind))
            for name in drop or ():
                db.execute(INBOX_DROP_NAME, (run_id, kind, name))
            for name, value in values.items():
                db.execute(INBOX_SET, (run_id, kind, name, value, at)).fetchall()

        self._write(change)
