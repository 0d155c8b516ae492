"""In-step progress: save_progress, the checkpoints it triggers, and resuming from it."""

from __future__ import annotations

import asyncio
import enum
import gc
import json
import logging
import math
import re
import threading
from collections import Counter
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointFormatError,
    CheckpointValueError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    WorkflowResult,
    current_step,
)
from executionkit._checkpoint._value import FORMAT_VERSION

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

HINT = (
    "checkpoints hold plain data only: dict with str keys, list, str, int, finite float, "
    "bool, None"
)
ITEMS = 6
STORAGE_NOTE = (
    "executionkit: checkpoint_fn raised while saving checkpoint seq=1 (step_index=0); "
    "no further step was started"
)


async def run_bounded(workflow: Workflow, **kwargs: Any) -> WorkflowResult:
    async with asyncio.timeout(5):
        return await workflow.run(**kwargs)


async def run_failing(workflow: Workflow, **kwargs: Any) -> WorkflowFailed:
    with pytest.raises(WorkflowFailed) as caught:
        await run_bounded(workflow, **kwargs)
    return caught.value


def roundtrip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


class NonOverlappingStore:
    """An async checkpoint_fn that yields inside every call and counts overlapping calls."""

    def __init__(self) -> None:
        self.checkpoints: list[WorkflowCheckpoint] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            self.checkpoints.append(roundtrip(checkpoint))
        finally:
            self.in_flight -= 1


class Looper:
    """A long step over ITEMS items that saves its progress after each and may crash."""

    def __init__(self, store: list[WorkflowCheckpoint] | None = None) -> None:
        self.processed: list[int] = []
        self.started_from: list[Any] = []
        self.crash_at: int | None = None
        self.store = store

    async def __call__(self, ctx: Mapping[str, Any]) -> list[int]:
        context = current_step()
        state = context.progress
        self.started_from.append(state)
        if state is None:
            state = {"next": 0, "partial": []}
        for item in range(state["next"], ITEMS):
            self.processed.append(item)
            state = {"next": item + 1, "partial": [*state["partial"], item * ctx["factor"]]}
            await context.save_progress(state)
            if self.store is not None:  # the checkpoint holding it was taken before we resumed
                assert self.store[-1].progress[context.name] == state
            if item + 1 == self.crash_at:
                raise RuntimeError(f"crashed after item {item}")
        return list(state["partial"])


def loop_workflow(looper: Looper) -> Workflow:
    def prepare(ctx: Mapping[str, Any]) -> int:
        return 10

    def report(ctx: Mapping[str, Any]) -> int:
        return sum(ctx["loop"])

    return Workflow(
        [
            Step("factor", prepare),
            Step("loop", looper, depends_on=("factor",)),
            Step("report", report, depends_on=("loop",)),
        ]
    )


FULL = {"factor": 10, "loop": [0, 10, 20, 30, 40, 50], "report": 150}


# --- progress checkpoints ----------------------------------------------------------------


async def test_each_saved_progress_is_checkpointed_in_order_without_overlap() -> None:
    store = NonOverlappingStore()
    looper = Looper(store.checkpoints)
    result = await run_bounded(loop_workflow(looper), checkpoint_fn=store)

    assert dict(result.outputs) == FULL
    assert store.max_in_flight == 1
    seqs = [cp.seq for cp in store.checkpoints]
    assert seqs == list(range(1, len(seqs) + 1))
    progress = [cp.to_dict()["progress"] for cp in store.checkpoints]
    saved = [
        {"loop": {"next": n, "partial": [10 * i for i in range(n)]}} for n in range(1, ITEMS + 1)
    ]
    # batch 1, one checkpoint per saved value, then the batch ends of 'loop' and 'report'
    assert progress == [{}, *saved, {}, {}]
    assert [tuple(cp.outputs) for cp in store.checkpoints] == [
        ("factor",),
        *[("factor",)] * ITEMS,
        ("factor", "loop"),
        ("factor", "loop", "report"),
    ]
    assert all(cp.version == FORMAT_VERSION == 5 for cp in store.checkpoints)


async def test_saves_during_a_running_checkpoint_are_folded_into_the_next() -> None:
    """Four saves, the first checkpoint call held open during the other three: two calls."""
    calls: list[WorkflowCheckpoint] = []
    entered = asyncio.Event()
    release = asyncio.Event()
    futures: list[asyncio.Future[None]] = []
    pending: list[bool] = []
    # Which save futures were resolved when each checkpoint_fn call began.
    done_at_call: list[list[bool]] = []

    async def checkpoint_fn(checkpoint: WorkflowCheckpoint) -> None:
        calls.append(checkpoint)
        done_at_call.append([future.done() for future in futures])
        if len(calls) == 1:
            entered.set()
            await release.wait()

    async def saver(ctx: Mapping[str, Any]) -> str:
        context = current_step()
        futures.append(context.save_progress({"n": 1}))
        await entered.wait()  # the checkpoint carrying n=1 is being stored now
        futures.extend(context.save_progress({"n": n}) for n in (2, 3, 4))
        pending.extend(future.done() for future in futures)
        release.set()
        await asyncio.gather(*futures)
        return "done"

    result = await run_bounded(Workflow([Step("saver", saver)]), checkpoint_fn=checkpoint_fn)
    assert dict(result.outputs) == {"saver": "done"}
    assert pending == [False, False, False, False]
    assert done_at_call == [
        [False],  # while storing n=1
        [True, False, False, False],  # n=1 was stored; n=2..4 ride on this call
        [True, True, True, True],  # the batch end
    ]
    assert [dict(cp.progress) for cp in calls] == [
        {"saver": {"n": 1}},
        {"saver": {"n": 4}},
        {},
    ]
    assert [dict(cp.outputs) for cp in calls] == [{}, {}, {"saver": "done"}]
    assert [cp.seq for cp in calls] == [1, 2, 3]


async def test_two_steps_saving_concurrently_never_overlap_checkpoint_calls() -> None:
    store = NonOverlappingStore()

    def make(name: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> int:
            for count in range(1, 5):
                await current_step().save_progress({"count": count})
            return count

        return Step(name, run)

    result = await run_bounded(Workflow([make("x"), make("y")]), checkpoint_fn=store)
    assert dict(result.outputs) == {"x": 4, "y": 4}
    assert store.max_in_flight == 1
    # Every saved value of each step was in some checkpoint.
    for name in ("x", "y"):
        seen = {cp.progress[name]["count"] for cp in store.checkpoints if name in cp.progress}
        assert seen == {1, 2, 3, 4}
    assert dict(store.checkpoints[-1].progress) == {}


async def test_progress_is_none_until_saved_and_then_the_last_saved_value() -> None:
    seen: list[Any] = []

    async def step(ctx: Mapping[str, Any]) -> str:
        context = current_step()
        seen.append(context.progress)
        await context.save_progress({"a": 1})
        seen.append(context.progress)
        await context.save_progress([1, 2])
        seen.append(current_step().progress)
        return "ok"

    await run_bounded(Workflow([Step("s", step)]), checkpoint_fn=lambda cp: None)
    assert seen == [None, {"a": 1}, [1, 2]]


# --- crash and resume --------------------------------------------------------------------


async def test_resume_continues_from_the_saved_progress() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    crashing = Looper(checkpoints)
    crashing.crash_at = 3
    failure = await run_failing(loop_workflow(crashing), checkpoint_fn=checkpoints.append)

    saved = {"next": 3, "partial": [0, 10, 20]}
    assert crashing.processed == [0, 1, 2]
    assert failure.checkpoint is checkpoints[-1]
    assert dict(failure.checkpoint.progress) == {"loop": saved}
    assert dict(failure.checkpoint.errors) == {"loop": "RuntimeError: crashed after item 2"}
    assert dict(failure.checkpoint.outputs) == {"factor": 10}

    stored = roundtrip(failure.checkpoint)
    resumed_checkpoints: list[WorkflowCheckpoint] = []
    resumed = Looper(resumed_checkpoints)
    result = await run_bounded(
        loop_workflow(resumed), resume_from=stored, checkpoint_fn=resumed_checkpoints.append
    )
    assert resumed.started_from == [saved]
    assert resumed.processed == [3, 4, 5]
    assert Counter(crashing.processed + resumed.processed) == Counter(range(ITEMS))
    assert dict(result.outputs) == FULL
    assert dict(resumed_checkpoints[-1].progress) == {}
    assert resumed_checkpoints[-1].to_dict()["progress"] == {}
    # The entry is dropped as soon as the step completes, not only at the end of the run.
    loop_done = next(cp for cp in resumed_checkpoints if "loop" in cp.outputs)
    assert dict(loop_done.progress) == {}


async def test_progress_survives_a_retry_of_the_same_step() -> None:
    """Attempt 2 reads what attempt 1 saved before failing."""
    started_from: list[Any] = []

    async def flaky(ctx: Mapping[str, Any]) -> int:
        context = current_step()
        started_from.append(context.progress)
        done = 0 if context.progress is None else context.progress["done"]
        if context.attempt == 1:
            await context.save_progress({"done": done + 5})
            raise ConnectionError("dropped")
        return done + 1

    result = await run_bounded(
        Workflow([Step("flaky", flaky, retries=1, retry_delay=0)]), checkpoint_fn=lambda cp: None
    )
    assert started_from == [None, {"done": 5}]
    assert dict(result.outputs) == {"flaky": 6}


async def test_only_the_completed_steps_progress_is_dropped() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    failed_saved = asyncio.Event()

    async def completes(ctx: Mapping[str, Any]) -> str:
        await current_step().save_progress({"half": True})
        await failed_saved.wait()
        return "complete"

    async def fails(ctx: Mapping[str, Any]) -> str:
        await current_step().save_progress({"upto": 7})
        failed_saved.set()
        raise ValueError("bad item")

    workflow = Workflow([Step("completes", completes), Step("fails", fails)])
    failure = await run_failing(workflow, checkpoint_fn=checkpoints.append)
    assert dict(failure.checkpoint.outputs) == {"completes": "complete"}
    assert dict(failure.checkpoint.progress) == {"fails": {"upto": 7}}
    assert any(cp.progress.get("completes") == {"half": True} for cp in checkpoints)


# --- sync steps and runs without checkpoint_fn -------------------------------------------


def no_asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "asyncio" and record.levelno >= logging.WARNING
    ]


async def test_a_sync_step_saves_progress_without_awaiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In its worker thread, a plain step's progress is checkpointed while it runs."""
    caplog.set_level(logging.DEBUG, logger="asyncio")
    checkpoints: list[WorkflowCheckpoint] = []
    saved = threading.Event()

    def save(checkpoint: WorkflowCheckpoint) -> None:
        checkpoints.append(checkpoint)
        if checkpoint.progress:
            saved.set()

    def sync_step(ctx: Mapping[str, Any]) -> str:
        current_step().save_progress({"n": 1})  # the future is deliberately ignored
        assert saved.wait(10), "the progress was never checkpointed"
        return "ok"

    result = await run_bounded(Workflow([Step("sync_step", sync_step)]), checkpoint_fn=save)
    assert dict(result.outputs) == {"sync_step": "ok"}
    # The completed output supersedes the progress.
    assert [dict(cp.progress) for cp in checkpoints] == [{"sync_step": {"n": 1}}, {}]
    assert [dict(cp.outputs) for cp in checkpoints] == [{}, {"sync_step": "ok"}]
    assert no_asyncio_errors(caplog) == []


async def test_an_inline_sync_step_saves_progress_with_its_output(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    checkpoints: list[WorkflowCheckpoint] = []

    def sync_step(ctx: Mapping[str, Any]) -> str:
        current_step().save_progress({"n": 1})  # the future is deliberately ignored
        return "ok"

    result = await run_bounded(
        Workflow([Step("sync_step", sync_step, inline=True)]), checkpoint_fn=checkpoints.append
    )
    assert dict(result.outputs) == {"sync_step": "ok"}
    # On the loop it blocks the loop until it returns, so no checkpoint can be taken
    # between the save and the completion; the completed output supersedes the progress.
    assert [dict(cp.progress) for cp in checkpoints] == [{}]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"sync_step": "ok"}]
    assert no_asyncio_errors(caplog) == []


async def test_a_failing_sync_step_leaves_its_progress_in_the_checkpoint() -> None:
    def sync_step(ctx: Mapping[str, Any]) -> str:
        current_step().save_progress({"upto": 2})
        raise ValueError("item 3 is broken")

    checkpoints: list[WorkflowCheckpoint] = []
    failure = await run_failing(
        Workflow([Step("sync_step", sync_step)]), checkpoint_fn=checkpoints.append
    )
    assert dict(failure.checkpoint.progress) == {"sync_step": {"upto": 2}}
    assert failure.checkpoint is checkpoints[-1]


async def test_without_checkpoint_fn_the_future_is_already_done() -> None:
    states: list[tuple[bool, Any]] = []

    async def step(ctx: Mapping[str, Any]) -> str:
        future = current_step().save_progress({"next": 4})
        states.append((future.done(), future.result() if future.done() else "pending"))
        await future
        raise RuntimeError("crash")

    failure = await run_failing(Workflow([Step("s", step)]))
    assert states == [(True, None)]
    assert dict(failure.checkpoint.progress) == {"s": {"next": 4}}
    assert failure.checkpoint.seq == 1


# --- storage failures --------------------------------------------------------------------


@pytest.mark.parametrize("step_catches", [True, False])
async def test_checkpoint_fn_raising_on_a_progress_checkpoint(step_catches: bool) -> None:
    """The awaiting step gets the error; run() raises it with a note; nothing else starts."""
    disk_full = OSError("disk full")
    caught: list[BaseException] = []
    started: list[str] = []

    def checkpoint_fn(checkpoint: WorkflowCheckpoint) -> None:
        if checkpoint.progress:
            raise disk_full

    async def saving(ctx: Mapping[str, Any]) -> str:
        started.append("saving")
        try:
            await current_step().save_progress({"k": 1})
        except OSError as exc:
            caught.append(exc)
            if not step_catches:
                raise
        return "survived"

    def later(ctx: Mapping[str, Any]) -> str:
        started.append("later")
        return "later"

    workflow = Workflow([Step("saving", saving), Step("later", later, depends_on=("saving",))])
    with pytest.raises(OSError, match=re.escape("disk full")) as raised:
        await run_bounded(workflow, checkpoint_fn=checkpoint_fn)
    assert raised.value is disk_full
    assert caught == [disk_full]
    assert started == ["saving"]
    assert str(disk_full) == "disk full"
    assert disk_full.__notes__ == [STORAGE_NOTE]


async def test_a_sync_step_ignoring_a_failed_progress_checkpoint_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No 'Future exception was never retrieved' for the future the sync step dropped."""
    caplog.set_level(logging.DEBUG, logger="asyncio")

    def checkpoint_fn(checkpoint: WorkflowCheckpoint) -> None:
        raise OSError("read-only file system")

    def sync_step(ctx: Mapping[str, Any]) -> str:
        current_step().save_progress({"n": 1})
        return "ok"

    with pytest.raises(OSError, match=re.escape("read-only file system")) as raised:
        await run_bounded(Workflow([Step("sync_step", sync_step)]), checkpoint_fn=checkpoint_fn)
    assert str(raised.value) == "read-only file system"
    assert no_asyncio_errors(caplog) == []


# --- plain data only ---------------------------------------------------------------------


class Colour(enum.IntEnum):
    RED = 1


def self_containing_list() -> list[Any]:
    value: list[Any] = [1]
    value.append(value)
    return value


def self_containing_dict() -> dict[str, Any]:
    value: dict[str, Any] = {"ok": 1}
    value["me"] = value
    return value


def nan_deep_inside() -> dict[str, Any]:
    return {"items": [{"value": 0}, {"value": 1}, {"value": 2}, {"value": math.nan}]}


@pytest.mark.parametrize(
    ("make", "path", "problem"),
    [
        pytest.param(lambda: {1, 2}, "", "{1, 2} (set) is not plain data", id="set"),
        pytest.param(lambda: (1, 2), "", "(1, 2) (tuple) is not plain data", id="tuple"),
        pytest.param(
            lambda: {"when": datetime(2024, 5, 1)},  # noqa: DTZ001 - any datetime is refused
            "['when']",
            "datetime.datetime(2024, 5, 1, 0, 0) (datetime) is not plain data",
            id="datetime",
        ),
        pytest.param(lambda: math.nan, "", "float('nan') is not valid JSON", id="nan"),
        pytest.param(
            nan_deep_inside,
            "['items'][3]['value']",
            "float('nan') is not valid JSON",
            id="nan deep inside",
        ),
        pytest.param(
            lambda: {"a": [1, -math.inf]}, "['a'][1]", "float('-inf') is not valid JSON", id="inf"
        ),
        pytest.param(
            lambda: {"counts": {1: "one"}}, "['counts']", "key 1 is not a str", id="int key"
        ),
        pytest.param(
            self_containing_list,
            "[1]",
            "a container that contains itself is not valid JSON",
            id="self-containing list",
        ),
        pytest.param(
            self_containing_dict,
            "['me']",
            "a container that contains itself is not valid JSON",
            id="self-containing dict",
        ),
        pytest.param(lambda: [b"raw"], "[0]", "b'raw' (bytes) is not plain data", id="bytes"),
        pytest.param(
            lambda: Decimal("1.5"), "", "Decimal('1.5') (Decimal) is not plain data", id="Decimal"
        ),
        pytest.param(
            lambda: [Colour.RED], "[0]", "<Colour.RED: 1> (Colour) is not plain data", id="IntEnum"
        ),
        pytest.param(
            lambda: {"ids": set(range(30))},
            "['ids']",
            "{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16... (set) is not plain data",
            id="long value preview",
        ),
    ],
)
async def test_progress_that_is_not_plain_data_is_refused(
    make: Callable[[], object], path: str, problem: str
) -> None:
    """The error names the step and the path; nothing is stored and no checkpoint is taken."""
    errors: list[CheckpointValueError] = []
    progress_after: list[Any] = []

    async def step(ctx: Mapping[str, Any]) -> str:
        context = current_step()
        await context.save_progress({"fine": True})
        try:
            context.save_progress(make())
        except CheckpointValueError as exc:
            errors.append(exc)
        progress_after.append(context.progress)
        return "ok"

    checkpoints: list[WorkflowCheckpoint] = []
    await run_bounded(Workflow([Step("x", step)]), checkpoint_fn=checkpoints.append)

    where = f" at {path}" if path else ""
    (error,) = errors
    assert str(error) == f"progress of step 'x'{where}: {problem}; {HINT}"
    assert error.path == path
    assert progress_after == [{"fine": True}]
    assert [dict(cp.progress) for cp in checkpoints] == [{"x": {"fine": True}}, {}]


async def test_the_error_fails_the_step_when_not_caught() -> None:
    async def step(ctx: Mapping[str, Any]) -> str:
        await current_step().save_progress({"seen": {"a", "b"}})
        return "unreachable"

    failure = await run_failing(Workflow([Step("x", step)]))
    error = failure.errors["x"]
    assert isinstance(error, CheckpointValueError)
    assert error.path == "['seen']"
    assert error.value == {"a", "b"}
    assert dict(failure.checkpoint.progress) == {}


async def test_plain_values_are_accepted_and_survive_json() -> None:
    shared = [1, 2]
    value: dict[str, Any] = {
        "none": None,
        "flag": False,
        "big": 10**30,
        "neg_zero": -0.0,
        "text": "é\0",
        "nested": [{"a": []}, {}],
        "shared_1": shared,
        "shared_2": shared,  # the same list twice is not a cycle
    }
    checkpoints: list[WorkflowCheckpoint] = []

    async def step(ctx: Mapping[str, Any]) -> str:
        await current_step().save_progress(value)
        raise RuntimeError("stop here")

    failure = await run_failing(Workflow([Step("x", step)]), checkpoint_fn=checkpoints.append)
    assert roundtrip(failure.checkpoint).progress["x"] == value
    assert len(checkpoints) == 2


# --- checkpoint format versions ----------------------------------------------------------


def version_1_dict() -> dict[str, Any]:
    return {
        "version": 1,
        "run_id": "run-v1",
        "seq": 4,
        "step_index": 1,
        "created_at": "2024-05-01T12:00:00+00:00",
        "outputs": {"factor": 10},
        "cost": {"input_tokens": 3, "output_tokens": 2, "llm_calls": 1},
        "context_keys": [],
        "errors": {},
        "metadata": {"job": "old"},
    }


async def test_run_checkpoints_are_the_current_version_with_a_progress_key() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    await run_bounded(loop_workflow(Looper()), checkpoint_fn=checkpoints.append)
    assert checkpoints
    for checkpoint in checkpoints:
        assert checkpoint.version == FORMAT_VERSION
        assert "progress" in checkpoint.to_dict()


async def test_a_version_1_checkpoint_loads_and_resumes() -> None:
    old = WorkflowCheckpoint.from_dict(version_1_dict())
    assert old.version == 1
    assert dict(old.progress) == {}
    assert old.to_dict() == version_1_dict()  # written back without a progress key

    looper = Looper()
    checkpoints: list[WorkflowCheckpoint] = []
    result = await run_bounded(
        loop_workflow(looper), resume_from=old, checkpoint_fn=checkpoints.append
    )
    assert looper.started_from == [None]
    assert dict(result.outputs) == FULL
    assert result.run_id == "run-v1"
    assert result.restored == ("factor",)
    assert checkpoints[0].seq == 5
    assert all(cp.version == FORMAT_VERSION for cp in checkpoints)


def test_a_version_1_dict_cannot_carry_progress() -> None:
    data = version_1_dict()
    data["progress"] = {"loop": {"next": 1}}
    expected = "checkpoint has unexpected field 'progress'"
    with pytest.raises(CheckpointFormatError, match=f"^{re.escape(expected)}$"):
        WorkflowCheckpoint.from_dict(data)


async def test_saved_progress_is_a_copy_the_step_cannot_change_afterwards() -> None:
    """Mutating a saved value later changes neither the checkpoint nor what was validated."""
    checkpoints: list[WorkflowCheckpoint] = []

    async def step(ctx: Mapping[str, Any]) -> int:
        state: dict[str, Any] = {"done": [1]}
        await current_step().save_progress(state)
        state["done"].append({2})  # a set: would not be plain data
        state["extra"] = True
        return 1

    await Workflow([Step("s", step)]).run(checkpoint_fn=checkpoints.append)
    assert dict(checkpoints[0].progress) == {"s": {"done": [1]}}
    json.dumps(checkpoints[0].to_dict())


async def test_save_progress_from_a_thread_the_step_started_is_recorded() -> None:
    """asyncio.to_thread copies the step's context: a value saved there is the step's progress."""
    futures: list[asyncio.Future[None]] = []

    def blocking() -> None:
        futures.append(current_step().save_progress({"n": 1}))

    async def step(ctx: Mapping[str, Any]) -> str:
        await asyncio.to_thread(blocking)
        await futures[0]  # saved before failing
        msg = "stop here, so the recorded progress value stays in the checkpoint"
        raise ValueError(msg)

    failure = await run_failing(Workflow([Step("s", step)]), checkpoint_fn=lambda cp: None)
    assert dict(failure.checkpoint.progress) == {"s": {"n": 1}}
