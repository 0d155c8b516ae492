"""A small workflow to drive from the command line.

Run it from the folder that holds this file (or with that folder on PYTHONPATH)::

    executionkit run cli_workflow:workflow --input text="the cat sat" --input lang=fr

``translate`` fails for a language it has no dictionary for, so the input
decides whether a run fails: run with ``--input lang=xx`` to see a failure,
then again with ``--input lang=fr`` and the same ``--checkpoint`` to resume.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit import PatternResult, Step, TokenUsage, Workflow

if TYPE_CHECKING:
    from collections.abc import Mapping

DICTIONARIES: dict[str, dict[str, str]] = {
    "de": {"the": "die", "cat": "Katze", "sat": "sass"},
    "es": {"the": "el", "cat": "gato", "sat": "se sentó"},
    "fr": {"the": "le", "cat": "chat", "sat": "s'assit"},
}


def words(ctx: Mapping[str, Any]) -> list[str]:
    """Split the input text into words (no model call: cheap glue, run inline)."""
    return str(ctx["text"]).lower().split()


def count(ctx: Mapping[str, Any]) -> PatternResult[int]:
    """Count the words, as if a model had been asked to (instantly here: run inline)."""
    return PatternResult(len(ctx["words"]), cost=TokenUsage(120, 4, 1))


async def translate(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """Translate word by word, as a model would; fails for a language without a dictionary."""
    lang = ctx["lang"]
    if lang not in DICTIONARIES:
        msg = f"no dictionary for language {lang!r} (known: {', '.join(sorted(DICTIONARIES))})"
        raise ValueError(msg)
    table = DICTIONARIES[lang]
    text = " ".join(table.get(word, word) for word in ctx["words"])
    return PatternResult(text, cost=TokenUsage(150, 30, 1))


def report(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """Put the pieces together (no model call: cheap glue, run inline)."""
    return {"words": ctx["count"], "translation": ctx["translate"]}


workflow = Workflow(
    [
        # A plain function runs in a worker thread, unless it is marked inline=True:
        # then on the event loop, in order, which suits quick glue.
        Step("words", words, inline=True),
        Step("count", count, depends_on=("words",), inline=True),
        Step("translate", translate, depends_on=("words",)),
        Step("report", report, depends_on=("count", "translate"), inline=True),
    ]
)


def build() -> Workflow:
    """Return the same workflow; ``cli_workflow:build`` works too (a factory)."""
    return workflow
