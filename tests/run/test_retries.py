"""Retries and timeouts: Step validation, the wait schedule, and what a run does with them."""

from __future__ import annotations

import asyncio
import functools
import math
import re
import threading
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
    WorkflowResult,
    current_step,
)
from executionkit._define._step import retry_wait
from executionkit._run import _attempt

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping

# The largest float below 1: the top of a uniform draw in [0, 1).
ALMOST_ONE = math.nextafter(1.0, 0.0)
RETRY_ON_HINT = (
    "step 'x': retry_on must be an Exception subclass or a tuple of them "
    "(interrupts such as CancelledError are never retried), got "
)
# Timeout tests really wait; every timeout in this file is this long.
TICK = 0.01


async def work(ctx: Mapping[str, Any]) -> str:
    return "done"


def sync_work(ctx: Mapping[str, Any]) -> str:
    return "done"


class AsyncCallable:
    """An object whose ``__call__`` is a coroutine function, with a stable repr."""

    def __init__(self, label: str) -> None:
        self.label = label

    async def __call__(self, ctx: Mapping[str, Any]) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"<{self.label}>"


def returns_coroutine(ctx: Mapping[str, Any]) -> Coroutine[Any, Any, str]:
    return work(ctx)


class SyncCallable:
    def __call__(self, ctx: Mapping[str, Any]) -> str:
        return "sync"


async def tagged(tag: str, ctx: Mapping[str, Any]) -> str:
    return tag


async def run_bounded(workflow: Workflow, **kwargs: Any) -> WorkflowResult:
    """Run with a generous bound so a broken runner fails the test instead of hanging it."""
    async with asyncio.timeout(5):
        return await workflow.run(**kwargs)


async def run_failing(workflow: Workflow, **kwargs: Any) -> WorkflowFailed:
    with pytest.raises(WorkflowFailed) as caught:
        await run_bounded(workflow, **kwargs)
    return caught.value


# --- Step validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings_", "message"),
    [
        ({"retries": -1}, "step 'x': retries must be a non-negative int, got -1"),
        ({"retries": True}, "step 'x': retries must be a non-negative int, got True"),
        ({"retries": 2.0}, "step 'x': retries must be a non-negative int, got 2.0"),
        ({"retries": "2"}, "step 'x': retries must be a non-negative int, got '2'"),
        ({"retries": None}, "step 'x': retries must be a non-negative int, got None"),
        ({"retry_on": "ValueError"}, RETRY_ON_HINT + "'ValueError'"),
        ({"retry_on": ValueError("boom")}, RETRY_ON_HINT + "ValueError('boom')"),
        ({"retry_on": [ValueError]}, RETRY_ON_HINT + "[<class 'ValueError'>]"),
        ({"retry_on": KeyboardInterrupt}, RETRY_ON_HINT + "<class 'KeyboardInterrupt'>"),
        (
            {"retry_on": asyncio.CancelledError},
            RETRY_ON_HINT + "<class 'asyncio.exceptions.CancelledError'>",
        ),
        ({"retry_on": BaseException}, RETRY_ON_HINT + "<class 'BaseException'>"),
        ({"retry_on": (ValueError, SystemExit)}, RETRY_ON_HINT + "<class 'SystemExit'>"),
        ({"retry_on": (ValueError, 3)}, RETRY_ON_HINT + "3"),
        ({"retry_on": (ValueError, "KeyError")}, RETRY_ON_HINT + "'KeyError'"),
        ({"retry_on": (ValueError, None)}, RETRY_ON_HINT + "None"),
        ({"retry_delay": -1}, "step 'x': retry_delay must be a finite number >= 0, got -1"),
        ({"retry_delay": -0.5}, "step 'x': retry_delay must be a finite number >= 0, got -0.5"),
        ({"retry_delay": math.nan}, "step 'x': retry_delay must be a finite number >= 0, got nan"),
        ({"retry_delay": math.inf}, "step 'x': retry_delay must be a finite number >= 0, got inf"),
        ({"retry_delay": "1"}, "step 'x': retry_delay must be a finite number >= 0, got '1'"),
        ({"retry_delay": True}, "step 'x': retry_delay must be a finite number >= 0, got True"),
        ({"retry_delay": None}, "step 'x': retry_delay must be a finite number >= 0, got None"),
        (
            {"retry_delay": 10**400},
            f"step 'x': retry_delay must be a finite number >= 0, got {10**400}",
        ),
        (
            {"retry_max_delay": -1.0},
            "step 'x': retry_max_delay must be a finite number >= 0, got -1.0",
        ),
        (
            {"retry_max_delay": math.nan},
            "step 'x': retry_max_delay must be a finite number >= 0, got nan",
        ),
        (
            {"retry_max_delay": math.inf},
            "step 'x': retry_max_delay must be a finite number >= 0, got inf",
        ),
        (
            {"retry_max_delay": "60"},
            "step 'x': retry_max_delay must be a finite number >= 0, got '60'",
        ),
        ({"retry_backoff": 0.5}, "step 'x': retry_backoff must be a finite number >= 1, got 0.5"),
        ({"retry_backoff": 0}, "step 'x': retry_backoff must be a finite number >= 1, got 0"),
        (
            {"retry_backoff": -2.0},
            "step 'x': retry_backoff must be a finite number >= 1, got -2.0",
        ),
        (
            {"retry_backoff": math.nan},
            "step 'x': retry_backoff must be a finite number >= 1, got nan",
        ),
        (
            {"retry_backoff": math.inf},
            "step 'x': retry_backoff must be a finite number >= 1, got inf",
        ),
        ({"retry_jitter": 1.5}, "step 'x': retry_jitter must be between 0 and 1, got 1.5"),
        ({"retry_jitter": -0.1}, "step 'x': retry_jitter must be a finite number >= 0, got -0.1"),
        (
            {"retry_jitter": math.nan},
            "step 'x': retry_jitter must be a finite number >= 0, got nan",
        ),
        (
            {"retry_jitter": "0.5"},
            "step 'x': retry_jitter must be a finite number >= 0, got '0.5'",
        ),
        ({"timeout": 0}, "step 'x': timeout must be a positive number of seconds or None, got 0"),
        (
            {"timeout": 0.0},
            "step 'x': timeout must be a positive number of seconds or None, got 0",
        ),
        ({"timeout": -1}, "step 'x': timeout must be a finite number >= 0, got -1"),
        ({"timeout": -0.01}, "step 'x': timeout must be a finite number >= 0, got -0.01"),
        ({"timeout": math.nan}, "step 'x': timeout must be a finite number >= 0, got nan"),
        ({"timeout": math.inf}, "step 'x': timeout must be a finite number >= 0, got inf"),
        ({"timeout": "5"}, "step 'x': timeout must be a finite number >= 0, got '5'"),
        ({"timeout": True}, "step 'x': timeout must be a finite number >= 0, got True"),
    ],
)
def test_invalid_retry_and_timeout_settings_are_rejected(
    settings_: dict[str, Any], message: str
) -> None:
    """Each bad setting fails at construction with a message naming step, setting and value."""
    with pytest.raises(WorkflowDefinitionError, match=f"^{re.escape(message)}$"):
        Step("x", work, **settings_)


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(sync_work, id="plain function"),
        pytest.param(functools.partial(sync_work), id="partial of a plain function"),
        pytest.param(SyncCallable(), id="object with a plain __call__"),
        pytest.param(returns_coroutine, id="plain function returning a coroutine"),
    ],
)
def test_timeout_is_refused_for_an_inline_plain_function(
    run: Callable[[Mapping[str, Any]], Any],
) -> None:
    """On the loop's thread a plain function cannot be interrupted, so a timeout is refused."""
    message = (
        "step 'x': timeout cannot apply with inline=True: a plain function running on the "
        "event loop's thread cannot be interrupted. Drop inline=True (it then runs in a "
        "worker thread, abandoned when it times out)"
    )
    with pytest.raises(WorkflowDefinitionError, match=f"^{re.escape(message)}$"):
        Step("x", run, timeout=1, inline=True)
    with pytest.raises(WorkflowDefinitionError, match=f"^{re.escape(message)}$"):
        Step.map("x", lambda item, ctx: item, over="y", timeout=1, inline=True)


@pytest.mark.parametrize("in_map", [False, True], ids=["step", "map item"])
async def test_a_plain_function_past_its_timeout_is_abandoned_and_retried(in_map: bool) -> None:
    """Its thread cannot be stopped: the attempt ends as a timeout, its late result is dropped.

    What it reports after the timeout is booked as "late"; the retry's output is recorded.
    """
    release = threading.Event()
    returned = threading.Event()
    attempts: list[int] = []

    def slow_first(*args: Any) -> str:
        step = current_step()
        attempts.append(step.attempt)
        if step.attempt == 1:
            step.add_usage(TokenUsage(5, 0, 1))
            release.wait(10)
            step.add_usage(TokenUsage(7, 0, 1))  # after its attempt ended: late
            returned.set()
            return "too late"
        release.set()  # the abandoned attempt goes on, and ends, while the run runs
        assert returned.wait(10)
        step.add_usage(TokenUsage(1, 0, 1))
        return "in time"

    options: dict[str, Any] = {"timeout": 0.05, "retries": 1, "retry_delay": 0}
    step = (
        Step.map("x", slow_first, over="items", **options)
        if in_map
        else Step("x", slow_first, **options)
    )
    saved: list[WorkflowCheckpoint] = []
    result = await Workflow([step]).run(
        {"items": ["i"]} if in_map else None, checkpoint_fn=saved.append
    )
    assert dict(result.outputs) == {"x": ["in time"] if in_map else "in time"}
    assert attempts == [1, 2]
    key = "0" if in_map else None  # the first item's key: its index
    rows = sorted((e.item, e.attempt, e.outcome, e.usage.input_tokens) for e in saved[-1].ledger)
    assert rows == [(key, 1, "late", 7), (key, 1, "timeout", 5), (key, 2, "ok", 1)]
    assert result.cost == TokenUsage(13, 0, 3)


def test_a_plain_function_returning_a_coroutine_is_timed_as_a_whole() -> None:
    """The thread makes the coroutine, the loop awaits it: the timeout covers both."""

    async def forever() -> str:
        await asyncio.Event().wait()
        return "never"

    step = Step("x", lambda ctx: forever(), timeout=0.05)
    with pytest.raises(WorkflowFailed) as caught:
        Workflow([step]).run_sync()
    assert str(caught.value.errors["x"]) == "step 'x' attempt 1 timed out after 0.05 s"


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        pytest.param(work, "done", id="async def"),
        pytest.param(functools.partial(tagged, "partial"), "partial", id="partial of async def"),
        pytest.param(AsyncCallable("object"), "object", id="object with async __call__"),
    ],
)
async def test_timeout_is_accepted_for_async_callables(
    run: Callable[[Mapping[str, Any]], Any], expected: str
) -> None:
    """Async functions, partials of them and objects with ``async def __call__`` take a timeout."""
    step = Step("x", run, timeout=5)
    assert step.timeout == 5
    result = await run_bounded(Workflow([step]))
    assert dict(result.outputs) == {"x": expected}


def test_retries_without_timeout_accept_plain_functions() -> None:
    step = Step("x", sync_work, retries=3, retry_delay=0, retry_jitter=0)
    assert (step.retries, step.retry_delay, step.retry_jitter, step.timeout) == (3, 0, 0, None)


def test_defaults() -> None:
    """No retries and no timeout unless asked for."""
    step = Step("x", work)
    assert step.retries == 0
    assert step.retry_on == (Exception,)
    assert (step.retry_delay, step.retry_backoff, step.retry_max_delay) == (1.0, 2.0, 60.0)
    assert step.retry_jitter == 0.5
    assert step.timeout is None


@pytest.mark.parametrize(
    ("retry_on", "expected"),
    [
        (ValueError, (ValueError,)),
        (TimeoutError, (TimeoutError,)),
        ((ValueError,), (ValueError,)),
        ((ValueError, KeyError), (ValueError, KeyError)),
        ((), ()),
    ],
)
def test_retry_on_is_normalised_to_a_tuple(
    retry_on: type[Exception] | tuple[type[Exception], ...],
    expected: tuple[type[Exception], ...],
) -> None:
    assert Step("x", work, retry_on=retry_on).retry_on == expected


def test_retry_settings_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        Step("x", work, (), {}, 3)  # type: ignore[call-arg]


def test_repr_shows_only_non_default_settings() -> None:
    run = AsyncCallable("job")
    assert repr(Step("x", run)) == (
        "Step(name='x', run=<job>, depends_on=(), metadata=mappingproxy({}))"
    )
    # Values equal to the defaults are not shown, whatever their type.
    assert repr(Step("x", run, retries=0, retry_delay=1, retry_on=Exception)) == (
        "Step(name='x', run=<job>, depends_on=(), metadata=mappingproxy({}))"
    )
    assert repr(Step("x", run, retries=2, timeout=1.5)) == (
        "Step(name='x', run=<job>, depends_on=(), metadata=mappingproxy({}), "
        "retries=2, timeout=1.5)"
    )
    every = Step(
        "x",
        run,
        retries=3,
        retry_on=ValueError,
        retry_delay=0.5,
        retry_backoff=3.0,
        retry_max_delay=10.0,
        retry_jitter=0.0,
        timeout=2.5,
    )
    assert repr(every) == (
        "Step(name='x', run=<job>, depends_on=(), metadata=mappingproxy({}), retries=3, "
        "retry_on=(<class 'ValueError'>,), retry_delay=0.5, retry_backoff=3.0, "
        "retry_max_delay=10.0, retry_jitter=0.0, timeout=2.5)"
    )


# --- retry_wait: the wait schedule -------------------------------------------------------


def schedule(
    delay: float = 1.0, backoff: float = 2.0, cap: float = 60.0, jitter: float = 0.0
) -> Step:
    return Step(
        "x",
        work,
        retry_delay=delay,
        retry_backoff=backoff,
        retry_max_delay=cap,
        retry_jitter=jitter,
    )


@pytest.mark.parametrize(
    ("step", "attempt", "draw", "expected"),
    [
        # exponential growth from retry_delay, without jitter
        (schedule(), 1, 0.0, 1.0),
        (schedule(), 2, 0.0, 2.0),
        (schedule(), 3, 0.0, 4.0),
        (schedule(), 6, 0.0, 32.0),
        # the cap
        (schedule(), 7, 0.0, 60.0),
        (schedule(), 50, 0.0, 60.0),
        (schedule(delay=10.0, cap=5.0), 1, 0.0, 5.0),
        (schedule(cap=0.0), 3, 0.0, 0.0),
        # other delays and factors
        (schedule(delay=0.5, backoff=1.0), 5, 0.0, 0.5),
        (schedule(delay=0.25, backoff=3.0), 3, 0.0, 2.25),
        (schedule(delay=0.0), 5, 0.0, 0.0),
        # jitter 0 ignores the draw
        (schedule(jitter=0.0), 3, 0.5, 4.0),
        (schedule(jitter=0.0), 3, ALMOST_ONE, 4.0),
        # jitter 0.5: between half and all of the wait
        (schedule(jitter=0.5), 3, 0.0, 4.0),
        (schedule(jitter=0.5), 3, 0.5, 3.0),
        (schedule(jitter=0.5), 3, ALMOST_ONE, 2.0),
        (schedule(jitter=0.5), 7, 0.5, 45.0),
        # jitter 1: anywhere between (almost) zero and the full wait
        (schedule(jitter=1.0), 3, 0.0, 4.0),
        (schedule(jitter=1.0), 3, 0.5, 2.0),
        (schedule(jitter=1.0), 3, ALMOST_ONE, 4.0 * 2.0**-53),
        # huge attempt numbers: the cap applies, nothing overflows
        (schedule(), 10_000, 0.0, 60.0),
        (schedule(jitter=0.5), 10_000, 0.5, 45.0),
        (schedule(delay=1, backoff=3, cap=7), 10_000, 0.0, 7.0),
        (schedule(backoff=1.0), 10_000, 0.0, 1.0),
        # retry_delay 0 means no wait, however many attempts were made
        (schedule(delay=0.0), 10_000, 0.0, 0.0),
        (schedule(delay=0.0, backoff=2.0, cap=60.0, jitter=0.5), 2_000, 0.5, 0.0),
    ],
)
def test_retry_wait_table(step: Step, attempt: int, draw: float, expected: float) -> None:
    """min(delay * backoff**(attempt-1), cap) * (1 - jitter * draw)."""
    assert retry_wait(step, attempt, draw) == pytest.approx(expected, rel=1e-12, abs=0.0)


@settings(max_examples=200, deadline=None)
@given(
    step=st.builds(
        schedule,
        delay=st.floats(0.0, 1e6),
        backoff=st.one_of(st.just(1.0), st.floats(1.01, 100.0)),
        cap=st.floats(0.0, 1e6),
        jitter=st.floats(0.0, 1.0),
    ),
    draw=st.floats(0.0, ALMOST_ONE),
    attempts=st.lists(st.integers(1, 10_000), min_size=2, max_size=6),
)
def test_retry_wait_grows_to_the_cap_and_never_beyond(
    step: Step, draw: float, attempts: list[int]
) -> None:
    """For a fixed draw the wait never shrinks as attempts go on, and stays in [0, cap]."""
    waits = [retry_wait(step, attempt, draw) for attempt in sorted(attempts)]
    assert waits == sorted(waits)
    for wait in waits:
        assert 0.0 <= wait <= step.retry_max_delay


# --- retries at run time -----------------------------------------------------------------


async def test_step_failing_twice_then_succeeding_is_recorded_once() -> None:
    """Attempts 1, 2, 3 see their number; only the third's output and cost are recorded."""
    seen: list[tuple[int, int]] = []

    async def flaky(ctx: Mapping[str, Any]) -> PatternResult[str]:
        step = current_step()
        seen.append((step.attempt, step.max_attempts))
        await asyncio.sleep(0)
        if step.attempt < 3:
            raise ValueError(f"attempt {step.attempt}")
        return PatternResult("ok", cost=TokenUsage(5, 2, 1))

    def after(ctx: Mapping[str, Any]) -> str:
        return f"{ctx['flaky']}!"

    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [
            Step("flaky", flaky, retries=2, retry_delay=0),
            Step("after", after, depends_on=("flaky",)),
        ]
    )
    result = await run_bounded(workflow, checkpoint_fn=checkpoints.append)

    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert dict(result.outputs) == {"flaky": "ok", "after": "ok!"}
    assert result.executed == ("flaky", "after")
    assert result.cost == TokenUsage(5, 2, 1)
    assert [dict(cp.outputs) for cp in checkpoints] == [
        {"flaky": "ok"},
        {"flaky": "ok", "after": "ok!"},
    ]
    assert [dict(cp.errors) for cp in checkpoints] == [{}, {}]
    assert [cp.cost for cp in checkpoints] == [TokenUsage(5, 2, 1)] * 2


async def test_sync_step_is_retried_too() -> None:
    calls: list[int] = []

    def flaky(ctx: Mapping[str, Any]) -> int:
        calls.append(current_step().attempt)
        if len(calls) == 1:
            raise ConnectionError("reset")
        return len(calls)

    result = await run_bounded(Workflow([Step("flaky", flaky, retries=1, retry_delay=0)]))
    assert calls == [1, 2]
    assert dict(result.outputs) == {"flaky": 2}


async def test_exhausted_retries_fail_with_the_last_attempts_exception() -> None:
    raised: list[ValueError] = []

    async def always(ctx: Mapping[str, Any]) -> str:
        error = ValueError(f"attempt {current_step().attempt}")
        raised.append(error)
        raise error

    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("always", always, retries=1, retry_delay=0)])
    failure = await run_failing(workflow, checkpoint_fn=checkpoints.append)

    assert [str(error) for error in raised] == ["attempt 1", "attempt 2"]
    assert failure.errors == {"always": raised[-1]}
    assert failure.errors["always"] is raised[-1]
    assert failure.__cause__ is raised[-1]
    assert str(failure) == (
        "workflow failed: step 'always' raised ValueError: attempt 2. The checkpoint "
        "(.checkpoint, seq=1) records no completed step; resume from it to run only "
        "what is left"
    )
    assert len(checkpoints) == 1
    assert dict(checkpoints[0].errors) == {"always": "ValueError: attempt 2"}


@pytest.mark.parametrize(
    ("retry_on", "error", "calls"),
    [
        pytest.param((ValueError,), TypeError, 1, id="TypeError vs (ValueError,)"),
        pytest.param(ValueError, KeyError, 1, id="KeyError vs ValueError"),
        pytest.param((), ValueError, 1, id="empty retry_on never retries"),
        pytest.param((KeyError, OSError), RuntimeError, 1, id="RuntimeError vs two types"),
        pytest.param((LookupError,), KeyError, 3, id="subclass matches"),
        pytest.param((ValueError, OSError), ConnectionError, 3, id="second type matches"),
        pytest.param((Exception,), RuntimeError, 3, id="default-like"),
    ],
)
async def test_only_exceptions_matching_retry_on_are_retried(
    retry_on: type[Exception] | tuple[type[Exception], ...],
    error: type[Exception],
    calls: int,
) -> None:
    raised: list[Exception] = []

    async def failing(ctx: Mapping[str, Any]) -> str:
        raised.append(error(f"call {len(raised) + 1}"))
        raise raised[-1]

    workflow = Workflow([Step("s", failing, retries=2, retry_on=retry_on, retry_delay=0)])
    failure = await run_failing(workflow)
    assert len(raised) == calls
    assert failure.errors["s"] is raised[-1]


async def test_a_non_matching_exception_on_a_retry_stops_the_retries() -> None:
    attempts: list[int] = []

    async def changing(ctx: Mapping[str, Any]) -> str:
        attempts.append(current_step().attempt)
        if len(attempts) == 1:
            raise ValueError("transient")
        raise TypeError("a bug")

    workflow = Workflow([Step("s", changing, retries=5, retry_on=ValueError, retry_delay=0)])
    failure = await run_failing(workflow)
    assert attempts == [1, 2]
    assert isinstance(failure.errors["s"], TypeError)
    assert str(failure.errors["s"]) == "a bug"


async def test_the_runner_waits_retry_wait_between_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One wait per failed attempt except the last, computed from the step and a fresh draw."""
    waits: list[tuple[int, float, float]] = []

    def recording_wait(step: Step, attempt: int, draw: float) -> float:
        waits.append((attempt, draw, retry_wait(step, attempt, draw)))
        return 0.0  # the computed wait is recorded; the test does not sit through it

    monkeypatch.setattr(_attempt, "retry_wait", recording_wait)
    monkeypatch.setattr(_attempt, "_jitter_draw", lambda: 0.5)

    async def always(ctx: Mapping[str, Any]) -> str:
        raise OSError("unavailable")

    step = Step("s", always, retries=3, retry_delay=2.0, retry_backoff=3.0, retry_jitter=0.5)
    await run_failing(Workflow([step]))
    assert waits == [(1, 0.5, 1.5), (2, 0.5, 4.5), (3, 0.5, 13.5)]


async def test_no_wait_when_the_failure_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[int] = []

    def recording_wait(step: Step, attempt: int, draw: float) -> float:
        waits.append(attempt)
        return 0.0

    monkeypatch.setattr(_attempt, "retry_wait", recording_wait)

    async def failing(ctx: Mapping[str, Any]) -> str:
        raise TypeError("not retryable")

    await run_failing(Workflow([Step("s", failing, retries=3, retry_on=ValueError)]))
    assert waits == []


async def test_a_retrying_step_does_not_block_its_siblings() -> None:
    """The sibling finishes while the retrying step is between attempts, in the same batch."""
    log: list[str] = []
    first_failed = asyncio.Event()
    sibling_done = asyncio.Event()

    async def retrying(ctx: Mapping[str, Any]) -> str:
        attempt = current_step().attempt
        if attempt == 1:
            log.append("retrying: attempt 1 failed")
            first_failed.set()
            raise ConnectionError("try again")
        await sibling_done.wait()  # would deadlock if the sibling waited for the retries
        log.append(f"retrying: attempt {attempt} succeeded")
        return "retried"

    async def sibling(ctx: Mapping[str, Any]) -> str:
        await first_failed.wait()
        log.append("sibling: done")
        sibling_done.set()
        return "sibling"

    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [Step("retrying", retrying, retries=2, retry_delay=0), Step("sibling", sibling)]
    )
    result = await run_bounded(workflow, checkpoint_fn=checkpoints.append)
    assert log == ["retrying: attempt 1 failed", "sibling: done", "retrying: attempt 2 succeeded"]
    assert dict(result.outputs) == {"retrying": "retried", "sibling": "sibling"}
    assert len(checkpoints) == 1  # one batch
    assert dict(checkpoints[0].errors) == {}


# --- timeouts ----------------------------------------------------------------------------


async def test_a_timed_out_attempt_fails_the_step_with_timeout_error() -> None:
    never = asyncio.Event()
    cancelled: list[str] = []

    async def stuck(ctx: Mapping[str, Any]) -> str:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append("stuck")
            raise
        return "unreachable"

    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("stuck", stuck, timeout=TICK), Step("other", work)])
    failure = await run_failing(workflow, checkpoint_fn=checkpoints.append)

    assert cancelled == ["stuck"]
    assert list(failure.errors) == ["stuck"]
    assert type(failure.errors["stuck"]) is TimeoutError
    assert dict(failure.checkpoint.errors) == {
        "stuck": "TimeoutError: step 'stuck' attempt 1 timed out after 0.01 s"
    }
    assert dict(failure.checkpoint.outputs) == {"other": "done"}  # the sibling was recorded
    assert failure.checkpoint is checkpoints[-1]


async def test_timed_out_attempts_are_retried_when_timeout_error_matches() -> None:
    never = asyncio.Event()
    attempts: list[int] = []

    async def stuck(ctx: Mapping[str, Any]) -> str:
        attempts.append(current_step().attempt)
        await never.wait()
        return "unreachable"

    step = Step("stuck", stuck, timeout=TICK, retries=2, retry_on=(TimeoutError,), retry_delay=0)
    failure = await run_failing(Workflow([step]))
    assert attempts == [1, 2, 3]
    assert type(failure.errors["stuck"]) is TimeoutError


async def test_timed_out_attempts_are_not_retried_when_timeout_error_does_not_match() -> None:
    never = asyncio.Event()
    attempts: list[int] = []

    async def stuck(ctx: Mapping[str, Any]) -> str:
        attempts.append(current_step().attempt)
        await never.wait()
        return "unreachable"

    step = Step("stuck", stuck, timeout=TICK, retries=2, retry_on=(ValueError,), retry_delay=0)
    failure = await run_failing(Workflow([step]))
    assert attempts == [1]
    assert type(failure.errors["stuck"]) is TimeoutError


async def test_a_step_that_times_out_once_can_succeed_on_the_retry() -> None:
    """The first attempt's cancellation handler opens the gate the second attempt needs."""
    gate = asyncio.Event()

    async def gated(ctx: Mapping[str, Any]) -> int:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            gate.set()
            raise
        return current_step().attempt

    checkpoints: list[WorkflowCheckpoint] = []
    step = Step("gated", gated, timeout=TICK, retries=1, retry_on=TimeoutError, retry_delay=0)
    result = await run_bounded(Workflow([step]), checkpoint_fn=checkpoints.append)
    assert dict(result.outputs) == {"gated": 2}
    assert [dict(cp.errors) for cp in checkpoints] == [{}]


async def test_the_timeout_applies_to_each_attempt_not_to_the_whole_step() -> None:
    """Attempt 2 starts after the first timeout already expired, and still gets its own."""
    never = asyncio.Event()
    yields_done: list[int] = []

    async def slow_then_quick(ctx: Mapping[str, Any]) -> str:
        if current_step().attempt == 1:
            await never.wait()
        # With one deadline for the whole step, the first of these yields would time out.
        for count in range(1, 4):
            await asyncio.sleep(0)
            yields_done.append(count)
        return "second attempt"

    step = Step("s", slow_then_quick, timeout=TICK, retries=1, retry_delay=0)
    result = await run_bounded(Workflow([step]))
    assert dict(result.outputs) == {"s": "second attempt"}
    assert yields_done == [1, 2, 3]
