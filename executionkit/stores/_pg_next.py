"""`PostgresStore`'s fast save as one statement: one client-server round trip per checkpoint.

The writes of `executionkit.stores._sql_next` (the fenced update of the run
row, the header, the new output, item, ledger and attempts rows) as data-modifying CTEs
of a single statement. Every insert selects ``FROM run``, the fenced update's
``RETURNING``: if the fence changes no row, the statement inserts nothing and
returns no row, and the store runs the full save, which reads and raises what
is due. The new rows travel as four JSON texts, one list of rows each,
unpacked by ``json_array_elements`` (psycopg adapts a Python list per column
in Python, which cost more than the rest of the save's client side), so the
SQL text is one of two constants (with and without history) and its
parameters are always of the same types: psycopg prepares it on the
connection once it has run it ``prepare_threshold`` times (5 by default;
``None``, for a pooler in transaction mode, leaves it unprepared). On an
autocommit connection the statement is its own transaction: parse, bind,
execute and commit in one round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executionkit.stores._common import dumps

if TYPE_CHECKING:
    from executionkit.stores._sql_next import NextSave

_RUN = """WITH run AS (
    UPDATE executionkit_runs
    SET seq = %(seq)s, written = nextval('executionkit_written'), next_ord = %(next_ord)s
    WHERE run_id = %(run_id)s AND seq = %(stored)s AND written = %(written)s
    AND NOT EXISTS (SELECT 1 FROM executionkit_schema WHERE version <> %(version)s)
    AND (SELECT header FROM executionkit_headers WHERE run_id = %(run_id)s AND seq = %(stored)s)
        = %(stored_header)s
    RETURNING written
), """
_MOVE_HEADER = """header AS (
    UPDATE executionkit_headers
    SET seq = %(seq)s, created_at = %(created_at)s, header = %(header)s
    WHERE run_id = %(run_id)s AND seq = %(stored)s AND EXISTS (SELECT 1 FROM run)
), """
_ADD_HEADER = """header AS (
    INSERT INTO executionkit_headers (run_id, seq, created_at, header)
    SELECT %(run_id)s, %(seq)s, %(created_at)s, %(header)s FROM run
), """
_ROWS = """outputs AS (
    INSERT INTO executionkit_outputs (run_id, ord, name, added, dropped, value)
    SELECT %(run_id)s, (o->>0)::bigint, o->>1, %(seq)s, NULL, o->>2
    FROM run, json_array_elements(%(outputs)s::json) AS o
), items AS (
    INSERT INTO executionkit_items (run_id, ord, step, item, added, dropped, value)
    SELECT %(run_id)s, (i->>0)::bigint, i->>1, i->>2, %(seq)s, NULL, i->>3
    FROM run, json_array_elements(%(items)s::json) AS i
), ledger AS (
    INSERT INTO executionkit_ledger (run_id, ord, added, dropped, step, item, attempt,
        outcome, model, input_tokens, output_tokens, llm_calls)
    SELECT %(run_id)s, (l->>0)::bigint, %(seq)s, NULL, l->>1, l->>2, (l->>3)::bigint, l->>4,
        l->>5, (l->>6)::bigint, (l->>7)::bigint, (l->>8)::bigint
    FROM run, json_array_elements(%(ledger)s::json) AS l
), attempts AS (
    INSERT INTO executionkit_attempts (run_id, ord, added, dropped, step, item, attempt,
        outcome, started, ended)
    SELECT %(run_id)s, (a->>0)::bigint, %(seq)s, NULL, a->>1, a->>2, (a->>3)::bigint, a->>4,
        (a->>5)::bigint, (a->>6)::bigint
    FROM run, json_array_elements(%(attempts)s::json) AS a
)
SELECT written FROM run"""
_WITH_HISTORY = _RUN + _ADD_HEADER + _ROWS
_WITHOUT_HISTORY = _RUN + _MOVE_HEADER + _ROWS


def one_statement(
    plan: NextSave, *, keeps_history: bool, version: int
) -> tuple[str, dict[str, object]]:
    """The SQL and parameters that write ``plan``; it must finish no map (see `fits`)."""
    known = plan.known
    checkpoint = plan.checkpoint
    params: dict[str, object] = {
        "run_id": known.run_id,
        "seq": checkpoint.seq,
        "next_ord": plan.next_ord,
        "stored": known.seq,
        "written": known.written,
        "version": version,
        "stored_header": known.header,
        "created_at": checkpoint.created_at,
        "header": plan.header,
        "outputs": dumps(plan.outputs),
        "items": dumps(plan.items),
        "ledger": dumps(plan.ledger),
        "attempts": dumps(plan.attempts),
    }
    return (_WITH_HISTORY if keeps_history else _WITHOUT_HISTORY), params


def fits(plan: NextSave) -> bool:
    """Whether one statement writes ``plan``: no map finished (its rows are not updated)."""
    return not plan.finished
