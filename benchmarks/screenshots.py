"""Screenshots of every page of ``executionkit serve``, for the docs, taken in a real browser.

Builds an SQLite location that has a run of each kind an operator meets:
finished, waiting for an answer, failed, a map of 40 items that stopped at a
failed item, a fork of the finished run with its comparison, a run submitted
and not started, one a worker left alone, all with prices. It serves the
location (as ``executionkit serve --prices``, without ``--workflow``, so answers
are saved for a worker) and saves, with Debian's chromium driven by
playwright, one PNG per page into ``docs/images/`` (or ``--out``):

- ``serve-runs.png``: the runs page;
- ``serve-run.png``: a run waiting for an answer, its timeline showing a 429
  and a failed attempt retried, and the question's wait;
- ``serve-map.png``: the map that stopped, its items folded into one row of the
  timeline;
- ``serve-questions.png``: the inbox of every waiting question;
- ``serve-compare.png``: the fork compared with its parent;
- ``serve-filter.png``: the runs page filtered to the failed runs;
- ``serve-stream.png``: a run another process is running, its step's text
  streaming into the page (the claim and the text written here, as a worker's
  `StreamPublisher` writes them).

Look at each before a release: the docs show them. ::

    python benchmarks/screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import source

source.put_on_path()

from serve import served  # noqa: E402

from executionkit import (  # noqa: E402
    Price,
    Prices,
    RateLimited,
    Step,
    TokenUsage,
    Workflow,
    WorkflowFailed,
    current_step,
)
from executionkit._cli._location import parse_location  # noqa: E402
from executionkit._cli._serve import App  # noqa: E402
from executionkit._cli._serve._answers import Tracker  # noqa: E402
from executionkit._cli._serve._runs import Source  # noqa: E402
from executionkit.stores import SQLiteStore  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
PRICES = Prices({"small-model": Price(0.15, 0.60), "big-model": Price(2.50, 10.0)})


def _spent(tokens: int, model: str) -> None:
    current_step().add_usage(TokenUsage(tokens, tokens // 5, 1), model=model)


def _fetch(_ctx: Any) -> str:
    """Answered 429 at first (the timeline shows the rate limit), then fetched."""
    time.sleep(0.15)  # the time a download takes, for the timeline to show
    if current_step().attempt == 1:
        raise RateLimited(retry_after=0.3)
    return "Quarterly notes: revenue up 12%."


def _summarize(_ctx: Any) -> str:
    """Fails at first (the timeline shows the retry), then summarises."""
    time.sleep(0.25)  # the model's latency, for the timeline to show
    _spent(1800, "big-model")
    if current_step().attempt == 1:
        msg = "the model answered an empty string"
        raise ValueError(msg)
    return "Revenue grew 12%."


def report() -> Workflow:
    """Fetch (a 429 first), summarise (a failure first), a question, publish."""
    return Workflow(
        [
            Step("fetch_document", _fetch),
            Step(
                "summarize_findings",
                _summarize,
                depends_on=("fetch_document",),
                retries=1,
                retry_delay=0.4,
            ),
            Step.ask(
                "approve",
                lambda ctx: f"Publish this summary? {ctx['summarize_findings']}",
                depends_on=("summarize_findings",),
            ),
            Step("publish", lambda _ctx: "published", depends_on=("approve",)),
        ]
    )


def _flaky(item: int, _ctx: Any) -> int:
    time.sleep(0.02 + item % 5 * 0.01)  # each item's own latency, for the timeline
    _spent(300, "small-model")
    if item == 31:
        msg = "the model answered an empty string"
        raise ValueError(msg)
    return item * 2


def mapper() -> Workflow:
    """A map of 40 items; item 31 fails."""
    return Workflow(
        [
            Step("chunks", lambda _ctx: list(range(40))),
            Step.map("score_chunks", _flaky, over="chunks", max_concurrency=4),
        ]
    )


def build(folder: Path) -> str:
    """The location, with a run of every kind; return its URL."""
    store = SQLiteStore(folder / "runs.db")
    flow = report()
    flow.run_sync(checkpoint_fn=store, run_id="report-waiting")
    saved: list[Any] = []
    flow.run_sync(checkpoint_fn=saved.append, run_id="report-approved")
    done = flow.run_sync(checkpoint_fn=store, resume_from=saved[-1], answers={"approve": "yes"})
    del done
    finished = store.load("report-approved")
    assert finished is not None  # noqa: S101 - just saved
    fork = flow.fork(
        finished,
        override={"summarize_findings": "Revenue grew 12%, costs 3%."},
        run_id="report-fixed",
        note="the summary left out costs",
    )
    store(fork)
    flow.run_sync(checkpoint_fn=store, resume_from=fork, answers=None)
    with contextlib.suppress(WorkflowFailed):
        mapper().run_sync(checkpoint_fn=store, run_id="scores-stopped")
    flow.submit(store, run_id="report-submitted")
    store.inbox.leave_alone("report-old", "it needs the inputs 'document', which were not stored")
    flow.run_sync(checkpoint_fn=store, run_id="report-old")
    started: list[Any] = []
    flow.run_sync(checkpoint_fn=started.append, run_id="report-streaming")
    store(started[0])  # its first step recorded: the summary is what streams
    return f"sqlite:///{folder}/runs.db"


STREAMED = (
    "Revenue grew 12% over the quarter, driven by the new enterprise tier; costs rose "
    "3%, mostly hosting. Churn fell to"
)


@contextlib.contextmanager
def streaming(location: str) -> Any:
    """Run ``report-streaming`` as a worker would: claimed, its summary streaming."""
    store = SQLiteStore(Path(location.removeprefix("sqlite:///")))
    try:
        with store.claim("report-streaming"):
            store.inbox.put_streams(
                "report-streaming", {("summarize_findings", None): (2, STREAMED)}
            )
            yield
    finally:
        store.close()


def shoot(location: str, out: Path) -> list[Path]:
    """Serve ``location`` and save a screenshot of each page into ``out``."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - the dev extra

    app = App(Source(parse_location(location), None, prices=PRICES), None, None, Tracker())
    pages = {
        "serve-runs.png": "",
        "serve-run.png": "run?id=report-waiting",
        "serve-map.png": "run?id=scores-stopped",
        "serve-questions.png": "questions",
        "serve-compare.png": "compare?a=report-approved&b=report-fixed",
        "serve-filter.png": "?status=failed",
        "serve-stream.png": "run?id=report-streaming",
    }
    saved = []
    with streaming(location), served(app) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        for name, path in pages.items():
            page.goto(f"{server.url}{path}")
            if name == "serve-stream.png":
                page.locator("pre.streamed").wait_for()
            target = out / name
            page.screenshot(path=str(target), full_page=True)
            saved.append(target)
        browser.close()
    return saved


def main() -> None:
    """Build the location, take the screenshots, print their paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMAGES)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for path in shoot(build(Path(folder)), args.out):
            print(path)


if __name__ == "__main__":
    main()
