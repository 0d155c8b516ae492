"""The cost ledger in the SQL stores: one row per ledger entry, written once (schema 3 on).

A checkpoint's header holds the number of ledger rows it counts (``"ledger":
n``) instead of the rows; each row is a row of ``executionkit_ledger``, with the
``seq`` that wrote it (``added``) and, once a later checkpoint of the run no
longer holds it (one that does not extend the stored ledger: another worker's,
or one made by hand), the ``seq`` from which it no longer counts
(``dropped``). The ledger of the checkpoint at ``seq`` k is the rows with
``added <= k`` and no ``dropped <= k``, in ``ord`` order; there are exactly n
of them. The run's next checkpoint appends its ``new_ledger`` rows, so a save
writes each row once and the header does not grow with the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit._errors import CheckpointFormatError
from executionkit.stores._common import ledger_prefix, next_ledger_rows

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from executionkit._checkpoint._ledger import LedgerEntry
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit.stores._sql_schema import Database

_VALUES = "step, item, attempt, outcome, model, input_tokens, output_tokens, llm_calls"


def ledger_tables(bigint: str) -> tuple[str, ...]:
    """The CREATE statements of the ledger table (schema 3), with the dialect's integer type."""
    return (
        f"""CREATE TABLE IF NOT EXISTS executionkit_ledger (
            run_id TEXT NOT NULL,
            ord {bigint} NOT NULL,
            added {bigint} NOT NULL,
            dropped {bigint},
            step TEXT NOT NULL,
            item TEXT,
            attempt {bigint} NOT NULL,
            outcome TEXT NOT NULL,
            model TEXT,
            input_tokens {bigint} NOT NULL,
            output_tokens {bigint} NOT NULL,
            llm_calls {bigint} NOT NULL,
            PRIMARY KEY (run_id, ord)
        )""",
    )


_LIVE = f"""SELECT ord, {_VALUES} FROM executionkit_ledger
    WHERE run_id = ? AND dropped IS NULL ORDER BY ord"""  # noqa: S608 - constant columns
_DROP = "UPDATE executionkit_ledger SET dropped = ? WHERE run_id = ? AND ord = ?"
ADD_LEDGER = f"""INSERT INTO executionkit_ledger (run_id, ord, added, dropped, {_VALUES})
    VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?)"""  # noqa: S608 - constant columns
_AS_OF = f"""SELECT {_VALUES} FROM executionkit_ledger
    WHERE run_id = ? AND added <= ? AND (dropped IS NULL OR dropped > ?)
    ORDER BY ord"""  # noqa: S608 - constant columns
_ALL_ROWS = f"""SELECT {_VALUES}, added, dropped FROM executionkit_ledger
    WHERE run_id = ? ORDER BY ord"""  # noqa: S608 - constant columns
# Rows no kept checkpoint can see: dropped at or before the oldest kept seq.
FORGET_DROPPED_LEDGER = """DELETE FROM executionkit_ledger WHERE run_id = ? AND dropped IS NOT NULL
    AND dropped <= (SELECT MIN(seq) FROM executionkit_headers WHERE run_id = ?)"""


class LedgerRows:
    """Writes and reads the ledger rows of one SQL store (``name`` starts its messages)."""

    def __init__(self, name: str) -> None:
        """Name the store in messages."""
        self.name = name

    # --- saving ---------------------------------------------------------------------

    def save(
        self,
        db: Database,
        run_id: str,
        checkpoint: WorkflowCheckpoint,
        next_ord: int,
        live: int | None,
    ) -> tuple[int, int, bool]:
        """Write the rows ``checkpoint`` adds to the run's live ledger rows.

        ``live`` is the number of live rows when the checkpoint is the run's next
        one after the stored one (see `SqlCheckpoints.save`), else None. Returns
        the number of live rows after, the next ``ord``, and whether rows were
        only appended (none dropped).
        """
        if checkpoint.version < 4:  # noqa: PLR2004 - the format that added the ledger
            return 0, next_ord, live is not None
        if live is not None:
            rows = next_ledger_rows(checkpoint, None, live)
            if rows is not None:
                return (
                    live + len(rows),
                    self._add(db, run_id, checkpoint.seq, rows, next_ord),
                    True,
                )
        return self._save_differences(db, run_id, checkpoint, next_ord)

    def _save_differences(
        self, db: Database, run_id: str, checkpoint: WorkflowCheckpoint, next_ord: int
    ) -> tuple[int, int, bool]:
        """Keep the live rows' longest equal start, drop the rest, add the checkpoint's others."""
        seq = checkpoint.seq
        live = db.execute(_LIVE, (run_id,)).fetchall()
        wanted = checkpoint.ledger
        held = [self._entry(run_id, values) for _, *values in live]
        kept = ledger_prefix(held, wanted)
        for row in live[kept:]:
            db.execute(_DROP, (seq, run_id, row[0]))
        next_ord = self._add(db, run_id, seq, wanted[kept:], next_ord)
        return len(wanted), next_ord, kept == len(live)

    @staticmethod
    def _add(
        db: Database, run_id: str, seq: int, rows: Iterable[LedgerEntry], next_ord: int
    ) -> int:
        for row in rows:
            db.execute(ADD_LEDGER, (run_id, next_ord, seq, *row.to_list()))
            next_ord += 1
        return next_ord

    def _entry(self, run_id: str, values: Sequence[object]) -> object:
        """A live row as the `LedgerEntry` it stores, or its raw values if it is no valid one."""
        from executionkit._checkpoint._ledger import read_ledger  # noqa: PLC0415 - the row's checks

        try:
            return read_ledger([list(values)], 4)[0]
        except CheckpointFormatError:
            return (run_id, *values)  # equal to no entry: written again

    # --- reading --------------------------------------------------------------------

    def as_of(self, db: Database, run_id: str, seq: int, header: dict[str, Any]) -> dict[str, Any]:
        """``header`` with its ledger count replaced by the rows checkpoint ``seq`` holds."""
        count = header.get("ledger")
        if type(count) is not int:
            return header  # no ledger (format 3 and older), or not what a store writes
        rows = db.execute(_AS_OF, (run_id, seq, seq)).fetchall() if count else []
        return self.fill(run_id, seq, header, [list(row) for row in rows])

    def every(self, db: Database, run_id: str) -> list[tuple[list[Any], object, object]]:
        """Every ledger row of ``run_id``: its eight values, ``added`` and ``dropped``."""
        return [
            (list(row[:-2]), row[-2], row[-1])
            for row in db.execute(_ALL_ROWS, (run_id,)).fetchall()
        ]

    def fill(
        self, run_id: str, seq: int, header: dict[str, Any], rows: list[list[Any]]
    ) -> dict[str, Any]:
        """``header`` with its ledger count replaced by ``rows``, which must be that many."""
        count = header.get("ledger")
        if type(count) is not int:
            return header
        if len(rows) != count:
            msg = (
                f"{self.name}, run {run_id!r}: checkpoint seq={seq} counts {count} ledger "
                f"rows, {len(rows)} are stored"
            )
            raise CheckpointFormatError(msg)
        return {**header, "ledger": rows}

    @staticmethod
    def counts(header: dict[str, Any]) -> bool:
        """Whether ``header`` counts any ledger row (a schema 2 database holds none)."""
        count = header.get("ledger")
        return type(count) is int and count > 0
