"""Text the commands print: one-line, terminal-safe renderings of names, values and errors."""

from __future__ import annotations

import json
import sys

PREVIEW_CHARS = 60
"""Longest preview of an output, progress value or metadata in ``inspect``."""


def say(line: str) -> None:
    """Write ``executionkit: line`` to stderr, as one line."""
    sys.stderr.write(f"executionkit: {one_line(line)}\n")
    sys.stderr.flush()


def out(text: str) -> None:
    """Write ``text`` and a newline to stdout."""
    sys.stdout.write(f"{text}\n")
    sys.stdout.flush()


def one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def show(name: str) -> str:
    """A name as typed, or JSON-quoted when it has blanks at the ends or odd characters."""
    if name and name.isprintable() and name.strip() == name:
        return name
    return one_line(json_text(name))


def json_text(value: object) -> str:
    """``value`` as JSON text, or its ``repr`` where JSON cannot hold it."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def preview(value: object) -> str:
    """One line of at most `PREVIEW_CHARS` characters: JSON of ``value``, then truncated."""
    text = one_line(json_text(value))
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 3] + "..."
    return text


def error_text(error: BaseException) -> str:
    """``Type: first line of the message``."""
    lines = str(error).splitlines()
    first = lines[0] if lines else ""
    name = type(error).__name__
    return f"{name}: {first}" if first else name
