"""``max_concurrency`` is one pool: steps, map items and sub-workflows' steps share it.

The bug this pins: with ``run(..., max_concurrency=2)``, two maps of 8 items ran 4
items at once (each map step counted once, each map ran up to 2 items). Now every
unit of work (a step, an item, a child's step) takes one slot of the run's pool;
a map or a sub-workflow step takes none itself (decision 0009). A property test
over random workflows mixing plain and async steps, maps, maps of children and
sub-workflows checks that the limit is never exceeded at any moment, in both
schedules, and that every run still completes with the same outputs.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow

if TYPE_CHECKING:
    from executionkit._define._options import Schedule

SCHEDULES: list[Schedule] = ["batch", "eager"]


class Gauge:
    """Counts the units of work running at once, and the most ever seen.

    Plain steps run in worker threads: every count is taken under a lock.
    """

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.done = 0
        self._lock = threading.Lock()

    def _enter(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def _leave(self) -> None:
        with self._lock:
            self.now -= 1
            self.done += 1

    async def work(self, turns: int) -> None:
        self._enter()
        try:
            for _ in range(turns):
                await asyncio.sleep(0)  # yields to whatever else may start: never waits
        finally:
            self._leave()

    def plain(self) -> None:
        self._enter()
        self._leave()


def two_maps(gauge: Gauge) -> Workflow:
    async def item(value: int, ctx: Any) -> int:
        await gauge.work(3)
        return value * 2

    return Workflow(
        [
            Step.map("first", item, over="numbers"),
            Step.map("second", item, over="numbers"),
        ]
    )


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("limit", [1, 2, 3])
def test_two_maps_of_eight_items_never_run_more_than_the_limit(
    schedule: Schedule, limit: int
) -> None:
    """The reported case: two maps of 8 items under max_concurrency run at most the limit."""
    gauge = Gauge()
    result = two_maps(gauge).run_sync(
        {"numbers": list(range(8))}, max_concurrency=limit, schedule=schedule
    )
    assert gauge.most == limit
    assert gauge.done == 16
    assert result.outputs["first"] == [n * 2 for n in range(8)]


def test_a_maps_own_limit_bounds_it_further() -> None:
    """max_concurrency on the map is the lower of the two limits for its items."""
    gauge = Gauge()

    async def item(value: int, ctx: Any) -> int:
        await gauge.work(3)
        return value

    workflow = Workflow([Step.map("m", item, over="numbers", max_concurrency=2)])
    workflow.run_sync({"numbers": list(range(10))}, max_concurrency=5)
    assert gauge.most == 2


def test_children_take_their_parents_slots() -> None:
    """A map of sub-workflows: the children's steps together stay within the run's limit."""
    gauge = Gauge()

    async def step(ctx: Any) -> int:
        await gauge.work(3)
        return 1

    child = Workflow([Step("a", step), Step("b", step), Step("c", step, depends_on=("a",))])
    workflow = Workflow(
        [
            Step.map("children", child, over="names"),
            Step("beside", step),
        ]
    )
    result = workflow.run_sync({"names": ["x", "y", "z", "w"]}, max_concurrency=2)
    assert gauge.most == 2
    assert gauge.done == 13
    assert len(result.outputs["children"]) == 4


def random_workflow(rng: random.Random, gauge: Gauge, depth: int = 0) -> Workflow:
    """A random DAG of plain and async steps, maps, maps of children and sub-workflows."""

    async def async_step(ctx: Any) -> int:
        await gauge.work(rng.randint(1, 4))
        return 1

    def plain_step(ctx: Any) -> int:
        gauge.plain()
        return 1

    async def async_item(value: int, ctx: Any) -> int:
        await gauge.work(rng.randint(1, 4))
        return value

    def plain_item(value: int, ctx: Any) -> int:
        gauge.plain()
        return value

    steps: list[Step] = []
    for index in range(rng.randint(3, 8)):
        name = f"s{depth}_{index}"
        earlier = [step.name for step in steps]
        deps = tuple(rng.sample(earlier, k=min(len(earlier), rng.randint(0, 2))))
        kind = rng.choice(
            ["async", "async", "plain", "map", "plain map", "child", "children"]
            if depth == 0
            else ["async", "plain", "map"]
        )
        if kind == "async":
            steps.append(Step(name, async_step, depends_on=deps))
        elif kind == "plain":
            steps.append(Step(name, plain_step, depends_on=deps))
        elif kind in {"map", "plain map"}:
            own = rng.choice([None, None, 1, 2])
            run = async_item if kind == "map" else plain_item
            steps.append(Step.map(name, run, over="numbers", depends_on=deps, max_concurrency=own))
        elif kind == "child":
            steps.append(Step(name, random_workflow(rng, gauge, depth + 1), depends_on=deps))
        else:
            child = random_workflow(rng, gauge, depth + 1)
            steps.append(Step.map(name, child, over="names", depends_on=deps))
    return Workflow(steps, inputs=("numbers", "names"))


@pytest.mark.parametrize("seed", range(40))
def test_random_workflows_never_exceed_the_limit(seed: int) -> None:
    """At no moment do more units of work run than max_concurrency, in either schedule."""
    rng = random.Random(seed)
    limit = rng.randint(1, 4)
    schedule = rng.choice(SCHEDULES)
    gauge = Gauge()
    workflow = random_workflow(rng, gauge)
    context = {"numbers": list(range(rng.randint(0, 6))), "names": ["p", "q", "r"]}
    result = workflow.run_sync(context, max_concurrency=limit, schedule=schedule)
    assert gauge.most <= limit, (seed, limit, schedule, gauge.most)
    assert gauge.now == 0
    unlimited = Gauge()
    rng = random.Random(seed)
    rng.randint(1, 4)
    rng.choice(SCHEDULES)
    again = random_workflow(rng, unlimited).run_sync(context, schedule=schedule)
    assert dict(again.outputs) == dict(result.outputs)
    assert unlimited.done == gauge.done


async def test_a_run_a_childs_step_starts_by_hand_is_a_run_of_its_own() -> None:
    """A step of a sub-workflow awaiting another workflow's run does not wait for its slot."""
    inner = Workflow([Step("leaf", lambda ctx: 1)])

    async def calls_by_hand(ctx: Any) -> int:
        result = await inner.run(max_concurrency=1)
        return int(result.outputs["leaf"])

    child = Workflow([Step("by_hand", calls_by_hand)])
    parent = Workflow([Step("sub", child), Step("also", calls_by_hand)])
    async with asyncio.timeout(10):  # bounds a hang; it ends in milliseconds
        result = await parent.run(max_concurrency=1)
    assert result.outputs == {"sub": {"by_hand": 1}, "also": 1}
