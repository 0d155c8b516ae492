"""Durable timers (`Step.wait`): when a wait is due, fixed once and kept in checkpoints.

Plain synchronous code. A wait step, when first reached, fixes its wake-up
time: now plus its ``seconds``, or what ``until(ctx)`` returns. The entry
``{"due": ..., "since": ...}`` (UTC ISO 8601, as checkpoint format 5 writes
``waits``) is recorded, and every resume waits for the same ``due``, whatever
the process and whenever it starts. The clock is the one questions
are asked by (`executionkit._define._questions.utc_now`, which tests replace).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._define import _questions
from executionkit._paths import join_path

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._graph import Graph
    from executionkit._define._step_kinds import WaitStep

__all__ = ["due_of", "nested_waits", "now", "reached", "waits_in"]


def now() -> datetime:
    """The time waits are reached and due at: the questions' clock, `_questions.utc_now`."""
    return _questions.utc_now()


def reached(step: WaitStep, ctx: Mapping[str, Any]) -> MappingProxyType[str, str]:
    """The ``waits`` entry of ``step`` reached now: when it began and when it is due.

    A time in the past is due at once (``due`` is then ``since``).

    Raises:
        TypeError: If ``until(ctx)`` returned anything but an aware
            `datetime.datetime`, naming the step.
        OverflowError: If the wait ends past the year 9999, naming the step.
    """
    began = now()
    duration = step.duration
    if duration is None:
        until: Any = step.run  # a function: a wait step's run is never a workflow
        due = until(ctx)
        if not isinstance(due, datetime) or due.utcoffset() is None:
            what = (
                "a naive datetime (no tzinfo)"
                if isinstance(due, datetime)
                else f"{type(due).__name__} {due!r}"
            )
            msg = (
                f"step {step.name!r}: until(ctx) must return an aware datetime.datetime "
                f"(e.g. datetime.now(timezone.utc) + timedelta(hours=1)), got {what}"
            )
            raise TypeError(msg)
        due = due.astimezone(UTC)
    else:
        try:
            due = began + timedelta(seconds=duration)
        except OverflowError:
            msg = f"step {step.name!r}: a wait of {duration!r} seconds ends past the year 9999"
            raise OverflowError(msg) from None
    due = max(due, began)
    return MappingProxyType({"due": due.isoformat(), "since": began.isoformat()})


def due_of(entry: Mapping[str, str]) -> datetime:
    """The moment a ``waits`` entry is due."""
    return datetime.fromisoformat(entry["due"])


def waits_in(checkpoint: WorkflowCheckpoint) -> dict[str, datetime]:
    """Every wait a checkpoint holds by path (`join_path`) with its due time, nested ones after."""
    found = {join_path(name): due_of(entry) for name, entry in checkpoint.waits.items()}
    for name, entry in checkpoint.children.items():
        found.update(_nested(name, entry))
    return found


def nested_waits(graph: Graph, children: Mapping[str, Any]) -> dict[str, datetime]:
    """The waits inside a run's sub-workflows (their latest checkpoints), in declaration order.

    ``children`` maps a sub-workflow step to its child's checkpoint, or a map
    of sub-workflows to its items' checkpoints by key.
    """
    found: dict[str, datetime] = {}
    for name in graph.names:
        child = children.get(name)
        if child is None:
            continue
        if isinstance(child, Mapping):
            found.update(_nested(name, {"items": child}))
        else:
            found.update(_nested(name, {"checkpoint": child}))
    return found


def _nested(name: str, entry: Mapping[str, Any]) -> dict[str, datetime]:
    return {
        f"{prefix}/{path}": due
        for prefix, child in _questions.child_checkpoints(name, entry)
        for path, due in waits_in(child).items()
    }
