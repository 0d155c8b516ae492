"""A run's checkpoints in the SQL stores: listed from their headers and row seqs, or rebuilt.

`list_checkpoints` describes every kept checkpoint of a run without decoding
an output: one query of the header rows (each header decoded once: it holds
the errors and questions), one of the output rows' names and ``added`` and
``dropped`` seqs, one of the item rows' seqs. The outputs a checkpoint records
are the rows with ``added <= seq`` and no ``dropped <= seq``, so one sweep over
the sorted seqs counts them for every checkpoint: O(checkpoints + rows) in all.

A save that does not follow the stored checkpoint (the first of a resumed run)
drops the rows after the first output that differs and writes them again, to
keep their order; the rows it wrote again with the very same value are not
new outputs. Only for those saves (a row dropped by the same seq that adds one
of the same name) are the two rows' texts compared, as text, never decoded.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from executionkit._errors import CheckpointFormatError
from executionkit.stores._history import CheckpointInfo
from executionkit.stores._sql_schema import ALL_ROWS, HEADERS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit.stores._sql import SqlCheckpoints
    from executionkit.stores._sql_ledger import LogRows
    from executionkit.stores._sql_schema import Database

_SEQS = "SELECT seq FROM executionkit_headers WHERE run_id = ? ORDER BY seq"
_HEADER_ROWS = """SELECT seq, created_at, header FROM executionkit_headers
    WHERE run_id = ? ORDER BY seq"""
_OUTPUT_SEQS = """SELECT ord, name, added, dropped FROM executionkit_outputs
    WHERE run_id = ? ORDER BY ord"""
_ITEM_SEQS = "SELECT added, dropped FROM executionkit_items WHERE run_id = ?"
_DROPPED_AT = "SELECT name, value FROM executionkit_outputs WHERE run_id = ? AND dropped = ?"
_WRITTEN = """SELECT ord, name, value FROM executionkit_outputs
    WHERE run_id = ? AND ord >= ? AND ord <= ? AND added = ?"""


def kept_seqs(sql: SqlCheckpoints, db: Database, run_id: str) -> list[int]:
    """The seqs of the checkpoints kept of ``run_id``, oldest first (no header decoded)."""
    rows = db.execute(
        "SELECT seq FROM executionkit_headers WHERE run_id = ? ORDER BY seq", (run_id,)
    )
    return [sql.codec.stored_int(run_id, "seq", row[0]) for row in rows.fetchall()]


def list_checkpoints(sql: SqlCheckpoints, db: Database, run_id: str) -> list[CheckpointInfo]:
    """Every kept checkpoint of ``run_id``, oldest first, described from headers and row seqs."""
    headers = db.execute(_HEADER_ROWS, (run_id,)).fetchall()
    if not headers:
        return []
    seqs = [sql.codec.stored_int(run_id, "seq", row[0]) for row in headers]
    outputs: list[tuple[int, str, int, int | None]] = [
        (
            sql.codec.stored_int(run_id, "ord", ord_),
            sql.codec.stored_text("step name", name),
            sql.codec.stored_int(run_id, "added seq", added),
            _dropped(sql, run_id, dropped),
        )
        for ord_, name, added, dropped in db.execute(_OUTPUT_SEQS, (run_id,)).fetchall()
    ]
    items = [
        (sql.codec.stored_int(run_id, "added seq", added), _dropped(sql, run_id, dropped))
        for added, dropped in db.execute(_ITEM_SEQS, (run_id,)).fetchall()
    ]
    recorded = _visible_counts(((added, dropped) for _, _, added, dropped in outputs), seqs)
    held_items = _visible_counts(items, seqs)
    new = _new_outputs(db, run_id, outputs, set(seqs))
    listed = []
    for (seq, created_at, text), count, item_count in zip(
        headers, recorded, held_items, strict=True
    ):
        at = sql.codec.stored_int(run_id, "seq", seq)
        header = sql.codec.parse_header(run_id, text)
        listed.append(
            CheckpointInfo(
                run_id=run_id,
                seq=at,
                created_at=_created_at(sql, run_id, at, created_at),
                step_index=count,
                new_outputs=tuple(new.get(at, ())),
                errors=tuple(_entries(sql, run_id, at, header, "errors")),
                pending=len(_entries(sql, run_id, at, header, "pending")),
                items=item_count,
            )
        )
    return listed


def every_checkpoint(sql: SqlCheckpoints, db: Database, run_id: str) -> list[WorkflowCheckpoint]:
    """Every kept checkpoint of ``run_id``, rebuilt, oldest first.

    Each row is decoded once and its output shared by the checkpoints that hold
    it, as the checkpoints a run takes share their outputs (and ledger rows and
    attempts);
    each checkpoint is still validated whole, so this costs O(checkpoints x outputs): list with
    `list_checkpoints` and load the one wanted instead.
    """
    headers = db.execute(HEADERS, (run_id,)).fetchall()
    if not headers:
        return []
    rows = [
        (
            sql.codec.entry(run_id, name, value),
            sql.codec.stored_int(run_id, "added seq", added),
            _dropped(sql, run_id, dropped),
        )
        for name, value, added, dropped in db.execute(ALL_ROWS, (run_id,)).fetchall()
    ]
    items = [
        (row, sql.codec.stored_int(run_id, "added seq", added), _dropped(sql, run_id, dropped))
        for row, added, dropped in sql.items.every(db, run_id, sql.codec.decoder(run_id))
    ]
    parsed = [
        (sql.codec.stored_int(run_id, "seq", seq), sql.codec.parse_header(run_id, header))
        for seq, header in headers
    ]
    # Rows none of the headers counts are not read (a schema 2 database has no ledger).
    logs = [(log, _log_rows(sql, db, run_id, log, parsed)) for log in (sql.ledger, sql.attempts)]
    result = []
    for at, header in parsed:
        visible = [entry for entry, added, dropped in rows if _held(added, dropped, at)]
        held = [row for row, added, dropped in items if _held(added, dropped, at)]
        filled = header
        for log, log_rows in logs:
            kept = [row for row, added, dropped in log_rows if _held(added, dropped, at)]
            filled = log.fill(run_id, at, filled, kept)
        result.append(sql.codec.rebuild(run_id, sql.items.fill(run_id, filled, held), visible))
    return result


def _log_rows(
    sql: SqlCheckpoints,
    db: Database,
    run_id: str,
    log: LogRows,
    parsed: list[tuple[int, dict[str, Any]]],
) -> list[tuple[list[Any], int, int | None]]:
    """Every row of ``log`` of the run, with its seqs; none if no header counts any."""
    if not any(log.counts(header) for _, header in parsed):
        return []
    return [
        (row, sql.codec.stored_int(run_id, "added seq", added), _dropped(sql, run_id, dropped))
        for row, added, dropped in log.every(db, run_id)
    ]


def _held(added: int, dropped: int | None, seq: int) -> bool:
    return added <= seq and (dropped is None or dropped > seq)


def _dropped(sql: SqlCheckpoints, run_id: str, dropped: object) -> int | None:
    return None if dropped is None else sql.codec.stored_int(run_id, "dropped seq", dropped)


def _visible_counts(rows: Iterable[tuple[int, int | None]], seqs: list[int]) -> list[int]:
    """For each of ``seqs`` (ascending), how many ``(added, dropped)`` rows it holds.

    A row counts from ``added`` on, until ``dropped``: one sweep over the sorted
    seqs at which the count changes, O((rows + seqs) log rows).
    """
    changes: defaultdict[int, int] = defaultdict(int)
    for added, dropped in rows:
        changes[added] += 1
        if dropped is not None:
            changes[dropped] -= 1
    steps = sorted(changes.items())
    counts = []
    count = position = 0
    for seq in seqs:
        while position < len(steps) and steps[position][0] <= seq:
            count += steps[position][1]
            position += 1
        counts.append(count)
    return counts


def _new_outputs(
    db: Database,
    run_id: str,
    outputs: list[tuple[int, str, int, int | None]],
    kept: set[int],
) -> dict[int, list[str]]:
    """The names each kept seq wrote rows for, in ``ord`` order, less those written again.

    A row written again (a save that replaced the rows after the first output
    that differs, to keep their order) has a twin of the same name and text that
    the same seq dropped; only those seqs are read further, as text.
    """
    written: defaultdict[int, list[tuple[int, str]]] = defaultdict(list)
    dropped_names: set[tuple[int, str]] = set()
    for ord_, name, added, dropped in outputs:
        if added in kept:
            written[added].append((ord_, name))
        if dropped is not None and dropped in kept:
            dropped_names.add((dropped, name))
    new: dict[int, list[str]] = {}
    for seq, rows in written.items():
        again: set[int] = set()
        if any((seq, name) in dropped_names for _, name in rows):
            again = _written_again(db, run_id, seq, rows)
        new[seq] = [name for ord_, name in rows if ord_ not in again]
    return new


def _written_again(db: Database, run_id: str, seq: int, rows: list[tuple[int, str]]) -> set[int]:
    """The ords of the rows ``seq`` wrote that repeat a row it dropped (texts compared)."""
    before = dict(db.execute(_DROPPED_AT, (run_id, seq)).fetchall())
    # A save writes its output rows with consecutive ords, so one range holds them.
    low, high = rows[0][0], rows[-1][0]
    return {
        ord_
        for ord_, name, value in db.execute(_WRITTEN, (run_id, low, high, seq)).fetchall()
        if name in before and before[name] == value
    }


def _created_at(sql: SqlCheckpoints, run_id: str, seq: int, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    msg = (
        f"{sql.name}, run {run_id!r}: the stored created_at of checkpoint seq={seq} must be "
        f"text, got {type(value).__name__}"
    )
    raise CheckpointFormatError(msg)


def _entries(
    sql: SqlCheckpoints, run_id: str, seq: int, header: Mapping[str, Any], key: str
) -> list[str]:
    """The names of a header's ``errors`` or ``pending`` (none if the format lacks it)."""
    value = header.get(key, {})
    if not isinstance(value, dict):
        msg = (
            f"{sql.name}, run {run_id!r}: the stored {key} of checkpoint seq={seq} must be "
            f"a JSON object, got {type(value).__name__}"
        )
        raise CheckpointFormatError(msg)
    return list(value)
