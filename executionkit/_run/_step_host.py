"""The running step's host: what `current_step()` talks to while a step runs.

A `StepContext` asks its host for the progress its step saved last, hands it
the usage an attempt reports as it spends (`StepContext.add_usage`), and has a
new progress value saved (`StepContext.save_progress`). The host answers from
the run's record and asks the checkpointer to save soon: it is the one door
from a step's code into its run, so neither the record nor the checkpointer
plays that part besides its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import TYPE_CHECKING, Any

from executionkit._plain import plain_copy
from executionkit._run._checkpointer import retrieve
from executionkit.events import StepStreamed

if TYPE_CHECKING:
    from collections.abc import Callable

    from executionkit._record._record import Record
    from executionkit._run._announcer import Announcer
    from executionkit._run._checkpointer import Checkpointer
    from executionkit._types import TokenUsage


class StepHost:
    """The run as the steps it runs see it, through `current_step()`."""

    __slots__ = ("_announcer", "_checkpointer", "_loop", "_record", "_run_id", "add_usage")

    def __init__(
        self, record: Record, checkpointer: Checkpointer, announcer: Announcer | None = None
    ) -> None:
        """Serve the steps of the run that keeps ``record`` and saves through ``checkpointer``.

        Made on the run's event loop, which the record belongs to.
        """
        self._record = record
        self._checkpointer = checkpointer
        self._announcer = announcer
        self._run_id = record.run_id
        self._loop = asyncio.get_running_loop()
        # Usage reported by the running attempt of a step (item): straight into the
        # ledger, which any thread may add to (one call less per report).
        self.add_usage: Callable[[str, str | None, int, TokenUsage, str | None], None] = (
            record.ledger.add
        )

    def stream(self, name: str, key: str | None, attempt: int, text: str) -> None:
        """Hand a running attempt's streamed ``text`` to the run's listeners, on the loop.

        Nothing is kept: with no listener it is dropped at once. From a plain
        step's thread the event is handed to the loop (in order, per thread);
        after the run ended, dropped.
        """
        announcer = self._announcer
        if announcer is None or not announcer.observed:
            return
        event = StepStreamed(self._run_id, name, attempt, text, key)
        loop = self._loop
        if _running_loop() is loop:
            announcer.emit(event)
            return
        with contextlib.suppress(RuntimeError):  # the run has ended and its loop closed
            loop.call_soon_threadsafe(announcer.emit, event)

    def progress_of(self, name: str) -> Any:
        """Return the progress value ``name`` saved last, or None."""
        return self._record.progress.get(name)

    def save_progress(self, name: str, value: object) -> asyncio.Future[None]:
        """Record ``value`` for step ``name``; the future resolves once it is checkpointed.

        From the worker thread of a plain step, the value is checked there (so a
        value that is not plain data raises in the step) and recorded on the
        loop, which owns the record; the future, of the run's loop, is the
        step's to ignore (a thread cannot await it).
        """
        loop = self._loop
        if _running_loop() is loop:
            return self._checkpointer.save_soon(loop, self._record.save_progress(name, value))
        copy = plain_copy(value, f"progress of step {name!r}")
        done: asyncio.Future[None] = asyncio.Future(loop=loop)

        def hand_over() -> None:
            done.add_done_callback(retrieve)  # a thread never awaits it: no "never retrieved"
            if self._checkpointer.closed:
                done.cancel()  # a thread its run abandoned: the run's record is final
                return
            saved = self._checkpointer.save_soon(loop, self._record.save_progress(name, copy))
            saved.add_done_callback(partial(_pass_on, done))

        try:
            loop.call_soon_threadsafe(hand_over)
        except RuntimeError:  # the run has ended and its loop closed
            msg = f"step {name!r}: save_progress() was called after its run ended"
            raise RuntimeError(msg) from None
        return done


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _pass_on(done: asyncio.Future[None], saved: asyncio.Future[None]) -> None:
    """On the loop: give the step's future the outcome of the save."""
    if done.done():
        return
    if saved.cancelled():
        done.cancel()
    elif (error := saved.exception()) is not None:
        done.set_exception(error)
    else:
        done.set_result(None)
