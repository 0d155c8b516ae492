"""`VirtualClock`: time that passes only while a run waits, so days of waiting take milliseconds.

While a clock is in use (``with VirtualClock() as clock:``), every clock a run
reads (`executionkit._clock`: checkpoints' ``created_at``, questions' deadlines,
waits' due times, rate-limit windows, durations in events) reads the clock's
time, and `Workflow.run_sync` runs in an event loop whose ``time()`` is the
clock's too. That loop never sleeps: when nothing is ready and it would wait
for a timer (a retry's backoff, a timeout, a `Step.wait` slept through,
``asyncio.sleep`` inside a step, a rate limit's window), it moves the clock to
that timer at once. It waits for real only for real things: a plain function
running in a thread (time stands still until it returns), a socket or a pipe.

The loop opens no socket: its wake-up channel is an ``os.pipe`` where asyncio
would make a socket pair.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Self, TypeVar

from executionkit import _clock

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType

_T = TypeVar("_T")


class VirtualClock:
    """A clock the test moves, and that moves itself when a run waits for a timer.

    Use it around `Workflow.run_sync` (or `VirtualClock.run` for a coroutine):

    ```python
    with VirtualClock() as clock:
        result = workflow.run_sync(sleep_up_to=math.inf)  # a 30-day wait: slept at once
        clock.advance(days=7)  # past a question's deadline
    ```

    One clock at a time per process: entering it replaces the process's clocks
    until it is left. A ``time.sleep`` in a plain function is real; an
    ``asyncio.sleep`` in an async step is not.

    Args:
        start: The time it starts at (an aware `datetime`); now by default.
    """

    def __init__(self, start: datetime | None = None) -> None:
        """Start the clock at ``start`` (now if None); it moves only when told or waited on."""
        if start is not None and start.utcoffset() is None:
            msg = f"VirtualClock(start=...) must be an aware datetime, got {start!r}"
            raise TypeError(msg)
        self._wall0 = time.time() if start is None else start.timestamp()
        self._mono0 = 1_000_000.0  # far from 0: code that subtracts times stays positive
        self._passed = 0.0
        self._lock = threading.Lock()
        self._saved: tuple[Any, ...] | None = None

    def __repr__(self) -> str:
        """Show the time."""
        return f"VirtualClock({self.now().isoformat()})"

    # --- reading and moving it ---------------------------------------------------------------

    def now(self) -> datetime:
        """The clock's time, an aware UTC `datetime`."""
        return datetime.fromtimestamp(self.time(), UTC)

    def time(self) -> float:
        """The clock's time in seconds since the epoch (what `time.time` would say)."""
        return self._wall0 + self._passed

    def monotonic(self) -> float:
        """The clock's monotonic seconds (what `time.monotonic` would say)."""
        return self._mono0 + self._passed

    @property
    def passed(self) -> timedelta:
        """How much time passed on the clock since it started."""
        return timedelta(seconds=self._passed)

    def advance(self, seconds: float = 0.0, **delta: float) -> None:
        """Move the clock forward by ``seconds`` plus ``timedelta(**delta)`` (days=, hours=...)."""
        step = seconds + timedelta(**delta).total_seconds()
        if not step >= 0:
            msg = f"a VirtualClock moves forward only: advance by {step!r} seconds"
            raise ValueError(msg)
        with self._lock:
            self._passed += step

    def _to(self, monotonic: float) -> None:
        """Move the clock to ``monotonic`` if that is later (a timer the loop waits for)."""
        with self._lock:
            self._passed = max(self._passed, monotonic - self._mono0)

    # --- in use ------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        """Make the process's clocks this one's, and `Workflow.run_sync` run in its loop."""
        if self._saved is not None:
            msg = "this VirtualClock is in use already"
            raise RuntimeError(msg)
        if isinstance(_clock.new_loop, _Factory):
            msg = "another VirtualClock is in use: one at a time per process"
            raise RuntimeError(msg)  # noqa: TRY004 - a state, not a type, is wrong
        self._saved = (_clock.wall, _clock.monotonic, _clock.elapsed, _clock.new_loop)
        _clock.wall = self.time
        _clock.monotonic = self.monotonic
        _clock.elapsed = self.monotonic
        _clock.new_loop = _Factory(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Give the process its own clocks back."""
        assert self._saved is not None  # noqa: S101 - entered first
        _clock.wall, _clock.monotonic, _clock.elapsed, _clock.new_loop = self._saved
        self._saved = None

    def new_loop(self) -> asyncio.AbstractEventLoop:
        """An event loop whose time is this clock's, and that moves it instead of sleeping."""
        return _VirtualLoop(self)

    def run(self, awaitable: Awaitable[_T]) -> _T:
        """Run a coroutine to its end in a loop of this clock (as `asyncio.run` does).

        For ``await workflow.run(...)`` in a test that is not itself a coroutine;
        the clock must be in use (``with clock:``) for the run's other clocks.
        """
        with asyncio.Runner(loop_factory=self.new_loop) as runner:
            return runner.run(_awaited(awaitable))


async def _awaited(awaitable: Awaitable[_T]) -> _T:
    return await awaitable


class _Factory:
    """`executionkit._clock.new_loop` while a clock is in use: its loops."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def __call__(self) -> asyncio.AbstractEventLoop:
        return self.clock.new_loop()


class _PipeEnd:
    """One end of an ``os.pipe``, with the few socket methods asyncio's self-pipe uses."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def fileno(self) -> int:
        return -1 if self._fd is None else self._fd

    def recv(self, size: int) -> bytes:
        if self._fd is None:
            raise BlockingIOError
        return os.read(self._fd, size)

    def send(self, data: bytes) -> int:
        if self._fd is None:
            raise OSError("closed")  # asyncio catches and drops it
        return os.write(self._fd, data)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class _VirtualSelector(selectors.DefaultSelector):
    """The loop's selector: polls, and moves the clock to the next timer instead of sleeping."""

    def __init__(self, clock: VirtualClock, loop: _VirtualLoop) -> None:
        super().__init__()
        self._clock = clock
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        ready: list[tuple[Any, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if self._loop.outside or timeout is None:
            return super().select(timeout)  # real work, or nothing scheduled: wait for real
        self._clock._to(self._loop.time() + timeout)  # noqa: SLF001 - its own loop
        return []


class _VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on a `VirtualClock`'s time, with an ``os.pipe`` as its wake-up channel."""

    def __init__(self, clock: VirtualClock) -> None:
        self._virtual = clock
        self.outside = 0
        super().__init__(selector=_VirtualSelector(clock, self))

    def time(self) -> float:
        return self._virtual.monotonic()

    def count_outside(self, change: int) -> None:
        """A plain function started in a thread (+1), or ended (-1): see `executionkit._clock`."""
        self.outside += change

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        future = super().run_in_executor(executor, func, *args)
        self.outside += 1
        future.add_done_callback(lambda _: self.count_outside(-1))
        return future

    def _make_self_pipe(self) -> None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self._ssock = _PipeEnd(read)
        self._csock = _PipeEnd(write)
        self._internal_fds += 1  # type: ignore[attr-defined]
        self._add_reader(read, self._read_from_self)  # type: ignore[attr-defined]
