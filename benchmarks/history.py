"""Going back through a long run: listing its checkpoints and loading one, per store.

A chain of ``--steps`` (1,000) steps, each returning a distinct text of
``--output-size`` (100) characters, is run with a checkpoint after every step
into each store: `JsonLinesStore`, `SQLiteStore(history=True)` and, with
``--postgres``, `PostgresStore(history=True)` (``auto`` starts a throwaway
server from the ``pgserver`` wheel of the dev extra, see `pg_server`; or give
the DSN of a server you run: the case gets an empty database of its own). Then,
in the same process, each of these is timed ``--repeat`` (5) times, median in
milliseconds:

- ``checkpoints()``: the list of the 1,000 checkpoints (`CheckpointInfo`);
- ``load(seq=N)``: the checkpoint ``--seq`` (500), rebuilt;
- ``load()``: the latest, for scale;
- ``history()``, the SQL stores' older way to reach any of them: every kept
  checkpoint rebuilt, O(checkpoints x outputs), timed ``--old-repeat`` (3) times.

The table gives each, and how many times faster listing and loading one are
than ``history()`` (JSON Lines has no ``history()``: its checkpoints could not
be reached before). A store object is made anew for every call, as a process
that reads a store would, so no cache of the writer helps::

    python benchmarks/history.py [--steps 1000] [--seq 500] [--output-size 100]
        [--repeat 5] [--old-repeat 3] [--postgres auto|DSN]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

import pg_server  # noqa: E402
from store_outputs import text  # noqa: E402

from executionkit import Step, Workflow  # noqa: E402
from executionkit import stores as bundled  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

RUN_ID = "history-bench"


def chain(steps: int, size: int) -> Workflow:
    """``steps`` steps, each depending on the one before and returning its text."""

    def make(number: int) -> Step:
        def run(_ctx: object) -> str:
            return text(number, size)

        return Step(f"s{number}", run, depends_on=(f"s{number - 1}",) if number else ())

    return Workflow([make(number) for number in range(steps)])


def median_ms(call: Callable[[], object], repeat: int) -> float:
    """The median of ``repeat`` timed calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def measure(label: str, make: Callable[[], Any], args: argparse.Namespace) -> dict[str, Any]:
    """Store the chain through ``make()``, then time listing, loading and the old way."""
    writer = make()
    result = chain(args.steps, args.output_size).run_sync(checkpoint_fn=writer, run_id=RUN_ID)
    assert len(result.outputs) == args.steps  # noqa: S101 - else the figures would mean nothing
    lines = label == "JsonLinesStore"

    def listing() -> object:
        store = make()
        found = store.checkpoints() if lines else store.checkpoints(RUN_ID)
        assert len(found) == args.steps  # noqa: S101
        return found

    def one() -> object:
        store = make()
        found = store.load(seq=args.seq) if lines else store.load(RUN_ID, seq=args.seq)
        assert found.seq == args.seq  # noqa: S101
        return found

    def latest() -> object:
        return make().load() if lines else make().load(RUN_ID)

    def old() -> object:
        found = make().history(RUN_ID)
        assert len(found) == args.steps  # noqa: S101
        return found[args.seq - 1]

    row: dict[str, Any] = {
        "store": label,
        "checkpoints": median_ms(listing, args.repeat),
        "load_seq": median_ms(one, args.repeat),
        "load": median_ms(latest, args.repeat),
        "history": None if lines else median_ms(old, args.old_repeat),
    }
    close = getattr(writer, "close", None)
    if close is not None:
        close()
    return row


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The Markdown table of the rows."""

    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:,.1f} ms"

    def ratio(old: float | None, new: float) -> str:
        return "n/a" if old is None else f"{old / new:,.0f}\N{MULTIPLICATION SIGN}"

    head = [
        "Store",
        "`checkpoints()`",
        f"`load(seq={args.seq})`",
        "`load()` (latest)",
        "`history()` (old way)",
        "listing speed-up",
        "load-one speed-up",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines.extend(
        f"| {row['store']} | {ms(row['checkpoints'])} | {ms(row['load_seq'])} | "
        f"{ms(row['load'])} | {ms(row['history'])} | "
        f"{ratio(row['history'], row['checkpoints'])} | {ratio(row['history'], row['load_seq'])} |"
        for row in rows
    )
    return "\n".join(lines)


def postgres_row(stack: contextlib.ExitStack, args: argparse.Namespace) -> dict[str, Any]:
    """The row of `PostgresStore`, in an empty database (on a throwaway server for ``auto``)."""
    dsn = args.postgres
    if dsn == "auto":
        dsn = stack.enter_context(pg_server.throwaway_server())
    database = stack.enter_context(pg_server.fresh_database(dsn))
    opened: list[Any] = []

    def make() -> Any:
        store = bundled.PostgresStore(database, history=True)
        opened.append(store)
        return store

    try:
        return measure("PostgresStore(history=True)", make, args)
    finally:
        for store in opened:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps, one checkpoint each")
    parser.add_argument("--seq", type=int, default=500, help="the checkpoint to load")
    parser.add_argument("--output-size", type=int, default=100, help="characters per output")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls of the new ways")
    parser.add_argument("--old-repeat", type=int, default=3, help="timed calls of history()")
    parser.add_argument("--postgres", help="'auto' (a throwaway pgserver) or a DSN")
    args = parser.parse_args()
    if not 1 <= args.seq <= args.steps:
        parser.error("--seq must be between 1 and --steps")
    rows = []
    with contextlib.ExitStack() as stack:
        where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ek-history-")))
        lines_path, sqlite_path = where / "run.jsonl", where / "runs.db"
        rows.append(measure("JsonLinesStore", lambda: bundled.JsonLinesStore(lines_path), args))
        rows.append(
            measure(
                "SQLiteStore(history=True)",
                lambda: bundled.SQLiteStore(sqlite_path, history=True),
                args,
            )
        )
        if args.postgres:
            rows.append(postgres_row(stack, args))
    print(
        f"A {args.steps}-step chain, {args.output_size}-character outputs, one checkpoint per "
        f"step; medians of {args.repeat} calls ({args.old_repeat} of history()), each through "
        f"a new store object.\n"
    )
    print(table(rows, args))


if __name__ == "__main__":
    main()
