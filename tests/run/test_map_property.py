"""Resuming a workflow with maps from any checkpoint gives the uninterrupted result.

Over random DAGs whose steps produce lists and whose map steps fan out over
them: for every checkpoint an uninterrupted run took (many of them in the
middle of a map), resuming from its JSON round trip gives the same outputs and
the same total cost, runs each step and each item the checkpoint does not
record exactly once, and never a recorded one. The same holds after items
failed and the run resumed.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)


@dataclass(frozen=True)
class Plan:
    """A random workflow: plain steps make lists, maps fan out over one of them."""

    names: tuple[str, ...]
    deps: dict[str, tuple[str, ...]]
    over: dict[str, str]  # map step -> the step whose list it maps over
    sizes: dict[str, int]  # plain step -> length of the list it returns
    yields: dict[str, int]  # how often a step or item yields before returning
    seed: int


def make_plan(seed: int) -> Plan:
    rng = random.Random(seed)
    count = rng.randint(2, 9)
    names = tuple(f"s{i}" for i in range(count))
    deps: dict[str, tuple[str, ...]] = {}
    over: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for position, name in enumerate(names):
        earlier = names[:position]
        plain = [n for n in earlier if n not in over]
        if plain and rng.random() < 0.45:
            over[name] = rng.choice(plain)
            others = [n for n in earlier if n != over[name]]
            deps[name] = tuple(rng.sample(others, k=min(len(others), rng.randint(0, 1))))
        else:
            deps[name] = tuple(rng.sample(earlier, k=min(len(earlier), rng.randint(0, 2))))
            sizes[name] = rng.randint(0, 6)
    yields = {name: rng.randint(0, 3) for name in names}
    return Plan(names, deps, over, sizes, yields, seed)


class Calls:
    """Counts every call of a step and of an item; optionally fails chosen items."""

    def __init__(self, plan: Plan, failing: frozenset[tuple[str, str]] = frozenset()) -> None:
        self.plan = plan
        self.steps: Counter[str] = Counter()
        self.items: Counter[tuple[str, str]] = Counter()
        self.failing = failing

    def workflow(self) -> Workflow:
        steps: list[Step] = []
        for name in self.plan.names:
            if name in self.plan.over:
                steps.append(
                    Step.map(
                        name,
                        self._item(name),
                        over=self.plan.over[name],
                        depends_on=self.plan.deps[name],
                        key=lambda item: item["key"],
                    )
                )
            else:
                steps.append(Step(name, self._step(name), depends_on=self.plan.deps[name]))
        return Workflow(steps)

    def _step(self, name: str) -> Any:
        plan = self.plan

        async def run(ctx: Any) -> PatternResult[Any]:
            self.steps[name] += 1
            for _ in range(plan.yields[name]):
                await asyncio.sleep(0)
            seen = sorted(str(ctx[dep]) for dep in plan.deps[name])
            heard = len("".join(seen))
            items = [
                {"key": f"{name}-{i}", "n": i, "heard": heard} for i in range(plan.sizes[name])
            ]
            return PatternResult(items, cost=TokenUsage(len(seen) + 1, 1, 1))

        return run

    def _item(self, name: str) -> Any:
        plan = self.plan

        async def run(item: dict[str, Any], ctx: Any) -> PatternResult[Any]:
            key = item["key"]
            self.items[name, key] += 1
            for _ in range((plan.yields[name] + item["n"]) % 4):
                await asyncio.sleep(0)
            if (name, key) in self.failing:
                raise RuntimeError(f"{name}/{key} failed")
            extra = sorted(str(ctx[dep]) for dep in plan.deps[name])
            value = f"{name}:{key}:{item['n']}:{len(''.join(extra))}"
            return PatternResult(value, cost=TokenUsage(item["n"] + 1, 2, 1))

        return run


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


async def check_resumes(plan: Plan, schedule: str) -> int:
    """Every checkpoint of a run resumes to its result; return how many were mid-map."""
    calls = Calls(plan)
    saved: list[WorkflowCheckpoint] = []
    full = await calls.workflow().run(
        checkpoint_fn=saved.append,
        checkpoint_every="step",
        schedule=schedule,  # type: ignore[arg-type]
        run_id="prop",
    )
    assert all(count == 1 for count in calls.steps.values())
    assert all(count == 1 for count in calls.items.values())
    mid_map = 0
    for checkpoint in saved:
        mid_map += bool(checkpoint.items)
        loaded = round_trip(checkpoint)
        again = Calls(plan)
        result = await again.workflow().run(resume_from=loaded, schedule=schedule)  # type: ignore[arg-type]
        assert result.outputs == full.outputs
        assert result.cost == full.cost
        for name in plan.names:
            expected = 0 if name in loaded.outputs or name in plan.over else 1
            assert again.steps[name] == expected, (name, plan)
        for (name, key), count in again.items.items():
            assert count == 1, (name, key)
            assert name not in loaded.outputs
            assert key not in loaded.items.get(name, {"outputs": {}})["outputs"]
        for name in plan.over:
            if name in loaded.outputs:
                continue
            recorded = set(loaded.items.get(name, {"outputs": {}})["outputs"])
            ran = {key for (step, key) in again.items if step == name}
            assert ran | recorded == set(calls_keys(calls, name))
            assert not ran & recorded
    return mid_map


def calls_keys(calls: Calls, name: str) -> list[str]:
    return [key for (step, key) in calls.items if step == name]


@pytest.mark.parametrize("schedule", ["batch", "eager"])
async def test_every_checkpoint_of_random_map_workflows_resumes_exactly(schedule: str) -> None:
    mid_map = 0
    for seed in range(30):
        mid_map += await check_resumes(make_plan(seed), schedule)
    assert mid_map > 10, "the plans must produce checkpoints in the middle of maps"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), schedule=st.sampled_from(["batch", "eager"]))
def test_hypothesis_drawn_map_workflows_resume_exactly(seed: int, schedule: str) -> None:
    asyncio.run(check_resumes(make_plan(seed), schedule))


@pytest.mark.parametrize("seed", range(20))
async def test_after_failed_items_a_resume_runs_only_what_is_missing(seed: int) -> None:
    plan = make_plan(seed)
    reference = Calls(plan)
    full = await reference.workflow().run()
    rng = random.Random(seed)
    keys = sorted(reference.items)
    failing = frozenset(rng.sample(keys, k=min(len(keys), rng.randint(1, 3)))) if keys else None
    if failing is None:
        return  # no map has items in this plan; nothing can fail
    first = Calls(plan, failing)
    with pytest.raises(WorkflowFailed) as caught:
        await first.workflow().run(on_error="continue")
    checkpoint = round_trip(caught.value.checkpoint)
    second = Calls(plan)
    result = await second.workflow().run(resume_from=checkpoint)
    assert result.outputs == full.outputs
    # The failed attempts were paid for too: their cost is not in the result, since
    # they raised, so the totals match the uninterrupted run exactly.
    assert result.cost == full.cost
    for ran in second.items:
        assert first.items[ran] == 0 or ran in failing, ran
    assert all(count == 1 for count in second.items.values())
    for name, key in failing:
        assert second.items[name, key] == 1
