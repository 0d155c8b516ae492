"""A page following a big run gets only what changed: a step finishing costs under 10 kB.

A chain of 300 steps runs in the background, each step held by a gate. The
page follows it; each gate opened finishes one step, and the page's polls
(seen by the browser) fetch that step's row, its node of the graph and its
timeline row, not the page again; the page then shows exactly what a fresh
load of it shows. The wall clock stands still (`executionkit._clock.wall`,
the seam for it): a timeline of a running run is drawn up to now over a span
rounded up to 1, 2 or 5 times a power of ten, and a span that grows past one
of those redraws every row, rightly sent whole; in real runs that happens a
few times an hour, here it would happen within the test's seconds.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest
import serve_workflows as flows
from playwright.sync_api import expect

from executionkit import _clock
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from playwright.sync_api import Page, Response

STEPS = 300
WAIT = 15_000  # ms


@pytest.fixture(autouse=True)
def _fresh_gates() -> Iterator[None]:
    flows.reset()
    yield
    flows.release_all()


def _parts_of(main_html: str) -> list[str]:
    """The data-part keys of a main, in order (what the page shows)."""
    import re  # noqa: PLC0415 - the one use

    return re.findall(r'data-part="([^"]*)"', main_html)


def test_a_step_finishing_sends_its_parts_only_and_the_page_matches_a_fresh_load(
    page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    still = time.time()
    monkeypatch.setattr(_clock, "wall", lambda: still)
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    url = f"sqlite:///{path}"
    workflow = flows.gated_chain(STEPS)
    responses: list[Response] = []

    def seen(response: Response) -> None:
        if "live=1" in response.url:
            responses.append(response)  # read once the step is shown (not in the handler)

    def polls() -> list[dict[str, Any]]:
        read = [{"size": len(r.body()), "state": json.loads(r.body())} for r in responses]
        assert all(r.status == 200 for r in responses)
        return read

    running = flows.Background(workflow, store, "chain")
    try:
        assert flows.begun("g1").wait(flows.GATE_WAIT)
        with flows.serving(url, flows.gated_chain(STEPS), "serve_workflows:gated_chain") as served:
            page.on("response", seen)
            page.goto(f"{served.url}run?id=chain")
            expect(page.locator('tr[data-step="g1"] .status')).to_have_text("running")
            full = len(page.content())
            for number in range(1, 4):
                responses.clear()
                flows.gate(f"g{number}").set()
                assert flows.begun(f"g{number + 1}").wait(flows.GATE_WAIT)
                expect(page.locator(f'tr[data-step="g{number}"] .status')).to_have_text(
                    "done", timeout=WAIT
                )
                expect(page.locator(f'g[data-part="node:g{number}"]')).to_have_class(
                    "node node-done", timeout=WAIT
                )
                fetched = polls()
                changed = [poll for poll in fetched if "parts" in poll["state"]]
                assert changed, fetched
                assert all("html" not in poll["state"] for poll in fetched), "sent whole"
                sent = {key for poll in changed for key in poll["state"]["parts"]}
                assert {f"step:g{number}", f"node:g{number}", f"step:g{number + 1}"} <= sent
                assert max(poll["size"] for poll in fetched) < 10_000, fetched
            assert full > 200_000  # the page sent once is big: its polls are not
            # What the page shows after its swaps is what a fresh load shows.
            shown = page.locator("main").inner_html()
            fresh = page.context.new_page()
            try:
                fresh.goto(f"{served.url}run?id=chain")
                again = fresh.locator("main").inner_html()
            finally:
                fresh.close()
            assert _parts_of(shown) == _parts_of(again)
            for key in ("step:g1", "step:g3", "node:g2", "facts"):
                selector = f'[data-part="{key}"]'
                assert page.locator(selector).inner_html() == fresh_html(again, key), key
    finally:
        flows.release_all()
        running.join()
    assert running.error is None
    store.close()


def fresh_html(main_html: str, key: str) -> str:
    """The inner markup of the part ``key`` of a main, as the browser serialises it."""
    from executionkit._cli._serve._parts import split  # noqa: PLC0415 - the one use

    cut = split(main_html)
    assert cut is not None
    part = cut[1][key]
    return part[part.index(">") + 1 : part.rindex("<")]
