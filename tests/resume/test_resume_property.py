"""The central property: resuming from any checkpoint gives the uninterrupted result.

Over seeded random DAGs (and hypothesis-drawn ones): an uninterrupted run runs
every step once, after its dependencies, batch by batch; resuming from each of
its checkpoints, after a JSON round trip, reproduces its outputs and total cost,
runs every remaining step exactly once and no recorded step at all. The same
holds after an injected failure and from ExecutionKit 0.4 dicts.
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

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    WorkflowResult,
)
from executionkit._checkpoint._value import FORMAT_VERSION

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

SEEDS = range(40)
MAX_STEPS = 25


# --- The random DAG ----------------------------------------------------------------------


@dataclass(frozen=True)
class Dag:
    """A workflow description: names in declaration order and everything per step."""

    names: tuple[str, ...]
    deps: dict[str, tuple[str, ...]]
    is_async: dict[str, bool]
    cost: dict[str, TokenUsage | None]  # None: the step returns a plain value
    yields: dict[str, int]  # how often an async step yields to the loop before returning

    def level(self, name: str, done: frozenset[str] = frozenset()) -> int:
        """Batch number of ``name`` when the steps in ``done`` are already complete."""
        pending = [self.level(dep, done) for dep in self.deps[name] if dep not in done]
        return 1 + max(pending, default=-1)

    def batches(self, done: Iterable[str] = ()) -> list[list[str]]:
        """The batches a run starting with ``done`` complete must take, in order."""
        finished = frozenset(done)
        levels = {name: self.level(name, finished) for name in self.names if name not in finished}
        count = 1 + max(levels.values(), default=-1)
        return [[name for name in self.names if levels.get(name) == k] for k in range(count)]

    def total(self, names: Iterable[str]) -> TokenUsage:
        """The token usage of the steps ``names``."""
        usage = TokenUsage()
        for name in names:
            cost = self.cost[name]
            if cost is not None:
                usage += cost
        return usage


def _build(
    n: int,
    *,
    deps_by_index: list[list[int]],
    order: list[int],
    is_async: list[bool],
    plain: list[bool],
    yields: list[int],
) -> Dag:
    """Steps are created in a topological order, ``i`` depending on some ``j < i``."""
    names = [f"s{i:02d}" for i in range(n)]
    return Dag(
        names=tuple(names[i] for i in order),
        deps={names[i]: tuple(names[j] for j in deps_by_index[i]) for i in range(n)},
        is_async=dict(zip(names, is_async, strict=True)),
        cost={
            # Distinct per step, so a cost counted twice or lost always shows.
            names[i]: None
            if plain[i]
            else TokenUsage(input_tokens=101 + i, output_tokens=7 * (i + 1), llm_calls=1 + i % 3)
            for i in range(n)
        },
        yields=dict(zip(names, yields, strict=True)),
    )


def random_dag(rng: random.Random) -> Dag:
    """A DAG of 1..25 steps; declaration order is shuffled half of the time."""
    n = rng.randint(1, MAX_STEPS)
    deps_by_index = [
        rng.sample(range(i), rng.randint(0, min(i, rng.choice([1, 2, 3, 4])))) for i in range(n)
    ]
    order = list(range(n))
    if rng.random() < 0.5:
        rng.shuffle(order)
    return _build(
        n,
        deps_by_index=deps_by_index,
        order=order,
        is_async=[rng.random() < 0.5 for _ in range(n)],
        plain=[rng.random() < 0.25 for _ in range(n)],
        yields=[rng.randint(0, 3) for _ in range(n)],
    )


@st.composite
def dags(draw: st.DrawFn) -> Dag:
    n = draw(st.integers(1, 12))
    deps_by_index = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)
    ]
    return _build(
        n,
        deps_by_index=deps_by_index,
        order=draw(st.permutations(range(n))),
        is_async=draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        plain=draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        yields=draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
    )


# --- Running it --------------------------------------------------------------------------


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def output_of(name: str, deps: tuple[str, ...], ctx: Mapping[str, Any]) -> dict[str, Any]:
    """A deterministic JSON-able function of the step's name and what it reads."""
    return {
        "step": name,
        "deps": [[dep, _digest(ctx[dep])] for dep in deps],
        "ctx": _digest(dict(ctx)),
        "keys": list(ctx),
    }


@dataclass
class Harness:
    """Builds the workflow of a `Dag` and records what its steps did."""

    dag: Dag
    fail: str | None = None  # this step raises on its first call
    restored: frozenset[str] = frozenset()
    calls: Counter[str] = field(default_factory=Counter)
    starts: list[str] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)
    early: list[tuple[str, str]] = field(default_factory=list)  # (step, unfinished dependency)
    checkpoints: list[WorkflowCheckpoint] = field(default_factory=list)

    def _start(self, name: str) -> None:
        self.calls[name] += 1
        self.starts.append(name)
        self.early.extend(
            (name, dep)
            for dep in self.dag.deps[name]
            if dep not in self.finished and dep not in self.restored
        )
        if name == self.fail and self.calls[name] == 1:
            msg = f"injected failure in {name}"
            raise RuntimeError(msg)

    def _finish(self, name: str, ctx: Mapping[str, Any]) -> Any:
        value = output_of(name, self.dag.deps[name], ctx)
        self.finished.add(name)
        cost = self.dag.cost[name]
        return value if cost is None else PatternResult(value, cost=cost)

    def _step_fn(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        if self.dag.is_async[name]:

            async def run_async(ctx: Mapping[str, Any]) -> Any:
                self._start(name)
                for _ in range(self.dag.yields[name]):
                    await asyncio.sleep(0)  # a yield, so batch-mates finish out of order
                return self._finish(name, ctx)

            return run_async

        def run_sync(ctx: Mapping[str, Any]) -> Any:
            self._start(name)
            return self._finish(name, ctx)

        return run_sync

    def workflow(self) -> Workflow:
        return Workflow(
            [
                Step(name, self._step_fn(name), depends_on=self.dag.deps[name])
                for name in self.dag.names
            ]
        )

    async def run(
        self,
        initial: Mapping[str, Any] | None,
        resume_from: WorkflowCheckpoint | None = None,
    ) -> WorkflowResult:
        return await self.workflow().run(
            initial, checkpoint_fn=self.checkpoints.append, resume_from=resume_from
        )


def _initial(seed: int) -> dict[str, Any]:
    return {"seed": seed, "label": "resume-property", "params": {"t": [1, 2]}}


def _json_round_trip(data: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))


def _new_per_checkpoint(
    checkpoints: list[WorkflowCheckpoint], before: Iterable[str]
) -> list[list[str]]:
    seen = list(before)
    batches: list[list[str]] = []
    for checkpoint in checkpoints:
        recorded = list(checkpoint.outputs)
        assert set(recorded[: len(seen)]) == set(seen)
        batches.append([name for name in recorded if name not in seen])
        seen = recorded
    return batches


def _check_checkpoints(
    dag: Dag,
    checkpoints: list[WorkflowCheckpoint],
    *,
    run_id: str,
    first_seq: int,
    context_keys: tuple[str, ...],
) -> None:
    for offset, checkpoint in enumerate(checkpoints):
        assert checkpoint.seq == first_seq + offset
        assert checkpoint.step_index == len(checkpoint.outputs)
        assert checkpoint.run_id == run_id
        assert checkpoint.cost == dag.total(checkpoint.outputs)
        assert checkpoint.context_keys == context_keys
        assert set(checkpoint.outputs) <= set(dag.names)  # context values never written
        assert checkpoint.version == FORMAT_VERSION


@dataclass(frozen=True)
class Baseline:
    result: WorkflowResult
    checkpoints: list[WorkflowCheckpoint]


async def uninterrupted(dag: Dag, initial: dict[str, Any]) -> Baseline:
    """Run without interruption and check everything that run promises."""
    harness = Harness(dag)
    result = await harness.run(initial)
    assert harness.calls == Counter(dict.fromkeys(dag.names, 1))
    assert harness.early == []
    assert list(result.outputs) == list(dag.names)
    assert result.cost == dag.total(dag.names)
    assert result.restored == ()
    expected = dag.batches()
    assert list(result.executed) == [name for batch in expected for name in batch]
    assert _new_per_checkpoint(harness.checkpoints, ()) == expected
    _check_checkpoints(
        dag,
        harness.checkpoints,
        run_id=result.run_id,
        first_seq=1,
        context_keys=tuple(sorted(initial)),
    )
    final = harness.checkpoints[-1]
    assert final.outputs == result.outputs
    assert final.cost == result.cost
    return Baseline(result, harness.checkpoints)


async def check_resume(
    dag: Dag,
    baseline: Baseline,
    checkpoint: WorkflowCheckpoint,
    initial: dict[str, Any] | None,
) -> Harness:
    """Resume from ``checkpoint`` and check it completes the baseline's run exactly."""
    recorded = frozenset(checkpoint.outputs) & set(dag.names)
    remaining = [name for name in dag.names if name not in recorded]
    harness = Harness(dag, restored=recorded)
    result = await harness.run(initial, resume_from=checkpoint)
    assert dict(result.outputs) == dict(baseline.result.outputs)
    assert list(result.outputs) == list(dag.names)
    assert result.cost == baseline.result.cost
    assert harness.calls == Counter(dict.fromkeys(remaining, 1))
    assert harness.early == []
    assert result.restored == tuple(name for name in dag.names if name in recorded)
    expected = dag.batches(recorded)
    assert list(result.executed) == [name for batch in expected for name in batch]
    assert _new_per_checkpoint(harness.checkpoints, recorded) == expected
    if checkpoint.run_id is not None:
        assert result.run_id == checkpoint.run_id
    _check_checkpoints(
        dag,
        harness.checkpoints,
        run_id=result.run_id,
        first_seq=checkpoint.seq + 1,
        context_keys=baseline.checkpoints[0].context_keys,
    )
    for new in harness.checkpoints:
        assert dict(new.errors) == {}
    if not remaining:
        assert harness.checkpoints == []
    return harness


async def check_every_checkpoint(dag: Dag, seed: int) -> None:
    initial = _initial(seed)
    baseline = await uninterrupted(dag, initial)
    for checkpoint in baseline.checkpoints:
        loaded = _json_round_trip(checkpoint.to_dict())
        assert loaded == checkpoint
        await check_resume(dag, baseline, loaded, dict(initial))


# --- The tests ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
async def test_resume_from_every_checkpoint(seed: int) -> None:
    await check_every_checkpoint(random_dag(random.Random(seed)), seed)


@pytest.mark.parametrize("seed", SEEDS)
async def test_resume_from_the_final_checkpoint_calls_nothing(seed: int) -> None:
    dag = random_dag(random.Random(seed))
    initial = _initial(seed)
    baseline = await uninterrupted(dag, initial)
    final = _json_round_trip(baseline.checkpoints[-1].to_dict())
    harness = await check_resume(dag, baseline, final, initial)
    assert harness.calls == Counter()
    assert harness.checkpoints == []
    assert harness.starts == []


@pytest.mark.parametrize("seed", SEEDS)
async def test_resume_after_an_injected_failure(seed: int) -> None:
    rng = random.Random(seed)
    dag = random_dag(rng)
    failing = rng.choice(dag.names)
    initial = _initial(seed)
    baseline = await uninterrupted(dag, initial)

    first = Harness(dag, fail=failing)
    with pytest.raises(WorkflowFailed) as info:
        await first.run(initial)
    failed_at = dag.level(failing)
    completed = {
        name
        for name in dag.names
        if dag.level(name) < failed_at or (dag.level(name) == failed_at and name != failing)
    }
    checkpoint = info.value.checkpoint
    assert set(checkpoint.outputs) == completed
    assert checkpoint.step_index == len(completed)
    assert checkpoint.cost == dag.total(completed)
    assert checkpoint.seq == failed_at + 1
    assert dict(checkpoint.errors) == {failing: f"RuntimeError: injected failure in {failing}"}
    assert checkpoint is first.checkpoints[-1]
    assert list(info.value.errors) == [failing]
    assert str(info.value.errors[failing]) == f"injected failure in {failing}"
    assert first.calls == Counter(dict.fromkeys([*completed, failing], 1))
    for name in completed:
        assert checkpoint.outputs[name] == baseline.result.outputs[name]

    resumed = await check_resume(
        dag, baseline, _json_round_trip(checkpoint.to_dict()), dict(initial)
    )
    assert resumed.calls[failing] == 1
    assert not set(resumed.calls) & completed


@pytest.mark.parametrize("seed", SEEDS)
async def test_resume_from_a_0_4_dict(seed: int) -> None:
    dag = random_dag(random.Random(seed))
    initial = _initial(seed)
    baseline = await uninterrupted(dag, initial)
    for checkpoint in baseline.checkpoints:
        # ExecutionKit 0.4 wrote only these three keys, with the initial context
        # inside `outputs`; it is resumed without passing initial_context again.
        legacy = {
            "step_index": checkpoint.step_index,
            "outputs": {**initial, **checkpoint.outputs},
            "cost": {
                "input_tokens": checkpoint.cost.input_tokens,
                "output_tokens": checkpoint.cost.output_tokens,
                "llm_calls": checkpoint.cost.llm_calls,
            },
        }
        loaded = _json_round_trip(legacy)
        assert loaded.version == 0
        harness = await check_resume(dag, baseline, loaded, None)
        if harness.checkpoints:
            assert harness.checkpoints[0].seq == 1


@settings(max_examples=100, deadline=None)
@given(dag=dags(), seed=st.integers(0, 2**16))
def test_resume_property_on_drawn_dags(dag: Dag, seed: int) -> None:
    asyncio.run(check_every_checkpoint(dag, seed))


def test_the_generator_covers_the_interesting_shapes() -> None:
    """Guard the test data itself: sizes, shapes and step kinds all occur."""
    generated = [random_dag(random.Random(seed)) for seed in SEEDS]
    sizes = [len(dag.names) for dag in generated]
    assert min(sizes) <= 3
    assert max(sizes) >= 20
    assert any(len(dag.batches()) >= 4 for dag in generated)
    assert any(max(map(len, dag.batches())) >= 4 for dag in generated)
    assert any(list(dag.names) != sorted(dag.names) for dag in generated)
    kinds = Counter((dag.is_async[n], dag.cost[n] is None) for dag in generated for n in dag.names)
    assert len(kinds) == 4
    assert any(len(deps) >= 2 for dag in generated for deps in dag.deps.values())
