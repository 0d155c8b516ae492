"""The ``run`` command's progress on stderr, safe to show whatever the steps are called.

`ConsoleProgress` prints step names, the run_id (read from the checkpoint file)
and the first line of each error as they are. Here they go through `one_line`
first, as everything else the command prints does, so that a name or message
holding an escape sequence cannot drive the terminal.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TextIO, cast

from executionkit._cli._text import one_line, show

if TYPE_CHECKING:
    from executionkit.events import Event, EventCallback


def terminal_safe_progress(stream: TextIO) -> EventCallback:
    """A `ConsoleProgress` writing to ``stream``, with every event's text escaped."""
    from executionkit.progress import ConsoleProgress  # noqa: PLC0415 - keep start-up light

    progress = ConsoleProgress(cast("TextIO", _EscapingStream(stream)))

    def on_event(event: Event) -> None:
        progress(_escaped(event))

    return on_event


def _escaped(event: Event) -> Event:
    """``event`` with its names shown as `show` shows them, its other text one-lined.

    Names are escaped, not just their line breaks, because the live line's own
    carriage returns and newlines must be the only ones on the stream. `show` never
    shows two names alike, so the reporter's counts by name stay right.
    """
    changes: dict[str, Any] = {"run_id": one_line(event.run_id)}
    step = getattr(event, "step", None)
    if isinstance(step, str):
        changes["step"] = show(step)
    reason = getattr(event, "reason", None)
    if isinstance(reason, str):
        changes["reason"] = one_line(reason)
    recorded = getattr(event, "recorded", None)
    if isinstance(recorded, tuple):
        changes["recorded"] = tuple(show(name) for name in recorded)
    return dataclasses.replace(event, **changes)


class _EscapingStream:
    """Passes text on with every unprintable character escaped but line breaks.

    What is left unescaped in the events reaches the stream through an error: the
    first line of its message (so no line break) and its type's name.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(one_line(text, keep="\r\n"))

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()
