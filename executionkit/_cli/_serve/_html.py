"""The pages, rendered on the server: every value goes through `html.escape` here.

Outputs, questions, step names and errors are model or user text: nothing of
them reaches the page unescaped. Pages link one stylesheet and one script from
``/assets/`` and carry no inline script or style, so that the
Content-Security-Policy the server sends can forbid both.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from executionkit._cli._serve._svg import graph_svg
from executionkit._paths import join_path
from executionkit._terminal import json_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence  # noqa: TC004 - dataclass annotations stay strings

    from executionkit._checkpoint._value import WorkflowCheckpoint  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._answers import RunEvents  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._cli._serve._runs import RunRow, StepLedger, StepView  # noqa: TC004 - dataclass annotations stay strings

PREVIEW_CHARS = 160
SHOWN_FAILED_KEYS = 20


def document(title: str, header: str, main: str, *, live: str | None = None) -> str:
    """A whole page; ``live`` is the URL the script polls while the page changes."""
    attributes = f' data-live="{escape(live)}"' if live is not None else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        '<link rel="stylesheet" href="/assets/serve.css">'
        '<script src="/assets/serve.js" defer></script></head>'
        f"<body><header>{header}</header>"
        f'<main id="main"{attributes}>{main}</main></body></html>\n'
    )


def header(label: str, workflow: str | None) -> str:
    """The bar on every page: home, the location, and whether questions can be answered."""
    mode = (
        f"answering with {escape(workflow)}"
        if workflow is not None
        else "read-only (start with --workflow MODULE:ATTR to answer questions here)"
    )
    return (
        '<a class="home" href="/">executionkit runs</a>'
        f'<span class="location">{escape(label)}</span><span class="mode">{mode}</span>'
    )


def status_word(status: str) -> str:
    """The status as a word the stylesheet colours."""
    return f'<span class="status status-{escape(status)}">{escape(status)}</span>'


def run_link(page_id: str, text: str | None = None, **more: str) -> str:
    """A link to the page of run ``page_id`` (``more``: ``child``)."""
    query = urlencode({"id": page_id, **more})
    return f'<a href="/run?{escape(query)}">{escape(page_id if text is None else text)}</a>'


def runs_main(rows: Sequence[RunRow], *, page: int, pages: int, count: int) -> str:
    """The runs page: one row per run, newest first, a page of them at a time."""
    if not rows:
        return "<h1>Runs</h1><p>No run saved here yet.</p>"
    body = "".join(
        "<tr>"
        f'<td class="run-id">{run_link(row.run_id, row.run_id or "(no run id)")}</td>'
        f"<td>{status_word(row.status)}</td>"
        f"<td>{row.done}{'' if row.total is None else f' of {row.total}'}</td>"
        f'<td class="number">{row.tokens:,}</td>'
        f"<td>{escape(row.saved_at or '-')}</td>"
        f"<td>{', '.join(escape(path) for path in row.questions) or '-'}</td>"
        "</tr>"
        for row in rows
    )
    return (
        f"<h1>Runs</h1><p>{count:,} run{'' if count == 1 else 's'}, newest first.</p>"
        '<table class="runs"><thead><tr><th>run</th><th>status</th><th>steps done</th>'
        "<th>tokens</th><th>last checkpoint</th><th>questions waiting</th></tr></thead>"
        f"<tbody>{body}</tbody></table>{_pager(page, pages)}"
    )


def _pager(page: int, pages: int) -> str:
    if pages <= 1:
        return ""
    links = [f"page {page} of {pages}"]
    if page > 1:
        links.insert(0, f'<a href="/?page={page - 1}">newer</a>')
    if page < pages:
        links.append(f'<a href="/?page={page + 1}">older</a>')
    return f'<nav class="pager">{" · ".join(links)}</nav>'


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
    token: str | None  # the form's token; None when the page is read-only
    answer_command: str
    message: str | None = None
    ledger: Mapping[str, StepLedger] = field(default_factory=dict)  # the checkpoint's, by step


def run_main(run: RunPage) -> str:
    """A run's page: its state, its questions, its graph and its steps."""
    checkpoint = run.checkpoint
    cost = checkpoint.cost
    title = escape(run.page_id or "(no run id)")
    if run.child is not None:
        title = f"{run_link(run.page_id, run.page_id or '(no run id)')} / {escape(run.child)}"
    facts = [
        ("status", status_word(run.status)),
        ("claimed by", escape(run.owner or "nobody")),
        ("checkpoint", f"seq {checkpoint.seq}, saved {escape(checkpoint.created_at or '-')}"),
        (
            "tokens",
            (
                f"{cost.input_tokens + cost.output_tokens:,} ({cost.input_tokens:,} in, "
                f"{cost.output_tokens:,} out, {cost.llm_calls:,} "
                f"call{'' if cost.llm_calls == 1 else 's'})"
            ),
        ),
    ]
    failed = [
        f'<a href="#step-{number}">{escape(step.name)}</a>'
        for number, step in enumerate(run.steps)
        if step.status == "failed"
    ]
    if failed:
        facts.append(("failed", ", ".join(failed)))
    if checkpoint.context_keys:
        keys = ", ".join(escape(key) for key in checkpoint.context_keys)
        facts.append(("inputs", f"{keys} (names only: values are never stored)"))
    parts = [
        f'<h1 class="run-title">{title}</h1>',
        '<dl class="facts">',
        *(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in facts),
        "</dl>",
    ]
    if run.message is not None:
        parts.append(f'<p class="message" role="alert">{escape(run.message)}</p>')
    if run.questions:
        parts.append(_questions(run))
    parts.append(f'<h2>Graph</h2><div class="graph-box">{graph_svg(run.steps)}</div>')
    parts.append(_steps_table(run))
    return "".join(parts)


def _questions(run: RunPage) -> str:
    parts = ["<h2>Questions waiting</h2>"]
    for number, (path, entry) in enumerate(run.questions.items()):
        question = entry["question"]
        if isinstance(question, str):
            shown = f'<p class="question">{escape(question)}</p>'
        else:
            shown = f'<pre class="question">{escape(json.dumps(question, indent=2))}</pre>'
        expires = entry.get("expires_at")
        asked = f"asked {escape(str(entry.get('asked_at') or '-'))}" + (
            f", expires {escape(expires)}" if expires else ", never expires"
        )
        field = f"answer-{number}"
        if run.token is not None and run.child is None:
            form = (
                '<form method="post" action="/answer" class="answer">'
                f'<input type="hidden" name="token" value="{escape(run.token)}">'
                f'<input type="hidden" name="run" value="{escape(run.page_id)}">'
                f'<input type="hidden" name="path" value="{escape(path)}">'
                f'<label for="{field}">{escape(path)}</label>'
                f'<input type="text" id="{field}" name="value" autocomplete="off" required>'
                '<button type="submit">Answer</button>'
                '<p class="hint">read as JSON (true, 3, {"a": 1}), else as the text itself</p>'
                "</form>"
            )
        else:
            command = f"{run.answer_command} --answer {shlex.quote(path)}=VALUE"
            form = (
                f'<p class="cli">Answer {escape(path)} from a terminal:</p>'
                f"<pre><code>{escape(command)}</code></pre>"
            )
        parts.append(
            f'<section class="ask"><h3>{escape(path)}</h3><p class="asked">{asked}</p>'
            f"{shown}{form}</section>"
        )
    return "".join(parts)


def _steps_table(run: RunPage) -> str:
    rows = []
    for number, step in enumerate(run.steps):
        seen = run.events.steps.get(step.name)
        duration = "-" if seen is None or seen.duration is None else f"{seen.duration:.2f} s"
        rows.append(
            f'<tr class="step-row" id="step-{number}" data-step="{escape(step.name)}">'
            f'<td class="step-name">{escape(step.name)}</td><td>{escape(step.kind)}</td>'
            f"<td>{status_word(step.status)}</td>"
            f'<td class="number">{_attempts(run, step)}</td><td class="number">{duration}</td>'
            f'<td class="number">{_tokens(run, step)}</td>'
            f"<td>{_output(run, step)}{_items(step)}{_child(run, step)}</td>"
            f'<td class="error">{escape(step.error or "")}</td></tr>'
        )
    return (
        '<h2>Steps</h2><table class="steps"><thead><tr><th>step</th><th>kind</th>'
        "<th>status</th><th>attempts</th><th>duration</th><th>tokens</th><th>output</th>"
        f"<th>error</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        '<p class="note">Tokens and attempts come from the ledger a checkpoint keeps (format '
        "4: the attempts that reported usage, wasted ones included); durations, and the "
        "attempts of steps without usage, are known for the runs this server resumed.</p>"
    )


def _attempts(run: RunPage, step: StepView) -> str:
    """The step's attempts: as its events said, else the most its ledger rows record."""
    seen = run.events.steps.get(step.name)
    if seen is not None and seen.attempts:
        return str(seen.attempts)
    recorded = run.ledger.get(step.name)
    return "-" if recorded is None or not recorded.attempts else str(recorded.attempts)


def _tokens(run: RunPage, step: StepView) -> str:
    """The step's tokens from the ledger (with the wasted part), else from its events."""
    recorded = run.ledger.get(step.name)
    if recorded is not None:
        wasted = f" ({recorded.wasted:,} wasted)" if recorded.wasted else ""
        return f"{recorded.tokens:,}{wasted}"
    seen = run.events.steps.get(step.name)
    return "-" if seen is None or seen.tokens is None else f"{seen.tokens:,}"


def _output(run: RunPage, step: StepView) -> str:
    if not step.has_output:
        return ""
    text = json_text(step.output)
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    query = {"id": run.page_id, "step": step.name}
    if run.child is not None:
        query["child"] = run.child
    link = f'<a class="whole" href="/output?{escape(urlencode(query))}">whole output</a>'
    return f'<code class="preview">{escape(text)}</code> {link}'


def _items(step: StepView) -> str:
    items = step.items
    if items is None:
        return ""
    done = f"{items.recorded:,}" + ("" if items.total is None else f" of {items.total:,}")
    text = f'<p class="items">{done} items done'
    if items.failed:
        shown = ", ".join(escape(key) for key in items.failed[:SHOWN_FAILED_KEYS])
        more = len(items.failed) - SHOWN_FAILED_KEYS
        text += f"; {len(items.failed):,} failed: {shown}" + (
            f" and {more:,} more" if more > 0 else ""
        )
    return text + "</p>"


def _child(run: RunPage, step: StepView) -> str:
    """Links to the views of the step's sub-workflows in progress (a map's: the first 20)."""
    path = join_path(step.name) if run.child is None else f"{run.child}/{join_path(step.name)}"
    if step.child:
        return f'<p class="child">{run_link(run.page_id, "open its run", child=path)}</p>'
    if not step.child_items:
        return ""
    links = ", ".join(
        run_link(run.page_id, f"item {key}", child=f"{path}/{join_path(key)}")
        for key in step.child_items[:SHOWN_FAILED_KEYS]
    )
    more = len(step.child_items) - SHOWN_FAILED_KEYS
    rest = f" and {more:,} more" if more > 0 else ""
    return f'<p class="child">items in progress: {links}{rest}</p>'


def message_main(title: str, message: str, extra: str = "") -> str:
    """A page that only says something: an error, a refusal."""
    return f'<h1>{escape(title)}</h1><p class="message" role="alert">{escape(message)}</p>{extra}'
