"""`SQLiteStore`: checkpoints of any number of runs in an SQLite database, incrementally."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from executionkit._errors import CheckpointFormatError
from executionkit.stores._claims import claimed, lock_owner, run_lock_name
from executionkit.stores._files import check_regular
from executionkit.stores._history import check_seq
from executionkit.stores._inbox import RunInbox, SqlRows
from executionkit.stores._sql import SqlCheckpoints
from executionkit.stores._sql_next import write_next
from executionkit.stores._sql_schema import (
    INBOX_TABLE,
    LIMITS_READ,
    LIMITS_TABLE,
    LIMITS_WRITE,
    Dialect,
    tables,
    upgrade,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Iterator

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._owner import RunOwner
    from executionkit.stores._history import CheckpointInfo
    from executionkit.stores._sql_next import Known, NextSave

_T = TypeVar("_T")


_DIALECT = Dialect(
    schema=tables("INTEGER", " WITHOUT ROWID"),
    upgrade=upgrade("INTEGER", " WITHOUT ROWID"),
    # BEGIN IMMEDIATE already holds the database's write lock.
    lock_run="SELECT seq, written, next_ord FROM executionkit_runs WHERE run_id = ?",
    next_written="(SELECT COALESCE(MAX(written), 0) + 1 FROM executionkit_runs)",
)
# The table of the first, unreleased SQLiteStore, which rewrote each run's whole JSON.
_OLD_TABLE = "executionkit_checkpoints"
# The primary result codes of a file that is not an SQLite database, or a damaged one
# (sqlite3.SQLITE_NOTADB and SQLITE_CORRUPT, named here so that importing sqlite3 waits).
_DAMAGED = frozenset({26, 11})
_SYNCHRONOUS = ("FULL", "NORMAL")
# Connections a forked child inherited: kept referenced, never closed (see _forget).
_INHERITED: list[object] = []


class SQLiteStore:
    """Checkpoints in an SQLite database, written incrementally, any number of runs.

    A save writes one small header row (the checkpoint without its outputs) and
    one row per output recorded since the previous checkpoint, so its cost does
    not grow with the length of the run. Each save is one ``BEGIN IMMEDIATE``
    transaction that writes only if the new ``seq`` is higher than the stored
    one of the checkpoint's run, so a stale writer, in another thread or
    process, gets `StaleCheckpointError` and changes nothing. The run's next
    checkpoint after the one a store object saved last is written without a
    read: one ``UPDATE`` of the run's row fenced on the ``seq``, save counter
    and header that object wrote, then the new rows (five statements in all
    for a step's output, plus one per ledger row and ``attempts`` entry); if
    anything changed meanwhile, the save reads and compares as any other. Each
    thread uses its own connection, kept open between calls (`close` closes
    them) and reopened if the file is replaced or the process forks; it waits
    up to ``timeout`` for another writer's lock. So one store can be shared by
    threads, and processes can each open their own on the same file.

    The database is put in WAL mode (readers never block the writer). With
    ``synchronous="FULL"`` (the default) a save returns once its checkpoint is
    on disk: neither a crash nor a power loss loses it. ``"NORMAL"`` skips that
    fsync: a process crash still loses nothing, a power loss may lose the last
    checkpoints (never tearing one); see the how-to for the measured cost.

    The tables, created on the first save in the database you name (it may be
    your application's):

    ```sql
    CREATE TABLE executionkit_schema (version INTEGER NOT NULL);  -- one row: 5
    CREATE TABLE executionkit_runs (
        run_id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,  -- the latest checkpoint's seq: the stale-writer fence
        written INTEGER NOT NULL,  -- 1, 2, 3...: the order of the saves, across runs
        next_ord INTEGER NOT NULL  -- the ord of the run's next output, item, ledger or
                                   -- attempts row
    ) WITHOUT ROWID;
    CREATE INDEX executionkit_runs_written ON executionkit_runs (written);
    CREATE TABLE executionkit_headers (  -- one per checkpoint kept
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        created_at TEXT,
        header TEXT NOT NULL,  -- to_dict() without outputs, step_index and items' outputs,
                               -- its "ledger" the number of ledger rows (format 4),
                               -- its "attempts" the number of attempts rows (format 5)
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE executionkit_outputs (  -- one per output recorded
        run_id TEXT NOT NULL,
        ord INTEGER NOT NULL,  -- the order of the outputs in the run
        name TEXT NOT NULL,
        added INTEGER NOT NULL,  -- the seq that recorded it
        dropped INTEGER,  -- the seq from which a resumed run replaced or dropped it
        value TEXT NOT NULL,  -- [output, step info] as JSON
        PRIMARY KEY (run_id, ord)
    );
    CREATE TABLE executionkit_items (  -- one per item of a map recorded
        run_id TEXT NOT NULL,
        ord INTEGER NOT NULL,  -- the order of the items in the run
        step TEXT NOT NULL,  -- the map step
        item TEXT NOT NULL,  -- the item's key
        added INTEGER NOT NULL,  -- the seq that recorded it
        dropped INTEGER,  -- the seq from which the map finished, or a resume dropped it
        value TEXT NOT NULL,  -- the item's output as JSON
        PRIMARY KEY (run_id, ord)
    );
    CREATE TABLE executionkit_ledger (  -- one per cost ledger row (schema 3)
        run_id TEXT NOT NULL,
        ord INTEGER NOT NULL,  -- the order of the rows in the run
        added INTEGER NOT NULL,  -- the seq that wrote it
        dropped INTEGER,  -- the seq from which a checkpoint no longer holds it
        step TEXT NOT NULL,  -- the row's eight values, as to_dict()["ledger"] lists them
        item TEXT,
        attempt INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        model TEXT,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        llm_calls INTEGER NOT NULL,
        PRIMARY KEY (run_id, ord)
    );
    CREATE TABLE executionkit_attempts (  -- one per attempts entry (schema 5)
        run_id TEXT NOT NULL,
        ord INTEGER NOT NULL,  -- the order of the entries in the run
        added INTEGER NOT NULL,  -- the seq that wrote it
        dropped INTEGER,  -- the seq from which a checkpoint no longer holds it
        step TEXT NOT NULL,  -- the entry's six values, as to_dict()["attempts"] lists them
        item TEXT,
        attempt INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        started INTEGER NOT NULL,  -- milliseconds since the Unix epoch
        ended INTEGER NOT NULL,
        PRIMARY KEY (run_id, ord)
    );
    CREATE TABLE executionkit_limits (  -- one per shared Limit key (see limit_state)
        key TEXT PRIMARY KEY,
        state TEXT NOT NULL  -- the key's window as JSON, outside the schema version
    );
    ```

    The checkpoint of ``seq`` k is its header plus the output rows with
    ``added <= k`` and no ``dropped <= k``, in ``ord`` order; its ``items``
    are, for each map its header lists (with the map's cost), that map's item
    rows visible at k the same way; its ``ledger`` is the ledger rows visible
    at k, as many as its header counts, in ``ord`` order, and its ``attempts``
    the attempts rows visible at k the same way. A save writes one row per
    output, per item, per ledger row and per attempts entry recorded since the
    previous checkpoint (``new_ledger``, ``new_attempts``): the header does not
    grow with the run. A database of schema version 2 (before the ledger
    table), 3 (rowid runs and headers tables, an index on ``dropped`` of the
    outputs, items and ledger) or 4 (before the attempts table) is read as it
    is and upgraded in place by the first write (the missing tables created,
    the runs and headers tables of schemas 2 and 3 copied into ``WITHOUT
    ROWID`` ones, the indexes dropped and the version set to 5, in that
    write's transaction); an older executionkit then refuses it. A database
    holding the table ``executionkit_checkpoints`` of the first, unreleased
    SQLiteStore, or tables of schema version 1 (also unreleased, which kept
    items in each header), or of a newer schema than 5, is refused with
    `CheckpointFormatError`.

    `claim` makes one live process the owner of a run, so that two processes
    resuming it never both run it: `Workflow.run` takes the claim before any
    step starts and a second run is refused with `RunClaimedError`. Each run
    has its own claim, so runs in one database never block each other. A claim
    is an OS lock (``flock``) on a lock file of the run in the folder
    ``<path>.claims`` (created on the first claim), named by a hash of the
    run_id, released by the OS when its owner ends, even killed; the lock files
    stay (deleting one would race with a claimant). Where ``fcntl`` is missing
    (Windows) no claim is taken.

    Args:
        path: The database file (not ``":memory:"``: each call connects anew).
        history: Keep every checkpoint saved; see `checkpoints`, `load` with
            ``seq=`` and `prune`.
            Without it a save deletes the checkpoint it replaces.
        timeout: Seconds to wait for another connection's lock before failing
            with `sqlite3.OperationalError`.
        synchronous: ``"FULL"`` (fsync every save) or ``"NORMAL"``.

    Raises:
        ValueError: If ``path`` is ``":memory:"``, or ``synchronous`` is
            neither ``"FULL"`` nor ``"NORMAL"``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        history: bool = False,
        timeout: float = 30.0,
        synchronous: str = "FULL",
    ) -> None:
        """Store checkpoints in the SQLite database at ``path``."""
        if os.fspath(path) == ":memory:":
            msg = "SQLiteStore needs a database file: each thread opens its own connection"
            raise ValueError(msg)
        if synchronous not in _SYNCHRONOUS:
            msg = f"SQLiteStore: synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}"
            raise ValueError(msg)
        self.path = Path(path)
        self._claims = self.path.with_name(f"{self.path.name}.claims")
        self.keeps_history = history
        self.timeout = timeout
        self.synchronous = synchronous
        self._sql = SqlCheckpoints(repr(self), _DIALECT, keeps_history=history)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._opened_by: dict[int, int] = {}  # id(connection) -> the pid that opened it
        self._wal: set[int] = set()  # id(connection) of those that found the database in WAL
        self._generation = 0
        self.inbox = RunInbox(
            repr(self), SqlRows(self._inbox_write, self._inbox_read), self._holds, one_run=False
        )
        """What this database holds for runs workers carry on (`RunInbox`)."""

    def __repr__(self) -> str:
        """Show the path."""
        return f"SQLiteStore({str(self.path)!r})"

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        """Write ``checkpoint``, if its ``seq`` is newer than the stored one of its run.

        Raises:
            StaleCheckpointError: If the database holds a newer checkpoint of the
                run, or a different one with the same ``seq``.
            CheckpointValueError: If an output (or progress or metadata value)
                cannot be written as JSON; the message names the step.
            CheckpointFormatError: If the run's stored latest checkpoint is
                damaged (it is left as it is rather than replaced), or ``path``
                is not an SQLite database of this store, or is a FIFO or a device.
            ValueError: If the checkpoint has no ``run_id`` (an ExecutionKit 0.4
                checkpoint): resume from it and store the run's own checkpoints.
            sqlite3.OperationalError: If the database stays locked longer than
                ``timeout``.
        """
        run_id = checkpoint.run_id
        if run_id is None:
            msg = (
                f"{self!r} keeps checkpoints by run_id, and this checkpoint has none (an "
                f"ExecutionKit 0.4 checkpoint?); resume from it and store the run's own"
            )
            raise ValueError(msg)
        header = self._sql.codec.header(checkpoint)  # before creating the database file
        plan = self._sql.plan(run_id, checkpoint, header)
        with self._immediate() as connection:
            known = None if plan is None else self._next(connection, plan)
            if known is None:  # not the run's next, or the stored run changed
                self._create(connection)
                known = self._sql.save(connection, checkpoint, run_id, header)
        self._sql.committed(known)

    def limit_state(self, key: str, change: Callable[[object], tuple[object, _T]]) -> _T:
        """Change the shared state of limit ``key`` in one locking transaction; return its result.

        How every process running against this database shares a `Limit`'s
        window: `Workflow.run` calls it with ``checkpoint_fn`` set to this
        store and ``limits`` given. The table ``executionkit_limits`` (a row per
        key: ``key TEXT PRIMARY KEY, state TEXT``, the state as JSON) is
        created on first use, outside the checkpoint tables' schema version.
        ``change(state)`` gets what the last change wrote (None at first) and
        returns the new state and the result, under ``BEGIN IMMEDIATE``: no
        other process changes the row meanwhile.
        """
        with self._immediate() as connection:
            connection.execute(LIMITS_TABLE)
            row = connection.execute(LIMITS_READ, (key,)).fetchone()
            new, result = change(None if row is None else json.loads(row[0]))
            connection.execute(LIMITS_WRITE, (key, json.dumps(new)))
        return result

    def _next(self, connection: sqlite3.Connection, plan: NextSave) -> Known | None:
        """Write the run's next checkpoint without reading first; None if the fence refused.

        The fence also fails, writing nothing, when the tables are gone (dropped by
        hand): the full save then creates them again.
        """
        import sqlite3  # noqa: PLC0415 - loaded already by _connect

        before = connection.total_changes
        try:
            return write_next(self._sql, connection, plan)
        except sqlite3.OperationalError:
            if connection.total_changes != before:
                raise
            return None

    def load(
        self, run_id: str | None = None, *, seq: int | None = None
    ) -> WorkflowCheckpoint | None:
        """Return the latest checkpoint of ``run_id`` (or the one of ``seq``), or None.

        Args:
            run_id: The run to load. ``None`` (default) loads the latest
                checkpoint of the run saved to most recently, which is the only
                run when the database holds one.
            seq: Load the run's checkpoint of this ``seq`` instead of its latest,
                exactly as it was saved (see `checkpoints` for the seqs kept).

        Returns:
            The checkpoint, or None if the run has none (or the database holds
            no run).

        Raises:
            CheckpointNotKeptError: If ``seq`` is given and the run has
                checkpoints, but none of that ``seq`` (without ``history=True``
                only the latest is kept); the message names the seqs kept.
            TypeError: If ``seq`` is not an int.
            CheckpointFormatError: If the stored rows are not a valid checkpoint
                (the message names the database and the run), or ``path`` is not
                an SQLite database of this store, or is a FIFO or a device.
        """
        if seq is not None:
            seq = check_seq(seq)
        with self._reading() as connection:
            if connection is None:
                return None
            if seq is None:
                return self._sql.load(connection, run_id)
            return self._sql.load_seq(connection, run_id, seq)

    def checkpoints(self, run_id: str | None = None) -> list[CheckpointInfo]:
        """Describe every checkpoint kept of ``run_id``, oldest first, without loading them.

        Each `CheckpointInfo` gives a checkpoint's ``seq``, time, number of
        outputs, the outputs it newly recorded, its failed steps and how many
        questions and map items it holds, computed from the header rows and the
        ``added`` and ``dropped`` seqs of the output rows: no output is read,
        so listing a run of a thousand checkpoints costs about as much as
        loading one. `load` with ``seq=`` rebuilds the one you want. Without
        ``history=True`` that is the latest only.

        Args:
            run_id: The run; ``None`` (default) lists the run saved to most
                recently, as `load` does.

        Returns:
            The checkpoints kept, oldest first; empty if the run has none.

        Raises:
            CheckpointFormatError: As `load` does, for a damaged header or row.
        """
        with self._reading() as connection:
            return [] if connection is None else self._sql.checkpoints(connection, run_id)

    def history(self, run_id: str) -> list[WorkflowCheckpoint]:
        """Every checkpoint kept for ``run_id``, oldest first, the latest last.

        Without ``history=True`` that is just the latest, if any. Checkpoints a
        save refused as stale are never kept, nor those `prune` deleted. Each
        is rebuilt and validated whole, which costs O(checkpoints x outputs):
        to go back through a long run, list it with `checkpoints` and load the
        one you want with ``load(run_id, seq=...)``.

        Raises:
            CheckpointFormatError: As `load` does, for any of the checkpoints.
        """
        with self._reading() as connection:
            return [] if connection is None else self._sql.history(connection, run_id)

    def run_ids(self) -> list[str]:
        """The run_ids with a stored checkpoint, the most recently saved first.

        Raises:
            CheckpointFormatError: If ``path`` is not an SQLite database of this
                store, is a FIFO or a device, or a stored run_id is not text.
        """
        with self._reading() as connection:
            return [] if connection is None else self._sql.run_ids(connection)

    def run_seqs(self) -> dict[str, int]:
        """Each run with a stored checkpoint and its latest ``seq``, in one query.

        What a worker looks at to tell the runs that moved on since it last
        looked, without loading any checkpoint. The most recently saved first.
        """
        with self._reading() as connection:
            return {} if connection is None else self._sql.run_seqs(connection)

    def prune(self, run_id: str | None = None, *, keep_last: int = 1) -> int:
        """Delete all but the last ``keep_last`` checkpoints of a run, or of every run.

        The latest checkpoint of a run is always kept (so is its stale-writer
        fence); output rows no kept checkpoint needs go too. Use `delete` to
        remove a whole run.

        Args:
            run_id: The run to prune; ``None`` (default) prunes every run.
            keep_last: How many of the newest checkpoints of each run to keep,
                at least 1.

        Returns:
            The number of checkpoints deleted.

        Raises:
            ValueError: If ``keep_last`` is less than 1.
        """
        check_keep_last(keep_last, self)
        with self._writing() as connection:
            if connection is None:
                return 0
            runs = self._sql.run_ids(connection) if run_id is None else [run_id]
            return self._sql.prune(connection, runs, keep_last)

    def delete(self, run_id: str) -> bool:
        """Delete every checkpoint of ``run_id``; return whether it had any.

        The run's stale-writer fence goes with it: a worker still running it
        would start storing it afresh, so delete only runs no one runs. Its
        `inbox` entries (a submission's inputs, saved answers) go too.
        """
        with self._writing() as connection:
            if connection is None:
                return False
            if _has_table(connection, "executionkit_inbox"):
                connection.execute("DELETE FROM executionkit_inbox WHERE run_id = ?", (run_id,))
            return self._sql.delete(connection, run_id)

    def claim(self, run_id: str) -> contextlib.AbstractContextManager[int | None]:
        """Claim ``run_id``, until the context manager is left.

        Entering takes the claim and gives the ``seq`` of the run's latest
        stored checkpoint, read once the claim is held (None if there is none).
        Leaving gives the claim up. Claims of other runs are not affected.

        Raises:
            RunClaimedError: On entering, if the run is claimed, by another
                process or by another claim in this one; the error names the
                owner. Nothing was written.
            CheckpointFormatError: On entering, if ``path`` is not an SQLite
                database of this store, or is a FIFO or a device.
        """
        return claimed(
            repr(self),
            self._claims / run_lock_name(run_id),
            run_id,
            lambda: self._seq_of(run_id),
            in_own_folder=True,
        )

    def owner(self, run_id: str | None = None) -> RunOwner | None:
        """Who holds the claim of ``run_id`` now, or None if no live process does.

        Args:
            run_id: The run; ``None`` (default) asks about the run saved to
                most recently, as `load` does.

        Asking never makes a claim fail.
        """
        if run_id is None:
            runs = self.run_ids()
            if not runs:
                return None
            run_id = runs[0]
        return lock_owner(self._claims / run_lock_name(run_id))

    def _holds(self, run_id: str) -> bool:
        seq = self._seq_of(run_id)
        return seq is not None and seq >= 0

    def _inbox_write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._immediate() as connection:
            self._create(connection)
            connection.execute(INBOX_TABLE)
            return work(connection)

    @contextlib.contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection in WAL mode, in a ``BEGIN IMMEDIATE`` transaction.

        The block's work is committed when it ends, or rolled back if it raises.
        """
        with self._connect() as connection:
            if id(connection) not in self._wal:
                self._use_wal(connection)
            connection.execute("BEGIN IMMEDIATE")
            with connection:
                yield connection

    def _inbox_read(self, work: Callable[[sqlite3.Connection], _T]) -> _T | None:
        with self._reading() as connection:
            if connection is None or not _has_table(connection, "executionkit_inbox"):
                return None
            return work(connection)

    def _seq_of(self, run_id: str) -> int | None:
        with self._reading() as connection:
            if connection is None:
                return None
            query = "SELECT seq FROM executionkit_runs WHERE run_id = ?"
            row = connection.execute(query, (run_id,)).fetchone()
        if row is None:
            return None
        seq = row[0]
        if type(seq) is not int:
            msg = (
                f"{self!r}, run {run_id!r}: the stored seq must be an int, got "
                f"{type(seq).__name__} {seq!r}"
            )
            raise CheckpointFormatError(msg)
        return seq if seq >= 0 else None

    def _create(self, connection: sqlite3.Connection) -> None:
        found = _tables(connection)
        if _OLD_TABLE in found:
            self._refuse_old(connection)
        if "executionkit_schema" in found:
            self._sql.upgrade(connection)  # schemas 2 to 4, under BEGIN IMMEDIATE's lock
        else:
            self._sql.create(connection)

    def _refuse_old(self, connection: sqlite3.Connection) -> None:
        if _has_table(connection, _OLD_TABLE):
            msg = (
                f"{self!r}: the database holds the table {_OLD_TABLE} of an unreleased "
                f"SQLiteStore that wrote each run's whole JSON; this version reads only its "
                f"own tables: save into a new database file"
            )
            raise CheckpointFormatError(msg)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection | None]:
        """A connection in a read transaction (one snapshot), or None if nothing is stored."""
        if not self.path.exists():
            yield None  # rather than create an empty database file
            return
        with self._connect() as connection:
            connection.execute("BEGIN")
            try:
                self._refuse_old(connection)
                if not _has_table(connection, "executionkit_schema"):
                    yield None
                    return
                self._sql.check_version(connection, reading=True)
                yield connection
            finally:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection | None]:
        if not self.path.exists():
            yield None
            return
        with self._connect() as connection:
            connection.execute("BEGIN IMMEDIATE")
            with connection:
                self._refuse_old(connection)
                if not _has_table(connection, "executionkit_schema"):
                    yield None
                    return
                self._sql.upgrade(connection)
                yield connection

    def _use_wal(self, connection: sqlite3.Connection) -> None:
        """Put the database in WAL mode: readers then never block the writer.

        The mode is persistent, and only settable outside a transaction, so once per
        database. Switching needs the database to itself; if another connection holds
        a lock meanwhile, this save runs in the current mode (either is safe) and a
        later one switches. A connection that found WAL asks no more: the mode stays
        (leaving it needs the database to itself, and a save in either mode is safe).
        """
        import sqlite3  # noqa: PLC0415 - loaded already by _connect

        if connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            self._wal.add(id(connection))
            return
        with contextlib.suppress(sqlite3.OperationalError):
            connection.execute("PRAGMA journal_mode = WAL")

    def close(self) -> None:
        """Close the connections this store keeps open (one per thread that used it).

        Optional: they close when the store is garbage-collected, and the next
        call opens a new one.
        """
        with self._lock:
            connections, self._connections = self._connections, []
            self._generation += 1  # threads holding one of them open a new one
        for connection in connections:
            self._forget(connection)

    def __del__(self) -> None:
        """Close the connections this store opened (Python 3.13 warns about open ones)."""
        with contextlib.suppress(Exception):
            self.close()

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, with damage reported as `CheckpointFormatError`.

        Kept open between calls: closing the last connection to a WAL database
        checkpoints and deletes its log, an fsync-heavy cost every save would pay.
        It is opened anew whenever the file at ``path`` is another one (replaced,
        deleted) or the process forked.
        """
        import sqlite3  # noqa: PLC0415 - only SQLite users pay for loading it

        try:
            stat = self.path.stat()
        except FileNotFoundError:
            identity = None  # a save creates the database
        else:  # SQLite would wait forever reading a FIFO
            check_regular(stat.st_mode, self.path, f"{self!r}: not a database file")
            identity = (stat.st_dev, stat.st_ino)
        key = (os.getpid(), identity, self._generation)
        held: tuple[object, sqlite3.Connection] | None = getattr(self._local, "held", None)
        if held is not None and held[0] != key:
            self._local.held = None
            self._forget(held[1])
            held = None
        fresh = held is None
        if held is None:
            connection = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
            connection.text_factory = _text_or_bytes
            with self._lock:
                self._connections.append(connection)
                self._opened_by[id(connection)] = os.getpid()
            held = (key, connection)
        connection = held[1]
        self._local.held = None  # until this call ends well
        try:
            if fresh:  # a connection's setting: once, where damage is reported
                connection.execute(f"PRAGMA synchronous = {self.synchronous}")
            yield connection
        except sqlite3.DatabaseError as exc:
            self._forget(connection)
            # Not OperationalError in general: a database locked too long stays one.
            if getattr(exc, "sqlite_errorcode", -1) & 0xFF not in _DAMAGED:
                raise
            raise CheckpointFormatError(f"{self!r}: not an SQLite database ({exc})") from exc
        except BaseException:
            if connection.in_transaction:  # interrupted mid-transaction: start afresh
                self._forget(connection)
            else:  # refused (a stale writer) or failed in Python: rolled back already
                self._local.held = held
            raise
        self._local.held = held

    def _forget(self, connection: sqlite3.Connection) -> None:
        with self._lock:
            if connection in self._connections:
                self._connections.remove(connection)
        if self._opened_by.get(id(connection)) == os.getpid():
            connection.close()
        else:
            # Opened before a fork: closing it here could checkpoint and delete the WAL
            # under the parent's feet (SQLite: never use a connection across fork).
            _INHERITED.append(connection)
        self._opened_by.pop(id(connection), None)
        self._wal.discard(id(connection))


def _text_or_bytes(data: bytes) -> str | bytes:
    """Text columns as str; sqlite3 would fail the whole query on text that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # for _decode to name, with the run it belongs to


def _tables(connection: sqlite3.Connection) -> set[object]:
    """Which of the tables this store looks for the database holds, in one query."""
    query = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)"
    return {row[0] for row in connection.execute(query, (_OLD_TABLE, "executionkit_schema"))}


def _has_table(connection: sqlite3.Connection, name: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return connection.execute(query, (name,)).fetchone() is not None


def check_keep_last(keep_last: object, store: object) -> None:
    """Refuse a ``keep_last`` that would delete a run's latest checkpoint."""
    if type(keep_last) is not int or keep_last < 1:
        msg = f"{store!r}.prune: keep_last must be an int of at least 1, got {keep_last!r}"
        raise ValueError(msg)
