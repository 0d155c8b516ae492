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

`LogRows` is that logic for any append-only list of a checkpoint stored this
way; format 5's ``attempts`` are one too (`executionkit.stores._sql_attempts`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from executionkit._errors import CheckpointFormatError
from executionkit.stores._common import common_prefix, next_ledger_rows

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit.stores._sql_schema import Database


def log_table(table: str, bigint: str, columns: str) -> str:
    """The CREATE statement of a log table: a run's entries in order, then ``columns``.

    Each row is added by one save (``added``, a seq) and dropped by a later one
    (``dropped``) when a checkpoint no longer holds it; `LogRows` keeps them.
    """
    return f"""CREATE TABLE IF NOT EXISTS {table} (
            run_id TEXT NOT NULL,
            ord {bigint} NOT NULL,
            added {bigint} NOT NULL,
            dropped {bigint},
            {columns},
            PRIMARY KEY (run_id, ord)
        )"""


def log_statements(table: str, values: str) -> dict[str, str]:
    """The statements `LogRows` runs on ``table``, whose entry columns are ``values``."""
    marks = ", ".join("?" for _ in values.split(","))
    return {
        "live": f"""SELECT ord, {values} FROM {table}
            WHERE run_id = ? AND dropped IS NULL ORDER BY ord""",  # noqa: S608 - constants
        "drop": f"UPDATE {table} SET dropped = ? WHERE run_id = ? AND ord = ?",  # noqa: S608
        "add": f"""INSERT INTO {table} (run_id, ord, added, dropped, {values})
            VALUES (?, ?, ?, NULL, {marks})""",  # noqa: S608 - constant columns
        "as_of": f"""SELECT {values} FROM {table}
            WHERE run_id = ? AND added <= ? AND (dropped IS NULL OR dropped > ?)
            ORDER BY ord""",  # noqa: S608 - constant columns
        "all": f"""SELECT {values}, added, dropped FROM {table}
            WHERE run_id = ? ORDER BY ord""",  # noqa: S608 - constant columns
        # Rows no kept checkpoint can see: dropped at or before the oldest kept seq.
        "forget": f"""DELETE FROM {table} WHERE run_id = ? AND dropped IS NOT NULL
            AND dropped <= (SELECT MIN(seq) FROM executionkit_headers
            WHERE run_id = ?)""",  # noqa: S608 - constant names
    }


_LEDGER_VALUES = "step, item, attempt, outcome, model, input_tokens, output_tokens, llm_calls"
_LEDGER = log_statements("executionkit_ledger", _LEDGER_VALUES)
ADD_LEDGER = _LEDGER["add"]
FORGET_DROPPED_LEDGER = _LEDGER["forget"]


def ledger_tables(bigint: str) -> tuple[str, ...]:
    """The CREATE statements of the ledger table (schema 3), with the dialect's integer type."""
    columns = f"""step TEXT NOT NULL,
            item TEXT,
            attempt {bigint} NOT NULL,
            outcome TEXT NOT NULL,
            model TEXT,
            input_tokens {bigint} NOT NULL,
            output_tokens {bigint} NOT NULL,
            llm_calls {bigint} NOT NULL"""
    return (log_table("executionkit_ledger", bigint, columns),)


class LogRows(ABC):
    """Writes and reads the rows of one append-only list of a checkpoint (``name`` in messages).

    A subclass names the list: its key in ``to_dict()`` and in the header
    (``KEY``), the format that added it (``SINCE``), its statements
    (``STATEMENTS``, from `log_statements`), what its entries are called in
    messages (``WHAT``), and how a checkpoint's entries are found new, listed
    and read back (`next_entries`, `entries`, `values`, `read`).
    """

    KEY: ClassVar[str]
    SINCE: ClassVar[int]
    WHAT: ClassVar[str]
    STATEMENTS: ClassVar[dict[str, str]]

    def __init__(self, name: str) -> None:
        """Name the store in messages."""
        self.name = name

    # --- what a subclass says about its list ------------------------------------------

    @abstractmethod
    def next_entries(self, checkpoint: WorkflowCheckpoint, held: int) -> Sequence[Any] | None:
        """The entries to append to ``held`` stored ones, if known without comparing."""
        raise NotImplementedError

    @abstractmethod
    def entries(self, checkpoint: WorkflowCheckpoint) -> Sequence[Any]:
        """All the entries of ``checkpoint``."""
        raise NotImplementedError

    @abstractmethod
    def values(self, entry: Any) -> list[Any]:
        """An entry as its columns' values, in the order of the table's value columns."""
        raise NotImplementedError

    @abstractmethod
    def read(self, values: list[Any]) -> object:
        """A stored row's values as the entry it stores (`CheckpointFormatError` if none)."""
        raise NotImplementedError

    # --- saving ---------------------------------------------------------------------

    def save(
        self,
        db: Database,
        run_id: str,
        checkpoint: WorkflowCheckpoint,
        next_ord: int,
        live: int | None,
    ) -> tuple[int, int, bool]:
        """Write the rows ``checkpoint`` adds to the run's live rows.

        ``live`` is the number of live rows when the checkpoint is the run's next
        one after the stored one (see `SqlCheckpoints.save`), else None. Returns
        the number of live rows after, the next ``ord``, and whether rows were
        only appended (none dropped).
        """
        if checkpoint.version < self.SINCE:
            return 0, next_ord, live is not None
        if live is not None:
            new = self.next_entries(checkpoint, live)
            if new is not None:
                return (
                    live + len(new),
                    self._add(db, run_id, checkpoint.seq, new, next_ord),
                    True,
                )
        return self._save_differences(db, run_id, checkpoint, next_ord)

    def _save_differences(
        self, db: Database, run_id: str, checkpoint: WorkflowCheckpoint, next_ord: int
    ) -> tuple[int, int, bool]:
        """Keep the live rows' longest equal start, drop the rest, add the checkpoint's others."""
        seq = checkpoint.seq
        live = db.execute(self.STATEMENTS["live"], (run_id,)).fetchall()
        wanted = self.entries(checkpoint)
        held = [self._entry(run_id, values) for _, *values in live]
        kept = common_prefix(held, wanted)
        drop = self.STATEMENTS["drop"]
        for row in live[kept:]:
            db.execute(drop, (seq, run_id, row[0]))
        next_ord = self._add(db, run_id, seq, wanted[kept:], next_ord)
        return len(wanted), next_ord, kept == len(live)

    def _add(
        self, db: Database, run_id: str, seq: int, entries: Iterable[Any], next_ord: int
    ) -> int:
        add = self.STATEMENTS["add"]
        for entry in entries:
            db.execute(add, (run_id, next_ord, seq, *self.values(entry)))
            next_ord += 1
        return next_ord

    def _entry(self, run_id: str, values: Sequence[object]) -> object:
        """A live row as the entry it stores, or its raw values if it is no valid one."""
        try:
            return self.read(list(values))
        except CheckpointFormatError:
            return (run_id, *values)  # equal to no entry: written again

    # --- reading --------------------------------------------------------------------

    def as_of(self, db: Database, run_id: str, seq: int, header: dict[str, Any]) -> dict[str, Any]:
        """``header`` with its count replaced by the rows checkpoint ``seq`` holds."""
        count = header.get(self.KEY)
        if type(count) is not int:
            return header  # not in the format, or written whole (older schemas)
        rows = db.execute(self.STATEMENTS["as_of"], (run_id, seq, seq)).fetchall() if count else []
        return self.fill(run_id, seq, header, [list(row) for row in rows])

    def every(self, db: Database, run_id: str) -> list[tuple[list[Any], object, object]]:
        """Every row of ``run_id``: its values, ``added`` and ``dropped``."""
        return [
            (list(row[:-2]), row[-2], row[-1])
            for row in db.execute(self.STATEMENTS["all"], (run_id,)).fetchall()
        ]

    def fill(
        self, run_id: str, seq: int, header: dict[str, Any], rows: list[list[Any]]
    ) -> dict[str, Any]:
        """``header`` with its count replaced by ``rows``, which must be that many."""
        count = header.get(self.KEY)
        if type(count) is not int:
            return header
        if len(rows) != count:
            msg = (
                f"{self.name}, run {run_id!r}: checkpoint seq={seq} counts {count} "
                f"{self.WHAT}, {len(rows)} are stored"
            )
            raise CheckpointFormatError(msg)
        return {**header, self.KEY: rows}

    def counts(self, header: dict[str, Any]) -> bool:
        """Whether ``header`` counts any row (a database of an older schema holds none)."""
        count = header.get(self.KEY)
        return type(count) is int and count > 0


class LedgerRows(LogRows):
    """The rows of the cost ledger (``ledger``, format 4), in ``executionkit_ledger``."""

    KEY = "ledger"
    SINCE = 4
    WHAT = "ledger rows"
    STATEMENTS = _LEDGER

    def next_entries(self, checkpoint: WorkflowCheckpoint, held: int) -> Sequence[Any] | None:
        """The new ledger rows: `next_ledger_rows`."""
        return next_ledger_rows(checkpoint, None, held)

    def entries(self, checkpoint: WorkflowCheckpoint) -> Sequence[Any]:
        """The checkpoint's ``ledger``."""
        return checkpoint.ledger

    def values(self, entry: Any) -> list[Any]:
        """A `LedgerEntry`'s eight values."""
        values: list[Any] = entry.to_list()
        return values

    def read(self, values: list[Any]) -> object:
        """The `LedgerEntry` of a row's eight values."""
        from executionkit._checkpoint._ledger import read_ledger  # noqa: PLC0415 - the row's checks

        return read_ledger([values], 4)[0]
