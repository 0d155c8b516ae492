"""``executionkit serve`` in a real browser: Debian's chromium, driven by playwright.

Each test serves a location of its own from an in-process server (`serving`),
stopped however the test ends. Steps are held by gates (`threading.Event`), never
by sleeps: the test opens a gate once the page shows what it must meanwhile, and
playwright's ``expect`` waits for the page to follow.

``EXECUTIONKIT_SCREENSHOTS=1`` also saves the two screenshots the docs show.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import serve_workflows as flows
from playwright.sync_api import expect

from executionkit import WorkflowFailed
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Page

    from executionkit import Workflow

SCREENSHOTS = os.environ.get("EXECUTIONKIT_SCREENSHOTS") == "1"
IMAGES = Path(__file__).resolve().parents[3] / "docs" / "images"
WAIT = 15_000  # ms that playwright waits for the page to show what is expected


@pytest.fixture(autouse=True)
def _fresh_gates() -> Iterator[None]:
    flows.reset()
    try:
        yield
    finally:
        flows.release_all()


@pytest.fixture
def dialogs(page: Page) -> Iterator[list[str]]:
    """Every dialog the page opens (an alert would mean a script ran): none, in every test."""
    opened: list[str] = []

    def seen(dialog: Any) -> None:
        opened.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", seen)
    yield opened
    assert opened == []


def _run(workflow: Workflow, store: SQLiteStore, run_id: str) -> None:
    """Run ``workflow`` into ``store`` until it ends, fails or waits.

    In a thread of its own: playwright's sync API runs an event loop in this one.
    """
    run = flows.Background(workflow, store, run_id)
    run.join()
    assert run.error is None or isinstance(run.error, WorkflowFailed), run.error


def _database(tmp_path: Path) -> tuple[str, SQLiteStore]:
    return f"sqlite:///{tmp_path / 'runs.db'}", SQLiteStore(tmp_path / "runs.db")


def _status(page: Page) -> Any:
    return page.locator("dl.facts .status")


def test_runs_page_lists_runs_with_their_status(
    page: Page, dialogs: list[str], tmp_path: Path
) -> None:
    """The runs page shows each run with its status word: running, waiting, failed, finished."""
    url, store = _database(tmp_path)
    _run(flows.failing(), store, "failed-run")
    _run(flows.approval(), store, "waiting-run")
    flows.gate("open").set()
    _run(flows.live("open"), store, "finished-run")
    running = flows.Background(flows.live(), store, "running-run")
    try:
        assert flows.begun("slow").wait(flows.GATE_WAIT)
        with flows.serving(url) as served:
            page.goto(served.url)
            rows = page.locator("table.runs tbody tr")
            expect(rows).to_have_count(4)
            for run_id, status in (
                ("failed-run", "failed"),
                ("waiting-run", "waiting"),
                ("finished-run", "finished"),
                ("running-run", "running"),
            ):
                row = rows.filter(has=page.get_by_role("link", name=run_id, exact=True))
                expect(row.locator(".status")).to_have_text(status)
            expect(rows.filter(has_text="waiting-run")).to_contain_text("approve")
            if SCREENSHOTS:
                page.screenshot(path=str(IMAGES / "serve-runs.png"), full_page=True)
    finally:
        flows.release_all()
        running.join()
    assert running.error is None


def test_run_page_follows_a_running_run_to_its_end(
    page: Page, dialogs: list[str], tmp_path: Path
) -> None:
    """A run's page shows it running, then follows it to finished without a reload."""
    url, store = _database(tmp_path)
    running = flows.Background(flows.live(), store, "live")
    try:
        assert flows.begun("slow").wait(flows.GATE_WAIT)
        with flows.serving(url, flows.live(), "serve_workflows:live") as served:
            page.goto(f"{served.url}run?id=live")
            expect(_status(page)).to_have_text("running")
            expect(page.locator('tr[data-step="first"] .status')).to_have_text("done")
            expect(page.locator('tr[data-step="last"] .status')).to_have_text("pending")
            page.evaluate("window.notReloaded = true")
            flows.gate("slow").set()
            running.join()
            expect(_status(page)).to_have_text("finished", timeout=WAIT)
            expect(page.locator('tr[data-step="last"]')).to_contain_text("slow done, last done")
            assert page.evaluate("window.notReloaded") is True
            expect(page.locator("main")).to_have_attribute("data-followed", "done")
    finally:
        flows.release_all()
        running.join()
    assert running.error is None


def test_answering_by_the_form_resumes_the_run_to_its_end(
    page: Page, dialogs: list[str], tmp_path: Path
) -> None:
    """The Answer button saves the answer, the run resumes here, and the page shows its end."""
    url, store = _database(tmp_path)
    _run(flows.approval(), store, "review")
    with flows.serving(url, flows.approval(), "serve_workflows:approval") as served:
        page.goto(f"{served.url}run?id=review")
        expect(_status(page)).to_have_text("waiting")
        if SCREENSHOTS:
            page.screenshot(path=str(IMAGES / "serve-run.png"), full_page=True)
        page.get_by_label("approve").fill("yes")
        page.get_by_role("button", name="Answer").click()
        expect(_status(page)).to_have_text("running", timeout=WAIT)
        assert flows.begun("publish").wait(flows.GATE_WAIT)
        flows.gate("publish").set()
        expect(_status(page)).to_have_text("finished", timeout=WAIT)
        expect(page.locator('tr[data-step="publish"]')).to_contain_text("published: yes")
        expect(page.locator('tr[data-step="publish"] td').nth(3)).to_have_text("1")
    checkpoint = store.load("review")
    assert checkpoint is not None
    assert checkpoint.outputs["approve"] == "yes"
    assert checkpoint.outputs["publish"] == "published: yes"
    assert flows.calls == {"publish": 1}


def test_a_check_that_refuses_shows_its_message_and_saves_nothing(
    page: Page, dialogs: list[str], tmp_path: Path
) -> None:
    """An answer the step's check refuses is shown refused, with its message; nothing is saved."""
    url, store = _database(tmp_path)
    _run(flows.approval(), store, "review")
    before = store.load("review")
    assert before is not None
    with flows.serving(url, flows.approval(), "serve_workflows:approval") as served:
        page.goto(f"{served.url}run?id=review")
        page.get_by_label("approve").fill("maybe")
        page.get_by_role("button", name="Answer").click()
        expect(page.get_by_role("alert")).to_contain_text("answer yes or no")
        expect(page.get_by_role("alert")).to_contain_text("nothing was saved")
        expect(_status(page)).to_have_text("waiting")
    after = store.load("review")
    assert after is not None
    assert after.seq == before.seq
    assert "approve" not in after.outputs
    assert flows.calls == {}


def test_two_tabs_answering_one_question_resume_it_once(
    page: Page, dialogs: list[str], tmp_path: Path
) -> None:
    """Two tabs answer the same question: the first resumes the run, the second is refused."""
    url, store = _database(tmp_path)
    _run(flows.approval(), store, "review")
    with flows.serving(url, flows.approval(), "serve_workflows:approval") as served:
        other = page.context.new_page()
        for tab in (page, other):
            tab.goto(f"{served.url}run?id=review")
            expect(_status(tab)).to_have_text("waiting")
        page.get_by_label("approve").fill("yes")
        page.get_by_role("button", name="Answer").click()
        assert flows.begun("publish").wait(flows.GATE_WAIT)  # held in the first resume
        other.get_by_label("approve").fill("no")
        other.get_by_role("button", name="Answer").click()
        expect(other.get_by_role("alert")).to_contain_text("nothing ran")
        flows.gate("publish").set()
        expect(_status(page)).to_have_text("finished", timeout=WAIT)
        expect(page.locator('tr[data-step="publish"]')).to_contain_text("published: yes")
        other.close()
    checkpoint = store.load("review")
    assert checkpoint is not None
    assert checkpoint.outputs["publish"] == "published: yes"
    assert flows.calls == {"publish": 1}


def test_an_answer_to_a_run_another_process_owns_runs_nothing(
    page: Page, dialogs: list[str], tmp_path: Path
) -> None:
    """While another owner holds the run's claim, an answer is refused and nothing is saved."""
    url, store = _database(tmp_path)
    _run(flows.approval(), store, "review")
    before = store.load("review")
    assert before is not None
    with flows.serving(url, flows.approval(), "serve_workflows:approval") as served:
        page.goto(f"{served.url}run?id=review")
        with SQLiteStore(tmp_path / "runs.db").claim("review"):
            page.get_by_label("approve").fill("yes")
            page.get_by_role("button", name="Answer").click()
            expect(page.get_by_role("alert")).to_contain_text("owned by process")
            expect(page.get_by_role("alert")).to_contain_text("nothing ran")
    after = store.load("review")
    assert after is not None
    assert after.seq == before.seq
    assert flows.calls == {}


def test_hostile_text_stays_text(page: Page, dialogs: list[str], tmp_path: Path) -> None:
    """A script in an output, a step name and a question is shown as text and never runs."""
    url, store = _database(tmp_path)
    _run(flows.approval(), store, "review")
    with flows.serving(url, flows.approval(), "serve_workflows:approval") as served:
        page.goto(f"{served.url}run?id=review")
        expect(page.locator("p.question")).to_have_text(flows.HOSTILE_QUESTION)
        expect(page.locator('tr[data-step="draft"] code.preview')).to_have_text(
            f'"{flows.HOSTILE}"'
        )
        expect(page.locator("td.step-name", has_text=flows.HOSTILE_NAME)).to_have_count(1)
        expect(page.locator("svg.graph")).to_contain_text(flows.HOSTILE_NAME[:21])
        assert page.locator("main script, main img").count() == 0
        page.get_by_role("link", name="whole output").first.click()
        expect(page.locator("body")).to_contain_text(flows.HOSTILE)
