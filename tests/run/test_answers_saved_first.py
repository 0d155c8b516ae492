"""Answers are saved before anything acts on them (issue 18).

A resume with ``answers=`` hands a checkpoint recording the answers to
``checkpoint_fn``, and waits for it, before any step starts; a sub-workflow does
the same with the answers routed to it. So with a store that refuses stale
writes but grants no claims, the later of two answerers is refused before its
dependants run, and the stored answer is the one that was acted on.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import StaleCheckpointError, Step, Workflow, WorkflowCheckpoint

if TYPE_CHECKING:
    from collections.abc import Callable

    from executionkit._define._options import CheckpointEvery, Schedule

SCHEDULES = ["batch", "eager"]


class FencedStore:
    """A caller's own store: newest seq wins, a stale write is refused. No claims."""

    def __init__(self) -> None:
        self.latest: WorkflowCheckpoint | None = None
        self.lock = threading.Lock()

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        with self.lock:
            held = self.latest
            if held is not None and checkpoint.seq <= held.seq:
                raise StaleCheckpointError(
                    "FencedStore", checkpoint.run_id, checkpoint.seq, held.seq
                )
            self.latest = checkpoint


def gated(log: list[str]) -> Workflow:
    """draft -> approve (ask) -> execute, and a side step that needs no answer."""

    def execute(ctx: Any) -> str:
        log.append(f"execute {ctx['approve']}")
        return f"done with {ctx['approve']}"

    return Workflow(
        [
            Step("draft", lambda ctx: "the plan"),
            Step.ask("approve", lambda ctx: f"run {ctx['draft']}?", depends_on=("draft",)),
            Step("execute", execute, depends_on=("approve",)),
        ]
    )


def suspended(workflow: Workflow) -> WorkflowCheckpoint:
    saved: list[WorkflowCheckpoint] = []
    # In a thread of its own, so that async tests can call it too.
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(workflow.run_sync, checkpoint_fn=saved.append).result()
    assert result.pending == {"approve": "run the plan?"}
    return saved[-1]


def logging_save(log: list[str], *, async_: bool) -> Callable[[WorkflowCheckpoint], Any]:
    def note(checkpoint: WorkflowCheckpoint) -> None:
        log.append(f"saved seq={checkpoint.seq} approve={checkpoint.outputs.get('approve')}")

    async def note_async(checkpoint: WorkflowCheckpoint) -> None:
        await asyncio.sleep(0)
        note(checkpoint)

    return note_async if async_ else note


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("async_save", [False, True])
@pytest.mark.parametrize("every", ["batch", "step"])
def test_the_answer_is_handed_over_before_the_step_that_depends_on_it_starts(
    schedule: Schedule, async_save: bool, every: CheckpointEvery
) -> None:
    """The first checkpoint of the resume records the answer and comes before execute."""
    log: list[str] = []
    workflow = gated(log)
    start = suspended(workflow)
    workflow.run_sync(
        checkpoint_fn=logging_save(log, async_=async_save),
        resume_from=start,
        answers={"approve": "yes"},
        schedule=schedule,
        checkpoint_every=every,
    )
    assert log[:2] == [f"saved seq={start.seq + 1} approve=yes", "execute yes"]


def test_without_answers_no_extra_checkpoint_is_taken() -> None:
    """A resume that answers nothing takes its checkpoints as before."""
    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("a", lambda ctx: 1), Step("b", lambda ctx: 2, depends_on=("a",))])
    workflow.run_sync(checkpoint_fn=saved.append)
    assert [c.seq for c in saved] == [1, 2]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("first", ["yes", "no"])
async def test_of_two_racing_answerers_the_later_is_refused_before_its_dependants_run(
    schedule: Schedule, first: str
) -> None:
    """Both resume at once with a fenced store: execute runs once, with the stored answer."""
    log: list[str] = []
    workflow = gated(log)
    start = suspended(workflow)
    store = FencedStore()
    store.latest = start
    second = "no" if first == "yes" else "yes"
    runs = [
        asyncio.ensure_future(
            workflow.run(
                checkpoint_fn=store,
                resume_from=start,
                answers={"approve": answer},
                schedule=schedule,
                checkpoint_every="step",
            )
        )
        for answer in (first, second)
    ]
    done = await asyncio.gather(*runs, return_exceptions=True)
    assert done[0].outputs["approve"] == first  # type: ignore[union-attr]
    assert isinstance(done[1], StaleCheckpointError)
    assert done[1].seq == start.seq + 1
    assert log == [f"execute {first}"]
    assert store.latest is not None
    assert store.latest.outputs["approve"] == first


def test_a_childs_answer_is_saved_in_the_parent_before_the_childs_dependants_run() -> None:
    """An answer routed to a sub-workflow reaches the parent's checkpoint_fn first."""
    log: list[str] = []

    def final(ctx: Any) -> str:
        log.append(f"final {ctx['approve']}")
        return "published"

    child = Workflow(
        [
            Step("draft", lambda ctx: "text"),
            Step.ask("approve", lambda ctx: "publish?", depends_on=("draft",)),
            Step("final", final, depends_on=("approve",)),
        ]
    )
    workflow = Workflow([Step("sub", child)])
    saved: list[WorkflowCheckpoint] = []
    assert workflow.run_sync(checkpoint_fn=saved.append).pending == {"sub/approve": "publish?"}

    def save(checkpoint: WorkflowCheckpoint) -> None:
        entry = checkpoint.children.get("sub")
        answered = None
        if entry is not None:
            answered = entry["checkpoint"].outputs.get("approve")
        log.append(f"saved approve={answered}")

    workflow.run_sync(checkpoint_fn=save, resume_from=saved[-1], answers={"sub/approve": "ok"})
    assert log.index("saved approve=ok") < log.index("final ok")
