"""Text that is safe to write to a terminal, whatever step names and messages hold.

Step names, run ids and error messages come from users' code and from checkpoint
files; written raw, an escape sequence in one could drive the terminal, and a
line break could fake a line of output. The command line and `ConsoleProgress`
show them through these.
"""

from __future__ import annotations

import json


def one_line(text: str, *, keep: str = "") -> str:
    r"""``text`` with line breaks and other unprintable characters escaped.

    This is what makes text from a checkpoint file, a step name or an error message
    safe to print: escape sequences (C0 and C1 controls), bidirectional overrides and
    line breaks come out as ``\x1b``, ``\u202e``, ``\n``. Characters in ``keep``
    are left alone (the progress reporter's own line breaks).
    """
    if text.isprintable() and not keep:
        return text
    return "".join(
        char
        if char.isprintable() or char in keep
        else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


def show(name: str) -> str:
    """A name as typed, or JSON-quoted when it has blanks at the ends or odd characters.

    A name that starts with a double quote is quoted too, so that no two names are
    ever shown alike.
    """
    if name and name.isprintable() and name.strip() == name and not name.startswith('"'):
        return name
    return one_line(json_text(name))


def json_text(value: object) -> str:
    """``value`` as JSON text, or its ``repr`` where JSON cannot hold it."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
    except RecursionError:  # repr would recurse as deeply
        return f"({type(value).__name__} nested too deeply to show)"
