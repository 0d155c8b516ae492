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


def test_each_running_item_of_a_map_streams_its_own_text_until_it_ends(
    page: Page, tmp_path: Path
) -> None:
    flows.reset()
    store = SQLiteStore(tmp_path / "runs.db")
    first = flows.Background(flows.streaming_map(), store, "mapper")
    first.join()
    assert first.error is None
    url = f"sqlite:///{tmp_path}/runs.db"
    try:
        with flows.serving(url, flows.streaming_map(), "serve_workflows:streaming_map") as served:
            page.goto(f"{served.url}run?id=mapper")
            page.get_by_label("approve").fill("yes")
            page.get_by_role("button", name="Answer").click()
            intro = page.locator('pre.streamed[data-stream-step="write"][data-stream-item="0"]')
            outro = page.locator('pre.streamed[data-stream-step="write"][data-stream-item="1"]')
            expect(intro).to_have_text("intro begins, ", timeout=WAIT)
            expect(outro).to_have_text("outro begins, ", timeout=WAIT)
            keys = page.locator("div.streamed-item .item-key")
            expect(keys).to_have_count(2)
            assert sorted(keys.all_inner_texts()) == ["item 0", "item 1"]
            assert flows.begun("item-0").wait(flows.GATE_WAIT)
            flows.gate("item-0").set()  # the first item ends: its text goes, the other's stays
            expect(intro).to_have_count(0, timeout=WAIT)
            expect(outro).to_have_text("outro begins, ")
            flows.gate("item-1").set()
            expect(page.locator('tr[data-step="write"] .status')).to_have_text(
                "done", timeout=WAIT
            )
            expect(page.locator("pre.streamed")).to_have_count(0)
    finally:
        flows.release_all()
    checkpoint = store.load("mapper")
    assert checkpoint is not None
    assert checkpoint.outputs["write"] == ["intro written", "outro written"]


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
    assert tracker.streams("page") == {"write": {"attempt": 1, "text": "first try"}}
    seen(ev.StepStreamed("run", "write", 2, "second"))  # a retry: a new text
    assert tracker.streams("page") == {"write": {"attempt": 2, "text": "second"}}
    seen(ev.StepFinished("run", "write", 0.1, TokenUsage()))
    assert tracker.streams("page") == {}
    assert tracker.streams("another page") == {}


def test_the_tracker_keeps_each_items_text_until_the_item_ends() -> None:
    from executionkit import TokenUsage  # noqa: PLC0415
    from executionkit import events as ev  # noqa: PLC0415
    from executionkit._cli._serve._answers import Tracker  # noqa: PLC0415

    tracker = Tracker()
    seen = tracker.listener("page", "run")
    seen(ev.MapStarted("run", "each", 3, 0))
    seen(ev.StepStreamed("run", "each", 1, "zero ", item="0"))
    seen(ev.StepStreamed("run", "each", 1, "one", item="1"))
    seen(ev.StepStreamed("run", "each", 1, "again", item="0"))
    assert tracker.streams("page") == {
        "each": {
            "items": {
                "1": {"attempt": 1, "text": "one"},
                "0": {"attempt": 1, "text": "zero again"},
            }
        }
    }
    seen(ev.StepStreamed("run", "each", 2, "retried", item="1"))  # its retry: a new text
    seen(ev.ItemFinished("run", "each", "0", 0.1, TokenUsage(), 1))  # it ended: its text goes
    assert tracker.streams("page") == {"each": {"items": {"1": {"attempt": 2, "text": "retried"}}}}
    for key in range(100):  # only the 64 that streamed last are kept
        seen(ev.StepStreamed("run", "each", 1, f"item {key}", item=str(key + 10)))
    assert len(tracker.streams("page")["each"]["items"]) == 64
    assert tracker.streams("page")["each"]["items"]["109"] == {"attempt": 1, "text": "item 99"}
    seen(ev.StepFinished("run", "each", 0.1, TokenUsage()))
    assert tracker.streams("page") == {}
