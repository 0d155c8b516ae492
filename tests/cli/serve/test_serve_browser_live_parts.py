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
            # What the page shows after its changes is what a fresh load shows.
            _shown, again = _shown_and_fresh(page, f"{served.url}run?id=chain")
            _same_parts(page, again, ("step:g1", "step:g3", "node:g2", "facts"))
    finally:
        flows.release_all()
        running.join()
    assert running.error is None
    store.close()


def _shown_and_fresh(page: Page, url: str) -> tuple[str, str]:
    """The main ``page`` shows, and the main a fresh load of ``url`` shows; same parts."""
    shown = page.locator("main").inner_html()
    fresh = page.context.new_page()
    try:
        fresh.goto(url)
        again = fresh.locator("main").inner_html()
    finally:
        fresh.close()
    assert _parts_of(shown) == _parts_of(again)
    return shown, again


def _same_parts(page: Page, again: str, keys: tuple[str, ...]) -> None:
    """Each part of ``keys`` on ``page`` holds what it holds in the fresh main ``again``."""
    for key in keys:
        selector = f'[data-part="{key}"]'
        assert page.locator(selector).inner_html() == fresh_html(again, key), key


def fresh_html(main_html: str, key: str) -> str:
    """The inner markup of the part ``key`` of a main, as the browser serialises it."""
    from executionkit._cli._serve._parts import split  # noqa: PLC0415 - the one use

    cut = split(main_html)
    assert cut is not None
    part = cut[1][key]
    return part[part.index(">") + 1 : part.rindex("<")]


def test_without_the_workflow_each_step_recorded_comes_as_list_changes(
    page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server without --workflow knows the steps recorded only: each adds a row, a node, an
    edge and a timeline row, sent as changes to the page's lists, not the page again."""
    still = time.time()
    monkeypatch.setattr(_clock, "wall", lambda: still)
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    responses: list[Response] = []

    def seen(response: Response) -> None:
        if "live=1" in response.url:
            responses.append(response)

    running = flows.Background(flows.gated_chain(STEPS), store, "chain")
    try:
        for number in range(1, 150):  # half the chain recorded: a big page to follow
            assert flows.begun(f"g{number}").wait(flows.GATE_WAIT)
            flows.gate(f"g{number}").set()
        assert flows.begun("g150").wait(flows.GATE_WAIT)
        with flows.serving(f"sqlite:///{path}") as served:  # no workflow: it runs nothing
            page.on("response", seen)
            page.goto(f"{served.url}run?id=chain")
            expect(page.locator('tr[data-step="g149"] .status')).to_have_text("done")
            expect(page.locator('tr[data-step="g150"]')).to_have_count(0)
            full = len(page.content())
            for number in range(150, 153):
                responses.clear()
                flows.gate(f"g{number}").set()
                assert flows.begun(f"g{number + 1}").wait(flows.GATE_WAIT)
                expect(page.locator(f'tr[data-step="g{number}"] .status')).to_have_text(
                    "done", timeout=WAIT
                )
                expect(page.locator(f'g[data-part="node:g{number}"]')).to_have_count(1)
                fetched = [
                    {"size": len(r.body()), "state": json.loads(r.body())} for r in responses
                ]
                assert all("html" not in poll["state"] for poll in fetched), "sent whole"
                assert any("lists" in poll["state"] for poll in fetched), fetched
                assert max(poll["size"] for poll in fetched) < 10_000, fetched
            assert full > 100_000
            # What the page shows after its changes is what a fresh load shows.
            shown, again = _shown_and_fresh(page, f"{served.url}run?id=chain")
            assert shown.count('class="edge"') == again.count('class="edge"') == 152
            graph = 'svg[data-list="graph"]'
            for name in ("height", "viewBox", "width"):
                assert page.locator(graph).get_attribute(name) == _attribute(again, name), name
            _same_parts(
                page, again, ("step:g151", "step:g152", "node:g152", "timeline:g152", "facts")
            )
    finally:
        flows.release_all()
        running.join()
    assert running.error is None
    store.close()


def _attribute(main_html: str, name: str) -> str:
    """An attribute of the graph's svg in a main, as the browser serialises it."""
    import re  # noqa: PLC0415 - the one use

    found = re.search(rf'<svg class="graph"[^>]*?\s{name}="([^"]*)"', main_html)
    assert found is not None, name
    return found.group(1)
