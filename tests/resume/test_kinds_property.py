"""Maps, conditions and questions together, over random DAGs: every checkpoint resumes exactly.

A random workflow mixes plain steps (each producing a short list), map steps
over one of them, steps with a condition (some with ``join="any"``) and ask
steps. The reference run answers each question as soon as it is asked. Then,
from every checkpoint any of its runs took, a resume through JSON (answering
whatever is pending, again and again until nothing is) must end with the same
outputs and cost, never run a recorded step or item again, run each other one
at most once, and never evaluate a recorded condition again.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from executionkit import PatternResult, Step, TokenUsage, Workflow, WorkflowCheckpoint


@dataclass(frozen=True)
class Plan:
    names: tuple[str, ...]
    kinds: dict[str, str]  # "plain", "map", "ask", "when"
    deps: dict[str, tuple[str, ...]]
    over: dict[str, str]
    joins: dict[str, str]
    seed: int


def make_plan(seed: int) -> Plan:
    rng = random.Random(seed)
    names = tuple(f"k{i}" for i in range(rng.randint(3, 9)))
    kinds: dict[str, str] = {}
    deps: dict[str, tuple[str, ...]] = {}
    over: dict[str, str] = {}
    joins: dict[str, str] = {}
    for position, name in enumerate(names):
        earlier = list(names[:position])
        listy = [n for n in earlier if kinds[n] in ("plain", "when")]
        kind = rng.choice(["plain", "plain", "map", "ask", "when"])
        if kind == "map" and not listy:
            kind = "plain"
        kinds[name] = kind
        if kind == "map":
            over[name] = rng.choice(listy)
            deps[name] = ()
        else:
            deps[name] = tuple(rng.sample(earlier, k=min(len(earlier), rng.randint(0, 2))))
        joins[name] = rng.choice(["all", "any"]) if deps[name] else "all"
    return Plan(names, kinds, deps, over, joins, seed)


class Calls:
    """Counts step calls, item calls and condition evaluations of one run (or chain)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.steps: Counter[str] = Counter()
        self.items: Counter[tuple[str, str]] = Counter()
        self.conditions: Counter[str] = Counter()

    def workflow(self) -> Workflow:
        plan = self.plan
        steps: list[Step] = []
        for name in plan.names:
            kind = plan.kinds[name]
            if kind == "map":
                steps.append(
                    Step.map(name, self._item(name), over=plan.over[name], key=lambda item: item)
                )
            elif kind == "ask":
                steps.append(Step.ask(name, _question(name), depends_on=plan.deps[name]))
            else:
                steps.append(
                    Step(
                        name,
                        self._step(name),
                        depends_on=plan.deps[name],
                        when=self._condition(name) if kind == "when" else None,
                        join=plan.joins[name],  # type: ignore[arg-type]
                    )
                )
        return Workflow(steps)

    def _step(self, name: str) -> Any:
        def run(ctx: Any) -> PatternResult[list[str]]:
            self.steps[name] += 1
            heard = sorted(str(ctx[dep]) for dep in self.plan.deps[name] if dep in ctx)
            size = (len("".join(heard)) + self.plan.seed) % 4
            return PatternResult([f"{name}-{i}" for i in range(size)], cost=TokenUsage(1, size, 1))

        return run

    def _item(self, name: str) -> Any:
        def run(item: str, ctx: Any) -> PatternResult[str]:
            self.items[name, item] += 1
            return PatternResult(item.upper(), cost=TokenUsage(2, 1, 1))

        return run

    def _condition(self, name: str) -> Any:
        def decide(ctx: Any) -> bool:
            self.conditions[name] += 1
            heard = "".join(sorted(str(ctx[dep]) for dep in self.plan.deps[name] if dep in ctx))
            return (len(heard) + self.plan.seed + len(name)) % 3 != 0

        return decide


def _question(name: str) -> Any:
    return lambda ctx: f"{name}?"


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def run_to_the_end(
    calls: Calls, saved: list[WorkflowCheckpoint], resume_from: WorkflowCheckpoint | None
) -> Any:
    """Run, answering every pending question, until the run is no longer suspended."""
    workflow = calls.workflow()
    result = workflow.run_sync(resume_from=resume_from, checkpoint_fn=saved.append)
    while result.pending:
        answers = {name: f"answer to {name}" for name in result.pending}
        # A suspended run that changed nothing takes no checkpoint: the last one stands.
        latest = round_trip(saved[-1]) if saved else resume_from
        result = workflow.run_sync(resume_from=latest, answers=answers, checkpoint_fn=saved.append)
    return result


@pytest.mark.parametrize("seed", range(40))
def test_every_checkpoint_of_a_mixed_workflow_resumes_exactly(seed: int) -> None:
    plan = make_plan(seed)
    reference = Calls(plan)
    saved: list[WorkflowCheckpoint] = []
    expected = run_to_the_end(reference, saved, None)
    assert all(count == 1 for count in reference.steps.values())
    assert all(count == 1 for count in reference.items.values())
    assert all(count == 1 for count in reference.conditions.values())
    for checkpoint in saved:
        start = round_trip(checkpoint)
        calls = Calls(plan)
        result = run_to_the_end(calls, [], start)
        assert result.outputs == expected.outputs
        assert result.cost == expected.cost
        assert dict(result.skipped) == dict(expected.skipped)
        decided = {*start.outputs, *start.skipped}
        for name in plan.names:
            assert calls.steps[name] <= 1
            if name in decided:
                assert calls.steps[name] == 0, (name, seed)
                assert calls.conditions[name] == 0, (name, seed)
        for (name, key), count in calls.items.items():
            assert count == 1
            assert name not in start.outputs
            assert key not in start.items.get(name, {"outputs": {}})["outputs"]
