"""Cancellation and interrupts: nothing that completed is lost, nothing outlives run().

Covers cancelling the task awaiting ``run()`` (once, or again while the interruption
checkpoint is being saved), `asyncio.timeout` around a run, steps raising
`KeyboardInterrupt`, `SystemExit` or `asyncio.CancelledError`, and Ctrl-C reaching
``run_sync`` in a real subprocess. Ordering is pinned with `asyncio.Event` gates; the
whole file runs with warnings as errors, and a few tests collect garbage afterwards so
that "Task was destroyed but it is pending" or "coroutine was never awaited" would fail
them.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import PatternResult, Step, TokenUsage, Workflow, WorkflowCheckpoint

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

ROOT = Path(__file__).resolve().parents[2]


def set_when_recorded(event: asyncio.Event) -> None:
    """Set ``event`` once the runner has seen the calling step's task end.

    The runner adds its own done-callback when it creates a step's task, before the step
    body runs; done-callbacks run in registration order.
    """
    task = asyncio.current_task()
    assert task is not None
    task.add_done_callback(lambda _: event.set())


def hang_guard() -> asyncio.Timeout:
    """A five-second bound on a run; tests assert afterwards that it never expired.

    Expiry cancels the run like any other cancellation, so a run that ends in an
    interrupt anyway could pass late instead of failing; ``expired()`` tells them apart.
    """
    return asyncio.timeout(5)


async def forever() -> None:
    await asyncio.Event().wait()


class Batch:
    """Steps for one interrupted batch: ``done`` completes, ``hanging`` waits until cancelled.

    ``after`` depends on ``done`` and so belongs to the next batch, which must never start.
    """

    def __init__(self) -> None:
        self.log: list[str] = []
        self.calls: Counter[str] = Counter()
        self.done_recorded = asyncio.Event()
        self.hanging_started = asyncio.Event()
        self.hang = True
        self.cleanup_yields = 0

    def done(self) -> Step:
        async def run(ctx: Mapping[str, Any]) -> PatternResult[str]:
            self.calls["done"] += 1
            set_when_recorded(self.done_recorded)
            return PatternResult("d", cost=TokenUsage(2, 1, 1))

        return Step("done", run)

    def hanging(self, name: str = "hanging", *deps: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:
            self.calls[name] += 1
            if self.hang:
                self.hanging_started.set()
                try:
                    await forever()
                except asyncio.CancelledError:
                    # Cleanup that takes a few turns of the loop; run() must wait for it.
                    for _ in range(self.cleanup_yields):
                        await asyncio.sleep(0)
                    self.log.append(f"{name} cancelled")
                    raise
            return name

        return Step(name, run, depends_on=deps)

    def after(self) -> Step:
        def run(ctx: Mapping[str, Any]) -> str:
            self.calls["after"] += 1
            return f"after:{ctx['done']}"

        return Step("after", run, depends_on=("done",))

    def workflow(self) -> Workflow:
        return Workflow([self.done(), self.hanging(), self.after()])

    async def both_running(self) -> None:
        """Wait until ``done`` was recorded and ``hanging`` is waiting."""
        async with asyncio.timeout(5):
            await self.done_recorded.wait()
            await self.hanging_started.wait()


class GatedStore:
    """An async checkpoint_fn that blocks inside every call until ``release`` is set."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.saved: list[WorkflowCheckpoint] = []

    async def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.log.append(f"saving {sorted(checkpoint.outputs)}")
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.log.append("saving cancelled")
            raise
        self.saved.append(checkpoint)
        self.log.append("saved")


# --- cancelling the task awaiting run() ----------------------------------------------------


@pytest.mark.parametrize("extra_cancels", [0, 1, 3])
async def test_cancelled_run_checkpoints_completed_steps_and_awaits_the_checkpoint_fn(
    extra_cancels: int,
) -> None:
    """Cancel mid-batch (and again while saving): the save completes, then CancelledError."""
    batch = Batch()
    batch.cleanup_yields = 20
    store = GatedStore(batch.log)
    before = asyncio.all_tasks()
    task = asyncio.create_task(batch.workflow().run(checkpoint_fn=store))
    await batch.both_running()
    task.cancel()
    async with asyncio.timeout(5):
        await store.entered.wait()
    for _ in range(extra_cancels):
        task.cancel()
        await asyncio.sleep(0)  # let this cancellation reach run() on its own
    assert not task.done()
    assert batch.log == ["hanging cancelled", "saving ['done']"]
    store.release.set()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert task.cancelled()
    assert batch.log == ["hanging cancelled", "saving ['done']", "saved"]
    assert [dict(cp.outputs) for cp in store.saved] == [{"done": "d"}]
    assert store.saved[0].cost == TokenUsage(2, 1, 1)
    assert batch.calls == Counter({"done": 1, "hanging": 1})
    assert asyncio.all_tasks() == before
    gc.collect()


async def test_cancelled_run_without_checkpoint_fn_leaves_no_task() -> None:
    batch = Batch()
    batch.cleanup_yields = 20
    before = asyncio.all_tasks()
    task = asyncio.create_task(batch.workflow().run())
    await batch.both_running()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert batch.log == ["hanging cancelled"]
    assert "after" not in batch.calls
    assert asyncio.all_tasks() == before
    gc.collect()


async def test_cancel_while_a_batch_checkpoint_is_saved_lets_the_save_finish() -> None:
    """A cancellation never cuts a checkpoint_fn call short; the next batch never starts."""
    log: list[str] = []
    store = GatedStore(log)
    calls: Counter[str] = Counter()

    def step(name: str, *deps: str) -> Step:
        def run(ctx: Mapping[str, Any]) -> str:
            calls[name] += 1
            return name

        return Step(name, run, depends_on=deps)

    workflow = Workflow([step("a"), step("b", "a")])
    before = asyncio.all_tasks()
    task = asyncio.create_task(workflow.run(checkpoint_fn=store))
    async with asyncio.timeout(5):
        await store.entered.wait()
    task.cancel()
    await asyncio.sleep(0)  # let the cancellation reach run() before the save may finish
    store.release.set()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert log == ["saving ['a']", "saved"]
    assert [dict(cp.outputs) for cp in store.saved] == [{"a": "a"}]
    assert calls == Counter({"a": 1})
    assert asyncio.all_tasks() == before


async def test_cancel_after_a_failure_checkpoints_the_error_and_propagates_cancellation() -> None:
    """finish mode waits for hanging after fail failed; a cancellation then wins."""
    batch = Batch()
    batch.cleanup_yields = 20
    checkpoints: list[WorkflowCheckpoint] = []
    fail_recorded = asyncio.Event()

    async def fail(ctx: Mapping[str, Any]) -> None:
        await batch.done_recorded.wait()
        set_when_recorded(fail_recorded)
        msg = "boom"
        raise ValueError(msg)

    workflow = Workflow([batch.done(), Step("fail", fail), batch.hanging(), batch.after()])
    before = asyncio.all_tasks()
    task = asyncio.create_task(workflow.run(checkpoint_fn=checkpoints.append, on_error="finish"))
    await batch.both_running()
    async with asyncio.timeout(5):
        await fail_recorded.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert batch.log == ["hanging cancelled"]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"done": "d"}]
    assert [dict(cp.errors) for cp in checkpoints] == [{"fail": "ValueError: boom"}]
    assert asyncio.all_tasks() == before


async def test_asyncio_timeout_around_run_raises_timeout_error_after_the_checkpoint() -> None:
    batch = Batch()
    batch.cleanup_yields = 20
    checkpoints: list[WorkflowCheckpoint] = []
    loop = asyncio.get_running_loop()
    deadlines: list[asyncio.Timeout] = []

    async def expire(ctx: Mapping[str, Any]) -> None:
        await batch.done_recorded.wait()
        deadlines[0].reschedule(loop.time())  # the deadline is now: it expires at once
        try:
            await forever()
        except asyncio.CancelledError:
            batch.log.append("expire cancelled")
            raise

    workflow = Workflow([batch.done(), Step("expire", expire), batch.hanging(), batch.after()])

    async def run_with_deadline() -> None:
        async with asyncio.timeout(None) as deadline:
            deadlines.append(deadline)
            await workflow.run(checkpoint_fn=checkpoints.append)

    before = asyncio.all_tasks()
    async with asyncio.timeout(5):  # a safety bound around the timeout under test
        with pytest.raises(TimeoutError):
            await run_with_deadline()
    assert deadlines[0].expired()
    assert sorted(batch.log) == ["expire cancelled", "hanging cancelled"]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"done": "d"}]
    assert "after" not in batch.calls
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0  # run() let the timeout's cancellation through unchanged
    assert asyncio.all_tasks() == before


async def test_resume_after_cancellation_runs_only_unrecorded_steps() -> None:
    """a; then b and c (c hangs and is cancelled after b was recorded); then d(b), e(c)."""
    batch = Batch()
    b_recorded = asyncio.Event()
    checkpoints: list[WorkflowCheckpoint] = []

    def step(name: str, *deps: str) -> Step:
        async def run(ctx: Mapping[str, Any]) -> str:  # own task: set_when_recorded needs it
            batch.calls[name] += 1
            if name == "b":
                set_when_recorded(b_recorded)
            return name + "(" + ",".join(ctx[dep] for dep in deps) + ")"

        return Step(name, run, depends_on=deps)

    def workflow() -> Workflow:
        return Workflow(
            [step("a"), step("b", "a"), batch.hanging("c", "a"), step("d", "b"), step("e", "c")]
        )

    task = asyncio.create_task(workflow().run(checkpoint_fn=checkpoints.append))
    async with asyncio.timeout(5):
        await b_recorded.wait()
        await batch.hanging_started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert [dict(cp.outputs) for cp in checkpoints] == [{"a": "a()"}, {"a": "a()", "b": "b(a())"}]
    assert batch.calls == Counter({"a": 1, "b": 1, "c": 1})

    saved = WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoints[-1].to_dict())))
    batch.hang = False
    batch.calls.clear()
    async with asyncio.timeout(5):
        result = await workflow().run(resume_from=saved)
    assert batch.calls == Counter({"c": 1, "d": 1, "e": 1})
    assert dict(result.outputs) == {
        "a": "a()",
        "b": "b(a())",
        "c": "c",
        "d": "d(b(a()))",
        "e": "e(c)",
    }
    assert result.restored == ("a", "b")
    gc.collect()


async def test_cancelling_a_step_waiting_to_retry_is_prompt() -> None:
    """A long backoff between attempts does not delay the interruption."""
    batch = Batch()
    attempts: list[int] = []
    first_attempt_failed = asyncio.Event()
    checkpoints: list[WorkflowCheckpoint] = []

    def flaky(ctx: Mapping[str, Any]) -> None:
        attempts.append(1)
        first_attempt_failed.set()
        msg = "rate limited"
        raise ConnectionError(msg)

    workflow = Workflow(
        [
            batch.done(),
            # inline: it sets an asyncio event, which only the loop's thread may do
            Step("flaky", flaky, retries=5, retry_delay=3600, retry_jitter=0, inline=True),
            batch.after(),
        ]
    )
    before = asyncio.all_tasks()
    task = asyncio.create_task(workflow.run(checkpoint_fn=checkpoints.append))
    async with asyncio.timeout(5):
        await batch.done_recorded.wait()
        await first_attempt_failed.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert attempts == [1]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"done": "d"}]
    assert [dict(cp.errors) for cp in checkpoints] == [{}]
    assert asyncio.all_tasks() == before


# --- steps raising KeyboardInterrupt, SystemExit or CancelledError -------------------------

INTERRUPTS = [
    pytest.param(KeyboardInterrupt, id="KeyboardInterrupt"),
    pytest.param(functools.partial(SystemExit, 3), id="SystemExit"),
]


def interrupting_step(
    batch: Batch, make: Callable[[], BaseException], raised: list[BaseException], *, sync: bool
) -> Step:
    """``boom``: raises once ``done`` completed and ``hanging`` is waiting."""

    def fire() -> None:
        raised.append(make())
        raise raised[-1]

    def boom_sync(ctx: Mapping[str, Any]) -> None:
        # Runs inline in its task's first step; declaration order started done and
        # hanging first (a RuntimeError here would fail the test as WorkflowFailed).
        if batch.calls["done"] != 1 or not batch.hanging_started.is_set():
            msg = "boom ran before its siblings"
            raise RuntimeError(msg)
        fire()

    async def boom_async(ctx: Mapping[str, Any]) -> None:
        await batch.done_recorded.wait()
        await batch.hanging_started.wait()
        fire()

    return Step("boom", boom_sync if sync else boom_async)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("make", INTERRUPTS)
async def test_step_raising_keyboard_interrupt_or_system_exit_propagates_after_checkpoint(
    make: Callable[[], BaseException], sync: bool
) -> None:
    batch = Batch()
    batch.cleanup_yields = 20
    raised: list[BaseException] = []
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [
            batch.done(),
            batch.hanging(),
            interrupting_step(batch, make, raised, sync=sync),
            batch.after(),
        ]
    )
    before = asyncio.all_tasks()
    guard = hang_guard()
    with pytest.raises(BaseException) as caught:  # identity is checked below
        async with guard:
            await workflow.run(checkpoint_fn=checkpoints.append)
    assert not guard.expired()
    assert len(raised) == 1
    assert caught.value is raised[0]
    assert not hasattr(caught.value, "__notes__")
    assert batch.log == ["hanging cancelled"]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"done": "d"}]
    assert [dict(cp.errors) for cp in checkpoints] == [{}]
    assert batch.calls == Counter({"done": 1, "hanging": 1})
    assert asyncio.all_tasks() == before
    gc.collect()


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_step_raising_cancelled_error_propagates_after_checkpoint(sync: bool) -> None:
    batch = Batch()
    batch.cleanup_yields = 20
    raised: list[BaseException] = []
    checkpoints: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [
            batch.done(),
            batch.hanging(),
            interrupting_step(batch, asyncio.CancelledError, raised, sync=sync),
            batch.after(),
        ]
    )
    before = asyncio.all_tasks()
    guard = hang_guard()
    with pytest.raises(asyncio.CancelledError) as caught:
        async with guard:
            await workflow.run(checkpoint_fn=checkpoints.append)
    assert not guard.expired()
    assert str(caught.value) == "step 'boom' was cancelled"
    assert len(raised) == 1
    assert batch.log == ["hanging cancelled"]
    assert [dict(cp.outputs) for cp in checkpoints] == [{"done": "d"}]
    assert "after" not in batch.calls
    current = asyncio.current_task()
    assert current is not None
    assert current.cancelling() == 0
    assert asyncio.all_tasks() == before


@pytest.mark.parametrize("how", ["step raises KeyboardInterrupt", "run is cancelled"])
async def test_failed_interruption_checkpoint_is_noted_on_the_interrupt(how: str) -> None:
    """The interrupt still propagates; the storage error becomes a note on it."""
    batch = Batch()
    raised: list[BaseException] = []
    attempts: list[WorkflowCheckpoint] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        attempts.append(checkpoint)
        msg = "disk full"
        raise OSError(msg)

    steps = [batch.done(), batch.hanging(), batch.after()]
    if how == "step raises KeyboardInterrupt":
        steps.append(interrupting_step(batch, KeyboardInterrupt, raised, sync=False))

    async def interrupted() -> None:
        if how == "step raises KeyboardInterrupt":
            # Awaited here, not in a task: a KeyboardInterrupt leaving a task's
            # coroutine would tear through the event loop.
            await Workflow(steps).run(checkpoint_fn=save)
            return
        task = asyncio.create_task(Workflow(steps).run(checkpoint_fn=save))
        await batch.both_running()
        task.cancel()
        await task

    before = asyncio.all_tasks()
    guard = hang_guard()
    with pytest.raises(BaseException) as caught:  # the type is checked below
        async with guard:
            await interrupted()
    assert not guard.expired()
    if how == "step raises KeyboardInterrupt":
        assert len(raised) == 1
        assert caught.value is raised[0]
    else:
        assert type(caught.value) is asyncio.CancelledError
    assert caught.value.__notes__ == [
        "executionkit: the checkpoint taken on interruption failed: OSError: disk full"
    ]
    assert [dict(cp.outputs) for cp in attempts] == [{"done": "d"}]
    assert batch.log == ["hanging cancelled"]
    assert "after" not in batch.calls
    assert asyncio.all_tasks() == before


# --- Ctrl-C in run_sync, in a real process ---------------------------------------------------

CTRL_C_SCRIPT = """
import asyncio, json, os, signal, sys
from executionkit import Step, Workflow

path = sys.argv[1]
done_recorded = asyncio.Event()
waiting_started = asyncio.Event()

async def done(ctx):
    asyncio.current_task().add_done_callback(lambda _: done_recorded.set())
    return {"answer": 42}

async def waiting(ctx):
    waiting_started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        print("waiting cancelled", flush=True)
        raise

async def interrupter(ctx):
    await done_recorded.wait()
    await waiting_started.wait()
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.Event().wait()

def after(ctx):
    print("after ran", flush=True)

def save(checkpoint):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(checkpoint.to_dict(), file)
    print("checkpoint saved", flush=True)

Workflow([
    Step("done", done),
    Step("waiting", waiting),
    Step("interrupter", interrupter),
    Step("after", after, depends_on=["done"]),
]).run_sync(checkpoint_fn=save)
print("run_sync returned", flush=True)
"""


def test_ctrl_c_in_run_sync_checkpoints_and_exits_with_keyboard_interrupt(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    completed = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", CTRL_C_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    # An uncaught KeyboardInterrupt makes Python exit through SIGINT.
    assert completed.returncode == -signal.SIGINT, completed.stderr
    assert completed.stderr.rstrip().splitlines()[-1] == "KeyboardInterrupt"
    assert completed.stdout.splitlines() == ["waiting cancelled", "checkpoint saved"]
    data = json.loads(path.read_text(encoding="utf-8"))
    checkpoint = WorkflowCheckpoint.from_dict(data)
    assert dict(checkpoint.outputs) == {"done": {"answer": 42}}
    assert dict(checkpoint.errors) == {}
