"""Each store's save against the floor of its medium, measured in one process (issue 23).

For every store, each round measures, on the same disk or server and in this
process:

- the **floor**: the least a durable write of ~200 bytes costs there.
  SQLite: one ``INSERT OR REPLACE`` of a ~200-byte row, committed, in WAL mode
  with the store's ``synchronous`` setting. PostgreSQL: one
  ``INSERT ... ON CONFLICT DO UPDATE`` of a ~200-byte row in autocommit over
  the Unix socket (one round trip, one commit). JSON Lines: ``os.write`` of a
  200-byte line and ``os.fsync`` on a file kept open.
- the **store**: ``store(checkpoint)`` alone, timed inside the ``checkpoint_fn``
  of a chain of ``--steps`` no-op steps run with ``checkpoint_every="step"``.

The two alternate within one chain: before each save, one floor operation is
timed on its own (its table, file or connection opened before the chain), so
the two samples of a step are taken a moment apart, under the same load. Each
round gives the median of each over the ``--steps`` saves and their ratio; the
rounds interleave the stores, so a noisy machine shows as a wide range of
ratios, not a wrong one. A further
untimed chain per store counts what one save does: SQL statements (SQLite's
trace callback), client-server round trips (libpq's trace: one
``ReadyForQuery`` per round trip), and bytes written per save (``wchar`` of
``/proc/self/io`` for SQLite and JSON Lines; for PostgreSQL the growth of the
server's write-ahead log) against the new data (the save's header and new
output rows as the SQL stores encode them; the line for JSON Lines).

    python benchmarks/store_floor.py [--stores sqlite-normal,sqlite-full,postgres,json-lines]
        [--steps 1000] [--rounds 5] [--dir FOLDER] [--postgres auto|DSN|none]
        [--profile STORE]

``--postgres auto`` starts a throwaway server (`pg_server`); ``none`` leaves
PostgreSQL out. Set ``EXECUTIONKIT_BENCH_SOURCE`` to measure another tree (see
`source`), for a before/after comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import source

WHERE = source.put_on_path()

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402
from executionkit.stores import JsonLinesStore, SQLiteStore  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator

Floor = Callable[[Path], contextlib.AbstractContextManager[Callable[[], None]]]
STORES = ("sqlite-normal", "sqlite-full", "postgres", "json-lines")
ROW = "x" * 200
_PG_FLOOR_TABLE = "CREATE TABLE IF NOT EXISTS floor (k INTEGER PRIMARY KEY, v TEXT NOT NULL)"
_PG_FLOOR = "INSERT INTO floor (k, v) VALUES (1, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"


async def _noop(ctx: Any) -> int:
    del ctx
    return 1


def _chain(steps: int) -> Workflow:
    return Workflow(
        Step(f"s{i}", _noop, depends_on=(f"s{i - 1}",) if i else ()) for i in range(steps)
    )


def written_bytes() -> int:
    """Bytes this process has passed to ``write`` so far (``wchar``), or 0 if unknown."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def new_data(store: object, checkpoint: WorkflowCheckpoint) -> int:
    """The bytes a save must keep: header and new output rows, as the SQL stores encode them."""
    sql = getattr(store, "_sql", None)
    if sql is None:
        return 0
    codec = getattr(sql, "codec", sql)  # before issue 23, the methods of _sql itself
    size = len(codec.header(checkpoint).encode())
    value = getattr(codec, "value", None) or codec._value  # noqa: SLF001
    for name in checkpoint.new_outputs:
        size += len(name.encode()) + len(value(checkpoint, name).encode())
    return size


@dataclass
class Counts:
    """What the untimed chain of one store counted, per save."""

    statements: float = 0.0
    round_trips: float = 0.0
    written: float = 0.0
    new: float = 0.0
    floor_written: float = 0.0


@dataclass
class Case:
    """One store: how to make it, its floor, and what was measured."""

    name: str
    make: Callable[[Path], Any]
    floor: Floor
    floors: list[float] = field(default_factory=list)
    saves: list[float] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)


def run_chain(
    store: Any,
    steps: int,
    hook: Callable[[WorkflowCheckpoint], None] | None = None,
    *,
    before: Callable[[WorkflowCheckpoint], None] | None = None,
) -> tuple[list[float], str]:
    """Seconds of each ``store(checkpoint)`` over a chain of ``steps`` steps, and its run_id."""
    times: list[float] = []
    run_ids: set[str] = set()

    def save(checkpoint: WorkflowCheckpoint) -> None:
        if before is not None:
            before(checkpoint)
        start = time.perf_counter()
        store(checkpoint)
        times.append(time.perf_counter() - start)
        run_ids.add(str(checkpoint.run_id))
        if hook is not None:
            hook(checkpoint)

    asyncio.run(_chain(steps).run(checkpoint_fn=save, checkpoint_every="step"))
    return times, run_ids.pop()


def warm(store: Any) -> None:
    """Create the tables and open the connection with a run of one step, then delete it."""
    _, run_id = run_chain(store, 1)
    store.delete(run_id)


# --- SQLite ---------------------------------------------------------------------------


def sqlite_floor(synchronous: str) -> Floor:
    """The floor of SQLite with ``synchronous``: one ~200-byte row committed, WAL mode."""

    @contextlib.contextmanager
    def floor(folder: Path) -> Iterator[Callable[[], None]]:
        import sqlite3  # noqa: PLC0415

        path = folder / "floor.db"
        connection = sqlite3.connect(path, isolation_level=None)
        row = (1, ROW)
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {synchronous}")
            connection.execute("CREATE TABLE floor (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            yield lambda: connection.execute(
                "INSERT OR REPLACE INTO floor (k, v) VALUES (?, ?)", row
            ).close()
        finally:
            connection.close()
            _remove_database(path)

    return floor


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()


def sqlite_store(synchronous: str) -> Callable[[Path], Any]:
    """Make an `SQLiteStore` with ``synchronous`` in a folder, or at a path."""

    def make(folder: Path) -> Any:
        return SQLiteStore(
            folder / "store.db" if folder.is_dir() else folder, synchronous=synchronous
        )

    return make


def sqlite_counts(case: Case, folder: Path, steps: int) -> None:
    """Statements and bytes written per save of an untimed chain."""
    path = folder / "count.db"
    store = case.make(path)
    statements = 0
    new = 0

    def trace(statement: str) -> None:
        del statement
        nonlocal statements
        statements += 1

    def hook(checkpoint: WorkflowCheckpoint) -> None:
        nonlocal new
        new += new_data(store, checkpoint)

    written = 0

    def counted(checkpoint: WorkflowCheckpoint) -> None:
        nonlocal written
        for connection in store._connections:  # noqa: SLF001 - counting statements
            connection.set_trace_callback(trace)
        before = written_bytes()
        store(checkpoint)
        written += written_bytes() - before

    warm(store)  # the tables created, the connection open: not counted
    statements = 0
    run_chain(counted, steps, hook)
    _close(store)
    _remove_database(path)
    case.counts.statements = statements / steps
    case.counts.written = written / steps
    case.counts.new = new / steps
    case.counts.floor_written = _floor_bytes(case, folder, steps)


def _floor_bytes(case: Case, folder: Path, steps: int) -> float:
    with case.floor(folder) as op:
        before = written_bytes()
        for _ in range(steps):
            op()
        return (written_bytes() - before) / steps


def _close(store: object) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        close()


# --- JSON Lines -----------------------------------------------------------------------


@contextlib.contextmanager
def jsonl_floor(folder: Path) -> Iterator[Callable[[], None]]:
    """One 200-byte ``os.write`` + ``os.fsync`` on a file kept open."""
    line = (b"x" * 199) + b"\n"
    path = folder / "floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)

    def op() -> None:
        os.write(fd, line)
        os.fsync(fd)

    try:
        yield op
    finally:
        os.close(fd)
        path.unlink()


def jsonl_counts(case: Case, folder: Path, steps: int) -> None:
    """Bytes written per save of an untimed chain (the line is the new data)."""
    path = folder / "count.jsonl"
    store = case.make(path)
    written = 0

    def counted(checkpoint: WorkflowCheckpoint) -> None:
        nonlocal written
        before = written_bytes()
        store(checkpoint)
        written += written_bytes() - before

    run_chain(counted, steps)
    _close(store)
    size = path.stat().st_size
    path.unlink()
    case.counts.written = written / steps
    case.counts.new = size / steps
    case.counts.floor_written = _floor_bytes(case, folder, steps)


# --- PostgreSQL -----------------------------------------------------------------------


@contextlib.contextmanager
def postgres(option: str) -> Iterator[str | None]:
    """The DSN of the server to use: started by `pg_server` for ``auto``, None for ``none``."""
    if option == "none":
        yield None
        return
    if option != "auto":
        yield option
        return
    import pg_server  # noqa: PLC0415

    with pg_server.throwaway_server() as dsn:
        yield dsn


def pg_floor(dsn: str) -> Floor:
    """The floor of PostgreSQL: one ~200-byte row upserted in autocommit (one round trip)."""

    @contextlib.contextmanager
    def floor(folder: Path) -> Iterator[Callable[[], None]]:
        del folder
        import psycopg  # noqa: PLC0415

        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(_PG_FLOOR_TABLE)
            row = (ROW,)
            try:
                yield lambda: connection.execute(_PG_FLOOR, row, prepare=True).close()
            finally:
                connection.execute("DROP TABLE floor")

    return floor


def _pg_wal(dsn: str) -> Callable[[], int]:
    import psycopg  # noqa: PLC0415

    def lsn() -> int:
        with psycopg.connect(dsn, autocommit=True) as connection:
            row = connection.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"
            ).fetchone()
        return int(row[0]) if row else 0

    return lsn


def pg_counts(case: Case, folder: Path, steps: int, dsn: str) -> None:
    """Round trips (libpq trace) and server WAL bytes per save of an untimed chain."""
    store = case.make(folder)
    warm(store)  # connects and creates the tables: not counted
    lsn = _pg_wal(dsn)
    trace_path = folder / "libpq.trace"
    new = 0

    def hook(checkpoint: WorkflowCheckpoint) -> None:
        nonlocal new
        new += new_data(store, checkpoint)

    with trace_path.open("w") as trace:
        store._own.pgconn.trace(trace.fileno())  # noqa: SLF001 - counting round trips
        before = lsn()
        _, run_id = run_chain(store, steps, hook)
        after = lsn()
        store._own.pgconn.untrace()  # noqa: SLF001
    text = trace_path.read_text()
    trace_path.unlink()
    store.delete(run_id)
    _close(store)
    case.counts.round_trips = text.count("ReadyForQuery") / steps
    case.counts.written = (after - before) / steps
    case.counts.new = new / steps
    with case.floor(folder) as op:
        before = lsn()
        for _ in range(steps):
            op()
        case.counts.floor_written = (lsn() - before) / steps


# --- the rounds -----------------------------------------------------------------------


def cases(names: list[str], dsn: str | None) -> list[Case]:
    """The cases asked for (PostgreSQL only with a server)."""
    found = []
    for name in names:
        if name.startswith("sqlite-"):
            synchronous = name.removeprefix("sqlite-").upper()
            found.append(Case(name, sqlite_store(synchronous), sqlite_floor(synchronous)))
        elif name == "json-lines":
            found.append(
                Case(
                    name,
                    lambda folder: JsonLinesStore(
                        folder / "run.jsonl" if folder.is_dir() else folder
                    ),
                    jsonl_floor,
                )
            )
        elif name == "postgres" and dsn is not None:
            from executionkit.stores import PostgresStore  # noqa: PLC0415

            found.append(Case(name, lambda _: PostgresStore(dsn), pg_floor(dsn)))
    return found


def measure(case: Case, folder: Path, steps: int) -> tuple[float, float]:
    """The median floor operation and save of one chain into a new store of ``case``.

    Each save is preceded by one floor operation, timed apart: the two samples
    of each step are taken a moment apart, under the same load.
    """
    store = case.make(folder)
    floors: list[float] = []
    with case.floor(folder) as op:

        def floor(_: WorkflowCheckpoint) -> None:
            start = time.perf_counter()
            op()
            floors.append(time.perf_counter() - start)

        times, run_id = run_chain(store, steps, before=floor)
    if case.name == "postgres":
        store.delete(run_id)
    _close(store)
    for leftover in folder.iterdir():
        if leftover.is_file():
            leftover.unlink()
    return statistics.median(floors), statistics.median(times)


def count(case: Case, folder: Path, steps: int, dsn: str | None) -> None:
    """Fill ``case.counts`` from one untimed chain."""
    if case.name.startswith("sqlite-"):
        sqlite_counts(case, folder, steps)
    elif case.name == "json-lines":
        jsonl_counts(case, folder, steps)
    elif dsn is not None:
        pg_counts(case, folder, steps, dsn)


def table(found: list[Case]) -> str:
    """The Markdown table of the results."""
    lines = [
        (
            "| store | floor, µs | store, µs | store ÷ floor | statements / round trips "
            "per save | bytes written per save | new data per save | floor's bytes per write |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in found:
        ratios = [s / f for s, f in zip(case.saves, case.floors, strict=True)]
        counted = case.counts
        per_save = "n/a"
        if case.name.startswith("sqlite-"):
            per_save = f"{counted.statements:.1f} statements"
        elif case.name == "postgres":
            per_save = f"{counted.round_trips:.1f} round trips"
        wal = " (server WAL)" if case.name == "postgres" else ""
        lines.append(
            f"| {case.name} | {statistics.median(case.floors) * 1e6:.1f} "
            f"| {statistics.median(case.saves) * 1e6:.1f} "
            f"| {statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}] "
            f"| {per_save} | {counted.written:,.0f}{wal} | {counted.new:,.0f} "
            f"| {counted.floor_written:,.0f} |"
        )
    return "\n".join(lines)


def profile(case: Case, folder: Path, steps: int) -> None:
    """Profile the saves of one chain into ``case``'s store."""
    store = case.make(folder)
    profiler = cProfile.Profile()

    def save(checkpoint: WorkflowCheckpoint) -> None:
        profiler.enable()
        store(checkpoint)
        profiler.disable()

    asyncio.run(_chain(steps).run(checkpoint_fn=save, checkpoint_every="step"))
    _close(store)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    """Run the interleaved rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="folder for the files (default: a temp dir)")
    parser.add_argument("--postgres", default="auto", help="auto, a DSN, or none")
    parser.add_argument("--profile", default=None, help="profile one store's saves instead")
    args = parser.parse_args()
    names = [name for name in args.stores.split(",") if name]
    unknown = [name for name in names if name not in STORES]
    if unknown:
        parser.error(f"unknown stores: {', '.join(unknown)}")
    if args.profile is not None:
        names = [args.profile]
    wants_pg = "postgres" in names
    with (
        postgres(args.postgres if wants_pg else "none") as dsn,
        tempfile.TemporaryDirectory(dir=args.dir) as name,
    ):
        folder = Path(name)
        found = cases(names, dsn)
        if args.profile is not None:
            profile(found[0], folder, args.steps)
            return
        print(f"executionkit from {WHERE} ({source.fingerprint(WHERE)}), {args.steps} steps")
        for round_ in range(1, args.rounds + 1):
            for case in found:
                low, saved = measure(case, folder, args.steps)
                case.floors.append(low)
                case.saves.append(saved)
                print(
                    f"round {round_} {case.name}: floor {case.floors[-1] * 1e6:.1f} µs, "
                    f"store {case.saves[-1] * 1e6:.1f} µs",
                    flush=True,
                )
        for case in found:
            count(case, folder, args.steps, dsn)
        print()
        print(table(found))


if __name__ == "__main__":
    main()
