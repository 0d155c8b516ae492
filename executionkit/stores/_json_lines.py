"""`JsonLinesStore`: an append-only JSON Lines file of each checkpoint's new outputs."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from executionkit._checkpoint._lineage import lineage_dict
from executionkit._checkpoint._value import FORMAT_VERSION, WorkflowCheckpoint
from executionkit._errors import CheckpointFormatError, CheckpointValueError
from executionkit.stores._claims import claimed, lock_owner
from executionkit.stores._common import (
    attempts_length,
    common_prefix,
    dumps,
    encode,
    ledger_length,
    loads,
    next_attempts,
    next_ledger_rows,
    same_json,
    stale,
)
from executionkit.stores._files import (
    WRITE_FLAGS,
    FileId,
    fd_id,
    fsync_folder,
    path_id,
    read_bytes,
    write_all,
)
from executionkit.stores._history import CheckpointInfo, CheckpointNotKeptError, check_seq
from executionkit.stores._inbox import FileRows, RunInbox
from executionkit.stores._lines_format import (
    COST,
    LineHistory,
    LogPrefix,
    Rebuild,
    extra_fields,
    follows,
    log_prefix,
    pack_info,
    unfinished,
)
from executionkit.stores._lines_items import item_differences, new_item_entries, next_items
from executionkit.stores._unstorable import unstorable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from executionkit._checkpoint._ledger import LedgerEntry
    from executionkit._checkpoint._times import Attempt
    from executionkit._owner import RunOwner

_E = TypeVar("_E")


@dataclass
class _LinesState:
    """What a JSON Lines file holds, as this store last read or wrote it."""

    file_id: FileId | None  # None: the file does not exist
    end: int  # bytes up to the end of the last line that counts
    latest: WorkflowCheckpoint | None  # the checkpoint the counted lines rebuild to
    # The run's output log whose first names are, in order, the outputs the lines rebuild
    # to, and how many; None when not known to be so (see _lines_format.follows).
    prefix: LogPrefix | None = None


class JsonLinesStore:
    """An append-only JSON Lines file: one line per checkpoint, new outputs only.

    Writing the whole checkpoint after every batch rewrites every output each
    time, so for a long chain the bytes written grow with the square of its
    length. This store appends one line per checkpoint holding only what
    changed: the outputs recorded since the line before (with their steps'
    versions and dependencies) and the other fields. Each save writes and
    computes only that: the run's next checkpoint is recognised in constant
    time (it shares the run's output log with the one stored, and counts its
    outputs plus ``new_outputs``), so no earlier output is walked, compared or
    encoded again, however long the run.

    The line format (compact JSON, one object per line): ``s`` is ``seq``;
    ``n`` maps each newly recorded step to ``[output, info]``, where ``info``
    is the list of its dependencies, or for a versioned step (or any other)
    ``{"v": version, "d": dependencies}`` with ``"k"`` (its kind, unless a
    plain step), ``"c"`` (its ``code``) and ``"a"`` (its ``answered_by``) when
    it has them; ``c`` is the token usage ``[input, output, calls]``
    and ``t`` the time; ``errors``, ``progress`` and ``progress_info`` appear
    when there are any; ``i`` holds the items of unfinished maps recorded
    since the line before; ``l`` the cost ledger's rows written since the line
    before (``ledger`` rows of `WorkflowCheckpoint.to_dict`, each written once),
    with ``lk``, the number of rows the file held that still count, only when
    the checkpoint does not extend them; ``a`` and ``ak`` the same for the
    ``attempts`` entries (format 5: when each attempt ran), each written once;
    ``f`` the attempts in flight when the
    checkpoint was taken (``in_flight``), when there are any, or instead
    ``fd``, ``[ended, started]``: those of the line before that ended and those
    started since (when that is shorter); and ``x`` holds
    any other key of `WorkflowCheckpoint.to_dict` when not empty, whole:
    ``skipped``, ``pending``, ``children``, and format 5's ``waits`` and
    ``in_flight_items`` (a few entries each, one per step waiting or map
    running, so written whole on each line). A line that starts a run, or
    changes what the file holds otherwise (a resumed run dropped outputs or
    reordered them, or passed new metadata or context keys), also holds
    ``run``: the ``run_id``, ``context_keys``, ``metadata``, the run's
    ``trace`` and ``lineage`` (when it has them) and ``keep``, every output
    name the checkpoint records, in order. A ``run`` of another ``run_id``
    starts the ledger and the attempts over.

    `load` reads the file once and folds the lines in order, rebuilding the
    latest checkpoint exactly (``to_dict()`` equal, output order included). A
    line counts once its newline is written: a torn last line, left by a
    crash in the middle of a write, is ignored (that checkpoint was never
    stored, and the run resumes from the one before) and is cut off before the
    next append. A damaged line anywhere else raises `CheckpointFormatError`
    naming ``file:line``. Outputs a resumed run dropped (a rerun or an
    invalidated step) stay dropped in the rebuild.

    A checkpoint that does not follow the stored one (the first, one of
    another run, one from a run resumed from the file or from elsewhere, one
    read back with `WorkflowCheckpoint.from_dict`) is compared with what the
    file holds, output by output, and written with every output the file
    lacks or holds differently, so the rebuild always equals the checkpoint
    saved. A checkpoint of another ``run_id`` starts the file over; within a
    run, one that is not newer than the stored one is refused with
    `StaleCheckpointError`. One writer per file: appends from several
    processes are not coordinated (threads sharing one store are).

    `claim` makes one live process the owner of the file, so that two
    processes resuming it never both run it: `Workflow.run` takes the claim
    before any step starts and a second run is refused with
    `RunClaimedError`. The claim is an OS lock (``flock``) on the file
    ``<path>.claim`` beside it (``run.jsonl.claim``), released by the OS when
    its owner ends, even killed; that file stays (deleting it would race with
    a claimant). As the file holds one run, while it is claimed a claim for
    *any* run is refused (starting another run would start the file over
    under the live run). Where ``fcntl`` is missing (Windows) no claim is
    taken.

    As each line is one checkpoint, the file keeps every checkpoint of its
    current run: `checkpoints` lists them (from the lines, none rebuilt) and
    ``load(seq=N)`` rebuilds one by folding the lines up to its own.

    Only checkpoints of the current format (those `Workflow.run` writes) can be
    stored. Lines that no longer count (outputs a rerun replaced, runs the
    file started over from) stay until `compact` rewrites the file as its
    latest checkpoint alone.

    The file is kept open between saves (one descriptor, closed by `close`
    or when the store is garbage-collected): the run's next line is written,
    fsynced and returns without reopening it. It is opened anew whenever the
    file at ``path`` is another one (replaced, compacted, deleted) or the
    process forked.

    Args:
        path: The ``.jsonl`` file; created on the first save.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Store checkpoints in the JSON Lines file at ``path``."""
        self.path = Path(path)
        self._claim_lock = self.path.with_name(f"{self.path.name}.claim")
        self._lock = threading.Lock()
        self.inbox = RunInbox(repr(self), FileRows(self.path), self._holds_any, one_run=True)
        """What the file's run was submitted with and the answers saved for it (`RunInbox`),
        kept in ``<path>.inbox``."""
        self._state: _LinesState | None = None
        self._open: _OpenFile | None = None  # the descriptor kept open between saves

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
                raise stale(repr(self), checkpoint, latest.seq)
            line, prefix = self._line(checkpoint, latest if same_run else None, state.prefix)
            try:
                data = (dumps(line) + "\n").encode("utf-8")
            except (TypeError, ValueError, RecursionError) as exc:
                raise unstorable(checkpoint, repr(self), exc) from exc
            self._state = None  # unknown until the append has finished
            self._state = self._append(state, data, checkpoint, prefix)

    def close(self) -> None:
        """Close the file this store keeps open between saves.

        Optional: it closes when the store is garbage-collected, and the next
        save opens it again.
        """
        with self._lock:
            self._forget_open()

    def _forget_open(self) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            opened.close()

    def load(self, *, seq: int | None = None) -> WorkflowCheckpoint | None:
        """Return the latest checkpoint the file holds (or the one of ``seq``), or None.

        Args:
            seq: Load the checkpoint of this ``seq`` of the file's current run
                instead of the latest, exactly as it was saved: the lines are
                folded up to its own (see `checkpoints` for the seqs kept).

        Returns:
            The checkpoint, or None if the file holds none.

        Raises:
            CheckpointNotKeptError: If ``seq`` is given and the file's current
                run has no checkpoint of that ``seq``; the message names those
                it has.
            TypeError: If ``seq`` is not an int.
            CheckpointFormatError: If a line other than the last is damaged
                (``path:line`` in the message; the last one too if it is whole
                JSON this Python cannot read), the lines do not rebuild into a
                valid checkpoint, or ``path`` is a FIFO or a device.
        """
        if seq is None:
            with self._lock:
                self._state = self._read()
                return self._state.latest
        wanted = check_seq(seq)
        lines = self._lines()
        if lines is None:
            return None
        listing = self._listing(lines)
        position = listing.position_of(wanted)
        if position is None:
            if not listing.listed:
                return None
            kept = [info.seq for info in listing.listed]
            note = "a JSON Lines file keeps the checkpoints of its current run until compact()"
            raise CheckpointNotKeptError(
                repr(self), listing.listed[-1].run_id, wanted, kept, note=note
            )
        rebuild = Rebuild(str(self.path))
        for number, line in lines[: position + 1]:
            rebuild.fold(line, number)
        return rebuild.checkpoint()

    def checkpoints(self) -> list[CheckpointInfo]:
        """Describe every checkpoint of the file's current run, oldest first.

        Each line of the file is one checkpoint (its ``seq`` is the line's
        ``s``), so the list comes from one read of the file, without
        rebuilding any checkpoint: the outputs a checkpoint newly recorded are
        those its line holds. Lines written before the file started over (a
        checkpoint of another ``run_id``) belong to another run and are left
        out, as are the lines `compact` folded into one. `load` with ``seq=``
        rebuilds the one you want.

        Returns:
            The checkpoints, oldest first; empty if the file holds none.

        Raises:
            CheckpointFormatError: As `load` does.
        """
        lines = self._lines()
        return [] if lines is None else self._listing(lines).listed

    def history(self, run_id: str | None = None) -> list[WorkflowCheckpoint]:
        """Every checkpoint of the file's current run, oldest first, the latest last.

        As the SQL stores' ``history(run_id)``: with ``run_id``, empty unless the
        file's current run is that one. The file is read and folded once; each
        checkpoint is rebuilt and validated whole, as `load` with ``seq=``
        rebuilds one (to go back through a long run, list it with
        `checkpoints` and load the one you want).

        Raises:
            CheckpointFormatError: As `load` does.
        """
        lines = self._lines()
        if lines is None:
            return []
        listing = self._listing(lines)
        if not listing.listed or (run_id is not None and listing.listed[-1].run_id != run_id):
            return []
        wanted = set(listing.positions)
        rebuild = Rebuild(str(self.path))
        found: list[WorkflowCheckpoint] = []
        for position, (number, line) in enumerate(lines):
            rebuild.fold(line, number)
            if position in wanted:
                checkpoint = rebuild.checkpoint()
                assert checkpoint is not None  # noqa: S101 - a folded line leaves a state
                found.append(checkpoint)
        return found

    def _lines(self) -> list[tuple[int, object]] | None:
        """The file's lines that count, parsed, with their numbers; None if there is no file."""
        read = read_bytes(self.path)
        if read is None:
            return None
        return self._parse(read[0])[0]

    def _listing(self, lines: list[tuple[int, object]]) -> LineHistory:
        listing = LineHistory(str(self.path))
        for position, (number, line) in enumerate(lines):
            listing.add(position, line, number)
        return listing

    def claim(self, run_id: str) -> contextlib.AbstractContextManager[int | None]:
        """Claim the file for ``run_id``, until the context manager is left.

        Entering takes the claim and gives the ``seq`` of the checkpoint of
        ``run_id`` the file holds, read once the claim is held (None if it
        holds none, or one of another run). Leaving gives the claim up.

        Raises:
            RunClaimedError: On entering, if the file is claimed, by another
                process or by another claim in this one, whatever its run: the
                error names the owner and the run it owns. Nothing was written.
            CheckpointFormatError: On entering, as `load` does.
        """
        return claimed(
            repr(self), self._claim_lock, run_id, lambda: self._seq_of(run_id), one_run=True
        )

    def owner(self, run_id: str | None = None) -> RunOwner | None:  # noqa: ARG002 - one run
        """Who holds the file's claim now, or None if no live process does.

        The file holds one run, so this is its owner whichever ``run_id`` is
        asked about; its ``run_id`` says which run it claimed. Asking never
        makes a claim fail.
        """
        return lock_owner(self._claim_lock)

    def _holds_any(self, _run_id: str) -> bool:
        with self._lock:
            return self._current().latest is not None

    def _seq_of(self, run_id: str) -> int | None:
        with self._lock:
            latest = self._current().latest
        return latest.seq if latest is not None and latest.run_id == run_id else None

    def compact(self) -> None:
        """Rewrite the file as one line holding its latest checkpoint, atomically.

        The file grows by each checkpoint's new outputs, so a run that drops
        outputs (``rerun``, invalidated steps) or starts over leaves lines that
        no longer count, and `load` reads them all. Compaction writes the
        latest checkpoint alone to a temporary file in the same folder, fsyncs
        it, renames it over the file and fsyncs the folder: whenever the
        process dies, the file holds the old lines or the new one, never a mix.
        It costs one read of the file and one write of the latest checkpoint,
        about what a `JsonFileStore` save costs. Call it when a run has
        finished, or when the file is several times larger than its latest
        checkpoint; not while another process appends to the file. A missing
        or empty file is left as it is.

        Raises:
            CheckpointFormatError: If the file holds damaged lines (it is then
                left as it is).
            OSError: If writing fails; the file is then left as it was.
        """
        with self._lock:
            state = self._current()
            latest = state.latest
            if latest is None:
                return
            line, _ = self._line(latest, None, None)
            data = (dumps(line) + "\n").encode("utf-8")
            self._state = None  # unknown until the rename has finished
            self._forget_open()  # the file it held is replaced
            # The line keeps the outputs in their order, so the prefix still holds.
            self._state = _LinesState(self._replace(data), len(data), latest, state.prefix)

    def _replace(self, data: bytes) -> FileId:
        fd, name = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        temp = Path(name)
        try:
            try:
                write_all(fd, data)
                os.fsync(fd)
                file_id = fd_id(fd)
            finally:
                os.close(fd)
            temp.replace(self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        fsync_folder(self.path.parent)
        return file_id

    def _same(self, checkpoint: WorkflowCheckpoint, latest: WorkflowCheckpoint) -> bool:
        if checkpoint is latest:
            return True
        mine = encode(checkpoint, repr(self))
        try:
            stored = encode(latest, repr(self))
        except CheckpointValueError:  # the file holds what no store writes (a hand edit)
            return False
        return same_json(mine, stored)

    def _current(self) -> _LinesState:
        """The state, read again if the file changed since this store last saw it."""
        if self._state is None or self._state.file_id != path_id(self.path):
            self._state = self._read()
        return self._state

    def _line(
        self,
        checkpoint: WorkflowCheckpoint,
        previous: WorkflowCheckpoint | None,
        prefix: LogPrefix | None,
    ) -> tuple[dict[str, Any], LogPrefix | None]:
        """The line for ``checkpoint``, and the log prefix the file rebuilds to after it."""
        after = None if previous is None else follows(checkpoint, previous, prefix)
        if previous is not None and after is not None:
            # The run's next checkpoint: only its new outputs differ from the file.
            new = {
                name: [checkpoint.outputs[name], pack_info(checkpoint.step_info.get(name))]
                for name in checkpoint.new_outputs
            }
            restart = not same_run_fields(previous, checkpoint)
        else:
            new, restart = _differences(checkpoint, previous)
            after = log_prefix(checkpoint)
        line: dict[str, Any] = {
            "s": checkpoint.seq,
            "n": new,
            "c": [getattr(checkpoint.cost, field) for field in COST],
            "t": checkpoint.created_at,
        }
        if restart:
            line["run"] = {
                "run_id": checkpoint.run_id,
                "context_keys": list(checkpoint.context_keys),
                "metadata": dict(checkpoint.metadata),
                "keep": list(checkpoint.outputs),
            }
            if checkpoint.trace is not None:
                line["run"]["trace"] = checkpoint.trace
            if checkpoint.lineage:
                line["run"]["lineage"] = lineage_dict(checkpoint.lineage)
        if checkpoint.errors:
            line["errors"] = dict(checkpoint.errors)
        if checkpoint.progress:
            line["progress"] = dict(checkpoint.progress)
        others = unfinished(checkpoint)
        if others:
            # Named for what it first held; it describes every step without an output.
            line["progress_info"] = {
                name: pack_info(checkpoint.step_info[name]) for name in others
            }
        _add_later_keys(line, checkpoint, previous)
        return line, after

    def _append(
        self,
        state: _LinesState,
        data: bytes,
        checkpoint: WorkflowCheckpoint,
        prefix: LogPrefix | None,
    ) -> _LinesState:
        created = state.file_id is None
        fd = self._descriptor(state.file_id)
        try:
            if not created and state.file_id is not None and state.file_id[2] != state.end:
                os.ftruncate(fd, state.end)  # cut off a torn last line before appending
            os.lseek(fd, state.end, os.SEEK_SET)
            write_all(fd, data)
            os.fsync(fd)
            file_id = fd_id(fd)
        except BaseException:
            self._forget_open()  # opened again by the next save
            raise
        if created:
            fsync_folder(self.path.parent)
        return _LinesState(file_id, state.end + len(data), checkpoint, prefix)

    def _descriptor(self, file_id: FileId | None) -> int:
        """A descriptor open for writing on the file at ``path``, whose identity is ``file_id``.

        ``file_id`` is what ``path`` was found to be just before (`_current`), so
        the descriptor kept open is reused only if it is that very file, opened
        by this process; otherwise the file is opened (created if missing) again.
        """
        opened = self._open
        if (
            opened is not None
            and file_id is not None
            and opened.pid == os.getpid()
            and opened.file == file_id[:2]
        ):
            return opened.fd
        self._forget_open()
        fd = os.open(self.path, WRITE_FLAGS, 0o666)
        try:
            info = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        self._open = _OpenFile(self, fd, (info.st_dev, info.st_ino))
        return fd

    def _read(self) -> _LinesState:
        read = read_bytes(self.path)
        if read is None:
            return _LinesState(None, 0, None)
        data, file_id = read
        lines, end = self._parse(data)
        rebuild = Rebuild(str(self.path))
        for number, line in lines:
            rebuild.fold(line, number)
        return _LinesState(file_id, end, rebuild.checkpoint())

    def _parse(self, data: bytes) -> tuple[list[tuple[int, object]], int]:
        """The lines of ``data`` that count, parsed and numbered, and the bytes they end at."""
        lines = data.split(b"\n")
        # The part after the last newline was never completed: it does not count.
        complete = lines[:-1]
        parsed_lines: list[tuple[int, object]] = []
        end = 0
        for number, raw in enumerate(complete, start=1):
            last = number == len(complete) and not lines[-1]
            if raw.strip():
                try:
                    parsed = loads(raw.decode("utf-8"))
                except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError too
                    if last and isinstance(exc, (UnicodeDecodeError, json.JSONDecodeError)):
                        break  # a torn last line: that checkpoint never reached the disk
                    msg = f"{self.path}:{number}: not a checkpoint line ({_line_problem(exc)})"
                    raise CheckpointFormatError(msg) from None
                parsed_lines.append((number, parsed))
            end += len(raw) + 1
        return parsed_lines, end


class _OpenFile:
    """A descriptor a `JsonLinesStore` keeps open, closed once: by `close` or with its store."""

    def __init__(self, store: JsonLinesStore, fd: int, file: tuple[int, int]) -> None:
        self.fd = fd
        self.file = file  # device and inode
        self.pid = os.getpid()
        # Closes the descriptor when the store is garbage-collected, or when called, once.
        self._finalizer = weakref.finalize(store, _close_quietly, fd)

    def close(self) -> None:
        self._finalizer()


def _close_quietly(fd: int) -> None:
    """Close ``fd`` (in a forked child, its own copy: the parent's stays open)."""
    with contextlib.suppress(OSError):
        os.close(fd)


def _line_problem(exc: ValueError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: {exc.reason} at byte {exc.start}"
    if isinstance(exc, json.JSONDecodeError):
        return "invalid JSON"
    return f"unreadable JSON: {exc}"  # valid JSON this Python cannot read


def _differences(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None
) -> tuple[dict[str, list[Any]], bool]:
    """Every output the file lacks or holds differently, and whether to say what it keeps.

    The slow path, for a checkpoint that does not follow the stored one (the
    first, one of another run, or one of a resumed run): it walks every output.
    The ``run`` entry is needed when the rebuild would otherwise get the names
    wrong: outputs dropped, their order changed, a new run, new metadata.
    """
    held = previous.outputs if previous is not None else {}
    held_info = previous.step_info if previous is not None else {}
    reported = set(checkpoint.new_outputs)
    new = {}
    for name, value in checkpoint.outputs.items():
        info = checkpoint.step_info.get(name)
        if (
            name in reported
            or name not in held
            or not _unchanged(held[name], value)
            or not _unchanged(held_info.get(name), info)
        ):
            new[name] = [value, pack_info(info)]
    if previous is None:
        return new, True
    rebuilt = [*held, *(name for name in new if name not in held)]
    restart = (
        rebuilt != list(checkpoint.outputs)  # outputs dropped, or in another order
        or not same_run_fields(previous, checkpoint)
    )
    return new, restart


def same_run_fields(previous: WorkflowCheckpoint, checkpoint: WorkflowCheckpoint) -> bool:
    """Whether the fields a line's ``run`` holds (besides ``keep``) are unchanged: O(1)."""
    return (
        previous.context_keys == checkpoint.context_keys
        and previous.metadata == checkpoint.metadata
        and previous.trace == checkpoint.trace
        and lineage_dict(previous.lineage) == lineage_dict(checkpoint.lineage)
    )


def _add_later_keys(
    line: dict[str, Any], checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None
) -> None:
    """Add what formats 3 to 5 added: ``i``, ``lk``, ``l``, ``ak``, ``a``, ``f`` and ``x``."""
    if checkpoint.items:
        if next_items(checkpoint, previous):  # only what is new: O(new items)
            line["i"] = new_item_entries(checkpoint)
        else:
            line["i"] = item_differences(checkpoint, previous)
    rows, keep = _ledger_rows(checkpoint, previous)
    if keep is not None:
        line["lk"] = keep
    if rows:
        line["l"] = [row.to_list() for row in rows]
    entries, kept = _attempt_entries(checkpoint, previous)
    if kept is not None:
        line["ak"] = kept
    if entries:
        line["a"] = [list(entry) for entry in entries]
    line.update(_in_flight(checkpoint, previous))
    extra = extra_fields(checkpoint)
    if extra:
        line["x"] = extra


def _in_flight(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None
) -> dict[str, list[Any]]:
    """The attempts in flight: ``f``, all of them, or ``fd``, what changed since ``previous``.

    ``fd`` is ``[ended, started]``: the attempts of the line before that ended,
    and those started since, which come after the others (a run lists them in
    the order they started). Written when shorter, so that a line of a wide map
    does not list every item still running, again and again. Nothing: none.
    """
    running = checkpoint.in_flight
    held = () if previous is None else previous.in_flight
    if not held or not running:
        return {"f": [list(attempt) for attempt in running]} if running else {}
    now = set(running)
    ended = [attempt for attempt in held if attempt not in now]
    kept = len(held) - len(ended)
    started = running[kept:]
    if (
        len(ended) + len(started) < len(running)
        and running[:kept] == tuple(attempt for attempt in held if attempt in now)
        and not set(started) & set(held)
    ):
        return {"fd": [[list(a) for a in ended], [list(a) for a in started]]}
    return {"f": [list(attempt) for attempt in running]}


def _ledger_rows(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None
) -> tuple[Sequence[LedgerEntry], int | None]:
    """The ledger rows a line appends (``l``), and how many held rows it keeps (``lk``).

    The run's next checkpoint appends its ``new_ledger``: O(new rows). Any other
    is compared row by row with what the file holds (``previous``, of the same
    run, or nothing: a line starting another run starts the ledger over), and
    ``lk`` is written only when the file holds rows the checkpoint does not.
    """
    if previous is None:
        return checkpoint.ledger, None
    rows = next_ledger_rows(checkpoint, previous, ledger_length(previous))
    return (rows, None) if rows is not None else _tail(previous.ledger, checkpoint.ledger)


def _attempt_entries(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None
) -> tuple[Sequence[Attempt], int | None]:
    """The ``attempts`` entries a line appends (``a``), and how many held ones it keeps (``ak``).

    As `_ledger_rows`: the run's next checkpoint appends its ``new_attempts``,
    O(new entries); any other is compared entry by entry with the file's.
    """
    if previous is None:
        return checkpoint.attempts, None
    entries = next_attempts(checkpoint, previous, attempts_length(previous))
    if entries is not None:
        return entries, None
    return _tail(previous.attempts, checkpoint.attempts)


def _tail(held: Sequence[_E], wanted: Sequence[_E]) -> tuple[Sequence[_E], int | None]:
    """The slow path of an append-only log: compared entry by entry with the file's.

    What a line appends (``wanted`` after what it has in common with ``held``),
    and how many held entries it keeps, given only when the file holds entries
    ``wanted`` does not.
    """
    kept = common_prefix(held, wanted)
    return wanted[kept:], (kept if kept < len(held) else None)


def _unchanged(held: object, value: object) -> bool:
    try:
        return held is value or bool(held == value)
    except RecursionError:  # too deep to compare: write it again rather than fail
        return False
