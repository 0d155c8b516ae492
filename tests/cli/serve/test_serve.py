"""``executionkit serve`` over HTTP, without a browser: the command, its checks and its pages.

The command is started as a real subprocess (``--port 0``, reading the ``serving``
line); the rest uses an in-process server (`serving`) and `http.client`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import pytest
import serve_workflows as flows
from cli_runner import ROOT, run_subprocess, subprocess_env

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit._cli import main
from executionkit._cli._serve import allowed_hosts
from executionkit._cli._serve._runs import StepLedger, StepView, ledger_by_step
from executionkit._cli._serve._svg import levels
from executionkit._cli._step_times import duration_text, step_times
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator

TESTS = Path(__file__).resolve().parents[2]
USAGE = {"input_tokens": 100, "output_tokens": 50, "llm_calls": 4}


@pytest.fixture(autouse=True)
def _fresh_gates() -> Iterator[None]:
    flows.reset()
    try:
        yield
    finally:
        flows.release_all()


def _run(workflow: Workflow, store: Any, run_id: str | None = None) -> None:
    with contextlib.suppress(WorkflowFailed):
        workflow.run_sync({}, checkpoint_fn=store, run_id=run_id)


def _request(
    url: str,
    path: str,
    *,
    method: str = "GET",
    host: str | None = None,
    form: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    address = urlsplit(url)
    assert address.hostname is not None
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        body = None if form is None else urlencode(form)
        headers = {"Host": host or address.netloc}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        connection.close()


def _token(page: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', page)
    assert found is not None
    return found[1]


@pytest.fixture
def waiting_db(tmp_path: Path) -> tuple[str, SQLiteStore]:
    """A database holding the run ``review``, waiting for its answer."""
    store = SQLiteStore(tmp_path / "runs.db")
    _run(flows.approval(), store, "review")
    return f"sqlite:///{tmp_path / 'runs.db'}", store


class Serve:
    """``executionkit serve`` as a subprocess, and the URL it printed."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        environment = {**subprocess_env(), **(env or {})}
        environment["PYTHONPATH"] = f"{environment['PYTHONPATH']}:{TESTS}"
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter
            [sys.executable, "-m", "executionkit", "serve", *args, "--port", "0"],
            cwd=cwd,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line
        self.url = line.split()[1]

    def stop(self, signum: int) -> tuple[int, str]:
        self.process.send_signal(signum)
        _, err = self.process.communicate(timeout=30)
        return self.process.returncode, err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=30)


def test_the_command_serves_and_exits_143_on_sigterm(
    tmp_path: Path, waiting_db: tuple[str, SQLiteStore]
) -> None:
    """``serve --port 0`` prints the address it serves; SIGTERM stops it with exit 143."""
    server = Serve(tmp_path, waiting_db[0])
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", server.url)
        status, _, page = _request(server.url, "/")
        assert status == 200
        assert "review" in page
        code, err = server.stop(signal.SIGTERM)
    finally:
        server.kill()
    assert code == 143
    assert err == "executionkit: stopped serving\n"


def test_sigterm_stops_a_resume_in_progress_then_exits_143(tmp_path: Path) -> None:
    """SIGTERM while an answered run goes on: the run stops with what completed saved, then 143."""
    store = SQLiteStore(tmp_path / "runs.db")
    _run(flows.fifo_approval(), store, "review")
    fifo = tmp_path / "hold"
    os.mkfifo(fifo)
    server = Serve(
        tmp_path,
        f"sqlite:///{tmp_path / 'runs.db'}",
        "--workflow",
        "serve_workflows:fifo_approval",
        env={"EXECUTIONKIT_TEST_FIFO": str(fifo)},
    )
    writer: list[Any] = []
    opener = threading.Thread(target=lambda: writer.append(fifo.open("w", encoding="utf-8")))
    try:
        token = _token(_request(server.url, "/run?id=review")[2])
        form = {"token": token, "run": "review", "path": "approve", "value": "yes"}
        assert _request(server.url, "/answer", method="POST", form=form)[0] == 303
        opener.start()  # returns once the step has opened the FIFO: the step is running
        opener.join(30)
        assert writer, "the held step never started"
        server.process.send_signal(signal.SIGTERM)
        writer[0].write("the signal")
        writer[0].close()  # the step returns; the server stops the run, then itself
        _, err = server.process.communicate(timeout=30)
    finally:
        if writer:
            writer[0].close()
        elif opener.is_alive():
            with contextlib.suppress(OSError):  # lets the opener thread end
                os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        server.kill()
    assert server.process.returncode == 143, err
    assert err.endswith("executionkit: stopped serving\n"), err
    checkpoint = store.load("review")
    assert checkpoint is not None
    assert checkpoint.outputs["approve"] == "yes"


def test_ctrl_c_stops_the_command_with_exit_130(
    tmp_path: Path, waiting_db: tuple[str, SQLiteStore]
) -> None:
    """Ctrl-C (SIGINT) stops the server with exit 130."""
    server = Serve(tmp_path, waiting_db[0], "--workflow", "serve_workflows:approval")
    try:
        status, _, page = _request(server.url, "/run?id=review")
        assert status == 200
        assert "Answer</button>" in page
        code, err = server.stop(signal.SIGINT)
    finally:
        server.kill()
    assert code == 130
    assert "interrupted; stopped serving" in err


def test_a_request_for_another_host_is_refused(
    tmp_path: Path, waiting_db: tuple[str, SQLiteStore]
) -> None:
    """A Host header other than the address served is refused (DNS rebinding); localhost is not."""
    server = Serve(tmp_path, waiting_db[0])
    try:
        port = urlsplit(server.url).port
        status, _, page = _request(server.url, "/", host=f"attacker.example:{port}")
        assert status == 421
        assert "review" not in page
        assert _request(server.url, "/", host=f"localhost:{port}")[0] == 200
        assert _request(server.url, "/", host="127.0.0.1:1")[0] == 421
    finally:
        server.kill()


def test_input_without_workflow_is_bad_input(tmp_path: Path) -> None:
    """--input goes with --workflow: alone, it is refused with exit 2."""
    outcome = run_subprocess(tmp_path, "serve", "runs.json", "--input", "a=b", "--port", "0")
    assert outcome.code == 2
    assert "--input and --inputs-json" in outcome.err


def test_an_address_in_use_is_bad_input(tmp_path: Path) -> None:
    """A port another server holds is refused with one line and exit 2."""
    with flows.serving(str(tmp_path / "runs.json")) as served:
        port = str(urlsplit(served.url).port)
        outcome = run_subprocess(tmp_path, "serve", "runs.json", "--port", port)
    assert outcome.code == 2
    assert outcome.err.startswith(f"executionkit: error: cannot listen on 127.0.0.1:{port}")


def test_a_post_without_the_token_is_refused(waiting_db: tuple[str, SQLiteStore]) -> None:
    """An answer without the server's token (or with another) is refused; nothing is saved."""
    url, store = waiting_db
    before = store.load("review")
    assert before is not None
    with flows.serving(url, flows.approval(), "serve_workflows:approval") as served:
        form = {"run": "review", "path": "approve", "value": "yes"}
        status, _, _ = _request(served.url, "/answer", method="POST", form=form)
        assert status == 403
        form["token"] = "not-the-token"  # noqa: S105
        assert _request(served.url, "/answer", method="POST", form=form)[0] == 403
    after = store.load("review")
    assert after is not None
    assert after.seq == before.seq
    assert flows.calls == {}


def test_without_a_workflow_the_form_saves_and_other_posts_are_refused(
    waiting_db: tuple[str, SQLiteStore],
) -> None:
    """Without --workflow the form saves for a worker, the CLI command is shown too, and a
    POST elsewhere than /answer is refused (405); answering itself: test_serve_inbox.py."""
    url, store = waiting_db
    with flows.serving(url) as served:
        status, _, page = _request(served.url, "/run?id=review")
        assert status == 200
        assert '<form method="post" action="/answer" class="answer">' in page
        assert "nothing runs here: a worker resumes the run" in page
        assert "run serve_workflows:approval --checkpoint" not in page
        assert "--answer approve=VALUE" in page
        draft = page[page.index('data-step="draft"') :].split("</tr>")[0]
        recorded = store.load("review")
        assert recorded is not None
        took = duration_text(step_times(recorded, {"draft"})["draft"].duration)
        number = '<td class="number">{}</td>'
        cells = "".join(number.format(cell) for cell in ("1", took, "60"))
        assert cells in draft, "attempts and tokens from the ledger, the duration from attempts"
        assert f"sqlite:///{Path(url.removeprefix('sqlite:///'))}?run_id=review" in page
        form = {"token": served.app.token, "run": "review", "path": "approve", "value": "yes"}
        status, _, page = _request(served.url, "/elsewhere", method="POST", form=form)
        assert status == 405
        assert "runs nothing" in page
    after = store.load("review")
    assert after is not None
    assert "approve" not in after.outputs
    assert store.inbox.answers("review") == {}


def test_every_page_has_a_strict_policy_and_no_inline_script(
    waiting_db: tuple[str, SQLiteStore],
) -> None:
    """Pages send a CSP without inline script and link only the packaged assets."""
    with flows.serving(waiting_db[0], flows.approval(), "x:y") as served:
        for path in ("/", "/run?id=review", "/nowhere", "/run?id=unknown"):
            _, headers, page = _request(served.url, path)
            policy = headers["Content-Security-Policy"]
            assert "default-src 'self'" in policy
            assert "unsafe-inline" not in policy
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert re.findall(r"<script[^>]*>", page) == ['<script src="/assets/serve.js" defer>']
            assert " style=" not in page
        for asset, kind in (("serve.css", "text/css"), ("serve.js", "text/javascript")):
            status, headers, text = _request(served.url, f"/assets/{asset}")
            assert status == 200
            assert headers["Content-Type"].startswith(kind)
            assert text
        assert _request(served.url, "/assets/other.js")[0] == 404
        assert _request(served.url, "/run?id=unknown")[0] == 404


def test_answers_over_http(waiting_db: tuple[str, SQLiteStore]) -> None:
    """A refused answer redirects to the run's page showing its message; an accepted one too."""
    url, store = waiting_db
    with flows.serving(url, flows.approval(), "serve_workflows:approval") as served:
        token = _token(_request(served.url, "/run?id=review")[2])
        form = {"token": token, "run": "review", "path": "approve", "value": '"maybe"'}
        status, page = _refused(served.url, form)
        assert status == 200
        assert "answer yes or no" in page
        form["value"] = "NaN"
        status, page = _refused(served.url, form)
        assert status == 200
        assert "quote it as a JSON string" in page
        form["run"], form["value"] = "unknown", "yes"
        status, page = _refused(served.url, form)
        assert status == 404
        assert "no checkpoint of this run" in page
        form["run"], form["value"] = "review", "yes"
        flows.gate("publish").set()
        status, headers, _ = _request(served.url, "/answer", method="POST", form=form)
        assert status == 303
        assert headers["Location"] == "/run?id=review"
        served.app.resumer.stop()  # waits for the resume to end
        status, _, page = _request(served.url, "/run?id=review&live=1")
        state = json.loads(page)
        assert state["live"] is False
        assert "published: yes" in state["html"]
        status, page = _refused(served.url, form)
        assert "nothing ran" in page
        assert _request(served.url, "/answer", method="POST", form={"token": token})[0] == 404
    checkpoint = store.load("review")
    assert checkpoint is not None
    assert checkpoint.outputs["publish"] == "published: yes"


def _refused(url: str, form: dict[str, str]) -> tuple[int, str]:
    """POST an answer that is refused: redirected to the run's page; its status and the page."""
    status, headers, _ = _request(url, "/answer", method="POST", form=form)
    assert status == 303
    assert headers["Location"].startswith("/run?")
    assert "&refused=" in headers["Location"]
    status, _, page = _request(url, headers["Location"])
    return status, page


def test_a_form_too_large_is_refused(waiting_db: tuple[str, SQLiteStore]) -> None:
    """A POST of more than 1 MiB is a bad request."""
    with flows.serving(waiting_db[0], flows.approval(), "x:y") as served:
        address = urlsplit(served.url)
        connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
        try:
            connection.putrequest("POST", "/answer", skip_host=True)
            connection.putheader("Host", address.netloc)
            connection.putheader("Content-Length", str(2 << 20))
            connection.endheaders()
            assert connection.getresponse().status == 400
        finally:
            connection.close()


def test_the_whole_output_is_one_click_away(waiting_db: tuple[str, SQLiteStore]) -> None:
    """/output gives a step's output whole, as JSON text the browser never runs."""
    with flows.serving(waiting_db[0]) as served:
        status, headers, text = _request(served.url, "/output?id=review&step=draft")
        assert status == 200
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert json.loads(text) == flows.HOSTILE
        assert _request(served.url, "/output?id=review&step=publish")[0] == 404


def test_the_runs_page_shows_50_runs_a_page_newest_first(tmp_path: Path) -> None:
    """120 runs fill three pages; the newest is first; a page past the last shows the last."""
    store = SQLiteStore(tmp_path / "runs.db")
    workflow = flows.failing()
    for number in range(120):
        _run(workflow, store, f"run-{number:03}")
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}", workflow, "x:y") as served:
        _, _, first = _request(served.url, "/")
        assert "120 runs, newest first" in first
        assert first.count('<tr><td class="run-id">') == 50
        assert first.index("run-119") < first.index("run-118")
        assert "page 1 of 3" in first
        assert 'href="/?page=2">older' in first
        _, _, last = _request(served.url, "/?page=99")
        assert last.count('<tr><td class="run-id">') == 20
        assert "run-000" in last
        assert 'href="/?page=2">newer' in last
        assert "1 of 2" in last


@pytest.mark.parametrize("suffix", ["json", "jsonl"])
def test_a_checkpoint_file_shows_its_one_run(tmp_path: Path, suffix: str) -> None:
    """A JSON or JSON Lines file holds one run: listed, shown, with the workflow's totals."""
    path = tmp_path / f"run.{suffix}"
    store = JsonFileStore(path) if suffix == "json" else JsonLinesStore(path)
    flows.gate("slow").set()
    workflow = flows.live()
    _run(workflow, store, "file-run")
    with flows.serving(str(path), workflow, "serve_workflows:live") as served:
        _, _, runs = _request(served.url, "/")
        assert "file-run" in runs
        assert "3 of 3" in runs
        _, _, page = _request(served.url, "/run?id=file-run")
        assert "status-finished" in page
        assert "slow done, last done" in page
        assert _request(served.url, "/run?id=other")[0] == 404


def test_an_empty_or_broken_location(tmp_path: Path) -> None:
    """No file yet shows no run; a file that is not a checkpoint is said so on the page."""
    with flows.serving(str(tmp_path / "none.json")) as served:
        assert "No run saved here yet" in _request(served.url, "/")[2]
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with flows.serving(str(tmp_path / "broken.json")) as served:
        status, _, page = _request(served.url, "/")
        assert status == 500
        assert "broken.json" in page


def test_a_failed_run_links_to_its_failed_step(tmp_path: Path) -> None:
    """A failed run's page names its failed step, linked to its row, with the error."""
    store = SQLiteStore(tmp_path / "runs.db")
    _run(flows.failing(), store, "broken")
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}", flows.failing(), "x:y") as served:
        _, _, page = _request(served.url, "/run?id=broken")
    assert '<dt>failed</dt><dd><a href="#step-1">parse</a></dd>' in page
    assert '<tr class="step-row" id="step-1" data-step="parse" data-part="step:parse">' in page
    assert "RuntimeError: the model answered nonsense" in page


def test_a_run_that_stopped_early_is_failed_with_the_workflow(tmp_path: Path) -> None:
    """With the workflow, a run that recorded neither all steps nor a question is ``failed``."""
    store = SQLiteStore(tmp_path / "runs.db")
    flows.gate("slow").set()
    _run(_first_only(), store, "early")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with flows.serving(url, flows.live(), "x:y") as served:
        assert "status-failed" in _request(served.url, "/run?id=early")[2]
    with flows.serving(url) as served:
        assert "status-finished" in _request(served.url, "/run?id=early")[2]


def _first_only() -> Workflow:
    return Workflow([Step("first", lambda ctx: "first done")])


def test_a_big_map_shows_items_done_and_not_one_row_each(tmp_path: Path) -> None:
    """A 10,000-item map shows items done of the total and the failed key, in one row."""
    store = SQLiteStore(tmp_path / "runs.db")
    workflow = flows.big_map(10_000)
    _run(workflow, store, "big")
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}", workflow, "x:y") as served:
        _, _, page = _request(served.url, "/run?id=big")
    done = re.search(r"([\d,]+) of 10,000 items done", page)
    assert done is not None
    assert 9_997 <= int(done[1].replace(",", "")) < 10_000
    assert "1 of 10000 items failed (&#x27;9997&#x27;)" in page
    assert "items done; 1 failed: 9997</p>" in page  # the key, from the checkpoint's ledger
    assert page.count('class="step-row"') == 2


def test_a_sub_workflow_in_progress_opens_its_own_view(tmp_path: Path) -> None:
    """A sub-workflow waiting for an answer links to its own run view; its question is routed."""
    inner = Workflow(
        [Step.ask("ok", lambda ctx: "fine?"), Step("after", lambda ctx: 1, depends_on=("ok",))]
    )
    outer = Workflow([Step("research", inner)])
    store = SQLiteStore(tmp_path / "runs.db")
    _run(outer, store, "nested")
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}", outer, "x:y") as served:
        _, _, page = _request(served.url, "/run?id=nested")
        assert 'for="answer-0">research/ok</label>' in page
        assert "/run?id=nested&amp;child=research" in page
        status, _, child = _request(served.url, "/run?id=nested&child=research")
        assert status == 200
        assert "fine?" in child
        assert "<form" not in child
        assert _request(served.url, "/run?id=nested&child=elsewhere")[0] == 404
        assert _request(served.url, "/run?id=nested&child=%25")[0] == 404


def test_allowed_hosts_and_levels() -> None:
    """Loopback also answers to localhost; rows follow the deepest dependency."""
    assert allowed_hosts("127.0.0.1", 80) == {"127.0.0.1:80", "localhost:80"}
    assert allowed_hosts("::1", 80) == {"[::1]:80", "localhost:80"}
    assert allowed_hosts("192.168.1.5", 80) == {"192.168.1.5:80"}

    def view(name: str, *deps: str) -> StepView:
        return StepView(
            name,
            "done",
            "step",
            deps,
            has_output=False,
            output=None,
            error=None,
            items=None,
            child=False,
        )

    steps = [view("a"), view("b", "a"), view("c", "a", "b"), view("d", "missing")]
    assert levels(steps) == {"a": 0, "b": 1, "c": 2, "d": 0}


def test_the_module_is_importable_by_path() -> None:
    """The assets ship inside the package."""
    assets = resources.files("executionkit._cli._serve").joinpath("assets")
    assert {item.name for item in assets.iterdir()} >= {"serve.css", "serve.js"}
    assert (ROOT / "executionkit" / "_cli" / "_serve" / "assets" / "serve.js").exists()


def test_a_map_of_sub_workflows_links_each_item_in_progress(tmp_path: Path) -> None:
    """Each item of a map of sub-workflows waiting for an answer opens its own view."""
    inner = Workflow([Step.ask("ok", lambda ctx: "fine?")])
    outer = Workflow(
        [Step("keys", lambda ctx: ["a/b", "c"]), Step.map("each", inner, over="keys")]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    _run(outer, store, "mapped")
    with flows.serving(f"sqlite:///{tmp_path / 'runs.db'}", outer, "x:y") as served:
        _, _, page = _request(served.url, "/run?id=mapped")
        assert "items in progress:" in page
        assert "child=each%2F0" in page
        status, _, child = _request(served.url, "/run?id=mapped&child=each%2F1")
        assert status == 200
        assert "fine?" in child
        assert _request(served.url, "/run?id=mapped&child=each")[0] == 404


def test_a_checkpoint_without_run_id_is_shown(tmp_path: Path) -> None:
    """An ExecutionKit 0.4 checkpoint (no run_id) is listed and opened by an empty id."""
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps({"step_index": 3, "outputs": {"a": 1}, "cost": USAGE}), encoding="utf-8"
    )
    with flows.serving(str(path)) as served:
        _, _, runs = _request(served.url, "/")
        assert '<a href="/run?id=">(no run id)</a>' in runs
        status, _, page = _request(served.url, "/run?id=")
        assert status == 200
        assert "(no run id)" in page


def test_a_failure_while_serving_is_a_page(
    waiting_db: tuple[str, SQLiteStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error answers 500 with its type and message, and the server goes on."""
    with flows.serving(waiting_db[0]) as served:

        def broken(page: int) -> None:
            msg = "a bug"
            raise RuntimeError(msg)

        monkeypatch.setattr(served.app, "runs_page", broken)
        status, _, page = _request(served.url, "/")
        assert status == 500
        assert "RuntimeError: a bug" in page
        assert _request(served.url, "/run?id=review")[0] == 200


def test_a_postgresql_database_is_served_and_answered(pg_uri: str) -> None:
    """Over PostgreSQL too: runs listed with their status, a question answered by the form."""
    store = PostgresStore(pg_uri)
    try:
        _run(flows.failing(), store, "broken")
        _run(flows.approval(), store, "review")
    finally:
        store.close()
    with flows.serving(pg_uri, flows.approval(), "serve_workflows:approval") as served:
        _, _, runs = _request(served.url, "/")
        assert re.search(r"review</a></td><td><span class=\"status status-waiting\">", runs)
        assert re.search(r"broken</a></td><td><span class=\"status status-failed\">", runs)
        _, _, page = _request(served.url, "/run?id=review")
        form = {"token": _token(page), "run": "review", "path": "approve", "value": "no"}
        flows.gate("publish").set()
        status, _, _ = _request(served.url, "/answer", method="POST", form=form)
        assert status == 303
        served.app.resumer.stop()
        _, _, page = _request(served.url, "/run?id=review")
        assert "status-finished" in page
        assert "published: no" in page


def test_the_ledger_counts_tokens_per_step_and_sub_workflow() -> None:
    """Tokens by step from the checkpoint's ledger; a sub-workflow's count for its step."""
    tries: list[int] = []

    def search(ctx: Any) -> PatternResult[str]:
        return PatternResult("found", cost=TokenUsage(10, 5, 1))

    def costly(ctx: Any) -> PatternResult[str]:
        current_step().add_usage(TokenUsage(7, 0, 1))
        if len(tries) < 2:
            tries.append(1)
            raise ConnectionError("dropped")
        return PatternResult("ok", cost=TokenUsage(1, 1, 1))

    inner = Workflow([Step("search", search)])
    outer = Workflow(
        [Step("research", inner), Step("write", costly, retries=2, retry_delay=0, retry_jitter=0)]
    )
    saved: list[WorkflowCheckpoint] = []
    outer.run_sync({}, checkpoint_fn=saved.append)
    found = ledger_by_step(saved[-1], ["research", "write"])
    assert found["research"] == StepLedger(tokens=15, wasted=0, attempts=0)
    assert found["write"].tokens == 7 * 2 + 7 + 2
    assert found["write"].wasted == 7 * 2
    assert found["write"].attempts == 3


@pytest.mark.parametrize("to", ["process", "another thread"])
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_command_in_this_process_stops_on_a_signal(
    waiting_db: tuple[str, SQLiteStore],
    monkeypatch: pytest.MonkeyPatch,
    signum: int,
    code: int,
    to: str,
) -> None:
    """``main(["serve", ...])`` serves until SIGTERM (143) or Ctrl-C (130), then gives back.

    Also when the kernel hands the signal to a thread other than the main one,
    which does not interrupt the main thread's wait by itself.
    """
    import executionkit._cli._serve as serve  # noqa: PLC0415 - patched here, in this test alone

    listening = threading.Event()
    said: list[str] = []

    def heard(text: str) -> None:
        said.append(text)
        listening.set()

    monkeypatch.setattr(serve, "out", heard)
    statuses: list[int] = []

    main_thread = threading.get_ident()
    returned = threading.Event()
    rescued: list[bool] = []

    def client() -> None:
        try:
            assert listening.wait(30)
            statuses.append(_request(said[0].split()[1], "/run?id=review")[0])
        finally:
            if to == "process":
                os.kill(os.getpid(), signum)  # the kernel picks the thread
            else:
                signal.pthread_kill(threading.get_ident(), signum)  # this thread, not main
            # Never leave the suite hanging: if main() has not come back, signal its thread.
            if not returned.wait(30):
                rescued.append(True)
                signal.pthread_kill(main_thread, signum)

    previous = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=client)
    thread.start()
    args = ["serve", waiting_db[0], "--workflow", "serve_workflows:approval", "--port", "0"]
    try:
        assert main([*args, "--input", "topic=x"]) == code
    finally:
        returned.set()
        thread.join()
    assert rescued == []
    assert statuses == [200]
    assert said[0].startswith("serving http://127.0.0.1:")
    assert signal.getsignal(signal.SIGTERM) is previous
