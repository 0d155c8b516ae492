"""The pieces `ConsoleProgress` is built of: each run's counts, a map's items, the text.

Private to `executionkit.progress`; plain functions and small value types, no I/O
apart from asking a stream whether it is a terminal.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from executionkit._paths import join_path, split_path
from executionkit._record._result import BudgetExceeded, WorkflowFailed
from executionkit._terminal import one_line, show

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import TextIO

    from executionkit._types import TokenUsage
    from executionkit.events import Event, ItemFailed, MapStarted

PREFIX = "executionkit"
SHOWN_NAMES = 3  # running steps, waiting questions and running maps the status names
SHOWN_ITEM_FAILURES = 3  # per map: the first failures get a line each, then one line says more
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


@dataclass(slots=True, eq=False)
class RunState:
    """What the events of one run said: the run followed, or one of its sub-workflows.

    A sub-workflow's steps are named by their path from the run followed
    (``sub/a``, ``per/0/a``), as its questions are; ``path`` is that of the
    sub-workflow itself, empty for the run followed. The child of a map's item is
    ``quiet``: as items never get a line each, neither do its steps.
    """

    run_id: str = ""
    path: str = ""
    quiet: bool = False
    parent: RunState | None = None
    step: str = ""  # the parent's step this sub-workflow runs for, as the parent names it
    total: int = 0
    done: set[str] = field(default_factory=set)
    running: dict[str, float] = field(default_factory=dict)  # name -> first attempt began
    failed: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    maps: dict[str, MapState] = field(default_factory=dict)  # running maps, as found
    items: dict[tuple[str, str], float] = field(default_factory=dict)  # running items
    children: dict[str, RunState] = field(default_factory=dict)  # running sub-workflows

    def counted(self) -> str:
        """``3/5 done``."""
        return f"{len(self.done)}/{self.total} done"

    def name(self, step: str) -> str:
        """How the step ``step`` of this run is shown: ``a``, or ``sub/a`` in a child."""
        return shown_name(self.path, step)

    def child(self, run_id: str) -> RunState:
        """The state of a sub-workflow run ``run_id`` starts under this run."""
        rest = run_id[len(self.run_id) + 1 :]
        try:
            segments = split_path(rest)  # [step], or [step, item key] for a map's item
        except ValueError:  # a run_id derived before names were escaped
            segments = [rest]
        path = f"{self.path}/{rest}" if self.path else rest
        quiet = self.quiet or len(segments) > 1
        state = RunState(run_id, path, quiet, self, self.name(segments[0]))
        if len(segments) == 1:
            self.children[state.step] = state
        return state

    def status_parts(self) -> list[str]:
        """``12/40 done (1 skipped)``, ``2 running (a, sub: 1/3 done)``, each running map."""
        parts = [self.counted()]
        if self.skipped:
            parts[0] += f" ({len(self.skipped)} skipped)"
        if self.running:
            parts.append(f"{len(self.running)} running ({names_text(self.running_names())})")
        parts.extend(
            f"{name}: {state.items_text()}"
            for name, state in list(self.maps.items())[:SHOWN_NAMES]
        )
        return parts

    def step_ended(self, step: str, now: float, reported: float) -> str:
        """How long ``step`` took: since it started, or as its event reports."""
        began = self.running.pop(step, None)
        return duration(reported if began is None else now - began)

    def map_started(self, event: MapStarted, now: float) -> Line:
        said = event.recorded * TENTHS // event.items if event.items else 0
        self.maps[event.step] = MapState(event.items, event.recorded, said=said, said_at=now)
        text = f"{PREFIX}: {event.step}: {count(event.items, 'item')}"
        if event.recorded:
            text += f", {event.recorded:,} recorded before"
        return Line(text, notable=False)

    def item_failed(self, event: ItemFailed, now: float) -> Line | None:
        """A line for each of the first few failed items of a map, then one saying more did."""
        began = self.items.pop((event.step, event.item), None)
        state = self.maps.get(event.step)
        if state is None:
            return None
        state.failed += 1
        if state.failed > SHOWN_ITEM_FAILURES:
            more = f"{PREFIX}: {event.step}: more items failed"
            return Line(more, status=True) if state.failed == SHOWN_ITEM_FAILURES + 1 else None
        took = duration(event.duration if began is None else now - began)
        text = f"{PREFIX}: {event.step} item {event.item} failed after {took}: "
        return Line(text + error_text(event.error), status=True)

    def running_names(self) -> list[str]:
        """The running steps, a running sub-workflow with its count: ``sub: 1/3 done``."""
        names = []
        for name in self.running:
            child = self.children.get(name)
            names.append(name if child is None else f"{name}: {child.counted()}")
        return names


def names_text(names: Iterable[str]) -> str:
    """``a, b, c, +2 more``: the first few names, in order, and how many more there are."""
    shown = list(names)
    text = ", ".join(shown[:SHOWN_NAMES])
    if len(shown) > SHOWN_NAMES:
        text += f", +{len(shown) - SHOWN_NAMES} more"
    return text


def shown_name(path: str, step: str) -> str:
    """``step`` as `show` shows it, after the path of its sub-workflow, if any."""
    return show(f"{path}/{join_path(step)}") if path else show(step)


def parent_of(run_id: str, runs: Mapping[str, RunState]) -> RunState | None:
    """The run ``run_id`` is a sub-workflow of: the longest run_id followed by ``/``."""
    found = [state for known, state in runs.items() if run_id.startswith(f"{known}/")]
    return max(found, key=lambda state: len(state.run_id), default=None)


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


def escaped(event: Event, path: str = "") -> Event:
    """``event`` with its names shown as `show` shows them, its other text on one line.

    Names are escaped, not just their line breaks, because the live line's own
    carriage returns and newlines must be the only ones on the stream. `show` never
    shows two names alike, so the counts by name stay right. In the event of a
    sub-workflow, step names start with its ``path`` (`shown_name`).
    """
    changes: dict[str, Any] = {}
    if not event.run_id.isprintable():
        changes["run_id"] = one_line(event.run_id)
    step = getattr(event, "step", None)
    if isinstance(step, str) and shown_name(path, step) != step:
        changes["step"] = shown_name(path, step)
    recorded = getattr(event, "recorded", None)  # RunStarted's names
    if isinstance(recorded, tuple) and any(shown_name(path, name) != name for name in recorded):
        changes["recorded"] = tuple(shown_name(path, name) for name in recorded)
    item = getattr(event, "item", None)
    if isinstance(item, str) and show(item) != item:
        changes["item"] = show(item)
    reason = getattr(event, "reason", None)
    if isinstance(reason, str) and not reason.isprintable():
        changes["reason"] = one_line(reason)
    pending = getattr(event, "pending", None)  # RunSuspended's question paths
    if isinstance(pending, tuple) and any(show(name) != name for name in pending):
        changes["pending"] = tuple(show(name) for name in pending)
    return dataclasses.replace(event, **changes) if changes else event
