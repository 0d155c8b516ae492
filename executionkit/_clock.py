"""The clocks every layer reads, in one place, so that a test can replace them all at once.

Every reading of time in a run goes through this module's attributes, looked up
at each call: `wall` (seconds since the epoch: checkpoints' ``created_at``,
questions' ``asked_at`` and deadlines, waits' due times, when a rate limit's
attempt started), `monotonic` (rate-limit windows) and `elapsed` (durations in
events). The event loop's own ``time()`` covers retries' backoff, timeouts and
sleeps. `executionkit.testing.VirtualClock` replaces the three, and gives
`new_loop` a loop whose time is its own, for as long as it is in use.

A loop with a ``count_outside(change)`` method (a virtual clock's) is told of
each plain function a run starts in a thread and of each that ended, on the
loop's thread: it moves time forward only while none runs, so a thread's real
work never meets a timeout it has not had the time to reach.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

wall: Callable[[], float] = time.time
"""Seconds since the epoch, a float (a run notes when each attempt starts and ends with it)."""
monotonic: Callable[[], float] = time.monotonic
"""Seconds of a clock that never goes back."""
elapsed: Callable[[], float] = time.perf_counter
"""Seconds of the finest clock, for durations."""
new_loop: Callable[[], Any] | None = None
"""Makes the event loop `Workflow.run_sync` runs in; None: asyncio's own."""


def utc_now() -> datetime:
    """`wall` as an aware UTC `datetime`."""
    return datetime.fromtimestamp(wall(), UTC)


def wall_ms() -> int:
    """`wall` in whole milliseconds: when attempts start and end (format 5's ``attempts``)."""
    return int(wall() * 1000)


def wall_ns() -> int:
    """`wall` in whole nanoseconds."""
    if wall is time.time:
        return time.time_ns()
    return int(wall() * 1_000_000_000)
