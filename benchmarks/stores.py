"""What each bundled checkpoint store costs per checkpoint on a chain, and the bytes it writes.

A chain of steps, each returning a distinct text of ``--output-sizes`` bytes
(20 and 1,000 by default), is run with a checkpoint after every step into each
store in `STORES`, at ``--sizes`` steps (100, 1,000 and 10,000). Only the time
inside the store's save is counted: the clock runs around each
``store(checkpoint)`` call, so the runner's own cost is left out, and the table
shows the mean over every checkpoint of the chain, in microseconds. Every
(store, size, output size) runs in a fresh process, ``--repeat`` times (median).

Bytes written are what the process passed to ``write`` and ``pwrite`` while
saving (``wchar`` of ``/proc/self/io``, Linux only; the file's size elsewhere),
for a ``--bytes-steps`` (1,000) step chain with 1 KB outputs, next to the
outputs' own JSON bytes. For PostgreSQL, where the server writes, they are the
growth of the server's write-ahead log over the run (`pg_server.wal_position`).

The peers are LangGraph's ``SqliteSaver`` (``langgraph-checkpoint-sqlite``)
and, with ``--postgres``, its ``PostgresSaver`` (``langgraph-checkpoint-postgres``)
on the same chain as a ``StateGraph`` whose nodes each add their output to a dict
in the state, each run in the virtual environment `venvs` makes for it; their
time is that of the saver's ``put`` and ``put_writes`` calls. A third table
gives how many times faster each store is than the peer on the same database
(`StoreSpec.peer`). A size whose predicted
time (from the growth between the two sizes before it) exceeds ``--budget``
seconds is skipped, and a case still running after ``--timeout`` seconds is
killed; the table says which.

Adding a store is one entry in `STORES`. ``PostgresStore`` and
``PostgresSaver`` are measured only with ``--postgres``: either ``auto``, which
starts a throwaway server from the ``pgserver`` wheel of the dev extra
(`pg_server`), or the DSN of a server you run. Either way every case of those
two gets an empty database of its own, dropped after it::

    python benchmarks/stores.py [--sizes 100,1000,10000] [--output-sizes 20,1000]
        [--repeat 3] [--peers all|none|KEY] [--postgres auto|DSN] [--budget 60]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import source

source.put_on_path()

import pg_server  # noqa: E402
import venvs  # noqa: E402
from store_outputs import text, written_bytes  # noqa: E402

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402
from executionkit import stores as bundled  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parent
TIMES = "\N{MULTIPLICATION SIGN}"


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """A store to measure: how to make one over fresh storage, and what it is."""

    key: str
    label: str
    make: Callable[[Path, argparse.Namespace], Callable[[WorkflowCheckpoint], object]]
    incremental: bool  # writes only each checkpoint's new outputs
    local_bytes: bool = True  # its writes are this process's (not a server's)
    peer: str | None = None  # the key of the STORE_PEERS entry on the same database
    tables: bool = False  # keeps tables, created by a save of another run before the clock
    default: bool = True  # measured without --stores (variants are asked for)


def _postgres(folder: Path, args: argparse.Namespace) -> Callable[[WorkflowCheckpoint], object]:
    del folder  # each measurement uses a run_id of its own instead of fresh storage
    store: Callable[[WorkflowCheckpoint], object] = bundled.PostgresStore(args.postgres)
    return store


STORES: dict[str, StoreSpec] = {
    spec.key: spec
    for spec in (
        StoreSpec(
            "json-file",
            "JsonFileStore",
            lambda folder, _args: bundled.JsonFileStore(folder / "run.json"),
            incremental=False,
        ),
        StoreSpec(
            "json-lines",
            "JsonLinesStore",
            lambda folder, _args: bundled.JsonLinesStore(folder / "run.jsonl"),
            incremental=True,
        ),
        StoreSpec(
            "sqlite",
            "SQLiteStore",
            lambda folder, _args: bundled.SQLiteStore(folder / "runs.db"),
            incremental=True,
            peer="langgraph-sqlite",
            tables=True,
        ),
        StoreSpec(
            "sqlite-normal",
            'SQLiteStore, synchronous="NORMAL"',
            lambda folder, _args: bundled.SQLiteStore(folder / "runs.db", synchronous="NORMAL"),
            incremental=True,
            peer="langgraph-sqlite",
            tables=True,
            default=False,
        ),
        StoreSpec(
            "postgres",
            "PostgresStore",
            _postgres,
            incremental=True,
            local_bytes=False,
            peer="langgraph-postgres",
            tables=True,
        ),
    )
}


def available(args: argparse.Namespace) -> list[StoreSpec]:
    """The stores to measure: those ``--stores`` names, PostgreSQL only with ``--postgres``."""
    if args.stores is None:
        wanted = {key for key, spec in STORES.items() if spec.default}
    elif args.stores == "all":
        wanted = set(STORES)
    else:
        wanted = set(args.stores.split(","))
        unknown = wanted - set(STORES)
        if unknown:
            msg = f"--stores: no store {', '.join(sorted(unknown))}; known: {', '.join(STORES)}"
            raise SystemExit(msg)
    chosen = []
    for spec in STORES.values():
        if spec.key not in wanted:
            continue
        if spec.key == "postgres" and not (args.postgres and hasattr(bundled, "PostgresStore")):
            continue
        chosen.append(spec)
    return chosen


# Runners (stores or peers) that need a PostgreSQL database, one fresh one per case.
ON_POSTGRES = frozenset({"postgres", "langgraph-postgres"})

# --- one measurement, in a process of its own ---------------------------------------------


def chain(steps: int, size: int) -> Workflow:
    """``steps`` steps, each depending on the one before and returning its text."""

    def make(number: int) -> Step:
        def run(_ctx: object) -> str:
            return text(number, size)

        return Step(f"s{number}", run, depends_on=(f"s{number - 1}",) if number else ())

    return Workflow([make(number) for number in range(steps)])


def measure(key: str, steps: int, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run the chain into a fresh store; time its saves and count the bytes it wrote."""
    spec = STORES[key]
    workflow = chain(steps, size)
    with tempfile.TemporaryDirectory(prefix="ek-stores-") as folder:
        store = spec.make(Path(folder), args)
        if spec.tables:  # as the peers' setup(): the tables and connection, before the clock
            chain(1, size).run_sync(checkpoint_fn=store, run_id="setup")
        spent = 0
        saves = 0

        def save(checkpoint: WorkflowCheckpoint) -> None:
            nonlocal spent, saves
            started = time.perf_counter_ns()
            store(checkpoint)
            spent += time.perf_counter_ns() - started
            saves += 1

        def count() -> int | None:
            return written_bytes() if spec.local_bytes else pg_server.wal_position(args.postgres)

        before = count()
        result = workflow.run_sync(checkpoint_fn=save, run_id=f"bench-{uuid.uuid4().hex}")
        after = count()
        close = getattr(store, "close", None)
        if close is not None:
            close()
        on_disk = sum(file.stat().st_size for file in Path(folder).iterdir())
    output_bytes = sum(len(json.dumps(value).encode()) for value in result.outputs.values())
    # Not on Linux: what is left on disk, a lower bound.
    written = on_disk if before is None or after is None else after - before
    return {
        "us_per_checkpoint": spent / saves / 1000,
        "checkpoints": saves,
        "seconds": spent / 1e9,
        "written": written,
        "output_bytes": output_bytes,
    }


# --- the parent: every case in a fresh process, then the tables ----------------------------


@dataclass(frozen=True, slots=True)
class Runner:
    """Who measures a case: this script under our Python, or a peer under its own."""

    key: str
    label: str
    command: list[str]
    incremental: bool
    peer: str | None = None  # the peer it is compared with


def run_case(
    runner: Runner, steps: int, size: int, args: argparse.Namespace
) -> dict[str, Any] | None:
    """One case in a fresh process; None if it was killed after ``--timeout`` seconds."""
    command = [*runner.command, "--case", f"{steps}:{size}"]
    with contextlib.ExitStack() as stack:
        if runner.key in ON_POSTGRES:
            command += ["--postgres", stack.enter_context(pg_server.fresh_database(args.postgres))]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=args.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return None
    if done.returncode != 0:
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        msg = f"{runner.label} at {steps} steps of {size} bytes failed: {tail}"
        raise RuntimeError(msg)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def predicted(times: list[tuple[int, float]], steps: int) -> float | None:
    """Seconds the next size should take, from the growth between the last two sizes."""
    if not times:
        return None
    if times[-1][1] == math.inf:
        return math.inf
    if len(times) == 1:
        (size, seconds), exponent = times[0], 1.0
    else:
        (first, first_s), (size, seconds) = times[-2], times[-1]
        exponent = math.log(max(seconds, 1e-9) / max(first_s, 1e-9)) / math.log(size / first)
        exponent = max(exponent, 1.0)
    guess: float = seconds * (steps / size) ** exponent
    return guess


def runners(args: argparse.Namespace, log: list[str]) -> list[Runner]:
    here = [sys.executable, str(Path(__file__).resolve())]
    chosen = [
        Runner(spec.key, spec.label, [*here, "--store", spec.key], spec.incremental, spec.peer)
        for spec in available(args)
    ]
    if args.peers == "none":
        return chosen
    for peer in venvs.STORE_PEERS.values():
        if args.peers not in ("all", peer.key):
            continue
        if peer.key in ON_POSTGRES and not args.postgres:
            continue
        problem = venvs.ensure(peer, log)
        if problem is not None:
            log.append(f"{peer.label}: not measured, {problem}")
            continue
        command = [str(peer.python), str(peer.script)]
        chosen.append(Runner(peer.key, peer.label, command, incremental=False))
    return chosen


def measure_sizes(
    runner: Runner,
    size: int,
    sizes: list[int],
    args: argparse.Namespace,
    table: dict[tuple[str, int, int], float | str],
) -> None:
    """Fill ``table`` for one store and output size, smallest chain first, within budget."""
    times: list[tuple[int, float]] = []
    for steps in sizes:
        guess = predicted(times, steps)
        if guess == math.inf:
            table[runner.key, size, steps] = "skipped"
            continue
        if guess is not None and guess > args.budget:
            table[runner.key, size, steps] = f"skipped (~{guess:,.0f} s)"
            continue
        runs = []
        spent = 0.0
        for _ in range(args.repeat):
            result = run_case(runner, steps, size, args)
            if result is None:
                break
            runs.append(result["us_per_checkpoint"])
            spent += result["seconds"]
            if spent > args.budget:
                break
        if not runs:
            table[runner.key, size, steps] = f"over {args.timeout:,.0f} s"
            times.append((steps, math.inf))
            continue
        table[runner.key, size, steps] = statistics.median(runs)
        times.append((steps, spent / len(runs)))
        print(f"{runner.label}, {size} B, {steps} steps: done", file=sys.stderr)


def main() -> int:
    """Measure every case, each in a process of its own, and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="chain lengths")
    parser.add_argument("--output-sizes", default="20,1000", help="bytes of each output")
    parser.add_argument("--bytes-steps", type=int, default=1000, help="chain for bytes written")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median)")
    parser.add_argument(
        "--stores",
        help="comma-separated store keys, or all (default: all but sqlite-normal)",
    )
    parser.add_argument(
        "--peers", default="all", help="all, none, langgraph-sqlite or langgraph-postgres"
    )
    parser.add_argument(
        "--postgres",
        help="'auto' (a throwaway server) or a DSN: also measure PostgresStore and PostgresSaver",
    )
    parser.add_argument("--budget", type=float, default=60.0, help="seconds a case may take")
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds after which a case is killed"
    )
    parser.add_argument("--store", help=argparse.SUPPRESS)  # in a child process
    parser.add_argument("--case", help=argparse.SUPPRESS)  # steps:size, in a child process
    args = parser.parse_args()
    if args.case:
        steps, size = (int(part) for part in args.case.split(":"))
        print(json.dumps(measure(args.store, steps, size, args)))
        return 0
    with contextlib.ExitStack() as stack:
        if args.postgres == "auto":
            args.postgres = stack.enter_context(pg_server.throwaway_server())
        measure_all(args)
    return 0


def measure_all(args: argparse.Namespace) -> None:
    """Every case, then the tables."""
    sizes = [int(size) for size in args.sizes.split(",")]
    output_sizes = [int(size) for size in args.output_sizes.split(",")]
    log: list[str] = []
    chosen = runners(args, log)
    for line in log:
        print(line, file=sys.stderr)
    table: dict[tuple[str, int, int], float | str] = {}
    for runner in chosen:
        for size in output_sizes:
            measure_sizes(runner, size, sizes, args, table)
    print_costs(chosen, sizes, output_sizes, table)
    print()
    if print_against_peers(chosen, sizes, output_sizes, table):
        print()
    print_bytes(chosen, args)


def cell(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:,.1f} µs"


def print_costs(
    chosen: list[Runner],
    sizes: list[int],
    output_sizes: list[int],
    table: dict[tuple[str, int, int], float | str],
) -> None:
    columns = " | ".join(f"{steps:,} steps" for steps in sizes)
    print(f"| store | output | {columns} | last / first |")
    print(f"|---|---:|{'---:|' * len(sizes)}---:|")
    for runner in chosen:
        for size in output_sizes:
            cells = [table[runner.key, size, steps] for steps in sizes]
            first, last = cells[0], cells[-1]
            growth = (
                f"{last / first:.2f}{TIMES}"
                if isinstance(first, float) and isinstance(last, float)
                else "n/a"
            )
            row = " | ".join(cell(value) for value in cells)
            print(f"| {runner.label} | {size:,} B | {row} | {growth} |")


def print_against_peers(
    chosen: list[Runner],
    sizes: list[int],
    output_sizes: list[int],
    table: dict[tuple[str, int, int], float | str],
) -> bool:
    """How many times faster each store is than the peer on the same database, if measured.

    The peer's time per step divided by the store's; False if no pair was measured.
    """
    measured = {runner.key: runner for runner in chosen}
    pairs = [
        (runner, measured[runner.peer])
        for runner in chosen
        if runner.peer is not None and runner.peer in measured
    ]
    if not pairs:
        return False
    columns = " | ".join(f"{steps:,} steps" for steps in sizes)
    print(f"| store | against | output | {columns} |")
    print(f"|---|---|---:|{'---:|' * len(sizes)}")
    for runner, peer in pairs:
        for size in output_sizes:
            cells = []
            for steps in sizes:
                ours, theirs = table[runner.key, size, steps], table[peer.key, size, steps]
                if isinstance(ours, float) and isinstance(theirs, float):
                    cells.append(f"{theirs / ours:,.1f}{TIMES}")
                else:
                    cells.append(
                        f"n/a ({peer.label if isinstance(ours, float) else 'ours'}: "
                        f"{theirs if isinstance(ours, float) else ours})"
                    )
            print(f"| {runner.label} | {peer.label} | {size:,} B | {' | '.join(cells)} |")
    return True


def print_bytes(chosen: list[Runner], args: argparse.Namespace) -> None:
    steps = args.bytes_steps
    print(f"| store | bytes written, {steps:,} steps of 1 KB | output bytes | ratio |")
    print("|---|---:|---:|---:|")  # the target for incremental stores: at most 1.2x
    for runner in chosen:
        result = run_case(runner, steps, 1000, args)
        if result is None:
            print(f"| {runner.label} | over {args.timeout:,.0f} s | n/a | n/a |")
            continue
        written, output = result["written"], result["output_bytes"]
        if written is None:
            print(f"| {runner.label} | n/a | {output:,} | n/a |")
            continue
        ratio = written / output
        where = " (server WAL)" if runner.key in ON_POSTGRES else ""
        print(f"| {runner.label} | {written:,}{where} | {output:,} | {ratio:,.2f}{TIMES} |")


if __name__ == "__main__":
    sys.exit(main())
