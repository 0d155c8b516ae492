"""The page and the store's inbox: answers saved for a worker, submitted runs, runs left alone.

Without ``--workflow`` the page's form saves an answer in the inbox (nothing runs
in the server) once its question is found pending; the run's page then shows it
waiting for a worker. Submitted runs with no checkpoint are listed as
``submitted`` with their input names, never their values; a run a worker left
alone shows the reason. With ``--workflow``, a run whose steps' code changed
since their outputs were recorded says which, with both fingerprints.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
import serve_workflows as flows
from test_serve import _fresh_gates, _refused, _request, _run, _token  # noqa: F401 - an autouse fixture

from executionkit import Step, Workflow
from executionkit._cli._location import parse_location
from executionkit._cli._worker import Worker
from executionkit._define._code import fingerprint
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

SECRET = "sk-live-0123456789-never-shown"  # noqa: S105 - an input value no page may show
HOSTILE_REASON = "<script>alert('left')</script> needs the inputs 'topic'"


@pytest.fixture
def waiting(tmp_path: Path) -> tuple[str, SQLiteStore]:
    """A database holding the run ``review``, waiting for its answer to ``approve``."""
    store = SQLiteStore(tmp_path / "runs.db")
    _run(flows.approval(), store, "review")
    return f"sqlite:///{tmp_path / 'runs.db'}", store


def _answer(url: str, token: str, path: str, value: str, run: str = "review") -> Any:
    form = {"token": token, "run": run, "path": path, "value": value}
    return _request(url, "/answer", method="POST", form=form)


def _refuse(url: str, token: str, path: str, value: str, run: str = "review") -> Any:
    """An answer refused: the status and the page it is redirected to (``None`` headers)."""
    status, page = _refused(url, {"token": token, "run": run, "path": path, "value": value})
    return status, None, page


def _shown(moment: str) -> str:
    """A recorded time as the pages show it: to the second, in UTC."""
    return datetime.fromisoformat(moment).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _row(runs_page: str, run_id: str) -> str:
    """The runs page's row of ``run_id``."""
    link = f'<a href="/run?{urlencode({"id": run_id})}">'
    start = runs_page.index(link)
    return runs_page[runs_page.rindex("<tr>", 0, start) : runs_page.index("</tr>", start)]


def test_an_answer_without_a_workflow_is_saved_for_a_worker_and_runs_nothing(
    waiting: tuple[str, SQLiteStore],
) -> None:
    url, store = waiting
    before = store.load("review")
    assert before is not None
    with flows.serving(url) as served:
        page = _request(served.url, "/run?id=review")[2]
        assert '<form method="post" action="/answer" class="answer">' in page
        assert "answer saved" not in page
        status, headers, _ = _answer(served.url, _token(page), "approve", "yes")
        assert status == 303
        assert headers["Location"] == "/run?id=review&saved=approve"
        after = store.load("review")
        assert after is not None
        assert after.seq == before.seq  # nothing ran, nothing was checkpointed
        assert "approve" not in after.outputs
        assert flows.calls == {}
        assert store.inbox.answers("review") == {"approve": "yes"}
        status, _, page = _request(served.url, headers["Location"])
        assert status == 200
        assert (
            '<p class="saved-answer">answer saved, waiting for a worker: '
            "<code>&quot;yes&quot;</code></p>"
        ) in page
        notice = re.search(r'<p class="notice" role="status">(.*?)</p>', page)
        assert notice is not None
        assert notice[1].startswith("Saved the answer to approve. Nothing runs in this server")
        assert f"worker {url} --workflow MODULE:ATTR" in notice[1]
        assert (
            "Another answer to approve given before a worker takes this one replaces it"
            in (notice[1])
        )
        assert "it replaces the answer saved" in page  # the form says what a second one does
        assert '<p class="notice"' not in _request(served.url, "/run?id=review")[2]

        status, headers, _ = _answer(served.url, _token(page), "approve", "no")
        assert status == 303
        assert store.inbox.answers("review") == {"approve": "no"}  # the second replaced it
        page = _request(served.url, headers["Location"])[2]
        assert "<code>&quot;no&quot;</code>" in page
        assert "&quot;yes&quot;" not in page
        latest = store.load("review")
        assert latest is not None
        assert latest.seq == before.seq

        flows.gate("publish").set()
        made = Worker(parse_location(url), flows.approval(), log=lambda _line: None)
        asyncio.run(_look(made))  # a worker takes the saved answer and resumes the run
        page = _request(served.url, "/run?id=review")[2]
    done = store.load("review")
    assert done is not None
    assert done.outputs["publish"] == "published: no"
    assert store.inbox.answers("review") == {}
    assert "answer saved" not in page
    assert "status-finished" in page


async def _look(made: Worker) -> None:
    try:
        await made.step()
        await made.settle()
    finally:
        await made.stop()


def test_an_answer_to_no_question_waiting_is_refused_and_saves_nothing(
    waiting: tuple[str, SQLiteStore],
) -> None:
    url, store = waiting
    with flows.serving(url) as served:
        token = _token(_request(served.url, "/run?id=review")[2])
        status, _, page = _refuse(served.url, token, "nope", "yes")
        assert status == 200
        assert (
            "run review has no question nope waiting for an answer (waiting: approve); "
            "nothing was saved"
        ) in page
        assert '<form method="post" action="/answer"' in page  # the run's page, to try again
        status, _, page = _refuse(served.url, token, "approve", "yes", run="unknown")
        assert status == 404
        assert "the location holds no checkpoint of run unknown, so no question" in page
        status, _, page = _refuse(served.url, token, "approve", "NaN")
        assert status == 200
        assert "quote it as a JSON string" in page
        status, _, _ = _answer(served.url, "not-the-token", "approve", "yes")
        assert status == 403
        form = {"token": token, "run": "review", "path": "approve"}  # no value
        assert _request(served.url, "/answer", method="POST", form=form)[0] == 404
        assert _request(served.url, "/other", method="POST", form=form)[0] == 405
    assert store.inbox.answers("review") == {}
    assert store.inbox.answers("unknown") == {}


def test_an_answer_to_a_question_answered_since_is_refused(tmp_path: Path) -> None:
    """The question is checked against the run's latest checkpoint, not the page shown."""
    store = SQLiteStore(tmp_path / "runs.db")
    _run(flows.approval(), store, "review")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with flows.serving(url) as served:
        token = _token(_request(served.url, "/run?id=review")[2])
        flows.gate("publish").set()
        flows.approval().run_sync(
            {}, checkpoint_fn=store, resume_from=store.load("review"), answers={"approve": "no"}
        )
        status, _, page = _refuse(served.url, token, "approve", "yes")
    assert status == 200
    assert "has no question approve waiting for an answer (waiting: none)" in page
    assert store.inbox.answers("review") == {}


def _pages(url: str, paths: list[str]) -> dict[str, str]:
    pages = {}
    for path in paths:
        status, _, page = _request(url, path)
        assert status == 200, (path, page)
        pages[path] = page
    return pages


def _keyed() -> Workflow:
    return Workflow(
        [
            Step("draft", lambda ctx: f"about {ctx['topic']}"),
            Step.ask("approve", lambda ctx: "Publish it?", depends_on=("draft",)),
        ],
        inputs=("topic", "api_secret"),
    )


@pytest.mark.parametrize("workflow", [False, True])
def test_a_submitted_run_shows_its_input_names_never_their_values(
    tmp_path: Path, *, workflow: bool
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    _run(flows.approval(), store, "review")
    inputs = {"topic": "cats", "api_secret": SECRET}
    _keyed().submit(store, inputs, run_id="queued", metadata={"workflow": "flows:keyed"})
    _keyed().submit(store, inputs, run_id="started")
    _keyed().run_sync(inputs, checkpoint_fn=store, run_id="started")  # as a worker starts it
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    serving = flows.serving(url, _keyed(), "flows:keyed") if workflow else flows.serving(url)
    with serving as served:
        pages = _pages(
            served.url,
            ["/", "/run?id=queued", "/run?id=started", "/run?id=queued&live=1"],
        )
        assert _request(served.url, "/run?id=queued&child=x")[0] == 404
        if not workflow:  # no checkpoint, so no question waits: refused, on the run's page
            token = _token(_request(served.url, "/run?id=review")[2])
            status, _, refused = _refuse(served.url, token, "approve", "yes", run="queued")
            assert status == 200
            assert "no checkpoint of run queued, so no question of it waits" in refused
            assert "not started yet: a worker starts it" in refused
            assert store.inbox.answers("queued") == {}
    runs = pages["/"]
    assert "3 runs, newest first" in runs
    rows = [runs.index(_row(runs, run_id)) for run_id in ("queued", "started", "review")]
    assert rows == sorted(rows)  # not started yet first, then the newest checkpoint first
    row = _row(runs, "queued")
    assert '<span class="status status-submitted">submitted</span>' in row
    assert "status-submitted" not in _row(runs, "started")
    queued = pages["/run?id=queued"]
    submission = store.inbox.submission("queued")
    assert submission is not None
    submitted_at = submission.submitted_at
    assert (
        f'<dt>submitted</dt><dd>submitted at <time datetime="{submitted_at}" '
        f'title="{submitted_at}">{_shown(submitted_at)}</time>, not started yet: a worker '
        f"starts it</dd>"
    ) in queued
    assert "<dt>inputs</dt><dd>api_secret, topic (names only" in queued
    assert f"worker {url} --workflow flows:keyed" in queued
    assert "<dt>inputs</dt><dd>api_secret, topic (names only" in pages["/run?id=started"]
    for path, page in pages.items():
        assert SECRET not in page, path


@pytest.mark.parametrize("suffix", ["json", "jsonl"])
def test_a_file_shows_its_submitted_run_then_its_left_alone_note(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"run.{suffix}"
    store = JsonFileStore(path) if suffix == "json" else JsonLinesStore(path)
    _keyed().submit(store, {"topic": "cats", "api_secret": SECRET}, run_id="file-run")
    with flows.serving(str(path)) as served:
        runs = _request(served.url, "/")[2]
        page = _request(served.url, "/run?id=file-run")[2]
        assert _request(served.url, "/run?id=other")[0] == 404
    assert '<span class="status status-submitted">submitted</span>' in _row(runs, "file-run")
    assert "not started yet: a worker starts it" in page
    assert "<dt>inputs</dt><dd>api_secret, topic (names only" in page
    assert SECRET not in runs + page
    store.inbox.leave_alone("file-run", HOSTILE_REASON)
    with flows.serving(str(path)) as served:
        runs = _request(served.url, "/")[2]
        page = _request(served.url, "/run?id=file-run")[2]
    assert '<span class="left-alone-mark">left alone</span>' in _row(runs, "file-run")
    assert f'<p class="reason">{escape(HOSTILE_REASON)}</p>' in page
    assert "<script>alert" not in page


def test_a_run_left_alone_shows_its_reason_as_text(waiting: tuple[str, SQLiteStore]) -> None:
    url, store = waiting
    _run(flows.failing(), store, "other")
    store.inbox.leave_alone("review", HOSTILE_REASON)
    with flows.serving(url) as served:
        runs = _request(served.url, "/")[2]
        page = _request(served.url, "/run?id=review")[2]
        other = _request(served.url, "/run?id=other")[2]
        token = _token(page)
        assert _answer(served.url, token, "approve", "yes")[0] == 303
        after = _request(served.url, "/")[2]
    row = _row(runs, "review")
    assert '<span class="status status-waiting">waiting</span>' in row  # the word unchanged
    assert '<span class="left-alone-mark">left alone</span>' in row
    assert "left-alone-mark" not in _row(runs, "other")
    assert "<h2>Left alone by a worker</h2>" in page
    assert f'<p class="reason">{escape(HOSTILE_REASON)}</p>' in page
    assert "&lt;script&gt;alert(&#x27;left&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in runs + page
    assert "Left alone" not in other
    assert "left-alone-mark" not in after  # a new answer: workers try the run again
    assert store.inbox.left_alone() == {}


STEPS = """\
from executionkit import Step, Workflow


def draft(ctx):
    return {text!r}


workflow = Workflow(
    [
        Step("draft", draft),
        Step.ask("approve", lambda ctx: "Send it?", depends_on=("draft",)),
    ]
)
"""


def _deploy(folder: Path, text: str) -> ModuleType:
    """Write the steps' module (each version a different size: no stale .pyc) and load it."""
    (folder / "served_steps.py").write_text(STEPS.format(text=text), encoding="utf-8")
    importlib.invalidate_caches()
    module = sys.modules.get("served_steps")
    if module is None:
        return importlib.import_module("served_steps")
    return importlib.reload(module)


def test_the_page_lists_the_steps_whose_code_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "served_steps", raising=False)
    first = _deploy(tmp_path, "draft one")
    store = SQLiteStore(tmp_path / "runs.db")
    first.workflow.run_sync(checkpoint_fn=store, run_id="edited")
    checkpoint = store.load("edited")
    assert checkpoint is not None
    old = checkpoint.step_info["draft"]["code"]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with flows.serving(url, first.workflow, "served_steps:workflow") as served:
        assert "Code changed" not in _request(served.url, "/run?id=edited")[2]
    edited = _deploy(tmp_path, "draft number two")
    new = fingerprint(edited.draft)
    assert new != old
    with flows.serving(url, edited.workflow, "served_steps:workflow") as served:
        page = _request(served.url, "/run?id=edited")[2]
    assert "<h2>Code changed since recorded</h2>" in page
    assert f"<p>step <code>draft</code> ({old} → {new}); running it again" in page
    with flows.serving(url) as served:  # without the workflow: nothing to compare with
        assert "Code changed" not in _request(served.url, "/run?id=edited")[2]
    other = Workflow([Step("unrelated", lambda ctx: 1)])
    with flows.serving(url, other, "x:y") as served:  # its plan refuses the run: no box
        status, _, page = _request(served.url, "/run?id=edited")
    assert status == 200
    assert "Code changed" not in page
