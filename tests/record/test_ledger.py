"""The cost ledger: every attempt's usage counted, whatever its ending (issue 21).

Usage reported with ``current_step().add_usage`` and ``PatternResult.cost`` of
failed, timed-out, cancelled and successful attempts reaches the run's
``cost``, budgets, every checkpoint and a resume; processes bring it back with
their result or exception; attempts running at a checkpoint count as unknown.
"""

from __future__ import annotations

import asyncio
import io
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    BudgetExceeded,
    CheckpointFormatError,
    LedgerEntry,
    PatternResult,
    RunArgumentError,
    Spending,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit import events as ev
from executionkit._cli import main as cli_main
from executionkit.progress import ConsoleProgress

if TYPE_CHECKING:
    from collections.abc import Iterator

CALL = TokenUsage(10, 2, 1)
ZERO = TokenUsage()


def roundtrip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def rows(checkpoint_or_spending: WorkflowCheckpoint | Spending) -> list[tuple[Any, ...]]:
    entries = (
        checkpoint_or_spending.ledger
        if isinstance(checkpoint_or_spending, WorkflowCheckpoint)
        else checkpoint_or_spending.entries
    )
    return [(r.step, r.item, r.attempt, r.outcome, r.model, r.usage) for r in entries]


# --- every ending counts ----------------------------------------------------------------------


def flaky_sync(ctx: Any) -> Any:
    step = current_step()
    step.add_usage(CALL, model="parse-model")
    if step.attempt < 3:
        msg = f"unparseable answer on attempt {step.attempt}"
        raise ValueError(msg)
    return PatternResult("parsed", cost=TokenUsage(1, 1, 1))


async def flaky_async(ctx: Any) -> Any:
    return flaky_sync(ctx)


@pytest.mark.parametrize("run", [flaky_sync, flaky_async], ids=["plain", "async"])
async def test_failed_attempts_are_counted_as_wasted_and_the_success_as_spent(run: Any) -> None:
    events: list[ev.Event] = []
    checkpoints: list[WorkflowCheckpoint] = []
    result = await Workflow([Step("parse", run, retries=2, retry_delay=0)]).run(
        checkpoint_fn=checkpoints.append, on_event=events.append
    )
    # Three calls to the model plus the result's own: all billed, all counted.
    assert result.cost == TokenUsage(31, 7, 4)
    assert rows(result.spending) == [
        ("parse", None, 1, "failed", "parse-model", CALL),
        ("parse", None, 2, "failed", "parse-model", CALL),
        ("parse", None, 3, "ok", "parse-model", CALL),
        ("parse", None, 3, "ok", None, TokenUsage(1, 1, 1)),
    ]
    assert result.spending.wasted == TokenUsage(20, 4, 2)
    assert result.spending.spent == TokenUsage(11, 3, 2)
    assert result.spending.this_call == result.cost
    assert result.spending.by_model()["parse-model"].total == TokenUsage(30, 6, 3)
    # The waste was saved before each retry, so a crash meanwhile loses none of it.
    assert [len(cp.new_ledger) for cp in checkpoints] == [1, 1, 2]
    assert checkpoints[-1].cost == result.cost
    assert roundtrip(checkpoints[-1]).ledger == checkpoints[-1].ledger
    retried = [e for e in events if isinstance(e, ev.StepRetried)]
    assert [e.usage for e in retried] == [CALL, CALL]
    finished = [e for e in events if isinstance(e, ev.StepFinished)]
    assert [e.cost for e in finished] == [TokenUsage(11, 3, 2)]


async def test_a_step_that_fails_for_good_still_counts_every_attempt() -> None:
    events: list[ev.Event] = []

    def broken(ctx: Any) -> Any:
        current_step().add_usage(CALL)
        raise RuntimeError("model refused")

    with pytest.raises(WorkflowFailed) as caught:
        await Workflow([Step("ask", broken, retries=1, retry_delay=0)]).run(on_event=events.append)
    checkpoint = caught.value.checkpoint
    assert checkpoint.cost == CALL + CALL
    assert [r.outcome for r in checkpoint.ledger] == ["failed", "failed"]
    assert checkpoint.spending.wasted == CALL + CALL
    failed = [e for e in events if isinstance(e, ev.StepFailed)]
    assert [e.usage for e in failed] == [CALL]
    run_failed = [e for e in events if isinstance(e, ev.RunFailed)]
    assert run_failed[0].cost == CALL + CALL


async def test_a_timed_out_attempt_is_counted_as_timeout() -> None:
    never = asyncio.Event()

    async def slow_then_fast(ctx: Any) -> str:
        step = current_step()
        step.add_usage(CALL)
        if step.attempt == 1:
            await never.wait()  # the timeout ends it
        return "done"

    step = Step("s", slow_then_fast, retries=1, timeout=0.05, retry_delay=0)
    result = await Workflow([step]).run()
    assert [(r.attempt, r.outcome) for r in result.spending.entries] == [
        (1, "timeout"),
        (2, "ok"),
    ]
    assert result.cost == CALL + CALL


@pytest.mark.parametrize("kind", ["plain-retrying", "async", "async-retrying"])
async def test_a_cancelled_attempt_is_counted_and_saved(kind: str) -> None:
    started = asyncio.Event()
    never = asyncio.Event()
    checkpoints: list[WorkflowCheckpoint] = []

    async def waits(ctx: Any) -> str:
        current_step().add_usage(CALL, model="m")
        started.set()
        await never.wait()
        return "never"

    retries = 0 if kind == "async" else 2
    workflow = Workflow([Step("slow", waits, retries=retries, retry_delay=0)])
    task = asyncio.create_task(workflow.run(checkpoint_fn=checkpoints.append))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    last = checkpoints[-1]
    assert rows(last) == [("slow", None, 1, "cancelled", "m", CALL)]
    assert last.cost == CALL
    assert last.in_flight == ()  # nothing runs once a run has returned


async def test_failed_map_items_are_counted_per_item() -> None:
    async def item(value: int, ctx: Any) -> int:
        current_step().add_usage(TokenUsage(value, 1, 1), model="m")
        if value == 2:
            raise ValueError("bad item")
        return value

    workflow = Workflow([Step.map("each", item, over="values")])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"values": [1, 2, 3]})
    checkpoint = caught.value.checkpoint
    by_item = checkpoint.spending.by_item("each")
    assert {key: (s.spent, s.wasted) for key, s in by_item.items()} == {
        "0": (TokenUsage(1, 1, 1), ZERO),
        "1": (ZERO, TokenUsage(2, 1, 1)),
        "2": (TokenUsage(3, 1, 1), ZERO),
    }
    assert checkpoint.cost == TokenUsage(6, 3, 3)
    # The resume runs only the failed item; the usage restored stays, the new adds up.
    result = await workflow.run({"values": [1, 5, 3]}, resume_from=roundtrip(checkpoint))
    assert result.cost == TokenUsage(11, 4, 4)
    assert result.spending.restored == TokenUsage(6, 3, 3)
    assert result.spending.this_call == TokenUsage(5, 1, 1)


async def test_usage_reported_from_a_thread_counts() -> None:
    def in_thread(ctx: Any) -> str:
        current_step().add_usage(CALL, model="t")
        if current_step().attempt == 1:
            raise ValueError("retry me")
        return "ok"

    with ThreadPoolExecutor(2) as pool:
        workflow = Workflow([Step("t", in_thread, retries=1, retry_delay=0)])
        result = await workflow.run(executor=pool)
    assert [(r.attempt, r.outcome, r.model) for r in result.spending.entries] == [
        (1, "failed", "t"),
        (2, "ok", "t"),
    ]


# --- processes: usage travels back with the result or the exception -----------------------


def spend_in_process(ctx: Any) -> int:
    step = current_step()
    step.add_usage(TokenUsage(7, 1, 1), model="remote")
    if step.attempt == 1:
        msg = "first attempt fails in the worker"
        raise ValueError(msg)
    return step.attempt


def spend_item_in_process(item: int, ctx: Any) -> int:
    current_step().add_usage(TokenUsage(item, 0, 1))
    return item * 2


@pytest.fixture(scope="module")
def process_pool() -> Iterator[ProcessPoolExecutor]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        yield pool


async def test_usage_in_another_process_comes_back_with_result_and_exception(
    process_pool: ProcessPoolExecutor,
) -> None:
    workflow = Workflow(
        [
            Step("remote", spend_in_process, retries=1, retry_delay=0),
            Step.map("items", spend_item_in_process, over="xs"),
        ]
    )
    result = await workflow.run({"xs": [3, 4]}, executor=process_pool)
    assert result.outputs == {"remote": 2, "items": [6, 8]}
    assert sorted(rows(result.spending), key=str) == sorted(
        [
            ("remote", None, 1, "failed", "remote", TokenUsage(7, 1, 1)),
            ("remote", None, 2, "ok", "remote", TokenUsage(7, 1, 1)),
            ("items", "0", 1, "ok", None, TokenUsage(3, 0, 1)),
            ("items", "1", 1, "ok", None, TokenUsage(4, 0, 1)),
        ],
        key=str,
    )
    assert result.cost == TokenUsage(21, 2, 4)


# --- budgets stop the next attempt ------------------------------------------------------------


async def test_a_budget_stops_the_next_attempt_not_only_the_next_step() -> None:
    attempts: list[int] = []

    def always_fails(ctx: Any) -> Any:
        attempts.append(current_step().attempt)
        current_step().add_usage(CALL)
        raise ValueError("still unparseable")

    workflow = Workflow([Step("loop", always_fails, retries=10, retry_delay=0)])
    with pytest.raises(BudgetExceeded) as caught:
        await workflow.run(budget=TokenUsage(llm_calls=2))
    assert attempts == [1, 2]
    assert caught.value.checkpoint.cost == CALL + CALL
    assert [r.outcome for r in caught.value.checkpoint.ledger] == ["failed", "failed"]


# --- sub-workflows, late usage, unknown attempts ---------------------------------------------


async def test_a_sub_workflows_rows_appear_under_its_path_and_count_once() -> None:
    def draft(ctx: Any) -> str:
        current_step().add_usage(CALL, model="writer")
        if current_step().attempt == 1:
            raise ValueError("draft too short")
        return "draft"

    inner = Workflow([Step("draft", draft, retries=1, retry_delay=0)])
    outer = Workflow([Step("research", inner)])
    result = await outer.run()
    assert rows(result.spending) == [
        ("research/draft", None, 1, "failed", "writer", CALL),
        ("research/draft", None, 2, "ok", "writer", CALL),
    ]
    assert result.cost == CALL + CALL
    assert set(result.spending.by_step()) == {"research/draft"}


async def test_an_attempt_running_at_a_checkpoint_is_unknown_on_resume() -> None:
    entered = asyncio.Event()
    never = asyncio.Event()
    saved: list[WorkflowCheckpoint] = []

    async def long_call(ctx: Any) -> str:
        entered.set()
        await never.wait()
        return "never"

    async def quick(ctx: Any) -> str:
        await entered.wait()
        current_step().add_usage(CALL)
        return "quick"

    first_saved = asyncio.Event()

    def save(checkpoint: WorkflowCheckpoint) -> None:
        saved.append(checkpoint)
        first_saved.set()

    workflow = Workflow([Step("long", long_call), Step("quick", quick)])
    task = asyncio.create_task(workflow.run(checkpoint_fn=save, schedule="eager"))
    await first_saved.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # What a kill -9 leaves: the checkpoint taken while 'long' ran.
    killed_at = saved[0]
    assert killed_at.in_flight == (("long", None, 1),)
    assert roundtrip(killed_at).in_flight == killed_at.in_flight

    async def long_done(ctx: Any) -> str:
        return "done"

    resumed = await Workflow([Step("long", long_done), Step("quick", quick)]).run(
        resume_from=roundtrip(killed_at)
    )
    assert rows(resumed.spending) == [
        ("quick", None, 1, "ok", None, CALL),
        ("long", None, 1, "unknown", None, ZERO),
    ]
    assert resumed.spending.unknown == 1


async def test_usage_reported_after_its_attempt_ended_counts_as_late() -> None:
    holder: list[Any] = []

    def keeps_context(ctx: Any) -> str:
        holder.append(current_step())
        return "ok"

    def reports_late(ctx: Any) -> str:
        holder[0].add_usage(CALL)  # the first step's attempt ended long ago
        return "ok"

    result = await Workflow(
        [Step("first", keeps_context), Step("second", reports_late, ("first",))]
    ).run()
    assert rows(result.spending) == [("first", None, 1, "late", None, CALL)]
    assert result.cost == CALL
    assert result.spending.wasted == CALL


def test_add_usage_refuses_what_is_not_usage() -> None:
    def bad(ctx: Any) -> str:
        current_step().add_usage({"input_tokens": 3})  # type: ignore[arg-type]
        return "x"

    with pytest.raises(WorkflowFailed) as caught:
        Workflow([Step("bad", bad)]).run_sync()
    assert "step 'bad': add_usage() takes a TokenUsage, got dict" in str(caught.value.__cause__)

    def bad_model(ctx: Any) -> str:
        current_step().add_usage(CALL, model=3)  # type: ignore[arg-type]
        return "x"

    with pytest.raises(WorkflowFailed) as caught:
        Workflow([Step("bad", bad_model)]).run_sync()
    assert "add_usage(model=...) must be a str or None, got int" in str(caught.value.__cause__)


# --- the format ---------------------------------------------------------------------------------


def test_ledger_rows_are_checked_field_by_field() -> None:
    base = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage()).to_dict()
    cases = [
        ([["s", None, 0, "ok", None, 1, 1, 1]], "ledger[0][2]"),
        ([["s", None, 1, "great", None, 1, 1, 1]], "ledger[0][3]"),
        ([["s", None, 1, "ok", None, -1, 1, 1]], "ledger[0][5]"),
        ([["", None, 1, "ok", None, 1, 1, 1]], "ledger[0][0]"),
        ([["s", None, 1]], "ledger[0]"),
    ]
    for ledger, path in cases:
        data = {**base, "ledger": ledger}
        with pytest.raises(Exception, match=r"ledger") as caught:
            WorkflowCheckpoint.from_dict(data)
        assert getattr(caught.value, "path", None) == path
    with pytest.raises(Exception, match="traceparent") as caught:
        WorkflowCheckpoint.from_dict({**base, "trace": "not-a-trace"})
    assert getattr(caught.value, "path", None) == "trace"
    v3 = {key: value for key, value in base.items() if key not in {"ledger", "in_flight"}}
    v3 = {
        k: v
        for k, v in v3.items()
        if k not in {"trace", "lineage", "attempts", "waits", "in_flight_items"}
    }
    assert WorkflowCheckpoint.from_dict({**v3, "version": 3}).ledger == ()


def test_format_5_adds_the_rate_limited_outcome_and_counts_of_items() -> None:
    base = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage()).to_dict()
    row = ["s", None, 1, "rate_limited", "gpt", 10, 0, 1]
    loaded = WorkflowCheckpoint.from_dict({**base, "ledger": [row]})
    assert loaded.spending.wasted == TokenUsage(10, 0, 1)  # a 429 bought no output
    v4 = {k: v for k, v in base.items() if k not in {"attempts", "waits", "in_flight_items"}}
    with pytest.raises(CheckpointFormatError, match="outcome of format version 5") as caught:
        WorkflowCheckpoint.from_dict({**v4, "version": 4, "ledger": [row]})
    assert caught.value.path == "ledger[0][3]"
    counted = WorkflowCheckpoint.from_dict({**base, "in_flight_items": {"m": 3}})
    assert dict(counted.in_flight_items) == {"m": 3}
    cases = [
        ({"m": 0}, "in_flight_items.m"),
        ({"m": True}, "in_flight_items.m"),
        ({"m": 1.0}, "in_flight_items.m"),
        ([["m", 1]], "in_flight_items"),
    ]
    for counts, path in cases:
        with pytest.raises(CheckpointFormatError) as caught:
            WorkflowCheckpoint.from_dict({**base, "in_flight_items": counts})
        assert caught.value.path == path
    with pytest.raises(CheckpointFormatError, match="counted once") as caught:
        WorkflowCheckpoint.from_dict(
            {**base, "in_flight_items": {"m": 2}, "in_flight": [["m", None, 1]]}
        )
    assert caught.value.path == "in_flight[0]"
    recorded = {**base, "outputs": {"m": [1]}, "step_index": 1, "in_flight_items": {"m": 1}}
    with pytest.raises(CheckpointFormatError, match="an ended map") as caught:
        WorkflowCheckpoint.from_dict(recorded)
    assert caught.value.path == "in_flight_items.m"


def test_an_entry_round_trips_as_a_plain_list() -> None:
    entry = LedgerEntry("a/b", "k", 2, "timeout", "gpt", TokenUsage(1, 2, 3))
    assert entry.to_list() == ["a/b", "k", 2, "timeout", "gpt", 1, 2, 3]
    assert entry.wasted
    base = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage()).to_dict()
    loaded = WorkflowCheckpoint.from_dict({**base, "ledger": [entry.to_list()]})
    assert loaded.ledger == (entry,)


# --- where people see it: progress, listeners -------------------------------------------------


async def test_console_progress_says_what_failed_attempts_wasted() -> None:
    stream = io.StringIO()
    seen: list[ev.Event] = []
    result = await Workflow([Step("parse", flaky_sync, retries=2, retry_delay=0)]).run(
        on_event=[ConsoleProgress(stream, live=False, clock=lambda: 0.0), seen.append]
    )
    text = stream.getvalue()
    assert "38 tokens in 4 calls (24 wasted by failed attempts)" in text
    assert result.cost.total_tokens == 38
    # Both listeners got every event, in order.
    assert type(seen[0]).__name__ == "RunStarted"
    assert type(seen[-1]).__name__ == "RunFinished"


async def test_a_listener_that_raises_does_not_keep_the_others_from_their_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    def broken(event: ev.Event) -> None:
        raise RuntimeError("listener bug")

    async def later(event: ev.Event) -> None:
        seen.append(type(event).__name__)

    await Workflow([Step("a", lambda ctx: 1)]).run(on_event=[broken, later])
    assert seen[0] == "RunStarted"
    assert seen[-1] == "RunFinished"
    assert "an on_event listener" in caplog.text


def test_on_event_refuses_a_list_with_something_not_callable() -> None:
    with pytest.raises(RunArgumentError, match=r"on_event\[1\] must be callable, got int"):
        Workflow([Step("a", lambda ctx: 1)]).run_sync(on_event=[print, 3])  # type: ignore[list-item]


class Tracer:
    def __init__(self, trace: str | None) -> None:
        self.trace = trace
        self.asked: list[ev.RunStarted] = []

    def __call__(self, event: ev.Event) -> None:
        pass

    def trace_run(self, event: ev.RunStarted) -> str | None:
        self.asked.append(event)
        return self.trace


TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_the_first_trace_a_tracer_gives_is_kept_across_resumes() -> None:
    def fails_once(ctx: Any) -> str:
        if ctx.get("fail"):
            raise ValueError("first run fails")
        return "ok"

    workflow = Workflow([Step("a", fails_once)])
    first = Tracer(TRACE)
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"fail": True}, on_event=first)
    assert caught.value.checkpoint.trace == TRACE
    assert first.asked[0].trace is None
    other = Tracer("00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    result_checkpoints: list[WorkflowCheckpoint] = []
    await workflow.run(
        {"fail": False},
        resume_from=roundtrip(caught.value.checkpoint),
        on_event=other,
        checkpoint_fn=result_checkpoints.append,
    )
    assert other.asked[0].trace == TRACE  # told what is stored
    assert result_checkpoints[-1].trace == TRACE  # and the stored one is kept


async def test_a_tracer_returning_garbage_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    await Workflow([Step("a", lambda ctx: 1)]).run(
        on_event=Tracer("not a traceparent"), checkpoint_fn=checkpoints.append
    )
    assert checkpoints[-1].trace is None
    assert "not a traceparent" in caplog.text


async def test_a_sub_workflow_run_names_its_parent_step() -> None:
    tracer = Tracer(None)
    inner = Workflow([Step("draft", lambda ctx: "d")])
    await Workflow([Step("research", inner)]).run(run_id="top", on_event=tracer)
    assert [(e.run_id, e.parent) for e in tracer.asked] == [
        ("top", None),
        (tracer.asked[1].run_id, ("top", "research", None)),
    ]


def test_inspect_shows_what_each_step_spent_and_wasted(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def parse(ctx: Any) -> str:
        current_step().add_usage(TokenUsage(10, 2, 1), model="m")
        if current_step().attempt < 2:
            raise ValueError("unparseable")
        return "ok"

    def refuses(ctx: Any) -> str:
        current_step().add_usage(TokenUsage(5, 1, 1))
        raise RuntimeError("refused")

    path = tmp_path / "run.json"

    def save(checkpoint: WorkflowCheckpoint) -> None:
        path.write_text(json.dumps(checkpoint.to_dict()))

    workflow = Workflow(
        [
            Step("parse", parse, retries=1, retry_delay=0),
            Step("refuses", refuses, depends_on=("parse",)),
        ]
    )
    with pytest.raises(WorkflowFailed):
        workflow.run_sync(checkpoint_fn=save)
    assert cli_main(["inspect", str(path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    start = next(n for n, line in enumerate(shown) if line.startswith("spending"))
    wasted = "attempt(s) that did not succeed"
    assert shown[start : start + 3] == [
        "spending    spent 12 tokens (1 call), wasted 18 tokens (2 calls)",
        f"              parse: spent 12 tokens (1 call), wasted 12 tokens (1 call) in 1 {wasted}",
        f"              refuses: spent 0 tokens (0 calls), wasted 6 tokens (1 call) in 1 {wasted}",
    ]
    assert cli_main(["inspect", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spending"]["steps"]["refuses"]["wasted"] == {
        "input_tokens": 5,
        "output_tokens": 1,
        "llm_calls": 1,
    }


def test_eager_the_checkpoint_of_a_failure_lists_the_steps_still_running() -> None:
    """Nothing starts after a failure, but a step left running may spend: it stays listed.

    With ``on_error="finish"`` the running step goes on after the failure's checkpoint.

    Found by the ledger property (seed 903): the failure's checkpoint listed nothing in
    flight, so a kill after it lost the running step's call without an "unknown" row.
    """
    saved: list[WorkflowCheckpoint] = []
    release = asyncio.Event()

    async def slow(ctx: Any) -> str:
        await release.wait()
        return "done"

    def fails(ctx: Any) -> str:
        msg = "no"
        raise ValueError(msg)

    def save(checkpoint: WorkflowCheckpoint) -> None:
        saved.append(checkpoint)
        if checkpoint.errors:
            release.set()

    workflow = Workflow([Step("slow", slow), Step("fails", fails)])
    with pytest.raises(WorkflowFailed):
        asyncio.run(workflow.run(checkpoint_fn=save, schedule="eager", on_error="finish"))
    failure = next(checkpoint for checkpoint in saved if checkpoint.errors)
    assert ("slow", None, 1) in failure.in_flight
