"""`current_step()`: each running step's identity, attempt and idempotency key."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    Step,
    StepContext,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    WorkflowResult,
    current_step,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

OUTSIDE = (
    "executionkit.current_step() was called outside a running step; call it from inside a "
    "step's run function"
)


def expected_key(run_id: str, name: str) -> str:
    return hashlib.sha256(f"{run_id}\0{name}".encode()).hexdigest()[:32]


async def run_bounded(workflow: Workflow, **kwargs: Any) -> WorkflowResult:
    async with asyncio.timeout(5):
        return await workflow.run(**kwargs)


def assert_outside() -> None:
    with pytest.raises(RuntimeError, match=f"^{re.escape(OUTSIDE)}$"):
        current_step()


def roundtrip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


# --- what a step sees --------------------------------------------------------------------


async def test_sync_and_async_steps_see_their_own_context() -> None:
    seen: dict[str, StepContext] = {}

    def plain(ctx: Mapping[str, Any]) -> int:
        seen["plain"] = current_step()
        return 1

    async def coroutine(ctx: Mapping[str, Any]) -> int:
        await asyncio.sleep(0)
        seen["coroutine"] = current_step()
        return 2

    workflow = Workflow(
        [
            Step("plain", plain, retries=2),
            Step("coroutine", coroutine, depends_on=("plain",), retries=4, retry_delay=0),
        ]
    )
    result = await run_bounded(workflow)

    for name, max_attempts in (("plain", 3), ("coroutine", 5)):
        context = seen[name]
        assert isinstance(context, StepContext)
        assert context.name == name
        assert context.run_id == result.run_id
        assert context.attempt == 1
        assert context.max_attempts == max_attempts
        assert context.idempotency_key == expected_key(result.run_id, name)
        assert context.progress is None


def test_outside_a_step_current_step_raises() -> None:
    assert_outside()


async def test_outside_a_step_current_step_raises_inside_an_event_loop_too() -> None:
    assert_outside()


async def noop(ctx: Mapping[str, Any]) -> str:
    return "ok"


def plain_noop(ctx: Mapping[str, Any]) -> str:
    current_step()
    return "ok"


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([Step("only", plain_noop)], id="one sync step"),
        pytest.param([Step("only", noop)], id="one async step"),
        pytest.param(
            [Step("a", plain_noop), Step("b", noop, depends_on=("a",)), Step("c", plain_noop)],
            id="several batches",
        ),
    ],
)
async def test_no_step_context_leaks_to_the_caller_after_run(steps: list[Step]) -> None:
    await run_bounded(Workflow(steps))
    assert_outside()


def test_no_step_context_leaks_after_run_sync() -> None:
    Workflow([Step("only", plain_noop)]).run_sync()
    assert_outside()


async def test_no_step_context_leaks_after_a_failed_run() -> None:
    def failing(ctx: Mapping[str, Any]) -> str:
        current_step()
        raise ValueError("boom")

    with pytest.raises(WorkflowFailed):
        await run_bounded(Workflow([Step("only", failing, retries=1, retry_delay=0)]))
    assert_outside()


async def test_checkpoint_fn_is_not_inside_a_step() -> None:
    """The batch checkpoint is taken by the run, not by one of its steps."""
    outcomes: list[str] = []

    def checkpoint_fn(checkpoint: WorkflowCheckpoint) -> None:
        try:
            outcomes.append(current_step().name)
        except RuntimeError:
            outcomes.append("outside")

    workflow = Workflow([Step("a", plain_noop), Step("b", noop, depends_on=("a",))])
    await run_bounded(workflow, checkpoint_fn=checkpoint_fn)
    assert outcomes == ["outside", "outside"]


async def test_checkpoint_fn_is_not_inside_a_step_for_progress_checkpoints() -> None:
    """A checkpoint triggered by save_progress is still taken by the run, not by the step."""
    outcomes: list[tuple[dict[str, Any], str]] = []

    def checkpoint_fn(checkpoint: WorkflowCheckpoint) -> None:
        try:
            where = current_step().name
        except RuntimeError:
            where = "outside"
        outcomes.append((dict(checkpoint.progress), where))

    async def saving(ctx: Mapping[str, Any]) -> str:
        await current_step().save_progress({"n": 1})
        return "ok"

    await run_bounded(Workflow([Step("saving", saving)]), checkpoint_fn=checkpoint_fn)
    assert outcomes == [({"saving": {"n": 1}}, "outside"), ({}, "outside")]


async def test_concurrent_steps_each_see_their_own_context() -> None:
    """Two interleaving steps check their context after every switch to the other."""
    started = {"left": asyncio.Event(), "right": asyncio.Event()}
    rounds = {name: [asyncio.Event() for _ in range(3)] for name in ("left", "right")}
    seen: list[tuple[str, str]] = []

    def make(name: str, other: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            started[name].set()
            await started[other].wait()
            for mine, theirs in zip(rounds[name], rounds[other], strict=True):
                mine.set()
                await theirs.wait()
                seen.append((name, current_step().name))
            return name

        return Step(name, run)

    result = await run_bounded(Workflow([make("left", "right"), make("right", "left")]))
    assert dict(result.outputs) == {"left": "left", "right": "right"}
    assert sorted(seen) == [("left", "left")] * 3 + [("right", "right")] * 3
    # They really interleaved: neither ran all its rounds before the other started.
    assert {seen[0][0], seen[1][0]} == {"left", "right"}


async def test_a_thread_started_by_a_step_sees_its_context() -> None:
    async def offloading(ctx: Mapping[str, Any]) -> str:
        return await asyncio.to_thread(lambda: current_step().name)

    result = await run_bounded(Workflow([Step("offloading", offloading)]))
    assert dict(result.outputs) == {"offloading": "offloading"}


async def test_a_workflow_run_inside_a_step_has_its_own_contexts() -> None:
    """Inner steps see the inner run; afterwards the outer step sees itself again."""
    inner_seen: list[tuple[str, str]] = []

    def inner_step(ctx: Mapping[str, Any]) -> str:
        context = current_step()
        inner_seen.append((context.name, context.run_id))
        return "inner"

    inner = Workflow([Step("inner_step", inner_step)])

    async def outer_step(ctx: Mapping[str, Any]) -> tuple[str, str, str]:
        before = current_step().name
        inner_result = await inner.run(run_id="inner-run")
        after = current_step()
        return before, after.name, inner_result.outputs["inner_step"]

    result = await run_bounded(Workflow([Step("outer_step", outer_step)]), run_id="outer-run")
    assert inner_seen == [("inner_step", "inner-run")]
    assert result.outputs["outer_step"] == ("outer_step", "outer_step", "inner")
    assert_outside()


async def test_attempt_counts_up_across_retries() -> None:
    seen: list[tuple[int, int]] = []

    async def flaky(ctx: Mapping[str, Any]) -> int:
        context = current_step()
        seen.append((context.attempt, context.max_attempts))
        if context.attempt < 4:
            raise ConnectionError("again")
        return context.attempt

    result = await run_bounded(Workflow([Step("flaky", flaky, retries=5, retry_delay=0)]))
    assert seen == [(1, 6), (2, 6), (3, 6), (4, 6)]
    assert dict(result.outputs) == {"flaky": 4}


def test_repr() -> None:
    seen: list[str] = []

    def capture(ctx: Mapping[str, Any]) -> str:
        seen.append(repr(current_step()))
        return "ok"

    Workflow([Step("a", capture, retries=1)]).run_sync(run_id="r-1")
    assert seen == ["StepContext(name='a', run_id='r-1', attempt=1, max_attempts=2)"]


# --- idempotency keys --------------------------------------------------------------------


async def keys_of(workflow: Workflow, keys: dict[str, list[str]], **kwargs: Any) -> str:
    keys.clear()
    result = await run_bounded(workflow, **kwargs)
    return result.run_id


def key_recorder(keys: dict[str, list[str]]) -> Workflow:
    def record(ctx: Mapping[str, Any]) -> str:
        context = current_step()
        keys.setdefault(context.name, []).append(context.idempotency_key)
        return context.idempotency_key

    return Workflow([Step("charge", record), Step("notify", record, depends_on=("charge",))])


async def test_idempotency_key_is_32_hex_chars_of_sha256_of_run_id_and_name() -> None:
    keys: dict[str, list[str]] = {}
    run_id = await keys_of(key_recorder(keys), keys)
    for name in ("charge", "notify"):
        (key,) = keys[name]
        assert re.fullmatch(r"[0-9a-f]{32}", key)
        assert key == expected_key(run_id, name)
    assert keys["charge"] != keys["notify"]


async def test_idempotency_key_differs_between_runs_and_is_stable_for_a_given_run_id() -> None:
    keys: dict[str, list[str]] = {}
    workflow = key_recorder(keys)
    first_id = await keys_of(workflow, keys)
    first = keys["charge"][0]
    second_id = await keys_of(workflow, keys)
    assert first_id != second_id
    assert keys["charge"][0] != first

    await keys_of(workflow, keys, run_id="order-42")
    explicit = keys["charge"][0]
    await keys_of(workflow, keys, run_id="order-42")
    assert keys["charge"][0] == explicit == expected_key("order-42", "charge")


async def test_idempotency_key_separates_run_id_from_step_name() -> None:
    """('ab', 'c') and ('a', 'bc') must not collide."""
    keys: dict[str, list[str]] = {}

    def record(ctx: Mapping[str, Any]) -> str:
        keys.setdefault(current_step().run_id, []).append(current_step().idempotency_key)
        return "ok"

    await run_bounded(Workflow([Step("c", record)]), run_id="ab")
    await run_bounded(Workflow([Step("bc", record)]), run_id="a")
    assert keys["ab"] != keys["a"]


async def test_idempotency_key_is_the_same_for_every_attempt() -> None:
    keys: list[str] = []

    async def flaky(ctx: Mapping[str, Any]) -> str:
        keys.append(current_step().idempotency_key)
        if len(keys) < 3:
            raise TimeoutError
        return "charged"

    result = await run_bounded(Workflow([Step("pay", flaky, retries=2, retry_delay=0)]))
    assert keys == [expected_key(result.run_id, "pay")] * 3


async def test_idempotency_key_is_the_same_after_a_resume() -> None:
    """A step that failed (after retries) and is resumed from a stored checkpoint keeps its key."""
    keys: list[tuple[str, int]] = []
    crash = True

    def prepare(ctx: Mapping[str, Any]) -> str:
        return "order"

    def pay(ctx: Mapping[str, Any]) -> str:
        context = current_step()
        keys.append((context.idempotency_key, context.attempt))
        if crash:
            raise ConnectionError("gateway down")
        return "paid"

    workflow = Workflow(
        [
            Step("prepare", prepare),
            Step("pay", pay, depends_on=("prepare",), retries=1, retry_delay=0),
        ]
    )
    with pytest.raises(WorkflowFailed) as caught:
        await run_bounded(workflow)
    stored = roundtrip(caught.value.checkpoint)
    assert stored.run_id is not None

    crash = False
    result = await run_bounded(workflow, resume_from=stored)
    assert result.run_id == stored.run_id
    assert result.executed == ("pay",)
    key = expected_key(stored.run_id, "pay")
    assert keys == [(key, 1), (key, 2), (key, 1)]
