"""Text the commands print: one-line, terminal-safe renderings of names, values and errors."""

from __future__ import annotations

import json
import sys

from executionkit._terminal import json_text, one_line

PREVIEW_CHARS = 60
"""Longest preview of an output, progress value or metadata in ``inspect``."""


def say(line: str) -> None:
    """Write ``executionkit: line`` to stderr, as one line."""
    sys.stderr.write(f"executionkit: {one_line(line)}\n")
    sys.stderr.flush()


def invocation() -> str:
    """How this command line was started, for the commands it prints to be run next.

    ``python -m executionkit`` runs where the ``executionkit`` script may not be on
    PATH (a virtual environment that is not activated), so it is named in full.
    """
    import shlex  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    if Path(sys.argv[0]).name == "__main__.py":
        return f"{shlex.quote(sys.executable)} -m executionkit"
    return "executionkit"


def out(text: str) -> None:
    """Write ``text`` and a newline to stdout."""
    sys.stdout.write(f"{text}\n")
    sys.stdout.flush()


def json_document(value: object) -> str:
    r"""``value`` as indented JSON for stdout, safe on a terminal and still valid JSON.

    `json` escapes C0 controls but leaves the rest of what `one_line` escapes as it
    is (C1 controls, bidirectional overrides, lone surrogates, which stdout could not
    even encode); those are written as ``\uXXXX`` escapes here. A value JSON cannot
    hold is written as the string of its ``repr``.
    """
    text = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    if text.replace("\n", "").isprintable():  # the common case, checked at C speed
        return text
    # The only raw unprintable characters json.dumps leaves are inside strings, apart
    # from the line breaks of the indentation, which stay.
    return "".join(
        char if char.isprintable() or char == "\n" else _json_escape(char) for char in text
    )


def _json_escape(char: str) -> str:
    # JSON spells a character by its UTF-16 code units: a surrogate pair beyond the BMP.
    units = char.encode("utf-16-be", "surrogatepass")
    return "".join(
        f"\\u{int.from_bytes(units[start : start + 2]):04x}" for start in range(0, len(units), 2)
    )


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
