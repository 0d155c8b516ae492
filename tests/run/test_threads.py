"""`PlainThreads`: the daemon threads plain functions run in (issue 30, decision 0014).

One thread per call running, never queued, reused once idle, ended after its idle
time; outcomes delivered to the loop's future; nothing left to join at exit. Every
wait is on an event or a join with a bound, never on the clock.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from executionkit._run._threads import PlainThreads, plain_threads

BOUND = 10.0  # seconds: only a broken pool ever waits this long


def test_calls_run_side_by_side_never_queued() -> None:
    """Four calls that wait for each other all run: each got a thread of its own."""
    pool = PlainThreads()
    meeting = threading.Barrier(4, timeout=BOUND)
    futures = [pool.submit(meeting.wait) for _ in range(4)]
    assert sorted(future.result(BOUND) for future in futures) == [0, 1, 2, 3]
    pool.shutdown()


def resting(pool: PlainThreads) -> threading.Event:
    """An event set each time a thread of ``pool`` lists itself idle after a call."""
    rested = threading.Event()
    rest = pool.rest

    def noted(worker: object) -> bool:
        listed = rest(worker)  # type: ignore[arg-type]
        rested.set()
        return listed

    pool.rest = noted  # type: ignore[method-assign]
    return rested


def test_a_thread_is_reused_once_idle_and_is_a_daemon() -> None:
    pool = PlainThreads()
    rested = resting(pool)
    first = pool.submit(threading.current_thread).result(BOUND)
    assert first.daemon
    assert first.name.startswith("executionkit-plain-")
    assert rested.wait(BOUND)
    assert pool.idle_threads() == 1
    assert pool.submit(threading.current_thread).result(BOUND) is first
    pool.shutdown()


def test_an_idle_thread_ends_after_its_idle_time() -> None:
    pool = PlainThreads(idle=0.01)
    thread = pool.submit(threading.current_thread).result(BOUND)
    thread.join(BOUND)
    assert not thread.is_alive()
    assert pool.idle_threads() == 0
    assert pool.submit(lambda: "again").result(BOUND) == "again"  # a new thread, as needed
    pool.shutdown()


def test_an_exception_reaches_the_caller() -> None:
    pool = PlainThreads()

    def broken() -> None:
        msg = "in the thread"
        raise ValueError(msg)

    with pytest.raises(ValueError, match="in the thread"):
        pool.submit(broken).result(BOUND)
    pool.shutdown()


def test_after_shutdown_idle_threads_end_and_nothing_more_runs() -> None:
    pool = PlainThreads()
    rested = resting(pool)
    thread = pool.submit(threading.current_thread).result(BOUND)
    assert rested.wait(BOUND)
    pool.shutdown()
    thread.join(BOUND)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="its threads were shut down"):
        pool.submit(int)


def test_a_cancelled_future_is_never_called() -> None:
    pool = PlainThreads()
    gate = threading.Event()
    calls: list[int] = []
    held = pool.submit(gate.wait, BOUND)
    later = pool.submit(calls.append, 1)
    later.cancel()  # may already run: then it ran once, and cancel() said False
    gate.set()
    assert held.result(BOUND)
    assert calls in ([], [1])
    pool.shutdown()


async def test_run_soon_delivers_results_and_errors_to_the_loop() -> None:
    pool = PlainThreads()
    loop = asyncio.get_running_loop()
    assert await pool.run_soon(loop, lambda x: x * 2, 21) == 42

    def broken() -> None:
        msg = "thread error"
        raise KeyError(msg)

    with pytest.raises(KeyError, match="thread error"):
        await pool.run_soon(loop, broken)
    pool.shutdown()


def test_run_soon_after_the_loop_closed_drops_the_outcome() -> None:
    """A thread that outlives its loop (an abandoned step) ends quietly."""
    pool = PlainThreads()
    loop = asyncio.new_event_loop()
    gate, ended = threading.Event(), threading.Event()

    def late() -> str:
        gate.wait(BOUND)
        ended.set()
        return "nobody waits"

    future = pool.run_soon(loop, late)
    loop.close()
    gate.set()
    assert ended.wait(BOUND)
    assert not future.done()
    pool.shutdown()


def test_the_runs_of_a_process_share_one_pool() -> None:
    assert plain_threads() is plain_threads()
