"""Several ``on_event`` listeners as one, and the listeners that trace runs.

``on_event=`` takes one callable or a list of them (``[Tracing(), ConsoleProgress()]``).
`Listeners` calls each in turn, so that one that raises is logged and never
keeps the others from their events. A listener with a method
``trace_run(event: RunStarted) -> str | None`` (`executionkit.otel.Tracing`)
is asked, before each run's `RunStarted` is delivered, for the run's trace
context; the run keeps the first one in its checkpoints.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from executionkit.events import Event

from executionkit._errors import RunArgumentError

LOG = logging.getLogger("executionkit")


class Listeners:
    """Call each listener with each event, in order; await what they return, in order."""

    __slots__ = ("listeners",)

    def __init__(self, listeners: Sequence[Callable[[Event], object]]) -> None:
        self.listeners = tuple(listeners)

    def __call__(self, event: Event) -> object:
        """Deliver ``event`` to every listener; an awaitable if any returned one."""
        waiting: list[Any] = []
        for listener in self.listeners:
            try:
                outcome = listener(event)
            except Exception:
                LOG.warning(
                    "executionkit: an on_event listener (%r) raised on %s; the run and "
                    "the other listeners go on",
                    listener,
                    type(event).__name__,
                    exc_info=True,
                )
                continue
            if inspect.isawaitable(outcome):
                waiting.append(outcome)
        return _in_turn(waiting) if waiting else None

    def __repr__(self) -> str:
        """Name the listeners."""
        return f"Listeners({list(self.listeners)!r})"


async def _in_turn(waiting: list[Any]) -> None:
    for awaitable in waiting:
        try:
            await awaitable
        except Exception:
            LOG.warning("executionkit: an on_event listener raised", exc_info=True)


class Forwarded:
    """A sub-workflow's ``on_event``: the parent's listener behind a function of the runner's."""

    __slots__ = ("_forward", "listener")

    def __init__(
        self, forward: Callable[[Any], object], listener: Callable[[Any], object]
    ) -> None:
        self._forward = forward
        self.listener = listener

    def __call__(self, event: Event) -> object:
        """Hand ``event`` to the forwarding function."""
        return self._forward(event)


def listeners_of(on_event: object) -> object:
    """``on_event`` as one callable (or None): a list becomes `Listeners`.

    Raises:
        RunArgumentError: If a listener is not callable.
    """
    if not isinstance(on_event, (list, tuple)):
        return on_event
    for position, listener in enumerate(on_event):
        if not callable(listener):
            msg = f"on_event[{position}] must be callable, got {type(listener).__name__}"
            raise RunArgumentError(msg)
    if not on_event:
        return None
    return on_event[0] if len(on_event) == 1 else Listeners(on_event)


def tracers(callback: object) -> tuple[Any, ...]:
    """The listeners of ``callback`` that trace runs (have a ``trace_run`` method)."""
    if callback is None:
        return ()
    if isinstance(callback, Forwarded):
        return tracers(callback.listener)
    if isinstance(callback, Listeners):
        return tuple(item for listener in callback.listeners for item in tracers(listener))
    return (callback,) if callable(getattr(callback, "trace_run", None)) else ()
