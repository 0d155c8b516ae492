"""Escaping on the pages of ``executionkit serve`` is structural: the markup type, then every page.

The first tests pin `Markup` and its three helpers. The page tests fill a
database with runs whose run ids, step names, outputs, questions, answers,
errors, metadata, inputs, model names and owner are hostile strings, serve it
in-process (`serve_workflows.serving`, stopped however a test ends) and check
every page the server answers with `html.parser`: no tag or attribute the
server does not write itself, no ``on*`` attribute, no ``javascript:`` link,
the one script tag of the packaged asset, and each hostile text present in its
escaped form (so rendered, not dropped).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shlex
import socket
from html import escape
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import pytest
import serve_workflows as flows
from test_serve import _request, _run

from executionkit import PatternResult, Step, TokenUsage, Workflow, WorkflowFailed, current_step
from executionkit._cli._serve._html import status_word
from executionkit._cli._serve._markup import Markup, html, join, markup
from executionkit._cli._serve._runs import StepView
from executionkit._cli._serve._svg import graph_svg
from executionkit._terminal import show
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from pathlib import Path

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
QUOTE = "' onmouseover='x"
TEXTAREA = "</textarea>"
JAVASCRIPT = "javascript:alert(1)"
PAYLOADS = (SCRIPT, IMG, QUOTE, TEXTAREA, JAVASCRIPT)
EVIL = "".join(PAYLOADS)
RAW = (SCRIPT, IMG, QUOTE, TEXTAREA, "<img", "<script>alert")  # never on a page as they are

WAITING = f"{IMG} waiting"  # a run that waits for its answers
FAILED = f"{QUOTE} failed"  # a run whose steps failed, claimed by a hostile host
TEXTAREA_PATH = TEXTAREA.replace("/", "%2F")  # as a question's path escapes it
FAIL = f"fail {SCRIPT}"  # the input that makes a run fail (its name is shown)
SUB = f"sub {IMG}"
EACH = f"each {QUOTE}"
SPEND = f"map {TEXTAREA}"

TAGS = frozenset(  # every tag the server writes
    {"html", "head", "meta", "title", "link", "script", "body", "header", "main", "a", "span"}
    | {"h1", "h2", "h3", "p", "nav", "table", "thead", "tbody", "tr", "th", "td", "dl", "dt"}
    | {"dd", "section", "form", "input", "label", "button", "pre", "code", "div"}
    | {"svg", "g", "path", "rect", "text"}
    | {"time", "wbr"}  # a time shown to the second; where a name may wrap (issue 35)
    | {"line", "defs", "pattern", "details", "summary"}  # the timeline (issue 35)
)
ATTRIBUTES = frozenset(  # every attribute it writes (the parser lowers ``viewBox``)
    {"lang", "charset", "name", "content", "rel", "href", "src", "defer", "class", "id"}
    | {
        "data-live",
        "data-version",
        "role",
        "method",
        "action",
        "type",
        "value",
        "for",
        "autocomplete",
    }
    | {
        "required",
        "data-step",
        "data-stream",
        "data-stream-step",
        "data-stream-item",
        "data-attempt",
        "xmlns",
        "width",
        "height",
        "viewbox",
        "aria-label",
    }
    | {"x", "y", "rx", "d"}
    | {"datetime", "title"}  # a time's ISO text (issue 35)
    | {"data-part", "x1", "y1", "x2", "y2", "text-anchor", "fill", "aria-hidden"}  # the timeline
    | {"patternunits", "patterntransform"}  # its hatching (the parser lowers both)
    | {"data-list"}  # the lists live updates change child by child
)
ASSET_SCRIPT = ("script", [("src", "/assets/serve.js"), ("defer", None)])


# -- the markup type ------------------------------------------------------------------------


def test_markup_escapes_the_five_html_characters() -> None:
    """`markup` escapes ``< > & " '`` (quotes too, for attributes) and returns `Markup`."""
    escaped = markup("""<a href="x" title='y'>&</a>""")
    assert escaped == "&lt;a href=&quot;x&quot; title=&#x27;y&#x27;&gt;&amp;&lt;/a&gt;"
    assert type(escaped) is Markup


def test_markup_passes_markup_through_as_it_is() -> None:
    """A `Markup` comes back the very object, unescaped."""
    bold = html("<b>{}</b>", "x")
    assert markup(bold) is bold
    assert markup(bold) == "<b>x</b>"


def test_markup_escapes_the_str_of_any_other_value() -> None:
    """Numbers, None and objects are ``str()``-ed, then escaped; a plain `str` subclass too."""

    class Tagged:
        def __str__(self) -> str:
            return "<i>"

    class Text(str):
        __slots__ = ()

    assert markup(1234) == "1234"
    assert markup(None) == "None"
    assert markup(Tagged()) == "&lt;i&gt;"
    assert markup(Text("<u>")) == "&lt;u&gt;"


def test_markup_never_escapes_twice() -> None:
    """Escaped text is markup: passing it on again leaves its entities as they are."""
    once = markup("<&>")
    assert markup(once) == "&lt;&amp;&gt;"
    assert html("<p>{}</p>", html("<b>{}</b>", once)) == "<p><b>&lt;&amp;&gt;</b></p>"
    assert join([once, once]) == "&lt;&amp;&gt;&lt;&amp;&gt;"


def test_html_fills_each_hole_through_markup() -> None:
    """Holes get escaped text or markup as it is; other braces of the template stay."""
    link = html('<a title="{}" href="/run?{}">{}</a>', QUOTE, "id=a&b=c", html("<b>{}</b>", 1))
    assert link == ('<a title="&#x27; onmouseover=&#x27;x" href="/run?id=a&amp;b=c"><b>1</b></a>')
    assert type(link) is Markup
    assert html('{"a": 1} {}', "<") == '{"a": 1} &lt;'
    assert html("no holes") == "no holes"
    assert html("{}", "{}") == "{}"


def test_html_needs_one_value_per_hole() -> None:
    """Too few or too many values for the template's holes is a bug, said at once."""
    with pytest.raises(ValueError, match="2 holes for 1 values"):
        html("<p>{}{}</p>", "x")
    with pytest.raises(ValueError, match="0 holes for 1 values"):
        html("<p></p>", "x")


def test_join_puts_escaped_fragments_between_separators() -> None:
    """`join` escapes each fragment and the separator unless they are markup."""
    joined = join(["<a>", html("<b>{}</b>", 2), 3], ", ")
    assert joined == "&lt;a&gt;, <b>2</b>, 3"
    assert type(joined) is Markup
    assert join(["a", "b"], "<br>") == "a&lt;br&gt;b"
    assert join(["a", "b"], html("<br>")) == "a<br>b"
    assert join([]) == ""
    assert type(join([])) is Markup


def test_str_operations_give_text_that_is_escaped_again() -> None:
    """``+`` or ``format`` on markup gives a plain `str`: it fails safe, escaped if reused."""
    joined = html("<b>{}</b>", "x") + "<i>"
    assert type(joined) is str
    assert markup(joined) == "&lt;b&gt;x&lt;/b&gt;&lt;i&gt;"
    assert repr(html("<b>")) == "Markup('<b>')"


def test_renderers_escape_values_a_store_cannot_make_hostile() -> None:
    """A status, kind or name in a class, a title or a box of the graph is escaped too."""
    word = status_word(QUOTE)
    assert word == (
        '<span class="status status-&#x27; onmouseover=&#x27;x">&#x27; onmouseover=&#x27;x</span>'
    )
    step = StepView(
        SCRIPT, IMG, QUOTE, (), has_output=False, output=None, error=None, items=None, child=False
    )
    drawing = graph_svg([step])
    assert type(drawing) is Markup
    _check_html(drawing, shown=(SCRIPT, IMG, QUOTE), document=False)


# -- the pages ------------------------------------------------------------------------------


def _echo(answer: object) -> object:
    """An ask step's check: refuses an answer that asks for it, naming the answer."""
    if "refuse" in str(answer):
        msg = f"refused: {answer}"
        raise ValueError(msg)
    return answer


def _spend(ctx: Mapping[str, Any]) -> str:
    """A step that reports usage under a hostile model name."""
    current_step().add_usage(TokenUsage(5, 1, 1), model=EVIL)
    return EVIL


def _first(ctx: Mapping[str, Any]) -> PatternResult[dict[str, str]]:
    """A hostile output; with the input `FAIL`, a hostile error."""
    if FAIL in ctx:
        raise RuntimeError(EVIL)
    return PatternResult({IMG: EVIL}, cost=TokenUsage(3, 4, 1))


def _item(value: int, ctx: Mapping[str, Any]) -> int:
    """A map item with usage; item 2 (key `QUOTE`) fails with the input `FAIL`."""
    current_step().add_usage(TokenUsage(2, 0, 1), model=EVIL)
    if value == 2 and FAIL in ctx:
        raise ValueError(EVIL)
    return value


def _inner() -> Workflow:
    """A sub-workflow that asks a hostile question."""
    return Workflow([Step.ask(TEXTAREA, lambda ctx: EVIL, check=_echo)])


def hostile() -> Workflow:
    """Every name, output, question and error hostile; a sub-workflow, maps over hostile keys."""
    return Workflow(
        [
            Step(SCRIPT, _first),
            Step(IMG, _spend, depends_on=(SCRIPT,)),
            Step.ask(QUOTE, lambda ctx: EVIL, depends_on=(SCRIPT,), check=_echo),
            Step.ask(TEXTAREA, lambda ctx: {JAVASCRIPT: EVIL}, check=_echo),
            Step(JAVASCRIPT, lambda ctx: ctx[QUOTE], depends_on=(QUOTE, IMG)),
            Step(SUB, _inner()),
            Step("keys", lambda ctx: {SCRIPT: 1, QUOTE: 2}),
            Step.map(EACH, _inner(), over="keys"),
            Step.map(SPEND, _item, over="keys"),
        ]
    )


class _Parsed(HTMLParser):
    """The tags, attributes and text of a page, as a browser's parser would see them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.ends: list[str] = []
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        self.ends.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _check_html(page: str, *, shown: Iterable[str] = (), document: bool = True) -> None:
    """Assert ``page`` holds only the server's own tags and each of ``shown`` as escaped text."""
    parsed = _Parsed(page)
    names = {tag for tag, _ in parsed.tags} | set(parsed.ends)
    assert names <= TAGS, f"tags the server never writes: {names - TAGS}"
    assert "img" not in names
    scripts = [tag for tag in parsed.tags if tag[0] == "script"]
    assert scripts == ([ASSET_SCRIPT] if document else [])
    for tag, attrs in parsed.tags:
        for name, value in attrs:
            assert not name.startswith("on"), f"an event handler on <{tag}>: {name}={value!r}"
            assert name in ATTRIBUTES, f"an attribute the server never writes: {name}"
            if name in {"href", "src", "action"}:
                assert not (value or "").strip().lower().startswith("javascript:"), value
    for raw in RAW:
        assert raw not in page, f"{raw!r} is on the page unescaped"
    text = "".join(parsed.text)
    values = [value for _, attrs in parsed.tags for _, value in attrs if value]
    for expected in shown:
        assert escape(expected, quote=True) in page, f"{expected!r} is not shown escaped"
        assert expected in text or any(expected in value for value in values), expected


def _html_page(url: str, path: str, status: int = 200, **request: Any) -> str:
    """The page at ``path``, checked to be HTML answered with ``status``."""
    got, headers, page = _request(url, path, **request)
    assert got == status, page
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"].startswith("default-src 'self'")
    return page


def _crawl(url: str, start: Iterable[str]) -> dict[str, str]:
    """Every page that links lead to from ``start``, by path: HTML, or an output as text."""
    pages: dict[str, str] = {}
    todo = list(start)
    while todo:
        path = todo.pop()
        if path in pages:
            continue
        status, headers, page = _request(url, path)
        assert status == 200, (path, page)
        pages[path] = page
        if path.startswith("/output?"):
            assert headers["Content-Type"] == "text/plain; charset=utf-8"
            continue
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        for tag, attrs in _Parsed(page).tags:
            href = dict(attrs).get("href") if tag == "a" else None
            if href is not None and href.startswith("/"):
                todo.append(href)
    return pages


def _too_large(url: str) -> str:
    """The page answering a POST that says it carries more than 1 MiB (and sends nothing)."""
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        connection.putrequest("POST", "/answer", skip_host=True)
        connection.putheader("Host", address.netloc)
        connection.putheader("Content-Length", str(2 << 20))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 400
        return response.read().decode()
    finally:
        connection.close()


def _refused_page(url: str, form: dict[str, str], status: int = 200) -> str:
    """The page a refused answer is redirected to (its run's), checked to be HTML."""
    got, headers, page = _request(url, "/answer", method="POST", form=form)
    assert got == 303, page
    assert "&refused=" in headers["Location"]
    return _html_page(url, headers["Location"], status)


def _run_path(run_id: str, **more: str) -> str:
    """The path of a run's page, as the server's links write it."""
    return "/run?" + urlencode({"id": run_id, **more})


@pytest.fixture
def hostile_db(tmp_path: Path) -> str:
    """A database in a hostile directory: a run waiting for answers, a failed one, 50 more."""
    folder = tmp_path / IMG / QUOTE  # the location's label is shown on every page
    folder.mkdir(parents=True)
    store = SQLiteStore(folder / "runs.db")
    for number in range(50):  # a second page of runs
        _run(Workflow([Step(SCRIPT, lambda ctx: EVIL)]), store, f"{SCRIPT} {number:02}")
    result = hostile().run_sync(
        {}, checkpoint_fn=store, run_id=WAITING, metadata={"workflow": EVIL}
    )
    assert set(result.pending) >= {QUOTE, TEXTAREA_PATH}
    with pytest.raises(WorkflowFailed):
        hostile().run_sync({FAIL: 1}, checkpoint_fn=store, run_id=FAILED, on_error="continue")
    return f"sqlite:///{folder / 'runs.db'}"


@contextlib.contextmanager
def _claimed_by_a_hostile_host(
    url: str, monkeypatch: pytest.MonkeyPatch, run_id: str
) -> Iterator[None]:
    """``run_id`` claimed, while this block lasts, by a process on the host named `EVIL`."""
    store = SQLiteStore(url.removeprefix("sqlite:///"))
    with contextlib.ExitStack() as stack:
        with monkeypatch.context() as patched:
            patched.setattr(socket, "gethostname", lambda: EVIL)
            stack.enter_context(store.claim(run_id))
        yield


def test_every_page_of_a_run_shows_hostile_text_as_text(
    hostile_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs list, run pages, sub-workflow views, graphs, live updates: hostile text stays text."""
    seen: list[str] = []
    with (
        _claimed_by_a_hostile_host(hostile_db, monkeypatch, FAILED),
        flows.serving(hostile_db, hostile(), EVIL) as served,
    ):
        pages = _crawl(served.url, ["/"])
        live = _request(served.url, _run_path(FAILED, live="1"))[2]
    with flows.serving(hostile_db) as read_only:
        read_only_pages = _crawl(read_only.url, ["/"])
    for found in (pages, read_only_pages):
        assert {"/", "/?page=2", _run_path(WAITING), _run_path(FAILED)} <= found.keys()
        assert _run_path(WAITING, child=SUB) in found
        assert any(path.startswith("/output?") for path in found)
        for path, page in found.items():
            if path.startswith("/output?"):
                continue
            _check_html(page, shown=[IMG, QUOTE])  # the location, in the header
            seen.append(page)
    _check_html(pages["/"], shown=[WAITING, FAILED, QUOTE, f"{SCRIPT} 49"])
    _check_html(pages["/?page=2"], shown=[f"{SCRIPT} 00"])
    _check_html(
        pages[_run_path(WAITING)],
        shown=[
            *PAYLOADS,  # the step names
            EVIL,  # a question; the spec of the workflow, in the header
            json.dumps({JAVASCRIPT: EVIL}, indent=2),  # a question that is JSON data
            WAITING,  # in the title, and in each form's hidden field
            SUB,
            f"{EACH}/{SCRIPT.replace('/', '%2F')}/{TEXTAREA_PATH}",  # a nested question
            f"item {SCRIPT}",  # a link to a map's sub-workflow in progress
        ],
    )
    assert (
        f'<input type="hidden" name="run" value="{escape(WAITING)}">' in pages[_run_path(WAITING)]
    )
    failed = pages[_run_path(FAILED)]
    _check_html(
        failed,
        shown=[
            f"RuntimeError: {EVIL}",  # a step's error
            repr(EVIL),  # the owner's host
            FAIL,  # an input's name
            f"1 failed: {QUOTE}",  # a map item's key
        ],
    )
    assert f"<title>{escape(SCRIPT)}: failed</title>" in failed  # a box of the graph
    state = json.loads(live)
    assert state["live"] is True  # claimed: the page follows it
    _check_html(state["html"], shown=[FAILED, f"RuntimeError: {EVIL}"], document=False)
    assert f'data-live="{escape(_run_path(FAILED, live="1"))}"' in failed
    command = read_only_pages[_run_path(WAITING)]
    _check_html(command, shown=[shlex.quote(EVIL), shlex.quote(QUOTE)])
    assert "a worker resumes the run" in command  # its forms save answers for a worker
    outputs = [page for path, page in pages.items() if path.startswith("/output?")]
    assert json.dumps(EVIL, indent=2, ensure_ascii=False) in outputs
    everything = "".join(seen)
    for payload in PAYLOADS:
        assert escape(payload) in everything


def test_every_error_page_shows_hostile_text_as_text(
    hostile_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not found, refused, wrong host, bad request and server errors: hostile text stays text."""
    with flows.serving(hostile_db, hostile(), EVIL) as served:
        url, token = served.url, served.app.token
        _check_html(_html_page(url, "/" + SCRIPT + TEXTAREA, 404), shown=[SCRIPT + TEXTAREA])
        _check_html(_html_page(url, "/run?id=" + quote(EVIL), 404), shown=[repr(EVIL)])
        missing = _run_path(WAITING, child=EVIL)
        _check_html(_html_page(url, missing, 404), shown=[repr(EVIL)])
        output = "/output?" + urlencode({"id": WAITING, "step": EVIL})
        _check_html(_html_page(url, output, 404), shown=[repr(WAITING), repr(EVIL)])
        port = urlsplit(url).port
        wrong = _html_page(url, "/", 421, host=f"attacker.example:{port}")
        _check_html(wrong, shown=[EVIL])
        form = {"run": WAITING, "path": QUOTE, "value": EVIL}
        _check_html(_html_page(url, "/answer", 403, method="POST", form=form), shown=[EVIL])
        elsewhere = {**form, "token": token}
        _check_html(_html_page(url, "/nowhere", 404, method="POST", form=elsewhere))
        _check_html(_too_large(url), shown=[EVIL])

        def broken(page: int) -> None:
            raise RuntimeError(EVIL)

        monkeypatch.setattr(served.app, "runs_page", broken)
        _check_html(_html_page(url, "/", 500), shown=[f"RuntimeError: {EVIL}"])
    with flows.serving(hostile_db) as read_only:
        form = {"token": read_only.app.token, "run": WAITING, "path": QUOTE, "value": EVIL}
        _check_html(_html_page(read_only.url, "/nowhere", 405, method="POST", form=form))
        refused = {**form, "path": EVIL}  # no such question: refused, with the path named
        _check_html(_refused_page(read_only.url, refused), shown=[show(EVIL), "nothing was saved"])
    unreadable = tmp_path / SCRIPT.replace("/", "") / "runs.json"
    unreadable.parent.mkdir()
    unreadable.write_text("{not json", encoding="utf-8")
    with flows.serving(str(unreadable)) as served:
        _check_html(_html_page(served.url, "/", 500), shown=[SCRIPT.replace("/", "")])


def test_every_answer_page_shows_hostile_text_as_text(
    hostile_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused answers, hostile paths, claimed and unknown runs, then a hostile answer saved."""
    with flows.serving(hostile_db, hostile(), EVIL) as served:
        url, token = served.url, served.app.token

        def answer(run_id: str, path: str, value: str) -> str:
            form = {"token": token, "run": run_id, "path": path, "value": value}
            return _refused_page(url, form, 404 if run_id == EVIL else 200)

        refused = f"refuse {EVIL}"
        page = answer(WAITING, QUOTE, refused)
        _check_html(page, shown=[f"the check of {QUOTE} refused the answer", refused, WAITING])
        _check_html(answer(WAITING, EVIL, "yes"), shown=[EVIL, "nothing ran"])
        page = answer(FAILED, TEXTAREA_PATH, "yes")  # its input is not given to this server
        _check_html(page, shown=[repr(FAIL), "nothing ran", FAILED])
        with _claimed_by_a_hostile_host(hostile_db, monkeypatch, WAITING):
            page = answer(WAITING, QUOTE, "yes")
        _check_html(page, shown=[repr(EVIL), "nothing ran for this answer"])  # the owner
        page = answer(EVIL, QUOTE, "yes")
        _check_html(page, shown=["Not answered", "no checkpoint of this run"])
        form = {"token": token, "run": WAITING, "path": QUOTE, "value": EVIL}
        status, headers, _ = _request(url, "/answer", method="POST", form=form)
        assert status == 303
        assert headers["Location"] == _run_path(WAITING)
        served.app.resumer.stop()  # the answer is saved: stop what it resumed
        page = _html_page(url, _run_path(WAITING))
    _check_html(page, shown=[json.dumps(EVIL, ensure_ascii=False)])  # the answer, an output
    assert f'name="path" value="{escape(TEXTAREA_PATH)}"' in page
    assert f'name="path" value="{escape(QUOTE)}"' not in page  # answered


def test_the_page_check_fails_on_unescaped_text() -> None:
    """The check above catches a raw tag, an event handler, a raw payload and a dropped text."""
    page = html(
        '<!doctype html><html><head><script src="/assets/serve.js" defer></script></head>'
        "<body><p>{}</p></body></html>",
        "shown",
    )
    _check_html(page, shown=["shown"])
    for broken in (
        page.replace("<p>", f"<p>{SCRIPT}"),
        page.replace("<p>", '<p onclick="x">'),
        page.replace("<p>", '<p><a href="javascript:x">'),
        page.replace("<p>", f"<p>{QUOTE}"),
    ):
        with pytest.raises(AssertionError):
            _check_html(broken, shown=["shown"])
    with pytest.raises(AssertionError):
        _check_html(page, shown=["dropped"])
