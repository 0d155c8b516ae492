"""What an operator reads across runs (issue 35), in a real browser (chromium, via playwright).

The inbox answering two runs (the second dropping off live), the runs page
filtered and searched, a fork's lineage link and its comparison, and step names
that wrap only where a word ends. The read-only tests share one database and one
server for the module (`test_serve_operators._database`); the inbox test makes
its own.
"""

from __future__ import annotations

import functools
import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
import serve_workflows as flows
from playwright.sync_api import expect
from test_serve_browser import WAIT, dialogs  # noqa: F401 - the fixture `pytestmark` uses
from test_serve_operators import PRICES, _answered, _database, _waiting, operations

from executionkit import Prices
from executionkit._prices import dollars_text
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from playwright.sync_api import Page, Response


def _aside(work: Callable[[], Any]) -> Any:
    """``work()`` in a thread of its own: playwright's sync API runs an event loop in this one."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def call() -> None:
        try:
            done.append(work())
        except BaseException as exc:  # noqa: BLE001 - raised again below
            failed.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(flows.GATE_WAIT)
    if failed:
        raise failed[0]
    return done[0]


pytestmark = pytest.mark.usefixtures("dialogs")  # no dialog ever opens: no script of a value runs


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The operators' database, served without --workflow, with --prices."""
    folder = tmp_path_factory.mktemp("browser-operators")
    with flows.serving(_aside(lambda: _database(folder))) as serving:
        serving.app.source.prices = Prices(PRICES)
        yield serving


def _rows(page: Page) -> Any:
    return page.locator("table.runs tbody tr")


def test_the_inbox_answers_two_runs_and_follows_the_rest(page: Page, tmp_path: Path) -> None:
    """One answered by its form (the run resumes here); the other by another process, live."""
    store = SQLiteStore(tmp_path / "runs.db")
    _aside(lambda: _waiting(store, "alpha"))
    _aside(lambda: _waiting(store, "beta"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with flows.serving(url, operations(), "ops:operations") as serving:
        page.goto(serving.url)
        inbox = page.get_by_role("link", name="questions waiting: 2")
        inbox.click()
        questions = page.locator("section.inbox-question")
        expect(questions).to_have_count(2)
        expect(questions.nth(0)).to_contain_text("alpha")  # the oldest asked first
        alpha = questions.filter(has=page.get_by_role("link", name="alpha", exact=True))
        alpha.get_by_label("approve").fill("yes")
        alpha.get_by_role("button", name="Answer").click()
        expect(page).to_have_url(f"{serving.url}questions")  # back to the inbox
        expect(questions).to_have_count(1, timeout=WAIT)
        expect(questions.first).to_contain_text("beta")
        expect(page.get_by_role("link", name="questions waiting: 1")).to_be_visible()
        page.evaluate("window.notReloaded = true")
        _aside(lambda: _answered(store, "beta", "no"))  # elsewhere: the page drops it, live
        expect(questions).to_have_count(0, timeout=WAIT)
        expect(page.locator("main")).to_contain_text("No question waits for an answer")
        expect(page.get_by_role("link", name="questions waiting: 0")).to_be_visible()
        assert page.evaluate("window.notReloaded") is True
        serving.app.resumer.stop()
    for run_id, answer in (("alpha", "yes"), ("beta", "no")):
        checkpoint = store.load(run_id)
        assert checkpoint is not None
        assert checkpoint.outputs["approve"] == answer
    store.close()


def test_a_question_answered_elsewhere_drops_off_and_leaves_what_is_typed_in_the_others(
    page: Page, tmp_path: Path
) -> None:
    """One question going is one deletion, not the page again: typed text elsewhere stays."""
    store = SQLiteStore(tmp_path / "runs.db")
    for run_id in ("alpha", "beta", "gamma"):
        _aside(functools.partial(_waiting, store, run_id))
    polls: list[Response] = []

    def seen(response: Response) -> None:
        if "live=1" in response.url:
            polls.append(response)  # read once the page has changed (not in the handler)

    page.on("response", seen)
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}") as serving:  # saves for a worker
        page.goto(f"{serving.url}questions")
        questions = page.locator("section.inbox-question")
        expect(questions).to_have_count(3)
        gamma = questions.filter(has=page.get_by_role("link", name="gamma", exact=True))
        gamma.get_by_label("approve").fill("half-typed")
        polls.clear()
        _aside(lambda: _answered(store, "beta", "no"))  # a worker resumed it elsewhere
        expect(questions).to_have_count(2, timeout=WAIT)
        expect(page.locator("main")).to_contain_text("2 questions waiting for an answer")
        expect(gamma.get_by_label("approve")).to_have_value("half-typed")
        states = [json.loads(response.body()) for response in polls]
        assert all("html" not in state for state in states), "sent whole"
        assert any(
            state.get("lists", {}).get("questions", {}).get("ops")
            == [["k", 1], ["d", 1], ["k", 1]]
            for state in states
        ), states
    store.close()


def test_the_runs_page_filters_by_status_and_searches_run_ids(page: Page, served: Any) -> None:
    page.goto(served.url)
    expect(_rows(page)).to_have_count(50)
    page.locator("nav.filters").get_by_role("link", name="waiting").click()
    expect(_rows(page)).to_have_count(3)
    expect(page.locator("table.runs .status")).to_have_text(["waiting"] * 3)
    page.get_by_label("run id contains").fill("ALP")
    page.get_by_role("button", name="Search").click()
    expect(_rows(page)).to_have_count(1)
    expect(_rows(page).first).to_contain_text("alpha")
    assert "status=waiting" in page.url  # the search kept the status
    page.locator("nav.filters").get_by_role("link", name="all").click()
    expect(_rows(page)).to_have_count(1)  # and the status links keep the search
    page.get_by_label("run id contains").fill("bulk")
    page.get_by_label("run id contains").press("Enter")
    expect(_rows(page)).to_have_count(50)
    page.get_by_role("link", name="older").click()
    expect(_rows(page)).to_have_count(5)


def test_a_fork_links_to_its_parent_and_compares_with_it(page: Page, served: Any) -> None:
    page.goto(f"{served.url}run?id=fork-1")
    lineage = page.locator("section.lineage")
    expect(lineage).to_contain_text("overridden: double")
    expect(lineage.locator(".fork-note")).to_contain_text("<img src=x onerror=alert('note')>")
    lineage.get_by_role("link", name="done-1").click()
    forks = page.locator("table.forks tbody tr")
    expect(forks).to_have_count(1)
    expect(forks.first).to_contain_text("fork-1")
    page.go_back()
    lineage.get_by_role("link", name="compare with parent").click()
    expect(page.locator("h1")).to_have_text("Compare done-1 with fork-1")
    differ = page.locator("tr.compare-differs")
    expect(differ).to_have_count(2)
    expect(page.locator('tr[data-step="double"]')).to_contain_text("outputs differ")
    expect(page.locator('tr[data-step="publish"]')).to_contain_text("published (yes) 12")
    expect(page.locator("tr.compare-same")).to_have_count(3)
    page.locator('tr[data-step="double"]').get_by_role("link", name="whole output").last.click()
    expect(page.locator("body")).to_contain_text("[\n  1,\n  1,")


def test_the_dollars_on_the_pages_are_the_priced_spending(page: Page, served: Any) -> None:
    store = served.app.source.open_store()
    try:
        checkpoint = store.load("alpha")  # its first attempt failed: some dollars wasted
    finally:
        store.close()
    priced = checkpoint.spending.priced(Prices(PRICES))
    assert priced.wasted > 0
    page.goto(f"{served.url}?q=alpha")
    expect(_rows(page)).to_have_count(1)
    expect(_rows(page).first).to_contain_text(dollars_text(priced.total))
    _rows(page).first.get_by_role("link", name="alpha").click()
    money = page.locator("section.money")
    totals = money.locator("tr.total")
    expect(totals.first.locator("td")).to_have_text(
        [dollars_text(priced.total), dollars_text(priced.wasted)]
    )
    for name, dollars in priced.by_step.items():
        row = money.locator("tr", has=page.locator("td.step-name", has_text=name))
        expect(row.locator("td.number").first).to_have_text(dollars_text(dollars))
    for model, dollars in priced.by_model.items():
        row = money.locator("tr", has=page.locator("td.model", has_text=str(model)))
        expect(row.locator("td.number").first).to_have_text(dollars_text(dollars))
    facts = page.locator("dl.facts")
    expect(facts).to_contain_text(dollars_text(priced.total))


def test_step_names_never_break_mid_word_at_1280_px(page: Page, served: Any) -> None:
    """``collect_summaries`` beside a long output stays on one line (it broke as summar|ies)."""
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{served.url}run?id=alpha")
    cell = page.locator('tr[data-step="collect_summaries"] td.step-name')
    expect(cell).to_be_visible()
    lines = page.evaluate(
        """(cell) => {
            const range = document.createRange();
            range.selectNodeContents(cell);
            const height = range.getBoundingClientRect().height;
            const line = parseFloat(getComputedStyle(cell).lineHeight);
            return height / line;
        }""",
        cell.element_handle(),
    )
    assert lines < 1.5, f"the name takes {lines:.2f} lines"


def test_an_output_preview_wraps_between_values_never_inside_one(page: Page, served: Any) -> None:
    """``[0, 2, 4, ...]`` wraps after a comma: it broke as ``1|0`` mid-number."""
    page.set_viewport_size({"width": 640, "height": 800})  # a narrow window: it wraps
    page.goto(f"{served.url}run?id=done-1")
    preview = page.locator('tr[data-step="double"] code.preview')
    expect(preview).to_be_visible()
    lines, split = page.evaluate(
        """(code) => {
            const text = code.firstChild;
            const tops = new Set();
            const split = [];
            for (const found of text.data.matchAll(/\\d+/g)) {
                const range = document.createRange();
                range.setStart(text, found.index);
                range.setEnd(text, found.index + found[0].length);
                const rects = [...range.getClientRects()].filter((r) => r.width > 0);
                rects.forEach((r) => tops.add(Math.round(r.top)));
                if (rects.length !== 1) split.push(found[0]);
            }
            return [tops.size, split];
        }""",
        preview.element_handle(),
    )
    assert lines >= 2, "the preview fits one line here: this test would prove nothing"
    assert split == [], f"numbers broken across lines: {split}"
