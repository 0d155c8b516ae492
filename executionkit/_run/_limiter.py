"""The limiter: attempts start only when their key has room, and a 429 pauses the key.

Every run of a process draws on one `Window` per key (`windows`), so two runs
(or a run and its sub-workflows) calling the same provider share its limits;
the windows are guarded by one lock, since runs may live on several threads'
event loops. `Limiter` is what one run uses: `Limiter.admit` waits for room
(giving back the run's concurrency slot meanwhile, so waiting never holds one),
`Limiter.try_admit` and `Limiter.when_room` let a map's driver pick items only
when they can start, `Limiter.done` books what an attempt spent, and
`Limiter.pause` holds the key after a 429.

With a store that shares limits (`LimitStore`: the SQL stores), the windows are
the store's instead: a row per key that every process running against the
database reads and changes in one locking transaction per admission, start,
end and pause (`executionkit._limits.Shared`). Each admitted attempt holds a
lease, which the limiter renews while it runs (`Limiter.close` stops that);
a process that dies gives its places back when its leases expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import socket
import threading
from typing import TYPE_CHECKING, Protocol, TypeVar

from executionkit import _clock
from executionkit._limits import LEASE, Shared, Ticket, Window

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from executionkit._limits import Limit
    from executionkit._run._policies import Slots

__all__ = ["LimitStore", "Limiter", "windows"]

_T = TypeVar("_T")
POLL = 0.05
"""Seconds between looks at a shared key that had no room: other processes say nothing."""
_CALLS = itertools.count()


class LimitStore(Protocol):
    """A store that shares limits between processes: a row of plain data per key."""

    def limit_state(self, key: str, change: Callable[[object], tuple[object, _T]]) -> _T:
        """In one transaction locking ``key``'s row: ``change(state)``, write its new state.

        ``state`` is what the last change wrote (None at first); ``change``
        returns the new state and what this call returns.
        """
        ...


def shared_store(checkpoint_fn: object) -> LimitStore | None:
    """``checkpoint_fn`` if it is a store that shares limits, else None."""
    return checkpoint_fn if callable(getattr(checkpoint_fn, "limit_state", None)) else None  # type: ignore[return-value]


_LOCK = threading.Lock()
_WINDOWS: dict[str, Window] = {}
# Who waits for room on each key: called (on their own loop) after each change.
_LISTENERS: dict[str, list[Callable[[], None]]] = {}


def windows(limits: Iterable[Limit]) -> dict[str, Window]:
    """The process's window of each limit's key, made on first use; its numbers updated."""
    found: dict[str, Window] = {}
    with _LOCK:
        for limit in limits:
            window = _WINDOWS.get(limit.key)
            if window is None:
                window = _WINDOWS[limit.key] = Window(limit)
            elif window.limit != limit:
                window.use(limit)  # the latest run's numbers
            found[limit.key] = window
    return found


def _changed(key: str) -> None:
    """Tell everyone waiting on ``key`` that it may have room now (call under no lock)."""
    with _LOCK:
        listeners = tuple(_LISTENERS.get(key, ()))
    for listener in listeners:
        listener()


class Waiting:
    """One wait for room on a key: woken by a change of the key or when the window frees."""

    __slots__ = ("_callback", "_handle", "_key", "_listener")

    def __init__(self, key: str, callback: Callable[[], None], seconds: float) -> None:
        """Call ``callback`` (once, on the running loop) at the next change or in ``seconds``."""
        loop = asyncio.get_running_loop()
        self._key = key
        self._callback = callback
        self._handle = None if math.isinf(seconds) else loop.call_later(seconds, self._fire)

        def listener() -> None:
            with contextlib.suppress(RuntimeError):  # that loop has closed: its wait is over
                loop.call_soon_threadsafe(self._fire)

        self._listener: Callable[[], None] | None = listener
        with _LOCK:
            _LISTENERS.setdefault(key, []).append(listener)

    def _fire(self) -> None:
        if self._listener is None:
            return
        self.cancel()
        self._callback()

    def cancel(self) -> None:
        """Stop waiting (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with _LOCK:
                waiting = _LISTENERS.get(self._key)
                if waiting is not None:
                    waiting.remove(listener)
                    if not waiting:
                        del _LISTENERS[self._key]
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class Limiter:
    """The limits one run draws on: admission, what attempts spent, pauses after a 429."""

    __slots__ = ("_open", "_pending", "_renewing", "_store", "limits", "windows")

    def __init__(self, limits: Iterable[Limit], store: LimitStore | None = None) -> None:
        """Draw on ``limits``, shared by every run of the process or ``store``'s database."""
        limits = tuple(limits)
        self.windows = windows(limits)
        self.limits = {limit.key: limit for limit in limits}
        self._store = store
        # Shared attempts admitted and not ended: their leases are renewed.
        self._open: dict[str, Ticket] = {}
        self._renewing: asyncio.Task[None] | None = None
        # What attempts on the run's loop did during this pass of it, counted at its end
        # (`start_soon`, `end_soon`): (ticket, -1) for a start, (ticket, tokens) for an end.
        self._pending: list[tuple[Ticket, int]] = []

    def try_admit(self, key: str, given: int | None) -> tuple[Ticket | None, float]:
        """Admit an attempt of ``key`` now if it has room: its ticket, or None and the wait."""
        if self._store is not None:
            admitted, wait = self.admit_up_to(key, given, 1)
            return (admitted[0] if admitted else None), wait
        if self._pending:
            self._count()
        window = self.windows[key]
        with _LOCK:
            if window.timed:
                estimate = window.estimate(given) if window.limit.tokens is not None else 0
                wait = window.wait(_clock.monotonic(), estimate)
            else:  # concurrency alone: no clock, nothing to reserve
                estimate = 0
                wait = window.wait(0.0, 0)
            if wait == 0:
                return window.take(estimate), 0.0
        return None, wait

    def admit_up_to(self, key: str, given: int | None, most: int) -> tuple[list[Ticket], float]:
        """Admit up to ``most`` attempts of ``key`` now: their tickets, and the wait for more.

        One lock for a map's wave of items.
        """
        if self._store is not None:
            return self._shared_admit(key, given, most)
        if self._pending:
            self._count()
        window = self.windows[key]
        admitted: list[Ticket] = []
        wait = 0.0
        with _LOCK:
            timed = window.timed
            estimate = window.estimate(given) if window.limit.tokens is not None else 0
            now = _clock.monotonic() if timed else 0.0
            admitted = window.take_many(estimate, window.room(now, estimate, most))
            if len(admitted) < most:
                wait = window.wait(now, estimate)
        return admitted, wait

    def start(self, ticket: Ticket) -> None:
        """The admitted attempt starts now: its place in the window counts from now."""
        if ticket.shared is not None:
            ticket.started = _clock.wall()
            if ticket.reserving:
                self._change(ticket.window.limit.key, _started(ticket.shared))
            return
        if not ticket.reserving:  # counted by concurrency alone: nothing to stamp
            ticket.started = 0.0
            return
        window = ticket.window
        with _LOCK:  # a reserving ticket is of a sliding window: timed
            window.start(ticket, _clock.monotonic())
            listeners = _LISTENERS.get(window.limit.key)
            waiting = tuple(listeners) if listeners else ()
        for listener in waiting:  # its place now ends at a known time
            listener()

    def start_soon(self, ticket: Ticket) -> None:
        """The admitted attempt starts now, on the run's loop: stamped at the end of this pass.

        One clock read and one lock for every attempt a pass of the loop starts
        (a map's wave starts in one), each stamped no earlier than it really
        started: its place in the window never ends before the provider's does.
        Until then it counts as starting now, as an admitted attempt does.
        """
        if ticket.shared is not None or not ticket.reserving:
            self.start(ticket)
            return
        ticket.starting = True
        pending = self._pending
        pending.append((ticket, -1))
        if len(pending) == 1:  # the first this pass: count them all at its end
            asyncio.get_running_loop().call_soon(self._count)

    def end_soon(self, ticket: Ticket, tokens: int) -> None:
        """`done`, for an attempt on the run's loop: counted at the end of this pass.

        Until then the key counts it as running (its concurrency) and as
        spending its estimate; every admission of this run counts it first.
        """
        if ticket.shared is not None:
            self.done(ticket, tokens)
        elif ticket.open:
            ticket.open = False  # closed now: nothing ends it twice
            pending = self._pending
            pending.append((ticket, tokens))
            if len(pending) == 1:
                asyncio.get_running_loop().call_soon(self._count)

    def _count(self) -> None:
        """Count the starts and ends this pass of the loop made, with one clock read."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        keys = set()
        with _LOCK:
            now = _clock.monotonic()
            for ticket, tokens in pending:
                window = ticket.window
                if ticket.started is None and ticket.starting:
                    window.stamp(ticket, now)
                if tokens >= 0:
                    window.close(ticket, tokens)
                keys.add(window.limit.key)
            waiting = [listener for key in keys for listener in _LISTENERS.get(key, ())]
        for listener in waiting:  # places freed, or ending at a known time
            listener()

    async def admit(
        self,
        key: str,
        given: int | None,
        slots: Slots | None,
        waiting: Callable[[float], None] | None = None,
    ) -> Ticket:
        """Wait until ``key`` has room, then admit an attempt: its ticket.

        ``slots``: the run's concurrency slots, one of which the attempt holds;
        it is given back while waiting and taken again before the attempt is
        admitted. ``waiting(seconds)`` is called once if the attempt has to wait.
        """
        ticket, wait = self.try_admit(key, given)
        if ticket is not None:
            return ticket
        if waiting is not None:
            waiting(wait)
        if slots is not None:
            slots.release()
        held = False  # whether the slot given back is taken again
        try:
            while True:
                await self._room(key, wait)
                if slots is not None:
                    await _retake(slots)
                    held = True
                ticket, wait = self.try_admit(key, given)
                if ticket is not None:
                    return ticket
                if slots is not None:
                    slots.release()
                    held = False
        except BaseException:
            if slots is not None and not held:
                slots.take()  # the caller gives its slot back as it ends, as always
            raise

    async def _room(self, key: str, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        waiting = self.when_room(key, seconds, wake)
        try:
            await woken
        finally:
            waiting.cancel()

    def when_room(self, key: str, seconds: float, callback: Callable[[], None]) -> Waiting:
        """Call ``callback`` once ``key`` may have room (a change, or ``seconds`` from now).

        A shared key is looked at again every `POLL` seconds at least.
        """
        if self._store is not None:
            seconds = min(seconds, POLL)
        return Waiting(key, callback, seconds)

    def done(self, ticket: Ticket, tokens: int, *, limited: bool = False) -> None:
        """The attempt of ``ticket`` ended having spent ``tokens`` (``limited``: a 429)."""
        if ticket.shared is not None:
            if ticket.open:
                ticket.open = False
                self._open.pop(ticket.shared, None)
                self._change(ticket.window.limit.key, _ended(ticket.shared, tokens, limited))
                _changed(ticket.window.limit.key)  # this process's waiters look again now
            return
        window = ticket.window
        with _LOCK:
            if ticket.starting and ticket.started is None:  # ended before its stamp came
                window.start(ticket, _clock.monotonic())
            window.done(ticket, tokens, limited=limited)
            listeners = _LISTENERS.get(window.limit.key) if _LISTENERS else None
            waiting = tuple(listeners) if listeners else ()
        for listener in waiting:
            listener()

    def pause(self, key: str, seconds: float | None) -> float:
        """A 429 on ``key``: hold every attempt of it; return the seconds it waits."""
        if self._store is not None:
            paused: float = self._change(key, _paused(seconds))
            _changed(key)
            return paused
        window = self.windows[key]
        with _LOCK:
            paused = window.pause(_clock.monotonic(), seconds)
        _changed(key)
        return paused

    # --- shared through a store --------------------------------------------------------

    def _change(self, key: str, change: Callable[[Shared, float], _T]) -> _T:
        """Change ``key``'s shared window in one transaction of the store."""
        limit = self.limits[key]

        def changed(state: object) -> tuple[object, _T]:
            now = _clock.wall()
            shared = Shared(limit, state, now)
            result = change(shared, now)
            return shared.dump(now), result

        store = self._store
        assert store is not None  # noqa: S101 - only shared keys get here
        return store.limit_state(key, changed)

    def _shared_admit(self, key: str, given: int | None, most: int) -> tuple[list[Ticket], float]:
        prefix = f"{_OWNER}:{next(_CALLS)}"
        mirror = self.windows[key]

        def admit(shared: Shared, now: float) -> tuple[list[str], float, int, bool]:
            ids = shared.admit(now, given, most, prefix, _OWNER)
            window = shared.window
            estimate = window.estimate(given) if window.limit.tokens is not None else 0
            wait = 0.0 if len(ids) == most else window.wait(now, estimate)
            if not ids and wait == 0:  # room, but another process waited longer: its turn
                wait = POLL
            return ids, wait, estimate, window.sliding

        ids, wait, estimate, sliding = self._change(key, admit)
        admitted = []
        for ticket_id in ids:
            ticket = Ticket(mirror, estimate, sliding)
            ticket.shared = ticket_id
            admitted.append(ticket)
            self._open[ticket_id] = ticket
        if admitted and self._renewing is None:
            self._renewing = asyncio.get_running_loop().create_task(self._renew())
        return admitted, wait

    async def _renew(self) -> None:
        """Renew the leases of the shared attempts running, until `close`."""
        while True:
            await asyncio.sleep(LEASE / 3)
            by_key: dict[str, list[str]] = {}
            for ticket_id, ticket in list(self._open.items()):
                by_key.setdefault(ticket.window.limit.key, []).append(ticket_id)
            for key, ids in by_key.items():
                self._change(key, _renewed(ids))

    def close(self) -> None:
        """The run ended: count what is pending; stop renewing leases.

        Attempts left running keep their leases a while.
        """
        self._count()
        renewing, self._renewing = self._renewing, None
        if renewing is not None:
            renewing.cancel()


_OWNER = f"{socket.gethostname()}:{os.getpid()}"


def _started(ticket_id: str) -> Callable[[Shared, float], None]:
    def change(shared: Shared, now: float) -> None:
        shared.start(ticket_id, now)

    return change


def _ended(ticket_id: str, tokens: int, limited: bool) -> Callable[[Shared, float], None]:
    def change(shared: Shared, now: float) -> None:
        del now
        shared.done(ticket_id, tokens, limited=limited)

    return change


def _paused(seconds: float | None) -> Callable[[Shared, float], float]:
    def change(shared: Shared, now: float) -> float:
        return shared.window.pause(now, seconds)

    return change


def _renewed(ids: list[str]) -> Callable[[Shared, float], None]:
    def change(shared: Shared, now: float) -> None:
        shared.renew(ids, now)

    return change


async def _retake(slots: Slots) -> None:
    """Take one of the run's concurrency slots, waiting for one to be given back."""
    while True:
        free = slots.free()
        if free is None or free > 0:
            slots.take()
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake(woken: asyncio.Future[None] = woken) -> None:
            if not woken.done():
                woken.set_result(None)

        slots.listen(wake)
        try:
            await woken
        finally:
            slots.forget(wake)
