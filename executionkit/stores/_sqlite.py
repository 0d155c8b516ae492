"""`SQLiteStore`: one row per run in an SQLite database, the newest ``seq`` wins."""

from __future__ import annotations

import contextlib
import json
import os
import reprlib
from pathlib import Path
from typing import TYPE_CHECKING

from executionkit._checkpoint import WorkflowCheckpoint
from executionkit._errors import CheckpointFormatError
from executionkit.stores._common import TOO_DEEP, encode, loads, same_json, stale
from executionkit.stores._files import check_regular

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Iterator

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
# The primary result codes of a file that is not an SQLite database, or a damaged one
# (sqlite3.SQLITE_NOTADB and SQLITE_CORRUPT, named here so that importing sqlite3 waits).
_DAMAGED = frozenset({26, 11})


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
        # The run_id and text of this store's last save. A row still holding exactly that
        # text is known to be whole, which spares decoding it before replacing it.
        self._saved: tuple[str, str] | None = None

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
            CheckpointFormatError: If the run's stored row is damaged (it is
                left as it is rather than replaced), or ``path`` is not an
                SQLite database, or is a FIFO or a device.
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
        text = encode(checkpoint, repr(self)).decode("utf-8")
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
        if row is not None and type(row[0]) is not int:
            msg = (
                f"{self!r}, run {run_id!r}: the stored seq must be an int, got "
                f"{type(row[0]).__name__} {reprlib.repr(row[0])}"
            )
            raise CheckpointFormatError(msg)
        if row is not None and self._saved != (run_id, row[1]):
            self._decode(run_id, row[1])  # damaged data is reported, never replaced
        if row is not None and checkpoint.seq <= row[0]:
            if checkpoint.seq == row[0] and same_json(row[1], text):
                return  # the same checkpoint again: nothing to do
            raise stale(repr(self), checkpoint, row[0])
        if row is not None and self.keeps_history:
            connection.execute(_KEEP_REPLACED, (run_id,))
        (written,) = connection.execute(_NEXT_WRITTEN).fetchone()
        connection.execute(_UPSERT, (run_id, checkpoint.seq, written, checkpoint.created_at, text))
        self._saved = (run_id, text)

    def load(self, run_id: str | None = None) -> WorkflowCheckpoint | None:
        """Return the latest checkpoint of ``run_id``, or None if none is stored.

        Args:
            run_id: The run to load. ``None`` (default) loads the latest
                checkpoint of the run saved to most recently, which is the only
                run when the database holds one.

        Raises:
            CheckpointFormatError: If the stored row is not a valid checkpoint
                (the message names the database and the run), or ``path`` is not
                an SQLite database, or is a FIFO or a device.
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

        Raises:
            CheckpointFormatError: As `load` does, for any of the rows.
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
        """The run_ids with a stored checkpoint, the most recently saved first.

        Raises:
            CheckpointFormatError: If ``path`` is not an SQLite database, is a
                FIFO or a device, or a stored run_id is not text.
        """
        if not self.path.exists():
            return []
        with self._connect() as connection:
            if not _has_table(connection, "executionkit_checkpoints"):
                return []
            run_ids = [row[0] for row in connection.execute(_RUN_IDS)]
        for run_id in run_ids:
            if not isinstance(run_id, str):
                msg = f"{self!r}: a stored run_id is not text: {reprlib.repr(run_id)}"
                raise CheckpointFormatError(msg)
        return run_ids

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection to the database, with damage reported as `CheckpointFormatError`."""
        import sqlite3  # noqa: PLC0415 - only SQLite users pay for loading it

        try:
            mode = self.path.stat().st_mode
        except FileNotFoundError:
            pass  # a save creates the database
        else:  # SQLite would wait forever reading a FIFO
            check_regular(mode, self.path, f"{self!r}: not a database file")
        connection = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        connection.text_factory = _text_or_bytes
        try:
            yield connection
        except sqlite3.DatabaseError as exc:
            # Not OperationalError in general: a database locked too long stays one.
            if getattr(exc, "sqlite_errorcode", -1) & 0xFF not in _DAMAGED:
                raise
            raise CheckpointFormatError(f"{self!r}: not an SQLite database ({exc})") from exc
        finally:
            connection.close()

    def _decode(self, run_id: object, data: object) -> WorkflowCheckpoint:
        where = f"{self!r}, run {run_id!r}"
        if isinstance(data, bytes):  # a BLOB, or text that is not UTF-8 (see _text_or_bytes)
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                msg = (
                    f"{where}: the stored checkpoint is not UTF-8 text ({exc.reason} at byte "
                    f"{exc.start})"
                )
                raise CheckpointFormatError(msg) from None
        if not isinstance(data, str):
            msg = (
                f"{where}: the stored checkpoint is not JSON text, got "
                f"{type(data).__name__} {reprlib.repr(data)}"
            )
            raise CheckpointFormatError(msg)
        try:
            parsed = loads(data)
        except json.JSONDecodeError as exc:
            msg = f"{where}: the stored checkpoint is not valid JSON ({exc})"
            raise CheckpointFormatError(msg) from None
        except ValueError as exc:
            msg = f"{where}: the stored checkpoint is unreadable JSON ({exc})"
            raise CheckpointFormatError(msg) from None
        try:
            return WorkflowCheckpoint.from_dict(parsed)
        except CheckpointFormatError as exc:
            raise CheckpointFormatError(f"{where}: {exc}", path=exc.path) from exc
        except RecursionError:
            raise CheckpointFormatError(f"{where}: {TOO_DEEP}") from None


def _text_or_bytes(data: bytes) -> str | bytes:
    """Text columns as str; sqlite3 would fail the whole query on text that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # for _decode to name, with the run it belongs to


def _has_table(connection: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return connection.execute(query, (name,)).fetchone() is not None
