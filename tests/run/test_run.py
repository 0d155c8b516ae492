"""Running workflows: batches, checkpoints, resume, failures and run() arguments."""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointMismatchError,
    ExecutionKitError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit._checkpoint._value import FORMAT_VERSION

if TYPE_CHECKING:
    from pathlib import Path


def diamond(calls: Counter[str] | None = None) -> Workflow:
    """fetch -> (left, right) -> join, with token usage on left and right."""
    seen = Counter[str]() if calls is None else calls

    def fetch(ctx: Mapping[str, Any]) -> str:
        seen["fetch"] += 1
        return str(ctx["doc"]).upper()

    async def left(ctx: Mapping[str, Any]) -> PatternResult[str]:
        seen["left"] += 1
        return PatternResult(ctx["fetch"] + "-L", cost=TokenUsage(10, 5, 1))

    async def right(ctx: Mapping[str, Any]) -> PatternResult[str]:
        seen["right"] += 1
        return PatternResult(ctx["fetch"] + "-R", cost=TokenUsage(7, 3, 1))

    def join(ctx: Mapping[str, Any]) -> list[str]:
        seen["join"] += 1
        return [ctx["left"], ctx["right"]]

    return Workflow(
        [
            Step("fetch", fetch),
            Step("left", left, depends_on=("fetch",)),
            Step("right", right, depends_on=("fetch",)),
            Step("join", join, depends_on=("left", "right")),
        ]
    )


FULL_OUTPUTS = {"fetch": "X", "left": "X-L", "right": "X-R", "join": ["X-L", "X-R"]}
FULL_COST = TokenUsage(17, 8, 2)


async def yield_to_loop(times: int = 10) -> None:
    """Let every other ready task run; not a timed wait."""
    for _ in range(times):
        await asyncio.sleep(0)


# --- checkpoints -------------------------------------------------------------------------


async def test_list_appending_checkpoint_fn_sees_every_batch() -> None:
    """One frozen checkpoint per batch, with counters, run_id, context keys and metadata."""
    checkpoints: list[WorkflowCheckpoint] = []
    result = await diamond().run(
        {"doc": "x", "secret": "s3cr3t"},
        checkpoint_fn=checkpoints.append,
        metadata={"job": "nightly", "n": 3},
    )
    assert [dict(cp.outputs) for cp in checkpoints] == [
        {"fetch": "X"},
        {"fetch": "X", "left": "X-L", "right": "X-R"},
        FULL_OUTPUTS,
    ]
    assert [cp.step_index for cp in checkpoints] == [1, 3, 4]
    assert [cp.seq for cp in checkpoints] == [1, 2, 3]
    assert [cp.cost for cp in checkpoints] == [TokenUsage(), FULL_COST, FULL_COST]
    assert {cp.run_id for cp in checkpoints} == {result.run_id}
    assert re.fullmatch(r"[0-9a-f]{32}", result.run_id)
    for cp in checkpoints:
        assert cp.version == FORMAT_VERSION
        assert cp.context_keys == ("doc", "secret")
        assert dict(cp.errors) == {}
        assert dict(cp.metadata) == {"job": "nightly", "n": 3}
        assert cp.created_at is not None
        assert datetime.fromisoformat(cp.created_at).utcoffset() == timedelta(0)
        assert isinstance(cp.outputs, Mapping)
        with pytest.raises(TypeError):
            cp.outputs["fetch"] = "changed"  # type: ignore[index]
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.cost == FULL_COST


async def test_checkpoints_are_independent_snapshots() -> None:
    """A checkpoint handed out earlier does not change as the run goes on."""
    checkpoints: list[WorkflowCheckpoint] = []
    await diamond().run({"doc": "x"}, checkpoint_fn=checkpoints.append)
    assert dict(checkpoints[0].outputs) == {"fetch": "X"}
    assert checkpoints[0].step_index == 1


async def test_initial_context_values_are_never_checkpointed() -> None:
    """Only the key names of the initial context reach the checkpoint."""
    checkpoints: list[WorkflowCheckpoint] = []
    await diamond().run(
        {"doc": "x", "api_key": "sk-VERY-SECRET"}, checkpoint_fn=checkpoints.append
    )
    for cp in checkpoints:
        text = json.dumps(cp.to_dict())
        assert "sk-VERY-SECRET" not in text
        assert cp.context_keys == ("api_key", "doc")


def test_json_file_lambda_end_to_end(tmp_path: Path) -> None:
    """A lambda writing JSON is a complete store: the file resumes a finished run at once."""
    path = tmp_path / "cp.json"
    calls: Counter[str] = Counter()
    workflow = diamond(calls)
    first = workflow.run_sync(
        {"doc": "x"}, checkpoint_fn=lambda cp: path.write_text(json.dumps(cp.to_dict()))
    )
    saved = WorkflowCheckpoint.from_dict(json.loads(path.read_text()))
    assert saved.seq == 3
    again = workflow.run_sync({"doc": "x"}, resume_from=saved)
    assert calls == Counter({"fetch": 1, "left": 1, "right": 1, "join": 1})
    assert dict(again.outputs) == dict(first.outputs) == FULL_OUTPUTS
    assert again.cost == first.cost == FULL_COST
    assert again.executed == ()
    assert again.restored == ("fetch", "left", "right", "join")


async def test_async_checkpoint_fn_is_awaited_before_the_next_batch() -> None:
    """No step of the next batch starts while an async checkpoint_fn is still running."""
    log: list[str] = []

    def step(name: str) -> Step:
        deps = {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}[name]

        async def run(ctx: Mapping[str, Any]) -> str:
            log.append(f"start {name}")
            await yield_to_loop(2)
            return name

        return Step(name, run, depends_on=deps)

    async def save(cp: WorkflowCheckpoint) -> None:
        log.append(f"save {cp.seq}")
        await yield_to_loop()  # a wrongly started step would get to run here
        log.append(f"saved {cp.seq}")

    await Workflow([step(n) for n in "abcd"]).run(checkpoint_fn=save)
    assert log == [
        "start a",
        "save 1",
        "saved 1",
        "start b",
        "start c",
        "save 2",
        "saved 2",
        "start d",
        "save 3",
        "saved 3",
    ]


async def test_sync_and_async_checkpoint_fns_both_work() -> None:
    """A plain function and a coroutine function receive the same checkpoints."""
    plain: list[WorkflowCheckpoint] = []
    awaited: list[WorkflowCheckpoint] = []

    async def save(cp: WorkflowCheckpoint) -> None:
        awaited.append(cp)

    await diamond().run({"doc": "x"}, checkpoint_fn=plain.append)
    await diamond().run({"doc": "x"}, checkpoint_fn=save)
    assert [dict(cp.outputs) for cp in plain] == [dict(cp.outputs) for cp in awaited]
    assert len(awaited) == 3


async def test_checkpoint_fn_returning_an_awaitable_object_is_awaited() -> None:
    """Any awaitable returned (not only a coroutine) is awaited before the next batch."""
    log: list[str] = []

    def save(cp: WorkflowCheckpoint) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()

        def resolve() -> None:
            log.append(f"stored {cp.seq}")
            future.set_result(None)

        asyncio.get_running_loop().call_soon(resolve)
        return future

    def step(name: str, *deps: str) -> Step:
        def run(ctx: Mapping[str, Any]) -> str:
            log.append(f"start {name}")
            return name

        return Step(name, run, depends_on=deps)

    await Workflow([step("a"), step("b", "a"), step("c", "b")]).run(checkpoint_fn=save)
    assert log == ["start a", "stored 1", "start b", "stored 2", "start c", "stored 3"]


@pytest.mark.parametrize("is_async", [False, True])
async def test_checkpoint_fn_error_propagates_with_a_note_and_stops_the_run(
    *, is_async: bool
) -> None:
    """The storage error comes out unchanged, annotated, and nothing further starts."""
    calls: Counter[str] = Counter()
    error = OSError("disk full")

    def save_sync(cp: WorkflowCheckpoint) -> None:
        if cp.seq == 2:
            raise error

    async def save_async(cp: WorkflowCheckpoint) -> None:
        save_sync(cp)

    with pytest.raises(OSError, match="disk full") as caught:
        await diamond(calls).run({"doc": "x"}, checkpoint_fn=save_async if is_async else save_sync)
    assert caught.value is error
    assert caught.value.__notes__ == [
        (
            "executionkit: checkpoint_fn raised while saving checkpoint seq=2 (step_index=3); "
            "the outputs of 'left', 'right' it newly records are not saved; "
            "no further step was started"
        )
    ]
    assert calls["join"] == 0


async def test_checkpoint_fn_calls_never_overlap() -> None:
    """Even with slow async saves, at most one checkpoint_fn call is in flight."""
    active = 0
    peak = 0

    async def save(cp: WorkflowCheckpoint) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await yield_to_loop()
        active -= 1

    steps = [Step(f"s{i}", lambda ctx: 1) for i in range(5)]
    steps += [Step(f"t{i}", lambda ctx: 2, depends_on=(f"s{i}",)) for i in range(5)]
    await Workflow(steps).run(checkpoint_fn=save)
    assert peak == 1


# --- steps and results -------------------------------------------------------------------


async def test_pattern_result_value_is_recorded_and_cost_summed() -> None:
    """The output is PatternResult.value; plain outputs add no cost."""
    workflow = Workflow(
        [
            Step("a", lambda ctx: PatternResult({"k": 1}, cost=TokenUsage(1, 2, 3))),
            Step("b", lambda ctx: ctx["a"]["k"] + 1, depends_on=("a",)),
            Step("c", lambda ctx: PatternResult(None, cost=TokenUsage(4, 0, 1))),
        ]
    )
    result = await workflow.run()
    assert dict(result.outputs) == {"a": {"k": 1}, "b": 2, "c": None}
    assert result.cost == TokenUsage(5, 2, 4)


async def test_result_lists_outputs_in_declaration_order_read_only() -> None:
    """WorkflowResult.outputs follows declaration order and cannot be changed."""
    workflow = Workflow([Step("z", lambda ctx: 1, depends_on=("a",)), Step("a", lambda ctx: 0)])
    result = await workflow.run()
    assert list(result.outputs) == ["z", "a"]
    assert result.executed == ("a", "z")
    with pytest.raises(TypeError):
        result.outputs["z"] = 5  # type: ignore[index]


async def test_callable_returning_an_awaitable_is_awaited() -> None:
    """A partial of a coroutine function, or an async __call__, counts as async."""

    async def add(ctx: Mapping[str, Any], n: int) -> int:
        return n + 1

    class Caller:
        async def __call__(self, ctx: Mapping[str, Any]) -> str:
            return "called"

    workflow = Workflow([Step("p", functools.partial(add, n=41)), Step("c", Caller())])
    assert dict((await workflow.run()).outputs) == {"p": 42, "c": "called"}


async def test_empty_workflow_returns_empty_result_without_checkpoints() -> None:
    """No steps, no batches, no checkpoints."""
    checkpoints: list[WorkflowCheckpoint] = []
    result = await Workflow([]).run(checkpoint_fn=checkpoints.append)
    assert dict(result.outputs) == {}
    assert checkpoints == []


async def test_one_workflow_runs_concurrently_with_separate_state() -> None:
    """Two runs of the same Workflow object do not share outputs."""
    workflow = diamond()
    first, second = await asyncio.gather(workflow.run({"doc": "a"}), workflow.run({"doc": "b"}))
    assert first.outputs["join"] == ["A-L", "A-R"]
    assert second.outputs["join"] == ["B-L", "B-R"]
    assert first.run_id != second.run_id


def test_run_sync_returns_the_same_result_as_run() -> None:
    """run_sync runs the coroutine in a fresh event loop."""
    result = diamond().run_sync({"doc": "x"}, run_id="fixed")
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.run_id == "fixed"


async def test_run_sync_inside_a_running_loop_is_a_clear_error() -> None:
    """Calling run_sync from async code says to await run() instead."""
    msg = (
        "Workflow.run_sync() cannot be called while an event loop is running in this "
        "thread; use 'await workflow.run(...)' instead"
    )
    with pytest.raises(RuntimeError, match=re.escape(msg)):
        diamond().run_sync({"doc": "x"})


# --- bad arguments -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"initial_context": {"fetch": 1, "doc": "x", "join": 2}},
            (
                "initial_context keys collide with step names: 'fetch', 'join'; a step's output "
                "and a context value cannot share a ctx key, so rename them"
            ),
        ),
        (
            {"initial_context": ["doc"]},
            "initial_context must be a mapping with str keys, got list",
        ),
        ({"initial_context": {1: "x"}}, "initial_context keys must be str, got int 1"),
        ({"metadata": "job-1"}, "metadata must be a mapping with str keys, got str"),
        ({"metadata": {("a",): 1}}, "metadata keys must be str, got tuple ('a',)"),
        ({"run_id": ""}, "run_id must be a non-empty str or None, got str ''"),
        ({"run_id": 7}, "run_id must be a non-empty str or None, got int 7"),
        ({"checkpoint_fn": "save"}, "checkpoint_fn must be callable or None, got str"),
        (
            {"resume_from": {"step_index": 0, "outputs": {}, "cost": {}}},
            (
                "resume_from must be a WorkflowCheckpoint, got dict; load saved data with "
                "WorkflowCheckpoint.from_dict(data)"
            ),
        ),
    ],
)
async def test_bad_run_arguments_fail_before_any_step(
    kwargs: dict[str, Any], message: str
) -> None:
    """Each bad argument raises RunArgumentError (a ValueError) naming it; nothing runs."""
    calls: Counter[str] = Counter()
    kwargs.setdefault("initial_context", {"doc": "x"})
    with pytest.raises(RunArgumentError) as caught:
        await diamond(calls).run(**kwargs)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, ExecutionKitError)
    assert not calls


# --- resume ------------------------------------------------------------------------------


async def checkpoints_of(workflow: Workflow, **kwargs: Any) -> list[WorkflowCheckpoint]:
    checkpoints: list[WorkflowCheckpoint] = []
    await workflow.run(checkpoint_fn=checkpoints.append, **kwargs)
    return checkpoints


async def test_resume_skips_recorded_steps_and_continues_counters() -> None:
    """Recorded steps do not run; run_id is kept and seq continues."""
    first = await checkpoints_of(diamond(), initial_context={"doc": "x"}, metadata={"job": 1})
    calls: Counter[str] = Counter()
    later: list[WorkflowCheckpoint] = []
    result = await diamond(calls).run(
        {"doc": "x"}, resume_from=first[0], checkpoint_fn=later.append
    )
    assert calls == Counter({"left": 1, "right": 1, "join": 1})
    assert result.restored == ("fetch",)
    assert result.executed == ("left", "right", "join")
    assert [cp.seq for cp in later] == [2, 3]
    assert [cp.step_index for cp in later] == [3, 4]
    assert {cp.run_id for cp in later} == {first[0].run_id} == {result.run_id}
    assert [dict(cp.metadata) for cp in later] == [{"job": 1}, {"job": 1}]
    assert result.cost == FULL_COST


async def test_resume_with_new_metadata_replaces_it() -> None:
    """metadata passed on resume is what later checkpoints carry."""
    first = await checkpoints_of(diamond(), initial_context={"doc": "x"}, metadata={"job": 1})
    later = await checkpoints_of(
        diamond(), initial_context={"doc": "x"}, resume_from=first[0], metadata={"job": 2}
    )
    assert {tuple(cp.metadata.items()) for cp in later} == {(("job", 2),)}


async def test_resume_from_a_complete_checkpoint_runs_nothing() -> None:
    """Every step recorded: no step call and no checkpoint call."""
    final = (await checkpoints_of(diamond(), initial_context={"doc": "x"}))[-1]
    calls: Counter[str] = Counter()
    later: list[WorkflowCheckpoint] = []
    result = await diamond(calls).run({"doc": "x"}, resume_from=final, checkpoint_fn=later.append)
    assert not calls
    assert later == []
    assert dict(result.outputs) == FULL_OUTPUTS
    assert result.cost == FULL_COST


async def test_resume_restores_outputs_and_cost_verbatim() -> None:
    """Restored outputs are used as recorded, even if the step would now return another."""
    checkpoint = WorkflowCheckpoint(
        step_index=2,
        outputs=MappingProxyType({"fetch": "RECORDED", "left": "L!"}),
        cost=TokenUsage(1000, 1, 9),
        run_id="r1",
        seq=5,
        context_keys=("doc",),
    )
    result = await diamond().run({"doc": "x"}, resume_from=checkpoint)
    assert dict(result.outputs) == {
        "fetch": "RECORDED",
        "left": "L!",
        "right": "RECORDED-R",
        "join": ["L!", "RECORDED-R"],
    }
    assert result.cost == TokenUsage(1007, 4, 10)


async def test_resume_with_the_same_run_id_is_fine() -> None:
    """Passing the checkpoint's own run_id again is allowed."""
    first = await checkpoints_of(diamond(), initial_context={"doc": "x"}, run_id="job-7")
    result = await diamond().run({"doc": "x"}, resume_from=first[0], run_id="job-7")
    assert result.run_id == "job-7"


@pytest.mark.parametrize(
    ("checkpoint", "kwargs", "message"),
    [
        (
            WorkflowCheckpoint(
                step_index=2,
                outputs=MappingProxyType({"fetch": "X", "old_step": 1}),
                cost=TokenUsage(),
            ),
            {},
            (
                "checkpoint records outputs of steps this workflow does not have: 'old_step' "
                "(a checkpoint of another workflow, or renamed steps); pass "
                "unknown_steps='discard' to drop them"
            ),
        ),
        (
            WorkflowCheckpoint(
                step_index=0,
                outputs=MappingProxyType({}),
                cost=TokenUsage(),
                context_keys=("doc", "lang", "tone"),
            ),
            {},
            (
                "initial_context lacks keys the checkpoint was run with: 'lang', 'tone'; "
                "checkpoints never store context values, so pass them again"
            ),
        ),
        (
            WorkflowCheckpoint(
                step_index=0, outputs=MappingProxyType({}), cost=TokenUsage(), run_id="run-a"
            ),
            {"run_id": "run-b"},
            (
                "run_id 'run-b' does not match the checkpoint's run_id 'run-a'; omit run_id to "
                "continue the checkpoint's run"
            ),
        ),
    ],
)
async def test_mismatched_checkpoint_fails_before_any_step(
    checkpoint: WorkflowCheckpoint, kwargs: dict[str, Any], message: str
) -> None:
    """CheckpointMismatchError (a ValueError) names what does not fit; nothing runs."""
    calls: Counter[str] = Counter()
    with pytest.raises(CheckpointMismatchError) as caught:
        await diamond(calls).run({"doc": "x"}, resume_from=checkpoint, **kwargs)
    assert str(caught.value) == message
    assert isinstance(caught.value, RunArgumentError)
    assert isinstance(caught.value, ValueError)
    assert not calls


async def test_legacy_04_checkpoint_resumes_with_its_stored_context() -> None:
    """A 0.4 dict kept the initial context in outputs; those keys are not an error."""
    legacy = {
        "step_index": 1,
        "outputs": {"doc": "from-0.4", "fetch": "FROM-0.4"},
        "cost": {"input_tokens": 3, "output_tokens": 2, "llm_calls": 1},
    }
    checkpoint = WorkflowCheckpoint.from_dict(legacy)
    assert checkpoint.version == 0
    calls: Counter[str] = Counter()
    later: list[WorkflowCheckpoint] = []
    result = await diamond(calls).run(resume_from=checkpoint, checkpoint_fn=later.append)
    assert calls == Counter({"left": 1, "right": 1, "join": 1})
    assert dict(result.outputs) == {
        "fetch": "FROM-0.4",
        "left": "FROM-0.4-L",
        "right": "FROM-0.4-R",
        "join": ["FROM-0.4-L", "FROM-0.4-R"],
    }
    assert result.cost == TokenUsage(20, 10, 3)
    assert later[-1].version == FORMAT_VERSION
    assert later[-1].context_keys == ("doc",)
    assert "from-0.4" not in json.dumps(later[-1].to_dict())


async def test_legacy_context_values_yield_to_the_callers() -> None:
    """initial_context passed on resume wins over the 0.4-stored value."""
    seen: list[object] = []

    def use(ctx: Mapping[str, Any]) -> None:
        seen.append(ctx["doc"])

    checkpoint = WorkflowCheckpoint.from_dict(
        {
            "step_index": 0,
            "outputs": {"doc": "old"},
            "cost": {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0},
        }
    )
    await Workflow([Step("use", use)]).run({"doc": "new"}, resume_from=checkpoint)
    assert seen == ["new"]


# --- failures ----------------------------------------------------------------------------


def failing_batch(gate_log: list[str]) -> Workflow:
    """root -> (ok_slow, boom) -> after; boom fails while ok_slow is still running."""
    boom_started = asyncio.Event()
    boom_done = asyncio.Event()

    async def ok_slow(ctx: Mapping[str, Any]) -> PatternResult[str]:
        await boom_started.wait()
        await boom_done.wait()  # finish only after the failure happened
        gate_log.append("ok_slow finished")
        return PatternResult("kept", cost=TokenUsage(100, 10, 1))

    async def boom(ctx: Mapping[str, Any]) -> None:
        boom_started.set()
        gate_log.append("boom raised")
        boom_done.set()
        msg = "model said no"
        raise ValueError(msg)

    def after(ctx: Mapping[str, Any]) -> None:
        gate_log.append("after ran")

    return Workflow(
        [
            Step("root", lambda ctx: "r"),
            Step("ok_slow", ok_slow, depends_on=("root",)),
            Step("boom", boom, depends_on=("root",)),
            Step("after", after, depends_on=("ok_slow", "boom")),
        ]
    )


async def test_failed_step_keeps_its_batch_and_raises_workflow_failed() -> None:
    """The batch finishes, its completed outputs are checkpointed with errors, then it raises."""
    log: list[str] = []
    checkpoints: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        await asyncio.wait_for(failing_batch(log).run(checkpoint_fn=checkpoints.append), 5)
    failure = caught.value
    assert log == ["boom raised", "ok_slow finished"]
    last = checkpoints[-1]
    assert failure.checkpoint is last
    assert dict(last.outputs) == {"root": "r", "ok_slow": "kept"}
    assert dict(last.errors) == {"boom": "ValueError: model said no"}
    assert last.cost == TokenUsage(100, 10, 1)
    assert last.seq == 2
    assert list(failure.errors) == ["boom"]
    assert isinstance(failure.errors["boom"], ValueError)
    assert failure.__cause__ is failure.errors["boom"]
    assert isinstance(failure, ExecutionKitError)
    assert str(failure) == (
        "workflow failed: step 'boom' raised ValueError: model said no. The checkpoint "
        "(.checkpoint, seq=2) records 2 completed steps; resume from it to run only "
        "what is left"
    )


async def test_resume_after_failure_runs_only_the_failed_step_and_its_descendants() -> None:
    """The completed half of the failing batch is never paid for twice."""
    log: list[str] = []
    with pytest.raises(WorkflowFailed) as caught:
        await asyncio.wait_for(failing_batch(log).run(), 5)
    saved = WorkflowCheckpoint.from_dict(json.loads(json.dumps(caught.value.checkpoint.to_dict())))
    calls: Counter[str] = Counter()

    def counted(name: str) -> Step:
        deps = {"root": (), "ok_slow": ("root",), "boom": ("root",), "after": ("ok_slow", "boom")}

        def run(ctx: Mapping[str, Any]) -> str:
            calls[name] += 1
            return name

        return Step(name, run, depends_on=deps[name])

    fixed = Workflow([counted(n) for n in ("root", "ok_slow", "boom", "after")])
    result = await fixed.run(resume_from=saved)
    assert calls == Counter({"boom": 1, "after": 1})
    assert result.outputs["ok_slow"] == "kept"
    assert result.cost == TokenUsage(100, 10, 1)


async def test_failure_without_checkpoint_fn_still_hands_over_a_checkpoint() -> None:
    """WorkflowFailed.checkpoint exists even when nothing was stored."""
    log: list[str] = []
    with pytest.raises(WorkflowFailed) as caught:
        await asyncio.wait_for(failing_batch(log).run(run_id="r"), 5)
    assert caught.value.checkpoint.run_id == "r"
    assert caught.value.checkpoint.seq == 1
    assert dict(caught.value.checkpoint.outputs) == {"root": "r", "ok_slow": "kept"}


async def test_several_failures_are_all_named_in_declaration_order() -> None:
    """errors holds every failed step; the message names them and counts the rest."""

    def fail(message: str) -> Any:
        def run(ctx: Mapping[str, Any]) -> None:
            raise RuntimeError(message)

        return run

    workflow = Workflow(
        [
            Step("ok", lambda ctx: 1),
            Step("b", fail("bad b")),
            Step("a", fail("bad a")),
            Step("next", lambda ctx: 2, depends_on=("ok",)),
        ]
    )
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run()
    assert list(caught.value.errors) == ["b", "a"]
    assert dict(caught.value.checkpoint.errors) == {
        "b": "RuntimeError: bad b",
        "a": "RuntimeError: bad a",
    }
    assert dict(caught.value.checkpoint.outputs) == {"ok": 1}
    assert str(caught.value).startswith(
        "workflow failed: 2 steps raised ('b', 'a'; see .errors); the first, 'b', raised "
        "RuntimeError: bad b."
    )


async def test_lone_failing_step_checkpoints_its_error() -> None:
    """A failure in a one-step batch is checkpointed too, with nothing new recorded."""
    checkpoints: list[WorkflowCheckpoint] = []

    def explode(ctx: Mapping[str, Any]) -> None:
        raise KeyError("k")

    workflow = Workflow([Step("a", lambda ctx: 1), Step("b", explode, depends_on=("a",))])
    with pytest.raises(WorkflowFailed):
        await workflow.run(checkpoint_fn=checkpoints.append)
    assert [dict(cp.errors) for cp in checkpoints] == [{}, {"b": "KeyError: 'k'"}]
    assert [cp.step_index for cp in checkpoints] == [1, 1]


# --- cancellation ------------------------------------------------------------------------


async def test_cancelling_run_checkpoints_finished_steps_and_leaves_no_task() -> None:
    """Cancel mid-batch: the finished step is checkpointed, the other is cancelled."""
    fast_done = asyncio.Event()
    events: list[str] = []
    checkpoints: list[WorkflowCheckpoint] = []

    async def fast(ctx: Mapping[str, Any]) -> str:
        fast_done.set()
        return "fast"

    async def slow(ctx: Mapping[str, Any]) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            events.append("slow cancelled")
            raise
        return "never"  # pragma: no cover

    workflow = Workflow([Step("fast", fast), Step("slow", slow)])
    before = asyncio.all_tasks()
    task = asyncio.create_task(workflow.run(checkpoint_fn=checkpoints.append))
    await fast_done.wait()
    await yield_to_loop()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["slow cancelled"]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"fast": "fast"}]
    assert asyncio.all_tasks() == before


# --- plain functions that return an awaitable -----------------------------------------------


def _returns_awaitable(
    gate: asyncio.Event | None, *, fail: bool = False, waiting: asyncio.Event | None = None
) -> Any:
    """A plain (not async) step function whose return value is a coroutine."""

    async def later(value: str) -> str:
        if gate is not None:
            if waiting is not None:
                waiting.set()
            await gate.wait()
        if fail:
            msg = "late failure"
            raise RuntimeError(msg)
        return value.upper()

    def step(ctx: Mapping[str, Any]) -> Any:
        return later(str(ctx.get("a", "plain")))

    return step


async def _a(ctx: Mapping[str, Any]) -> str:
    del ctx
    return "a"


@pytest.mark.parametrize("schedule", ["batch", "eager"])
async def test_a_plain_step_returning_an_awaitable_records_what_it_resolves_to(
    schedule: str,
) -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [
            Step("a", _a),
            Step("b", _returns_awaitable(None), depends_on=("a",)),
            Step("c", _returns_awaitable(None)),
        ]
    )
    result = await workflow.run(
        checkpoint_fn=checkpoints.append,
        schedule=schedule,  # type: ignore[arg-type]
    )
    assert dict(result.outputs) == {"a": "a", "b": "A", "c": "PLAIN"}
    assert dict(checkpoints[-1].outputs) == {"a": "a", "c": "PLAIN", "b": "A"}


async def test_a_plain_step_whose_awaitable_fails_fails_the_step() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("a", _a), Step("b", _returns_awaitable(None, fail=True))])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(checkpoint_fn=checkpoints.append)
    assert list(caught.value.errors) == ["b"]
    assert dict(checkpoints[-1].outputs) == {"a": "a"}
    assert dict(checkpoints[-1].errors) == {"b": "RuntimeError: late failure"}


async def test_cancelling_while_a_returned_awaitable_waits_leaves_no_task() -> None:
    gate = asyncio.Event()
    waiting = asyncio.Event()
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("a", _a), Step("waits", _returns_awaitable(gate, waiting=waiting))])
    before = asyncio.all_tasks()
    run = asyncio.create_task(workflow.run(checkpoint_fn=checkpoints.append))
    async with asyncio.timeout(10):
        await waiting.wait()
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    assert asyncio.all_tasks() == before
    assert dict(checkpoints[-1].outputs) == {"a": "a"}


async def test_steps_cancelled_before_they_began_still_count_as_finished() -> None:
    """The first step of a batch fails at once under on_error="cancel": its siblings'
    tasks are cancelled before their first step, and run() still ends (nothing waits
    for them forever)."""
    ran: list[str] = []

    def make(name: str) -> Any:
        async def step(ctx: Mapping[str, Any]) -> str:
            del ctx
            ran.append(name)
            if name == "s0":
                msg = "at once"
                raise RuntimeError(msg)
            return name

        return step

    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step(f"s{i}", make(f"s{i}")) for i in range(5)])
    before = asyncio.all_tasks()
    run = asyncio.create_task(workflow.run(checkpoint_fn=checkpoints.append, on_error="cancel"))
    # Bounded without cancelling: a run waiting for steps that never began would ignore it.
    done, _ = await asyncio.wait({run}, timeout=10)
    assert done, "run() waits for tasks that were cancelled before they began"
    with pytest.raises(WorkflowFailed) as caught:
        await run
    assert ran == ["s0"]
    assert list(caught.value.errors) == ["s0"]
    assert dict(checkpoints[-1].outputs) == {}
    assert asyncio.all_tasks() == before
