"""`PostgresStore`'s fast save as one statement: one client-server round trip per checkpoint.

The writes of `executionkit.stores._sql_next` (the fenced update of the run
row, the header, the new output, item and ledger rows) as data-modifying CTEs
of a single statement. Every insert selects ``FROM run``, the fenced update's
``RETURNING``: if the fence changes no row, the statement inserts nothing and
returns no row, and the store runs the full save, which reads and raises what
is due. The new rows travel as arrays (``unnest``), so the SQL text is one of
two constants (with and without history), which psycopg prepares on the
connection once it has run it ``prepare_threshold`` times (5 by default;
``None``, for a pooler in transaction mode, leaves it unprepared). On an
autocommit connection the statement is its own transaction: parse, bind,
execute and commit in one round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    SELECT %(run_id)s, o.ord, o.name, %(seq)s, NULL, o.value
    FROM run, unnest(%(ords)s::bigint[], %(names)s::text[], %(values)s::text[])
        AS o (ord, name, value)
), items AS (
    INSERT INTO executionkit_items (run_id, ord, step, item, added, dropped, value)
    SELECT %(run_id)s, i.ord, i.step, i.item, %(seq)s, NULL, i.value
    FROM run, unnest(
        %(item_ords)s::bigint[], %(item_steps)s::text[], %(item_keys)s::text[],
        %(item_values)s::text[]
    ) AS i (ord, step, item, value)
), ledger AS (
    INSERT INTO executionkit_ledger (run_id, ord, added, dropped, step, item, attempt,
        outcome, model, input_tokens, output_tokens, llm_calls)
    SELECT %(run_id)s, l.ord, %(seq)s, NULL, l.step, l.item, l.attempt, l.outcome, l.model,
        l.input_tokens, l.output_tokens, l.llm_calls
    FROM run, unnest(
        %(ledger_ords)s::bigint[], %(ledger_steps)s::text[], %(ledger_items)s::text[],
        %(ledger_attempts)s::bigint[], %(ledger_outcomes)s::text[], %(ledger_models)s::text[],
        %(ledger_input)s::bigint[], %(ledger_output)s::bigint[], %(ledger_calls)s::bigint[]
    ) AS l (ord, step, item, attempt, outcome, model, input_tokens, output_tokens, llm_calls)
)
SELECT written FROM run"""
_WITH_HISTORY = _RUN + _ADD_HEADER + _ROWS
_WITHOUT_HISTORY = _RUN + _MOVE_HEADER + _ROWS
_LEDGER_COLUMNS = (
    "ledger_steps",
    "ledger_items",
    "ledger_attempts",
    "ledger_outcomes",
    "ledger_models",
    "ledger_input",
    "ledger_output",
    "ledger_calls",
)


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
        "ords": [row[0] for row in plan.outputs],
        "names": [row[1] for row in plan.outputs],
        "values": [row[2] for row in plan.outputs],
        "item_ords": [row[0] for row in plan.items],
        "item_steps": [row[1] for row in plan.items],
        "item_keys": [row[2] for row in plan.items],
        "item_values": [row[3] for row in plan.items],
        "ledger_ords": [row[0] for row in plan.ledger],
    }
    for position, column in enumerate(_LEDGER_COLUMNS, start=1):
        params[column] = [row[position] for row in plan.ledger]
    return (_WITH_HISTORY if keeps_history else _WITHOUT_HISTORY), params


def fits(plan: NextSave) -> bool:
    """Whether one statement writes ``plan``: no map finished (its rows are not updated)."""
    return not plan.finished
