"""`PostgresStore`'s claims: one owner per run, held as a session advisory lock.

The claim on a run is ``pg_try_advisory_lock(key)``, ``key`` derived from the
run_id. The server holds it for the session, and drops it when the session
ends: for a killed client, once its backend notices the closed socket, after
any COMMIT that backend was running has landed. The next owner is granted the
lock only then, and reads the run's latest seq in a later statement (a
statement's snapshot predates any lock it takes), so it never resumes from a
checkpoint older than one the dead owner committed: provided the dead owner's
saves went through the session that held its claim, which the store sees to.

The table ``executionkit_claims`` says who holds each lock (process, host,
since when, backend); a row counts only while its backend holds the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any

from executionkit._errors import ClaimLostError, RunClaimedError, safe_str
from executionkit._owner import RunOwner

if TYPE_CHECKING:
    from collections.abc import Iterator

# UNLOGGED: its rows describe live sessions, which a server crash ends anyway (and
# empties the table); without WAL, taking and leaving a claim waits for no disk flush.
CREATE = """CREATE UNLOGGED TABLE IF NOT EXISTS executionkit_claims (
    run_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    since TIMESTAMPTZ NOT NULL,
    backend_pid INTEGER NOT NULL
)"""
_TRY = "SELECT pg_try_advisory_lock(%s)"
# One round trip once the lock is held: the owner's row, and the latest seq read in
# a snapshot taken after the lock was granted.
_TAKE = """WITH mine AS (
    INSERT INTO executionkit_claims (run_id, pid, host, since, backend_pid)
    VALUES (%s, %s, %s, %s, pg_backend_pid())
    ON CONFLICT (run_id) DO UPDATE SET pid = excluded.pid, host = excluded.host,
        since = excluded.since, backend_pid = excluded.backend_pid
)
SELECT seq FROM executionkit_runs WHERE run_id = %s AND seq >= 0"""
# A bigint advisory lock shows in pg_locks as its high half (classid) and low half
# (objid), with objsubid 1; the row of a session that ended is not the owner's.
_OWNER = """SELECT c.pid, c.host, c.since FROM executionkit_claims c
    JOIN pg_locks l ON l.pid = c.backend_pid
    WHERE c.run_id = %s AND l.locktype = 'advisory' AND l.granted
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid AND l.objsubid = 1"""
_GIVE_UP = """WITH gone AS (
    DELETE FROM executionkit_claims WHERE run_id = %s AND backend_pid = pg_backend_pid()
)
SELECT pg_advisory_unlock(%s)"""
_PREFIX = b"executionkit claim\x00"
_HALF = 0xFFFF_FFFF


def claim_key(run_id: str) -> int:
    """The advisory lock key of ``run_id``: a signed 64-bit slice of a sha256."""
    digest = hashlib.sha256(_PREFIX + run_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this process claimed: the session holding the lock, and its key.

    ``lock`` serialises the use of ``connection`` (the store's own lock when
    the connection is shared by the store).
    """

    connection: Any
    key: int
    owner: RunOwner
    lock: AbstractContextManager[object]


class RunClaims:
    """The runs one store has claimed, each with the session that holds its claim."""

    def __init__(self, lock: AbstractContextManager[object]) -> None:
        """Keep the claims under ``lock``, the store's."""
        self._lock = lock
        self._held: dict[str, Claim] = {}

    def get(self, run_id: str) -> Claim | None:
        """The claim this store holds on ``run_id``, if any."""
        with self._lock:
            return self._held.get(run_id)

    def refuse_held(self, store: str, run_id: str) -> None:
        """Raise `RunClaimedError` if this store holds ``run_id`` already."""
        held = self.get(run_id)
        if held is not None:
            raise RunClaimedError(store, run_id, held.owner)

    @contextlib.contextmanager
    def hold(
        self, store: str, session: Any, lock: AbstractContextManager[object], run_id: str
    ) -> Iterator[int | None]:
        """Claim ``run_id`` on ``session`` for the block; yield its latest seq (`take_claim`)."""
        claim, stored = take_claim(store, session, lock, run_id)
        with self._lock:
            self._held[run_id] = claim
        try:
            yield stored
        finally:
            with self._lock:
                del self._held[run_id]
            give_up(claim, run_id)


# The (session, key) pairs this process holds or is taking. Advisory locks are
# re-entrant within a session: two stores sharing one psycopg Connection would
# both be granted the same run without this.
_TAKEN: dict[tuple[int, int], RunOwner] = {}
_TAKEN_LOCK = threading.Lock()


def take_claim(
    store: str, connection: Any, lock: AbstractContextManager[object], run_id: str
) -> tuple[Claim, int | None]:
    """Take the claim on ``run_id`` in ``connection``'s session.

    Returns the claim and the seq of the run's latest stored checkpoint (None
    when there is none), read once the lock was held. The tables must exist.

    Raises:
        RunClaimedError: If another session (or a store of this process on the
            same session) holds the claim.
    """
    key = claim_key(run_id)
    owner = RunOwner.this_process(run_id)
    slot = (id(connection), key)
    with _TAKEN_LOCK:
        holder = _TAKEN.setdefault(slot, owner)
    if holder is not owner:
        raise RunClaimedError(store, run_id, holder)
    claim = Claim(connection, key, owner, lock)
    try:
        with lock:
            stored = _lock_and_read(store, claim, run_id)
    except BaseException:
        with _TAKEN_LOCK:
            del _TAKEN[slot]
        raise
    return claim, stored


def _lock_and_read(store: str, claim: Claim, run_id: str) -> int | None:
    connection, key, owner = claim.connection, claim.key, claim.owner
    try:
        granted = one(connection, _TRY, (key,))[0]
        take = (run_id, owner.pid, owner.host, owner.since, run_id)
        row = one(connection, _TAKE, take) if granted else None
    except BaseException:
        # Interrupted, the lock may have been granted unseen: unlocking a lock not
        # held is harmless, and the error in hand is the one to report.
        with contextlib.suppress(Exception):
            _give_up(claim, run_id)
        raise
    if not granted:
        raise RunClaimedError(store, run_id, _read_owner(connection, run_id, key))
    return None if row is None else int(row[0])


def give_up(claim: Claim, run_id: str) -> None:
    """Release the claim and delete its owner row; nothing to do if the session ended."""
    try:
        _give_up(claim, run_id)
    finally:
        with _TAKEN_LOCK:
            _TAKEN.pop((id(claim.connection), claim.key), None)


def _give_up(claim: Claim, run_id: str) -> None:
    try:
        with claim.lock:
            one(claim.connection, _GIVE_UP, (run_id, claim.key))
    except Exception:
        if not claim.connection.closed:
            raise
        # The session is gone, and the server released its lock with it.


def read_owner(connection: Any, run_id: str) -> RunOwner | None:
    """The live owner of ``run_id`` as the database records it, or None."""
    found = one(connection, "SELECT to_regclass('executionkit_claims')", ())
    if found[0] is None:
        return None
    return _read_owner(connection, run_id, claim_key(run_id))


def _read_owner(connection: Any, run_id: str, key: int) -> RunOwner | None:
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    row = one(connection, _OWNER, (run_id, unsigned >> 32, unsigned & _HALF))
    if row is None:
        return None  # free, or its new owner is still writing its row
    pid, host, since = row
    return RunOwner(run_id, pid, host, since.astimezone(UTC))


def claim_lost(store: str, run_id: str, error: BaseException) -> ClaimLostError:
    """The error of a save whose claim's session has ended (raise it from ``error``)."""
    lines = safe_str(error).strip().splitlines()
    reason = type(error).__name__ + (f": {lines[0].strip()}" if lines else "")
    message = (
        f"{store} lost its claim on run {run_id!r}: its database session ended "
        f"({reason}); another process may own the run now"
    )
    return ClaimLostError(message, run_id=run_id)


def one(connection: Any, sql: str, params: tuple[object, ...]) -> Any:
    """Run one statement, in a transaction of its own unless autocommit; its first row."""
    if connection.autocommit:
        return connection.execute(sql, params).fetchone()
    with connection.transaction():
        return connection.execute(sql, params).fetchone()
