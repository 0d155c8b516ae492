"""The threads plain functions run in when the run was given no executor.

`PlainThreads` is a `concurrent.futures.Executor` with one thread per call
running: a call never waits in a queue (the run's and the map's
``max_concurrency`` bound how many run at once, and a call waiting for a
thread would be listed as running while nothing spends). A thread that
finished its call waits for the next one for a while, then ends.

Its threads are daemon threads, unlike those of `ThreadPoolExecutor`, which
the interpreter joins at exit: a run stopped by a signal abandons a plain
function still running after the stop's grace (see
`executionkit._run._attempt`), and the process must be able to exit while it
still sleeps or reads a socket.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

__all__ = ["PlainThreads", "plain_threads"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

IDLE_SECONDS = 60.0
"""How long a thread with nothing to run waits for a call before it ends."""


class _Worker:
    """One daemon thread, running the calls it is handed one after another.

    Handed its next call through a lock held while it has none: releasing it
    is the cheapest wake-up a thread has.
    """

    __slots__ = ("_job", "_pool", "_ready")

    def __init__(self, pool: PlainThreads, job: Callable[[], None]) -> None:
        self._pool = pool
        self._job: Callable[[], None] | None = job
        self._ready = threading.Lock()
        self._ready.acquire()

    def hand(self, job: Callable[[], None] | None) -> None:
        """Give this idle worker its next call (None: nothing, it ends)."""
        self._job = job
        self._ready.release()

    def loop(self) -> None:
        """Run calls until none came for the pool's ``idle`` seconds."""
        pool = self._pool
        ready = self._ready
        while True:
            job = self._job
            self._job = None
            if job is not None:
                job()
                del job  # drop the call before waiting: it holds its result
            if not pool.rest(self):
                return
            if not ready.acquire(timeout=pool.idle):
                if pool.retire(self):
                    return
                # Taken off the idle list just as it timed out: its call is being handed.
                ready.acquire()


class PlainThreads(Executor):
    """Daemon threads for plain functions: one per call running, reused once idle."""

    def __init__(self, idle: float = IDLE_SECONDS) -> None:
        """Keep a thread with nothing to run for ``idle`` seconds."""
        self.idle = idle
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._closed = False
        self._names = itertools.count(1)

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        """Call ``fn(*args, **kwargs)`` in a thread of its own (an idle one, or a new one)."""
        future: Future[_T] = Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
                future.set_exception(exc)
            else:
                future.set_result(result)

        self._start(job)
        return future

    def run_soon(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        """Call ``fn(*args)`` in a thread; its outcome lands in a future of ``loop``.

        What `loop.run_in_executor` does, without a `concurrent.futures.Future`
        in between (one lock and one condition less per call). A call whose
        future was cancelled still runs to its end; its outcome is dropped.
        """
        future: asyncio.Future[_T] = loop.create_future()
        # A loop whose time is virtual (executionkit.testing.VirtualClock) counts the calls
        # running here, and moves time only while none does; settled on the loop's thread.
        outside = getattr(loop, "count_outside", None)
        if outside is not None:
            outside(1)
            future.add_done_callback(lambda _: outside(-1))

        def job() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the future
                _deliver(loop, _fail, future, exc)
            else:
                _deliver(loop, _succeed, future, result)

        self._start(job)
        return future

    def _start(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                msg = "cannot run a plain function: its threads were shut down"
                raise RuntimeError(msg)
            worker = self._idle.pop() if self._idle else None
        if worker is not None:
            worker.hand(job)
            return
        thread = threading.Thread(
            target=_Worker(self, job).loop,
            name=f"executionkit-plain-{next(self._names)}",
            daemon=True,
        )
        thread.start()

    def rest(self, worker: _Worker) -> bool:
        """``worker`` finished its call: list it as idle; False when it should end."""
        with self._lock:
            if self._closed:
                return False
            self._idle.append(worker)
            return True

    def retire(self, worker: _Worker) -> bool:
        """``worker`` waited `idle` seconds for nothing: whether it ends (not handed a call)."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False

    def idle_threads(self) -> int:
        """How many threads wait for a call now."""
        with self._lock:
            return len(self._idle)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Let idle threads end; calls running go on (their threads are daemons)."""
        del wait, cancel_futures
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.hand(None)


def _deliver(
    loop: asyncio.AbstractEventLoop,
    settle: Callable[[asyncio.Future[Any], Any], None],
    future: asyncio.Future[Any],
    outcome: Any,
) -> None:
    """From a worker thread: settle ``future`` on its loop (dropped if the loop closed)."""
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
        loop.call_soon_threadsafe(settle, future, outcome)


def _succeed(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


_SHARED: list[PlainThreads] = []
_SHARED_LOCK = threading.Lock()


def plain_threads() -> PlainThreads:
    """The threads every run without an executor shares, made on first use."""
    if _SHARED:
        return _SHARED[0]
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(PlainThreads())
    return _SHARED[0]
