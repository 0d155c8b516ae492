"""Durations and the timeline of a run another process ran (issue 35), in a real browser.

``executionkit run`` runs a workflow in a subprocess into an SQLite database: its
``parse`` step fails its first attempt and is retried after a backoff, and a map
runs three items. The server did not run it and heard none of its events: the
steps table's durations and attempts, and the timeline drawn on the server,
come from the checkpoint's ``attempts`` alone.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest
import serve_workflows as flows
from cli_runner import run_subprocess
from playwright.sync_api import expect
from test_serve_browser import dialogs  # noqa: F401 - the fixture `pytestmark` uses

from executionkit._cli._step_times import duration_text, step_times
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    from playwright.sync_api import Page

pytestmark = pytest.mark.usefixtures("dialogs")  # no dialog ever opens: no script of a value runs

FLOW = """\
from executionkit import Step, Workflow, current_step


def parse(ctx):
    if current_step().attempt == 1:
        raise ValueError("the model answered nonsense")
    return "parsed " + ctx["fetch"]


workflow = Workflow(
    [
        Step("fetch", lambda ctx: "text"),
        Step("parse", parse, depends_on=("fetch",), retries=1, retry_delay=0.3, retry_jitter=0),
        Step("chunks", lambda ctx: [1, 2, 3]),
        Step.map("score", lambda item, ctx: item * 2, over="chunks", depends_on=("parse",)),
    ]
)
"""
ATTEMPTS, DURATION = 3, 4  # the steps table's columns


RUN_ID = "elsewhere"


def _ran_elsewhere(tmp_path: Path) -> str:
    """Run the workflow in another process into ``runs.db`` as run `RUN_ID`: the location."""
    (tmp_path / "timeline_flow.py").write_text(FLOW, encoding="utf-8")
    where = f"sqlite:///runs.db?run_id={RUN_ID}"
    outcome = run_subprocess(tmp_path, "run", "timeline_flow:workflow", "--checkpoint", where)
    assert outcome.code == 0, outcome.err
    return f"sqlite:///{tmp_path / 'runs.db'}"


def _cell(page: Page, step: str, column: int) -> Any:
    return page.locator(f'tr[data-step="{step}"] td').nth(column)


def test_a_run_from_another_process_shows_durations_and_its_retry(
    page: Page, tmp_path: Path
) -> None:
    """The table's durations are the checkpoint's; the timeline draws the failed attempt first."""
    url = _ran_elsewhere(tmp_path)
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        checkpoint = store.load(RUN_ID)
    finally:
        store.close()
    assert checkpoint is not None
    times = step_times(checkpoint, {"fetch", "parse", "chunks", "score"})
    assert set(times) == {"fetch", "parse", "chunks", "score"}, checkpoint.attempts
    with flows.serving(url) as served:
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(f"{served.url}run?id={RUN_ID}")
        for step in ("fetch", "parse", "chunks", "score"):
            expect(_cell(page, step, DURATION)).to_have_text(duration_text(times[step].duration))
        expect(_cell(page, "parse", ATTEMPTS)).to_have_text("2")
        assert times["parse"].duration >= 300  # the backoff is part of it
        expect(page.locator("p.note").first).to_contain_text("Durations and attempts come from")

        timeline = page.locator("div.timeline")
        expect(page.get_by_role("heading", name="Timeline")).to_be_visible()
        expect(timeline.locator(".tl-legend")).to_contain_text("rate limited")
        parse = timeline.locator('[data-part="timeline:parse"]')
        bars = parse.locator("rect.tl-bar")
        expect(bars).to_have_count(2)
        failed, ok = bars.nth(0), bars.nth(1)
        expect(failed).to_have_class("tl-bar tl-failed")
        expect(ok).to_have_class("tl-bar tl-ok")
        expect(failed.locator("title")).to_have_text(
            re.compile(r"^parse · attempt 1 · failed · started \d{4}-\d\d-\d\d [\d:.]+ UTC · ")
        )
        failed_box, ok_box = failed.bounding_box(), ok.bounding_box()
        assert failed_box is not None
        assert ok_box is not None
        assert failed_box["x"] + failed_box["width"] < ok_box["x"]  # the backoff between them
        gap = parse.locator("g.tl-gap")
        expect(gap.locator("title")).to_contain_text("retry backoff")
        expect(gap.locator("text")).to_have_text("retry backoff")
        expect(gap.locator("text")).to_be_visible()
        assert failed.evaluate("bar => getComputedStyle(bar).fill") != ok.evaluate(
            "bar => getComputedStyle(bar).fill"
        )

        lines = timeline.locator(".tl-row > .tl-line, .tl-row > details > summary")
        expect(lines).to_have_count(4)
        heights = {
            round(box["height"]) for box in (line.bounding_box() for line in lines.all()) if box
        }
        assert heights == {18}, heights

        score = timeline.locator('[data-part="timeline:score"]')
        expect(score.locator("summary .tl-note")).to_have_text("3 items")
        expect(score.locator(".tl-subline").first).to_be_hidden()
        score.locator("summary").click()
        expect(score.locator(".tl-subline")).to_have_count(3)
        expect(score.locator(".tl-subline").first).to_be_visible()
