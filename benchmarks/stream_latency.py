"""From `current_step().stream(text)` to the text in the page's hands: the latency, p50 and p95.

Issue 35 asks that the page show a running step's text growing within 250 ms
(p95). This starts ``executionkit serve`` in this process on an SQLite location
with ``--workflow``, answers a run's question over HTTP so that the server
resumes it, and the run's step streams ``--pieces`` pieces, one every 50 to
300 ms (random, seeded). A client polls ``/stream?id=RUN`` as the page's script
does (every 100 ms) and notes when each piece first appears; the latency of a
piece is that moment minus the moment the step called ``stream``. The page sets
the text it gets as the text of one element, which adds no measurable time.

::

    python benchmarks/stream_latency.py [--pieces 60] [--seed 7]
"""

from __future__ import annotations

import argparse
import http
import http.client
import json
import random
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import source

source.put_on_path()

from serve import served  # noqa: E402

from executionkit import Step, Workflow, current_step  # noqa: E402
from executionkit._cli._location import parse_location  # noqa: E402
from executionkit._cli._serve import App  # noqa: E402
from executionkit._cli._serve._answers import Resumer, Tracker  # noqa: E402
from executionkit._cli._serve._runs import Source  # noqa: E402
from executionkit.stores import SQLiteStore  # noqa: E402

POLL = 0.1  # seconds between the page script's requests for the streamed text


def talker(pieces: int, seed: int, sent: dict[int, float]) -> Workflow:
    """A question, then a step that streams ``pieces`` pieces at random intervals."""
    chance = random.Random(seed)

    def talk(_ctx: Any) -> str:
        step = current_step()
        for index in range(pieces):
            time.sleep(chance.uniform(0.05, 0.3))
            sent[index] = time.perf_counter()
            step.stream(f"<{index}>")
        return "done"

    return Workflow([Step.ask("go", lambda _ctx: "go?"), Step("talk", talk, depends_on=("go",))])


def measure(pieces: int, seed: int) -> list[float]:
    """Each piece's latency in seconds, from ``stream`` to the client that polls."""
    sent: dict[int, float] = {}
    flow = talker(pieces, seed, sent)
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder) / "runs.db")
        flow.run_sync(checkpoint_fn=store, run_id="talk")
        location = Source(parse_location(f"sqlite:///{folder}/runs.db"), flow)
        tracker = Tracker()
        resumer = Resumer(location, flow, {}, tracker)
        location.resuming = resumer.busy
        app = App(location, resumer, "bench:talker", tracker)
        with served(app) as server:
            try:
                form = urllib.parse.urlencode(
                    {"token": app.token, "run": "talk", "path": "go", "value": "yes"}
                ).encode()
                _post(server.url, form)
                return _follow(f"{server.url}stream?id=talk", pieces, sent)
            finally:
                resumer.stop()


def _post(url: str, form: bytes) -> None:
    """POST the answer; the server answers 303 to the run's page once the run resumed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        connection.request("POST", "/answer", body=form, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != http.HTTPStatus.SEE_OTHER:
            msg = f"the answer was not taken: HTTP {response.status}"
            raise RuntimeError(msg)
    finally:
        connection.close()


def _follow(url: str, pieces: int, sent: dict[int, float]) -> list[float]:
    seen: dict[int, float] = {}
    deadline = time.monotonic() + pieces * 0.4 + 30
    while len(seen) < pieces and time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - our server
            state = json.loads(response.read())
        now = time.perf_counter()
        text = state["steps"].get("talk", {}).get("text", "")
        for index in range(pieces):
            if index not in seen and f"<{index}>" in text:
                seen[index] = now
        time.sleep(POLL)
    return [seen[index] - sent[index] for index in sorted(seen)]


def main() -> None:
    """Print the latencies as one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pieces", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    latencies = sorted(measure(args.pieces, args.seed))
    p95 = latencies[max(0, round(0.95 * len(latencies)) - 1)]
    print("| pieces seen | p50 | p95 | max |")
    print("| ---: | ---: | ---: | ---: |")
    print(
        f"| {len(latencies)} of {args.pieces} | {statistics.median(latencies) * 1000:.0f} ms | "
        f"{p95 * 1000:.0f} ms | {latencies[-1] * 1000:.0f} ms |"
    )


if __name__ == "__main__":
    main()
