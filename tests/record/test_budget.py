"""Budgets: token limits that stop a run between batches, across resumes."""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    BudgetExceeded,
    ExecutionKitError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowResult,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

# The workflow under test, batch by batch:
#   1: a            cost (10, 100, 1)
#   2: b1, b2       b1 cost (30, 300, 1), b2 cost (10, 100, 1); b2 finishes after b1
#   3: c            cost (10, 100, 1)
#   4: d            cost (10, 100, 1)
COSTS = {
    "a": TokenUsage(10, 100, 1),
    "b1": TokenUsage(30, 300, 1),
    "b2": TokenUsage(10, 100, 1),
    "c": TokenUsage(10, 100, 1),
    "d": TokenUsage(10, 100, 1),
}
NAMES = ("a", "b1", "b2", "c", "d")
FULL_COST = TokenUsage(70, 700, 5)
FULL_OUTPUTS = {"a": "a", "b1": "a>b1", "b2": "a>b2", "c": "a>b1+a>b2>c", "d": "a>b1+a>b2>c>d"}
# Usage after each batch.
AFTER_BATCH = {1: TokenUsage(10, 100, 1), 2: TokenUsage(50, 500, 3), 3: TokenUsage(60, 600, 4)}
RECORDED_AFTER_BATCH = {1: ("a",), 2: ("a", "b1", "b2"), 3: ("a", "b1", "b2", "c")}


class Tracker:
    """Builds the workflow and records which steps started."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.b1_returned = asyncio.Event()

    def workflow(self) -> Workflow:
        return Workflow(
            [
                Step("a", self.a),
                Step("b1", self.b1, depends_on=("a",)),
                Step("b2", self.b2, depends_on=("a",)),
                Step("c", self.c, depends_on=("b1", "b2")),
                Step("d", self.d, depends_on=("c",)),
            ]
        )

    def a(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        self.started.append("a")
        return PatternResult("a", cost=COSTS["a"])

    async def b1(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        self.started.append("b1")
        await asyncio.sleep(0)
        self.b1_returned.set()
        return PatternResult(f"{ctx['a']}>b1", cost=COSTS["b1"])

    async def b2(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        self.started.append("b2")
        # Still running after b1 finished (and its cost was counted).
        await self.b1_returned.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        return PatternResult(f"{ctx['a']}>b2", cost=COSTS["b2"])

    def c(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        self.started.append("c")
        return PatternResult(f"{ctx['b1']}+{ctx['b2']}>c", cost=COSTS["c"])

    def d(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        self.started.append("d")
        return PatternResult(f"{ctx['c']}>d", cost=COSTS["d"])


async def run_bounded(workflow: Workflow, **kwargs: Any) -> WorkflowResult:
    async with asyncio.timeout(5):
        return await workflow.run(**kwargs)


async def run_over_budget(workflow: Workflow, **kwargs: Any) -> BudgetExceeded:
    with pytest.raises(BudgetExceeded) as caught:
        await run_bounded(workflow, **kwargs)
    return caught.value


def _steps(count: int) -> str:
    if count == 0:
        return "no completed step"
    return "1 completed step" if count == 1 else f"{count} completed steps"


def message(reached: str, seq: int, step_index: int) -> str:
    return (
        f"budget reached: {reached}; no new step or retry was started. The checkpoint "
        f"(.checkpoint, seq={seq}) records {_steps(step_index)}; resume from it with a "
        f"larger budget to continue"
    )


def roundtrip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


@pytest.mark.parametrize(
    ("budget", "batches", "reached"),
    [
        pytest.param(TokenUsage(input_tokens=40), 2, "input_tokens 50 of 40", id="input b1"),
        pytest.param(TokenUsage(input_tokens=45), 2, "input_tokens 50 of 45", id="input b2"),
        pytest.param(TokenUsage(output_tokens=500), 2, "output_tokens 500 of 500", id="output"),
        pytest.param(TokenUsage(output_tokens=50), 1, "output_tokens 100 of 50", id="output 1"),
        pytest.param(TokenUsage(llm_calls=1), 1, "llm_calls 1 of 1", id="calls after 1"),
        pytest.param(TokenUsage(llm_calls=4), 3, "llm_calls 4 of 4", id="calls after 3"),
        pytest.param(
            TokenUsage(45, 500, 0),
            2,
            "input_tokens 50 of 45, output_tokens 500 of 500",
            id="two fields",
        ),
        pytest.param(
            TokenUsage(1000, 10_000, 3), 2, "llm_calls 3 of 3", id="only the reached field"
        ),
    ],
)
async def test_reaching_a_limit_stops_the_run_after_the_batch(
    budget: TokenUsage, batches: int, reached: str
) -> None:
    """Later batches never start; the crossing batch finishes and is checkpointed first."""
    tracker = Tracker()
    checkpoints: list[WorkflowCheckpoint] = []
    error = await run_over_budget(
        tracker.workflow(), checkpoint_fn=checkpoints.append, budget=budget
    )
    recorded = RECORDED_AFTER_BATCH[batches]
    usage = AFTER_BATCH[batches]

    assert sorted(tracker.started) == sorted(recorded)
    assert isinstance(error, ExecutionKitError)
    assert len(checkpoints) == batches
    assert error.checkpoint is checkpoints[-1]
    assert tuple(error.checkpoint.outputs) == recorded
    assert error.checkpoint.outputs == {name: FULL_OUTPUTS[name] for name in recorded}
    assert error.checkpoint.cost == usage
    assert dict(error.checkpoint.errors) == {}
    assert error.usage == usage
    assert error.budget is budget
    assert str(error) == message(reached, seq=batches, step_index=len(recorded))


async def test_running_steps_of_the_crossing_batch_finish_and_are_recorded() -> None:
    """b1 alone reaches the limit; b2, still running then, completes and is recorded."""
    tracker = Tracker()
    checkpoints: list[WorkflowCheckpoint] = []
    error = await run_over_budget(
        tracker.workflow(), checkpoint_fn=checkpoints.append, budget=TokenUsage(input_tokens=40)
    )
    assert tracker.started == ["a", "b1", "b2"]
    assert error.checkpoint.outputs["b2"] == "a>b2"
    assert checkpoints[-1].cost == TokenUsage(50, 500, 3)


async def test_without_checkpoint_fn_the_error_still_carries_the_checkpoint() -> None:
    tracker = Tracker()
    error = await run_over_budget(tracker.workflow(), budget=TokenUsage(llm_calls=3))
    assert dict(error.checkpoint.outputs) == {"a": "a", "b1": "a>b1", "b2": "a>b2"}
    assert error.checkpoint.cost == TokenUsage(50, 500, 3)
    assert error.checkpoint.seq == 1
    assert str(error) == message("llm_calls 3 of 3", seq=1, step_index=3)


async def test_checkpoint_fn_is_awaited_before_the_error_is_raised() -> None:
    stored: list[WorkflowCheckpoint] = []

    async def slow_store(checkpoint: WorkflowCheckpoint) -> None:
        for _ in range(3):
            await asyncio.sleep(0)
        stored.append(checkpoint)

    error = await run_over_budget(
        Tracker().workflow(), checkpoint_fn=slow_store, budget=TokenUsage(llm_calls=1)
    )
    assert stored == [error.checkpoint]


@pytest.mark.parametrize(
    "budget",
    [
        pytest.param(TokenUsage(llm_calls=5), id="calls"),
        pytest.param(TokenUsage(input_tokens=70), id="input"),
        pytest.param(TokenUsage(70, 700, 5), id="all three"),
    ],
)
async def test_a_budget_reached_by_the_last_batch_completes_the_run(budget: TokenUsage) -> None:
    """Nothing is left to start, so there is nothing to stop."""
    tracker = Tracker()
    result = await run_bounded(tracker.workflow(), budget=budget)
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.cost == FULL_COST
    assert tracker.started == ["a", "b1", "b2", "c", "d"]


@pytest.mark.parametrize(
    "budget",
    [
        pytest.param(None, id="None"),
        pytest.param(TokenUsage(), id="all zero"),
        pytest.param(TokenUsage(0, 0, 100), id="only calls limited"),
        pytest.param(TokenUsage(0, 10_000, 0), id="only output limited"),
    ],
)
async def test_zero_fields_are_not_limits(budget: TokenUsage | None) -> None:
    result = await run_bounded(Tracker().workflow(), budget=budget)
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.cost == FULL_COST


def test_run_sync_passes_the_budget() -> None:
    with pytest.raises(BudgetExceeded, match=re.escape("llm_calls 1 of 1")):
        Tracker().workflow().run_sync(budget=TokenUsage(llm_calls=1))


# --- across resumes ----------------------------------------------------------------------


async def test_restored_usage_counts_against_the_budget() -> None:
    """Resumed after batch 1 (usage 10 input tokens), batch 2 adds 40: 50 reaches 45."""
    checkpoints: list[WorkflowCheckpoint] = []
    await run_bounded(Tracker().workflow(), checkpoint_fn=checkpoints.append)
    after_first = roundtrip(checkpoints[0])
    assert after_first.cost == TokenUsage(10, 100, 1)

    tracker = Tracker()
    error = await run_over_budget(
        tracker.workflow(), resume_from=after_first, budget=TokenUsage(input_tokens=45)
    )
    assert tracker.started == ["b1", "b2"]
    assert error.usage == TokenUsage(50, 500, 3)
    assert str(error) == message("input_tokens 50 of 45", seq=2, step_index=3)


async def test_resuming_with_the_same_budget_stops_before_any_step() -> None:
    budget = TokenUsage(llm_calls=3)
    first = await run_over_budget(Tracker().workflow(), budget=budget)
    stored = roundtrip(first.checkpoint)

    tracker = Tracker()
    checkpoints: list[WorkflowCheckpoint] = []
    again = await run_over_budget(
        tracker.workflow(), resume_from=stored, budget=budget, checkpoint_fn=checkpoints.append
    )
    assert tracker.started == []
    assert checkpoints == []
    assert again.checkpoint is stored
    assert again.usage == TokenUsage(50, 500, 3)
    assert again.budget is budget
    assert str(again) == message("llm_calls 3 of 3", seq=1, step_index=3)


async def test_resuming_a_finished_run_over_its_budget_returns_normally() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    await run_bounded(Tracker().workflow(), checkpoint_fn=checkpoints.append)
    tracker = Tracker()
    result = await run_bounded(
        tracker.workflow(), resume_from=checkpoints[-1], budget=TokenUsage(llm_calls=1)
    )
    assert tracker.started == []
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.cost == FULL_COST


@pytest.mark.parametrize(
    "larger",
    [
        pytest.param(TokenUsage(llm_calls=10), id="larger"),
        pytest.param(TokenUsage(llm_calls=5), id="exactly enough"),
        pytest.param(None, id="no budget"),
    ],
)
async def test_resuming_with_a_larger_budget_continues_where_it_stopped(
    larger: TokenUsage | None,
) -> None:
    uninterrupted = await run_bounded(Tracker().workflow())

    stopped = await run_over_budget(Tracker().workflow(), budget=TokenUsage(llm_calls=1))
    assert tuple(stopped.checkpoint.outputs) == ("a",)

    tracker = Tracker()
    checkpoints: list[WorkflowCheckpoint] = []
    result = await run_bounded(
        tracker.workflow(),
        resume_from=roundtrip(stopped.checkpoint),
        budget=larger,
        checkpoint_fn=checkpoints.append,
    )
    assert sorted(tracker.started) == ["b1", "b2", "c", "d"]
    assert result.restored == ("a",)
    assert dict(result.outputs) == dict(uninterrupted.outputs)
    assert result.cost == uninterrupted.cost == FULL_COST
    assert result.run_id == stopped.checkpoint.run_id
    assert [cp.seq for cp in checkpoints] == [2, 3, 4]


async def test_a_budget_holds_over_several_stops() -> None:
    """Raising the limit step by step: each resume runs until the new limit, never a step twice."""
    started: list[str] = []
    resume_from: WorkflowCheckpoint | None = None
    stops: list[tuple[str, ...]] = []
    for calls in (1, 3, 4):
        tracker = Tracker()
        error = await run_over_budget(
            tracker.workflow(), resume_from=resume_from, budget=TokenUsage(llm_calls=calls)
        )
        started += tracker.started
        stops.append(tuple(error.checkpoint.outputs))
        resume_from = roundtrip(error.checkpoint)
    tracker = Tracker()
    result = await run_bounded(tracker.workflow(), resume_from=resume_from)
    started += tracker.started
    assert stops == [("a",), ("a", "b1", "b2"), ("a", "b1", "b2", "c")]
    assert sorted(started) == sorted(NAMES)
    assert result.cost == FULL_COST


# --- invalid budgets ---------------------------------------------------------------------

NEGATIVE = "budget fields must be non-negative (0 means no limit), got "


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (
            {"input_tokens": 5},
            "budget must be a TokenUsage, a Budget or None, got dict {'input_tokens': 5}",
        ),
        (5, "budget must be a TokenUsage, a Budget or None, got int 5"),
        (True, "budget must be a TokenUsage, a Budget or None, got bool True"),
        ("100", "budget must be a TokenUsage, a Budget or None, got str '100'"),
        (
            TokenUsage(-1, 0, 0),
            NEGATIVE + "TokenUsage(input_tokens=-1, output_tokens=0, llm_calls=0)",
        ),
        (
            TokenUsage(0, -5, 0),
            NEGATIVE + "TokenUsage(input_tokens=0, output_tokens=-5, llm_calls=0)",
        ),
        (
            TokenUsage(10, 10, -1),
            NEGATIVE + "TokenUsage(input_tokens=10, output_tokens=10, llm_calls=-1)",
        ),
    ],
)
async def test_invalid_budget_is_rejected_before_any_step(budget: Any, expected: str) -> None:
    tracker = Tracker()
    with pytest.raises(RunArgumentError, match=f"^{re.escape(expected)}$"):
        await run_bounded(tracker.workflow(), budget=budget)
    assert tracker.started == []
