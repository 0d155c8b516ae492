"""Ready-made checkpoint stores: each is a ``checkpoint_fn`` that can also ``load()``.

Optional and standard library only; the core never imports this module:

```python
from executionkit.stores import JsonFileStore

store = JsonFileStore("run.json")
result = workflow.run_sync(checkpoint_fn=store, resume_from=store.load())
```

- `JsonFileStore`: the latest checkpoint as one JSON file, replaced atomically.
- `JsonLinesStore`: an append-only JSON Lines file that writes only each
  checkpoint's new outputs.
- `SQLiteStore`: one row per run in an SQLite database, safe for several
  threads and processes, with optional history.

What every store here guarantees:

- ``load()`` returns ``None`` when nothing was saved, and otherwise a checkpoint
  equal to the latest one saved. Checkpoints are written as JSON through
  `WorkflowCheckpoint.to_dict`, so outputs come back as JSON gives them
  (tuples as lists); an output JSON cannot hold fails the save with
  `CheckpointValueError` naming the store, the step and the path inside it.
- Within a run (the same ``run_id``) only a newer ``seq`` replaces the stored
  checkpoint. An older one, or a different one with the same ``seq``, is a
  stale writer (a second worker on the same run, or a run resumed from an old
  copy) and is refused with `StaleCheckpointError`; the run then stops, as with
  any ``checkpoint_fn`` failure, and the stored checkpoint is untouched. Saving
  the very same checkpoint again is harmless and writes nothing.
- Stored data that is damaged raises `CheckpointFormatError` naming the file
  (and line, or run) at fault. It is never silently discarded or overwritten.

Each of them passes `executionkit.conformance.check_store`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint import FORMAT_VERSION, WorkflowCheckpoint
from executionkit._errors import CheckpointFormatError, CheckpointValueError, ExecutionKitError

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterator, Mapping

__all__ = ["JsonFileStore", "JsonLinesStore", "SQLiteStore", "StaleCheckpointError"]


class StaleCheckpointError(ExecutionKitError):
    """A store refused a checkpoint that is not newer than the one it holds for the run.

    Raised by the stores of this module when a checkpoint's ``seq`` is lower
    than the stored one of the same ``run_id``, or equal to it with different
    contents. It means another writer got ahead: a second worker running the
    same run, or a run resumed from an older copy of the checkpoint. Nothing
    was written; resume from the store's ``load()`` to continue from the
    newest checkpoint.

    Attributes:
        run_id: The run both checkpoints belong to.
        seq: The ``seq`` of the refused checkpoint.
        stored_seq: The ``seq`` of the checkpoint the store holds.
    """

    def __init__(self, store: str, run_id: str | None, seq: int, stored_seq: int) -> None:
        """Create the error for ``store`` refusing ``seq`` because it holds ``stored_seq``."""
        self.run_id = run_id
        self.seq = seq
        self.stored_seq = stored_seq
        held = (
            f"a different checkpoint with seq={stored_seq}"
            if seq == stored_seq
            else f"seq={stored_seq}"
        )
        super().__init__(
            f"{store}: refused checkpoint seq={seq} of run {run_id!r}: the store already "
            f"holds {held} of that run, written by another writer or before this run "
            f"resumed from an older checkpoint; resume from the store's load() instead"
        )


# --- encoding ---------------------------------------------------------------------------

_DATA_HINT = (
    "stores write JSON, so steps must return dicts, lists, str, int, finite float, bool or "
    "None (or give the Step encode/decode; run with validate_json=True to catch this when "
    "the step returns)"
)
_PREVIEW_CHARS = 60


def _dumps(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _encode(checkpoint: WorkflowCheckpoint, store: str) -> str:
    """The checkpoint as compact JSON, or `CheckpointValueError` naming what JSON cannot hold."""
    try:
        return _dumps(checkpoint.to_dict())
    except (TypeError, ValueError, RecursionError) as exc:
        raise _unstorable(checkpoint, store, exc) from exc


def _unstorable(checkpoint: WorkflowCheckpoint, store: str, exc: Exception) -> Exception:
    """A `CheckpointValueError` naming the first part of ``checkpoint`` JSON cannot hold."""
    head = f"{store}: cannot store checkpoint seq={checkpoint.seq} of run {checkpoint.run_id!r}"
    parts: tuple[tuple[str, Mapping[str, Any]], ...] = (
        ("the output of step", checkpoint.outputs),
        ("the progress of step", checkpoint.progress),
        ("the metadata value", checkpoint.metadata),
    )
    try:
        for what, mapping in parts:
            for name, value in mapping.items():
                found = _find_unstorable(value, [], set())
                if found is not None:
                    path, bad, problem = found
                    where = f" at {path}" if path else ""
                    msg = f"{head}: {what} {name!r}{where}: {problem}; {_DATA_HINT}"
                    return CheckpointValueError(msg, path=path, value=bad)
    except RecursionError:  # too deep to walk: fall back on what json said
        pass
    msg = f"{head} as JSON: {type(exc).__name__}: {exc}; {_DATA_HINT}"
    return CheckpointValueError(msg, path="", value=None)


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "..."


def _find_unstorable(
    value: object, path: list[str], active: set[int]
) -> tuple[str, object, str] | None:
    """The path, value and problem of the first part ``json.dumps`` refuses, or None."""
    if value is None or isinstance(value, (str, int)):
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return "".join(path), value, f"float({str(value)!r}) is not valid JSON"
    if not isinstance(value, (list, tuple, dict)):
        problem = f"{_preview(value)} ({type(value).__name__}) is not JSON data"
        return "".join(path), value, problem
    if id(value) in active:
        return "".join(path), value, "a container that contains itself is not valid JSON"
    active.add(id(value))
    found = _find_in_items(value, path, active)
    active.discard(id(value))
    return found


def _find_in_items(
    value: list[Any] | tuple[Any, ...] | dict[Any, Any], path: list[str], active: set[int]
) -> tuple[str, object, str] | None:
    items: Any
    if isinstance(value, dict):
        for key in value:
            if key is not None and not isinstance(key, (str, int, float)):
                return "".join(path), key, f"key {_preview(key)} is not a str"
        items = ((f"[{key!r}]", item) for key, item in value.items())
    else:
        items = ((f"[{index}]", item) for index, item in enumerate(value))
    for step, item in items:
        path.append(step)
        found = _find_unstorable(item, path, active)
        path.pop()
        if found is not None:
            return found
    return None


def _same_json(first: str, second: str) -> bool:
    """Whether two JSON texts hold the same data (key order aside)."""
    return bool(json.loads(first) == json.loads(second))


def _stale(store: str, checkpoint: WorkflowCheckpoint, stored_seq: int) -> StaleCheckpointError:
    return StaleCheckpointError(store, checkpoint.run_id, checkpoint.seq, stored_seq)


# --- files ------------------------------------------------------------------------------

_FileId = tuple[int, int, int, int]
"""Device, inode, size and modification time: a file as this process last saw it."""

_DIR_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EBADF})


def _file_id(fd: int) -> _FileId:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _path_id(path: Path) -> _FileId | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


def _read_bytes(path: Path) -> tuple[bytes, _FileId] | None:
    """The file's contents and identity, read from one open file; None if it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    try:
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read()
        return data, _file_id(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_folder(folder: Path) -> None:
    """Make a file's creation or replacement in ``folder`` durable, where the OS allows."""
    if os.name == "nt":  # pragma: no cover - Windows cannot open a folder; NTFS journals it
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. a folder we may write but not read
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - filesystems that cannot sync a folder
        if exc.errno not in _DIR_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{where}: not a checkpoint file: not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise CheckpointFormatError(msg) from None


class JsonFileStore:
    """The latest checkpoint as one JSON file, replaced atomically on every save.

    Each save writes ``checkpoint.to_dict()`` as compact JSON to a temporary
    file in the same folder, flushes and fsyncs it, moves it over ``path``
    with `os.replace` and fsyncs the folder (where the OS allows). A reader,
    or a process that crashes at any moment, therefore sees either the old
    file or the new one, never a torn mix. A write that fails removes its
    temporary file; only a hard crash (power loss, ``kill -9``) between
    creating and renaming it can leave a ``.<name>.*.tmp`` file behind, which
    is never read and can be deleted. The folder must exist; the file is
    created readable and writable by its owner only, as `tempfile` makes it.

    The file holds one run: a checkpoint of another ``run_id`` replaces it (as
    a fresh run started on the same path would), while within the run a
    checkpoint that is not newer than the stored one is refused with
    `StaleCheckpointError`. That check reads the file when another process
    changed it since this store last did, but is not atomic across processes:
    give each file one writer, and use `SQLiteStore` for several.

    Args:
        path: The checkpoint file.

    Example:
        ```python
        store = JsonFileStore("run.json")
        workflow.run_sync(checkpoint_fn=store, resume_from=store.load())
        ```
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Store checkpoints in the file at ``path``."""
        self.path = Path(path)
        self._lock = threading.Lock()
        # (file identity, run_id, seq) of the file as this store last wrote or read it.
        self._known: tuple[_FileId, str | None, int] | None = None

    def __repr__(self) -> str:
        """Show the path."""
        return f"JsonFileStore({str(self.path)!r})"

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        """Write ``checkpoint`` atomically, unless it is stale.

        Raises:
            StaleCheckpointError: If the file holds a newer checkpoint of the same
                run, or a different one with the same ``seq``.
            CheckpointValueError: If an output (or progress or metadata value)
                cannot be written as JSON; the message names the step.
            CheckpointFormatError: If the file holds something that is not a
                checkpoint (it is left alone rather than overwritten).
            OSError: If writing fails; the old file is then unchanged.
        """
        text = _encode(checkpoint, repr(self))
        with self._lock:
            held = self._held()
            if held is not None and held[0] == checkpoint.run_id and checkpoint.seq <= held[1]:
                if checkpoint.seq == held[1]:
                    current = _read_bytes(self.path)
                    if current is not None and _same_json(_text(current[0], str(self.path)), text):
                        return  # the same checkpoint again: nothing to do
                raise _stale(repr(self), checkpoint, held[1])
            self._replace(text.encode("utf-8"))
            file_id = _path_id(self.path)
            self._known = None if file_id is None else (file_id, checkpoint.run_id, checkpoint.seq)

    def load(self) -> WorkflowCheckpoint | None:
        """Return the stored checkpoint, or None if the file is missing or empty.

        Raises:
            CheckpointFormatError: If the file is not a checkpoint (invalid JSON,
                not UTF-8, or a field `WorkflowCheckpoint.from_dict` rejects); the
                message starts with the path.
        """
        with self._lock:
            read = _read_bytes(self.path)
            if read is None:
                return None
            data, file_id = read
            checkpoint = self._parse(data)
            if checkpoint is not None:
                self._known = (file_id, checkpoint.run_id, checkpoint.seq)
            return checkpoint

    def _held(self) -> tuple[str | None, int] | None:
        """The run_id and seq the file holds, read only if it changed since we saw it."""
        file_id = _path_id(self.path)
        if file_id is None:
            return None
        if self._known is not None and self._known[0] == file_id:
            return self._known[1], self._known[2]
        read = _read_bytes(self.path)
        if read is None:
            return None
        checkpoint = self._parse(read[0])
        if checkpoint is None:
            return None
        self._known = (read[1], checkpoint.run_id, checkpoint.seq)
        return checkpoint.run_id, checkpoint.seq

    def _parse(self, data: bytes) -> WorkflowCheckpoint | None:
        where = str(self.path)
        text = _text(data, where)
        if not text.strip():
            return None
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = (
                f"{where}: not a checkpoint file: invalid JSON at line {exc.lineno} "
                f"column {exc.colno} ({exc.msg})"
            )
            raise CheckpointFormatError(msg) from None
        try:
            return WorkflowCheckpoint.from_dict(parsed)
        except CheckpointFormatError as exc:
            raise CheckpointFormatError(f"{where}: {exc}", path=exc.path) from exc

    def _replace(self, data: bytes) -> None:
        folder = self.path.parent
        fd, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            Path(temporary).replace(self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                Path(temporary).unlink()
            raise
        _fsync_folder(folder)


# --- JSON Lines -------------------------------------------------------------------------

_COST = ("input_tokens", "output_tokens", "llm_calls")


def _pack_info(info: Mapping[str, Any] | None) -> object:
    """A step's version and dependencies, compactly: a list, a dict if versioned, or null."""
    if info is None:  # a hand-made checkpoint without step_info
        return None
    deps = list(info["depends_on"])
    return deps if info["version"] is None else {"v": info["version"], "d": deps}


def _unpack_info(packed: object) -> dict[str, Any] | None:
    if packed is None or isinstance(packed, list):
        return None if packed is None else {"version": None, "depends_on": packed}
    if isinstance(packed, dict) and set(packed) == {"v", "d"}:
        return {"version": packed["v"], "depends_on": packed["d"]}
    msg = "step info must be a list, {'v': ..., 'd': [...]} or null"
    raise ValueError(msg)


@dataclass
class _LinesState:
    """What a JSON Lines file holds, as this store last read or wrote it."""

    file_id: _FileId | None  # None: the file does not exist
    end: int  # bytes up to the end of the last line that counts
    latest: WorkflowCheckpoint | None  # the checkpoint the counted lines rebuild to


class JsonLinesStore:
    """An append-only JSON Lines file: one line per checkpoint, new outputs only.

    Writing the whole checkpoint after every batch rewrites every output each
    time, so for a long chain the bytes written grow with the square of its
    length. This store appends one line per checkpoint holding only what
    changed: the outputs recorded since the line before (with their steps'
    versions and dependencies) and the counters. The bytes written stay close
    to the size of the outputs themselves.

    The line format (compact JSON, one object per line): ``s`` is ``seq``;
    ``n`` maps each newly recorded step to ``[output, info]``, where ``info``
    is the list of its dependencies, or ``{"v": version, "d": dependencies}``
    for a versioned step; ``c`` is the token usage ``[input, output, calls]``
    and ``t`` the time; ``errors``, ``progress`` and ``progress_info`` appear
    when there are any. A line that starts a run, or changes what the file
    holds otherwise (a resumed run dropped outputs, or passed new metadata or
    context keys), also holds ``run``: the ``run_id``, ``context_keys``,
    ``metadata`` and ``keep``, every output name the checkpoint records.

    `load` folds the lines in order. A line counts once its newline is
    written: a torn last line, left by a crash in the middle of a write, is
    ignored (that checkpoint was never stored, and the run resumes from the one
    before) and is cut off before the next append. A damaged line anywhere else
    raises `CheckpointFormatError` naming ``file:line``. Outputs a resumed run
    dropped (a rerun or an invalidated step) stay dropped in the rebuild.

    A checkpoint that does not follow the stored one (the first, one of
    another run, or one from a run resumed from elsewhere) is written with
    every output the file lacks or holds differently, so the rebuild always
    equals the checkpoint saved. A checkpoint of another ``run_id`` starts the
    file over; within a run, one that is not newer than the stored one is
    refused with `StaleCheckpointError`. One writer per file: appends from
    several processes are not coordinated.

    Only checkpoints of the current format (those `Workflow.run` writes) can be
    stored; ``load`` reads the whole file, so for very long files compact it
    (a fresh store, one save of ``load()``) when a run finishes.

    Args:
        path: The ``.jsonl`` file; created on the first save.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Store checkpoints in the JSON Lines file at ``path``."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self._state: _LinesState | None = None

    def __repr__(self) -> str:
        """Show the path."""
        return f"JsonLinesStore({str(self.path)!r})"

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        """Append a line for ``checkpoint``, unless it is stale.

        Raises:
            StaleCheckpointError: If the file holds a newer checkpoint of the same
                run, or a different one with the same ``seq``.
            CheckpointValueError: If an output (or progress or metadata value)
                cannot be written as JSON; the message names the step.
            CheckpointFormatError: If the file holds damaged lines.
            ValueError: If the checkpoint is of an older format (read from an
                old file): resume from it and let the run write its own.
            OSError: If writing fails; the partial line is then ignored.
        """
        if checkpoint.version != FORMAT_VERSION:
            msg = (
                f"{self!r} stores checkpoints of format version {FORMAT_VERSION} (what "
                f"Workflow.run writes), got version {checkpoint.version}; resume from it "
                f"and store the run's own checkpoints"
            )
            raise ValueError(msg)
        with self._lock:
            state = self._current()
            latest = state.latest
            same_run = latest is not None and latest.run_id == checkpoint.run_id
            if latest is not None and same_run and checkpoint.seq <= latest.seq:
                if checkpoint.seq == latest.seq and self._same(checkpoint, latest):
                    return
                raise _stale(repr(self), checkpoint, latest.seq)
            line = self._line(checkpoint, latest if same_run else None)
            try:
                data = (_dumps(line) + "\n").encode("utf-8")
            except (TypeError, ValueError, RecursionError) as exc:
                raise _unstorable(checkpoint, repr(self), exc) from exc
            self._state = None  # unknown until the append has finished
            self._state = self._append(state, data, checkpoint)

    def load(self) -> WorkflowCheckpoint | None:
        """Return the latest checkpoint the file holds, or None if it holds none.

        Raises:
            CheckpointFormatError: If a line other than the last is damaged
                (``path:line`` in the message), or the lines do not rebuild into
                a valid checkpoint.
        """
        with self._lock:
            self._state = self._read()
            return self._state.latest

    def _same(self, checkpoint: WorkflowCheckpoint, latest: WorkflowCheckpoint) -> bool:
        if checkpoint is latest:
            return True
        return _same_json(_encode(checkpoint, repr(self)), _encode(latest, repr(self)))

    def _current(self) -> _LinesState:
        """The state, read again if the file changed since this store last saw it."""
        if self._state is None or self._state.file_id != _path_id(self.path):
            self._state = self._read()
        return self._state

    def _line(
        self, checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None
    ) -> dict[str, Any]:
        held = previous.outputs if previous is not None else {}
        held_info = previous.step_info if previous is not None else {}
        reported = set(checkpoint.new_outputs)
        new = {}
        for name, value in checkpoint.outputs.items():
            info = checkpoint.step_info.get(name)
            if (
                name in reported
                or name not in held
                or not (held[name] is value or held[name] == value)
                or not (held_info.get(name) is info or held_info.get(name) == info)
            ):
                new[name] = [value, _pack_info(info)]
        line: dict[str, Any] = {
            "s": checkpoint.seq,
            "n": new,
            "c": [getattr(checkpoint.cost, field) for field in _COST],
            "t": checkpoint.created_at,
        }
        if (
            previous is None
            or any(name not in checkpoint.outputs for name in held)  # outputs dropped
            or previous.context_keys != checkpoint.context_keys
            or previous.metadata != checkpoint.metadata
        ):
            line["run"] = {
                "run_id": checkpoint.run_id,
                "context_keys": list(checkpoint.context_keys),
                "metadata": dict(checkpoint.metadata),
                "keep": list(checkpoint.outputs),
            }
        if checkpoint.errors:
            line["errors"] = dict(checkpoint.errors)
        if checkpoint.progress:
            line["progress"] = dict(checkpoint.progress)
            line["progress_info"] = {
                name: _pack_info(checkpoint.step_info[name])
                for name in checkpoint.progress
                if name in checkpoint.step_info
            }
        return line

    def _append(
        self, state: _LinesState, data: bytes, checkpoint: WorkflowCheckpoint
    ) -> _LinesState:
        created = state.file_id is None
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0)
        fd = os.open(self.path, flags, 0o666)
        try:
            if not created and state.file_id is not None and state.file_id[2] != state.end:
                os.ftruncate(fd, state.end)  # cut off a torn last line before appending
            os.lseek(fd, state.end, os.SEEK_SET)
            _write_all(fd, data)
            os.fsync(fd)
            file_id = _file_id(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_folder(self.path.parent)
        return _LinesState(file_id, state.end + len(data), checkpoint)

    def _read(self) -> _LinesState:
        read = _read_bytes(self.path)
        if read is None:
            return _LinesState(None, 0, None)
        data, file_id = read
        lines = data.split(b"\n")
        # The part after the last newline was never completed: it does not count.
        complete = lines[:-1]
        rebuild = _Rebuild(str(self.path))
        end = 0
        for number, raw in enumerate(complete, start=1):
            last = number == len(complete) and not lines[-1]
            if raw.strip():
                try:
                    parsed = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    if last:
                        break  # a torn last line: that checkpoint never reached the disk
                    msg = f"{self.path}:{number}: not a checkpoint line (invalid JSON)"
                    raise CheckpointFormatError(msg) from None
                rebuild.fold(parsed, number)
            end += len(raw) + 1
        return _LinesState(file_id, end, rebuild.checkpoint())


class _Rebuild:
    """Folds JSON Lines into the checkpoint they describe."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.state: dict[str, Any] | None = None

    def _bad(self, number: int, detail: str) -> CheckpointFormatError:
        return CheckpointFormatError(f"{self.path}:{number}: not a checkpoint line ({detail})")

    def fold(self, line: object, number: int) -> None:
        """Apply line ``number`` (1-based) to the state."""
        new, cost, progress_info = self._check(line, number)
        assert isinstance(line, dict)  # noqa: S101 - _check made sure
        state = self.state
        run = line.get("run")
        if state is None or run is not None:
            state = self._start(run, number, new, state)
        else:
            state["outputs"].update((name, entry[0]) for name, entry in new.items())
        step_info = state["step_info"]
        for name, packed in [*((n, entry[1]) for n, entry in new.items()), *progress_info.items()]:
            try:
                info = _unpack_info(packed)
            except ValueError as exc:
                raise self._bad(number, f"step {name!r}: {exc}") from None
            if info is None:
                step_info.pop(name, None)
            else:
                step_info[name] = info
        state["seq"] = line["s"]
        state["created_at"] = line.get("t")
        state["cost"] = dict(zip(_COST, cost, strict=True))
        state["errors"] = line.get("errors", {})
        state["progress"] = line.get("progress", {})
        self.state = state

    def _check(
        self, line: object, number: int
    ) -> tuple[dict[str, list[Any]], list[Any], dict[str, Any]]:
        """The new outputs, cost and progress info of a line, checked for shape."""
        if not isinstance(line, dict):
            raise self._bad(number, "not a JSON object")
        for key, kind, expected in (
            ("s", int, "an int"),
            ("n", dict, "an object"),
            ("c", list, "a list"),
        ):
            if not isinstance(line.get(key), kind) or isinstance(line.get(key), bool):
                raise self._bad(number, f"{key!r} must be {expected}")
        new: dict[str, object] = line["n"]
        for name, entry in new.items():
            if not isinstance(entry, list) or len(entry) != 2:  # noqa: PLR2004 - [output, info]
                raise self._bad(number, f"step {name!r} must be [output, info]")
        cost: list[Any] = line["c"]
        if len(cost) != len(_COST):
            raise self._bad(number, "'c' must hold three counts")
        progress_info = line.get("progress_info", {})
        if not isinstance(progress_info, dict):
            raise self._bad(number, "'progress_info' must be a dict")
        return line["n"], cost, progress_info

    def _start(
        self,
        run: object,
        number: int,
        new: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """The state after a line that says what the file holds from now on."""
        if run is None:
            run = {}  # a first line without a header (older recipe files)
        if not isinstance(run, dict):
            raise self._bad(number, "'run' must be a dict")
        keep = run.get("keep", list(new))
        if not isinstance(keep, list):
            raise self._bad(number, "'run.keep' must be a list")
        outputs_before: dict[str, Any] = old["outputs"] if old else {}
        info_before: dict[str, Any] = old["step_info"] if old else {}
        outputs: dict[str, Any] = {}
        for name in keep:
            if name in new:
                outputs[name] = new[name][0]
            elif name in outputs_before:
                outputs[name] = outputs_before[name]
            else:
                raise self._bad(number, f"'run.keep' names {name!r}, which no line recorded")
        for name, entry in new.items():
            outputs.setdefault(name, entry[0])
        return {
            "version": FORMAT_VERSION,
            "run_id": run.get("run_id"),
            "context_keys": run.get("context_keys", []),
            "metadata": run.get("metadata", {}),
            "outputs": outputs,
            "step_info": {name: info for name, info in info_before.items() if name in outputs},
        }

    def checkpoint(self) -> WorkflowCheckpoint | None:
        state = self.state
        if state is None:
            return None
        progress = state["progress"]
        if not isinstance(progress, dict):
            progress = {}  # from_dict names the field below
        described = set(state["outputs"]) | set(progress)
        state["step_info"] = {k: v for k, v in state["step_info"].items() if k in described}
        state["step_index"] = len(state["outputs"])
        try:
            return WorkflowCheckpoint.from_dict(state)
        except CheckpointFormatError as exc:
            msg = f"{self.path}: the lines do not rebuild into a valid checkpoint: {exc}"
            raise CheckpointFormatError(msg, path=exc.path) from exc


# --- SQLite -----------------------------------------------------------------------------

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS executionkit_checkpoints (
        run_id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        written INTEGER NOT NULL,
        created_at TEXT,
        data TEXT NOT NULL
    )""",
    """CREATE INDEX IF NOT EXISTS executionkit_checkpoints_written
        ON executionkit_checkpoints (written)""",
)
_HISTORY_SCHEMA = """CREATE TABLE IF NOT EXISTS executionkit_checkpoint_history (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    created_at TEXT,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
)"""
_SELECT_ROW = "SELECT seq, data FROM executionkit_checkpoints WHERE run_id = ?"
_KEEP_REPLACED = """INSERT OR IGNORE INTO executionkit_checkpoint_history
    SELECT run_id, seq, created_at, data FROM executionkit_checkpoints WHERE run_id = ?"""
_NEXT_WRITTEN = "SELECT COALESCE(MAX(written), 0) + 1 FROM executionkit_checkpoints"
# The WHERE clause repeats the seq check the transaction already made: even a
# writer that skipped it could never replace a newer checkpoint.
_UPSERT = """INSERT INTO executionkit_checkpoints (run_id, seq, written, created_at, data)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (run_id) DO UPDATE SET
        seq = excluded.seq, written = excluded.written,
        created_at = excluded.created_at, data = excluded.data
    WHERE excluded.seq > executionkit_checkpoints.seq"""
_LOAD_LATEST_RUN = (
    "SELECT run_id, data FROM executionkit_checkpoints ORDER BY written DESC LIMIT 1"
)
_LOAD_RUN = "SELECT run_id, data FROM executionkit_checkpoints WHERE run_id = ?"
_LOAD_HISTORY = (
    "SELECT run_id, data FROM executionkit_checkpoint_history WHERE run_id = ? ORDER BY seq"
)
_RUN_IDS = "SELECT run_id FROM executionkit_checkpoints ORDER BY written DESC"


class SQLiteStore:
    """Checkpoints in an SQLite database: one row per run, the newest ``seq`` wins.

    Each save runs one ``BEGIN IMMEDIATE`` transaction that reads the stored
    ``seq`` of the checkpoint's run and writes the checkpoint only if its
    ``seq`` is newer, so a stale writer can never replace a newer checkpoint,
    even from another thread or process: it gets `StaleCheckpointError` and
    the row is untouched. Every call opens its own connection (waiting up to
    ``timeout`` for another writer's lock), so one store can be shared by
    threads, and processes can each open their own on the same file. The
    tables are created on the first save, in the database you name (it may be
    your application's):

    ```sql
    CREATE TABLE executionkit_checkpoints (
        run_id TEXT PRIMARY KEY,  -- WorkflowCheckpoint.run_id
        seq INTEGER NOT NULL,  -- WorkflowCheckpoint.seq
        written INTEGER NOT NULL,  -- 1, 2, 3...: the order of the saves, across runs
        created_at TEXT,  -- WorkflowCheckpoint.created_at
        data TEXT NOT NULL  -- the checkpoint's to_dict() as JSON
    );
    -- with history=True, every checkpoint a save replaced:
    CREATE TABLE executionkit_checkpoint_history (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        created_at TEXT,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    ```

    Args:
        path: The database file (not ``":memory:"``: each call connects anew).
        history: Also keep every checkpoint a save replaces; see `history`.
        timeout: Seconds to wait for another connection's lock before failing
            with `sqlite3.OperationalError`.

    Raises:
        ValueError: If ``path`` is ``":memory:"``.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, history: bool = False, timeout: float = 30.0
    ) -> None:
        """Store checkpoints in the SQLite database at ``path``."""
        if os.fspath(path) == ":memory:":
            msg = "SQLiteStore needs a database file: every call opens its own connection"
            raise ValueError(msg)
        self.path = Path(path)
        self.keeps_history = history
        self.timeout = timeout

    def __repr__(self) -> str:
        """Show the path."""
        return f"SQLiteStore({str(self.path)!r})"

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        """Write ``checkpoint`` as its run's row, if its ``seq`` is newer than the stored one.

        Raises:
            StaleCheckpointError: If the row holds a newer checkpoint of the run,
                or a different one with the same ``seq``.
            CheckpointValueError: If an output (or progress or metadata value)
                cannot be written as JSON; the message names the step.
            ValueError: If the checkpoint has no ``run_id`` (an ExecutionKit 0.4
                checkpoint): resume from it and store the run's own checkpoints.
            sqlite3.OperationalError: If the database stays locked longer than
                ``timeout``.
        """
        run_id = checkpoint.run_id
        if run_id is None:
            msg = (
                f"{self!r} keeps one row per run_id, and this checkpoint has none (an "
                f"ExecutionKit 0.4 checkpoint?); resume from it and store the run's own"
            )
            raise ValueError(msg)
        text = _encode(checkpoint, repr(self))
        with self._connect() as connection:
            connection.execute("BEGIN IMMEDIATE")
            with connection:  # commits, or rolls back if anything raises
                self._write(connection, checkpoint, run_id, text)

    def _write(
        self,
        connection: sqlite3.Connection,
        checkpoint: WorkflowCheckpoint,
        run_id: str,
        text: str,
    ) -> None:
        """Inside the open transaction: check the stored seq, then write the row."""
        for statement in _SCHEMA:
            connection.execute(statement)
        if self.keeps_history:
            connection.execute(_HISTORY_SCHEMA)
        row = connection.execute(_SELECT_ROW, (run_id,)).fetchone()
        if row is not None and checkpoint.seq <= row[0]:
            if checkpoint.seq == row[0] and _same_json(row[1], text):
                return  # the same checkpoint again: nothing to do
            raise _stale(repr(self), checkpoint, row[0])
        if row is not None and self.keeps_history:
            connection.execute(_KEEP_REPLACED, (run_id,))
        (written,) = connection.execute(_NEXT_WRITTEN).fetchone()
        connection.execute(_UPSERT, (run_id, checkpoint.seq, written, checkpoint.created_at, text))

    def load(self, run_id: str | None = None) -> WorkflowCheckpoint | None:
        """Return the latest checkpoint of ``run_id``, or None if none is stored.

        Args:
            run_id: The run to load. ``None`` (default) loads the latest
                checkpoint of the run saved to most recently, which is the only
                run when the database holds one.

        Raises:
            CheckpointFormatError: If the stored row is not a valid checkpoint;
                the message names the database and the run.
        """
        if not self.path.exists():
            return None  # rather than create an empty database file
        with self._connect() as connection:
            if not _has_table(connection, "executionkit_checkpoints"):
                return None
            if run_id is None:
                row = connection.execute(_LOAD_LATEST_RUN).fetchone()
            else:
                row = connection.execute(_LOAD_RUN, (run_id,)).fetchone()
        return None if row is None else self._decode(row[0], row[1])

    def history(self, run_id: str) -> list[WorkflowCheckpoint]:
        """Every checkpoint kept for ``run_id``, oldest first, the latest last.

        Without ``history=True`` that is just the latest, if any. Checkpoints a
        save refused as stale are never kept.
        """
        if not self.path.exists():
            return []
        rows: list[tuple[str, str]] = []
        with self._connect() as connection:
            if _has_table(connection, "executionkit_checkpoint_history"):
                rows.extend(connection.execute(_LOAD_HISTORY, (run_id,)).fetchall())
            if _has_table(connection, "executionkit_checkpoints"):
                rows.extend(connection.execute(_LOAD_RUN, (run_id,)).fetchall())
        return [self._decode(row_run_id, data) for row_run_id, data in rows]

    def run_ids(self) -> list[str]:
        """The run_ids with a stored checkpoint, the most recently saved first."""
        if not self.path.exists():
            return []
        with self._connect() as connection:
            if not _has_table(connection, "executionkit_checkpoints"):
                return []
            return [row[0] for row in connection.execute(_RUN_IDS)]

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        import sqlite3  # noqa: PLC0415 - only SQLite users pay for loading it

        connection = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            yield connection
        finally:
            connection.close()

    def _decode(self, run_id: str, data: str) -> WorkflowCheckpoint:
        where = f"{self!r}, run {run_id!r}"
        try:
            parsed = json.loads(data)
        except (TypeError, json.JSONDecodeError) as exc:
            msg = f"{where}: the stored checkpoint is not valid JSON ({exc})"
            raise CheckpointFormatError(msg) from None
        try:
            return WorkflowCheckpoint.from_dict(parsed)
        except CheckpointFormatError as exc:
            raise CheckpointFormatError(f"{where}: {exc}", path=exc.path) from exc


def _has_table(connection: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return connection.execute(query, (name,)).fetchone() is not None
