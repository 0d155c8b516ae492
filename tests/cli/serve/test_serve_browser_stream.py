"""Text a running step streams, on the page while it runs; a retry starts it afresh (chromium)."""

from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING

import serve_workflows as flows
from playwright.sync_api import expect

from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    from playwright.sync_api import Page

WAIT = 10_000  # milliseconds: the bound on every wait for the page


def test_streamed_text_grows_on_the_page_and_a_retry_never_repeats_the_failed_attempts(
    page: Page, tmp_path: Path
) -> None:
    flows.reset()
    store = SQLiteStore(tmp_path / "runs.db")
    first = flows.Background(flows.streaming(), store, "writer")  # playwright holds this thread
    first.join()
    assert first.error is None
    url = f"sqlite:///{tmp_path}/runs.db"
    try:
        with flows.serving(url, flows.streaming(), "serve_workflows:streaming") as served:
            page.goto(f"{served.url}run?id=writer")
            page.get_by_label("approve").fill("yes")
            page.get_by_role("button", name="Answer").click()
            streamed = page.locator('pre.streamed[data-stream-step="write"]')
            expect(streamed).to_have_text("first try, ", timeout=WAIT)  # while it is held
            with urllib.request.urlopen(f"{served.url}stream?id=writer", timeout=10) as answer:  # noqa: S310 - our server
                state = json.loads(answer.read())
            assert state == {
                "live": True,
                "steps": {"write": {"attempt": 1, "text": "first try, "}},
            }
            assert flows.begun("first-try").wait(flows.GATE_WAIT)
            flows.gate("first-try").set()  # the first attempt fails: retried
            expect(streamed).to_have_text("second try, ", timeout=WAIT)
            expect(streamed).to_have_attribute("data-attempt", "2")
            flows.gate("second-try").set()
            expect(page.locator('tr[data-step="write"]')).to_contain_text(
                "second try, whole answer", timeout=WAIT
            )
            expect(page.locator("pre.streamed")).to_have_count(0)  # the output replaced it
    finally:
        flows.release_all()
    checkpoint = store.load("writer")
    assert checkpoint is not None
    assert checkpoint.outputs["write"] == "second try, whole answer"
    assert "first try" not in str(checkpoint.to_dict())


def test_the_tracker_keeps_each_attempts_text_and_drops_it_once_the_step_ended() -> None:
    from executionkit import TokenUsage  # noqa: PLC0415
    from executionkit import events as ev  # noqa: PLC0415
    from executionkit._cli._serve._answers import Tracker  # noqa: PLC0415

    tracker = Tracker()
    seen = tracker.listener("page", "run")
    seen(ev.StepStarted("run", "write", 1))
    seen(ev.StepStreamed("run", "write", 1, "first "))
    seen(ev.StepStreamed("run", "write", 1, "try"))
    seen(ev.StepStreamed("run/sub", "write", 1, "a child's"))  # another run: not this page's
    seen(ev.StepStreamed("run", "each", 1, "an item's", item="0"))  # items: not kept
    assert tracker.streams("page") == {"write": (1, "first try")}
    seen(ev.StepStreamed("run", "write", 2, "second"))  # a retry: a new text
    assert tracker.streams("page") == {"write": (2, "second")}
    seen(ev.StepFinished("run", "write", 0.1, TokenUsage()))
    assert tracker.streams("page") == {}
    assert tracker.streams("another page") == {}
