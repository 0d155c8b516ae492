"""What `SQLiteStore` and `PostgresStore` share: the tables, incremental saves, exact rebuilds.

A checkpoint is stored as a small header row (its ``to_dict()`` without
``outputs``, ``step_index`` and the per-output ``step_info`` entries) plus one
row per output *version*: the output and its step info, with the ``seq`` that
recorded it (``added``) and, once a later checkpoint replaced or dropped it,
the ``seq`` from which it no longer counts (``dropped``). The checkpoint at
``seq`` k is its header and the rows with ``added <= k`` and no ``dropped`` at
or before k, in the order they were written (``ord``), which is the order the
run recorded them. A save therefore writes one header and one row per new
output, whatever the length of the run. The items of unfinished maps are rows
too, of their own table (see `executionkit.stores._sql_items`), and so are the
rows of the cost ledger (`executionkit.stores._sql_ledger`) and the entries of
``attempts`` (`executionkit.stores._sql_attempts`): the header holds only
their number, so its size does not grow with the run. A run's kept
checkpoints are listed from the headers and the rows' seqs alone, or all
rebuilt, in `executionkit.stores._sql_history`; rows are encoded and decoded
in `executionkit.stores._sql_codec`, and the run's next checkpoint is saved
without a read in `executionkit.stores._sql_next`.
"""

from __future__ import annotations

import reprlib
import threading
from typing import TYPE_CHECKING, Any

from executionkit._errors import CheckpointFormatError
from executionkit.stores._common import dumps, loads, stale
from executionkit.stores._history import CheckpointInfo, CheckpointNotKeptError
from executionkit.stores._sql_attempts import FORGET_DROPPED_ATTEMPTS, AttemptRows
from executionkit.stores._sql_codec import SqlCodec
from executionkit.stores._sql_history import every_checkpoint, kept_seqs, list_checkpoints
from executionkit.stores._sql_items import (
    FORGET_DROPPED_ITEMS,
    ItemRows,
)
from executionkit.stores._sql_ledger import FORGET_DROPPED_LEDGER, LedgerRows
from executionkit.stores._sql_next import Known, NextSave, fence, plan_next, write_next
from executionkit.stores._sql_schema import (
    ADD,
    ADD_HEADER,
    AS_OF,
    DROP,
    FORGET_DROPPED,
    FORGET_HEADER,
    FORGET_HEADER_RETURNING,
    HEADER,
    KEEP_FROM,
    LATEST,
    LIVE,
    NEW_RUN,
    PRUNE_HEADERS,
    RUN,
    RUN_IDS,
    RUN_SEQS,
    SCHEMA_ROW,
    Database,
    Dialect,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from executionkit._checkpoint._value import WorkflowCheckpoint

SCHEMA_VERSION = 5
# The schema versions this store reads; a write upgrades the ones before (2, without the
# ledger table; 3, with indexes on dropped and, in SQLite, rowid tables; 4, without the
# attempts table) in place.
_READABLE = (2, 3, 4, 5)
# The schema version from which the tables are as `Dialect.upgrade` leaves them.
_UPGRADED = 4
# What an older schema version lacks, for the message refusing it.
_OLDER = {
    1: (
        "version 1, written by an unreleased executionkit, kept the items of unfinished "
        "maps whole in every checkpoint's header; save into a new database"
    ),
}
# How many runs' stored state one store object remembers, for its fast path.
_CACHED_RUNS = 16


def lineage(checkpoint: WorkflowCheckpoint) -> object:
    """What every checkpoint taken by one run shares (its output log), or None.

    Only checkpoints `Workflow.run` takes have one (`trusted_checkpoint`'s
    ``_shared``); their outputs only ever grow, by the names in ``new_outputs``.
    The store holds it (one per cached run) to know a checkpoint comes from the
    run that wrote the stored one.
    """
    return vars(checkpoint).get("_shared")


class SqlCheckpoints:
    """The store logic both SQL stores run inside a transaction they open."""

    def __init__(self, name: str, dialect: Dialect, *, keeps_history: bool) -> None:
        """Store checkpoints through ``dialect``; ``name`` starts every error message."""
        self.name = name
        self.dialect = dialect
        self.keeps_history = keeps_history
        self._known: dict[str, Known] = {}
        self._lock = threading.Lock()
        self.codec = SqlCodec(name)
        self.items = ItemRows(name)
        self.ledger = LedgerRows(name)
        self.attempts = AttemptRows(name)
        self.version = SCHEMA_VERSION
        self.fence = fence(dialect.next_written)

    # --- schema ---------------------------------------------------------------------

    def create(self, db: Database) -> None:
        """Create the tables if missing, then check their schema version (upgrading 2 to 4)."""
        for statement in self.dialect.schema:
            db.execute(statement)
        db.execute(SCHEMA_ROW, (SCHEMA_VERSION,))
        self.upgrade(db)

    def upgrade(self, db: Database) -> None:
        """Before a write: check the schema version, and upgrade versions 2 to 4 to 5 in place.

        Schema 3 added the table ``executionkit_ledger`` (a schema 2 database
        holds checkpoints of format 3 and older, which have no ledger: the table
        is created empty). Schema 4 has no index on ``dropped``, and SQLite's
        runs and headers tables are ``WITHOUT ROWID`` (copied into new tables
        once, by `Dialect.upgrade`). Schema 5 adds the table
        ``executionkit_attempts``, created empty: the headers written before
        hold their checkpoints' attempts whole, and are read so. The upgrade
        runs in the write's transaction, under the schema lock (SQLite's write
        lock, taken by ``BEGIN IMMEDIATE``; PostgreSQL's advisory lock), so two
        writers never both run it; a store of an older executionkit then
        refuses the database.
        """
        found = self.check_version(db, reading=True)
        if found == SCHEMA_VERSION:
            return
        if self.dialect.lock_schema:
            db.execute(self.dialect.lock_schema)
            found = self.check_version(db, reading=True)
            if found == SCHEMA_VERSION:
                return  # upgraded by another writer while this one waited
        upgrade = self.dialect.upgrade if found < _UPGRADED else ()
        for statement in (*self.dialect.schema, *upgrade):
            db.execute(statement)
        db.execute(
            "UPDATE executionkit_schema SET version = ? WHERE version < ?",
            (SCHEMA_VERSION, SCHEMA_VERSION),
        )

    def check_version(self, db: Database, *, reading: bool = False) -> int:
        """The tables' schema version; `CheckpointFormatError` unless this store reads it.

        A read accepts schemas 2 to 4 too (the same columns; schema 2 has no
        ledger rows, and before 5 no attempts rows); a write upgrades them first
        (`upgrade`).
        """
        versions = [
            row[0] for row in db.execute("SELECT version FROM executionkit_schema").fetchall()
        ]
        accepted = _READABLE if reading else (SCHEMA_VERSION,)
        if len(versions) != 1 or versions[0] not in accepted:
            msg = (
                f"{self.name}: the executionkit tables have schema version "
                f"{reprlib.repr(versions)}, this version of executionkit reads "
                f"{list(_READABLE)}"
            )
            if len(versions) == 1 and versions[0] in _OLDER:
                msg += f" ({_OLDER[versions[0]]})"
            raise CheckpointFormatError(msg)
        version: int = versions[0]
        return version

    # --- saving ---------------------------------------------------------------------

    def save(
        self, db: Database, checkpoint: WorkflowCheckpoint, run_id: str, header: str
    ) -> Known | None:
        """Write ``checkpoint`` if newer than the stored one of its run (see the stores).

        Returns what to pass to `committed` once the transaction commits, or None
        when nothing was written (the same checkpoint again). The run's next
        checkpoint after the one this object saved last is written without a
        read (`executionkit.stores._sql_next`), unless the fence finds the stored
        state changed: then the full save below reads and compares.
        """
        with self._lock:  # a thread saving the same run meanwhile takes the slow path
            known = self._known.pop(run_id, None)
        if known is not None:
            plan = plan_next(self, known, checkpoint, header)
            if plan is not None:
                done = write_next(self, db, plan)
                if done is not None:
                    return done
                known = None  # the stored run is not what this object wrote
        return self._save(db, checkpoint, run_id, header, known)

    def plan(self, run_id: str, checkpoint: WorkflowCheckpoint, header: str) -> NextSave | None:
        """The fast save of ``checkpoint`` (see `plan_next`), taking the run's known state.

        None, the known state left in place, when the checkpoint is not the run's next.
        """
        with self._lock:
            known = self._known.pop(run_id, None)
        plan = None if known is None else plan_next(self, known, checkpoint, header)
        if plan is None and known is not None:
            self.committed(known)
        return plan

    def _save(
        self,
        db: Database,
        checkpoint: WorkflowCheckpoint,
        run_id: str,
        header: str,
        known: Known | None,
    ) -> Known | None:
        stored_seq, written, next_ord = self._lock_run(db, run_id)
        after = known is not None and self._next(known, checkpoint, stored_seq, written)
        forgotten = False  # whether the stored header is deleted already
        if stored_seq >= 0:
            forgotten = self._check_stored(db, run_id, checkpoint, stored_seq, replaced=after)
            if checkpoint.seq <= stored_seq:
                if checkpoint.seq == stored_seq and self._same(db, run_id, checkpoint, stored_seq):
                    return None  # the same checkpoint again: nothing to do
                raise stale(self.name, checkpoint, stored_seq)
        seq = checkpoint.seq
        # The fast paths append only: they drop no output row, and item rows only of
        # the maps that finished. A store without history keeps no dropped row after
        # its save (below), so then there is nothing to forget but those.
        outputs_appended = after and known is not None and self.follows(known, checkpoint)
        if outputs_appended and known is not None:
            names, ords, new = known.names, known.ords, list(checkpoint.new_outputs)
        else:
            names, ords, new, next_ord = self._diff(db, run_id, checkpoint, seq, next_ord)
        rows = []
        for name in new:
            rows.append((run_id, next_ord, name, seq, self.codec.value(checkpoint, name)))
            names.append(name)
            ords[name] = next_ord
            next_ord += 1
        for row_ in rows:
            db.execute(ADD, row_)
        items_appended = False
        if after and known is not None and self.items.follow(checkpoint, known.maps):
            items_appended = all(name in checkpoint.items for name in known.maps)
            maps, next_ord = self.items.save_next(db, run_id, checkpoint, next_ord, known.maps)
        else:
            maps, next_ord = self.items.save_differences(db, run_id, checkpoint, next_ord)
        live = known.ledger if after and known is not None else None
        ledger, next_ord, ledger_appended = self.ledger.save(
            db, run_id, checkpoint, next_ord, live
        )
        live = known.attempts if after and known is not None else None
        attempts, next_ord, attempts_appended = self.attempts.save(
            db, run_id, checkpoint, next_ord, live
        )
        db.execute(ADD_HEADER, (run_id, seq, checkpoint.created_at, header))
        if not self.keeps_history and stored_seq >= 0:
            needed = (
                not forgotten,
                not outputs_appended,
                not items_appended,
                not ledger_appended,
                not attempts_appended,
            )
            self._forget(db, run_id, stored_seq, needed)
        # The WHERE clause repeats the seq check made under the lock: even a writer
        # that skipped it could never move a run backwards.
        update = (
            f"UPDATE executionkit_runs SET seq = ?, written = {self.dialect.next_written}, "  # noqa: S608
            f"next_ord = ? WHERE run_id = ? AND seq < ? RETURNING written"
        )
        done = db.execute(update, (seq, next_ord, run_id, seq)).fetchone()
        if done is None:  # pragma: no cover - the lock makes this unreachable
            raise stale(self.name, checkpoint, stored_seq)
        return Known(
            run_id,
            lineage(checkpoint),
            seq,
            done[0],
            next_ord,
            names,
            ords,
            maps,
            ledger,
            attempts,
            header,
        )

    @staticmethod
    def _forget(db: Database, run_id: str, stored_seq: int, needed: tuple[bool, ...]) -> None:
        """Delete the replaced header and the rows no kept checkpoint sees, as ``needed``."""
        forget = (
            (FORGET_HEADER, (run_id, stored_seq)),
            (FORGET_DROPPED, (run_id, run_id)),
            (FORGET_DROPPED_ITEMS, (run_id, run_id)),
            (FORGET_DROPPED_LEDGER, (run_id, run_id)),
            (FORGET_DROPPED_ATTEMPTS, (run_id, run_id)),
        )
        for (statement, params), wanted in zip(forget, needed, strict=True):
            if wanted:
                db.execute(statement, params)

    def _lock_run(self, db: Database, run_id: str) -> tuple[int, int, int]:
        """The run row's seq, written and next_ord, locked; inserted first if missing.

        Inserting first, always: PostgreSQL then holds the row-exclusive lock of the
        runs table from the start, as a save did before, so a store creating the
        tables meanwhile waits for it rather than deadlocking with it.
        """
        db.execute(NEW_RUN, (run_id,))  # so that there is a row to lock
        row = self._run_row(db, run_id)
        if row is None:  # pragma: no cover - inserted just above, under the lock
            msg = f"{self.name}, run {run_id!r}: the run row is missing"
            raise CheckpointFormatError(msg)
        return row

    def _check_stored(
        self,
        db: Database,
        run_id: str,
        checkpoint: WorkflowCheckpoint,
        stored_seq: int,
        *,
        replaced: bool,
    ) -> bool:
        """Read the stored header back: damage is reported, never written over.

        When ``checkpoint`` is the run's next one (``replaced``) in a store without
        history, the header is deleted as it is read, in one statement, and this
        returns True.
        """
        if replaced and not self.keeps_history and checkpoint.seq > stored_seq:
            gone = db.execute(FORGET_HEADER_RETURNING, (run_id, stored_seq)).fetchone()
            self.codec.header_row(run_id, stored_seq, gone)
            return True
        self._read_header(db, run_id, stored_seq)
        return False

    def committed(self, known: Known | None) -> None:
        """Remember what a save committed, for the next save's fast path."""
        if known is None:
            return
        with self._lock:
            self._known[known.run_id] = known
            while len(self._known) > _CACHED_RUNS:
                del self._known[next(iter(self._known))]

    @staticmethod
    def _next(known: Known, checkpoint: WorkflowCheckpoint, stored_seq: int, written: int) -> bool:
        """Whether ``checkpoint`` is the next one of the run that wrote the stored one.

        True when the stored checkpoint is the one this object wrote (same seq and
        save counter), and ``checkpoint`` was taken by the same run (whose
        checkpoints only ever append outputs and items, and name them in
        ``new_outputs`` and ``new_items``) right after it (the next ``seq``, so
        those cover everything recorded since). Everything else takes the slow
        path, which compares: a checkpoint from ``from_dict`` (no ``new_outputs``),
        or made by hand.
        """
        return (
            known.lineage is not None
            and lineage(checkpoint) is known.lineage
            and known.seq == stored_seq
            and known.written == written
            and checkpoint.seq == stored_seq + 1
        )

    @staticmethod
    def follows(known: Known, checkpoint: WorkflowCheckpoint) -> bool:
        """Whether the next checkpoint only appends ``new_outputs``: the counts agree."""
        new = checkpoint.new_outputs
        return len(checkpoint.outputs) == len(known.names) + len(new) and not any(
            name in known.ords for name in new
        )

    def _diff(
        self,
        db: Database,
        run_id: str,
        checkpoint: WorkflowCheckpoint,
        seq: int,
        next_ord: int,
    ) -> tuple[list[str], dict[str, int], list[str], int]:
        """Compare with the stored outputs: keep the longest equal prefix, replace the rest.

        O(outputs); taken for a checkpoint read back with ``from_dict`` (no
        ``new_outputs``), the first save of a store object, and a resumed run that
        dropped or replaced outputs. The rebuild then equals ``checkpoint``, in order.
        """
        live = [
            (ord_, self.codec.stored_text("step name", name), value)
            for ord_, name, value in db.execute(LIVE, (run_id,)).fetchall()
        ]
        wanted = list(checkpoint.outputs)
        kept = 0
        for (_, name, value), want in zip(live, wanted, strict=False):
            if name != want or value != self.codec.value(checkpoint, want):
                break
            kept += 1
        for ord_, _, _ in live[kept:]:
            db.execute(DROP, (seq, run_id, ord_))
        names = wanted[:kept]
        ords = {name: ord_ for (ord_, name, _) in live[:kept]}
        return names, ords, wanted[kept:], next_ord

    def _run_row(self, db: Database, run_id: str) -> tuple[int, int, int] | None:
        """The run row's seq, written and next_ord, locked; None if the run has none."""
        row = db.execute(self.dialect.lock_run, (run_id,)).fetchone()
        if row is None:
            return None
        seq, written, next_ord = row
        for column, value in (("seq", seq), ("written", written), ("next_ord", next_ord)):
            if type(value) is not int:
                msg = (
                    f"{self.name}, run {run_id!r}: the stored {column} must be an int, got "
                    f"{type(value).__name__} {reprlib.repr(value)}"
                )
                raise CheckpointFormatError(msg)
        return seq, written, next_ord

    def _same(self, db: Database, run_id: str, checkpoint: WorkflowCheckpoint, seq: int) -> bool:
        stored = self._at(db, run_id, seq)
        try:
            return bool(loads(dumps(stored.to_dict())) == loads(dumps(checkpoint.to_dict())))
        except (TypeError, ValueError, RecursionError):
            return False

    # --- reading --------------------------------------------------------------------

    def load(self, db: Database, run_id: str | None) -> WorkflowCheckpoint | None:
        """The latest checkpoint of ``run_id``, or of the run saved to last."""
        found = self._latest(db, run_id)
        return None if found is None else self._at(db, *found)

    def _latest(self, db: Database, run_id: str | None) -> tuple[str, int] | None:
        """``run_id`` (or the run saved to last) and its latest seq; None if it has none."""
        if run_id is None:
            row = db.execute(LATEST).fetchone()
        else:
            row = db.execute(RUN, (run_id,)).fetchone()
        if row is None:
            return None
        found = self.codec.stored_text("run_id", row[0])
        return found, self.codec.stored_int(found, "seq", row[1])

    def load_seq(self, db: Database, run_id: str | None, seq: int) -> WorkflowCheckpoint | None:
        """The checkpoint ``seq`` of ``run_id`` (or of the run saved to last), rebuilt.

        None if the run has no checkpoint at all.

        Raises:
            CheckpointNotKeptError: If the run has checkpoints, but none with ``seq``.
        """
        found = self._latest(db, run_id)
        if found is None:
            return None
        if db.execute(HEADER, (found[0], seq)).fetchone() is None:
            kept = kept_seqs(self, db, found[0])
            # The store reading may not be the one that saved: say what is kept, not why.
            note = "only the latest: a store keeps every one with history=True"
            if len(kept) > 1:
                note = ""
            raise CheckpointNotKeptError(self.name, found[0], seq, kept, note=note)
        return self._at(db, found[0], seq)

    def checkpoints(self, db: Database, run_id: str | None) -> list[CheckpointInfo]:
        """Every kept checkpoint of ``run_id`` (or of the run saved to last), described."""
        found = self._latest(db, run_id)
        return [] if found is None else list_checkpoints(self, db, found[0])

    def history(self, db: Database, run_id: str) -> list[WorkflowCheckpoint]:
        """Every kept checkpoint of ``run_id``, oldest first."""
        return every_checkpoint(self, db, run_id)

    def run_seqs(self, db: Database) -> dict[str, int]:
        """Every run with a checkpoint and the seq of its latest, the most recently saved first."""
        found = dict(db.execute(RUN_SEQS).fetchall())
        for run_id, seq in found.items():
            if not isinstance(run_id, str) or type(seq) is not int:
                msg = (
                    f"{self.name}: a stored run is damaged: run_id {reprlib.repr(run_id)}, "
                    f"seq {reprlib.repr(seq)}"
                )
                raise CheckpointFormatError(msg)
        return found

    def run_ids(self, db: Database) -> list[str]:
        """Every run with a checkpoint, the most recently saved first."""
        found = [row[0] for row in db.execute(RUN_IDS).fetchall()]
        for run_id in found:
            if not isinstance(run_id, str):
                msg = f"{self.name}: a stored run_id is not text: {reprlib.repr(run_id)}"
                raise CheckpointFormatError(msg)
        return found

    # --- retention ------------------------------------------------------------------

    def prune(self, db: Database, run_ids: Iterable[str], keep_last: int) -> int:
        """Keep the last ``keep_last`` checkpoints of each run; return how many went."""
        removed = 0
        for run_id in run_ids:
            row = db.execute(KEEP_FROM, (run_id, keep_last - 1)).fetchone()
            if row is None:
                continue  # no more than keep_last checkpoints
            count = db.execute(
                "SELECT COUNT(*) FROM executionkit_headers WHERE run_id = ? AND seq < ?",
                (run_id, row[0]),
            ).fetchone()[0]
            db.execute(PRUNE_HEADERS, (run_id, row[0]))
            db.execute(FORGET_DROPPED, (run_id, run_id))
            db.execute(FORGET_DROPPED_ITEMS, (run_id, run_id))
            db.execute(FORGET_DROPPED_LEDGER, (run_id, run_id))
            db.execute(FORGET_DROPPED_ATTEMPTS, (run_id, run_id))
            removed += count
        return removed

    def delete(self, db: Database, run_id: str) -> bool:
        """Delete every checkpoint of ``run_id``; whether there was any."""
        existed = db.execute(RUN, (run_id,)).fetchone() is not None
        tables = (
            "executionkit_outputs",
            "executionkit_items",
            "executionkit_ledger",
            "executionkit_attempts",
            "executionkit_headers",
            "executionkit_runs",
        )
        for table in tables:
            db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))  # noqa: S608
        with self._lock:
            self._known.pop(run_id, None)
        return existed

    # --- decoding -------------------------------------------------------------------

    def _at(self, db: Database, run_id: str, seq: int) -> WorkflowCheckpoint:
        """The checkpoint of ``run_id`` at ``seq``: its header, outputs, items and logs."""
        header = self.ledger.as_of(db, run_id, seq, self._read_header(db, run_id, seq))
        header = self.attempts.as_of(db, run_id, seq, header)
        rows = db.execute(AS_OF, (run_id, seq, seq)).fetchall()
        entries = [self.codec.entry(run_id, name, value) for name, value in rows]
        items = self.items.as_of(db, run_id, seq, self.codec.decoder(run_id))
        return self.codec.rebuild(run_id, self.items.fill(run_id, header, items), entries)

    def _read_header(self, db: Database, run_id: str, seq: int) -> dict[str, Any]:
        return self.codec.header_row(run_id, seq, db.execute(HEADER, (run_id, seq)).fetchone())
