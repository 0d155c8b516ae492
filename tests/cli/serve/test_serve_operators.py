"""What an operator reads across runs (issue 35): the inbox, filters, lineage, comparisons, money.

Most tests read one database, made once for the module (`location`), through two
servers shared by the module: `plain` (no ``--workflow``, with ``--prices``) and
`known` (``--workflow``, no prices). They only read it; the tests that answer
questions, and the one that watches a map run, make databases of their own.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import serve_workflows as flows
from test_serve import _request, _token
from test_serve_markup import _check_html

from executionkit import Prices, Step, TokenUsage, Workflow, WorkflowFailed, current_step
from executionkit._checkpoint._ledger import LedgerEntry
from executionkit._prices import dollars_text
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

    from executionkit import WorkflowCheckpoint

PRICES = {
    "large": {"input_per_million": "2.00", "output_per_million": "10.00"},
    "small": {"input_per_million": "0.10", "output_per_million": "0.40"},
}
HOSTILE_ID = "<script>alert('id')</script>"
HOSTILE_NOTE = "<img src=x onerror=alert('note')> fewer items"
SUMMARY = "the summaries of the week: " + "each team's summary, " * 12
BULK = 55  # runs of one step, to fill two pages of finished runs


FAILING: dict[str, str] = {}  # "mode": "once" or "always" while a run is made to fail


def _summaries(ctx: Mapping[str, Any]) -> str:
    """A model call that reports its usage; it fails as `FAILING` says (wasted usage)."""
    step = current_step()
    step.add_usage(TokenUsage(1_000_000, 100_000, 1), model="large")
    mode = FAILING.get("mode")
    if mode == "always" or (mode == "once" and step.attempt == 1):
        msg = "the model timed out"
        raise RuntimeError(msg)
    return SUMMARY


def _double(value: int, ctx: Mapping[str, Any]) -> int:
    current_step().add_usage(TokenUsage(1_000, 0, 1), model="small")
    return value * 2


def _publish(ctx: Mapping[str, Any]) -> str:
    current_step().add_usage(TokenUsage(10, 0, 1), model="mystery")  # no price for it
    return f"published ({ctx['approve']}) {sum(ctx['double'])}"


def _check(answer: object) -> object:
    if answer not in ("yes", "no"):
        msg = "answer yes or no"
        raise ValueError(msg)
    return answer


def operations() -> Workflow:
    """Summaries, a map over 12 items, a question, then a step that reads both."""
    return Workflow(
        [
            Step("collect_summaries", _summaries, retries=1, retry_delay=0),
            Step("items", lambda ctx: list(range(12))),
            Step.map("double", _double, over="items"),
            Step.ask(
                "approve",
                lambda ctx: f"Publish {ctx['collect_summaries'][:30]}?",
                depends_on=("collect_summaries",),
                check=_check,
            ),
            Step("publish", _publish, depends_on=("approve", "double")),
        ]
    )


def _waiting(store: SQLiteStore, run_id: str, failing: str | None = None) -> None:
    """Run ``operations`` as ``run_id`` until its question waits (``failing``: see `FAILING`)."""
    if failing is not None:
        FAILING["mode"] = failing
    try:
        result = operations().run_sync(checkpoint_fn=store, run_id=run_id)
    finally:
        FAILING.clear()
    assert set(result.pending) == {"approve"}


def _answered(store: SQLiteStore, run_id: str, answer: str) -> None:
    """Resume ``run_id`` with ``answer``, as a worker or a terminal would, to its end."""
    operations().run_sync(
        {}, checkpoint_fn=store, resume_from=store.load(run_id), answers={"approve": answer}
    )


def _database(folder: Path) -> str:
    """The module's runs: finished, forked, failed, waiting, of unknown usage, 55 more."""
    store = SQLiteStore(folder / "runs.db")
    try:
        _waiting(store, "done-1")
        _answered(store, "done-1", "yes")
        parent = store.load("done-1")
        assert parent is not None
        fork = operations().fork(
            parent, override={"double": [1] * 12}, run_id="fork-1", note=HOSTILE_NOTE
        )
        operations().run_sync({}, checkpoint_fn=store, resume_from=fork)
        FAILING["mode"] = "always"
        try:
            with pytest.raises(WorkflowFailed):
                operations().run_sync(checkpoint_fn=store, run_id="broken")
        finally:
            FAILING.clear()
        _waiting(store, "alpha", "once")  # a wasted attempt, then the question
        _waiting(store, "beta")
        _waiting(store, HOSTILE_ID)
        unknown = LedgerEntry("collect_summaries", None, 2, "unknown", "large", TokenUsage())
        store(
            dataclasses.replace(
                parent, run_id="unknown-usage", seq=1, ledger=(*parent.ledger, unknown)
            )
        )
        one = Workflow([Step("only", lambda ctx: "done")])
        for number in range(BULK):
            one.run_sync(checkpoint_fn=store, run_id=f"bulk-{number:02}")
    finally:
        store.close()
    return f"sqlite:///{folder / 'runs.db'}"


@pytest.fixture(scope="module")
def location(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The module's database (see `_database`)."""
    return _database(tmp_path_factory.mktemp("operators"))


@pytest.fixture(scope="module")
def plain(location: str) -> Iterator[Any]:
    """A server of `location` without --workflow, with --prices."""
    with flows.serving(location) as served:
        served.app.source.prices = Prices(PRICES)
        yield served


@pytest.fixture(scope="module")
def known(location: str) -> Iterator[Any]:
    """A server of `location` with --workflow, without prices."""
    with flows.serving(location, operations(), "ops:operations") as served:
        yield served


def _get(served: Any, path: str, status: int = 200) -> str:
    got, _, page = _request(served.url, path)
    assert got == status, page
    return page


def _load(location: str, run_id: str) -> WorkflowCheckpoint:
    store = SQLiteStore(location.removeprefix("sqlite:///"))
    try:
        checkpoint = store.load(run_id)
    finally:
        store.close()
    assert checkpoint is not None
    return checkpoint


def _run_ids(page: str) -> list[str]:
    """The run ids of the rows of a runs page, in order."""
    return [
        parse_qs(urlsplit(href).query)["id"][0]
        for href in re.findall(r'<tr><td class="run-id"><a href="([^"]+)"', page)
    ]


def _row(page: str, marker: str) -> str:
    """The table row of ``page`` holding ``marker``."""
    at = page.index(marker)
    return page[page.rindex("<tr", 0, at) : page.index("</tr>", at)]


def _shown(moment: str) -> str:
    """A recorded time as the pages show it: to the second, in UTC."""
    return datetime.fromisoformat(moment).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time(moment: str) -> str:
    return f'<time datetime="{moment}" title="{moment}">{_shown(moment)}</time>'


# -- the runs page: filters and search -------------------------------------------------------


def test_the_runs_page_counts_each_status_and_links_to_it(plain: Any) -> None:
    page = _get(plain, "/")
    every = 7 + BULK
    assert f"{every} runs, newest first." in page
    assert f'<a href="/" class="current">all</a> ({every})' in page
    for status, count in (
        ("running", 0),
        ("submitted", 0),
        ("waiting", 3),
        ("failed", 1),
        ("finished", 3 + BULK),
    ):
        assert f'<a href="/?status={status}">{status}</a> ({count})' in page
    assert '<form method="get" action="/" class="search" role="search">' in page


def test_a_status_chooses_the_runs_shown(plain: Any) -> None:
    page = _get(plain, "/?status=waiting")
    assert _run_ids(page) == [HOSTILE_ID, "beta", "alpha"]  # newest first
    assert f"3 of {7 + BULK} runs (status waiting), newest first." in page
    assert '<a href="/?status=waiting" class="current">waiting</a> (3)' in page
    assert '<input type="hidden" name="status" value="waiting">' in page  # the search keeps it
    assert _run_ids(_get(plain, "/?status=failed")) == ["broken"]
    assert _run_ids(_get(plain, "/?status=running")) == []
    assert "No run matches." in _get(plain, "/?status=running")
    assert len(_run_ids(_get(plain, "/?status=nonsense"))) == 50  # not a status: every run


def test_a_search_finds_run_ids_holding_the_text(plain: Any) -> None:
    page = _get(plain, "/?q=ALP")  # case is ignored
    assert _run_ids(page) == ["alpha"]
    assert "1 of 62 runs (run id containing &#x27;ALP&#x27;), newest first." in page
    assert 'name="q" value="ALP"' in page
    assert '<a href="/?status=waiting&amp;q=ALP">waiting</a> (1)' in page  # counts searched
    assert '<a href="/?status=finished&amp;q=ALP">finished</a> (0)' in page
    assert _run_ids(_get(plain, "/?q=done")) == ["done-1"]
    assert _run_ids(_get(plain, "/?q=UNKNOWN-")) == ["unknown-usage"]


def test_status_search_and_pages_combine(plain: Any) -> None:
    first = _get(plain, "/?status=finished&q=bulk")
    assert len(_run_ids(first)) == 50
    assert f"{BULK} of {7 + BULK} runs (status finished, run id containing" in first
    assert '<a href="/?status=finished&amp;q=bulk&amp;page=2">older</a>' in first
    second = _get(plain, "/?status=finished&q=bulk&page=2")
    assert _run_ids(second) == [f"bulk-{number:02}" for number in range(4, -1, -1)]
    assert '<a href="/?status=finished&amp;q=bulk&amp;page=1">newer</a>' in second
    assert _run_ids(_get(plain, "/?status=waiting&q=bulk")) == []


def test_hostile_run_ids_and_searches_stay_text(plain: Any, known: Any) -> None:
    search = "<script>alert"
    for served in (plain, known):
        page = _get(served, "/?" + urlencode({"q": search, "status": "waiting"}))
        assert _run_ids(page) == [HOSTILE_ID]
        _check_html(page, shown=[HOSTILE_ID, search])
        _check_html(_get(served, "/questions"), shown=[HOSTILE_ID])
        compared = _get(served, "/compare?" + urlencode({"a": HOSTILE_ID, "b": "alpha"}))
        _check_html(compared, shown=[HOSTILE_ID])
        _check_html(_get(served, "/run?id=fork-1"), shown=[HOSTILE_NOTE])
        _check_html(_get(served, "/run?id=done-1"), shown=[HOSTILE_NOTE])


# -- the header and the inbox ----------------------------------------------------------------


def test_every_page_links_to_the_inbox_with_the_count_of_questions(plain: Any, known: Any) -> None:
    link = '<a class="inbox-link" href="/questions">questions waiting: 3</a>'
    for served in (plain, known):
        for path in (
            "/",
            "/questions",
            "/run?id=done-1",
            "/run?id=alpha",
            "/compare?a=done-1&b=fork-1",
        ):
            assert link in _get(served, path), path
        state = json.loads(_get(served, "/questions?live=1"))
        assert link in state["header"]  # the live poll updates the header too
    assert '<a class="inbox-link" href="/questions">questions</a>' in _get(plain, "/nowhere", 404)


def test_the_inbox_lists_every_question_oldest_asked_first(plain: Any, location: str) -> None:
    page = _get(plain, "/questions")
    sections = re.findall(r'<section class="ask inbox-question"[^>]*>.*?</section>', page)
    order = [
        parse_qs(urlsplit(re.findall(r'href="([^"]+)"', section)[0]).query)["id"][0]
        for section in sections
    ]
    assert order == ["alpha", "beta", HOSTILE_ID]
    assert "3 questions waiting for an answer, the oldest asked first" in page
    alpha = sections[0]
    entry = _load(location, "alpha").pending["approve"]
    assert f"asked {_time(entry['asked_at'])}, never expires" in alpha
    assert '<p class="question">Publish the summaries of the week: eac?</p>' in alpha
    assert '<input type="hidden" name="run" value="alpha">' in alpha
    assert '<input type="hidden" name="path" value="approve">' in alpha
    assert '<input type="hidden" name="back" value="questions">' in alpha
    assert "it is saved, and nothing runs here: a worker resumes the run" in alpha
    assert len(set(re.findall(r'id="(answer-[0-9a-f]{16})"', page))) == 3  # one field each
    assert json.loads(_get(plain, "/questions?live=1"))["live"] is True


@pytest.mark.parametrize("workflow", [False, True], ids=["saved for a worker", "resumed here"])
def test_the_inbox_answers_two_runs(tmp_path: Path, *, workflow: bool) -> None:
    """Each answer comes back to the inbox; resumed here, or saved until a worker resumes it."""
    store = SQLiteStore(tmp_path / "runs.db")
    _waiting(store, "alpha")
    _waiting(store, "beta")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    serving = (
        flows.serving(url, operations(), "ops:operations") if workflow else flows.serving(url)
    )
    with serving as served:
        page = _get(served, "/questions")
        assert "questions waiting: 2" in page
        token = _token(page)
        for run_id, answer in (("alpha", "yes"), ("beta", "no")):
            form = {"token": token, "run": run_id, "path": "approve", "value": answer}
            status, headers, _ = _request(
                served.url, "/answer", method="POST", form={**form, "back": "questions"}
            )
            assert status == 303
            assert headers["Location"] == "/questions"
        if workflow:
            served.app.resumer.stop()  # waits for both resumes to end
        page = _get(served, "/questions")
        if workflow:
            assert "No question waits for an answer in this location." in page
            assert "questions waiting: 0" in page
        else:  # saved, shown under their questions, until a worker resumes the runs
            assert store.inbox.answers("alpha") == {"approve": "yes"}
            assert store.inbox.answers("beta") == {"approve": "no"}
            assert "waiting for a worker: <code>&quot;yes&quot;</code>" in page
            assert "waiting for a worker: <code>&quot;no&quot;</code>" in page
            assert "it replaces the answer saved" in page
            _answered(store, "alpha", "yes")  # as the worker does
            state = json.loads(_get(served, "/questions?live=1"))
            assert 'name="run" value="alpha"' not in state["html"]  # it drops off
            assert 'name="run" value="beta"' in state["html"]
            assert "questions waiting: 1" in state["header"]
            _answered(store, "beta", "no")
    for run_id, answer in (("alpha", "yes"), ("beta", "no")):
        checkpoint = store.load(run_id)
        assert checkpoint is not None
        assert checkpoint.outputs["publish"] == f"published ({answer}) 132"
    store.close()


# -- refusals: POST, redirect, GET ----------------------------------------------------------


def _before_timeline(page: str) -> str:
    """A run's page up to its timeline, whose questions waiting are drawn up to now."""
    return page.split('<h2 id="timeline">', 1)[0]


def test_a_refused_answer_redirects_to_the_run_page_showing_why(
    plain: Any, known: Any, location: str
) -> None:
    before = _load(location, "alpha").seq
    hostile_path = "<script>alert('path')</script>"
    for served, path, value, why in (
        (plain, hostile_path, "yes", "has no question"),
        (known, "approve", "maybe", "answer yes or no"),
        (known, "approve", "NaN", "quote it as a JSON string"),
    ):
        form = {"token": served.app.token, "run": "alpha", "path": path, "value": value}
        status, headers, body = _request(served.url, "/answer", method="POST", form=form)
        assert status == 303
        assert body == ""
        target = urlsplit(headers["Location"])
        query = parse_qs(target.query)
        assert target.path == "/run"
        assert query["id"] == ["alpha"]
        assert why not in query["refused"][0]  # an id: the text stays in the server
        page = _get(served, headers["Location"])
        assert escape(why) in page
        assert '<p class="message" role="alert">' in page
        again = _get(served, headers["Location"])  # a reload shows it again, posts nothing
        assert _before_timeline(page) == _before_timeline(again)  # its waits reach "now"
        _check_html(page, shown=[hostile_path] if path == hostile_path else [])
        elsewhere = "/run?" + urlencode({"id": "beta", "refused": query["refused"][0]})
        assert escape(why) not in _get(served, elsewhere)  # another run's refusal: not shown
    assert 'role="alert"' not in _get(plain, "/run?id=alpha&refused=made-up")
    known.app.resumer.stop()
    assert _load(location, "alpha").seq == before  # nothing ran, nothing was saved


# -- a run's page: lineage, money, maps, times -----------------------------------------------


def test_a_fork_links_to_its_parent_and_says_what_changed(plain: Any, location: str) -> None:
    page = _get(plain, "/run?id=fork-1")
    seq = _load(location, "fork-1").lineage["parent_seq"]
    assert '<h2>Fork of <a href="/run?id=done-1">done-1</a></h2>' in page
    assert f"<p>Made from checkpoint seq {seq} of done-1; overridden: double.</p>" in page
    assert f'<p class="fork-note">note: {escape(HOSTILE_NOTE)}</p>' in page
    assert '<a href="/compare?a=done-1&amp;b=fork-1">compare with parent</a>' in page
    assert "Forks of this run" not in page


def test_a_parent_lists_its_forks(plain: Any, known: Any) -> None:
    for served in (plain, known):
        page = _get(served, "/run?id=done-1")
        row = _row(page, '<a href="/run?id=fork-1">')
        assert "<h2>Forks of this run</h2>" in page
        assert '<span class="status status-finished">finished</span>' in row
        assert "<td>double</td>" in row
        assert escape(HOSTILE_NOTE) in row
        assert '<a href="/compare?a=done-1&amp;b=fork-1">compare</a>' in row
        assert "Fork of" not in page
    assert "Forks of this run" not in _get(plain, "/run?id=alpha")


def test_compare_shows_the_outputs_that_differ_and_each_side_s_cost(
    plain: Any, location: str
) -> None:
    page = _get(plain, "/compare?a=done-1&b=fork-1")
    parent, fork = _load(location, "done-1"), _load(location, "fork-1")
    prices = Prices(PRICES)
    assert (
        '<p class="lineage"><a href="/run?id=fork-1">fork-1</a> is a fork of '
        f'<a href="/run?id=done-1">done-1</a>, made from its checkpoint seq '
        f"{fork.lineage['parent_seq']}.</p>"
    ) in page
    assert (
        "2 outputs differ; 0 steps only the first recorded; 0 only the second; 3 the same" in page
    )
    double = _row(page, 'data-step="double"')
    assert "outputs differ" in double
    assert f'<code class="preview">{escape(json.dumps(parent.outputs["double"]))}' in double
    assert f'<code class="preview">{escape(json.dumps(fork.outputs["double"]))}' in double
    assert '<a class="whole" href="/output?id=done-1&amp;step=double">' in double
    assert '<a class="whole" href="/output?id=fork-1&amp;step=double">' in double
    assert "published (yes) 132" in _row(page, 'data-step="publish"')
    assert "published (yes) 12" in _row(page, 'data-step="publish"')
    same = _row(page, 'data-step="collect_summaries"')
    assert "same output" in same
    assert '<code class="preview">' not in same  # the same output: its link only
    for checkpoint in (parent, fork):  # each run's tokens and dollars, each step's
        cost = checkpoint.cost
        assert f"<td>{cost.input_tokens + cost.output_tokens:,}</td>" in page
        assert f"<td>{dollars_text(checkpoint.spending.priced(prices).total)}</td>" in page
        for name, spent in checkpoint.spending.by_step().items():
            tokens = spent.total.input_tokens + spent.total.output_tokens
            assert f'<td class="number">{tokens:,}</td>' in _row(page, f'data-step="{name}"')
    assert '<td class="number">$3.0000</td>' in same  # 1M in at $2, 100k out at $10
    for path in ("/output?id=done-1&step=double", "/output?id=fork-1&step=double"):
        assert _request(plain.url, path)[0] == 200


def test_compare_says_which_steps_only_one_run_recorded(known: Any) -> None:
    page = _get(known, "/compare?a=alpha&b=done-1")
    assert "0 outputs differ; 0 steps only the first recorded; 2 only the second" in page
    assert "only the second recorded it" in _row(page, 'data-step="approve"')
    assert "only the second recorded it" in _row(page, 'data-step="publish"')
    assert "not recorded" in _row(page, 'data-step="publish"')
    assert '<p class="lineage">' not in page
    assert _request(known.url, "/compare?a=alpha&b=nowhere")[0] == 404
    assert _request(known.url, "/compare?a=alpha")[0] == 404


def test_the_page_s_dollars_are_the_priced_spending(plain: Any, location: str) -> None:
    """The total a page shows is `spending.priced(prices).total`; per step and model too."""
    prices = Prices(PRICES)
    for run_id in ("done-1", "alpha", "broken"):
        page = _get(plain, "/run?id=" + run_id)
        priced = _load(location, run_id).spending.priced(prices)
        total = dollars_text(priced.total)
        assert f'<td class="number total">{total}</td>' in page
        assert f"<dt>dollars</dt><dd>{total} (" in page
    done = _get(plain, "/run?id=done-1")
    money = done[done.index('<section class="money" data-part="money">') :]
    assert re.search(r'<td class="model">large</td><td class="number">\$3\.0000</td>', money)
    assert re.search(r'<td class="model">small</td><td class="number">\$0\.0012</td>', money)
    assert "10 tokens of mystery: not priced by the price file" in money
    alpha = _get(plain, "/run?id=alpha")  # its first attempt failed: wasted, and shown apart
    money = alpha[alpha.index('<section class="money" data-part="money">') :]
    assert (
        '<tr><td class="step-name">collect_<wbr>summaries</td><td class="number">$6.0000</td>'
        '<td class="number">$3.0000</td></tr>'
    ) in money
    assert '<td class="number total">$6.0012</td><td class="number">$3.0000</td>' in money


def test_without_prices_the_page_has_no_dollars(known: Any) -> None:
    page = _get(known, "/run?id=alpha")
    assert '<section class="money"' not in page
    assert "<dt>dollars</dt>" not in page


def test_attempts_of_unknown_usage_are_shown_per_step(plain: Any) -> None:
    page = _get(plain, "/run?id=unknown-usage")
    row = _row(page, 'data-step="collect_summaries"')
    assert '<span class="unknown-usage">1 attempt of unknown usage</span>' in row
    assert "1 attempt of unknown usage: not priced, in no figure here" in page
    assert "unknown usage" not in _row(
        _get(plain, "/run?id=done-1"), 'data-step="collect_summaries"'
    )


def test_a_finished_map_says_all_its_items(plain: Any, known: Any) -> None:
    for served in (plain, known):
        row = _row(_get(served, "/run?id=done-1"), 'data-step="double"')
        assert '<p class="items">12 of 12 items</p>' in row


def test_without_the_workflow_a_map_is_drawn_as_a_map(plain: Any) -> None:
    page = _get(plain, "/run?id=done-1")
    graph = page[page.index("<svg") : page.index("</svg>")]
    assert re.search(r'<text class="node-status" [^>]*>map · done</text>', graph)
    assert re.search(r'<text class="node-status" [^>]*>ask · done</text>', graph)
    assert '<td class="step-name">double</td><td>map</td>' in page
    assert '<td class="step-name">approve</td><td>ask</td>' in page


def test_times_are_shown_to_the_second_with_the_whole_in_a_title(
    plain: Any, location: str
) -> None:
    checkpoint = _load(location, "done-1")
    created = checkpoint.created_at
    assert created is not None
    assert re.search(r"\.\d{6}", created)  # microseconds, as recorded
    runs = _get(plain, "/?q=done-1")
    assert f"<td>{_time(created)}</td>" in runs
    page = _get(plain, "/run?id=done-1")
    assert f"saved {_time(created)}" in page
    asked = _load(location, "alpha").pending["approve"]["asked_at"]
    assert f"asked {_time(asked)}" in _get(plain, "/run?id=alpha")
    text = re.sub(r"<[^>]+>", "", page)  # what is read, without the attributes
    assert created not in text
    assert re.search(r"\d\d:\d\d:\d\d UTC", text)


def test_a_running_map_is_running_with_its_items_done(tmp_path: Path) -> None:
    """While a run's map is under way, its row and its box say running, and the items done."""
    gate, six = threading.Event(), threading.Event()
    store = SQLiteStore(tmp_path / "runs.db")

    def item(value: int, ctx: Mapping[str, Any]) -> int:
        if value >= 6:
            gate.wait(flows.GATE_WAIT)
        return value * 2

    workflow = Workflow(
        [Step("items", lambda ctx: list(range(12))), Step.map("double", item, over="items")]
    )

    class Saver:
        """The store, telling when six items are recorded; the run claims through it."""

        claim = store.claim

        def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
            store(checkpoint)
            if len(checkpoint.items.get("double", {}).get("outputs", {})) >= 6:
                six.set()

    running = threading.Thread(
        target=lambda: workflow.run_sync(checkpoint_fn=Saver(), run_id="mapping")
    )
    running.start()
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    try:
        assert six.wait(flows.GATE_WAIT)
        for served_with in ((url, workflow, "x:y"), (url,)):
            with flows.serving(*served_with) as served:
                page = _get(served, "/run?id=mapping")
                row = _row(page, 'data-step="double"')
                assert '<span class="status status-running">running</span>' in row
                total = " of 12" if len(served_with) > 1 else ""
                assert f'<p class="items">6{total} items done</p>' in row
                assert (
                    '<g class="node node-running" data-part="node:double"><title>double: running'
                    in page
                )
                assert "pending" not in row
    finally:
        gate.set()
        running.join(flows.GATE_WAIT)
    with flows.serving(url, workflow, "x:y") as served:
        row = _row(_get(served, "/run?id=mapping"), 'data-step="double"')
    assert '<p class="items">12 of 12 items</p>' in row
    store.close()
