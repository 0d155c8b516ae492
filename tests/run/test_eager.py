"""``schedule="eager"``: each step starts as soon as its own dependencies are done.

Everything is ordered with `asyncio.Event` gates and counters, never timed waits; every
wait is bounded by `asyncio.timeout` so that a regression fails instead of hanging. A
step's ``recorded`` event is set from a done-callback of its task: the runner records
how a step ended inside the task itself, so once the callback runs the step is on
record.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
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

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping

    from executionkit._define._options import OnError, Schedule

SCHEDULES: tuple[Schedule, ...] = ("batch", "eager")
LIMIT = 5  # seconds: how long any single wait may take before the test fails


async def wait_for(event: asyncio.Event) -> None:
    async with asyncio.timeout(LIMIT):
        await event.wait()


async def finish(run: Awaitable[WorkflowResult]) -> WorkflowResult:
    async with asyncio.timeout(LIMIT):
        return await run


def json_round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def value_of(name: str, ctx: Mapping[str, Any], deps: tuple[str, ...]) -> str:
    return f"{name}({','.join(ctx[dep] for dep in deps)})"


def flow_names(flow: Workflow) -> list[str]:
    return [step.name for step in flow.steps]


@dataclass
class Lab:
    """Async steps that log what they do; gated ones wait until the test opens them."""

    log: list[str] = field(default_factory=list)
    runs: Counter[str] = field(default_factory=Counter)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    recorded: dict[str, asyncio.Event] = field(default_factory=dict)
    checkpoints: list[WorkflowCheckpoint] = field(default_factory=list)
    saved: list[asyncio.Event] = field(default_factory=lambda: [asyncio.Event()])

    def step(
        self,
        name: str,
        *deps: str,
        gated: bool = False,
        fail: bool = False,
        cost: TokenUsage | None = None,
    ) -> Step:
        started = self.started[name] = asyncio.Event()
        gate = self.gates[name] = asyncio.Event()
        recorded = self.recorded[name] = asyncio.Event()

        async def run(ctx: Mapping[str, Any]) -> Any:
            task = asyncio.current_task()
            assert task is not None
            task.add_done_callback(lambda _: recorded.set())
            self.log.append(f"start:{name}")
            self.runs[name] += 1
            started.set()
            if gated:
                try:
                    await gate.wait()
                except asyncio.CancelledError:
                    self.log.append(f"cancelled:{name}")
                    raise
            self.log.append(f"end:{name}")
            if fail:
                msg = f"{name} broke"
                raise ValueError(msg)
            value = value_of(name, ctx, deps)
            return value if cost is None else PatternResult(value, cost=cost)

        return Step(name, run, depends_on=deps)

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        """A sync checkpoint_fn: ``saved[k]`` is set once checkpoint number k was taken."""
        self.checkpoints.append(checkpoint)
        self.saved.append(asyncio.Event())
        self.saved[len(self.checkpoints)].set()

    def saved_event(self, count: int) -> asyncio.Event:
        while len(self.saved) <= count:
            self.saved.append(asyncio.Event())
        return self.saved[count]

    def before(self, first: str, second: str) -> bool:
        return self.log.index(first) < self.log.index(second)


def two_chains(lab: Lab) -> Workflow:
    """a -> c and b -> d, and e joining c and d; only b is gated."""
    return Workflow(
        [
            lab.step("a"),
            lab.step("b", gated=True),
            lab.step("c", "a"),
            lab.step("d", "b"),
            lab.step("e", "c", "d"),
        ]
    )


TWO_CHAINS_OUTPUTS = {
    "a": "a()",
    "b": "b()",
    "c": "c(a())",
    "d": "d(b())",
    "e": "e(c(a()),d(b()))",
}


# --- eager versus batch --------------------------------------------------------------------


async def test_eager_starts_a_step_while_an_unrelated_step_of_its_batch_still_runs() -> None:
    lab = Lab()
    run = asyncio.create_task(two_chains(lab).run(checkpoint_fn=lab.save, schedule="eager"))
    await wait_for(lab.started["c"])  # b is still held: only a is done
    assert "end:b" not in lab.log
    assert "start:b" in lab.log
    lab.gates["b"].set()
    result = await finish(run)
    assert dict(result.outputs) == TWO_CHAINS_OUTPUTS
    assert lab.before("start:c", "end:b")
    assert lab.before("end:d", "start:e")
    assert lab.before("end:c", "start:e")
    assert result.executed == ("a", "c", "b", "d", "e")


async def test_batch_starts_the_next_batch_only_after_the_whole_batch_finished() -> None:
    lab = Lab()
    run = asyncio.create_task(two_chains(lab).run(checkpoint_fn=lab.save, schedule="batch"))
    await wait_for(lab.recorded["a"])
    # A runner that started c now would do so within a few loop turns; give it them.
    for _ in range(20):
        await asyncio.sleep(0)
    assert not lab.started["c"].is_set()
    lab.gates["b"].set()
    result = await finish(run)
    assert dict(result.outputs) == TWO_CHAINS_OUTPUTS
    assert lab.before("end:b", "start:c")
    assert [cp.new_outputs for cp in lab.checkpoints] == [("a", "b"), ("c", "d"), ("e",)]


@pytest.mark.parametrize("value", ["fast", "Eager", "", None, 1])
async def test_invalid_schedule_is_rejected_before_any_step(value: object) -> None:
    lab = Lab()
    flow = two_chains(lab)
    msg = f"schedule must be one of 'batch', 'eager', got {value!r}"
    with pytest.raises(RunArgumentError, match=re.escape(msg)):
        await flow.run(schedule=value)  # type: ignore[arg-type]
    with pytest.raises(RunArgumentError, match=re.escape(msg)):
        await asyncio.to_thread(flow.run_sync, schedule=value)  # type: ignore[arg-type]
    assert lab.log == []


def test_run_sync_accepts_the_eager_schedule() -> None:
    def step(name: str, *deps: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            return value_of(name, ctx, deps)

        return Step(name, run, depends_on=deps)

    flow = Workflow([step("a"), step("b"), step("c", "a"), step("d", "b"), step("e", "c", "d")])
    checkpoints: list[WorkflowCheckpoint] = []
    result = flow.run_sync(schedule="eager", checkpoint_fn=checkpoints.append)
    assert dict(result.outputs) == TWO_CHAINS_OUTPUTS
    check_checkpoint_sequence(checkpoints, set(TWO_CHAINS_OUTPUTS))


def plain_step(name: str, *deps: str, fail: bool = False) -> Step:
    def run(ctx: Mapping[str, Any]) -> str:
        if fail:
            msg = f"{name} broke"
            raise ValueError(msg)
        return value_of(name, ctx, deps)

    return Step(name, run, depends_on=deps)


def async_step(name: str, *deps: str) -> Step:
    async def run(ctx: Mapping[str, Any]) -> str:
        return value_of(name, ctx, deps)

    return Step(name, run, depends_on=deps)


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_plain_steps_run_in_either_schedule(schedule: Schedule) -> None:
    """Plain functions run inline; their outputs must reach ctx, checkpoints and the result."""
    checkpoints: list[WorkflowCheckpoint] = []
    flow = Workflow(
        [
            plain_step("a"),
            async_step("b"),
            plain_step("c", "a"),
            plain_step("d", "b"),
            async_step("e", "c", "d"),
        ]
    )
    result = await finish(flow.run(checkpoint_fn=checkpoints.append, schedule=schedule))
    assert dict(result.outputs) == TWO_CHAINS_OUTPUTS
    check_checkpoint_sequence(checkpoints, set(TWO_CHAINS_OUTPUTS))


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_a_lone_plain_step_runs_in_either_schedule(schedule: Schedule) -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    flow = Workflow([plain_step("a"), plain_step("b", "a")])
    result = await finish(flow.run(checkpoint_fn=checkpoints.append, schedule=schedule))
    assert dict(result.outputs) == {"a": "a()", "b": "b(a())"}
    check_checkpoint_sequence(checkpoints, {"a", "b"})


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_a_failing_plain_step_is_checkpointed_before_workflow_failed(
    schedule: Schedule,
) -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    flow = Workflow([plain_step("a", fail=True), plain_step("b", "a")])
    with pytest.raises(WorkflowFailed) as caught:
        await finish(flow.run(checkpoint_fn=checkpoints.append, schedule=schedule))
    assert len(checkpoints) == 1
    assert dict(checkpoints[0].errors) == {"a": "ValueError: a broke"}
    assert caught.value.checkpoint == checkpoints[0]


async def test_eager_ctx_holds_the_initial_context_and_the_ancestors_only() -> None:
    seen: dict[str, list[str]] = {}
    gate = asyncio.Event()
    chain_done = asyncio.Event()

    def step(name: str, *deps: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            if name == "slow":
                await gate.wait()
            seen[name] = list(ctx)
            if name == "z":
                chain_done.set()
            return f"{name}:{ctx['topic']}"

        return Step(name, run, depends_on=deps)

    flow = Workflow([step("a"), step("slow"), step("b", "a"), step("c", "b"), step("z", "c")])
    run = asyncio.create_task(flow.run({"topic": "t"}, schedule="eager"))
    await wait_for(chain_done)  # the chain a -> b -> c -> z ran while slow is held
    assert "slow" not in seen
    gate.set()
    result = await finish(run)
    assert seen == {
        "a": ["topic"],
        "b": ["topic", "a"],
        "c": ["topic", "a", "b"],
        "z": ["topic", "a", "b", "c"],
        "slow": ["topic"],
    }
    assert result.outputs["z"] == "z:t"


# --- checkpoints ---------------------------------------------------------------------------


async def test_eager_takes_one_checkpoint_per_completion_when_completions_are_apart() -> None:
    lab = Lab()
    flow = Workflow(
        [
            lab.step("a", gated=True),
            lab.step("b", gated=True),
            lab.step("c", "a", gated=True),
            lab.step("d", "b", "c", gated=True),
        ]
    )
    run = asyncio.create_task(flow.run(checkpoint_fn=lab.save, schedule="eager"))
    for count, name in enumerate(["b", "a", "c", "d"], start=1):
        await wait_for(lab.started[name])
        lab.gates[name].set()
        await wait_for(lab.saved_event(count))
        checkpoint = lab.checkpoints[-1]
        assert checkpoint.new_outputs == (name,)
        assert checkpoint.seq == count
        assert checkpoint.step_index == count
        assert len(lab.checkpoints) == count
    result = await finish(run)
    assert len(lab.checkpoints) == 4
    assert [set(cp.outputs) for cp in lab.checkpoints] == [
        {"b"},
        {"a", "b"},
        {"a", "b", "c"},
        {"a", "b", "c", "d"},
    ]
    assert dict(lab.checkpoints[-1].outputs) == dict(result.outputs)
    assert result.executed == ("b", "a", "c", "d")


class HeldSaver:
    """An async checkpoint_fn whose first call waits until the test opens ``gate``."""

    def __init__(self) -> None:
        self.checkpoints: list[WorkflowCheckpoint] = []
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.saved: dict[int, asyncio.Event] = {}

    def saved_event(self, count: int) -> asyncio.Event:
        return self.saved.setdefault(count, asyncio.Event())

    async def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if not self.checkpoints:
                self.entered.set()
                await self.gate.wait()
            await asyncio.sleep(0)
            self.checkpoints.append(checkpoint)
            self.saved_event(len(self.checkpoints)).set()
        finally:
            self.in_flight -= 1


async def test_completions_during_an_async_checkpoint_are_folded_into_the_next() -> None:
    lab = Lab()
    saver = HeldSaver()
    flow = Workflow(
        [
            lab.step("a"),
            lab.step("b", gated=True),
            lab.step("c", gated=True),
            lab.step("d", gated=True),
            lab.step("after_c", "c"),
        ]
    )
    run = asyncio.create_task(flow.run(checkpoint_fn=saver, schedule="eager"))
    await wait_for(saver.entered)  # the checkpoint of a is being written, and held
    lab.gates["c"].set()
    lab.gates["b"].set()
    await wait_for(lab.recorded["b"])
    await wait_for(lab.recorded["c"])
    assert not lab.started["after_c"].is_set()  # c is recorded but not checkpointed yet
    saver.gate.set()
    # b and c landed meanwhile: one checkpoint takes both, and after_c starts at once,
    # while d still runs.
    await wait_for(saver.saved_event(2))
    await wait_for(lab.started["after_c"])
    assert "end:d" not in lab.log
    lab.gates["d"].set()
    result = await finish(run)
    assert [cp.new_outputs for cp in saver.checkpoints[:2]] == [("a",), ("b", "c")]
    assert [cp.seq for cp in saver.checkpoints] == list(range(1, len(saver.checkpoints) + 1))
    assert [cp.step_index for cp in saver.checkpoints[:2]] == [1, 3]
    announced = [name for cp in saver.checkpoints for name in cp.new_outputs]
    assert sorted(announced) == sorted(flow_names(flow))
    assert saver.most_in_flight == 1
    assert dict(result.outputs) == dict(saver.checkpoints[-1].outputs)


async def test_every_running_step_finishing_during_an_async_checkpoint_is_not_lost() -> None:
    lab = Lab()
    saver = HeldSaver()
    flow = Workflow(
        [lab.step("a"), lab.step("b", gated=True), lab.step("c", gated=True), lab.step("d", "b")]
    )
    run = asyncio.create_task(flow.run(checkpoint_fn=saver, schedule="eager"))
    await wait_for(saver.entered)
    lab.gates["b"].set()
    lab.gates["c"].set()
    await wait_for(lab.recorded["b"])
    await wait_for(lab.recorded["c"])  # nothing runs any more, d is ready but not started
    saver.gate.set()
    result = await finish(run)
    assert dict(result.outputs) == {"a": "a()", "b": "b()", "c": "c()", "d": "d(b())"}
    assert [cp.new_outputs for cp in saver.checkpoints] == [("a",), ("b", "c"), ("d",)]
    assert saver.most_in_flight == 1
    assert lab.runs == Counter({"a": 1, "b": 1, "c": 1, "d": 1})


# --- failures ------------------------------------------------------------------------------


def failing_flow(lab: Lab) -> Workflow:
    """``f`` fails while ``slow`` runs; each has a dependent, and ``f`` a grandchild."""
    return Workflow(
        [
            lab.step("quick"),
            lab.step("f", gated=True, fail=True),
            lab.step("slow", gated=True),
            lab.step("after_f", "f"),
            lab.step("after_slow", "slow"),
            lab.step("after_after_f", "after_f"),
            lab.step("after_quick", "quick"),
        ]
    )


async def start_failing_run(lab: Lab, mode: OnError) -> asyncio.Task[WorkflowResult]:
    run = asyncio.create_task(
        failing_flow(lab).run(checkpoint_fn=lab.save, schedule="eager", on_error=mode)
    )
    await wait_for(lab.recorded["after_quick"])
    await wait_for(lab.started["slow"])
    lab.gates["f"].set()
    await wait_for(lab.recorded["f"])
    return run


async def test_eager_finish_lets_running_steps_finish_and_starts_nothing_new() -> None:
    lab = Lab()
    run = await start_failing_run(lab, "finish")
    lab.gates["slow"].set()
    with pytest.raises(WorkflowFailed) as caught:
        await finish(run)
    error = caught.value
    assert list(error.errors) == ["f"]
    assert str(error.errors["f"]) == "f broke"
    assert dict(error.checkpoint.outputs) == {
        "quick": "quick()",
        "after_quick": "after_quick(quick())",
        "slow": "slow()",
    }
    assert dict(error.checkpoint.errors) == {"f": "ValueError: f broke"}
    assert lab.checkpoints[-1] == error.checkpoint
    assert set(lab.runs) == {"quick", "after_quick", "f", "slow"}  # after_slow never started
    assert str(error) == (
        f"workflow failed: step 'f' raised ValueError: f broke. The checkpoint "
        f"(.checkpoint, seq={error.checkpoint.seq}) records 3 completed steps; "
        f"resume from it to run only what is left"
    )


async def test_eager_cancel_cancels_the_running_steps() -> None:
    lab = Lab()
    run = await start_failing_run(lab, "cancel")
    with pytest.raises(WorkflowFailed) as caught:
        await finish(run)
    assert "cancelled:slow" in lab.log
    assert "end:slow" not in lab.log
    assert dict(caught.value.checkpoint.outputs) == {
        "quick": "quick()",
        "after_quick": "after_quick(quick())",
    }
    assert dict(caught.value.checkpoint.errors) == {"f": "ValueError: f broke"}
    assert set(lab.runs) == {"quick", "after_quick", "f", "slow"}


async def test_eager_continue_keeps_independent_branches_going() -> None:
    lab = Lab()
    run = await start_failing_run(lab, "continue")
    lab.gates["slow"].set()
    with pytest.raises(WorkflowFailed) as caught:
        await finish(run)
    assert dict(caught.value.checkpoint.outputs) == {
        "quick": "quick()",
        "slow": "slow()",
        "after_slow": "after_slow(slow())",
        "after_quick": "after_quick(quick())",
    }
    assert dict(caught.value.checkpoint.errors) == {"f": "ValueError: f broke"}
    assert "after_f" not in lab.runs
    assert "after_after_f" not in lab.runs
    assert lab.before("end:f", "start:after_slow")


@pytest.mark.parametrize("mode", ["finish", "cancel", "continue"])
async def test_eager_resume_after_a_failure_runs_the_failed_step_and_what_is_left(
    mode: OnError,
) -> None:
    lab = Lab()
    run = await start_failing_run(lab, mode)
    lab.gates["slow"].set()
    with pytest.raises(WorkflowFailed) as caught:
        await finish(run)
    recorded = set(caught.value.checkpoint.outputs)
    again = Lab()
    flow = Workflow(
        [
            again.step("quick"),
            again.step("f"),
            again.step("slow"),
            again.step("after_f", "f"),
            again.step("after_slow", "slow"),
            again.step("after_after_f", "after_f"),
            again.step("after_quick", "quick"),
        ]
    )
    result = await finish(
        flow.run(resume_from=json_round_trip(caught.value.checkpoint), schedule="eager")
    )
    assert set(again.runs) == set(flow_names(flow)) - recorded
    assert all(count == 1 for count in again.runs.values())
    assert result.outputs["after_after_f"] == "after_after_f(after_f(f()))"
    assert result.outputs["after_slow"] == "after_slow(slow())"


# --- cancellation and interrupts -----------------------------------------------------------


def cancel_flow(lab: Lab, *, gated: bool) -> Workflow:
    return Workflow(
        [
            lab.step("a"),
            lab.step("held", gated=gated),
            lab.step("x", gated=gated),
            lab.step("c", "a", gated=gated),
            lab.step("after_held", "held"),
        ]
    )


async def test_cancelling_an_eager_run_checkpoints_what_finished_and_leaves_no_task() -> None:
    lab = Lab()
    flow = cancel_flow(lab, gated=True)
    before = asyncio.all_tasks()
    run = asyncio.create_task(flow.run(checkpoint_fn=lab.save, schedule="eager"))
    await wait_for(lab.started["c"])
    await wait_for(lab.started["x"])
    lab.gates["x"].set()  # x finishes in the same loop turn as the cancellation arrives
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finish(run)
    assert run.cancelled()
    assert asyncio.all_tasks() == before
    assert "cancelled:held" in lab.log
    assert "cancelled:c" in lab.log
    assert "after_held" not in lab.runs
    assert dict(lab.checkpoints[-1].outputs) == {"a": "a()", "x": "x()"}
    assert lab.checkpoints[-1].new_outputs == ("x",)
    again = Lab()
    resumed = await finish(
        cancel_flow(again, gated=False).run(
            resume_from=json_round_trip(lab.checkpoints[-1]), schedule="eager"
        )
    )
    assert resumed.restored == ("a", "x")
    assert set(again.runs) == {"held", "c", "after_held"}
    assert dict(resumed.outputs) == {
        "a": "a()",
        "held": "held()",
        "x": "x()",
        "c": "c(a())",
        "after_held": "after_held(held())",
    }


async def test_cancelling_an_eager_chain_while_its_only_step_runs() -> None:
    """With nothing else running or ready, the step runs as a batch of one does: the
    cancellation still reaches it, what finished is checkpointed, and nothing is left."""
    lab = Lab()
    flow = Workflow([lab.step("a"), lab.step("b", "a", gated=True), lab.step("c", "b")])
    before = asyncio.all_tasks()
    run = asyncio.create_task(flow.run(checkpoint_fn=lab.save, schedule="eager"))
    await wait_for(lab.started["b"])
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finish(run)
    assert asyncio.all_tasks() == before
    assert lab.log == ["start:a", "end:a", "start:b", "cancelled:b"]
    assert [dict(cp.outputs) for cp in lab.checkpoints] == [{"a": "a()"}]
    lab.gates["b"].set()
    resumed = await finish(flow.run(resume_from=lab.checkpoints[-1], schedule="eager"))
    assert resumed.restored == ("a",)
    assert resumed.executed == ("b", "c")


@pytest.mark.parametrize("mode", ["finish", "cancel", "continue"])
async def test_an_eager_chain_step_that_fails_alone_is_checkpointed_then_raised(
    mode: OnError,
) -> None:
    lab = Lab()
    flow = Workflow([lab.step("a"), lab.step("b", "a", fail=True), lab.step("c", "b")])
    with pytest.raises(WorkflowFailed) as caught:
        await finish(flow.run(checkpoint_fn=lab.save, schedule="eager", on_error=mode))
    assert list(caught.value.errors) == ["b"]
    assert caught.value.checkpoint is lab.checkpoints[-1]
    assert dict(lab.checkpoints[-1].outputs) == {"a": "a()"}
    assert dict(lab.checkpoints[-1].errors) == {"b": "ValueError: b broke"}
    assert "c" not in lab.runs


async def test_an_eager_chain_checkpoints_after_every_step() -> None:
    lab = Lab()
    flow = Workflow([lab.step("a"), lab.step("b", "a"), lab.step("c", "b")])
    result = await finish(flow.run(checkpoint_fn=lab.save, schedule="eager"))
    assert [cp.new_outputs for cp in lab.checkpoints] == [("a",), ("b",), ("c",)]
    assert dict(result.outputs) == {"a": "a()", "b": "b(a())", "c": "c(b(a()))"}


async def test_keyboard_interrupt_in_an_eager_step_checkpoints_and_propagates() -> None:
    lab = Lab()

    async def interrupt(ctx: Mapping[str, Any]) -> str:
        raise KeyboardInterrupt

    flow = Workflow(
        [
            lab.step("a"),
            lab.step("held", gated=True),
            Step("boom", interrupt, depends_on=("a",)),
            lab.step("after_boom", "boom"),
        ]
    )
    before = asyncio.all_tasks()
    with pytest.raises(KeyboardInterrupt):
        await finish(flow.run(checkpoint_fn=lab.save, schedule="eager"))
    assert asyncio.all_tasks() == before
    assert "cancelled:held" in lab.log
    assert dict(lab.checkpoints[-1].outputs) == {"a": "a()"}
    assert "after_boom" not in lab.runs


# --- budget --------------------------------------------------------------------------------


async def test_eager_budget_stops_new_starts_and_raises_after_running_steps_finish() -> None:
    lab = Lab()
    flow = Workflow(
        [
            lab.step("a", cost=TokenUsage(10, 20, 1)),
            lab.step("b", gated=True, cost=TokenUsage(1, 1, 1)),
            lab.step("c", "a"),
            lab.step("d", "b"),
        ]
    )
    budget = TokenUsage(llm_calls=1)
    run = asyncio.create_task(flow.run(checkpoint_fn=lab.save, schedule="eager", budget=budget))
    await wait_for(lab.saved_event(1))  # a is recorded and checkpointed; c is ready
    assert lab.checkpoints[0].new_outputs == ("a",)
    assert not lab.started["c"].is_set()
    lab.gates["b"].set()
    with pytest.raises(BudgetExceeded) as caught:
        await finish(run)
    error = caught.value
    assert set(lab.runs) == {"a", "b"}
    assert dict(error.checkpoint.outputs) == {"a": "a()", "b": "b()"}
    assert error.usage == TokenUsage(11, 21, 2)
    assert error.checkpoint == lab.checkpoints[-1]
    assert str(error) == (
        "budget reached: llm_calls 2 of 1; no new step or retry was started. The checkpoint "
        "(.checkpoint, seq=2) records 2 completed steps; resume from it with a larger "
        "budget to continue"
    )
    resumed = await finish(
        flow.run(
            resume_from=json_round_trip(error.checkpoint),
            schedule="eager",
            budget=TokenUsage(llm_calls=10),
        )
    )
    assert set(resumed.executed) == {"c", "d"}
    assert resumed.cost == TokenUsage(11, 21, 2)


# --- resume property over random DAGs ------------------------------------------------------


@dataclass(frozen=True)
class RandomDag:
    names: tuple[str, ...]
    deps: dict[str, tuple[str, ...]]
    yields: dict[str, int]
    cost: dict[str, TokenUsage | None]
    limit: int | None

    @classmethod
    def draw(cls, seed: int) -> RandomDag:
        rng = random.Random(seed)
        count = rng.randint(1, 14)
        names = tuple(f"s{i:02d}" for i in range(count))
        deps = {
            name: tuple(earlier for earlier in names[:i] if rng.random() < 0.3)
            for i, name in enumerate(names)
        }
        return cls(
            names=names,
            deps=deps,
            yields={name: rng.randint(0, 6) for name in names},
            cost={
                name: TokenUsage(rng.randint(0, 50), rng.randint(0, 50), 1)
                if rng.random() < 0.6
                else None
                for name in names
            },
            limit=rng.choice([None, None, 1, 2, 3]),
        )

    def workflow(self, runs: Counter[str], order: list[str]) -> Workflow:
        def make(name: str) -> Step:
            deps = self.deps[name]
            cost = self.cost[name]

            async def run(ctx: Mapping[str, Any]) -> Any:
                assert all(dep in order for dep in deps)  # started after its dependencies
                runs[name] += 1
                for _ in range(self.yields[name]):
                    await asyncio.sleep(0)
                order.append(name)
                value = value_of(name, ctx, deps)
                return value if cost is None else PatternResult(value, cost=cost)

            return Step(name, run, depends_on=deps)

        return Workflow([make(name) for name in self.names])

    def total(self, names: set[str]) -> TokenUsage:
        usage = TokenUsage()
        for name in names:
            cost = self.cost[name]
            if cost is not None:
                usage += cost
        return usage


def check_checkpoint_sequence(checkpoints: list[WorkflowCheckpoint], names: set[str]) -> None:
    """seq counts 1, 2, 3...; step_index grows by new_outputs; every step announced once."""
    assert [cp.seq for cp in checkpoints] == list(range(1, len(checkpoints) + 1))
    recorded: set[str] = set()
    for checkpoint in checkpoints:
        assert checkpoint.new_outputs
        assert not recorded & set(checkpoint.new_outputs)
        recorded |= set(checkpoint.new_outputs)
        assert set(checkpoint.outputs) == recorded
        assert checkpoint.step_index == len(recorded)
    announced = [name for cp in checkpoints for name in cp.new_outputs]
    assert sorted(announced) == sorted(names)


@pytest.mark.parametrize("seed", range(25))
async def test_resuming_an_eager_run_from_any_checkpoint_gives_the_uninterrupted_result(
    seed: int,
) -> None:
    dag = RandomDag.draw(seed)
    runs: Counter[str] = Counter()
    checkpoints: list[WorkflowCheckpoint] = []
    full = await finish(
        dag.workflow(runs, []).run(
            checkpoint_fn=checkpoints.append, schedule="eager", max_concurrency=dag.limit
        )
    )
    assert runs == Counter(dict.fromkeys(dag.names, 1))
    assert full.cost == dag.total(set(dag.names))
    check_checkpoint_sequence(checkpoints, set(dag.names))
    batch = await finish(dag.workflow(Counter(), []).run(schedule="batch"))
    assert dict(batch.outputs) == dict(full.outputs)
    for checkpoint in checkpoints:
        recorded = set(checkpoint.outputs)
        assert checkpoint.cost == dag.total(recorded)
        for schedule in SCHEDULES:
            again: Counter[str] = Counter()
            later: list[WorkflowCheckpoint] = []
            resumed = await finish(
                dag.workflow(again, list(recorded)).run(
                    resume_from=json_round_trip(checkpoint),
                    checkpoint_fn=later.append,
                    schedule=schedule,
                    max_concurrency=dag.limit,
                )
            )
            assert dict(resumed.outputs) == dict(full.outputs)
            assert resumed.cost == full.cost
            assert again == Counter(dict.fromkeys(set(dag.names) - recorded, 1))
            assert set(resumed.executed) == set(dag.names) - recorded
            assert resumed.restored == tuple(name for name in dag.names if name in recorded)
            assert [cp.seq for cp in later] == list(
                range(checkpoint.seq + 1, checkpoint.seq + 1 + len(later))
            )


class YieldingSaver:
    """An async checkpoint_fn that yields to the loop a random number of times."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.checkpoints: list[WorkflowCheckpoint] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        for _ in range(self.rng.randint(0, 8)):
            await asyncio.sleep(0)
        self.checkpoints.append(checkpoint)
        self.in_flight -= 1


@pytest.mark.parametrize("seed", range(25))
async def test_eager_runs_with_an_async_checkpoint_fn_over_random_dags(seed: int) -> None:
    """Completions folded while checkpoint_fn awaits: nothing lost, calls never overlap."""
    dag = RandomDag.draw(seed)
    saver = YieldingSaver(seed)
    runs: Counter[str] = Counter()
    result = await finish(
        dag.workflow(runs, []).run(
            checkpoint_fn=saver, schedule="eager", max_concurrency=dag.limit
        )
    )
    assert runs == Counter(dict.fromkeys(dag.names, 1))
    assert result.cost == dag.total(set(dag.names))
    assert saver.most_in_flight == 1
    check_checkpoint_sequence(saver.checkpoints, set(dag.names))
    assert dict(saver.checkpoints[-1].outputs) == dict(result.outputs)
    for checkpoint in saver.checkpoints:
        assert checkpoint.cost == dag.total(set(checkpoint.outputs))
