"""A run whose store fails never hangs: with sub-workflows, maps, executors and a cancel.

Once ``checkpoint_fn`` has raised, nothing the run does can be saved. A
sub-workflow whose checkpoints go to its parent's record waits for the parent to
save them; that wait must end with the parent's error, not last for ever (it
did, and a cancel could not end it: the child's write is awaited through
cancellations so that a checkpoint is never half taken).

Every case runs in an event loop of its own, in a daemon thread the test gives
a few seconds: a case that hangs fails the test instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from executionkit import Step, TokenUsage, Workflow, WorkflowCheckpoint, current_step

WITHIN = 10.0  # seconds a case may take before it is called a hang


def plain(ctx: Any) -> int:
    return 1


async def coroutine(ctx: Any) -> int:
    await asyncio.sleep(0)
    return 1


def item(value: Any, ctx: Any) -> Any:
    return value


def child() -> Workflow:
    return Workflow([Step("c1", run=plain), Step("c2", run=coroutine, depends_on=("c1",))])


SHAPES = {
    "step and child": lambda: Workflow([Step("a", run=plain), Step("sub", run=child())]),
    "chain into child": lambda: Workflow(
        [Step("a", run=coroutine), Step("sub", run=child(), depends_on=("a",))]
    ),
    "map of children": lambda: Workflow(
        [
            Step("items", run=lambda ctx: [1, 2, 3]),
            Step.map("each", over="items", run=child(), depends_on=("items",)),
        ]
    ),
    "map and child": lambda: Workflow(
        [
            Step("items", run=lambda ctx: list(range(6))),
            Step.map("each", over="items", run=item, depends_on=("items",)),
            Step("sub", run=child(), depends_on=("items",)),
        ]
    ),
}


class FailingStore:
    """A ``checkpoint_fn`` that saves ``fine`` checkpoints, then raises on every call."""

    def __init__(self, fine: int) -> None:
        self.fine = fine
        self.saved: list[WorkflowCheckpoint] = []

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        if len(self.saved) >= self.fine:
            raise OSError("disk full")
        self.saved.append(checkpoint)


def run_case(
    shape: str, schedule: str, every: str, threads: bool, fine: int, *, cancel: bool
) -> str:
    """Run one case to its end in a fresh loop; return how it ended, or "hang"."""
    outcome: list[str] = []

    async def case() -> None:
        store = FailingStore(fine)
        with ThreadPoolExecutor(2) if threads else contextlib.nullcontext() as executor:
            task = asyncio.ensure_future(
                SHAPES[shape]().run(
                    checkpoint_fn=store,
                    schedule=schedule,  # type: ignore[arg-type]
                    checkpoint_every=every,  # type: ignore[arg-type]
                    executor=executor,
                )
            )
            if cancel:
                await asyncio.sleep(0)  # let it start, then cancel at once
                task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                outcome.append("cancelled")
            except OSError:
                outcome.append("store failed")
            else:
                outcome.append("completed")

    thread = threading.Thread(target=asyncio.run, args=(case(),), daemon=True)
    thread.start()
    thread.join(WITHIN)
    return outcome[0] if outcome else "hang"


CASES = list(
    itertools.product(SHAPES, ("batch", "eager"), ("batch", "step"), (False, True), range(4))
)


@pytest.mark.parametrize(("shape", "schedule", "every", "threads", "fine"), CASES)
def test_a_failing_store_ends_the_run(
    shape: str, schedule: str, every: str, threads: bool, fine: int
) -> None:
    """Whichever save fails first, the run raises the store's error or completes: never hangs."""
    ended = run_case(shape, schedule, every, threads, fine, cancel=False)
    assert ended in {"store failed", "completed"}
    if fine == 0:
        assert ended == "store failed"


@pytest.mark.parametrize(("shape", "schedule", "every", "threads", "fine"), CASES)
def test_a_failing_store_and_a_cancel_end_the_run(
    shape: str, schedule: str, every: str, threads: bool, fine: int
) -> None:
    """A cancel as the store fails ends the run too: cancelled, failed or done, not hung."""
    ended = run_case(shape, schedule, every, threads, fine, cancel=True)
    assert ended in {"cancelled", "store failed", "completed"}


def test_the_reported_hang_ends_with_the_store_error() -> None:
    """Parent [a, sub], a two-step child of plain steps in a thread pool, a store that fails."""
    for schedule in ("batch", "eager"):
        assert run_case(
            "step and child", schedule, "batch", threads=True, fine=0, cancel=False
        ) == ("store failed")


def _retried(attempts: list[int]) -> Any:
    """A step body that reports usage, fails its first attempt and succeeds after."""

    def body(ctx: Any) -> str:
        step = current_step()
        attempts.append(step.attempt)
        step.add_usage(TokenUsage(10, 1, 1), model="m")
        if step.attempt == 1:
            msg = "first attempt fails"
            raise RuntimeError(msg)
        return "ok"

    return body


def _async_retried(attempts: list[int]) -> Any:
    body = _retried(attempts)

    async def run(ctx: Any) -> str:
        return str(body(ctx))

    return run


def _item_retried(attempts: list[int]) -> Any:
    body = _retried(attempts)
    return lambda item, ctx: body(ctx)


@pytest.mark.parametrize("kind", ["async", "plain", "inline", "item"])
def test_no_retry_starts_once_checkpoint_fn_failed(kind: str) -> None:
    """A retry is a new paid attempt: once the save before it failed, it never starts.

    The failed attempt's usage is saved before the retry starts; that save
    raising stops the run, and the retry with it (it used to run, unsaved, even
    with no backoff to wait through).
    """
    attempts: list[int] = []
    saved: list[WorkflowCheckpoint] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        if checkpoint.ledger:  # the save of the failed attempt's usage
            raise OSError("disk full")
        saved.append(checkpoint)

    if kind == "item":
        steps = [
            Step("items", run=lambda ctx: ["x"], inline=True),
            Step.map("each", _item_retried(attempts), over="items", retries=1, retry_delay=0),
        ]
    else:
        run = _async_retried(attempts) if kind == "async" else _retried(attempts)
        # Alone in its batch, the step runs in the run's own task, which a failing
        # checkpoint_fn does not cancel.
        steps = [Step("s", run, retries=1, retry_delay=0, inline=kind == "inline")]
    with pytest.raises(OSError, match="disk full"):
        Workflow(steps).run_sync(checkpoint_fn=save)
    assert attempts == [1]


async def test_a_retry_waits_for_the_save_of_the_failed_attempts_usage() -> None:
    """With an async checkpoint_fn, the retry starts only once the failed attempt is saved.

    A process killed during the retry then leaves a checkpoint that holds the
    first attempt's usage and lists the retry in flight: nothing is lost.
    """
    attempts: list[int] = []
    release = asyncio.Event()
    saving = asyncio.Event()
    saved: list[WorkflowCheckpoint] = []

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        if checkpoint.ledger and not release.is_set():
            saving.set()
            await release.wait()
        saved.append(checkpoint)

    workflow = Workflow([Step("s", _async_retried(attempts), retries=1, retry_delay=0)])
    task = asyncio.ensure_future(workflow.run(checkpoint_fn=save))
    await saving.wait()
    for _ in range(20):
        await asyncio.sleep(0)
    assert attempts == [1]  # the retry waits for the save
    release.set()
    result = await task
    assert attempts == [1, 2]
    first_failed = next(cp for cp in saved if cp.ledger)
    assert [(row.attempt, row.outcome) for row in first_failed.ledger] == [(1, "failed")]
    assert first_failed.in_flight == (("s", None, 2),)
    assert result.spending.wasted == TokenUsage(10, 1, 1)
