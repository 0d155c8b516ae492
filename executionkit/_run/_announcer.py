"""Telling listeners what a run does: the `on_event` callback and debug logging.

An `Announcer` is only consulted when someone listens (``observed``): the run
skips building events altogether otherwise. Whatever a listener raises is
logged and never reaches the run.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._run._aio import wait_through
from executionkit.events import (
    CodeChanged,
    ItemFailed,
    ItemFinished,
    QuestionAnswered,
    QuestionAsked,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuspended,
    StepFailed,
    StepFinished,
    StepInvalidated,
    StepRestored,
    StepSkipped,
    StepStarted,
)

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Callable, Mapping

    from executionkit._record._record import Record
    from executionkit._types import TokenUsage
    from executionkit.events import Event

LOG = logging.getLogger("executionkit")


class Announcer:
    """Delivers the events of one run, in order, to its listeners."""

    __slots__ = (
        "_began",
        "_callback",
        "_caller_context",
        "_failures",
        "_pending",
        "_server",
        "bill",
        "names",
        "observed",
        "run_id",
    )

    def __init__(
        self,
        callback: Callable[[Any], object] | None,
        caller_context: contextvars.Context,
        run_id: str,
        names: tuple[str, ...],
    ) -> None:
        """Serve ``callback`` (may be None) for run ``run_id`` of steps ``names``.

        Its async work runs in ``caller_context``.
        """
        self.run_id = run_id
        self.names = names
        self._callback = callback
        self._caller_context = caller_context
        # With prices, the run's bill so far (`Record.priced`), which events carry.
        self.bill: Callable[[], Any] | None = None
        self.observed = callback is not None or LOG.isEnabledFor(logging.DEBUG)
        self._began: dict[int, float] = {}
        self._pending: list[Event | _Pending] = []
        self._server: asyncio.Task[None] | None = None
        self._failures = 0

    def run_started(self, record: Record, started: RunStarted) -> None:
        """Announce the start of a run, its invalidated steps and its restored ones."""
        run_id = record.run_id
        emit = self.emit
        recorded = record.restored
        if record.restored_skips:
            # A restored skip is not decided again: announced as restored too.
            index = record.graph.index
            recorded = tuple(sorted((*recorded, *record.restored_skips), key=index.__getitem__))
        emit(replace(started, recorded=recorded))
        for name, reason in record.invalidated.items():
            emit(StepInvalidated(run_id, name, reason))
        for name, (old, new) in record.code_changed.items():
            emit(CodeChanged(run_id, name, old, new))
        for name in recorded:
            emit(StepRestored(run_id, name))
        questions = record.questions
        for name in questions.answered:
            by = "deadline" if name in questions.by_deadline else None
            emit(QuestionAnswered(run_id, name, by))

    def run_ended(self, record: Record, outcome: BaseException | None, duration: float) -> None:
        """Announce how the run ended: suspended (questions wait), finished, or failed."""
        run_id = self.run_id
        waiting = record.waiting() if outcome is None else None
        timers = record.timers() if outcome is None else None
        dollars = record.priced()
        if waiting or timers:
            pending, waits = tuple(waiting or ()), tuple(timers or ())
            self.emit(RunSuspended(run_id, duration, record.cost, pending, dollars, waits))
        elif outcome is None:
            self.emit(RunFinished(run_id, duration, record.cost, len(record.executed), dollars))
        else:
            self.emit(
                RunFailed(run_id, duration, outcome, record.invalidated, record.cost, dollars)
            )

    def began(self, position: int, *, asks: bool = False) -> None:
        """Note when the step at ``position`` started its first attempt, and say so.

        An ask step says `QuestionAsked` instead, once it has asked.
        """
        self._began[position] = _clock.elapsed()
        if not asks:
            self.emit(StepStarted(self.run_id, self.names[position], 1))

    # --- endings (the run calls these only when observed) ----------------------------------

    def finished(self, position: int, cost: TokenUsage) -> None:
        """The step at ``position`` completed, its output recorded."""
        name = self.names[position]
        bill = None if self.bill is None else self.bill()
        self.emit(StepFinished(self.run_id, name, self.duration(position), cost, bill))

    def failed(self, position: int, error: Exception, usage: TokenUsage) -> None:
        """The step at ``position`` failed with ``error``; its last attempt spent ``usage``."""
        name = self.names[position]
        bill = None if self.bill is None else self.bill()
        self.emit(StepFailed(self.run_id, name, self.duration(position), error, usage, bill))

    def asked(self, position: int, entry: Mapping[str, Any]) -> None:
        """The ask step at ``position`` asked its question (``entry``: its pending record)."""
        name = self.names[position]
        self.emit(QuestionAsked(self.run_id, name, entry["question"], entry["expires_at"]))

    def skipped(self, position: int, reason: str) -> None:
        """A condition skipped the step at ``position``."""
        self.emit(StepSkipped(self.run_id, self.names[position], reason))

    def item_finished(
        self, position: int, key: str, began: float, cost: TokenUsage, done: int
    ) -> None:
        """An item of the map at ``position`` completed; ``done`` items are recorded."""
        duration = _clock.elapsed() - began
        bill = None if self.bill is None else self.bill()
        name = self.names[position]
        self.emit(ItemFinished(self.run_id, name, key, duration, cost, done, bill))

    def item_failed(
        self, position: int, key: str, began: float, error: Exception, usage: TokenUsage
    ) -> None:
        """An item of the map at ``position`` failed; its last attempt spent ``usage``."""
        duration = _clock.elapsed() - began
        bill = None if self.bill is None else self.bill()
        name = self.names[position]
        self.emit(ItemFailed(self.run_id, name, key, duration, error, usage, bill))

    def duration(self, position: int) -> float:
        """Seconds since the step at ``position`` began (0.0 if it never did)."""
        began = self._began.get(position)
        return 0.0 if began is None else _clock.elapsed() - began

    def emit(self, event: Event) -> None:
        """Log ``event`` at debug level and hand it to the on_event callback.

        A plain callback is called right away. A callback returning an awaitable
        (a coroutine function) is served by one task of the run, in order; the
        run waits for it (`settle`) before returning.
        """
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("%s", event)
        callback = self._callback
        if callback is None:
            return
        if self._pending or self._server is not None:
            self._queue(event)
            return
        try:
            outcome = callback(event)
        except Exception as exc:  # noqa: BLE001 - a listener never breaks the run
            self._callback_failed(event, exc)
            return
        if inspect.isawaitable(outcome):
            self._queue(_Pending(event, outcome))

    @property
    def serving(self) -> bool:
        """Whether events are still being delivered (`settle` has something to wait for)."""
        return self._server is not None and not self._server.done()

    async def settle(self) -> bool:
        """Wait until every queued event was delivered; return whether cancelled meanwhile."""
        cancelled = False
        while self._server is not None and not self._server.done():
            cancelled = await wait_through(self._server) or cancelled
        return cancelled

    def _callback_failed(self, event: object, error: Exception) -> None:
        """Report a failing on_event callback: the first time in full, then briefly."""
        self._failures += 1
        what = type(event).__name__
        if self._failures == 1:
            LOG.warning(
                "executionkit: the on_event callback raised on %s; the run goes on "
                "(later failures of this callback are logged at debug level)",
                what,
                exc_info=error,
            )
        else:
            LOG.debug("executionkit: the on_event callback raised on %s", what, exc_info=error)

    def _queue(self, item: Event | _Pending) -> None:
        self._pending.append(item)
        if self._server is None or self._server.done():
            self._server = asyncio.get_running_loop().create_task(
                self._serve(), context=self._caller_context
            )

    async def _serve(self) -> None:
        callback = self._callback
        assert callback is not None  # noqa: S101 - only queued when there is one
        while self._pending:
            item = self._pending.pop(0)
            try:
                if isinstance(item, _Pending):
                    await item.awaitable
                    continue
                outcome = callback(item)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:  # noqa: BLE001 - a listener never breaks the run
                self._callback_failed(item.event if isinstance(item, _Pending) else item, exc)


class _Pending:
    """An awaitable a plain on_event callback returned, awaited in event order."""

    __slots__ = ("awaitable", "event")

    def __init__(self, event: Event, awaitable: Any) -> None:
        self.event = event
        self.awaitable = awaitable
