"""`JsonFileStore`: the latest checkpoint as one JSON file, replaced atomically."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from executionkit._errors import CheckpointFormatError
from executionkit.stores._claims import claimed, lock_owner
from executionkit.stores._common import encode, loads, rebuilt, same_json, stale
from executionkit.stores._files import FileId, path_id, read_bytes, replace_file
from executionkit.stores._inbox import FileRows, RunInbox

if TYPE_CHECKING:
    import contextlib
    import os

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._owner import RunOwner


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

    `claim` makes one live process the owner of the file, so that two
    processes resuming it never both run it: `Workflow.run` takes the claim
    before any step starts and a second run is refused with
    `RunClaimedError`. The claim is an OS lock (``flock``) on the file
    ``<path>.claim`` beside it, released by the OS when its owner ends, even
    killed; that file stays (deleting it would race with a claimant). As the
    file holds one run, while it is claimed a claim for *any* run is refused
    (starting another run would replace the live run's checkpoint). Where
    ``fcntl`` is missing (Windows) no claim is taken.

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
        self._claim_lock = self.path.with_name(f"{self.path.name}.claim")
        self._lock = threading.Lock()
        # (file identity, run_id, seq) of the file as this store last wrote or read it.
        self._known: tuple[FileId, str | None, int] | None = None
        self.inbox = RunInbox(
            repr(self), FileRows(self.path), lambda _run_id: self.load() is not None, one_run=True
        )
        """What the file's run was submitted with and the answers saved for it (`RunInbox`),
        kept in ``<path>.inbox``."""

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
        data = encode(checkpoint, repr(self))
        with self._lock:
            held = self._held()
            if held is not None and held[0] == checkpoint.run_id and checkpoint.seq <= held[1]:
                if checkpoint.seq == held[1]:
                    current = read_bytes(self.path)
                    if current is not None and same_json(self._text(current[0]), data):
                        return  # the same checkpoint again: nothing to do
                raise stale(repr(self), checkpoint, held[1])
            replace_file(self.path, data)
            file_id = path_id(self.path)
            self._known = None if file_id is None else (file_id, checkpoint.run_id, checkpoint.seq)

    def load(self) -> WorkflowCheckpoint | None:
        """Return the stored checkpoint, or None if the file is missing or empty.

        Raises:
            CheckpointFormatError: If the file is not a checkpoint (invalid JSON,
                not UTF-8, JSON this Python cannot read such as an int past the
                digit limit or nesting too deep, or a field
                `WorkflowCheckpoint.from_dict` rejects), or ``path`` is a FIFO or
                a device; the message starts with the path.
        """
        with self._lock:
            read = read_bytes(self.path)
            if read is None:
                return None
            data, file_id = read
            checkpoint = self._parse(data)
            if checkpoint is not None:
                self._known = (file_id, checkpoint.run_id, checkpoint.seq)
            return checkpoint

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

    def _seq_of(self, run_id: str) -> int | None:
        with self._lock:
            held = self._held()
        return held[1] if held is not None and held[0] == run_id else None

    def _held(self) -> tuple[str | None, int] | None:
        """The run_id and seq the file holds, read only if it changed since we saw it."""
        file_id = path_id(self.path)
        if file_id is None:
            return None
        if self._known is not None and self._known[0] == file_id:
            return self._known[1], self._known[2]
        read = read_bytes(self.path)
        if read is None:
            return None
        checkpoint = self._parse(read[0])
        if checkpoint is None:
            return None
        self._known = (read[1], checkpoint.run_id, checkpoint.seq)
        return checkpoint.run_id, checkpoint.seq

    def _text(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            msg = (
                f"{self.path}: not a checkpoint file: not UTF-8 text ({exc.reason} at byte "
                f"{exc.start})"
            )
            raise CheckpointFormatError(msg) from None

    def _parse(self, data: bytes) -> WorkflowCheckpoint | None:
        where = f"{self.path}: not a checkpoint file"
        text = self._text(data)
        if not text.strip():
            return None
        try:
            parsed = loads(text)
        except json.JSONDecodeError as exc:
            msg = f"{where}: invalid JSON at line {exc.lineno} column {exc.colno} ({exc.msg})"
            raise CheckpointFormatError(msg) from None
        except ValueError as exc:
            raise CheckpointFormatError(f"{where}: unreadable JSON ({exc})") from None
        return rebuilt(parsed, str(self.path), where)
