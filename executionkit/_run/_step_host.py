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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from executionkit._record._record import Record
    from executionkit._run._checkpointer import Checkpointer
    from executionkit._types import TokenUsage


class StepHost:
    """The run as the steps it runs see it, through `current_step()`."""

    __slots__ = ("_checkpointer", "_record")

    def __init__(self, record: Record, checkpointer: Checkpointer) -> None:
        """Serve the steps of the run that keeps ``record`` and saves through ``checkpointer``."""
        self._record = record
        self._checkpointer = checkpointer

    def progress_of(self, name: str) -> Any:
        """Return the progress value ``name`` saved last, or None."""
        return self._record.progress.get(name)

    def add_usage(
        self, name: str, key: str | None, attempt: int, usage: TokenUsage, model: str | None
    ) -> None:
        """Usage reported by the running attempt of step ``name`` (item ``key``)."""
        self._record.ledger.add(name, key, attempt, usage, model)

    def save_progress(self, name: str, value: object) -> asyncio.Future[None]:
        """Record ``value`` for step ``name``; the future resolves once it is checkpointed."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            msg = (
                f"step {name!r}: save_progress() must be called on the event loop's thread "
                f"(in the step itself), not from a worker thread"
            )
            raise RuntimeError(msg) from None
        return self._checkpointer.save_soon(loop, self._record.save_progress(name, value))
