"""Failed steps: the three ``on_error`` modes, `WorkflowFailed`, and resuming after a failure.

Ordering inside a batch is pinned with `asyncio.Event` gates, never with timed waits. A
gate that must open only after the runner has seen how a step ended is set from a
done-callback of that step's task: the runner registers its own done-callback when it
creates the task, before the step body runs, and asyncio calls done-callbacks in
registration order.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pytest

from executionkit import (
    ExecutionKitError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from executionkit._define._options import OnError

MODES: tuple[OnError, ...] = ("finish", "cancel", "continue")


def set_when_recorded(event: asyncio.Event) -> None:
    """Set ``event`` once the runner has recorded how the calling step's task ended."""
    task = asyncio.current_task()
    assert task is not None
    task.add_done_callback(lambda _: event.set())


def json_round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


# --- one failing batch, three modes --------------------------------------------------------


FULL_OUTPUTS = {
    "quick": "q",
    "fail": "f",
    "slow": "s",
    "after_quick": "q+",
    "after_slow": "s+",
    "after_fail": "f+",
    "tail": "q++",
}


class FailingBatch:
    """Batch 1: quick, fail, slow. Batch 2: after_quick, after_slow, after_fail. Batch 3: tail.

    While ``broken``: quick completes and is recorded; then fail raises; slow waits until
    the runner has recorded that failure and only then finishes (or is cancelled).
    """

    def __init__(self) -> None:
        self.log: list[str] = []
        self.calls: Counter[str] = Counter()
        self.broken = True
        self.error = ValueError("boom")
        self.quick_recorded = asyncio.Event()
        self.fail_recorded = asyncio.Event()
        self.checkpoints: list[WorkflowCheckpoint] = []

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        self.log.append(
            f"checkpoint {sorted(checkpoint.outputs)} errors={dict(checkpoint.errors)}"
        )
        self.checkpoints.append(checkpoint)

    def workflow(self) -> Workflow:
        async def quick(ctx: Mapping[str, Any]) -> PatternResult[str]:
            self.calls["quick"] += 1
            set_when_recorded(self.quick_recorded)
            self.log.append("quick done")
            return PatternResult("q", cost=TokenUsage(3, 2, 1))

        async def fail(ctx: Mapping[str, Any]) -> str:
            self.calls["fail"] += 1
            if not self.broken:
                return "f"
            await self.quick_recorded.wait()
            set_when_recorded(self.fail_recorded)
            self.log.append("fail raised")
            raise self.error

        async def slow(ctx: Mapping[str, Any]) -> PatternResult[str]:
            self.calls["slow"] += 1
            if self.broken:
                self.log.append("slow started")
                try:
                    await self.fail_recorded.wait()
                except asyncio.CancelledError:
                    self.log.append("slow cancelled")
                    raise
                self.log.append("slow done")
            return PatternResult("s", cost=TokenUsage(5, 4, 1))

        def then(name: str, dep: str) -> Step:
            def run(ctx: Mapping[str, Any]) -> str:
                self.calls[name] += 1
                self.log.append(f"{name} ran")
                return f"{ctx[dep]}+"

            return Step(name, run, depends_on=(dep,), inline=True)  # the log is ordered

        return Workflow(
            [
                Step("quick", quick),
                Step("fail", fail),
                Step("slow", slow),
                then("after_quick", "quick"),
                then("after_slow", "slow"),
                then("after_fail", "fail"),
                then("tail", "after_quick"),
            ]
        )

    async def run_failing(self, mode: OnError) -> WorkflowFailed:
        with pytest.raises(WorkflowFailed) as caught:
            async with asyncio.timeout(5):
                await self.workflow().run(checkpoint_fn=self.save, on_error=mode)
        self.log.append("run raised")
        return caught.value


ERRORS = "errors={'fail': 'ValueError: boom'}"
BATCH_ONE_START = ["quick done", "slow started", "fail raised"]

EXPECTED_LOG: dict[str, list[str]] = {
    "finish": [
        *BATCH_ONE_START,
        "slow done",
        f"checkpoint ['quick', 'slow'] {ERRORS}",
        "run raised",
    ],
    "cancel": [
        *BATCH_ONE_START,
        "slow cancelled",
        f"checkpoint ['quick'] {ERRORS}",
        "run raised",
    ],
    "continue": [
        *BATCH_ONE_START,
        "slow done",
        f"checkpoint ['quick', 'slow'] {ERRORS}",
        "after_quick ran",
        "after_slow ran",
        f"checkpoint ['after_quick', 'after_slow', 'quick', 'slow'] {ERRORS}",
        "tail ran",
        f"checkpoint ['after_quick', 'after_slow', 'quick', 'slow', 'tail'] {ERRORS}",
        "run raised",
    ],
}

RECORDED = {
    "finish": {"quick": "q", "slow": "s"},
    "cancel": {"quick": "q"},
    "continue": {
        "quick": "q",
        "slow": "s",
        "after_quick": "q+",
        "after_slow": "s+",
        "tail": "q++",
    },
}
RECORDED_COST = {
    "finish": TokenUsage(8, 6, 2),
    "cancel": TokenUsage(3, 2, 1),
    "continue": TokenUsage(8, 6, 2),
}


@pytest.mark.parametrize("mode", MODES)
async def test_failing_batch_is_checkpointed_with_errors_before_run_raises(mode: OnError) -> None:
    """finish keeps the slow sibling, cancel cancels it, continue also runs later batches."""
    batch = FailingBatch()
    failure = await batch.run_failing(mode)
    assert batch.log == EXPECTED_LOG[mode]
    last = batch.checkpoints[-1]
    assert dict(last.outputs) == RECORDED[mode]
    assert last.cost == RECORDED_COST[mode]
    assert last.step_index == len(RECORDED[mode])
    assert all(dict(cp.errors) == {"fail": "ValueError: boom"} for cp in batch.checkpoints)
    assert failure.checkpoint == last
    # after_fail depends on the failed step: it never starts in any mode; and in finish
    # and cancel nothing of the next batch starts at all.
    started = set(batch.calls)
    assert "after_fail" not in started
    if mode != "continue":
        assert started == {"quick", "fail", "slow"}


RESUMED = {
    "finish": {"fail", "after_quick", "after_slow", "after_fail", "tail"},
    "cancel": {"fail", "slow", "after_quick", "after_slow", "after_fail", "tail"},
    "continue": {"fail", "after_fail"},
}


@pytest.mark.parametrize("mode", MODES)
async def test_resume_after_failure_runs_only_what_was_not_recorded(mode: OnError) -> None:
    """The failed step and everything not yet run, once each; never a recorded step."""
    batch = FailingBatch()
    failure = await batch.run_failing(mode)
    saved = json_round_trip(failure.checkpoint)
    batch.broken = False
    batch.calls.clear()
    batch.checkpoints.clear()
    async with asyncio.timeout(5):
        result = await batch.workflow().run(
            resume_from=saved, checkpoint_fn=batch.save, on_error=mode
        )
    assert batch.calls == Counter(dict.fromkeys(RESUMED[mode], 1))
    assert not set(batch.calls) & set(saved.outputs)
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.cost == TokenUsage(8, 6, 2)
    assert set(result.restored) == set(RECORDED[mode])
    assert set(result.executed) == RESUMED[mode]
    assert all(not cp.errors for cp in batch.checkpoints)


async def test_continue_runs_every_independent_step_and_keeps_naming_failures() -> None:
    """Two failures on different branches; the healthy branch runs through all its batches."""
    calls: Counter[str] = Counter()
    checkpoints: list[WorkflowCheckpoint] = []
    raised: dict[str, Exception] = {}
    broken = {"a1", "c2"}

    def step(name: str, *deps: str) -> Step:
        def run(ctx: Mapping[str, Any]) -> str:
            calls[name] += 1
            if name in broken:
                raised[name] = RuntimeError(f"{name} broke")
                raise raised[name]
            return name + "(" + ",".join(str(ctx[dep]) for dep in deps) + ")"

        return Step(name, run, depends_on=deps)

    workflow = Workflow(
        [
            step("a1"),
            step("b1"),
            step("c1"),
            step("a2", "a1"),
            step("b2", "b1"),
            step("c2", "c1"),
            step("b3", "b2"),
            step("c3", "c2"),
            step("b4", "b3"),
            step("ab", "a2", "b4"),
            step("bc", "b2", "c3"),
        ]
    )
    with pytest.raises(WorkflowFailed) as caught:
        async with asyncio.timeout(5):
            await workflow.run(checkpoint_fn=checkpoints.append, on_error="continue")
    failure = caught.value
    assert calls == Counter({"a1": 1, "b1": 1, "c1": 1, "b2": 1, "c2": 1, "b3": 1, "b4": 1})
    assert [sorted(cp.outputs) for cp in checkpoints] == [
        ["b1", "c1"],
        ["b1", "b2", "c1"],
        ["b1", "b2", "b3", "c1"],
        ["b1", "b2", "b3", "b4", "c1"],
    ]
    a1_only = {"a1": "RuntimeError: a1 broke"}
    both = {**a1_only, "c2": "RuntimeError: c2 broke"}
    assert [dict(cp.errors) for cp in checkpoints] == [a1_only, both, both, both]
    assert failure.errors == raised
    assert list(failure.errors) == ["a1", "c2"]
    assert failure.__cause__ is raised["a1"]
    assert failure.checkpoint == checkpoints[-1]
    assert str(failure) == (
        "workflow failed: 2 steps raised ('a1', 'c2'; see .errors); the first, 'a1', "
        "raised RuntimeError: a1 broke. The checkpoint (.checkpoint, seq=4) records 5 "
        "completed steps; resume from it to run only what is left"
    )

    broken.clear()
    calls.clear()
    result = await workflow.run(resume_from=json_round_trip(failure.checkpoint))
    assert calls == Counter(dict.fromkeys(["a1", "a2", "c2", "c3", "ab", "bc"], 1))
    assert result.outputs["ab"] == "ab(a2(a1()),b4(b3(b2(b1()))))"
    assert result.outputs["bc"] == "bc(b2(b1()),c3(c2(c1())))"


# --- WorkflowFailed ------------------------------------------------------------------------


async def test_workflow_failed_carries_the_original_exception_and_last_checkpoint() -> None:
    """errors maps name -> the very exception raised; it is the cause; message pinned."""
    batch = FailingBatch()
    failure = await batch.run_failing("finish")
    assert isinstance(failure, ExecutionKitError)
    assert failure.errors == {"fail": batch.error}
    assert failure.errors["fail"] is batch.error
    assert failure.__cause__ is batch.error
    assert failure.checkpoint == batch.checkpoints[-1]
    assert str(failure) == (
        "workflow failed: step 'fail' raised ValueError: boom. The checkpoint "
        "(.checkpoint, seq=1) records 2 completed steps; resume from it to run only "
        "what is left"
    )


def several_failures(raised: dict[str, Exception]) -> Workflow:
    """ok; x and y fail in batch 1 (y first, x once y's failure is recorded); z in batch 2."""
    y_recorded = asyncio.Event()

    async def x(ctx: Mapping[str, Any]) -> None:
        await y_recorded.wait()
        raised["x"] = RuntimeError("x broke")
        raise raised["x"]

    async def y(ctx: Mapping[str, Any]) -> None:
        set_when_recorded(y_recorded)
        raised["y"] = KeyError("y")
        raise raised["y"]

    def z(ctx: Mapping[str, Any]) -> None:
        raised["z"] = ValueError("z broke")
        raise raised["z"]

    return Workflow(
        [
            Step("ok", lambda ctx: 1),
            Step("x", x),
            Step("y", y),
            Step("z", z, depends_on=("ok",)),
        ]
    )


TAIL = "resume from it to run only what is left"


@pytest.mark.parametrize(
    ("mode", "names", "message"),
    [
        (
            "finish",
            ["x", "y"],
            (
                "workflow failed: 2 steps raised ('x', 'y'; see .errors); the first, 'x', "
                "raised RuntimeError: x broke. The checkpoint (.checkpoint, seq=1) records "
                f"1 completed step; {TAIL}"
            ),
        ),
        (
            # y's failure cancels x before x could fail, so only y is reported.
            "cancel",
            ["y"],
            (
                "workflow failed: step 'y' raised KeyError: 'y'. "
                f"The checkpoint (.checkpoint, seq=1) records 1 completed step; {TAIL}"
            ),
        ),
        (
            "continue",
            ["x", "y", "z"],
            (
                "workflow failed: 3 steps raised ('x', 'y', 'z'; see .errors); the first, "
                "'x', raised RuntimeError: x broke. The checkpoint (.checkpoint, seq=2) "
                f"records 1 completed step; {TAIL}"
            ),
        ),
    ],
)
async def test_several_failures_in_declaration_order(
    mode: OnError, names: list[str], message: str
) -> None:
    """Declaration order, not failure order: x is first although y failed before it."""
    raised: dict[str, Exception] = {}
    checkpoints: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        async with asyncio.timeout(5):
            await several_failures(raised).run(checkpoint_fn=checkpoints.append, on_error=mode)
    failure = caught.value
    assert list(failure.errors) == names
    assert all(failure.errors[name] is raised[name] for name in names)
    assert set(raised) == set(names)
    assert failure.__cause__ is raised[names[0]]
    assert str(failure) == message
    assert failure.checkpoint == checkpoints[-1]
    assert list(failure.checkpoint.errors) == names


@pytest.mark.parametrize("mode", MODES)
async def test_workflow_failed_without_checkpoint_fn_still_has_a_resumable_checkpoint(
    mode: OnError,
) -> None:
    """No store at all: .checkpoint is built in memory and resuming from it works."""
    batch = FailingBatch()
    with pytest.raises(WorkflowFailed) as caught:
        async with asyncio.timeout(5):
            await batch.workflow().run(run_id="job-7", on_error=mode)
    failure = caught.value
    checkpoint = failure.checkpoint
    assert checkpoint.seq == 1
    assert checkpoint.run_id == "job-7"
    assert dict(checkpoint.outputs) == RECORDED[mode]
    assert dict(checkpoint.errors) == {"fail": "ValueError: boom"}
    assert checkpoint.cost == RECORDED_COST[mode]
    assert failure.errors == {"fail": batch.error}
    assert str(failure) == (
        "workflow failed: step 'fail' raised ValueError: boom. The checkpoint "
        f"(.checkpoint, seq=1) records {len(RECORDED[mode])} completed step"
        f"{'' if len(RECORDED[mode]) == 1 else 's'}; {TAIL}"
    )

    batch.broken = False
    batch.calls.clear()
    result = await batch.workflow().run(resume_from=json_round_trip(checkpoint))
    assert set(batch.calls) == RESUMED[mode]
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.run_id == "job-7"


@pytest.mark.parametrize("value", ["ignore", "Finish", "", None, 0, ("finish",)])
async def test_invalid_on_error_is_rejected_before_any_step(value: object) -> None:
    batch = FailingBatch()
    message = f"on_error must be one of 'finish', 'cancel', 'continue', got {value!r}"
    with pytest.raises(RunArgumentError, match=re.escape(message)):
        await batch.workflow().run(checkpoint_fn=batch.save, on_error=cast("Any", value))
    assert batch.calls == Counter()
    assert batch.checkpoints == []


def test_invalid_on_error_in_run_sync_is_rejected_before_any_step() -> None:
    calls: list[str] = []
    workflow = Workflow([Step("a", lambda ctx: calls.append("a"))])
    message = "on_error must be one of 'finish', 'cancel', 'continue', got 'stop'"
    with pytest.raises(RunArgumentError, match=re.escape(message)):
        workflow.run_sync(on_error=cast("Any", "stop"))
    assert calls == []


# --- checkpoint_fn failing while recording a failure -----------------------------------------


def storage_flow(calls: Counter[str]) -> Workflow:
    """ok and fail in batch 1; then after_ok -> after_after."""

    def step(name: str, *deps: str) -> Step:
        def run(ctx: Mapping[str, Any]) -> str:
            calls[name] += 1
            if name == "fail":
                msg = "boom"
                raise ValueError(msg)
            return name

        return Step(name, run, depends_on=deps)

    return Workflow(
        [step("ok"), step("fail"), step("after_ok", "ok"), step("after_after", "after_ok")]
    )


@pytest.mark.parametrize("mode", MODES)
async def test_checkpoint_fn_raising_on_the_failure_checkpoint_propagates_with_notes(
    mode: OnError,
) -> None:
    """The storage error wins over WorkflowFailed, names the failures, and nothing starts."""
    calls: Counter[str] = Counter()
    storage = OSError("disk full")
    seen: list[WorkflowCheckpoint] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        seen.append(checkpoint)
        raise storage

    with pytest.raises(OSError, match="disk full") as caught:
        async with asyncio.timeout(5):
            await storage_flow(calls).run(checkpoint_fn=save, on_error=mode)
    assert caught.value is storage
    assert caught.value.__notes__ == [
        (
            "executionkit: checkpoint_fn raised while saving checkpoint seq=1 "
            "(step_index=1); the outputs of 'ok' it newly records are not saved; "
            "no further step was started"
        ),
        "executionkit: the checkpoint recorded these step failures: 'fail': ValueError: boom",
    ]
    assert len(seen) == 1
    assert dict(seen[0].errors) == {"fail": "ValueError: boom"}
    assert calls == Counter({"ok": 1, "fail": 1})


async def test_checkpoint_fn_raising_later_in_continue_mode_still_names_the_failure() -> None:
    """The failure checkpoint was saved; the next one fails; after_after never starts."""
    calls: Counter[str] = Counter()
    storage = OSError("quota")
    seen: list[WorkflowCheckpoint] = []

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        seen.append(checkpoint)
        if checkpoint.seq == 2:
            raise storage

    with pytest.raises(OSError, match="quota") as caught:
        async with asyncio.timeout(5):
            await storage_flow(calls).run(checkpoint_fn=save, on_error="continue")
    assert caught.value is storage
    assert caught.value.__notes__ == [
        (
            "executionkit: checkpoint_fn raised while saving checkpoint seq=2 "
            "(step_index=2); the outputs of 'after_ok' it newly records are not saved; "
            "no further step was started"
        ),
        "executionkit: the checkpoint recorded these step failures: 'fail': ValueError: boom",
    ]
    assert [dict(cp.outputs) for cp in seen] == [
        {"ok": "ok"},
        {"ok": "ok", "after_ok": "after_ok"},
    ]
    assert calls == Counter({"ok": 1, "fail": 1, "after_ok": 1})


# --- property: seeded random DAGs with injected failures -------------------------------------


@dataclass(frozen=True)
class RandomDag:
    names: tuple[str, ...]
    deps: tuple[tuple[int, ...], ...]
    is_async: tuple[bool, ...]
    yields: tuple[int, ...]
    failing: frozenset[str]

    @classmethod
    def draw(cls, seed: int) -> RandomDag:
        rng = random.Random(seed)
        size = rng.randint(3, 14)
        deps = tuple(
            tuple(sorted(rng.sample(range(i), rng.randint(0, min(i, 3))))) for i in range(size)
        )
        names = tuple(f"s{i}" for i in range(size))
        failing = frozenset(rng.sample(names, rng.choice((1, 2))))
        return cls(
            names=names,
            deps=deps,
            is_async=tuple(rng.random() < 0.7 for _ in range(size)),
            yields=tuple(rng.randint(0, 4) for _ in range(size)),
            failing=failing,
        )

    def level(self, i: int) -> int:
        return 1 + max((self.level(d) for d in self.deps[i]), default=-1)

    def descendants(self, names: set[str]) -> set[str]:
        """``names`` and everything that depends on them, transitively."""
        found = set(names)
        for i, name in enumerate(self.names):  # declaration order is a topological order
            if any(self.names[d] in found for d in self.deps[i]):
                found.add(name)
        return found

    def cost(self, i: int) -> TokenUsage:
        return TokenUsage(i + 1, 2 * i + 1, 1)


class DagRunner:
    """Builds the workflow for a `RandomDag`; counts starts and successful completions."""

    def __init__(self, dag: RandomDag, broken: frozenset[str]) -> None:
        self.dag = dag
        self.broken = broken
        self.calls: Counter[str] = Counter()
        self.completed: list[str] = []

    def workflow(self) -> Workflow:
        return Workflow([self._step(i) for i in range(len(self.dag.names))])

    def _step(self, i: int) -> Step:
        dag = self.dag
        name = dag.names[i]
        dep_names = [dag.names[d] for d in dag.deps[i]]

        def finish(ctx: Mapping[str, Any]) -> PatternResult[int]:
            if name in self.broken:
                msg = f"{name} is broken"
                raise RuntimeError(msg)
            value = (i * 7919 + sum((k + 1) * ctx[d] for k, d in enumerate(dep_names))) % 1_000_003
            self.completed.append(name)
            return PatternResult(value, cost=dag.cost(i))

        def run_sync(ctx: Mapping[str, Any]) -> PatternResult[int]:
            self.calls[name] += 1
            return finish(ctx)

        async def run_async(ctx: Mapping[str, Any]) -> PatternResult[int]:
            self.calls[name] += 1
            for _ in range(dag.yields[i]):
                await asyncio.sleep(0)  # a yield to vary completion order, not a wait
            return finish(ctx)

        run: Callable[[Mapping[str, Any]], Any] = run_async if dag.is_async[i] else run_sync
        return Step(name, run, depends_on=tuple(dep_names))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(30))
async def test_random_dags_with_failures_record_exactly_what_completed(
    seed: int, mode: OnError
) -> None:
    dag = RandomDag.draw(seed)
    reference_runner = DagRunner(dag, frozenset())
    async with asyncio.timeout(5):
        reference = await reference_runner.workflow().run()
    assert reference.cost == sum((dag.cost(i) for i in range(len(dag.names))), TokenUsage())

    first = DagRunner(dag, dag.failing)
    checkpoints: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        async with asyncio.timeout(5):
            await first.workflow().run(checkpoint_fn=checkpoints.append, on_error=mode)
    failure = caught.value
    checkpoint = failure.checkpoint
    recorded = set(checkpoint.outputs)
    failed = set(failure.errors)

    # The final checkpoint holds exactly the steps that completed, and no step ran twice.
    assert checkpoint == checkpoints[-1]
    assert recorded == set(first.completed)
    assert len(first.completed) == len(recorded)
    assert set(first.calls.values()) == {1}
    assert {name: checkpoint.outputs[name] for name in recorded} == {
        name: reference.outputs[name] for name in recorded
    }
    assert checkpoint.cost == sum(
        (dag.cost(dag.names.index(name)) for name in recorded), TokenUsage()
    )
    assert set(checkpoint.errors) == failed
    assert failed
    assert failed <= dag.failing
    assert not (dag.descendants(failed) - failed) & set(first.calls)
    for earlier, later in itertools.pairwise(checkpoints):
        assert set(earlier.errors) <= set(later.errors)

    everything = set(dag.names)
    levels = {name: dag.level(i) for i, name in enumerate(dag.names)}
    first_failing = min(levels[name] for name in dag.failing)
    at_failing_level = {name for name in dag.failing if levels[name] == first_failing}
    up_to = {name for name in everything if levels[name] <= first_failing}
    before = {name for name in everything if levels[name] < first_failing}
    if mode == "finish":
        assert failed == at_failing_level
        assert recorded == up_to - failed
    elif mode == "cancel":
        assert failed <= at_failing_level
        assert before <= recorded <= up_to - failed
    else:
        # A failing step fails only if no other failing step is among its ancestors.
        reached = {
            name for name in dag.failing if name not in dag.descendants(set(dag.failing - {name}))
        }
        assert failed == reached
        assert recorded == everything - dag.descendants(failed)

    # Resume after a JSON round trip with the failures fixed: the same result as an
    # uninterrupted run, and no recorded step runs again.
    second = DagRunner(dag, frozenset())
    async with asyncio.timeout(5):
        result = await second.workflow().run(
            resume_from=json_round_trip(checkpoint), on_error=mode
        )
    assert dict(result.outputs) == dict(reference.outputs)
    assert result.cost == reference.cost
    assert set(second.calls) == everything - recorded
    assert set(second.calls.values()) <= {1}
    assert set(result.restored) == recorded
