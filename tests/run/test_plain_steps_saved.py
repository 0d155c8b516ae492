"""Inline plain functions are saved as they complete (issue 19).

A plain function marked ``inline=True`` runs on the event loop's thread and
blocks the loop from its start to its end, so nothing
could be saved between two of them unless the run stops to save: with a
``checkpoint_fn``, in eager mode or with ``checkpoint_every="step"``, each
completed plain step is recorded and handed over (a sync ``checkpoint_fn``
called, an async one awaited) before the next plain function starts; and each
plain map item likewise, in every mode, since map items are checkpointed as they
complete. ``checkpoint_every="batch"`` keeps its meaning for steps.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint

if TYPE_CHECKING:
    from collections.abc import Callable

    from executionkit._define._options import CheckpointEvery, Schedule


def saver(log: list[str], *, async_: bool) -> Callable[[WorkflowCheckpoint], Any]:
    def note(checkpoint: WorkflowCheckpoint) -> None:
        items = checkpoint.items.get("words", {"outputs": {}})["outputs"]
        log.append(f"saved {len(checkpoint.outputs)} outputs {len(items)} items")

    async def note_async(checkpoint: WorkflowCheckpoint) -> None:
        await asyncio.sleep(0)
        note(checkpoint)

    return note_async if async_ else note


def plain_steps(log: list[str], count: int, *, retries: int = 0) -> Workflow:
    def step(name: str) -> Any:
        def run(ctx: Any) -> str:
            log.append(f"run {name}")
            return name

        return Step(name, run, retries=retries, inline=True)

    return Workflow([step(f"s{n}") for n in range(count)])


@pytest.mark.parametrize("async_save", [False, True])
@pytest.mark.parametrize("retries", [0, 1])
@pytest.mark.parametrize(
    ("schedule", "every"), [("batch", "step"), ("eager", "batch"), ("eager", "step")]
)
def test_each_plain_step_is_handed_over_before_the_next_starts(
    schedule: Schedule, every: CheckpointEvery, async_save: bool, retries: int
) -> None:
    """Five independent plain steps: run, saved, run, saved... in that order."""
    log: list[str] = []
    plain_steps(log, 5, retries=retries).run_sync(
        checkpoint_fn=saver(log, async_=async_save), schedule=schedule, checkpoint_every=every
    )
    expected = []
    for n in range(5):
        expected += [f"run s{n}", f"saved {n + 1} outputs 0 items"]
    assert log == expected


def test_in_batch_mode_a_batch_of_plain_steps_is_saved_once() -> None:
    """checkpoint_every='batch' keeps its meaning: one checkpoint after the batch."""
    log: list[str] = []
    plain_steps(log, 5).run_sync(checkpoint_fn=saver(log, async_=False))
    assert log == [f"run s{n}" for n in range(5)] + ["saved 5 outputs 0 items"]


def test_without_checkpoint_fn_plain_steps_run_back_to_back() -> None:
    """Nothing to hand over: the steps run as before, all in one sweep."""
    log: list[str] = []
    result = plain_steps(log, 5).run_sync(schedule="eager")
    assert log == [f"run s{n}" for n in range(5)]
    assert len(result.outputs) == 5


def plain_map(log: list[str], words: int) -> Workflow:
    def translate(word: str, ctx: Any) -> str:
        log.append(f"run {word}")
        return word.upper()

    return Workflow(
        [
            Step("split", lambda ctx: [f"w{n}" for n in range(words)]),
            Step.map("words", translate, over="split", inline=True),
        ]
    )


@pytest.mark.parametrize("async_save", [False, True])
@pytest.mark.parametrize(
    ("schedule", "every"), [("batch", "batch"), ("batch", "step"), ("eager", "batch")]
)
def test_each_plain_item_is_handed_over_before_the_next_starts(
    schedule: Schedule, every: CheckpointEvery, async_save: bool
) -> None:
    """50 plain items: each item's checkpoint comes before the next item runs."""
    log: list[str] = []
    result = plain_map(log, 50).run_sync(
        checkpoint_fn=saver(log, async_=async_save), schedule=schedule, checkpoint_every=every
    )
    runs = [n for n, line in enumerate(log) if line.startswith("run ")]
    assert len(runs) == 50
    for count, (here, after) in enumerate(zip(runs, [*runs[1:], len(log)], strict=True)):
        between = log[here + 1 : after]
        assert f"saved 1 outputs {count + 1} items" in between, (count, between)
    assert result.outputs["words"] == [f"W{n}" for n in range(50)]


def test_async_items_are_still_saved_together() -> None:
    """Async items yield, so they run concurrently and their saves coalesce as before.

    First the checkpoint counting them (format 5's in_flight_items), then all four.
    """
    log: list[str] = []

    async def translate(word: str, ctx: Any) -> str:
        log.append(f"run {word}")
        await asyncio.sleep(0)
        return word

    workflow = Workflow([Step.map("words", translate, over="split")])
    workflow.run_sync({"split": ["a", "b", "c", "d"]}, checkpoint_fn=saver(log, async_=False))
    assert log[:5] == ["saved 0 outputs 0 items", "run a", "run b", "run c", "run d"]
