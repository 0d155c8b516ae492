"""Resuming with conditions: any checkpoint, after a JSON round trip, completes the same run.

Over seeded random DAGs (and hypothesis-drawn ones) whose steps get random
conditions (a verdict drawn from the seed) and random joins: an uninterrupted
run skips exactly what the rules say, with the reasons they give, and calls
each condition at most once; resuming from each of its checkpoints reproduces
its outputs, skips and cost, runs each unrecorded step exactly once and no
recorded one, and never calls a recorded step's condition. Bumping the version
of a step invalidates it and everything after it, skips included, and their
conditions are called again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executionkit import PatternResult, Step, TokenUsage, Workflow, WorkflowCheckpoint

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from executionkit import WorkflowResult

SEEDS = range(40)
SCHEDULES = [
    pytest.param({"schedule": "batch"}, id="batch"),
    pytest.param({"schedule": "batch", "checkpoint_every": "step"}, id="batch-step"),
    pytest.param({"schedule": "eager"}, id="eager"),
]


@dataclass(frozen=True)
class Dag:
    """Names in declaration order, dependencies, and each step's kind, join and condition."""

    names: tuple[str, ...]
    deps: dict[str, tuple[str, ...]]
    is_async: dict[str, bool]
    yields: dict[str, int]
    join: dict[str, str]
    verdict: dict[str, bool | None]  # None: no condition

    def outcome(self) -> tuple[dict[str, str], set[str]]:
        """What the rules say: the skipped steps with their reasons, the conditions asked."""
        skipped: dict[str, str] = {}
        asked: set[str] = set()
        for name in self.topological():
            deps = self.deps[name]
            gone = [dep for dep in deps if dep in skipped]
            if self.join[name] == "all" and gone:
                skipped[name] = f"dependency {gone[0]!r} was skipped"
                continue
            if self.join[name] == "any" and deps and len(gone) == len(deps):
                names = ", ".join(map(repr, deps))
                skipped[name] = f"every dependency was skipped ({names})"
                continue
            verdict = self.verdict[name]
            if verdict is None:
                continue
            asked.add(name)
            if not verdict:
                skipped[name] = f"condition {name}_when returned False"
        return skipped, asked

    def topological(self) -> list[str]:
        done: list[str] = []
        seen: set[str] = set()

        def visit(name: str) -> None:
            if name in seen:
                return
            seen.add(name)
            for dep in self.deps[name]:
                visit(dep)
            done.append(name)

        for name in self.names:
            visit(name)
        return done

    def levels(self) -> list[set[str]]:
        """The batches of a fresh run: skipped steps take their place like any other."""
        level: dict[str, int] = {}
        for name in self.topological():
            level[name] = 1 + max((level[dep] for dep in self.deps[name]), default=-1)
        count = 1 + max(level.values(), default=-1)
        return [{name for name in self.names if level[name] == k} for k in range(count)]

    def descendants(self, name: str) -> set[str]:
        found = {name}
        changed = True
        while changed:
            changed = False
            for step in self.names:
                if step not in found and any(dep in found for dep in self.deps[step]):
                    found.add(step)
                    changed = True
        return found

    def cost(self, name: str) -> TokenUsage:
        i = self.names.index(name)
        return TokenUsage(input_tokens=101 + i, output_tokens=7 * (i + 1), llm_calls=1 + i % 3)

    def total(self, names: Iterable[str]) -> TokenUsage:
        usage = TokenUsage()
        for name in names:
            usage += self.cost(name)
        return usage


def _build(
    n: int,
    deps_by_index: list[list[int]],
    order: list[int],
    *,
    is_async: list[bool],
    yields: list[int],
    join_any: list[bool],
    verdict: list[bool | None],
) -> Dag:
    names = [f"s{i:02d}" for i in range(n)]
    return Dag(
        names=tuple(names[i] for i in order),
        deps={names[i]: tuple(names[j] for j in deps_by_index[i]) for i in range(n)},
        is_async=dict(zip(names, is_async, strict=True)),
        yields=dict(zip(names, yields, strict=True)),
        join={names[i]: "any" if join_any[i] else "all" for i in range(n)},
        verdict=dict(zip(names, verdict, strict=True)),
    )


def random_dag(rng: random.Random) -> Dag:
    n = rng.randint(1, 20)
    deps_by_index = [rng.sample(range(i), rng.randint(0, min(i, 3))) for i in range(n)]
    order = list(range(n))
    if rng.random() < 0.5:
        rng.shuffle(order)
    return _build(
        n,
        deps_by_index,
        order,
        is_async=[rng.random() < 0.5 for _ in range(n)],
        yields=[rng.randint(0, 3) for _ in range(n)],
        join_any=[rng.random() < 0.4 for _ in range(n)],
        verdict=[rng.choice([None, None, True, False]) for _ in range(n)],
    )


@st.composite
def dags(draw: st.DrawFn) -> Dag:
    n = draw(st.integers(1, 10))
    deps_by_index = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)
    ]
    return _build(
        n,
        deps_by_index,
        draw(st.permutations(range(n))),
        is_async=draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        yields=draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
        join_any=draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        verdict=draw(st.lists(st.sampled_from([None, True, False]), min_size=n, max_size=n)),
    )


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Harness:
    """Builds the workflow of a `Dag` and counts the calls of its steps and conditions."""

    dag: Dag
    bumped: str | None = None
    calls: Counter[str] = field(default_factory=Counter)
    asked: Counter[str] = field(default_factory=Counter)
    seen: dict[str, list[str]] = field(default_factory=dict)
    checkpoints: list[WorkflowCheckpoint] = field(default_factory=list)

    def _condition(self, name: str) -> Callable[[Mapping[str, Any]], bool]:
        def condition(ctx: Mapping[str, Any]) -> bool:
            self.asked[name] += 1
            self.seen[f"{name}?"] = list(ctx)
            return bool(self.dag.verdict[name])

        condition.__name__ = f"{name}_when"
        return condition

    def _run(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        def finish(ctx: Mapping[str, Any]) -> Any:
            self.calls[name] += 1
            self.seen[name] = list(ctx)
            value = {"step": name, "ctx": _digest(dict(ctx))}
            return PatternResult(value, cost=self.dag.cost(name))

        if not self.dag.is_async[name]:
            return finish

        async def run_async(ctx: Mapping[str, Any]) -> Any:
            for _ in range(self.dag.yields[name]):
                await asyncio.sleep(0)
            return finish(ctx)

        return run_async

    def workflow(self) -> Workflow:
        dag = self.dag
        return Workflow(
            [
                Step(
                    name,
                    self._run(name),
                    depends_on=dag.deps[name],
                    when=None if dag.verdict[name] is None else self._condition(name),
                    join="any" if dag.join[name] == "any" else "all",
                    version="2" if name == self.bumped else None,
                )
                for name in dag.names
            ]
        )

    async def run(
        self, options: dict[str, Any], resume_from: WorkflowCheckpoint | None = None
    ) -> WorkflowResult:
        return await self.workflow().run(
            {"seed": 1}, checkpoint_fn=self.checkpoints.append, resume_from=resume_from, **options
        )


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def _check_checkpoint(dag: Dag, checkpoint: WorkflowCheckpoint, skipped: dict[str, str]) -> None:
    assert set(checkpoint.outputs).isdisjoint(skipped)
    assert {name: skipped[name] for name in checkpoint.skipped} == dict(checkpoint.skipped)
    assert checkpoint.cost == dag.total(checkpoint.outputs)
    assert set(checkpoint.step_info) == {*checkpoint.outputs, *checkpoint.skipped}


async def uninterrupted(dag: Dag, options: dict[str, Any]) -> tuple[WorkflowResult, Harness]:
    skipped, asked = dag.outcome()
    ran = [name for name in dag.names if name not in skipped]
    harness = Harness(dag)
    result = await harness.run(options)
    assert list(result.outputs) == ran
    assert dict(result.skipped) == {name: skipped[name] for name in dag.names if name in skipped}
    assert list(result.skipped) == [name for name in dag.names if name in skipped]
    assert harness.calls == Counter(dict.fromkeys(ran, 1))
    assert harness.asked == Counter(dict.fromkeys(asked, 1))
    assert result.cost == dag.total(ran)
    for checkpoint in harness.checkpoints:
        _check_checkpoint(dag, checkpoint, skipped)
    if options == {"schedule": "batch"}:
        completed: set[str] = set()
        per_checkpoint = []
        for checkpoint in harness.checkpoints:
            now = {*checkpoint.outputs, *checkpoint.skipped}
            per_checkpoint.append(now - completed)
            completed = now
        assert per_checkpoint == dag.levels()
    final = harness.checkpoints[-1]
    assert dict(final.outputs) == dict(result.outputs)
    assert dict(final.skipped) == dict(result.skipped)
    return result, harness


async def check_every_checkpoint(dag: Dag, options: dict[str, Any]) -> None:
    baseline, first = await uninterrupted(dag, options)
    _, asked = dag.outcome()
    for checkpoint in first.checkpoints:
        loaded = round_trip(checkpoint)
        assert loaded == checkpoint
        recorded = {*loaded.outputs, *loaded.skipped}
        harness = Harness(dag)
        result = await harness.run(options, resume_from=loaded)
        assert dict(result.outputs) == dict(baseline.outputs)
        assert dict(result.skipped) == dict(baseline.skipped)
        assert result.cost == baseline.cost
        assert result.invalidated == {}
        left = [n for n in dag.names if n not in recorded and n not in baseline.skipped]
        assert harness.calls == Counter(dict.fromkeys(left, 1))
        assert harness.asked == Counter(dict.fromkeys(asked - recorded, 1))
        assert result.restored == tuple(n for n in dag.names if n in loaded.outputs)
        assert set(result.executed) == set(left)
        # Conditions and steps see what they saw in the uninterrupted run.
        assert {key: first.seen[key] for key in harness.seen} == harness.seen
        for later in harness.checkpoints:
            assert later.seq > loaded.seq
            _check_checkpoint(dag, later, dict(baseline.skipped))


async def check_a_version_bump(dag: Dag, bumped: str, options: dict[str, Any]) -> None:
    baseline, first = await uninterrupted(dag, options)
    _, asked = dag.outcome()
    final = round_trip(first.checkpoints[-1])
    again = dag.descendants(bumped)
    harness = Harness(dag, bumped=bumped)
    result = await harness.run(options, resume_from=final)
    assert set(result.invalidated) == again
    for name, reason in result.invalidated.items():
        assert reason.startswith("recorded skip dropped: ") == (name in baseline.skipped)
    assert dict(result.outputs) == dict(baseline.outputs)
    assert dict(result.skipped) == dict(baseline.skipped)
    assert harness.asked == Counter(dict.fromkeys(asked & again, 1))
    ran = [n for n in dag.names if n in again and n not in baseline.skipped]
    assert harness.calls == Counter(dict.fromkeys(ran, 1))
    assert result.cost == baseline.cost + dag.total(ran)


@pytest.mark.parametrize("options", SCHEDULES)
@pytest.mark.parametrize("seed", SEEDS)
async def test_resume_from_every_checkpoint(seed: int, options: dict[str, Any]) -> None:
    await check_every_checkpoint(random_dag(random.Random(seed)), options)


@pytest.mark.parametrize("options", SCHEDULES)
@pytest.mark.parametrize("seed", SEEDS)
async def test_a_version_bump_decides_again(seed: int, options: dict[str, Any]) -> None:
    rng = random.Random(seed)
    dag = random_dag(rng)
    await check_a_version_bump(dag, rng.choice(dag.names), options)


@settings(max_examples=60, deadline=None)
@given(dag=dags(), eager=st.booleans())
def test_drawn_dags(dag: Dag, eager: bool) -> None:
    options = {"schedule": "eager" if eager else "batch"}
    asyncio.run(check_every_checkpoint(dag, options))


def test_the_generator_covers_the_interesting_shapes() -> None:
    """Guard the test data: skips of every kind, joins that run after a skip, conditions."""
    generated = [random_dag(random.Random(seed)) for seed in SEEDS]
    reasons: Counter[str] = Counter()
    joined_after_a_skip = 0
    for dag in generated:
        skipped, _ = dag.outcome()
        reasons.update(reason.split(" ")[0] for reason in skipped.values())
        joined_after_a_skip += sum(
            1
            for name in dag.names
            if dag.join[name] == "any"
            and name not in skipped
            and any(dep in skipped for dep in dag.deps[name])
        )
    assert reasons["condition"] >= 10
    assert reasons["dependency"] >= 10
    assert reasons["every"] >= 3
    assert joined_after_a_skip >= 3
    assert max(len(dag.names) for dag in generated) >= 15
