"""Events: what ``run(..., on_event=...)`` reports, in which order, and that listeners never hurt.

Each scenario pins the exact sequence of event types and fields (durations only checked
to be non-negative): batch and eager schedules, retries, failures, resume with
invalidation, checkpoints, the budget and cancellation. Async callbacks see the same
events, all of them before ``run()`` returns; a callback that raises changes nothing
about the run and is reported once at WARNING on the ``executionkit`` logger; with that
logger at DEBUG every event is logged; the library adds no handlers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    BudgetExceeded,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    WorkflowResult,
)
from executionkit import events as ev

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from executionkit.events import EventCallback

RUN_ID = "events-run"
A_COST = TokenUsage(10, 5, 1)
B_COST = TokenUsage(3, 4, 1)
WARNING_TEXT = (
    "executionkit: the on_event callback raised on RunStarted; the run goes on "
    "(later failures of this callback are logged at debug level)"
)


# Fields added with the cost ledger and tracing: left out of a summary while they hold
# their default (no trace, no parent, nothing wasted); tests of their own check them.
LATER_FIELDS = {
    ("RunStarted", "trace"): None,
    ("RunStarted", "parent"): None,
    ("StepRetried", "usage"): TokenUsage(),
    ("StepFailed", "usage"): TokenUsage(),
    ("ItemFailed", "usage"): TokenUsage(),
    ("RunFailed", "cost"): TokenUsage(),
    # The run's bill in dollars, with run(prices=...) only (tested in test_dollars_in_events).
    **{
        (kind, "dollars"): None
        for kind in (
            "StepRetried",
            "StepFinished",
            "StepFailed",
            "ItemFinished",
            "ItemFailed",
            "CheckpointTaken",
            "RunFinished",
            "RunSuspended",
            "RunFailed",
        )
    },
}


def summary(events: list[ev.Event], run_id: str = RUN_ID) -> list[tuple[object, ...]]:
    """Each event as ``(type name, *fields)``: no run_id, no wall-clock time, errors as text."""
    rows: list[tuple[object, ...]] = []
    for event in events:
        assert event.run_id == run_id
        row: list[object] = [type(event).__name__]
        for field in dataclasses.fields(event):
            value = getattr(event, field.name)
            if field.name == "run_id":
                continue
            later = (type(event).__name__, field.name)
            if later in LATER_FIELDS and value == LATER_FIELDS[later]:
                continue
            # Wall-clock seconds: a step's, or those a resume's recorded attempts ran
            # (exact under a virtual clock in test_attempt_times).
            if field.name in {"duration", "ran_before"}:
                assert isinstance(value, float)
                assert value >= 0
                continue
            if isinstance(value, BaseException):
                value = f"{type(value).__name__}: {value}"
            elif isinstance(value, Mapping):
                value = dict(value)
            row.append(value)
        rows.append(tuple(row))
    return rows


def plain_a(ctx: Mapping[str, Any]) -> PatternResult[str]:
    return PatternResult("A", cost=A_COST)


async def async_b(ctx: Mapping[str, Any]) -> PatternResult[str]:
    await asyncio.sleep(0)
    return PatternResult("B", cost=B_COST)


async def async_c(ctx: Mapping[str, Any]) -> str:
    await asyncio.sleep(0)
    return "C"


def plain_d(ctx: Mapping[str, Any]) -> str:
    return f"{ctx['a']}{ctx['b']}{ctx['c']}"


def small_workflow() -> Workflow:
    """Batch 1: a (plain, inline), b and c (async); batch 2: d needs all three."""
    return Workflow(
        [
            Step("a", plain_a, inline=True),
            Step("b", async_b),
            Step("c", async_c),
            Step("d", plain_d, depends_on=("a", "b", "c"), inline=True),
        ]
    )


SMALL_BATCH_EVENTS: list[tuple[object, ...]] = [
    ("RunStarted", 4, (), False, TokenUsage()),
    ("StepStarted", "a", 1),
    ("StepFinished", "a", A_COST),
    ("StepStarted", "b", 1),
    ("StepStarted", "c", 1),
    ("StepFinished", "b", B_COST),
    ("StepFinished", "c", TokenUsage()),
    ("CheckpointTaken", 1, 3, ("a", "b", "c")),
    ("StepStarted", "d", 1),
    ("StepFinished", "d", TokenUsage()),
    ("CheckpointTaken", 2, 4, ("d",)),
    ("RunFinished", A_COST + B_COST, 4),
]


async def test_batch_run_reports_every_step_and_checkpoint_in_order() -> None:
    events: list[ev.Event] = []
    checkpoints: list[WorkflowCheckpoint] = []
    result = await small_workflow().run(
        checkpoint_fn=checkpoints.append, run_id=RUN_ID, on_event=events.append
    )
    assert summary(events) == SMALL_BATCH_EVENTS
    assert result.outputs["d"] == "ABC"
    assert [cp.seq for cp in checkpoints] == [1, 2]


async def test_eager_run_records_a_step_while_an_earlier_one_still_runs() -> None:
    """``after`` needs only ``fast``; ``slow`` is released once ``after`` is checkpointed."""
    gate = asyncio.Event()

    def fast(ctx: Mapping[str, Any]) -> str:
        return "f"

    async def slow(ctx: Mapping[str, Any]) -> str:
        await gate.wait()
        return "s"

    async def after(ctx: Mapping[str, Any]) -> str:
        return f"{ctx['fast']}!"

    def save(checkpoint: WorkflowCheckpoint) -> None:
        if "after" in checkpoint.outputs:
            gate.set()

    events: list[ev.Event] = []
    workflow = Workflow(
        [Step("fast", fast, inline=True), Step("slow", slow), Step("after", after, ("fast",))]
    )
    await workflow.run(checkpoint_fn=save, run_id=RUN_ID, schedule="eager", on_event=events.append)
    assert summary(events) == [
        ("RunStarted", 3, (), False, TokenUsage()),
        ("StepStarted", "fast", 1),
        ("StepFinished", "fast", TokenUsage()),
        # A plain step is handed to checkpoint_fn before anything else starts.
        ("CheckpointTaken", 1, 1, ("fast",)),
        ("StepStarted", "slow", 1),
        ("StepStarted", "after", 1),
        ("StepFinished", "after", TokenUsage()),
        ("CheckpointTaken", 2, 2, ("after",)),
        ("StepFinished", "slow", TokenUsage()),
        ("CheckpointTaken", 3, 3, ("slow",)),
        ("RunFinished", TokenUsage(), 3),
    ]


async def test_a_retried_step_reports_the_failed_attempt_then_starts_again() -> None:
    attempts: list[int] = []

    def flaky(ctx: Mapping[str, Any]) -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) < 3:
            msg = f"reset {len(attempts)}"
            raise ConnectionError(msg)
        return "ok"

    step = Step("flaky", flaky, retries=3, retry_delay=0.001, retry_backoff=1, retry_jitter=0)
    events: list[ev.Event] = []
    await Workflow([step]).run(run_id=RUN_ID, on_event=events.append)
    assert summary(events) == [
        ("RunStarted", 1, (), False, TokenUsage()),
        ("StepStarted", "flaky", 1),
        ("StepRetried", "flaky", 1, "ConnectionError: reset 1", 0.001, None),
        ("StepStarted", "flaky", 2),
        ("StepRetried", "flaky", 2, "ConnectionError: reset 2", 0.001, None),
        ("StepStarted", "flaky", 3),
        ("StepFinished", "flaky", TokenUsage()),
        ("RunFinished", TokenUsage(), 1),
    ]
    assert attempts == [1, 2, 3]


async def test_a_failed_step_is_reported_then_the_run_fails_with_the_raised_error() -> None:
    def bad(ctx: Mapping[str, Any]) -> str:
        msg = "boom"
        raise ValueError(msg)

    later_ran: list[str] = []

    def later(ctx: Mapping[str, Any]) -> str:
        later_ran.append("later")
        return "never"

    events: list[ev.Event] = []
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [Step("bad", bad, inline=True), Step("b", async_b), Step("later", later, ("b",))]
    )
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(checkpoint_fn=checkpoints.append, run_id=RUN_ID, on_event=events.append)
    failed = caught.value
    assert summary(events) == [
        ("RunStarted", 3, (), False, TokenUsage()),
        ("StepStarted", "bad", 1),
        ("StepFailed", "bad", "ValueError: boom"),
        ("StepStarted", "b", 1),
        ("StepFinished", "b", B_COST),
        ("CheckpointTaken", 1, 1, ("b",)),
        ("RunFailed", f"WorkflowFailed: {failed}", {}, B_COST),
    ]
    last = events[-1]
    assert isinstance(last, ev.RunFailed)
    assert last.error is failed
    step_failed = events[2]
    assert isinstance(step_failed, ev.StepFailed)
    assert step_failed.error is failed.errors["bad"]
    assert later_ran == []


async def test_resume_reports_recorded_restored_and_invalidated_steps() -> None:
    """After a version bump of ``b``, b and its dependent c run again; a and e are restored."""

    def make(version: str) -> Workflow:
        return Workflow(
            [
                Step("a", plain_a),
                Step("b", async_b, ("a",), version=version),
                Step("c", async_c, ("b",)),
                Step("e", plain_a),
            ]
        )

    checkpoints: list[WorkflowCheckpoint] = []
    await make("1").run(checkpoint_fn=checkpoints.append, run_id=RUN_ID)
    assert [cp.seq for cp in checkpoints] == [1, 2, 3]

    events: list[ev.Event] = []
    result = await make("2").run(
        checkpoint_fn=checkpoints.append, resume_from=checkpoints[-1], on_event=events.append
    )
    restored = A_COST + B_COST + A_COST  # usage of the first run stays counted
    assert summary(events) == [
        ("RunStarted", 4, ("a", "e"), True, restored),
        ("StepInvalidated", "b", "version changed from '1' to '2'"),
        ("StepInvalidated", "c", "depends on invalidated step 'b'"),
        ("StepRestored", "a"),
        ("StepRestored", "e"),
        ("StepStarted", "b", 1),
        ("StepFinished", "b", B_COST),
        ("CheckpointTaken", 4, 3, ("b",)),
        ("StepStarted", "c", 1),
        ("StepFinished", "c", TokenUsage()),
        ("CheckpointTaken", 5, 4, ("c",)),
        ("RunFinished", restored + B_COST, 2),
    ]
    assert result.executed == ("b", "c")


async def test_a_failed_resumed_run_reports_what_was_invalidated() -> None:
    def fails(ctx: Mapping[str, Any]) -> str:
        msg = "still broken"
        raise RuntimeError(msg)

    first = await Workflow([Step("a", plain_a)]).run(run_id=RUN_ID)
    checkpoint = WorkflowCheckpoint(
        step_index=1,
        outputs={"a": first.outputs["a"]},
        cost=first.cost,
        run_id=RUN_ID,
        seq=1,
        step_info={"a": {"version": None, "depends_on": ()}},
    )
    events: list[ev.Event] = []
    with pytest.raises(WorkflowFailed):
        await Workflow([Step("a", fails, version="2")]).run(
            resume_from=checkpoint, on_event=events.append
        )
    last = events[-1]
    assert isinstance(last, ev.RunFailed)
    assert dict(last.invalidated) == {"a": "version changed from no version to '2'"}


async def save_later(checkpoint: WorkflowCheckpoint) -> None:
    await asyncio.sleep(0)


@pytest.mark.parametrize("store", ["none", "sync", "async"])
async def test_checkpoint_events_follow_each_save_and_only_when_there_is_a_store(
    store: str,
) -> None:
    log: list[tuple[str, int]] = []
    saved: list[WorkflowCheckpoint] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        log.append(("saved", checkpoint.seq))
        saved.append(checkpoint)

    async def save_async(checkpoint: WorkflowCheckpoint) -> None:
        await asyncio.sleep(0)
        save(checkpoint)

    def listen(event: ev.Event) -> None:
        if isinstance(event, ev.CheckpointTaken):
            log.append(("event", event.seq))
            assert (event.seq, event.step_index, event.new_outputs) == (
                saved[-1].seq,
                saved[-1].step_index,
                saved[-1].new_outputs,
            )

    checkpoint_fn = {"none": None, "sync": save, "async": save_async}[store]
    await small_workflow().run(checkpoint_fn=checkpoint_fn, run_id=RUN_ID, on_event=listen)
    expected = [] if store == "none" else [("saved", 1), ("event", 1), ("saved", 2), ("event", 2)]
    assert log == expected


async def test_the_budget_stops_the_run_with_a_run_failed_event() -> None:
    ran: list[str] = []

    def second(ctx: Mapping[str, Any]) -> str:
        ran.append("second")
        return "never"

    events: list[ev.Event] = []
    workflow = Workflow([Step("a", plain_a), Step("second", second, ("a",))])
    with pytest.raises(BudgetExceeded) as caught:
        await workflow.run(
            checkpoint_fn=lambda cp: None,
            run_id=RUN_ID,
            budget=TokenUsage(llm_calls=1),
            on_event=events.append,
        )
    assert summary(events) == [
        ("RunStarted", 2, (), False, TokenUsage()),
        ("StepStarted", "a", 1),
        ("StepFinished", "a", A_COST),
        ("CheckpointTaken", 1, 1, ("a",)),
        ("RunFailed", f"BudgetExceeded: {caught.value}", {}, A_COST),
    ]
    last = events[-1]
    assert isinstance(last, ev.RunFailed)
    assert last.error is caught.value
    assert ran == []


async def record_async(log: list[ev.Event], event: ev.Event) -> None:
    await asyncio.sleep(0)
    log.append(event)


def listener(kind: str, log: list[ev.Event]) -> EventCallback:
    """A callback appending to ``log``: a plain function, a coroutine function, or a
    plain function that returns an awaitable."""
    if kind == "sync":
        return log.append

    async def coroutine_function(event: ev.Event) -> None:
        await record_async(log, event)

    def returns_awaitable(event: ev.Event) -> Awaitable[None]:
        return record_async(log, event)

    return coroutine_function if kind == "async" else returns_awaitable


CALLBACK_KINDS = ["sync", "async", "returns-awaitable"]


@pytest.mark.parametrize("kind", CALLBACK_KINDS)
async def test_a_cancelled_run_checkpoints_then_reports_the_cancellation(kind: str) -> None:
    started = asyncio.Event()

    def done(ctx: Mapping[str, Any]) -> str:
        return "d"

    async def hang(ctx: Mapping[str, Any]) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    events: list[ev.Event] = []
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("done", done, inline=True), Step("hang", hang)])
    task = asyncio.create_task(
        workflow.run(
            checkpoint_fn=checkpoints.append, run_id=RUN_ID, on_event=listener(kind, events)
        )
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert summary(events) == [
        ("RunStarted", 2, (), False, TokenUsage()),
        ("StepStarted", "done", 1),
        ("StepFinished", "done", TokenUsage()),
        ("StepStarted", "hang", 1),
        ("CheckpointTaken", 1, 1, ("done",)),
        ("RunFailed", "CancelledError: ", {}),
    ]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"done": "d"}]


@pytest.mark.parametrize("kind", CALLBACK_KINDS[1:])
async def test_async_callbacks_get_every_event_in_order_before_run_returns(kind: str) -> None:
    expected: list[ev.Event] = []
    await small_workflow().run(
        checkpoint_fn=lambda cp: None, run_id=RUN_ID, on_event=expected.append
    )
    events: list[ev.Event] = []
    tasks_before = asyncio.all_tasks()
    await small_workflow().run(
        checkpoint_fn=lambda cp: None, run_id=RUN_ID, on_event=listener(kind, events)
    )
    assert asyncio.all_tasks() == tasks_before
    assert summary(events) == summary(expected) == SMALL_BATCH_EVENTS


async def test_an_async_callback_is_never_run_concurrently_with_itself() -> None:
    """Each call is awaited to the end before the next event is handed over."""
    inside = 0
    overlaps: list[int] = []
    seen: list[str] = []

    async def slow_listener(event: ev.Event) -> None:
        nonlocal inside
        inside += 1
        overlaps.append(inside)
        for _ in range(3):
            await asyncio.sleep(0)
        seen.append(type(event).__name__)
        inside -= 1

    await small_workflow().run(run_id=RUN_ID, on_event=slow_listener)
    assert set(overlaps) == {1}
    assert seen[0] == "RunStarted"
    assert seen[-1] == "RunFinished"
    assert len(seen) == len(SMALL_BATCH_EVENTS) - 2  # no checkpoint_fn: no CheckpointTaken


def comparable(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    data = checkpoint.to_dict()
    del data["created_at"]
    # When each attempt ran differs between two runs; which attempts ended, and how, not.
    data["attempts"] = [entry[:4] for entry in data.get("attempts", ())]
    data["new_outputs"] = checkpoint.new_outputs
    return data


def result_fields(result: WorkflowResult) -> dict[str, Any]:
    fields = {field.name: getattr(result, field.name) for field in dataclasses.fields(result)}
    fields["outputs"] = dict(result.outputs)
    fields["invalidated"] = dict(result.invalidated)
    return fields


class ListenerError(Exception):
    pass


def broken_listener(kind: str) -> EventCallback:
    if kind == "sync":

        def raises(event: ev.Event) -> None:
            raise ListenerError(type(event).__name__)

        return raises

    async def raises_later(event: ev.Event) -> None:
        await asyncio.sleep(0)
        raise ListenerError(type(event).__name__)

    return raises_later


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_raising_callback_changes_nothing_and_is_reported_once(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="executionkit")
    quiet: list[WorkflowCheckpoint] = []
    expected = await small_workflow().run(checkpoint_fn=quiet.append, run_id=RUN_ID)
    caplog.clear()

    checkpoints: list[WorkflowCheckpoint] = []
    tasks_before = asyncio.all_tasks()
    result = await small_workflow().run(
        checkpoint_fn=checkpoints.append, run_id=RUN_ID, on_event=broken_listener(kind)
    )
    assert asyncio.all_tasks() == tasks_before
    assert result_fields(result) == result_fields(expected)
    assert [comparable(cp) for cp in checkpoints] == [comparable(cp) for cp in quiet]

    reports = [r for r in caplog.records if "on_event callback raised" in r.getMessage()]
    warning, *later = reports
    assert (warning.name, warning.levelno, warning.getMessage()) == (
        "executionkit",
        logging.WARNING,
        WARNING_TEXT,
    )
    assert warning.exc_info is not None
    assert isinstance(warning.exc_info[1], ListenerError)
    assert str(warning.exc_info[1]) == "RunStarted"
    assert warning.exc_text is not None
    assert "Traceback" in warning.exc_text
    assert "ListenerError: RunStarted" in warning.exc_text
    # Every later event failed too, each logged briefly at DEBUG, naming the event.
    names = [row[0] for row in SMALL_BATCH_EVENTS[1:]]
    assert [(r.levelno, r.getMessage()) for r in later] == [
        (logging.DEBUG, f"executionkit: the on_event callback raised on {name}") for name in names
    ]
    assert all(r.exc_info is not None and isinstance(r.exc_info[1], ListenerError) for r in later)


async def test_without_a_callback_debug_logging_shows_every_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="executionkit")
    await small_workflow().run(checkpoint_fn=lambda cp: None, run_id=RUN_ID)
    records = [r for r in caplog.records if r.name == "executionkit"]
    assert {r.levelno for r in records} == {logging.DEBUG}
    logged: list[ev.Event] = []
    for record in records:
        assert isinstance(record.args, tuple)
        (event,) = record.args
        assert isinstance(event, ev.Event)
        logged.append(event)
    assert summary(logged) == SMALL_BATCH_EVENTS
    assert [r.getMessage() for r in records] == [str(event) for event in logged]


async def test_the_library_logs_nothing_by_default_and_adds_no_handlers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import executionkit.progress  # noqa: F401, PLC0415 - importing it adds no handler either

    caplog.set_level(logging.INFO)
    await small_workflow().run(checkpoint_fn=lambda cp: None, run_id=RUN_ID)
    assert [r for r in caplog.records if r.name.startswith("executionkit")] == []
    logger = logging.getLogger("executionkit")
    assert logger.handlers == []
    assert logger.propagate


EVENT_SAMPLES: list[ev.Event] = [
    ev.Event(RUN_ID),
    ev.RunStarted(RUN_ID, 1, (), resumed=False, cost=TokenUsage()),
    ev.StepRestored(RUN_ID, "a"),
    ev.StepInvalidated(RUN_ID, "a", "rerun requested"),
    ev.CodeChanged(RUN_ID, "a", "0123456789abcdef", "fedcba9876543210"),
    ev.StepSkipped(RUN_ID, "a", "condition is_long returned False"),
    ev.StepStarted(RUN_ID, "a", 1),
    ev.StepRetried(RUN_ID, "a", 1, ValueError("x"), 0.5),
    ev.StepStreamed(RUN_ID, "a", 1, "tokens"),
    ev.StepFinished(RUN_ID, "a", 0.1, TokenUsage()),
    ev.StepFailed(RUN_ID, "a", 0.1, ValueError("x")),
    ev.MapStarted(RUN_ID, "m", 3, 1),
    ev.ItemStarted(RUN_ID, "m", "0", 1),
    ev.ItemFinished(RUN_ID, "m", "0", 0.1, TokenUsage(), 2),
    ev.ItemFailed(RUN_ID, "m", "1", 0.1, ValueError("x")),
    ev.QuestionAsked(RUN_ID, "approve", {"plan": 1}, None),
    ev.QuestionAnswered(RUN_ID, "approve"),
    ev.RunSuspended(RUN_ID, 0.2, TokenUsage(), ("approve",)),
    ev.CheckpointTaken(RUN_ID, 1, 1, ("a",)),
    ev.RunFinished(RUN_ID, 0.2, TokenUsage(), 1),
    ev.RunFailed(RUN_ID, 0.2, ValueError("x"), {}),
    ev.WaitingForLimit(RUN_ID, "a", "openai", 1.5),
]


def test_every_event_class_has_a_sample() -> None:
    exported = {
        getattr(ev, name)
        for name in ev.__all__
        if isinstance(getattr(ev, name), type) and issubclass(getattr(ev, name), ev.Event)
    }
    assert {type(event) for event in EVENT_SAMPLES} == exported


@pytest.mark.parametrize("event", EVENT_SAMPLES, ids=lambda event: type(event).__name__)
def test_events_are_frozen(event: ev.Event) -> None:
    for field in dataclasses.fields(event):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(event, field.name, "changed")
    assert event.run_id == RUN_ID


def test_run_rejects_a_callback_that_is_not_callable() -> None:
    bad: Any = "print"
    with pytest.raises(
        RunArgumentError,
        match=re.escape("on_event must be callable, a list of callables, or None, got str"),
    ):
        small_workflow().run_sync(on_event=bad)


def test_dollars_in_events() -> None:
    """With prices, the events that end attempts and the run carry the bill so far."""
    from decimal import Decimal  # noqa: PLC0415 - only this test needs it

    from executionkit import Price, Prices, current_step  # noqa: PLC0415

    def model(ctx: Mapping[str, Any]) -> str:
        step = current_step()
        step.add_usage(TokenUsage(1_000_000, 0, 1), model="large")
        if step.name == "b" and step.attempt == 1:
            raise RuntimeError("again")
        return "ok"

    events: list[ev.Event] = []
    prices = Prices({"large": Price(input_per_million="2.00", output_per_million="0")})
    workflow = Workflow(
        [Step("a", model), Step("b", model, depends_on=("a",), retries=1, retry_delay=0)]
    )
    workflow.run_sync(prices=prices, on_event=events.append, checkpoint_fn=lambda cp: None)
    bills = [
        (type(e).__name__, getattr(e, "step", None), e.dollars)  # type: ignore[attr-defined]
        for e in events
        if getattr(e, "dollars", None) is not None
    ]
    assert bills == [
        ("StepFinished", "a", Decimal("2.00")),
        ("CheckpointTaken", None, Decimal("2.00")),
        ("StepRetried", "b", Decimal("4.00")),
        ("CheckpointTaken", None, Decimal("4.00")),  # the failed attempt's usage, saved
        ("StepFinished", "b", Decimal("6.00")),
        ("CheckpointTaken", None, Decimal("6.00")),
        ("RunFinished", None, Decimal("6.00")),
    ]
    plain: list[ev.Event] = []
    workflow.run_sync(on_event=plain.append)
    assert all(getattr(e, "dollars", None) is None for e in plain)
