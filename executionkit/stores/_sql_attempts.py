"""Format 5's ``attempts`` in the SQL stores: one row per entry, written once (schema 5 on).

As the ledger (`executionkit.stores._sql_ledger`): a checkpoint's header holds
the number of entries it counts (``"attempts": n``) instead of the entries;
each entry is a row of ``executionkit_attempts`` with the ``seq`` that wrote it
(``added``) and, once a later checkpoint of the run no longer holds it, the
``seq`` from which it no longer counts (``dropped``). The attempts of the
checkpoint at ``seq`` k are the rows with ``added <= k`` and no
``dropped <= k``, in ``ord`` order. The run's next checkpoint appends its
``new_attempts``, so a save writes each entry once, however long the run.

A database of schema 2 to 4 has no such table: a format 5 checkpoint saved
into one before it was upgraded holds its attempts whole in its header, and is
read back as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._times import read_attempts
from executionkit.stores._common import next_attempts
from executionkit.stores._sql_ledger import LogRows, log_statements, log_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from executionkit._checkpoint._value import WorkflowCheckpoint

_VALUES = "step, item, attempt, outcome, started, ended"
_ATTEMPTS = log_statements("executionkit_attempts", _VALUES)
ADD_ATTEMPT = _ATTEMPTS["add"]
FORGET_DROPPED_ATTEMPTS = _ATTEMPTS["forget"]


def attempt_tables(bigint: str) -> tuple[str, ...]:
    """The CREATE statements of the attempts table (schema 5), with the dialect's integer type."""
    columns = f"""step TEXT NOT NULL,
            item TEXT,
            attempt {bigint} NOT NULL,
            outcome TEXT NOT NULL,
            started {bigint} NOT NULL,
            ended {bigint} NOT NULL"""
    return (log_table("executionkit_attempts", bigint, columns),)


class AttemptRows(LogRows):
    """The rows of ``attempts`` (format 5), in ``executionkit_attempts``."""

    KEY = "attempts"
    SINCE = 5
    WHAT = "attempts"
    STATEMENTS = _ATTEMPTS

    def next_entries(self, checkpoint: WorkflowCheckpoint, held: int) -> Sequence[Any] | None:
        """The new entries: `next_attempts`."""
        return next_attempts(checkpoint, None, held)

    def entries(self, checkpoint: WorkflowCheckpoint) -> Sequence[Any]:
        """The checkpoint's ``attempts``."""
        return checkpoint.attempts

    def values(self, entry: Any) -> list[Any]:
        """An entry's six values: step, item, attempt, outcome, started, ended."""
        return list(entry)

    def read(self, values: list[Any]) -> object:
        """The entry of a row's six values, checked as ``attempts`` entries are."""
        return read_attempts([values], 5)[0]
