"""A process of the shared-limit tests: a map of ITEMS items drawing on one limit key.

Usage: ``python tests/limits_worker.py STORE KEY ITEMS MARKS LIMITSPEC``. Not a
test module (pytest only collects ``test_*.py``); tests/run/test_limits_shared.py
starts several at once on one database.

- STORE is ``sqlite:PATH`` (a `SQLiteStore`) or a ``postgresql://`` URI (a
  `PostgresStore`): the run's ``checkpoint_fn``, through which its limits are
  shared with every other process on that database.
- LIMITSPEC is the limit's numbers, ``name=value`` pairs joined by commas, such
  as ``concurrency=3`` or ``tokens=600,per=0.5``: the run gets ``Limit(KEY, ...)``.
  With ``tokens`` given, the map declares ``tokens_estimate=TOKENS``.
- The start gate: once started, the worker prints ``ready <pid>`` and waits for a
  line on stdin; only then does it run (so the test starts every worker together).
- Each item appends ``+ <time.time()> <pid> <item>`` to MARKS, sleeps 0.02 s (the
  work: attempts of several processes overlap), reports TOKENS tokens, then
  appends ``- <time.time()> <pid> <item>``. MARKS is opened with ``O_APPEND`` and
  each line is one ``os.write``, so lines of all processes stay whole and in order.
- It exits 0 once the run finished (and prints ``done``); the run id is
  ``KEY-<pid>``, its own.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from executionkit import Limit, Step, TokenUsage, Workflow, current_step
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit.stores import PostgresStore

TOKENS = 100
"""Tokens every item reports (input tokens, one LLM call)."""
WORK = 0.02
"""Seconds each item runs."""


def parse_limit(key: str, spec: str) -> Limit:
    """``Limit(key, ...)`` from ``name=value,...``: counts as ints, ``per`` as a float."""
    fields: dict[str, Any] = {}
    for part in spec.split(","):
        name, _, value = part.partition("=")
        fields[name.strip()] = float(value) if name.strip() == "per" else int(value)
    return Limit(key, **fields)


def open_store(where: str) -> SQLiteStore | PostgresStore:
    """The store ``where`` names: ``sqlite:PATH`` or a PostgreSQL URI."""
    if where.startswith("sqlite:"):
        return SQLiteStore(where.removeprefix("sqlite:"))
    from executionkit.stores import PostgresStore  # noqa: PLC0415 - psycopg only when needed

    return PostgresStore(where)


def build_workflow(key: str, items: int, marks: str, limit: Limit) -> Workflow:
    """A split into ``items`` numbers, then a map over them, each item drawing on ``key``."""
    fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def mark(sign: str, item: int) -> None:
        os.write(fd, f"{sign} {time.time()!r} {pid} {item}\n".encode())  # one write: whole

    async def each(item: int, ctx: Mapping[str, Any]) -> int:
        del ctx
        mark("+", item)
        await asyncio.sleep(WORK)  # the work: attempts overlap while it runs
        current_step().add_usage(TokenUsage(TOKENS, 0, 1), model="m")
        mark("-", item)
        return item

    estimate = TOKENS if limit.tokens is not None else None
    return Workflow(
        [
            Step("split", lambda ctx: list(range(items))),
            Step.map("each", each, over="split", limit=key, tokens_estimate=estimate),
        ]
    )


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print("usage: limits_worker.py STORE KEY ITEMS MARKS LIMITSPEC", file=sys.stderr)
        return 2
    where, key, items, marks, spec = argv
    limit = parse_limit(key, spec)
    workflow = build_workflow(key, int(items), marks, limit)
    store = open_store(where)
    try:
        print(f"ready {os.getpid()}", flush=True)
        if not sys.stdin.readline():  # the start gate: the test writes a line to every worker
            return 3
        workflow.run_sync(checkpoint_fn=store, run_id=f"{key}-{os.getpid()}", limits=[limit])
    finally:
        store.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
