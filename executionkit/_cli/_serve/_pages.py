"""The pages an operator reads across runs, and the parts of a run's page about others.

`questions_main` is the inbox (``GET /questions``): every question waiting in
the location, the oldest asked first, each with its run and the form that
answers it. `compare_main` shows two runs side by side (``GET /compare``).
`lineage_box` says where a fork came from and lists the forks of a run;
`money_box` a run's dollars by step and by model. Built of `Markup` alone, as
`_html` builds the rest: every value goes in through a hole of `html`.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from executionkit._cli._serve._compare import DIFFERS, NEITHER, ONLY_A, ONLY_B, SAME
from executionkit._cli._serve._html import (
    NOTHING,
    PREVIEW_CHARS,
    answer_form,
    breakable,
    compare_link,
    question_body,
    run_link,
    saved_answer,
    status_word,
)
from executionkit._cli._serve._markup import Markup, html, join
from executionkit._terminal import json_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from executionkit._cli._serve._compare import Comparison, Side
    from executionkit._cli._serve._money import Money
    from executionkit._cli._serve._survey import RunSummary, WaitingQuestion

_DIFFERENCES = {
    SAME: "same output",
    DIFFERS: "outputs differ",
    ONLY_A: "only the first recorded it",
    ONLY_B: "only the second recorded it",
    NEITHER: "no output in either",
}


def questions_main(
    questions: Sequence[WaitingQuestion],
    token: str,
    answers: Mapping[str, Mapping[str, Any]],
    *,
    saves: bool,
) -> Markup:
    """The inbox: each question waiting, the oldest asked first, with its run and its form.

    ``answers``: those saved in the store's inbox, by run and path (``saves``: the
    forms save answers for a worker, without ``--workflow``).
    """
    if not questions:
        return html(
            "<h1>Questions waiting</h1><p>No question waits for an answer in this location.</p>"
        )
    count = len(questions)
    what = (
        "an answer given here is saved for a worker, which resumes the run"
        if saves
        else "an answer given here resumes its run in this server"
    )
    sections = []
    for question in questions:
        saved = answers.get(question.run_id, {})
        # Named by its run and path, not its place: a question dropping off live leaves
        # the others' elements (and what a person is typing into them) as they are.
        key = json.dumps([question.run_id, question.path])
        sections.append(
            html(
                '<section class="ask inbox-question" data-part="question:{}"><h3>{} · {}</h3>'
                "{}{}{}</section>",
                key,
                run_link(question.run_id, breakable(question.run_id)),
                question.path,
                question_body(question.entry),
                saved_answer(saved, question.path),
                answer_form(
                    token,
                    question.run_id,
                    question.path,
                    "answer-" + hashlib.blake2b(key.encode(), digest_size=8).hexdigest(),
                    saves=saves,
                    replaces=question.path in saved,
                    back="questions",
                ),
            )
        )
    return html(
        '<h1>Questions waiting</h1><p data-part="questions-count">{}, the oldest asked first; '
        '{}.</p><div class="inbox-questions" data-list="questions">{}</div>',
        f"{count:,} question{'' if count == 1 else 's'} waiting for an answer",
        what,
        join(sections),
    )


def lineage_box(
    page_id: str,
    lineage: Mapping[str, Any],
    forks: Sequence[RunSummary],
    *,
    parent_here: bool,
) -> Markup:
    """Where the run was forked from (``lineage``), and the forks made of it (``forks``)."""
    parts = []
    if lineage:
        parent = str(lineage["parent_run_id"])
        changed = []
        if lineage.get("overridden"):
            changed.append(html("overridden: {}", join(lineage["overridden"], ", ")))
        if lineage.get("rerun"):
            changed.append(html("re-run: {}", join(lineage["rerun"], ", ")))
        note = lineage.get("note")
        parts.append(
            html(
                '<section class="lineage" role="note"><h2>Fork of {}</h2>'
                "<p>Made from checkpoint seq {} of {}{}.</p>{}{}</section>",
                run_link(parent) if parent_here else parent,
                lineage.get("parent_seq", "-"),
                parent,
                html("; {}", join(changed, "; "))
                if changed
                else html("; nothing overridden or re-run"),
                NOTHING if not note else html('<p class="fork-note">note: {}</p>', note),
                html("<p>{}</p>", compare_link(parent, page_id, "compare with parent"))
                if parent_here
                else html('<p class="note">The parent run is not in this location.</p>'),
            )
        )
    if forks:
        rows = [
            html(
                '<tr><td class="run-id">{}</td><td>{}</td><td class="number">{}</td><td>{}</td>'
                "<td>{}</td><td>{}</td><td>{}</td></tr>",
                run_link(fork.run_id, breakable(fork.run_id)),
                status_word(fork.row.status),
                fork.lineage.get("parent_seq", "-"),
                join(fork.lineage.get("overridden", ()), ", ") or "-",
                join(fork.lineage.get("rerun", ()), ", ") or "-",
                fork.lineage.get("note") or "-",
                compare_link(page_id, fork.run_id),
            )
            for fork in forks
        ]
        parts.append(
            html(
                '<section class="forks"><h2>Forks of this run</h2><table class="forks">'
                "<thead><tr><th>fork</th><th>status</th><th>from seq</th><th>overridden</th>"
                "<th>re-run</th><th>note</th><th></th></tr></thead><tbody>{}</tbody></table>"
                "</section>",
                join(rows),
            )
        )
    return join(parts)


def money_box(money: Money) -> Markup:
    """A run's dollars: by step and by model, the wasted part of each; what is not priced."""
    steps = join(
        html(
            '<tr><td class="step-name">{}</td><td class="number">{}</td>'
            '<td class="number">{}</td></tr>',
            breakable(line.name),
            line.total,
            line.wasted,
        )
        for line in money.steps
    )
    models = join(
        html(
            '<tr><td class="model">{}</td><td class="number">{}</td>'
            '<td class="number">{}</td></tr>',
            line.name,
            line.total,
            line.wasted,
        )
        for line in money.models
    )
    notes = [
        html(
            "<p>{} tokens of {}: not priced by the price file, in no figure here</p>",
            f"{tokens:,}",
            model,
        )
        for model, tokens in money.unpriced
    ]
    if money.unknown:
        notes.append(
            html(
                "<p>{}: not priced, in no figure here</p>",
                f"{money.unknown:,} attempt{'' if money.unknown == 1 else 's'} of unknown usage",
            )
        )
    total = html(
        '<tr class="total"><th>total</th><td class="number total">{}</td>'
        '<td class="number">{}</td></tr>',
        money.total,
        money.wasted,
    )
    return html(
        '<section class="money" data-part="money"><h2>Dollars</h2>'
        '<table class="money"><thead><tr><th>step</th><th>dollars</th><th>wasted</th></tr>'
        "</thead><tbody>{}{}</tbody></table>"
        '<table class="money"><thead><tr><th>model</th><th>dollars</th><th>wasted</th></tr>'
        "</thead><tbody>{}{}</tbody></table>{}</section>",
        steps,
        total,
        models,
        total,
        join(notes),
    )


def compare_main(comparison: Comparison) -> Markup:
    """Two runs side by side: their totals, then each step's outputs, tokens and dollars."""
    a, b = comparison.a, comparison.b
    priced = a.dollars is not None
    relation = NOTHING
    if comparison.forked is not None:
        fork, parent = (b, a) if comparison.forked == "b" else (a, b)
        lineage = comparison.lineage
        relation = html(
            '<p class="lineage">{} is a fork of {}, made from its checkpoint seq {}.</p>',
            run_link(fork.run_id),
            run_link(parent.run_id),
            lineage.get("parent_seq", "-"),
        )
    totals = [
        ("status", status_word(a.status), status_word(b.status)),
        ("checkpoint", f"seq {a.seq}", f"seq {b.seq}"),
        ("tokens", f"{a.tokens:,}", f"{b.tokens:,}"),
    ]
    if priced:
        totals.append(("dollars", a.dollars or "-", b.dollars or "-"))
    differ, only_a = comparison.count(DIFFERS), comparison.count(ONLY_A)
    counted = [
        f"{differ:,} output{'' if differ == 1 else 's'} differ{'s' if differ == 1 else ''}",
        f"{only_a:,} step{'' if only_a == 1 else 's'} only the first recorded",
        f"{comparison.count(ONLY_B):,} only the second",
        f"{comparison.count(SAME):,} the same",
    ]
    rows = [
        html(
            '<tr class="compare-row compare-{}" data-step="{}"><td class="step-name">{}</td>'
            "<td>{}</td>{}{}</tr>",
            step.difference.replace(" ", "-"),
            step.name,
            breakable(step.name),
            _DIFFERENCES[step.difference],
            _side(a.run_id, step.name, step.a, priced=priced, shown=step.difference != SAME),
            _side(b.run_id, step.name, step.b, priced=priced, shown=step.difference != SAME),
        )
        for step in comparison.steps
    ]
    money = html("<th>dollars</th>") if priced else NOTHING
    return html(
        '<h1 class="run-title">Compare {} with {}</h1>{}'
        '<table class="compare-totals"><thead><tr><th></th><th>{}</th><th>{}</th></tr></thead>'
        "<tbody>{}</tbody></table>"
        "<h2>Steps</h2><p>{}.</p>"
        '<table class="steps compare"><thead><tr><th>step</th><th>difference</th>'
        "<th>first: output</th><th>tokens</th>{}<th>second: output</th><th>tokens</th>{}</tr>"
        "</thead><tbody>{}</tbody></table>",
        run_link(a.run_id),
        run_link(b.run_id),
        relation,
        run_link(a.run_id),
        run_link(b.run_id),
        join(
            html("<tr><th>{}</th><td>{}</td><td>{}</td></tr>", label, first, second)
            for label, first, second in totals
        ),
        "; ".join(counted),
        money,
        money,
        join(rows),
    )


def _side(run_id: str, step: str, side: Side, *, priced: bool, shown: bool) -> Markup:
    """One run's cells of a step: its output (a preview when ``shown``), tokens, dollars."""
    if side.has_output:
        link = html(
            '<a class="whole" href="/output?{}">whole output</a>',
            urlencode({"id": run_id, "step": step}),
        )
        if shown:
            text = json_text(side.output)
            if len(text) > PREVIEW_CHARS:
                text = text[: PREVIEW_CHARS - 1] + "…"
            output = html('<code class="preview">{}</code> {}', text, link)
        else:
            output = link
    else:
        output = status_word(side.state) if side.state != "-" else html("not recorded")
    tokens = "-" if side.tokens is None else f"{side.tokens:,}"
    dollars = html('<td class="number">{}</td>', side.dollars or "-") if priced else NOTHING
    return html('<td>{}</td><td class="number">{}</td>{}', output, tokens, dollars)
