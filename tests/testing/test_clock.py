"""`VirtualClock`: waits, deadlines, backoffs, windows and sleeps pass on the clock only."""

from __future__ import annotations

import asyncio
import gc
import math
import socket
import threading
import time
import warnings
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from executionkit import Limit, Step, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit import _clock as clocks
from executionkit import events as ev
from executionkit.testing import VirtualClock

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def slow_month(tries: Counter[int]) -> Workflow:
    """The issue's workflow: a 30-day wait, a 7-day deadline with a default, 50 flaky items."""

    def flaky(item: int, ctx: Any) -> int:
        tries[item] += 1
        if tries[item] <= 2:
            msg = f"try {tries[item]} of item {item}"
            raise RuntimeError(msg)
        return item * 2

    return Workflow(
        [
            Step("items", lambda ctx: list(range(50))),
            Step.map("each", flaky, over="items", retries=2, retry_delay=60, retry_jitter=0),
            Step.wait("month", seconds=timedelta(days=30), depends_on=("each",)),
            Step.ask(
                "ok",
                lambda ctx: "still ok?",
                depends_on=("month",),
                expires_after=timedelta(days=7),
                default="fine",
            ),
            Step("end", lambda ctx: [ctx["ok"], sum(ctx["each"])], depends_on=("ok",)),
        ]
    )


def test_a_month_a_week_and_a_hundred_backoffs_pass_on_the_clock() -> None:
    tries: Counter[int] = Counter()
    saved: list[WorkflowCheckpoint] = []
    events: list[ev.Event] = []
    with VirtualClock(START) as clock:
        first = slow_month(tries).run_sync(
            checkpoint_fn=saved.append, on_event=events.append, sleep_up_to=math.inf
        )
        assert list(first.pending) == ["ok"]
        # Two backoffs of each item (concurrently), then the month, all on the clock.
        assert timedelta(days=30, seconds=60) < clock.passed < timedelta(days=30, minutes=10)
        asked_at = clock.now()
        asked = saved[-1].pending["ok"]
        assert asked["asked_at"] == asked_at.isoformat()
        assert datetime.fromisoformat(saved[-1].created_at or "") == asked_at
        clock.advance(days=7)  # at the deadline: not past it
        waiting = slow_month(tries).run_sync(resume_from=saved[-1], checkpoint_fn=saved.append)
        assert list(waiting.pending) == ["ok"]
        clock.advance(seconds=1)
        done = slow_month(tries).run_sync(resume_from=saved[-1], checkpoint_fn=saved.append)
    assert done.outputs["end"] == ["fine", 2450]
    assert set(tries.values()) == {3}
    retried = [event for event in events if isinstance(event, ev.StepRetried)]
    assert len(retried) == 100
    ended = asked_at + timedelta(days=7, seconds=1)
    assert datetime.fromisoformat(saved[-1].created_at or "") == ended


# The real loop made to show the check can fail is dropped half made; its __del__ complains.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_loop_opens_no_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        msg = "a socket was opened"
        raise AssertionError(msg)

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "socketpair", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the loop half made, then dropped
        with pytest.raises(AssertionError, match="a socket was opened"):
            asyncio.new_event_loop()  # what a real loop does: the check can fail
        gc.collect()
    tries: Counter[int] = Counter()
    with VirtualClock(START):
        first = slow_month(tries).run_sync(sleep_up_to=math.inf)
    assert list(first.pending) == ["ok"]


def test_time_stands_still_while_a_plain_function_works() -> None:
    started = threading.Event()
    release = threading.Event()

    def slow(ctx: Any) -> str:
        started.set()
        release.wait(10)
        return "done"

    async def other(ctx: Any) -> str:
        await asyncio.to_thread(started.wait, 10)
        release.set()
        return "released"

    flow = Workflow([Step("slow", slow, timeout=5), Step("other", other, timeout=5)])
    with VirtualClock(START) as clock:
        result = flow.run_sync()
    assert dict(result.outputs) == {"slow": "done", "other": "released"}
    assert clock.passed < timedelta(seconds=1)  # real milliseconds, never a jump to the timeout


def test_a_timeout_of_an_async_step_passes_on_the_clock() -> None:
    async def stuck(ctx: Any) -> str:
        await asyncio.sleep(3600)
        return "never"

    saved: list[WorkflowCheckpoint] = []
    with VirtualClock(START) as clock, pytest.raises(WorkflowFailed, match="timed out after 30 s"):
        Workflow([Step("stuck", stuck, timeout=30)]).run_sync(checkpoint_fn=saved.append)
    assert "stuck" in saved[-1].errors
    assert clock.passed == timedelta(seconds=30)


def test_durations_in_events_are_the_clocks() -> None:
    async def nap(ctx: Any) -> str:
        await asyncio.sleep(3600)
        return "rested"

    events: list[ev.Event] = []
    with VirtualClock(START):
        Workflow([Step("nap", nap)]).run_sync(on_event=events.append)
    finished = next(event for event in events if isinstance(event, ev.StepFinished))
    assert finished.duration == pytest.approx(3600, abs=1)


def test_a_rate_limit_window_passes_on_the_clock() -> None:
    flow = Workflow(
        [
            Step("items", lambda ctx: list(range(6))),
            Step.map("call", lambda item, ctx: item, over="items", limit="api"),
        ]
    )
    with VirtualClock(START) as clock:
        result = flow.run_sync(limits=[Limit("api", requests=2, per=60)])
    assert result.outputs["call"] == list(range(6))
    assert timedelta(seconds=120) <= clock.passed < timedelta(seconds=180)


def test_a_coroutine_runs_on_the_clock_too() -> None:
    async def nap(ctx: Any) -> str:
        await asyncio.sleep(86400)
        return "a day later"

    with VirtualClock(START) as clock:
        result = clock.run(Workflow([Step("nap", nap)]).run())
    assert result.outputs["nap"] == "a day later"
    assert clock.passed == timedelta(days=1)


def test_the_clocks_come_back_and_misuse_is_refused() -> None:
    clock = VirtualClock(START)
    with clock:
        assert clocks.wall() == START.timestamp()
        with pytest.raises(RuntimeError, match="in use already"), clock:
            pass
        with pytest.raises(RuntimeError, match="one at a time"), VirtualClock():
            pass
    assert clocks.wall is time.time
    assert clocks.monotonic is time.monotonic
    assert clocks.new_loop is None
    with pytest.raises(ValueError, match="moves forward only"):
        clock.advance(-1)
    with pytest.raises(TypeError, match="aware datetime"):
        VirtualClock(datetime(2026, 1, 1))  # noqa: DTZ001 - the naive datetime refused
    clock.advance(hours=1, seconds=1)
    assert clock.now() == START + timedelta(hours=1, seconds=1)
