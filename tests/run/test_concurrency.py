"""``max_concurrency=N``: never more than N steps running at once, started in a fixed order.

Each gated step counts itself into an ``active`` set when it starts and out when it ends,
and then waits for the test to open its gate; the test opens gates one at a time and
checks, after each, exactly which steps are running. No timed waits: every wait is on an
`asyncio.Event`, bounded by `asyncio.timeout` so that a regression fails instead of
hanging.
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
WIDE = tuple(f"w{i}" for i in range(8))


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


@dataclass
class Pool:
    """Steps that count how many of them run at once."""

    active: set[str] = field(default_factory=set)
    most: int = 0
    starts: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    runs: Counter[str] = field(default_factory=Counter)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    ended: dict[str, asyncio.Event] = field(default_factory=dict)
    recorded: dict[str, asyncio.Event] = field(default_factory=dict)
    checkpoints: list[WorkflowCheckpoint] = field(default_factory=list)

    def enter(self, name: str) -> None:
        self.active.add(name)
        self.most = max(self.most, len(self.active))
        self.starts.append(name)
        self.log.append(f"start:{name}")
        self.runs[name] += 1
        self.started[name].set()

    def leave(self, name: str) -> None:
        self.active.discard(name)
        self.log.append(f"end:{name}")
        self.ended[name].set()

    def step(
        self,
        name: str,
        *deps: str,
        gated: bool = False,
        yields: int = 0,
        fail: bool = False,
        cost: TokenUsage | None = None,
    ) -> Step:
        """An async step; ``gated`` ones wait for the test, others yield ``yields`` times."""
        self.started[name] = asyncio.Event()
        gate = self.gates[name] = asyncio.Event()
        self.ended[name] = asyncio.Event()
        recorded = self.recorded[name] = asyncio.Event()

        async def run(ctx: Mapping[str, Any]) -> Any:
            task = asyncio.current_task()
            assert task is not None
            task.add_done_callback(lambda _: recorded.set())
            self.enter(name)
            try:
                if gated:
                    await gate.wait()
                for _ in range(yields):
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                self.log.append(f"cancelled:{name}")
                raise
            finally:
                self.leave(name)
            if fail:
                msg = f"{name} broke"
                raise ValueError(msg)
            value = value_of(name, ctx, deps)
            return value if cost is None else PatternResult(value, cost=cost)

        return Step(name, run, depends_on=deps)

    def plain(self, name: str, *deps: str) -> Step:
        """A plain-function step marked inline: on the loop, it may set asyncio events."""
        self.started[name] = asyncio.Event()
        self.ended[name] = asyncio.Event()

        def run(ctx: Mapping[str, Any]) -> str:
            self.enter(name)
            self.leave(name)
            return value_of(name, ctx, deps)

        return Step(name, run, depends_on=deps, inline=True)


async def release(pool: Pool, name: str, *, expect_start: tuple[str, ...] = ()) -> None:
    """Open ``name``'s gate and wait until it ended and ``expect_start`` started."""
    pool.gates[name].set()
    await wait_for(pool.ended[name])
    for other in expect_start:
        await wait_for(pool.started[other])


# --- the limit and the start order on a wide graph -----------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3])
@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_at_most_n_steps_run_and_they_start_in_declaration_order(
    schedule: Schedule, limit: int
) -> None:
    pool = Pool()
    flow = Workflow([pool.step(name, gated=True) for name in WIDE])
    run = asyncio.create_task(
        flow.run(checkpoint_fn=pool.checkpoints.append, schedule=schedule, max_concurrency=limit)
    )
    for name in WIDE[:limit]:
        await wait_for(pool.started[name])
    expected = set(WIDE[:limit])
    assert pool.active == expected
    next_up = limit
    finished = 0
    chooser = random.Random(limit)  # release in an order unrelated to the start order
    while expected:
        victim = chooser.choice(sorted(expected))
        expected.discard(victim)
        finished += 1
        newcomers: tuple[str, ...] = ()
        if next_up < len(WIDE):
            newcomers = (WIDE[next_up],)
            expected.add(WIDE[next_up])
            next_up += 1
        await release(pool, victim, expect_start=newcomers)
        assert pool.active == expected
        assert len(pool.active) == min(limit, len(WIDE) - finished)
        assert pool.starts == list(WIDE[:next_up])
    result = await finish(run)
    assert pool.most == limit
    assert pool.starts == list(WIDE)
    assert dict(result.outputs) == {name: f"{name}()" for name in WIDE}
    announced = [name for cp in pool.checkpoints for name in cp.new_outputs]
    assert sorted(announced) == sorted(WIDE)


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_a_limit_above_the_number_of_steps_starts_them_all(schedule: Schedule) -> None:
    pool = Pool()
    flow = Workflow([pool.step(name, gated=True) for name in WIDE])
    run = asyncio.create_task(flow.run(schedule=schedule, max_concurrency=100))
    for name in WIDE:
        await wait_for(pool.started[name])
    assert pool.active == set(WIDE)
    for name in reversed(WIDE):
        pool.gates[name].set()
    result = await finish(run)
    assert pool.starts == list(WIDE)
    assert len(result.outputs) == len(WIDE)


# --- the start order on a layered graph ----------------------------------------------------

# Declared a, x(a), b, c, y(b), z(x, c): x is declared before c but becomes ready later.
LAYERED_PLANS: dict[Schedule, tuple[list[tuple[str, tuple[str, ...], set[str]]], list[str]]] = {
    # (release, steps that must start because of it, running afterwards); start sequence
    "eager": (
        [
            ("a", ("x",), {"b", "x"}),  # x (#1) before c (#3): lowest index first
            ("b", ("c",), {"x", "c"}),  # c (#3) before y (#4)
            ("x", ("y",), {"c", "y"}),  # z still waits for c
            ("c", ("z",), {"y", "z"}),
            ("z", (), {"y"}),
            ("y", (), set()),
        ],
        ["a", "b", "x", "c", "y", "z"],
    ),
    "batch": (
        [
            ("a", ("c",), {"b", "c"}),  # the first batch is a, b, c
            ("b", (), {"c"}),  # x and y wait for the whole batch
            ("c", ("x", "y"), {"x", "y"}),
            ("y", (), {"x"}),
            ("x", ("z",), {"z"}),
            ("z", (), set()),
        ],
        ["a", "b", "c", "x", "y", "z"],
    ),
}


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_on_a_layered_graph_the_lowest_declared_ready_step_starts_first(
    schedule: Schedule,
) -> None:
    pool = Pool()
    flow = Workflow(
        [
            pool.step("a", gated=True),
            pool.step("x", "a", gated=True),
            pool.step("b", gated=True),
            pool.step("c", gated=True),
            pool.step("y", "b", gated=True),
            pool.step("z", "x", "c", gated=True),
        ]
    )
    plan, sequence = LAYERED_PLANS[schedule]
    run = asyncio.create_task(flow.run(schedule=schedule, max_concurrency=2))
    await wait_for(pool.started["a"])
    await wait_for(pool.started["b"])
    assert pool.active == {"a", "b"}
    for victim, newcomers, running in plan:
        await release(pool, victim, expect_start=newcomers)
        assert pool.active == running
    result = await finish(run)
    assert pool.starts == sequence
    assert pool.most == 2
    assert result.outputs["z"] == "z(x(a()),c())"


# --- plain and async steps together --------------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_with_a_limit_of_one_mixed_steps_run_one_at_a_time_in_declaration_order(
    schedule: Schedule,
) -> None:
    pool = Pool()
    flow = Workflow(
        [
            pool.plain("s0"),
            pool.step("a1", yields=3),
            pool.plain("s2"),
            pool.step("a3", yields=2),
            pool.plain("s4"),
            pool.step("a5", yields=1),
            pool.plain("t6", "s0", "a5"),
            pool.step("b7", "a1", yields=3),
        ]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    result = await finish(
        flow.run(checkpoint_fn=checkpoints.append, schedule=schedule, max_concurrency=1)
    )
    order = ["s0", "a1", "s2", "a3", "s4", "a5", "t6", "b7"]
    assert pool.log == [event for name in order for event in (f"start:{name}", f"end:{name}")]
    assert pool.most == 1
    assert result.executed == tuple(order)
    assert result.outputs["t6"] == "t6(s0(),a5())"
    announced = [name for cp in checkpoints for name in cp.new_outputs]
    assert announced == order


# --- failures and the budget stop queued steps ---------------------------------------------


def failing_wide(pool: Pool, *, broken: bool = True) -> Workflow:
    """w0 runs while w1 fails; w2..w5 wait in the queue; after_w1 depends on w1."""
    return Workflow(
        [
            pool.step("w0", gated=broken, yields=2),
            pool.step("w1", gated=broken, fail=broken, yields=2),
            *(pool.step(f"w{i}", yields=2) for i in range(2, 6)),
            pool.step("after_w1", "w1", yields=2),
        ]
    )


async def start_failing(
    pool: Pool, schedule: Schedule, mode: OnError
) -> asyncio.Task[WorkflowResult]:
    run = asyncio.create_task(
        failing_wide(pool).run(
            checkpoint_fn=pool.checkpoints.append,
            schedule=schedule,
            on_error=mode,
            max_concurrency=2,
        )
    )
    await wait_for(pool.started["w0"])
    await wait_for(pool.started["w1"])
    pool.gates["w1"].set()
    await wait_for(pool.recorded["w1"])
    return run


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_finish_mode_does_not_start_queued_steps_and_resume_runs_them(
    schedule: Schedule,
) -> None:
    pool = Pool()
    run = await start_failing(pool, schedule, "finish")
    assert pool.active == {"w0"}
    pool.gates["w0"].set()
    with pytest.raises(WorkflowFailed) as caught:
        await finish(run)
    checkpoint = caught.value.checkpoint
    assert set(pool.runs) == {"w0", "w1"}
    assert dict(checkpoint.outputs) == {"w0": "w0()"}
    assert dict(checkpoint.errors) == {"w1": "ValueError: w1 broke"}
    assert pool.checkpoints[-1] == checkpoint
    again = Pool()
    resumed = await finish(
        failing_wide(again, broken=False).run(
            resume_from=json_round_trip(checkpoint), schedule=schedule, max_concurrency=2
        )
    )
    assert again.runs == Counter(dict.fromkeys(("w1", "w2", "w3", "w4", "w5", "after_w1"), 1))
    assert resumed.restored == ("w0",)
    assert resumed.outputs["after_w1"] == "after_w1(w1())"
    assert again.most == 2


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_cancel_mode_with_a_limit_cancels_the_running_and_starts_no_queued_step(
    schedule: Schedule,
) -> None:
    pool = Pool()
    run = await start_failing(pool, schedule, "cancel")
    with pytest.raises(WorkflowFailed) as caught:
        await finish(run)
    assert "cancelled:w0" in pool.log
    assert set(pool.runs) == {"w0", "w1"}
    assert dict(caught.value.checkpoint.outputs) == {}
    assert dict(caught.value.checkpoint.errors) == {"w1": "ValueError: w1 broke"}


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_continue_mode_with_a_limit_keeps_starting_independent_queued_steps(
    schedule: Schedule,
) -> None:
    pool = Pool()
    run = await start_failing(pool, schedule, "continue")
    pool.gates["w0"].set()
    with pytest.raises(WorkflowFailed) as caught:
        await finish(run)
    assert set(pool.runs) == {"w0", "w1", "w2", "w3", "w4", "w5"}  # after_w1 never starts
    assert pool.most == 2
    assert pool.starts == ["w0", "w1", "w2", "w3", "w4", "w5"]
    assert set(caught.value.checkpoint.outputs) == {"w0", "w2", "w3", "w4", "w5"}
    assert dict(caught.value.checkpoint.errors) == {"w1": "ValueError: w1 broke"}


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_the_budget_stops_starting_queued_steps_of_the_same_batch(
    schedule: Schedule,
) -> None:
    pool = Pool()
    flow = Workflow(
        [
            pool.step("w0", cost=TokenUsage(5, 7, 1)),
            pool.step("w1", gated=True, cost=TokenUsage(1, 1, 1)),
            *(pool.step(f"w{i}", cost=TokenUsage(1, 1, 1)) for i in range(2, 6)),
        ]
    )
    run = asyncio.create_task(
        flow.run(
            checkpoint_fn=pool.checkpoints.append,
            schedule=schedule,
            max_concurrency=2,
            budget=TokenUsage(llm_calls=1),
        )
    )
    await wait_for(pool.recorded["w0"])  # the budget is reached; w1 still runs
    assert pool.active == {"w1"}
    pool.gates["w1"].set()
    with pytest.raises(BudgetExceeded) as caught:
        await finish(run)
    error = caught.value
    assert set(pool.runs) == {"w0", "w1"}
    assert dict(error.checkpoint.outputs) == {"w0": "w0()", "w1": "w1()"}
    assert error.usage == TokenUsage(6, 8, 2)
    assert pool.checkpoints[-1] == error.checkpoint
    assert str(error) == (
        f"budget reached: llm_calls 2 of 1; no new step or retry was started. The checkpoint "
        f"(.checkpoint, seq={error.checkpoint.seq}) records 2 completed steps; resume "
        f"from it with a larger budget to continue"
    )
    resumed = await finish(
        flow.run(
            resume_from=json_round_trip(error.checkpoint),
            schedule=schedule,
            max_concurrency=2,
            budget=TokenUsage(llm_calls=100),
        )
    )
    assert set(resumed.executed) == {"w2", "w3", "w4", "w5"}
    assert resumed.cost == TokenUsage(10, 12, 6)


# --- a limit of one is a sequential run ----------------------------------------------------


def layered(pool: Pool, seed: int) -> Workflow:
    """Three layers, each step depending on every step of the layer before."""
    rng = random.Random(seed)
    layers = [[f"l{k}s{i}" for i in range(width)] for k, width in enumerate((4, 3, 5))]
    steps: list[Step] = []
    for k, layer in enumerate(layers):
        deps = layers[k - 1] if k else []
        for i, name in enumerate(layer):
            cost = TokenUsage(k, i, 1) if rng.random() < 0.7 else None
            steps.append(pool.step(name, *deps, yields=rng.randint(1, 5), cost=cost))
    return Workflow(steps)


@pytest.mark.parametrize("seed", range(5))
async def test_a_limit_of_one_equals_a_sequential_run(seed: int) -> None:
    free = Pool()
    free_checkpoints: list[WorkflowCheckpoint] = []
    unlimited = await finish(layered(free, seed).run(checkpoint_fn=free_checkpoints.append))
    one = Pool()
    one_checkpoints: list[WorkflowCheckpoint] = []
    sequential = await finish(
        layered(one, seed).run(checkpoint_fn=one_checkpoints.append, max_concurrency=1)
    )
    assert dict(sequential.outputs) == dict(unlimited.outputs)
    assert sequential.cost == unlimited.cost
    names = list(unlimited.outputs)
    assert one.log == [event for name in names for event in (f"start:{name}", f"end:{name}")]
    assert one.most == 1
    assert free.most == 5  # without a limit the whole widest layer runs at once
    batches = [tuple(n for n in names if n.startswith(f"l{k}")) for k in range(3)]
    assert [cp.new_outputs for cp in one_checkpoints] == batches
    assert [cp.new_outputs for cp in free_checkpoints] == batches
    assert [cp.outputs for cp in one_checkpoints] == [cp.outputs for cp in free_checkpoints]
    assert [cp.cost for cp in one_checkpoints] == [cp.cost for cp in free_checkpoints]


# --- invalid limits ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 1.5, True, False, "2", 2.0])
@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_invalid_max_concurrency_is_rejected_before_any_step(
    schedule: Schedule, value: object
) -> None:
    pool = Pool()
    flow = Workflow([pool.step("a"), pool.plain("b")])
    msg = f"max_concurrency must be a positive int or None, got {value!r}"
    with pytest.raises(RunArgumentError, match=re.escape(msg)):
        await flow.run(schedule=schedule, max_concurrency=value)  # type: ignore[arg-type]
    with pytest.raises(RunArgumentError, match=re.escape(msg)):
        await asyncio.to_thread(
            flow.run_sync,
            schedule=schedule,
            max_concurrency=value,  # type: ignore[arg-type]
        )
    assert pool.log == []


def test_run_sync_passes_the_limit_on() -> None:
    active = 0
    most = 0

    def step(name: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            nonlocal active, most
            active += 1
            most = max(most, active)
            for _ in range(3):
                await asyncio.sleep(0)
            active -= 1
            return name

        return Step(name, run)

    flow = Workflow([step(name) for name in WIDE])
    result = flow.run_sync(max_concurrency=3, schedule="eager")
    assert most == 3
    assert list(result.outputs) == list(WIDE)
