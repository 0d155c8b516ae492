"""What a page following a big run fetches when one step finishes (issue 35).

A chain of ``--steps`` steps is run to its end once, every checkpoint kept
(a step in seven fails its first attempt and is retried, so ``attempts`` and
the timeline have retries to draw). Its first half is saved to an SQLite
location served in this process (as ``executionkit serve`` serves it). Then,
for ``--polls`` steps, the next checkpoint is saved (one step finished) and the
page's live poll is fetched as its script fetches it (the run claimed, as a
worker running it claims it, so the page follows it; the server's wall clock
standing still, so that the timeline's span stays within one rounded value):

- **whole**: ``/run?id=ID&live=1``, the whole main every time (as before);
- **changed**: ``/run?id=ID&live=1&since=V``, V the version of the render the
  page shows: the parts that changed (a step's row, its node of the graph, its
  timeline row, the summary), or the whole main when more changed.

It prints the page's size, and for each way the bytes per poll (median
[min-max]) and the milliseconds the server took; then what the server keeps
in memory to answer such polls (`Renders`, 256 renders of the page). The
target: under 10 kB for one step finishing on a 1,000-step run.

::

    python benchmarks/live_updates.py [--steps 1000] [--polls 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import source

source.put_on_path()

from serve import served  # noqa: E402

from executionkit import Step, Workflow, WorkflowCheckpoint, _clock  # noqa: E402
from executionkit._cli._location import parse_location  # noqa: E402
from executionkit._cli._serve import App  # noqa: E402
from executionkit._cli._serve._parts import Renders  # noqa: E402
from executionkit._cli._serve._runs import Source  # noqa: E402
from executionkit.stores import SQLiteStore  # noqa: E402

_VERSION = re.compile(r'data-version="([0-9a-f]+)"')


def retried_chain(steps: int) -> Workflow:
    """``steps`` steps in a chain; every seventh fails its first attempt."""
    failed: set[int] = set()

    def make(number: int) -> Any:
        def step(_ctx: Any) -> int:
            if number % 7 == 3 and number not in failed:
                failed.add(number)
                msg = f"step {number} failed once"
                raise RuntimeError(msg)
            return number

        return step

    return Workflow(
        [
            Step(
                f"s{n}",
                make(n),
                depends_on=(() if n == 0 else (f"s{n - 1}",)),
                retries=1,
                retry_delay=0,
            )
            for n in range(steps)
        ]
    )


def fetch(address: tuple[str, int], path: str) -> bytes:
    """The body of one GET of ``path``."""
    host, port = address
    connection = http.client.HTTPConnection(host, port, timeout=60)
    try:
        connection.request("GET", path, headers={"Host": f"{host}:{port}"})
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            msg = f"GET {path}: status {response.status}"
            raise RuntimeError(msg)
        return body
    finally:
        connection.close()


def spread(values: list[float], digits: int = 1) -> str:
    """``12.3 [11.0-15.2]``."""
    return (
        f"{statistics.median(values):,.{digits}f} "
        f"[{min(values):,.{digits}f}-{max(values):,.{digits}f}]"
    )


def measure(steps: int, polls: int, folder: Path, *, read_only: bool = False) -> None:
    """Save half the run, then one checkpoint a poll; print what each way fetched.

    ``read_only``: served without the workflow, as ``executionkit serve`` beside
    workers is: the page knows only the steps recorded, so each poll brings a
    new row, node and timeline row.
    """
    kept: list[WorkflowCheckpoint] = []
    workflow = retried_chain(steps)
    workflow.run_sync(checkpoint_fn=kept.append, run_id="big")
    path = folder / "runs.sqlite"
    store = SQLiteStore(path)
    half = len(kept) // 2
    for checkpoint in kept[:half]:
        store(checkpoint)
    # Served with the workflow (``serve --workflow``), the page shows every step from the
    # start; without it (``read_only``), only the steps recorded: each adds its parts.
    shown = None if read_only else workflow
    app = App(Source(parse_location(f"sqlite:///{path}"), shown), None, "bench:workflow")
    # The run is claimed (running: the page follows it, its timeline drawn up to now) and
    # the server's clock stands still: a span that grows past 1, 2 or 5 times a power of
    # ten redraws every timeline row (a few times in a run's life), not what is measured.
    still = time.time()
    _clock.wall = lambda: still
    with store.claim("big"), served(app) as server:
        address = ("127.0.0.1", server.server_address[1])
        page = fetch(address, "/run?id=big").decode()
        found = _VERSION.search(page)
        if found is None:
            msg = "the run page has no data-version: live updates send the whole main"
            raise RuntimeError(msg)
        version = found.group(1)
        whole: list[float] = []
        changed: list[float] = []
        whole_ms: list[float] = []
        changed_ms: list[float] = []
        sent_whole = 0
        for checkpoint in kept[half : half + polls]:
            store(checkpoint)
            start = time.perf_counter()
            body = fetch(address, f"/run?id=big&live=1&since={version}")
            changed_ms.append((time.perf_counter() - start) * 1000)
            state = json.loads(body)
            version = state["v"]
            sent_whole += "html" in state
            changed.append(len(body) / 1000)
            start = time.perf_counter()
            body = fetch(address, "/run?id=big&live=1")
            whole_ms.append((time.perf_counter() - start) * 1000)
            whole.append(len(body) / 1000)
        kept_bytes = renders_memory(str(app.run_page("big", None).main))
    store.close()
    print(f"run page of {steps:,} steps: {len(page) / 1000:,.1f} kB")
    print("| live poll after one step finished | kB per poll | server ms | polls sent whole |")
    print("|---|---:|---:|---:|")
    print(f"| whole main (before) | {spread(whole)} | {spread(whole_ms)} | {len(whole)} |")
    print(
        f"| what changed (since=V) | {spread(changed, 2)} | {spread(changed_ms)} | {sent_whole} |"
    )
    print(f"the server's memory of 256 renders of this page: {kept_bytes / 1e6:.1f} MB")


def renders_memory(main: str) -> int:
    """Bytes `Renders` holds for 256 renders of ``main``, each a little different."""
    renders = Renders()
    tracemalloc.start()
    try:
        for number in range(256):
            renders.remember(f"{main}<!--{number}-->")
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def main() -> None:
    """Parse the options and measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument(
        "--read-only", action="store_true", help="serve without the workflow, beside workers"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        measure(args.steps, args.polls, Path(folder), read_only=args.read_only)


if __name__ == "__main__":
    main()
