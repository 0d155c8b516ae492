"""Cancel a run in the middle of a map at a seeded moment: nothing paid for is lost.

Each trial runs a map of async items (random count, random yields, a random
concurrency limit, batch or eager, a sync or async ``checkpoint_fn``), lets the
event loop turn a seeded number of times, cancels the run, and checks:

- ``run()`` ends, and nothing (no item body, no ``checkpoint_fn`` call)
  happens after it ended;
- every item whose body completed is in the last checkpoint (recorded in
  ``items``, or in the map's output);
- resuming from that checkpoint's JSON round trip runs no recorded item again
  and ends with every item's output.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint

SEEDS = range(150)


class Trial:
    """One seeded trial: the workflow, what its items did, and what was saved."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.count = rng.randint(0, 12)
        self.yields = [rng.randint(0, 4) for _ in range(self.count)]
        self.limit = rng.choice([None, 1, 2, 5])
        self.schedule = rng.choice(["batch", "eager"])
        self.async_save = rng.random() < 0.5
        self.turns = rng.randint(0, 40)
        self.completed: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self.saved: list[WorkflowCheckpoint] = []
        self.ended = False
        self.late: list[str] = []

    def workflow(self) -> Workflow:
        async def item(value: int, ctx: Any) -> str:
            key = str(value)
            self.started[key] += 1
            if self.ended:
                self.late.append(f"item {key}")
            for _ in range(self.yields[value]):
                await asyncio.sleep(0)
            self.completed[key] += 1
            return f"out-{value}"

        return Workflow(
            [
                Step("split", lambda ctx: list(range(self.count))),
                Step.map("each", item, over="split", max_concurrency=self.limit),
                Step("after", lambda ctx: len(ctx["each"]), depends_on=("each",)),
            ]
        )

    def save(self) -> Any:
        def save(checkpoint: WorkflowCheckpoint) -> None:
            if self.ended:
                self.late.append("checkpoint_fn")
            self.saved.append(checkpoint)

        async def save_async(checkpoint: WorkflowCheckpoint) -> None:
            save(checkpoint)
            await asyncio.sleep(0)

        return save_async if self.async_save else save


def recorded_items(checkpoint: WorkflowCheckpoint) -> set[str]:
    if "each" in checkpoint.outputs:
        return {str(i) for i in range(len(checkpoint.outputs["each"]))}
    entry = checkpoint.items.get("each")
    return set() if entry is None else set(entry["outputs"])


@pytest.mark.parametrize("seed", SEEDS)
async def test_cancelling_mid_map_loses_nothing_and_reruns_nothing(seed: int) -> None:
    trial = Trial(seed)
    workflow = trial.workflow()
    run = asyncio.ensure_future(
        workflow.run(checkpoint_fn=trial.save(), schedule=trial.schedule)  # type: ignore[arg-type]
    )
    for _ in range(trial.turns):
        if run.done():
            break
        await asyncio.sleep(0)
    run.cancel()
    try:
        async with asyncio.timeout(10):
            await run
    except asyncio.CancelledError:
        pass
    trial.ended = True
    for _ in range(5):
        await asyncio.sleep(0)  # anything left running would act now
    assert trial.late == []
    last = trial.saved[-1] if trial.saved else None
    recorded = set() if last is None else recorded_items(last)
    assert set(trial.completed) <= recorded, "an item that completed is missing"
    # Resume through JSON: recorded items never run again; the result is complete.
    again = Trial(seed)
    resumed = await again.workflow().run(
        resume_from=None
        if last is None
        else WorkflowCheckpoint.from_dict(json.loads(json.dumps(last.to_dict())))
    )
    assert not set(again.started) & recorded
    assert all(count == 1 for count in again.started.values())
    assert resumed.outputs["each"] == [f"out-{i}" for i in range(trial.count)]
    assert resumed.outputs["after"] == trial.count
