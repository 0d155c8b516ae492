"""What a checkpoint lists as in flight, read when it is taken and read long after."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from executionkit import Step, TokenUsage, Workflow, WorkflowCheckpoint, current_step


def one(ctx: Any) -> int:
    """A plain no-op step."""
    del ctx
    return 1


async def one_async(ctx: Any) -> int:
    """An async no-op step."""
    del ctx
    return 1


def wide_then_joined(fn: Any, width: int, *, inline: bool = False) -> Workflow:
    """``width`` independent steps, then one step depending on them all."""
    names = [f"s{n}" for n in range(width)]
    return Workflow(
        [
            *(Step(name, fn, inline=inline) for name in names),
            Step("join", fn, depends_on=tuple(names), inline=inline),
        ]
    )


MODES = [
    pytest.param({"schedule": "eager"}, id="eager"),
    pytest.param({"checkpoint_every": "step"}, id="batch, every step"),
    pytest.param({}, id="batch"),
]


@pytest.mark.parametrize(
    ("fn", "inline"),
    [(one, True), (one, False), (one_async, False)],
    ids=["plain inline", "plain in threads", "async"],
)
@pytest.mark.parametrize("mode", MODES)
async def test_in_flight_read_later_is_what_it_was_when_taken(
    fn: Any, inline: bool, mode: dict[str, Any]
) -> None:
    """Each checkpoint's in_flight, read after the run, equals what it said when taken.

    Checkpoints taken while the list of steps about to start grows (eager) or while
    its steps end one by one (every step) keep what was true when they were taken.
    """
    seen: list[tuple[WorkflowCheckpoint, tuple[Any, ...]]] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        seen.append((checkpoint, checkpoint.in_flight))

    workflow = wide_then_joined(fn, 40, inline=inline)
    fresh: list[WorkflowCheckpoint] = []
    await workflow.run(checkpoint_fn=save, **mode)
    await workflow.run(checkpoint_fn=fresh.append, **mode)
    assert len(seen) > 1
    if fn is one_async or inline:  # the same steps land together in both runs
        assert len(seen) == len(fresh)
        for (checkpoint, _), later in zip(seen, fresh, strict=True):
            assert later.in_flight == checkpoint.in_flight
    for checkpoint, at_the_time in seen:
        assert checkpoint.in_flight == at_the_time
        recorded = set(checkpoint.outputs)
        assert not {name for name, _, _ in at_the_time} & recorded  # none listed had ended
    assert seen[-1][1] == ()


async def test_every_step_checkpoints_list_the_rest_of_the_batch() -> None:
    """With checkpoint_every="step", each checkpoint lists the batch's steps not yet recorded.

    The one that records the batch's last step lists the next batch instead.
    """
    seen: list[WorkflowCheckpoint] = []
    workflow = wide_then_joined(one, 5, inline=True)  # one at a time: a checkpoint each
    await workflow.run(checkpoint_fn=seen.append, checkpoint_every="step")
    for checkpoint in seen[:5]:
        names = {f"s{n}" for n in range(5)}
        left = sorted(names - set(checkpoint.outputs), key=lambda name: int(name[1:]))
        listed = [name for name, _, _ in checkpoint.in_flight]
        assert listed == (left or ["join"])


@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize("every", ["batch", "step"])
async def test_the_next_batch_is_listed_in_flight_before_it_spends(width: int, every: str) -> None:
    """Whatever was saved already, the latest checkpoint lists the batch that runs as in flight.

    With ``checkpoint_every="step"`` every completion of a batch may be saved
    before the batch ends, and nothing changes after: the next batch was then
    listed in no checkpoint, and a kill while it spent lost its calls without
    an ``"unknown"`` row (issue 31). A resume from that checkpoint books the
    attempt as unknown, never as zero.
    """
    saved: list[WorkflowCheckpoint] = []
    gate, started = asyncio.Event(), asyncio.Event()
    seen: list[WorkflowCheckpoint] = []

    async def mixed(ctx: Any) -> int:
        await asyncio.sleep(0)
        return 1

    async def spends(ctx: Any) -> int:
        current_step().add_usage(TokenUsage(10, 0, 1))
        seen.append(saved[-1])  # what a kill now would leave: b started after it was saved
        started.set()
        await gate.wait()
        return 2

    first = [Step(f"a{i}", run=mixed if i % 2 else one) for i in range(width)]
    workflow = Workflow([*first, Step("b", run=spends, depends_on=tuple(s.name for s in first))])
    running = asyncio.ensure_future(
        workflow.run(checkpoint_fn=saved.append, checkpoint_every=every)  # type: ignore[arg-type]
    )
    await started.wait()
    latest = seen[0]
    gate.set()
    await running
    assert ("b", None, 1) in latest.in_flight
    resumed = await workflow.run(resume_from=WorkflowCheckpoint.from_dict(latest.to_dict()))
    assert resumed.spending.unknown == 1


async def test_eager_checkpoints_never_list_a_recorded_or_skipped_step() -> None:
    """In eager mode with conditions, in_flight holds only steps that may still spend.

    The list of steps about to start grows in place in eager mode; read as it
    was, it kept steps recorded or skipped before it was last listed, and a
    resume booked attempts of them as "unknown".
    """
    saved: list[WorkflowCheckpoint] = []

    def skip_odd(ctx: Any) -> bool:
        return False

    steps = [
        Step(f"s{i}", run=one, when=skip_odd if i % 2 else None, inline=True) for i in range(6)
    ]
    steps += [Step(f"t{i}", run=one, depends_on=(f"s{i}",), inline=True) for i in range(0, 6, 2)]
    await Workflow(steps).run(checkpoint_fn=saved.append, schedule="eager")
    assert len(saved) > 3
    for checkpoint in saved:
        listed = {name for name, item, _ in checkpoint.in_flight if item is None}
        assert not listed & set(checkpoint.outputs), checkpoint.seq
        assert not listed & set(checkpoint.skipped), checkpoint.seq


def spend(ctx: Any) -> int:
    """A plain step that reports usage."""
    del ctx
    current_step().add_usage(TokenUsage(5, 1, 1), model="m")
    return 1


def _saved_until_the_store_fails(workflow: Workflow, fine: int, **options: Any) -> list[Any]:
    """Run with a store that saves ``fine`` checkpoints, then raises: return those saved."""
    saved: list[WorkflowCheckpoint] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        if len(saved) >= fine:
            raise OSError("disk full")
        saved.append(checkpoint)

    with pytest.raises(OSError, match="disk full"):
        workflow.run_sync(checkpoint_fn=save, run_id="r", **options)
    return saved


@pytest.mark.parametrize("options", MODES)
def test_a_sub_workflow_about_to_start_lists_the_steps_it_starts_first(
    options: dict[str, Any],
) -> None:
    """Until a child hands over a checkpoint of its own, its parent lists its first attempts.

    A sub-workflow step was never listed (it spends nothing itself): a store
    failing (or a kill) before the child's first checkpoint lost the attempts
    the child had started, with no unknown row (issue 31, found by the matrix).
    Its roots are listed by path, a root sub-workflow's further down, its
    questions not at all.
    """
    grandchild = Workflow([Step("g0", spend), Step("g1", spend, depends_on=("g0",))])
    child = Workflow(
        [
            Step("c0", spend),
            Step("inner", grandchild),
            Step.ask("c1", lambda ctx: "?"),
            Step("c2", spend, depends_on=("c0",)),
        ]
    )
    workflow = Workflow([Step("a", spend), Step("sub", child, depends_on=("a",))])
    saved = _saved_until_the_store_fails(workflow, 1, **options)
    assert saved[-1].in_flight == (("sub/c0", None, 1), ("sub/inner/g0", None, 1))
    resumed = workflow.run_sync(resume_from=WorkflowCheckpoint.from_dict(saved[-1].to_dict()))
    unknown = [
        (row.step, row.attempt) for row in resumed.spending.entries if row.outcome == "unknown"
    ]
    assert unknown == [("sub/c0", 1), ("sub/inner/g0", 1)]
    assert resumed.pending == {"sub/c1": "?"}


def test_a_map_of_sub_workflows_running_is_listed_by_its_name() -> None:
    """A map of sub-workflows is listed as any map is, by its name, until its items are saved."""
    child = Workflow([Step("c0", spend)])
    workflow = Workflow(
        [Step("a", lambda ctx: [1, 2], inline=True), Step.map("each", child, over="a")]
    )
    saved = _saved_until_the_store_fails(workflow, 1)
    assert saved[-1].in_flight == (("each", None, 1),)


async def test_every_step_lists_the_next_batch_after_a_child_suspends_last() -> None:
    """checkpoint_every="step": the batch's last ending a child's own checkpoint, the next batch
    still gets a checkpoint listing it before it starts (issue 31, found by the matrix)."""
    a_saved = asyncio.Event()

    async def c0(ctx: Any) -> int:
        await a_saved.wait()  # the child ends the batch, after "a" was saved
        return spend(ctx)

    child = Workflow([Step("c0", c0), Step.ask("c1", lambda ctx: "?", depends_on=("c0",))])
    workflow = Workflow(
        [Step("a", spend), Step("sub", child), Step("b", spend, depends_on=("a",))]
    )
    seen: list[Any] = []
    listed_before_b: list[tuple[Any, ...]] = []

    def save(checkpoint: WorkflowCheckpoint) -> None:
        seen.append(checkpoint)
        if "a" in checkpoint.outputs:
            a_saved.set()

    def on_event(event: Any) -> None:
        if getattr(event, "step", None) == "b" and type(event).__name__ == "StepStarted":
            listed_before_b.append(seen[-1].in_flight)

    await workflow.run(checkpoint_fn=save, checkpoint_every="step", on_event=on_event)
    assert listed_before_b == [(("b", None, 1),)]
