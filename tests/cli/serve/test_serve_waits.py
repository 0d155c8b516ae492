"""The page shows waits (`Step.wait`): the run is waiting, the step too, and when each is due."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import serve_workflows as flows
from test_serve import _request

from executionkit import Step, Workflow
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path


def _time(moment: str) -> str:
    """A time as the page shows it: to the second, in UTC, the whole of it in its title."""
    shown = datetime.fromisoformat(moment).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f'<time datetime="{moment}" title="{moment}">{shown}</time>'


def test_a_run_waiting_for_a_timer_says_when_it_is_due(tmp_path: Path) -> None:
    child = Workflow([Step.wait("cool_down", seconds=7200)])
    workflow = Workflow(
        [
            Step("invite", lambda ctx: "invited"),
            Step.wait("pause", seconds=3600, depends_on=("invite",)),
            Step("nested", child),
        ]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        result = workflow.run_sync(checkpoint_fn=store, run_id="timed")
    finally:
        store.close()
    due = result.waits["pause"].isoformat()
    nested = result.waits["nested/cool_down"].isoformat()
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}") as served:
        _, _, runs = _request(served.url, "/")
        _, _, page = _request(served.url, "/run?id=timed")
    assert "waiting" in runs
    until = f"pause at {_time(due)}; nested/cool_down at {_time(nested)}"
    assert f"<dt>waiting until</dt><dd>{until}</dd>" in page
    table = page.split("<h2>Graph</h2>")[1]
    assert (
        '<td class="step-name">pause</td><td>step</td>'
        '<td><span class="status status-waiting">waiting</span></td>'
    ) in table
    nested_row = re.search(r'<td class="step-name">nested</td><td>\w*</td><td>(.*?)</td>', table)
    assert nested_row is not None
    assert nested_row.group(1) == '<span class="status status-waiting">waiting</span>'
