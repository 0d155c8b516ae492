"""The pages an operator reads across runs (issue 35), timed over HTTP on SQLite locations.

Every page reads each run's latest checkpoint (the header counts the questions
waiting; the runs page counts and filters the statuses; a run's page lists its
forks): the first request loads them all, later ones load again only the runs
whose seq moved (one query gives every run's seq). The figures are those later
requests. The pages are timed on three locations:

1. **1,000 runs**: ``--runs`` runs of a four-step workflow, three in four
   waiting for an answer, one in four failed (the runs page, filtered, searched,
   and the inbox of their questions);
2. **1,000 runs and three big ones**: the same, plus a chain of ``--steps``
   steps (finished; every seventh step fails its first attempt and is retried,
   so the checkpoint's ``attempts`` holds one or two entries per step), a fork
   of it with its middle step overridden, and a map over ``--items`` items that
   stopped at a failed item (an entry of ``attempts`` per item attempt; every
   page);
3. **alone**: the chain and its fork, and the map, each in a location of its
   own (a run's page, and the comparison, without the other runs to read).

A run's page draws its timeline (a row per step, from ``attempts``) and its
steps' durations: the line before the table says how many entries of
``attempts`` the big runs' checkpoints hold.

Each figure is the median of ``--requests`` GETs (after one warm-up), with
[min-max], in milliseconds, through `http.client` to a server started in this
process on a free port (as ``executionkit serve`` starts it, without
``--workflow``), then the same with ``--prices`` (a price for every model). The
issue's target is 300 ms a page on a 2-core machine.

::

    python benchmarks/serve_pages.py [--runs 1000] [--steps 1000] [--items 10000]
        [--requests 15]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

from serve import (  # noqa: E402
    big_map,
    served,
    small,
    spread,
    timed,
)

from executionkit import Price, Prices, Step, Workflow, current_step  # noqa: E402
from executionkit._cli._location import parse_location  # noqa: E402
from executionkit._cli._serve import App  # noqa: E402
from executionkit._cli._serve._runs import Source  # noqa: E402
from executionkit.stores import SQLiteStore  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator


RETRIED_EVERY = 7  # every seventh step of the chain fails its first attempt


def _step(number: int) -> Any:
    def step(_ctx: Any) -> int:
        if number % RETRIED_EVERY == 0 and current_step().attempt == 1:
            msg = f"step {number} fails its first attempt"
            raise RuntimeError(msg)
        return number

    return step


def retried_chain(steps: int) -> Workflow:
    """``steps`` steps, each after the one before; every seventh is retried once."""
    return Workflow(
        [
            Step(
                f"s{n}",
                _step(n),
                depends_on=(() if n == 0 else (f"s{n - 1}",)),
                retries=1,
                retry_delay=0,
            )
            for n in range(steps)
        ]
    )


def _run(workflow: Workflow, store: SQLiteStore, run_id: str, context: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):
        workflow.run_sync(context, checkpoint_fn=store, run_id=run_id)


def small_runs(store: SQLiteStore, runs: int) -> None:
    """``runs`` runs of `small`: three in four wait for an answer, one in four failed."""
    workflow = small()
    for number in range(runs):
        kind = ("fail", "ask", "ask", "ask")[number % 4]
        _run(workflow, store, f"run-{number:05}", {"kind": kind})


def big_runs(store: SQLiteStore, steps: int, items: int) -> None:
    """A finished chain of ``steps`` steps, a fork of it, and a map over ``items`` items."""
    long = retried_chain(steps)
    _run(long, store, "chain", {})
    parent = store.load("chain")
    assert parent is not None  # noqa: S101 - the run above saved it
    middle = f"s{steps // 2}"
    fork = long.fork(parent, override={middle: -1}, run_id="chain-fork", note="the middle")
    with contextlib.suppress(Exception):
        long.run_sync({}, checkpoint_fn=store, resume_from=fork)
    _run(big_map(items), store, "big", {})


def locations(folder: Path, runs: int, steps: int, items: int) -> tuple[str, str, str, str]:
    """The three locations (the third as two databases): their URLs."""
    start = time.perf_counter()
    made = []
    for name, small_ones, big_ones in (
        ("runs", True, False),
        ("all", True, True),
        ("chain", False, True),
    ):
        store = SQLiteStore(folder / f"{name}.db")
        try:
            if small_ones:
                small_runs(store, runs)
            if big_ones:
                big_runs(store, steps, items)
        finally:
            store.close()
        made.append(f"sqlite:///{folder / f'{name}.db'}")
    store = SQLiteStore(folder / "map.db")
    try:
        _run(big_map(items), store, "big", {})
    finally:
        store.close()
    made.append(f"sqlite:///{folder / 'map.db'}")
    print(f"made the locations in {time.perf_counter() - start:.1f} s")
    _say_attempts(folder / "chain.db", "chain", "big")
    return made[0], made[1], made[2], made[3]


def _say_attempts(path: Path, *run_ids: str) -> None:
    """How many entries of ``attempts`` the runs' latest checkpoints hold (the timeline's)."""
    store = SQLiteStore(path)
    try:
        for run_id in run_ids:
            checkpoint = store.load(run_id)
            assert checkpoint is not None  # noqa: S101 - made above
            entries = checkpoint.attempts
            retried = sum(1 for entry in entries if entry[2] > 1)
            print(f"run {run_id}: {len(entries):,} entries of attempts, {retried:,} retries")
            if not entries:
                print("  (this version writes no attempts: the timelines are empty)")
    finally:
        store.close()
    print()


@contextlib.contextmanager
def serving(where: str, prices: Prices | None) -> Iterator[tuple[str, int]]:
    """A server of ``where`` without --workflow (``prices``: --prices): its host and port."""
    with served(App(Source(parse_location(where), None, prices=prices), None, None)) as server:
        yield "127.0.0.1", server.server_address[1]


def pages(where: str, cases: list[tuple[str, str]], requests: int, *, priced: bool = True) -> None:
    """Time each page of ``cases`` on ``where`` (and with prices); print Markdown table rows."""
    prices = Prices({}, default=Price("2.50", "10.00"))  # every model priced
    with serving(where, None) as plain, serving(where, prices) as billed:
        for label, path in cases:
            times, size = timed(plain, path, requests)
            with_prices = spread(timed(billed, path, requests)[0]) if priced else "-"
            print(f"| {label} | {spread(times)} | {with_prices} | {size:,} bytes |")


def measure(args: argparse.Namespace, folder: Path) -> None:
    """Make the locations, then time their pages."""
    runs, steps, items = args.runs, args.steps, args.items
    only_runs, everything, chained, mapped = locations(folder, runs, steps, items)
    last = -(-runs // 50)
    print("| page | median [min-max] | with --prices | size |")
    print("| --- | --- | --- | --- |")
    print(f"| **{runs:,} runs** | | | |")
    pages(
        only_runs,
        [
            (f"runs page, {runs:,} runs (50 shown)", "/"),
            ("runs page, one status (`?status=waiting`)", "/?status=waiting"),
            ("runs page, a search (`?q=run-004`)", "/?q=run-004"),
            (f"runs page, its last page (`?page={last}`)", f"/?page={last}"),
            (f"questions waiting (`/questions`, {runs * 3 // 4:,} of them)", "/questions"),
            ("a small run's page", "/run?id=run-00001"),
        ],
        args.requests,
    )
    print(f"| **{runs:,} runs, a {steps:,}-step chain, its fork, a {items:,}-item map** | | | |")
    pages(
        everything,
        [
            (f"runs page, {runs + 3:,} runs (50 shown)", "/"),
            ("questions waiting (`/questions`)", "/questions"),
            (f"run page, {steps:,}-step chain (lists its fork)", "/run?id=chain"),
            (f"run page, {steps:,}-step fork (its lineage)", "/run?id=chain-fork"),
            (f"run page, {items:,}-item map", "/run?id=big"),
            ("live poll of the map's page (`&live=1`)", "/run?id=big&live=1"),
            (f"compare the {steps:,}-step chain with its fork", "/compare?a=chain&b=chain-fork"),
        ],
        args.requests,
    )
    print("| **alone: the chain and its fork; the map** | | | |")
    pages(
        chained,
        [
            (f"run page, {steps:,}-step chain", "/run?id=chain"),
            (f"compare the {steps:,}-step chain with its fork", "/compare?a=chain&b=chain-fork"),
        ],
        args.requests,
    )
    pages(mapped, [(f"run page, {items:,}-item map", "/run?id=big")], args.requests)


def main() -> None:
    """Make the locations, then time their pages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        measure(args, Path(folder))


if __name__ == "__main__":
    main()
