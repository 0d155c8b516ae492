"""What a checkpoint lists as in flight, read when it is taken and read long after."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow

if TYPE_CHECKING:
    from executionkit import WorkflowCheckpoint


def one(ctx: Any) -> int:
    """A plain no-op step."""
    del ctx
    return 1


async def one_async(ctx: Any) -> int:
    """An async no-op step."""
    del ctx
    return 1


def wide_then_joined(fn: Any, width: int) -> Workflow:
    """``width`` independent steps, then one step depending on them all."""
    names = [f"s{n}" for n in range(width)]
    return Workflow(
        [*(Step(name, fn) for name in names), Step("join", fn, depends_on=tuple(names))]
    )


MODES = [
    pytest.param({"schedule": "eager"}, id="eager"),
    pytest.param({"checkpoint_every": "step"}, id="batch, every step"),
    pytest.param({}, id="batch"),
]


@pytest.mark.parametrize("fn", [one, one_async], ids=["plain", "async"])
@pytest.mark.parametrize("mode", MODES)
async def test_in_flight_read_later_is_what_it_was_when_taken(
    fn: Any, mode: dict[str, Any]
) -> None:
    """Each checkpoint's in_flight, read after the run, equals what it said when taken.

    Checkpoints taken while the list of steps about to start grows (eager) or while
    its steps end one by one (every step) keep what was true when they were taken.
    """
    seen: list[tuple[WorkflowCheckpoint, tuple[Any, ...]]] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        seen.append((checkpoint, checkpoint.in_flight))

    workflow = wide_then_joined(fn, 40)
    fresh: list[WorkflowCheckpoint] = []
    await workflow.run(checkpoint_fn=save, **mode)
    await workflow.run(checkpoint_fn=fresh.append, **mode)
    assert len(seen) == len(fresh) > 1
    for (checkpoint, at_the_time), later in zip(seen, fresh, strict=True):
        assert later.in_flight == checkpoint.in_flight == at_the_time
        recorded = set(checkpoint.outputs)
        assert not {name for name, _, _ in at_the_time} & recorded  # none listed had ended
    assert seen[-1][1] == ()


async def test_every_step_checkpoints_list_the_rest_of_the_batch() -> None:
    """With checkpoint_every="step", each checkpoint lists the batch's steps not yet recorded."""
    seen: list[WorkflowCheckpoint] = []
    workflow = wide_then_joined(one, 5)
    await workflow.run(checkpoint_fn=seen.append, checkpoint_every="step")
    for checkpoint in seen[:5]:
        names = {f"s{n}" for n in range(5)}
        left = sorted(names - set(checkpoint.outputs), key=lambda name: int(name[1:]))
        listed = [name for name, _, _ in checkpoint.in_flight]
        assert listed == left
