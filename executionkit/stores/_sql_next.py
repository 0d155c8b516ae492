r"""The SQL stores' fast save: the run's next checkpoint, written without reading first.

When a store object saves the checkpoint that follows the one it saved last of
a run (the same run took both, one ``seq`` apart, and it only appended outputs,
items, ledger rows and attempts), everything the save writes is known in Python before
the database is touched: the new rows, their ``ord``\\s, the header. So the save
opens with one fenced ``UPDATE`` of the run's row, whose ``WHERE`` clause holds
every check the full save makes by reading:

- the stored ``seq`` and ``written`` are the ones this object committed (no
  other writer saved the run since, in any process): the stale-writer fence;
- the stored header of that checkpoint is, byte for byte, the text this object
  wrote (damage is reported by the full save, never written over);
- the schema version is this store's.

If it changes no row, nothing was written, and the caller runs the full save
(which reads, compares, and raises `StaleCheckpointError` or
`CheckpointFormatError` as due) in the same transaction. Otherwise the inserts
follow, each of constant SQL text, so the driver's statement cache prepares
each once. `PostgresStore` sends the same writes as one statement of
data-modifying CTEs (`executionkit.stores._pg_next`): one round trip per save.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit.stores._sql_attempts import ADD_ATTEMPT
from executionkit.stores._sql_items import ADD_ITEM, DROP_MAP, FORGET_DROPPED_ITEMS
from executionkit.stores._sql_ledger import ADD_LEDGER
from executionkit.stores._sql_schema import ADD, ADD_HEADER, MOVE_HEADER

if TYPE_CHECKING:
    from collections.abc import Sequence

    from executionkit.stores._sql import SqlCheckpoints
    from executionkit.stores._sql_schema import Database


@dataclass
class Known:
    """A run's latest checkpoint as this store object wrote it: its live output names."""

    run_id: str
    lineage: object  # what every checkpoint of the run that wrote it shares, or None
    seq: int
    written: int
    next_ord: int
    names: list[str]
    ords: dict[str, int]
    maps: dict[str, int]  # the number of live item rows of each unfinished map
    ledger: int  # the number of live ledger rows
    attempts: int  # the number of live attempts rows
    header: str  # the header text written for ``seq``


def fence(next_written: str) -> str:
    """The fenced update of the run row that opens a fast save (``?`` placeholders).

    Parameters: new seq, next_ord, run_id, stored seq, stored written, schema
    version, run_id, stored seq, stored header.
    """
    return (
        f"UPDATE executionkit_runs SET seq = ?, written = {next_written}, next_ord = ? "  # noqa: S608
        "WHERE run_id = ? AND seq = ? AND written = ? "
        "AND NOT EXISTS (SELECT 1 FROM executionkit_schema WHERE version <> ?) "
        "AND (SELECT header FROM executionkit_headers WHERE run_id = ? AND seq = ?) = ? "
        "RETURNING written"
    )


@dataclass
class NextSave:
    r"""What a fast save writes: the rows of the run's next checkpoint, ``ord``\\s assigned."""

    known: Known  # what this store object committed last of the run
    checkpoint: WorkflowCheckpoint
    header: str
    outputs: list[tuple[int, str, str]]  # ord, step name, [output, step info] as JSON
    items: list[tuple[int, str, str, str]]  # ord, map step, item key, output as JSON
    finished: list[str]  # maps whose item rows the checkpoint no longer holds
    ledger: list[tuple[object, ...]]  # ord and the row's eight values
    attempts: list[tuple[object, ...]]  # ord and the entry's six values
    maps: dict[str, int]  # live item rows of each unfinished map, after
    next_ord: int

    @property
    def run_id(self) -> str:
        """The run saved."""
        return self.known.run_id

    def fence_params(self, version: int) -> tuple[object, ...]:
        """The parameters of `fence`."""
        known = self.known
        return (
            self.checkpoint.seq,
            self.next_ord,
            known.run_id,
            known.seq,
            known.written,
            version,
            known.run_id,
            known.seq,
            known.header,
        )


def plan_next(
    sql: SqlCheckpoints, known: Known, checkpoint: WorkflowCheckpoint, header: str
) -> NextSave | None:
    """The fast save of ``checkpoint``, if it is the next one of the run ``known`` describes.

    None when it is not (another run's, a gap in ``seq``, outputs replaced or
    dropped, items, ledger rows or attempts not simply appended): the full save
    compares.
    """
    if not (
        known.lineage is not None
        and vars(checkpoint).get("_shared") is known.lineage
        and checkpoint.seq == known.seq + 1
        and sql.follows(known, checkpoint)
        and sql.items.follow(checkpoint, known.maps)
    ):
        return None
    logs = _new_log_entries(sql, known, checkpoint)
    if logs is None:
        return None
    next_ord = known.next_ord
    outputs = []
    for name in checkpoint.new_outputs:
        outputs.append((next_ord, name, sql.codec.value(checkpoint, name)))
        next_ord += 1
    items = []
    maps: dict[str, int] = {}
    new_items = checkpoint.new_items
    for name, entry in checkpoint.items.items():
        keys = new_items.get(name, ())
        for key in keys:
            items.append((next_ord, name, key, sql.items.value(checkpoint, entry["outputs"][key])))
            next_ord += 1
        maps[name] = known.maps.get(name, 0) + len(keys)
    finished = [name for name in known.maps if name not in checkpoint.items]
    rows: list[list[tuple[object, ...]]] = []
    for log, entries in zip((sql.ledger, sql.attempts), logs, strict=True):
        rows.append([(next_ord + number, *log.values(e)) for number, e in enumerate(entries)])
        next_ord += len(entries)
    ledger, attempts = rows
    return NextSave(
        known, checkpoint, header, outputs, items, finished, ledger, attempts, maps, next_ord
    )


def _new_log_entries(
    sql: SqlCheckpoints, known: Known, checkpoint: WorkflowCheckpoint
) -> list[Sequence[Any]] | None:
    """The new ledger rows and attempts of the run's next checkpoint; None unless both known."""
    found: list[Sequence[Any]] = []
    for log, held in ((sql.ledger, known.ledger), (sql.attempts, known.attempts)):
        if checkpoint.version < log.SINCE:
            found.append(())
            continue
        entries = log.next_entries(checkpoint, held)
        if entries is None:
            return None
        found.append(entries)
    return found


def write_next(sql: SqlCheckpoints, db: Database, plan: NextSave) -> Known | None:
    """Write ``plan`` in the open transaction; None (nothing written) if the fence refuses it."""
    done = db.execute(sql.fence, plan.fence_params(sql.version)).fetchone()
    if done is None:
        return None
    run_id, seq = plan.run_id, plan.checkpoint.seq
    created_at = plan.checkpoint.created_at
    if sql.keeps_history:
        db.execute(ADD_HEADER, (run_id, seq, created_at, plan.header))
    else:
        db.execute(MOVE_HEADER, (seq, created_at, plan.header, run_id, plan.known.seq))
    many = getattr(db, "executemany", None)
    outputs = [(run_id, ord_, name, seq, value) for ord_, name, value in plan.outputs]
    items = [(run_id, ord_, step, key, seq, value) for ord_, step, key, value in plan.items]
    ledger = [(run_id, row[0], seq, *row[1:]) for row in plan.ledger]
    attempts = [(run_id, row[0], seq, *row[1:]) for row in plan.attempts]
    for statement, rows in (
        (ADD, outputs),
        (ADD_ITEM, items),
        (ADD_LEDGER, ledger),
        (ADD_ATTEMPT, attempts),
    ):
        if many is not None and len(rows) > 1:
            many(statement, rows)
        else:
            for row in rows:
                db.execute(statement, row)
    for name in plan.finished:
        db.execute(DROP_MAP, (seq, run_id, name))
    if plan.finished and not sql.keeps_history:
        db.execute(FORGET_DROPPED_ITEMS, (run_id, run_id))
    return finish(plan, int(done[0]))


def finish(plan: NextSave, written: int) -> Known:
    """What the store remembers of the run once ``plan`` committed with ``written``."""
    known = plan.known
    names, ords = known.names, known.ords
    for ord_, name, _ in plan.outputs:
        names.append(name)
        ords[name] = ord_
    return Known(
        known.run_id,
        known.lineage,
        plan.checkpoint.seq,
        written,
        plan.next_ord,
        names,
        ords,
        plan.maps,
        known.ledger + len(plan.ledger),
        known.attempts + len(plan.attempts),
        plan.header,
    )
