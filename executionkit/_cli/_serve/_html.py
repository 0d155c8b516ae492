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
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from executionkit._cli._serve._markup import Markup, html, join, markup
from executionkit._cli._serve._svg import graph_svg
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

PREVIEW_CHARS = 160
SHOWN_FAILED_KEYS = 20
_NO_RUN_ID = "(no run id)"
NOTHING = html("")


def document(title: str, header: Markup, main: Markup, *, live: str | None = None) -> Markup:
    """A whole page; ``live`` is the URL the script polls while the page changes."""
    attributes = html("") if live is None else html(' data-live="{}"', live)
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


def header(label: str, workflow: str | None) -> Markup:
    """The bar on every page: home, the location, and what answering a question does."""
    mode = (
        f"answering with {workflow}"
        if workflow is not None
        else "answers are saved for a worker (start with --workflow MODULE:ATTR to resume "
        "runs here)"
    )
    return html(
        '<a class="home" href="/">executionkit runs</a>'
        '<span class="location">{}</span><span class="mode">{}</span>',
        label,
        mode,
    )


def status_word(status: str) -> Markup:
    """The status as a word the stylesheet colours."""
    return html('<span class="status status-{}">{}</span>', status, status)


def run_link(page_id: str, text: str | None = None, **more: str) -> Markup:
    """A link to the page of run ``page_id`` (``more``: ``child``)."""
    query = urlencode({"id": page_id, **more})
    return html('<a href="/run?{}">{}</a>', query, page_id if text is None else text)


def runs_main(rows: Sequence[RunRow], *, page: int, pages: int, count: int) -> Markup:
    """The runs page: one row per run, newest first, a page of them at a time."""
    if not rows:
        return html("<h1>Runs</h1><p>No run saved here yet.</p>")
    priced = any(row.dollars is not None for row in rows)
    return html(
        "<h1>Runs</h1><p>{}</p>"
        '<table class="runs"><thead><tr><th>run</th><th>status</th><th>steps done</th>'
        "<th>tokens</th>{}<th>last checkpoint</th><th>questions waiting</th></tr></thead>"
        "<tbody>{}</tbody></table>{}",
        f"{count:,} run{'' if count == 1 else 's'}, newest first.",
        html("<th>dollars</th>") if priced else html(""),
        join(_run_row(row, priced=priced) for row in rows),
        _pager(page, pages),
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
        run_link(row.run_id, row.run_id or _NO_RUN_ID),
        status,
        f"{row.done}{'' if row.total is None else f' of {row.total}'}",
        f"{row.tokens:,}",
        dollars,
        row.saved_at or "-",
        join(row.questions, ", ") or "-",
    )


def _pager(page: int, pages: int) -> Markup:
    """The links to the newer and older pages of runs, if there is more than one."""
    if pages <= 1:
        return html("")
    links: list[object] = [f"page {page} of {pages}"]
    if page > 1:
        links.insert(0, html('<a href="/?page={}">newer</a>', page - 1))
    if page < pages:
        links.append(html('<a href="/?page={}">older</a>', page + 1))
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
        ("checkpoint", f"seq {checkpoint.seq}, saved {checkpoint.created_at or '-'}"),
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
        due = [html("{} at {}", path, moment.isoformat()) for path, moment in timers.items()]
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
        html('<h1 class="run-title">{}</h1><dl class="facts">', title),
        *(html("<dt>{}</dt><dd>{}</dd>", label, value) for label, value in facts),
        html("</dl>"),
    ]
    if run.message is not None:
        parts.append(html('<p class="message" role="alert">{}</p>', run.message))
    if run.inbox is not None:
        parts.append(_inbox_notes(run.inbox))
    if run.code_changes:
        parts.append(_code_changes(run.code_changes))
    if run.questions:
        parts.append(_questions(run))
    parts.append(html('<h2>Graph</h2><div class="graph-box">{}</div>', graph_svg(run.steps)))
    parts.append(_steps_table(run))
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
        ("submitted", f"submitted at {run.submitted_at}, {started}"),
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
            html(
                '<p class="cli">A worker starts it:</p><pre><code>{}</code></pre>',
                run.inbox.worker_command,
            ),
        ]
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
        question = entry["question"]
        if isinstance(question, str):
            shown = html('<p class="question">{}</p>', question)
        else:
            shown = html('<pre class="question">{}</pre>', json.dumps(question, indent=2))
        expires = entry.get("expires_at")
        asked = f"asked {entry.get('asked_at') or '-'}" + (
            f", expires {expires}" if expires else ", never expires"
        )
        answered = NOTHING
        if path in saved:
            answered = html(
                '<p class="saved-answer">answer saved, waiting for a worker: <code>{}</code></p>',
                json.dumps(saved[path], ensure_ascii=False),
            )
        command = f"{run.answer_command} --answer {shlex.quote(path)}=VALUE"
        terminal = html(
            '<p class="cli">Answer {} from a terminal:</p><pre><code>{}</code></pre>',
            path,
            command,
        )
        if run.child is None:
            form = _answer_form(run, number, path, saves=saves, replaces=path in saved)
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
                '<section class="ask"><h3>{}</h3><p class="asked">{}</p>{}{}{}</section>',
                path,
                asked,
                shown,
                answered,
                form,
            )
        )
    return join(parts)


def _answer_form(run: RunPage, number: int, path: str, *, saves: bool, replaces: bool) -> Markup:
    """The form answering ``path``: it resumes the run here, or (``saves``) saves the answer."""
    field = f"answer-{number}"
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
    return html(
        '<form method="post" action="/answer" class="answer">'
        '<input type="hidden" name="token" value="{}">'
        '<input type="hidden" name="run" value="{}">'
        '<input type="hidden" name="path" value="{}">'
        '<label for="{}">{}</label>'
        '<input type="text" id="{}" name="value" autocomplete="off" required>'
        '<button type="submit">Answer</button>'
        '<p class="hint">{}</p>'
        "</form>",
        run.token,
        run.page_id,
        path,
        field,
        path,
        field,
        hint,
    )


def _steps_table(run: RunPage) -> Markup:
    """The table of the run's steps, one row each, and the note on where its numbers come from."""
    rows = []
    for number, step in enumerate(run.steps):
        seen = run.events.steps.get(step.name)
        duration = "-" if seen is None or seen.duration is None else f"{seen.duration:.2f} s"
        rows.append(
            html(
                '<tr class="step-row" id="step-{}" data-step="{}">'
                '<td class="step-name">{}</td><td>{}</td><td>{}</td>'
                '<td class="number">{}</td><td class="number">{}</td>'
                '<td class="number">{}</td><td>{}{}{}</td><td class="error">{}</td></tr>',
                number,
                step.name,
                step.name,
                step.kind,
                status_word(step.status),
                _attempts(run, step),
                duration,
                _tokens(run, step),
                _output(run, step),
                _items(step),
                _child(run, step),
                step.error or "",
            )
        )
    return html(
        '<h2>Steps</h2><table class="steps"><thead><tr><th>step</th><th>kind</th>'
        "<th>status</th><th>attempts</th><th>duration</th><th>tokens</th><th>output</th>"
        "<th>error</th></tr></thead><tbody>{}</tbody></table>"
        '<p class="note">Tokens and attempts come from the ledger a checkpoint keeps (format '
        "4: the attempts that reported usage, wasted ones included); durations, and the "
        "attempts of steps without usage, are known for the runs this server resumed.</p>",
        join(rows),
    )


def _attempts(run: RunPage, step: StepView) -> str:
    """The step's attempts, as text: as its events said, else the most its ledger rows record."""
    seen = run.events.steps.get(step.name)
    if seen is not None and seen.attempts:
        return str(seen.attempts)
    recorded = run.ledger.get(step.name)
    return "-" if recorded is None or not recorded.attempts else str(recorded.attempts)


def _tokens(run: RunPage, step: StepView) -> str:
    """The step's tokens, as text: from the ledger (with the wasted part), else its events."""
    recorded = run.ledger.get(step.name)
    dollars = run.dollars.get(step.name)
    if recorded is not None:
        wasted = f" ({recorded.wasted:,} wasted)" if recorded.wasted else ""
        return f"{recorded.tokens:,}{wasted}" + ("" if dollars is None else f", {dollars}")
    seen = run.events.steps.get(step.name)
    return "-" if seen is None or seen.tokens is None else f"{seen.tokens:,}"


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
