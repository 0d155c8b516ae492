"""When each step ran, from a checkpoint's ``attempts``; durations as people read them.

Format 5's ``attempts`` holds one entry per attempt that ended, with its start
and end in milliseconds since the epoch (`executionkit._checkpoint._times`).
`step_times` sums them by top-level step in one pass: a map's items count for
their map, a sub-workflow's steps (``research/search``, the path the ledger
uses) for their step. ``inspect`` and the page read durations and attempts from
it, and the page's timeline draws its entries. `duration_text` and
`moment_text` are how both show a duration and a moment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from executionkit._paths import split_path

if TYPE_CHECKING:
    from collections.abc import Collection

    from executionkit._checkpoint._times import Attempt  # noqa: TC004 - dataclass annotations stay strings
    from executionkit._checkpoint._value import WorkflowCheckpoint

__all__ = ["StepTimes", "duration_text", "moment_text", "step_times", "top_step"]

_SECOND = 1000
_MINUTE = 60
_HOUR = 3600
_DAY = 24


@dataclass(slots=True)
class StepTimes:
    """What a checkpoint's ``attempts`` say of one top-level step.

    Attributes:
        started: When its first attempt started (milliseconds since the epoch):
            the step's own, an item's or one of its sub-workflow's steps'.
        ended: When its last attempt ended, likewise.
        attempts: The most attempts one of its series took: the step's own, or
            one item's (as the ledger counts a step's attempts); 0 for a
            sub-workflow, whose attempts are its steps'.
        entries: Its entries of ``attempts``, in the order they ended.
        outcomes: How many of them ended each way (``{"ok": 3, "failed": 1}``).
        items: The keys of the map's items that have entries, in first-seen order.
    """

    started: int
    ended: int
    attempts: int = 0
    entries: list[Attempt] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    items: dict[str, None] = field(default_factory=dict)

    @property
    def duration(self) -> int:
        """Milliseconds from the first attempt's start to the last attempt's end."""
        return self.ended - self.started


def top_step(path: str, names: Collection[str]) -> str:
    """The top-level step an ``attempts`` or ledger path belongs to.

    A name of ``names`` is itself (a top-level step may have ``/`` in its name);
    else the first segment of the path, unescaped (`split_path`): ``research`` for
    ``research/search``.
    """
    if path in names:
        return path
    head = path.split("/", 1)[0]
    try:
        return split_path(head)[0]
    except ValueError:  # a '%' no join_path writes: the segment as it is
        return head


def step_times(checkpoint: WorkflowCheckpoint, names: Collection[str]) -> dict[str, StepTimes]:
    """The checkpoint's ``attempts`` summed by top-level step (`top_step` of ``names``).

    In one pass, in the order each step's first entry ended; a step without
    entries has none. Steps that ``names`` lacks but ``attempts`` names are
    included under their own top-level name.
    """
    found: dict[str, StepTimes] = {}
    for entry in checkpoint.attempts:
        path, item, attempt, outcome, started, ended = entry
        step = path if path in names else top_step(path, names)
        times = found.get(step)
        if times is None:
            times = found[step] = StepTimes(started, ended)
        elif started < times.started:
            times.started = started
        times.ended = max(times.ended, ended)
        times.entries.append(entry)
        times.outcomes[outcome] = times.outcomes.get(outcome, 0) + 1
        if path == step:  # a sub-workflow's entries are its steps' attempts, not its own
            times.attempts = max(times.attempts, attempt)
            if item is not None:
                times.items[item] = None
    return found


def duration_text(milliseconds: int) -> str:
    """A duration as people read it: ``850 ms``, ``12.4 s``, ``3 min 05 s``, ``2 h 03 min``.

    Rounded to the last unit shown; ``4 d 07 h`` from a day on. Negative is 0.
    """
    ms = max(0, milliseconds)
    if ms < _SECOND:
        return f"{ms} ms"
    tenths = (ms + 50) // 100
    if tenths < _MINUTE * 10:
        return f"{tenths // 10}.{tenths % 10} s"
    seconds = (ms + 500) // _SECOND
    if seconds < _HOUR:
        return f"{seconds // _MINUTE} min {seconds % _MINUTE:02d} s"
    minutes = (seconds + 30) // _MINUTE
    if minutes < _DAY * _MINUTE:
        return f"{minutes // _MINUTE} h {minutes % _MINUTE:02d} min"
    hours = (minutes + 30) // _MINUTE
    return f"{hours // _DAY} d {hours % _DAY:02d} h"


def moment_text(milliseconds: int) -> str:
    """A moment of ``attempts`` as people read it: ``2026-12-02 09:00:01.250 UTC``."""
    when = datetime.fromtimestamp(milliseconds // _SECOND, UTC)
    return f"{when:%Y-%m-%d %H:%M:%S}.{milliseconds % _SECOND:03d} UTC"
