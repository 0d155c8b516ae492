"""Text streamed by a run another process carries, on a page of a server that runs nothing.

``executionkit worker`` runs `stream_flow.paged` in a process of its own and keeps
what its step streams in the store's inbox (`StreamPublisher`); a read-only
server (no ``--workflow``) shows it on the run's page while the step runs, a
retry's text afresh, then the output. The HTTP tests check ``/stream``'s reading
of the inbox: a run's own steps only, and nothing of a run no process claims.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
import serve_workflows as flows
from cli_runner import ROOT
from playwright.sync_api import expect
from stream_flow import paged, workflow
from test_serve import _request

from executionkit import Step, Workflow
from executionkit.stores import PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from playwright.sync_api import Page

WAIT = 20_000  # milliseconds: the bound on every wait for the page
DEADLINE = 60.0  # seconds: the bound on waiting for the worker


@pytest.fixture
def worker(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A worker carrying run ``talker`` (submitted here) on a fresh SQLite database.

    Of `stream_flow.paged`, or of the workflow of `stream_flow` the test's
    parameter names (``indirect``). Its step waits for the files ``go-1``,
    ``go-2`` in ``tmp_path``; the worker is stopped with SIGTERM at the end,
    killed if it does not stop, in every outcome.
    """
    name = getattr(request, "param", "paged")
    location = f"sqlite:///{tmp_path / 'runs.db'}"
    store = SQLiteStore(tmp_path / "runs.db")
    {"paged": paged, "workflow": workflow}[name].submit(store, run_id="talker")
    store.close()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "EK_STREAM_DIR": str(tmp_path),
    }
    flags = ("--workflow", f"stream_flow:{name}", "--poll", "0.2")
    process = subprocess.Popen(  # noqa: S603 - our own interpreter
        [sys.executable, "-m", "executionkit", "worker", location, *flags],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield location, process
    finally:
        for go in ("go-1", "go-2"):  # a step still waiting ends at once
            (tmp_path / go).touch()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=30)


def _until_streaming(store: SQLiteStore, run_id: str) -> None:
    """Read the inbox every 10 ms until the run's step streams; fail at the deadline."""
    pause = threading.Event()
    for _ in range(int(DEADLINE / 0.01)):
        if store.inbox.streams(run_id):
            return
        pause.wait(0.01)
    pytest.fail(f"run {run_id!r} streamed nothing within {DEADLINE:g} s")


# Every text the page's <pre class="streamed"> elements hold, in the order shown.
_RECORD = """() => {
  window.shownTexts = [];
  const note = () => {
    for (const pre of document.querySelectorAll("pre.streamed")) {
      const text = pre.textContent;
      if (window.shownTexts[window.shownTexts.length - 1] !== text) {
        window.shownTexts.push(text);
      }
    }
  };
  note();
  new MutationObserver(note).observe(document.querySelector("main"),
    { subtree: true, childList: true, characterData: true });
}"""


def test_a_workers_step_streams_onto_a_page_served_by_another_process(
    page: Page, tmp_path: Path, worker: tuple[str, subprocess.Popen[str]]
) -> None:
    location, process = worker
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        _until_streaming(store, "talker")
        with flows.serving(location) as served:  # runs nothing: reads the store
            page.goto(f"{served.url}run?id=talker")
            page.evaluate(_RECORD)
            streamed = page.locator('pre.streamed[data-stream-step="talk"]')
            expect(streamed).to_have_text("attempt 1: hello world", timeout=WAIT)
            # Not recorded yet, and no --workflow here: its streaming says it runs.
            expect(page.locator('tr[data-step="talk"] .status')).to_have_text("running")
            assert _streamed(served.url, id="talker") == (
                200,
                {
                    "live": True,
                    "steps": {"talk": {"attempt": 1, "text": "attempt 1: hello world"}},
                },
            )
            (tmp_path / "go-1").touch()  # the first attempt fails: retried at once
            expect(streamed).to_have_text("attempt 2: hello world", timeout=WAIT)
            expect(streamed).to_have_attribute("data-attempt", "2")
            (tmp_path / "go-2").touch()
            expect(page.locator('tr[data-step="talk"]')).to_contain_text("spoken", timeout=WAIT)
            expect(page.locator("pre.streamed")).to_have_count(0, timeout=WAIT)
            shown: list[str] = page.evaluate("() => window.shownTexts")
    finally:
        store.close()
    # The text grew, attempt by attempt: the retry's never followed by the failed attempt's.
    assert "attempt 1: hello world" in shown
    assert "attempt 2: hello world" in shown
    first_retry = next(n for n, text in enumerate(shown) if text.startswith("attempt 2"))
    assert all(text.startswith("attempt 2") for text in shown[first_retry:]), shown
    assert all(text.startswith(("attempt 1", "attempt 2")) for text in shown), shown
    assert process.poll() is None, process.stderr


def test_the_text_a_killed_worker_left_is_never_shown(
    tmp_path: Path, worker: tuple[str, subprocess.Popen[str]]
) -> None:
    """kill -9 mid-step: the entry stays in the inbox, but no live process claims the run."""
    location, process = worker
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        first = {("talk", None): (1, "attempt 1: hello world")}
        _until(lambda: store.inbox.streams("talker") == first, "the first attempt's whole text")
        with flows.serving(location) as served:
            assert _streamed(served.url, id="talker")[1]["live"] is True
            process.kill()
            process.wait(timeout=60)
            assert store.inbox.streams("talker") == first  # left in the store
            assert _streamed(served.url, id="talker") == (200, {"live": False, "steps": {}})
            status, _, page = _request(served.url, "/run?id=talker")
            assert status == 200
            assert "hello world" not in page
            assert "data-stream=" not in page
            with store.claim("talker"):  # another process carries it on: not its text either
                assert _streamed(served.url, id="talker") == (200, {"live": True, "steps": {}})
                assert "hello world" not in _request(served.url, "/run?id=talker")[2]
    finally:
        store.close()


@pytest.mark.parametrize("worker", ["workflow"], indirect=True)
def test_a_run_streams_on_its_page_before_its_first_checkpoint(
    page: Page, tmp_path: Path, worker: tuple[str, subprocess.Popen[str]]
) -> None:
    """A submitted run's first step streams: its page, with no checkpoint yet, shows it."""
    location, process = worker
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        _until_streaming(store, "talker")
        assert store.load("talker") is None  # nothing recorded: the page of a submitted run
        with flows.serving(location) as served:
            page.goto(f"{served.url}run?id=talker")
            expect(page.get_by_role("heading", name="Running now")).to_be_visible()
            streamed = page.locator('pre.streamed[data-stream-step="talk"]')
            expect(streamed).to_have_text("attempt 1: hello world", timeout=WAIT)
            (tmp_path / "go-1").touch()
            expect(streamed).to_have_text("attempt 2: hello world", timeout=WAIT)
            expect(streamed).to_have_attribute("data-attempt", "2")
            (tmp_path / "go-2").touch()  # it ends: its checkpoint brings the run's page
            expect(page.locator('tr[data-step="talk"]')).to_contain_text("spoken", timeout=WAIT)
            expect(page.get_by_role("heading", name="Running now")).to_have_count(0)
            expect(page.locator("pre.streamed")).to_have_count(0)
    finally:
        store.close()
    assert process.poll() is None, process.stderr


def _recorded(store: SQLiteStore | PostgresStore, run_id: str) -> None:
    """Store a finished run ``run_id`` of steps ``draft`` and ``a/b``, for a page to exist."""
    steps = [Step("draft", lambda _ctx: "text"), Step("a/b", lambda _ctx: "other")]
    Workflow(steps).run_sync(checkpoint_fn=store, run_id=run_id)


def _holding(tmp_path: Path) -> SQLiteStore:
    """A database of run ``held`` (recorded); the store."""
    store = SQLiteStore(tmp_path / "runs.db")
    _recorded(store, "held")
    return store


def _streamed(url: str, **query: str) -> tuple[int, Any]:
    """``GET /stream`` with ``query``: the status and the JSON answered."""
    status, _, body = _request(url, f"/stream?{urlencode(query)}")
    return status, json.loads(body)


def test_stream_reads_a_claimed_runs_own_steps_from_the_inbox(tmp_path: Path) -> None:
    store = _holding(tmp_path)
    texts: dict[tuple[str, str | None], tuple[int, str]] = {
        ("draft", None): (2, "the retry's text"),
        ("a%2Fb", None): (1, "a step whose name holds a slash"),
        ("map", "7"): (1, "item seven"),
        ("map", "8"): (3, "item eight"),
        ("sub/inner", None): (1, "a sub-workflow's step: on the sub-workflow's page"),
    }
    try:
        with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}") as served:
            store.inbox.put_streams("held", texts)  # as a process killed mid-step left it
            assert _streamed(served.url, id="held") == (200, {"live": False, "steps": {}})
            with store.claim("held"):  # a live process carries it now
                # Written before its claim: the killed process's text, not the owner's.
                assert _streamed(served.url, id="held") == (200, {"live": True, "steps": {}})
                status, _, page = _request(served.url, "/run?id=held")
                assert status == 200
                assert 'pre class="streamed"' not in page
                store.inbox.put_streams("held", texts)  # the owner streams: its text shows
                assert _streamed(served.url, id="held") == (
                    200,
                    {
                        "live": True,
                        "steps": {
                            "draft": {"attempt": 2, "text": "the retry's text"},
                            "a/b": {"attempt": 1, "text": "a step whose name holds a slash"},
                            "map": {
                                "items": {
                                    "7": {"attempt": 1, "text": "item seven"},
                                    "8": {"attempt": 3, "text": "item eight"},
                                }
                            },
                        },
                    },
                )
                status, _, page = _request(served.url, "/run?id=held")
                assert status == 200
                assert 'data-stream="/stream?id=held"' in page
                assert '<pre class="streamed" data-stream-step="draft" data-attempt="2">' in page
            status, _, page = _request(served.url, "/run?id=held")
            assert status == 200
            assert "data-stream=" not in page  # nobody runs it: nothing to follow
    finally:
        store.close()


def test_stream_of_a_run_the_location_does_not_hold_is_empty_and_not_live(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    _recorded(store, "some")
    store.close()
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}") as served:
        assert _streamed(served.url, id="nobody") == (200, {"live": False, "steps": {}})


def test_stream_of_a_sub_workflow_reads_its_own_steps(tmp_path: Path) -> None:
    store = _holding(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    try:
        with flows.serving(url) as served, store.claim("held"):
            store.inbox.put_streams(
                "held",
                {
                    ("draft", None): (1, "the run's own"),
                    ("sub/inner", None): (1, "the child's"),
                    ("sub/7/inner", None): (2, "item seven's child"),
                    ("sub/7/deeper/x", "k"): (1, "a grandchild's item"),
                },
            )
            asked = {
                "sub": {"inner": {"attempt": 1, "text": "the child's"}},
                "sub/7": {"inner": {"attempt": 2, "text": "item seven's child"}},
                "sub/7/deeper": {
                    "x": {"items": {"k": {"attempt": 1, "text": "a grandchild's item"}}}
                },
                "nowhere": {},
                "%": {},  # no path a sub-workflow has: nothing, not an error
            }
            for child, steps in asked.items():
                answered = _streamed(served.url, id="held", child=child)
                assert answered == (200, {"live": True, "steps": steps}), child
    finally:
        store.close()


def _until(done: Callable[[], bool], what: str) -> None:
    """Check ``done`` every 10 ms until it holds; fail at the deadline."""
    pause = threading.Event()
    for _ in range(int(DEADLINE / 0.01)):
        if done():
            return
        pause.wait(0.01)
    pytest.fail(f"{what} within {DEADLINE:g} s")


def test_a_run_one_server_resumes_streams_on_another_servers_pages(
    page: Page, tmp_path: Path
) -> None:
    """A server resuming a run keeps its text in the store: a read-only server shows it, and
    the page of a sub-workflow shows its steps' text on either server."""
    flows.reset()
    store = SQLiteStore(tmp_path / "runs.db")
    first = flows.Background(flows.streaming(), store, "writer")
    nested = flows.Background(flows.streaming_child(), store, "nest")
    first.join()
    nested.join()
    assert first.error is None
    assert nested.error is None
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    try:
        with (
            flows.serving(url, flows.streaming(), "serve_workflows:streaming") as runs,
            flows.serving(
                url, flows.streaming_child(), "serve_workflows:streaming_child"
            ) as nests,
            flows.serving(url) as reader,
        ):
            for server, run_id in ((runs, "writer"), (nests, "nest")):  # each answers its run
                status, _, body = _request(server.url, "/run?id=" + run_id)
                token = re.search(r'name="token" value="([^"]+)"', body)
                assert status == 200
                assert token is not None
                form = {"token": token[1], "run": run_id, "path": "approve", "value": "yes"}
                assert _request(server.url, "/answer", method="POST", form=form)[0] == 303
            # A run the first server resumes, on the read-only server's page.
            page.goto(f"{reader.url}run?id=writer")
            streamed = page.locator('pre.streamed[data-stream-step="write"]')
            expect(streamed).to_have_text("first try, ", timeout=WAIT)
            assert flows.begun("first-try").wait(flows.GATE_WAIT)
            flows.gate("first-try").set()  # the first attempt fails: retried
            expect(streamed).to_have_text("second try, ", timeout=WAIT)
            expect(streamed).to_have_attribute("data-attempt", "2")
            flows.gate("second-try").set()
            expect(page.locator('tr[data-step="write"]')).to_contain_text(
                "second try, whole answer", timeout=WAIT
            )
            expect(page.locator("pre.streamed")).to_have_count(0, timeout=WAIT)
            # A sub-workflow's step, on its page, on the server that runs it and on the other.
            assert flows.begun("inner").wait(flows.GATE_WAIT)
            child = "run?id=nest&child=nested"
            _until(lambda: _request(nests.url, "/" + child)[0] == 200, "the child's page")
            for server in (nests, reader):
                page.goto(server.url + child)
                inner = page.locator('pre.streamed[data-stream-step="write"]')
                expect(inner).to_have_text("inner begins after preparing, ", timeout=WAIT)
            page.goto(f"{reader.url}run?id=nest")  # the run's own page: not its child's steps
            expect(page.locator('tr[data-step="nested"] .status')).to_have_text("running")
            expect(page.locator("pre.streamed")).to_have_count(0)
            flows.gate("inner").set()
            _until(
                lambda: (
                    _nested_output(store) == {"write": "inner written", "prepare": "preparing"}
                ),
                "the child's output",
            )
            assert store.inbox.streams("nest") == {}  # deleted as the step ended
            assert store.inbox.streams("writer") == {}
    finally:
        flows.release_all()
        store.close()


def _nested_output(store: SQLiteStore) -> object:
    checkpoint = store.load("nest")
    return None if checkpoint is None else checkpoint.outputs.get("nested")


def test_stream_of_a_postgresql_location_reads_through_one_kept_connection(
    pg_uri: str,
) -> None:
    """Ten requests a second per page: one store kept open, not a connection each."""
    store = PostgresStore(pg_uri)
    run_id = f"pg-held-{uuid.uuid4().hex[:8]}"
    _recorded(store, run_id)
    try:
        with store.claim(run_id), flows.serving(pg_uri) as served:
            store.inbox.put_streams(run_id, {("draft", None): (1, "the owner's")})
            opened: list[object] = []
            open_store = served.app.source.open_store

            def counted(*, history: bool = False) -> object:
                opened.append(history)
                return open_store(history=history)

            served.app.source.open_store = counted
            for _ in range(20):
                assert _streamed(served.url, id=run_id) == (
                    200,
                    {"live": True, "steps": {"draft": {"attempt": 1, "text": "the owner's"}}},
                )
            assert len(opened) == 1
    finally:
        store.close()
