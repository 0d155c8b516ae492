"""How an attempt ended: one small type, and the one place that sorts what it raised.

Every attempt (a step, a map item, an ask step's question, a child run, a
condition) ends one of four ways, its `Ending`: with a value, failed (an
`Exception`: data, handled by the run's ``on_error``), interrupted
(``KeyboardInterrupt``, ``SystemExit``, a step cancelling itself: the run
stops), or unfinished (a map or sub-workflow that stopped with work left: not
an error, the run has work left). `caught` is the except-ladder, written once;
the run receives every ending through `Landing.ended`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeAlias

Ending: TypeAlias = Literal[0, 1, 2, 3]
VALUE: Final = 0
FAILED: Final = 1
INTERRUPTED: Final = 2
UNFINISHED: Final = 3


@dataclass(frozen=True, slots=True)
class Unfinished:
    """What a map or a sub-workflow returns when it stopped with work left.

    Not an error: the budget stopped it, the run is stopping, or a child waits
    for answers to its questions. The step has not completed; a resume goes on.
    """

    reason: str


def caught(exc: BaseException, what: str, *, cancelling: bool = False) -> tuple[Ending, Any]:
    """Sort what an attempt raised into its ending; re-raise a cancellation of the attempt.

    A `asyncio.CancelledError` is the attempt being cancelled (by the run, or
    the task awaiting it: ``cancelling``) and propagates, unless the step raised
    it by itself, which is an interrupt, as ``KeyboardInterrupt`` is. Any other
    `Exception` is a failure. ``what`` names the attempt (``step 'x'``).
    """
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        if cancelling or (task is not None and task.cancelling()):
            raise exc
        return INTERRUPTED, asyncio.CancelledError(f"{what} was cancelled")
    if isinstance(exc, Exception):
        return FAILED, exc
    return INTERRUPTED, exc


class Landing(Protocol):
    """Where every ending goes: `executionkit._run._runner.Run`."""

    cancelling: bool
    """Whether the run is cancelling its steps (a CancelledError is then its own)."""

    def ended(
        self,
        position: int,
        ending: Ending,
        value: Any,
        key: str | None = None,
        began: float = 0.0,
    ) -> Exception | None:
        """The attempt of the step at ``position`` (its item ``key``) ended.

        ``value`` is the output, the exception or the `Unfinished`. For an item,
        returns the error if its output cannot be recorded (it failed after all).
        """
        ...

    def finished(self, position: int) -> None:
        """The step's task (or its inline call) is over: release what it held."""
        ...

    def returned(self, position: int, value: Any) -> None:
        """`ended` with `VALUE`, then `finished`, for a step that is no map, ask or child.

        The common ending of a step's task, in one call.
        """
        ...
