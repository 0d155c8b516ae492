"""`PostgresStore`: checkpoints of any number of runs in PostgreSQL, incrementally (psycopg 3)."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from executionkit.stores import _pg_claims, _pg_next
from executionkit.stores._history import check_seq
from executionkit.stores._inbox import RunInbox, SqlRows
from executionkit.stores._sql import SqlCheckpoints
from executionkit.stores._sql_next import finish
from executionkit.stores._sql_schema import (
    INBOX_TABLE,
    LIMITS_LOCK,
    LIMITS_ROW,
    LIMITS_TABLE,
    LIMITS_UPDATE,
    RUN,
    Dialect,
    tables,
    upgrade,
)
from executionkit.stores._sqlite import check_keep_last

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._owner import RunOwner
    from executionkit.stores._history import CheckpointInfo
    from executionkit.stores._sql_next import Known, NextSave
    from executionkit.stores._sql_schema import Rows

_T = TypeVar("_T")


# Serialises creating the tables: concurrent CREATE ... IF NOT EXISTS can still collide.
_SCHEMA_LOCK = 0x6578_6B69  # "exki"
_DIALECT = Dialect(
    schema=(
        *tables("BIGINT"),
        "CREATE SEQUENCE IF NOT EXISTS executionkit_written",
    ),
    upgrade=upgrade("BIGINT"),
    # Another worker saving the same run waits here until this transaction ends,
    # then reads the seq it committed: the stale-writer fence.
    lock_run="SELECT seq, written, next_ord FROM executionkit_runs WHERE run_id = ? FOR UPDATE",
    next_written="nextval('executionkit_written')",
    lock_schema=f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})",
)
INSTALL = "pip install 'executionkit[postgres]'"


def _psycopg() -> Any:
    try:
        import psycopg  # noqa: PLC0415 - the optional dependency, loaded on first use
    except ImportError as exc:
        msg = f"PostgresStore needs psycopg 3, which is not installed: {INSTALL}"
        raise ImportError(msg) from exc
    return psycopg


class _Adapter:
    """A psycopg connection seen through the ``?`` placeholders of the shared SQL."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows:
        return self.connection.execute(sql.replace("?", "%s"), params)  # type: ignore[no-any-return]


class PostgresStore:
    """Checkpoints in PostgreSQL, written incrementally, any number of runs and workers.

    The same tables and rules as `SQLiteStore` (one header row per checkpoint,
    one row per output recorded, so a save costs the same however long the
    run), in PostgreSQL through psycopg 3, an optional dependency:
    ``pip install 'executionkit[postgres]'``. Importing `executionkit.stores`
    never imports psycopg; the first call does, and fails with `ImportError`
    naming the extra if it is missing.

    Each save is one transaction that locks the run's row (``SELECT ... FOR
    UPDATE``) before comparing ``seq``: two workers saving the same run are
    serialised by the database, and the one that fell behind gets
    `StaleCheckpointError`, its transaction rolled back. The run's next
    checkpoint after the one a store object saved last is one statement (one
    round trip on an autocommit connection): an ``UPDATE`` of the run's row
    fenced on the ``seq``, save counter and header that object wrote, whose
    ``RETURNING`` every insert of the new rows selects from; if the fence
    changes no row, nothing is written and the save locks and compares as
    above. The tables (and the sequence ``executionkit_written``) are created
    on first use, under an advisory lock, with ``executionkit_schema``
    holding their version (5; a version 2, 3 or 4 database is upgraded in
    place by the first write, under that lock: schema 4 drops the indexes on
    ``dropped``, schema 5 adds the table ``executionkit_attempts``).
    Reads run in one ``REPEATABLE READ`` snapshot.

    A run is owned by one live process at a time (`claim`, which `Workflow.run`
    takes before any step starts): the claim is a session advisory lock, so
    the server drops it when the owner's database session ends, even when the
    owner was killed, with no lease to wait out. The run's saves go through
    the session that holds its claim: a new owner is granted the claim only
    once every save of the previous one has committed or rolled back, and
    then reads the run's latest checkpoint. If that session ends under a live
    owner (the server restarted, or ``pg_terminate_backend``), its next save
    raises `ClaimLostError` instead of reconnecting. What claims do not cover:
    a client whose machine vanishes without closing its TCP connection keeps
    its session, and its claims, until the server notices (its TCP keepalive
    settings, or ``idle_session_timeout``); and a pooler in transaction mode
    (PgBouncer) hands sessions around, which breaks session locks: claim
    through a direct connection.

    Args:
        target: A connection string (``"postgresql://user@host/db"``), for
            which the store opens one connection (autocommit, each call its own
            transaction) shared by its threads under a lock, reconnecting once
            if the server closed it (a restart); or a psycopg ``Connection``
            you own (calls are serialised on it; inside a transaction you
            opened, a save becomes a savepoint and commits with yours); or a
            ``psycopg_pool.ConnectionPool``, from which each call borrows one.
            A claim is held on the store's own connection, on yours, or on
            a connection borrowed from the pool until the claim is left.
        history: Keep every checkpoint saved; see `checkpoints`, `load` with
            ``seq=`` and `prune`.
            Without it a save deletes the checkpoint it replaces.

    Raises:
        TypeError: If ``target`` is none of those.
    """

    def __init__(self, target: object, *, history: bool = False) -> None:
        """Store checkpoints in the PostgreSQL database ``target`` reaches."""
        if isinstance(target, str):
            self._kind = "conninfo"
        elif hasattr(target, "transaction") and hasattr(target, "cursor"):
            self._kind = "connection"
        elif callable(getattr(target, "connection", None)):
            self._kind = "pool"
        else:
            msg = (
                f"PostgresStore needs a connection string, a psycopg Connection or a "
                f"ConnectionPool, got {type(target).__name__}"
            )
            raise TypeError(msg)
        self.target = target
        self.keeps_history = history
        self._sql = SqlCheckpoints(repr(self), _DIALECT, keeps_history=history)
        self._lock = threading.RLock()
        self._own: Any = None  # the connection opened from a connection string
        self._ready = False  # tables created (or found) by this store object
        self._limits_ready = False  # the table of shared limits, likewise
        self._claims = _pg_claims.RunClaims(self._lock)
        self._inbox_ready = False  # the inbox's table, likewise
        self.inbox = RunInbox(
            repr(self), SqlRows(self._inbox_write, self._inbox_read), self._holds, one_run=False
        )
        """What this database holds for runs workers carry on (`RunInbox`)."""

    def __repr__(self) -> str:
        """Show the database, without a password."""
        if self._kind != "conninfo":
            return f"PostgresStore(<{type(self.target).__name__}>)"
        return f"PostgresStore({_without_password(str(self.target))!r})"

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        """Write ``checkpoint``, if its ``seq`` is newer than the stored one of its run.

        Raises:
            StaleCheckpointError: If the database holds a newer checkpoint of the
                run, or a different one with the same ``seq``.
            CheckpointValueError: If an output (or progress or metadata value)
                cannot be written as JSON; the message names the step.
            CheckpointFormatError: If the run's stored latest checkpoint is
                damaged (it is left as it is), or the tables have another schema
                version.
            ValueError: If the checkpoint has no ``run_id``.
            ImportError: If psycopg is not installed.
            psycopg.OperationalError: If the server cannot be reached (after one
                reconnection, for a connection string).
        """
        run_id = checkpoint.run_id
        if run_id is None:
            msg = (
                f"{self!r} keeps checkpoints by run_id, and this checkpoint has none (an "
                f"ExecutionKit 0.4 checkpoint?); resume from it and store the run's own"
            )
            raise ValueError(msg)
        header = self._sql.codec.header(checkpoint)
        plan = self._sql.plan(run_id, checkpoint, header)
        if plan is not None and not _pg_next.fits(plan):
            self._sql.committed(plan.known)  # the full save's fast path writes it
            plan = None
        if plan is not None:
            done = self._run(lambda db: self._next(db, plan), write="next", run_id=run_id)
            if done is not None:
                self._sql.committed(done)
                return

        def save(db: _Adapter) -> Any:
            return self._sql.save(db, checkpoint, run_id, header)

        # Retrying after a lost connection is safe: if the first attempt committed,
        # the second finds the same checkpoint stored and writes nothing.
        self._sql.committed(self._run(save, write="save", run_id=run_id))

    def _next(self, db: _Adapter, plan: NextSave) -> Known | None:
        """Write the run's next checkpoint in one statement; None if the fence refused it."""
        query, params = _pg_next.one_statement(
            plan, keeps_history=self.keeps_history, version=self._sql.version
        )
        row = db.connection.execute(query, params).fetchone()
        return None if row is None else finish(plan, int(row[0]))

    def load(
        self, run_id: str | None = None, *, seq: int | None = None
    ) -> WorkflowCheckpoint | None:
        """Return the latest checkpoint of ``run_id`` (or the one of ``seq``), or None.

        Args:
            run_id: The run to load. ``None`` (default) loads the latest
                checkpoint of the run saved to most recently.
            seq: Load the run's checkpoint of this ``seq`` instead, exactly as
                it was saved (as `SQLiteStore.load`).

        Raises:
            CheckpointNotKeptError: If ``seq`` is given and the run has
                checkpoints, but none of that ``seq``; the message names the
                seqs kept.
            TypeError: If ``seq`` is not an int.
            CheckpointFormatError: If the stored rows are not a valid checkpoint
                (the message names the store and the run).
        """
        wanted = None if seq is None else check_seq(seq)

        def read(db: _Adapter) -> WorkflowCheckpoint | None:
            if wanted is None:
                return self._sql.load(db, run_id)
            return self._sql.load_seq(db, run_id, wanted)

        found: WorkflowCheckpoint | None = self._run(read, write=False)
        return found

    def checkpoints(self, run_id: str | None = None) -> list[CheckpointInfo]:
        """Describe every checkpoint kept of ``run_id``, oldest first, without loading them.

        As `SQLiteStore.checkpoints`: from the header rows and the rows' seqs,
        no output read; ``None`` (default) lists the run saved to most recently.

        Raises:
            CheckpointFormatError: As `load` does, for a damaged header or row.
        """
        found = self._run(lambda db: self._sql.checkpoints(db, run_id), write=False)
        return [] if found is None else found

    def history(self, run_id: str) -> list[WorkflowCheckpoint]:
        """Every checkpoint kept for ``run_id``, oldest first, the latest last.

        Each is rebuilt whole (O(checkpoints x outputs)): list a long run with
        `checkpoints` and load the one you want with ``load(run_id, seq=...)``.

        Raises:
            CheckpointFormatError: As `load` does, for any of the checkpoints.
        """
        found = self._run(lambda db: self._sql.history(db, run_id), write=False)
        return [] if found is None else found

    def run_ids(self) -> list[str]:
        """The run_ids with a stored checkpoint, the most recently saved first."""
        found = self._run(self._sql.run_ids, write=False)
        return [] if found is None else found

    def run_seqs(self) -> dict[str, int]:
        """Each run with a stored checkpoint and its latest ``seq``, in one query.

        As `SQLiteStore.run_seqs`.
        """
        found = self._run(self._sql.run_seqs, write=False)
        return {} if found is None else found

    def prune(self, run_id: str | None = None, *, keep_last: int = 1) -> int:
        """Delete all but the last ``keep_last`` checkpoints of a run, or of every run.

        As `SQLiteStore.prune`: the latest checkpoint of a run always stays.

        Returns:
            The number of checkpoints deleted.

        Raises:
            ValueError: If ``keep_last`` is less than 1.
        """
        check_keep_last(keep_last, self)

        def prune(db: _Adapter) -> int:
            runs = self._sql.run_ids(db) if run_id is None else [run_id]
            return self._sql.prune(db, runs, keep_last)

        return self._run(prune, write=True) or 0

    def delete(self, run_id: str) -> bool:
        """Delete every checkpoint of ``run_id``; return whether it had any.

        As `SQLiteStore.delete`: the run's stale-writer fence and its `inbox`
        entries go with it.
        """

        def delete(db: _Adapter) -> bool:
            if db.execute("SELECT to_regclass('executionkit_inbox')").fetchone()[0] is not None:
                db.execute("DELETE FROM executionkit_inbox WHERE run_id = ?", (run_id,))
            return self._sql.delete(db, run_id)

        return bool(self._run(delete, write=True))

    @contextlib.contextmanager
    def claim(self, run_id: str) -> Iterator[int | None]:
        """Own ``run_id`` until the block is left; yield the seq of its latest checkpoint.

        `Workflow.run` enters this before any step starts. The claim is a
        session advisory lock, held on the store's connection (for a pool, on
        one borrowed from it until the block is left); the run's saves go
        through that session, and raise `ClaimLostError` once it has ended. The
        tables are created if missing. Leaving releases the claim, and never
        raises when the session has ended already.

        Yields:
            The ``seq`` of the latest checkpoint stored of the run, read once
            the claim is held; None if there is none.

        Raises:
            RunClaimedError: If another session, or a claim of this process
                on the same session, holds the run; ``owner`` names it.
        """
        self._claims.refuse_held(repr(self), run_id)
        with self._claim_session() as (session, lock):
            if not self._ready:
                with lock, session.transaction():
                    self._create(_Adapter(session))
            with self._claims.hold(repr(self), session, lock, run_id) as stored:
                yield stored

    def limit_state(self, key: str, change: Callable[[object], tuple[object, _T]]) -> _T:
        """Change the shared state of limit ``key`` in one transaction; return its result.

        As `SQLiteStore.limit_state`: every worker on this database draws on
        one window per key. The row is locked (``SELECT ... FOR UPDATE``) for
        the transaction, so changes of workers are serialised by the database.
        """

        def work(db: _Adapter) -> _T:
            if not self._limits_ready:
                db.execute(_DIALECT.lock_schema)  # concurrent CREATE ... IF NOT EXISTS collide
                db.execute(LIMITS_TABLE)
            db.execute(LIMITS_ROW, (key,))
            row = db.execute(LIMITS_LOCK, (key,)).fetchone()
            new, result = change(json.loads(row[0]))
            db.execute(LIMITS_UPDATE, (json.dumps(new), key))
            return result

        with self._connection() as connection, connection.transaction():
            result = work(_Adapter(connection))
        self._limits_ready = True
        return result

    def _holds(self, run_id: str) -> bool:
        return bool(self._run(lambda db: db.execute(RUN, (run_id,)).fetchone(), write=False))

    def _inbox_write(self, work: Callable[[Any], _T]) -> _T:
        def write(db: _Adapter) -> _T:
            if not self._inbox_ready:
                db.execute(_DIALECT.lock_schema)  # concurrent CREATE ... IF NOT EXISTS collide
                db.execute(INBOX_TABLE)
            return work(db)

        result: _T = self._run(write, write="save")
        self._inbox_ready = True
        return result

    def _inbox_read(self, work: Callable[[Any], _T]) -> _T | None:
        def read(db: _Adapter) -> _T | None:
            if db.execute("SELECT to_regclass('executionkit_inbox')").fetchone()[0] is None:
                return None
            return work(db)

        found: _T | None = self._run(read, write=False)
        return found

    def owner(self, run_id: str) -> RunOwner | None:
        """The process that owns ``run_id`` now, or None if no live session claims it."""
        found: RunOwner | None = self._run(
            lambda db: _pg_claims.read_owner(db.connection, run_id), write=False
        )
        return found

    def close(self) -> None:
        """Close the connection this store opened from a connection string, if any.

        Claims held on it end with it: their runs' next saves raise `ClaimLostError`.
        """
        with self._lock:
            own, self._own = self._own, None
        if own is not None:
            own.close()

    def __del__(self) -> None:
        """Close the connection this store opened, as psycopg asks of its users."""
        own = getattr(self, "_own", None)
        if own is not None:
            with contextlib.suppress(Exception):
                own.close()

    # --- connections ----------------------------------------------------------------

    def _run(self, work: Any, *, write: str | bool, run_id: str | None = None) -> Any:
        """Run ``work(db)`` in one transaction; None if the tables are absent.

        ``write`` is ``"save"`` (creating the tables if missing), ``"next"`` (the
        one statement of a fast save, in no transaction of its own on an autocommit
        connection: the tables exist, this store wrote the run), True (prune,
        delete) or False (a read, in one snapshot). The save of a claimed
        ``run_id`` goes through its claim's session, never reconnecting.
        """
        psycopg = _psycopg()
        claim = None if run_id is None else self._claims.get(run_id)
        if claim is not None and run_id is not None:
            try:
                with claim.lock:
                    return self._transaction(claim.connection, work, write=write)
            except psycopg.OperationalError as exc:
                if not claim.connection.closed:
                    raise
                raise _pg_claims.claim_lost(repr(self), run_id, exc) from exc
        try:
            return self._attempt(work, write=write)
        except psycopg.OperationalError:
            if self._kind != "conninfo" or self._own is None or not self._own.broken:
                raise
            self.close()  # the server went away (a restart): reconnect once
            return self._attempt(work, write=write)

    def _attempt(self, work: Any, *, write: str | bool) -> Any:
        with self._connection() as connection:
            return self._transaction(connection, work, write=write)

    def _transaction(self, connection: Any, work: Any, *, write: str | bool) -> Any:
        idle = connection.info.transaction_status == 0  # psycopg's IDLE
        if write == "next":  # one statement: a transaction of its own if autocommit
            if idle and connection.autocommit:
                return work(_Adapter(connection))
            with connection.transaction():
                return work(_Adapter(connection))
        with connection.transaction():
            db = _Adapter(connection)
            if write == "save":
                self._create(db)
            else:
                if idle and not write:  # one snapshot for every query of the read
                    db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                found = db.execute("SELECT to_regclass('executionkit_schema')").fetchone()
                if found[0] is None:
                    return None
                if write:
                    self._sql.upgrade(db)  # schemas 2 to 4, under the advisory lock
                else:
                    self._sql.check_version(db, reading=True)
            return work(db)

    def _create(self, db: _Adapter) -> None:
        if self._ready:
            return
        db.execute(_DIALECT.lock_schema)
        self._sql.create(db)
        db.execute(_pg_claims.CREATE)  # outside the schema version: only claims use it
        self._ready = True

    @contextlib.contextmanager
    def _claim_session(self) -> Iterator[tuple[Any, contextlib.AbstractContextManager[object]]]:
        """The session to hold a claim on, and the lock that serialises its use."""
        if self._kind != "pool":
            with self._lock:
                session = self._session()
            yield session, self._lock
            return
        session = self.target.getconn()  # type: ignore[attr-defined]
        try:
            yield session, threading.RLock()
        finally:
            self.target.putconn(session)  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        _psycopg()
        if self._kind == "pool":
            with self.target.connection() as connection:  # type: ignore[attr-defined]
                yield connection
            return
        with self._lock:
            yield self._session()

    def _session(self) -> Any:
        """The connection you gave, or the store's own (opened if need be); hold the lock."""
        if self._kind == "connection":
            return self.target
        if self._own is None or self._own.closed:
            self._own = _psycopg().connect(str(self.target), autocommit=True)
        return self._own


def _without_password(conninfo: str) -> str:
    """The connection string with any password masked, for messages (psycopg not needed)."""
    if "://" in conninfo:
        parts = urlsplit(conninfo)
        if parts.password is not None:
            host = parts.netloc.rsplit("@", 1)[1]
            conninfo = urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
        return re.sub(r"(password=)[^&]*", r"\1***", conninfo)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)", r"\1***", conninfo)
