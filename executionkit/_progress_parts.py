"""The pieces `ConsoleProgress` is built of: a map's item counts, the text it writes.

Private to `executionkit.progress`; plain functions and small value types, no I/O
apart from asking a stream whether it is a terminal.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from executionkit._errors import BudgetExceeded, WorkflowFailed
from executionkit._terminal import one_line, show

if TYPE_CHECKING:
    from typing import TextIO

    from executionkit._types import TokenUsage
    from executionkit.events import Event

PREFIX = "executionkit"
SHOWN_NAMES = 3  # running steps, waiting questions and running maps the status names
_MESSAGE_CHARS = 120
_PLAIN_EVERY = 30.0  # seconds: in plain lines, a running map's count at least this often
TENTHS = 10  # in plain lines, a running map's count each time another tenth is recorded


@dataclass(slots=True)
class MapState:
    """A running map step's items, as its events told them."""

    items: int
    recorded: int
    failed: int = 0
    said: int = 0  # tenths of the items recorded when plain lines last gave the count
    said_at: float = 0.0  # when they did (or when the map found its items)

    def items_text(self) -> str:
        """``412/1,000 items (2 failed)``."""
        text = f"{self.recorded:,}/{self.items:,} items"
        return f"{text} ({self.failed:,} failed)" if self.failed else text

    def progress_line(self, now: float) -> Line | None:
        """A status line for plain mode once another tenth is recorded, or time has passed."""
        if not self.items or self.recorded >= self.items:
            return None  # the step's own line follows
        tenths = self.recorded * TENTHS // self.items
        if tenths <= self.said and now - self.said_at < _PLAIN_EVERY:
            return None
        self.said = max(self.said, tenths)
        self.said_at = now
        return Line("", notable=False)


class Line(NamedTuple):
    """What to say about one event (an empty text: the status alone)."""

    text: str
    status: bool = False  # followed by the status (in plain lines, and always when final)
    notable: bool = True  # a line of its own in live mode too
    final: bool = False  # the run's last word: replaces the live line for good


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):  # closed or file-like without isatty
        return False


def duration(seconds: float) -> str:
    """``0.4s`` and ``9.9s`` under ten seconds, then ``42s``, ``1m02s``, ``2h05m09s``."""
    seconds = max(0.0, seconds)
    if seconds < 10:  # noqa: PLR2004 - tenths where they matter
        return f"{math.floor(seconds * 10) / 10:.1f}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def error_text(error: BaseException) -> str:
    """``ValueError: bad input``: the first line of the message, cut to a readable length."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > _MESSAGE_CHARS:
        first = first[: _MESSAGE_CHARS - 3] + "..."
    name = type(error).__name__
    return f"{name}: {first}" if first else name


def ending_text(error: BaseException) -> str:
    """How the run ended, for the summary line."""
    if isinstance(error, BudgetExceeded):
        return "stopped: budget reached"
    if isinstance(error, WorkflowFailed):
        return "failed: WorkflowFailed"
    if not isinstance(error, Exception):  # CancelledError, KeyboardInterrupt, SystemExit
        return f"interrupted: {type(error).__name__}"
    return f"failed: {error_text(error)}"


def total_cost(error: BaseException, fallback: TokenUsage) -> TokenUsage:
    """The run's total usage, restored usage included, where the error carries it."""
    if isinstance(error, BudgetExceeded):
        return error.usage
    if isinstance(error, WorkflowFailed):
        return error.checkpoint.cost
    return fallback


def escaped(event: Event) -> Event:
    """``event`` with its names shown as `show` shows them, its other text on one line.

    Names are escaped, not just their line breaks, because the live line's own
    carriage returns and newlines must be the only ones on the stream. `show` never
    shows two names alike, so the counts by name stay right.
    """
    changes: dict[str, Any] = {}
    if not event.run_id.isprintable():
        changes["run_id"] = one_line(event.run_id)
    step = getattr(event, "step", None)
    if isinstance(step, str) and show(step) != step:
        changes["step"] = show(step)
    item = getattr(event, "item", None)
    if isinstance(item, str) and show(item) != item:
        changes["item"] = show(item)
    reason = getattr(event, "reason", None)
    if isinstance(reason, str) and not reason.isprintable():
        changes["reason"] = one_line(reason)
    for field in ("recorded", "pending"):  # RunStarted's names, RunSuspended's
        names = getattr(event, field, None)
        if isinstance(names, tuple) and any(show(name) != name for name in names):
            changes[field] = tuple(show(name) for name in names)
    return dataclasses.replace(event, **changes) if changes else event
