"""The pages, rendered on the server, built of `Markup` alone: no value reaches them raw.

Outputs, questions, step names and errors are model or user text. Every
renderer here returns `Markup`, and every value gets into it through a hole of
an `html` template, `markup` or `join` (`_markup`), which escape whatever is not
markup already, attribute values included: there is no escape call to forget.
Plain text (numbers, dates, a command line) is made as a `str` and escaped on
its way in. Pages link one stylesheet and one script from ``/assets/`` and
carry no inline script or style, so that the Content-Security-Policy the server
sends can forbid both.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from executionkit._cli._serve._markup import Markup, html, join, markup
from executionkit._cli._serve._svg import graph_svg
from executionkit._cli._serve._timeline import timeline
from executionkit._cli._step_times import duration_text
from executionkit._define._waits import waits_in
from executionkit._paths import join_path
from executionkit._terminal import json_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence  # noqa: TC004 - dataclass annotations stay strings

    from executionkit._checkpoint._value import WorkflowCheckpoint  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._answers import RunEvents  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._runs import (  # noqa: TC004 - dataclass annotations stay strings
        CodeChange,
        RunRow,
        StepLedger,
        StepView,
    )
    from executionkit._cli._step_times import StepTimes  # noqa: TC004 - dataclass annotations stay strings

PREVIEW_CHARS = 160
SHOWN_FAILED_KEYS = 20
_NO_RUN_ID = "(no run id)"
NOTHING = html("")


def document(
    title: str,
    header: Markup,
    main: Markup,
    *,
    live: str | None = None,
    stream: str | None = None,
    version: str | None = None,
) -> Markup:
    """A whole page; ``live`` is the URL the script polls while the page changes.

    ``stream``: the URL of the text a run's running steps stream, polled faster.
    ``version``: the version of ``main`` (`_parts.Renders`), which the script's
    polls name so that only what changed since comes back.
    """
    attributes = html("") if live is None else html(' data-live="{}"', live)
    if version is not None:
        attributes = html('{} data-version="{}"', attributes, version)
    if stream is not None:
        attributes = html('{} data-stream="{}"', attributes, stream)
    return html(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>{}</title>"
        '<link rel="stylesheet" href="/assets/serve.css">'
        '<script src="/assets/serve.js" defer></script></head>'
        "<body><header>{}</header>"
        '<main id="main"{}>{}</main></body></html>\n',
        title,
        header,
        attributes,
        main,
    )


def header(label: str, workflow: str | None, waiting: int | None = None) -> Markup:
    """The bar on every page: home, the inbox, the location, what answering a question does.

    ``waiting``: how many questions wait, for the inbox's link (None: not known).
    """
    mode = (
        f"answering with {workflow}"
        if workflow is not None
        else "answers are saved for a worker (start with --workflow MODULE:ATTR to resume "
        "runs here)"
    )
    inbox = "questions" if waiting is None else f"questions waiting: {waiting:,}"
    return html(
        '<a class="home" href="/">executionkit runs</a>'
        '<a class="inbox-link" href="/questions">{}</a>'
        '<span class="location">{}</span><span class="mode">{}</span>',
        inbox,
        label,
        mode,
    )


def moment(text: str | None) -> Markup:
    """A time as people read it, ``2026-12-02 09:00:05 UTC``, the full ISO text in its title.

    A ``<time>`` element: its ``datetime`` and ``title`` hold the time as recorded
    (UTC ISO 8601, microseconds included). Text that is not such a time is shown
    as it is; None is ``-``.
    """
    if text is None:
        return html("-")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return markup(text)
    when = when.astimezone(UTC) if when.tzinfo is not None else when.replace(tzinfo=UTC)
    shown = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    return html('<time datetime="{}" title="{}">{}</time>', text, text, shown)


def breakable(name: str) -> Markup:
    """A step name or run id that a narrow cell may wrap after its underscores, never mid-word."""
    return join(name.split("_"), html("_<wbr>"))


def status_word(status: str) -> Markup:
    """The status as a word the stylesheet colours."""
    return html('<span class="status status-{}">{}</span>', status, status)


def run_link(page_id: str, text: object = None, **more: str) -> Markup:
    """A link to the page of run ``page_id`` (``more``: ``child``)."""
    query = urlencode({"id": page_id, **more})
    return html('<a href="/run?{}">{}</a>', query, page_id if text is None else text)


def compare_link(a: str, b: str, text: str = "compare") -> Markup:
    """A link to the comparison of run ``a`` with run ``b``."""
    return html('<a href="/compare?{}">{}</a>', urlencode({"a": a, "b": b}), text)


@dataclass(frozen=True, slots=True)
class RunsFilter:
    """What the runs page shows of the location: a status (None: all) and a run id search."""

    status: str | None = None
    search: str = ""
    counts: Mapping[str, int] = field(default_factory=dict)  # runs by status, searched
    total: int = 0  # every run of the location

    def query(self, **more: object) -> str:
        """The runs page's query string for this filter and ``more`` (``page=2``)."""
        given: dict[str, object] = {}
        if self.status is not None:
            given["status"] = self.status
        if self.search:
            given["q"] = self.search
        given.update(more)
        return urlencode({key: value for key, value in given.items() if value is not None})


def runs_main(
    rows: Sequence[RunRow],
    *,
    page: int,
    pages: int,
    count: int,
    shown: RunsFilter | None = None,
) -> Markup:
    """The runs page: one row per run, newest first, a page of them at a time.

    ``shown``: the status and search that chose ``count`` runs, and the counts of
    each status, linked above the table.
    """
    shown = shown or RunsFilter(total=count)
    if not shown.total:
        return html("<h1>Runs</h1><p>No run saved here yet.</p>")
    if shown.status is None and not shown.search:
        said = f"{count:,} run{'' if count == 1 else 's'}, newest first."
    else:
        chosen = [] if shown.status is None else [f"status {shown.status}"]
        if shown.search:
            chosen.append(f"run id containing {shown.search!r}")
        said = f"{count:,} of {shown.total:,} runs ({', '.join(chosen)}), newest first."
    if not rows:
        table = html('<p class="nothing">No run matches.</p>')
    else:
        priced = any(row.dollars is not None for row in rows)
        table = html(
            '<table class="runs"><thead><tr><th>run</th><th>status</th><th>steps done</th>'
            "<th>tokens</th>{}<th>last checkpoint</th><th>questions waiting</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            html("<th>dollars</th>") if priced else html(""),
            join(_run_row(row, priced=priced) for row in rows),
        )
    return html(
        "<h1>Runs</h1>{}{}<p>{}</p>{}{}",
        _status_links(shown),
        _search_form(shown),
        said,
        table,
        _pager(page, pages, shown),
    )


def _status_links(shown: RunsFilter) -> Markup:
    """The links choosing a status (or all), each with how many runs have it."""
    links = []
    everything = RunsFilter(None, shown.search)
    every = sum(shown.counts.values())
    for status, query, number in (
        (None, everything.query(), every),
        *(
            (name, RunsFilter(name, shown.search).query(), shown.counts.get(name, 0))
            for name in shown.counts
        ),
    ):
        word = "all" if status is None else status
        current = html(' class="current"') if status == shown.status else html("")
        href = f"/?{query}" if query else "/"
        links.append(html('<a href="{}"{}>{}</a> ({})', href, current, word, f"{number:,}"))
    return html('<nav class="filters" aria-label="runs by status">{}</nav>', join(links, " · "))


def _search_form(shown: RunsFilter) -> Markup:
    """The small form searching run ids (keeping the status chosen)."""
    status = (
        html("")
        if shown.status is None
        else html('<input type="hidden" name="status" value="{}">', shown.status)
    )
    return html(
        '<form method="get" action="/" class="search" role="search">{}'
        '<label for="run-search">run id contains</label>'
        '<input type="search" id="run-search" name="q" value="{}" autocomplete="off">'
        '<button type="submit">Search</button></form>',
        status,
        shown.search,
    )


def _run_row(row: RunRow, *, priced: bool = False) -> Markup:
    """One run's row of the runs page (``priced``: with its bill)."""
    dollars = html('<td class="number">{}</td>', row.dollars or "-") if priced else html("")
    status = status_word(row.status)
    if row.left_alone is not None:  # the reason is on the run's page
        status = html('{} <span class="left-alone-mark">left alone</span>', status)
    return html(
        '<tr><td class="run-id">{}</td><td>{}</td><td>{}</td><td class="number">{}</td>'
        "{}<td>{}</td><td>{}</td></tr>",
        run_link(row.run_id, breakable(row.run_id or _NO_RUN_ID)),
        status,
        f"{row.done}{'' if row.total is None else f' of {row.total}'}",
        f"{row.tokens:,}",
        dollars,
        moment(row.saved_at),
        join(row.questions, ", ") or "-",
    )


def _pager(page: int, pages: int, shown: RunsFilter) -> Markup:
    """The links to the newer and older pages of runs, if there is more than one."""
    if pages <= 1:
        return html("")
    links: list[object] = [f"page {page} of {pages}"]
    if page > 1:
        links.insert(0, html('<a href="/?{}">newer</a>', shown.query(page=page - 1)))
    if page < pages:
        links.append(html('<a href="/?{}">older</a>', shown.query(page=page + 1)))
    return html('<nav class="pager">{}</nav>', join(links, " · "))


@dataclass(frozen=True, slots=True)
class RunPage:
    """Everything one run's page shows."""

    page_id: str
    child: str | None
    checkpoint: WorkflowCheckpoint
    status: str
    owner: str | None
    steps: Sequence[StepView]
    events: RunEvents
    questions: Mapping[str, Mapping[str, Any]]
    token: str  # the forms' token
    answer_command: str
    message: str | None = None
    ledger: Mapping[str, StepLedger] = field(default_factory=dict)  # the checkpoint's, by step
    bill: str | None = None  # with --prices: the run's bill in dollars
    dollars: Mapping[str, str] = field(default_factory=dict)  # and each step's
    inbox: InboxView | None = None  # what the inbox holds of the run; None: nothing to show
    code_changes: Sequence[CodeChange] = ()  # with --workflow: recorded steps whose code changed
    lineage: Markup = NOTHING  # where a fork came from, and the forks made of this run
    money: Markup = NOTHING  # with --prices: dollars by step and by model
    times: Mapping[str, StepTimes] = field(default_factory=dict)  # `step_times`, by step
    now_ms: int = 0  # when the page is made: milliseconds since the epoch


@dataclass(frozen=True, slots=True)
class InboxView:
    """What the store's inbox holds of one run, as its page shows it."""

    worker_command: str  # the command that carries the run on
    answers: Mapping[str, Any] = field(default_factory=dict)  # saved, waiting for a worker
    left_alone: str | None = None  # why a worker left the run alone
    notice: str | None = None  # what the answer just posted did
    saves: bool = True  # the forms save answers here (no --workflow)


@dataclass(frozen=True, slots=True)
class SubmittedPage:
    """The page of a run submitted to start that has no checkpoint yet."""

    page_id: str
    submitted_at: str
    input_keys: Sequence[str]  # the names only: the values are never shown
    status: str  # "submitted", or "running" once a worker claimed it
    owner: str | None
    inbox: InboxView
    message: str | None = None  # why an answer posted to it was refused
    # The text its running steps stream before its first checkpoint (`RunEvents.stream_from`).
    streamed: RunEvents | None = None


def run_main(run: RunPage) -> Markup:
    """A run's page: its state, its questions, its graph and its steps."""
    checkpoint = run.checkpoint
    cost = checkpoint.cost
    title = markup(run.page_id or _NO_RUN_ID)
    if run.child is not None:
        title = html("{} / {}", run_link(run.page_id, run.page_id or _NO_RUN_ID), run.child)
    facts: list[tuple[str, object]] = [
        ("status", status_word(run.status)),
        ("claimed by", run.owner or "nobody"),
        ("checkpoint", html("seq {}, saved {}", checkpoint.seq, moment(checkpoint.created_at))),
        (
            "tokens",
            (
                f"{cost.input_tokens + cost.output_tokens:,} ({cost.input_tokens:,} in, "
                f"{cost.output_tokens:,} out, {cost.llm_calls:,} "
                f"call{'' if cost.llm_calls == 1 else 's'})"
            ),
        ),
    ]
    if run.bill is not None:
        facts.append(("dollars", run.bill))
    timers = waits_in(checkpoint)
    if timers:
        due = [html("{} at {}", path, moment(when.isoformat())) for path, when in timers.items()]
        facts.append(("waiting until", join(due, "; ")))
    failed = [
        html('<a href="#step-{}">{}</a>', number, step.name)
        for number, step in enumerate(run.steps)
        if step.status == "failed"
    ]
    if failed:
        facts.append(("failed", join(failed, ", ")))
    if checkpoint.context_keys:
        keys = join(checkpoint.context_keys, ", ")
        facts.append(("inputs", html("{} (names only: values are never stored)", keys)))
    parts = [
        html('<h1 class="run-title">{}</h1><dl class="facts" data-part="facts">', title),
        *(html("<dt>{}</dt><dd>{}</dd>", label, value) for label, value in facts),
        html("</dl>"),
    ]
    if run.message is not None:
        parts.append(html('<p class="message" role="alert">{}</p>', run.message))
    parts.append(run.lineage)
    if run.inbox is not None:
        parts.append(_inbox_notes(run.inbox))
    if run.code_changes:
        parts.append(_code_changes(run.code_changes))
    if run.questions:
        parts.append(_questions(run))
    parts.append(html('<h2>Graph</h2><div class="graph-box">{}</div>', graph_svg(run.steps)))
    parts.append(_steps_table(run))
    parts.append(
        timeline(
            checkpoint,
            run.steps,
            now_ms=run.now_ms,
            times=run.times,
            live=run.status == "running",
        )
    )
    parts.append(run.money)
    return join(parts)


def submitted_main(run: SubmittedPage) -> Markup:
    """The page of a run submitted to start and not started: when, its input names, a worker."""
    started = (
        "not started yet: a worker starts it"
        if run.status == "submitted"
        else "a worker has claimed it and starts it: its first checkpoint is not saved yet"
    )
    facts: list[tuple[str, object]] = [
        ("status", status_word(run.status)),
        ("claimed by", run.owner or "nobody"),
        ("submitted", html("submitted at {}, {}", moment(run.submitted_at), started)),
    ]
    if run.input_keys:
        keys = join(run.input_keys, ", ")
        facts.append(("inputs", html("{} (names only: the values are never shown)", keys)))
    return join(
        [
            html('<h1 class="run-title">{}</h1><dl class="facts">', run.page_id or _NO_RUN_ID),
            *(html("<dt>{}</dt><dd>{}</dd>", label, value) for label, value in facts),
            html("</dl>"),
            NOTHING
            if run.message is None
            else html('<p class="message" role="alert">{}</p>', run.message),
            _inbox_notes(run.inbox),
            _streaming_now(run),
            html(
                '<p class="cli">A worker starts it:</p><pre><code>{}</code></pre>',
                run.inbox.worker_command,
            ),
        ]
    )


def _streaming_now(run: SubmittedPage) -> Markup:
    """The steps of a claimed run streaming before its first checkpoint: a row each.

    The rows are those of a run's steps table (the page's script finds a step's
    text by its row), so the text grows as on any run's page until the first
    checkpoint brings the whole page.
    """
    if run.status != "running" or run.streamed is None:
        return NOTHING
    rows = []
    for name, seen in run.streamed.steps.items():
        rows.append(
            html(
                '<tr class="step-row" data-step="{}"><td class="step-name">{}</td><td>-</td>'
                '<td>{}</td><td class="number">{}</td><td class="number">-</td>'
                '<td class="number">-</td><td>{}</td><td class="error"></td></tr>',
                name,
                breakable(name),
                status_word("running"),
                seen.attempts or "-",
                _streamed_text(name, (seen.streamed_attempt, seen.streamed), seen.items_streamed),
            )
        )
    return html(
        '<h2>Running now</h2><p class="note">What its running steps stream, until its first '
        "checkpoint is saved.</p>"
        '<table class="steps"><thead><tr><th>step</th><th>kind</th><th>status</th>'
        '<th class="number">attempts</th><th class="number">duration</th>'
        '<th class="number">tokens</th><th>output</th><th>error</th></tr></thead>'
        "<tbody>{}</tbody></table>",
        join(rows),
    )


def _inbox_notes(inbox: InboxView) -> Markup:
    """What the answer just posted did, and why a worker left the run alone."""
    parts = []
    if inbox.notice is not None:
        parts.append(html('<p class="notice" role="status">{}</p>', inbox.notice))
    if inbox.left_alone is not None:
        parts.append(
            html(
                '<section class="left-alone" role="note"><h2>Left alone by a worker</h2>'
                '<p class="reason">{}</p><p class="note">Workers skip this run until an '
                "answer is saved for it, or a worker process starts anew (each one tries such "
                "a run once): fix what the reason says first.</p></section>",
                inbox.left_alone,
            )
        )
    return join(parts)


def _code_changes(changes: Sequence[CodeChange]) -> Markup:
    """The box listing the recorded steps whose code changed since their outputs were recorded."""
    lines = [
        html(
            "<p>step <code>{}</code> ({} → {}); running it again would cost {} tokens</p>",
            change.step,
            change.recorded,
            change.current,
            f"{change.tokens:,}",
        )
        for change in changes
    ]
    return html(
        '<section class="code-changed" role="note"><h2>Code changed since recorded</h2>{}'
        '<p class="note">A resume keeps these outputs (made by the old code) unless it is '
        "told to run them again (executionkit run --on-code-change rerun).</p></section>",
        join(lines),
    )


def _questions(run: RunPage) -> Markup:
    """The questions the run waits for, each with its form (a child's: its command)."""
    parts = [html("<h2>Questions waiting</h2>")]
    saves = run.inbox is not None and run.inbox.saves
    saved = {} if run.inbox is None else run.inbox.answers
    for number, (path, entry) in enumerate(run.questions.items()):
        command = f"{run.answer_command} --answer {shlex.quote(path)}=VALUE"
        terminal = html(
            '<p class="cli">Answer {} from a terminal:</p><pre><code>{}</code></pre>',
            path,
            command,
        )
        if run.child is None:
            form = answer_form(
                run.token,
                run.page_id,
                path,
                f"answer-{number}",
                saves=saves,
                replaces=path in saved,
            )
            if saves:
                terminal = html(
                    '<p class="cli">Or answer it from a terminal, resuming the run there:</p>'
                    "<pre><code>{}</code></pre>",
                    command,
                )
                form = html("{}{}", form, terminal)
        else:
            form = terminal
        parts.append(
            html(
                '<section class="ask"><h3>{}</h3>{}{}{}</section>',
                path,
                question_body(entry),
                saved_answer(saved, path),
                form,
            )
        )
    return join(parts)


def question_body(entry: Mapping[str, Any]) -> Markup:
    """When a question was asked, its deadline, and the question itself."""
    question = entry["question"]
    if isinstance(question, str):
        shown = html('<p class="question">{}</p>', question)
    else:
        shown = html('<pre class="question">{}</pre>', json.dumps(question, indent=2))
    expires = entry.get("expires_at")
    deadline = html(", expires {}", moment(expires)) if expires else html(", never expires")
    return html(
        '<p class="asked">asked {}{}</p>{}', moment(entry.get("asked_at")), deadline, shown
    )


def saved_answer(saved: Mapping[str, Any], path: str) -> Markup:
    """The answer saved in the inbox for ``path``, waiting for a worker, if there is one."""
    if path not in saved:
        return NOTHING
    return html(
        '<p class="saved-answer">answer saved, waiting for a worker: <code>{}</code></p>',
        json.dumps(saved[path], ensure_ascii=False),
    )


def answer_form(
    token: str,
    page_id: str,
    path: str,
    field_id: str,
    *,
    saves: bool,
    replaces: bool,
    back: str | None = None,
) -> Markup:
    """The form answering ``path`` of run ``page_id``: resumes the run, or (``saves``) saves.

    ``field_id`` is its text field's id, unique on the page; ``back``: the page to come
    back to once answered (``questions``), else the run's.
    """
    if not saves:
        hint = html('read as JSON (true, 3, {"a": 1}), else as the text itself')
    elif replaces:
        hint = html(
            'read as JSON (true, 3, {"a": 1}), else as the text itself; it replaces the '
            "answer saved, and nothing runs here: a worker resumes the run"
        )
    else:
        hint = html(
            'read as JSON (true, 3, {"a": 1}), else as the text itself; it is saved, and '
            "nothing runs here: a worker resumes the run"
        )
    returning = (
        NOTHING if back is None else html('<input type="hidden" name="back" value="{}">', back)
    )
    return html(
        '<form method="post" action="/answer" class="answer">'
        '<input type="hidden" name="token" value="{}">'
        '<input type="hidden" name="run" value="{}">'
        '<input type="hidden" name="path" value="{}">{}'
        '<label for="{}">{}</label>'
        '<input type="text" id="{}" name="value" autocomplete="off" required>'
        '<button type="submit">Answer</button>'
        '<p class="hint">{}</p>'
        "</form>",
        token,
        page_id,
        path,
        returning,
        field_id,
        path,
        field_id,
        hint,
    )


def _steps_table(run: RunPage) -> Markup:
    """The table of the run's steps, one row each, and the note on where its numbers come from."""
    rows = []
    for number, step in enumerate(run.steps):
        rows.append(
            html(
                '<tr class="step-row" id="step-{}" data-step="{}" data-part="step:{}">'
                '<td class="step-name">{}</td><td>{}</td><td>{}</td>'
                '<td class="number">{}</td><td class="number">{}</td>'
                '<td class="number">{}</td><td>{}{}{}</td><td class="error">{}</td></tr>',
                number,
                step.name,
                step.name,
                breakable(step.name),
                step.kind,
                status_word(step.status),
                _attempts(run, step),
                _duration(run, step),
                _tokens(run, step),
                _output(run, step),
                _items(step),
                join([_child(run, step), _streamed(run, step)]),
                step.error or "",
            )
        )
    return html(
        '<h2>Steps</h2><table class="steps"><thead><tr><th>step</th><th>kind</th>'
        "<th>status</th><th>attempts</th><th>duration</th><th>tokens</th><th>output</th>"
        '<th>error</th></tr></thead><tbody data-list="steps">{}</tbody></table>'
        '<p class="note">Tokens come from the ledger a checkpoint keeps (format 4: the '
        "attempts that reported usage, wasted ones included). Durations and attempts come "
        "from when each attempt ran (format 5: every attempt that ended, with or without "
        "usage): from the first attempt's start to the last one's end, a map's from its first "
        "item's start to its last item's end; a step running shows how long it has run only "
        "in a run this server resumed, which it hears.</p>",
        join(rows),
    )


def _attempts(run: RunPage, step: StepView) -> str:
    """The step's attempts: as its events said, else the most its ledger or its times record."""
    seen = run.events.steps.get(step.name)
    if seen is not None and seen.attempts:
        return str(seen.attempts)
    recorded = run.ledger.get(step.name)
    times = run.times.get(step.name)
    most = max(
        0 if recorded is None else recorded.attempts, 0 if times is None else times.attempts
    )
    return str(most) if most else "-"


def _duration(run: RunPage, step: StepView) -> str:
    """How long the step ran: from its attempts' times, else from its events.

    A step running now shows how long it has run so far only when this server
    saw it start (it resumed the run): a checkpoint holds no time of an attempt
    that has not ended.
    """
    seen = run.events.steps.get(step.name)
    if step.status == "running" or (seen is not None and seen.running):
        if seen is None or not seen.running or seen.started_ms is None:
            return "-"
        return f"{duration_text(run.now_ms - seen.started_ms)} so far"
    times = run.times.get(step.name)
    if times is not None:
        return duration_text(times.duration)
    if seen is not None and seen.duration is not None:
        return duration_text(round(seen.duration * 1000))
    return "-"


def _tokens(run: RunPage, step: StepView) -> Markup:
    """The step's tokens: from the ledger (wasted part, attempts of unknown usage), else events."""
    recorded = run.ledger.get(step.name)
    dollars = run.dollars.get(step.name)
    if recorded is not None:
        wasted = f" ({recorded.wasted:,} wasted)" if recorded.wasted else ""
        text = f"{recorded.tokens:,}{wasted}" + ("" if dollars is None else f", {dollars}")
        if not recorded.unknown:
            return markup(text)
        unknown = recorded.unknown
        return html(
            '{}<span class="unknown-usage">{}</span>',
            text,
            f"{unknown:,} attempt{'' if unknown == 1 else 's'} of unknown usage",
        )
    seen = run.events.steps.get(step.name)
    return markup("-" if seen is None or seen.tokens is None else f"{seen.tokens:,}")


def _streamed(run: RunPage, step: StepView) -> Markup:
    """What the step's running attempt streamed so far (`StepStreamed`), growing live."""
    seen = run.events.steps.get(step.name)
    if seen is None:
        return html("")
    return _streamed_text(step.name, (seen.streamed_attempt, seen.streamed), seen.items_streamed)


def _streamed_text(
    name: str, own: tuple[int, str], items: Mapping[str, tuple[int, str]]
) -> Markup:
    """What a step streamed so far: ``own``, its attempt's number and text; ``items``, by key.

    ``items``: each running item of a map, its attempt's number and text.
    """
    shown = []
    if own[1]:
        shown.append(
            html(
                '<pre class="streamed" data-stream-step="{}" data-attempt="{}">{}</pre>',
                name,
                own[0],
                own[1],
            )
        )
    for key, (attempt, text) in items.items():
        shown.append(
            html(
                '<div class="streamed-item"><span class="item-key">item {}</span>'
                '<pre class="streamed" data-stream-step="{}" data-stream-item="{}" '
                'data-attempt="{}">{}</pre></div>',
                key,
                name,
                key,
                attempt,
                text,
            )
        )
    return join(shown)


def _output(run: RunPage, step: StepView) -> Markup:
    """The start of the step's output as JSON, and a link to the whole of it."""
    if not step.has_output:
        return html("")
    text = json_text(step.output)
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    query = {"id": run.page_id, "step": step.name}
    if run.child is not None:
        query["child"] = run.child
    return html(
        '<code class="preview">{}</code> <a class="whole" href="/output?{}">whole output</a>',
        text,
        urlencode(query),
    )


def _items(step: StepView) -> Markup:
    """A map's items done, of how many, and the keys of the first that failed."""
    items = step.items
    if items is None:
        return html("")
    done = f"{items.recorded:,}" + ("" if items.total is None else f" of {items.total:,}")
    if items.finished:
        return html('<p class="items">{} items</p>', done)
    failed = html("")
    if items.failed:
        more = len(items.failed) - SHOWN_FAILED_KEYS
        failed = html(
            "; {} failed: {}{}",
            f"{len(items.failed):,}",
            join(items.failed[:SHOWN_FAILED_KEYS], ", "),
            f" and {more:,} more" if more > 0 else "",
        )
    return html('<p class="items">{} items done{}</p>', done, failed)


def _child(run: RunPage, step: StepView) -> Markup:
    """Links to the views of the step's sub-workflows in progress (a map's: the first 20)."""
    path = join_path(step.name) if run.child is None else f"{run.child}/{join_path(step.name)}"
    if step.child:
        link = run_link(run.page_id, "open its run", child=path)
        return html('<p class="child">{}</p>', link)
    if not step.child_items:
        return html("")
    links = join(
        (
            run_link(run.page_id, f"item {key}", child=f"{path}/{join_path(key)}")
            for key in step.child_items[:SHOWN_FAILED_KEYS]
        ),
        ", ",
    )
    more = len(step.child_items) - SHOWN_FAILED_KEYS
    rest = f" and {more:,} more" if more > 0 else ""
    return html('<p class="child">items in progress: {}{}</p>', links, rest)


def message_main(title: str, message: str, extra: Markup = NOTHING) -> Markup:
    """A page that only says something: an error, a refusal; ``extra`` goes below it."""
    return html('<h1>{}</h1><p class="message" role="alert">{}</p>{}', title, message, extra)
