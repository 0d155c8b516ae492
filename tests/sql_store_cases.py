"""What the SQLiteStore and PostgresStore tests share: a run that resumes every way, workers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from typing import TYPE_CHECKING, Any

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit._run._step_context import current_step
from executionkit.stores import PostgresStore, SQLiteStore, StaleCheckpointError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from multiprocessing.synchronize import Barrier, Event


def story_workflow(*, fail: bool, variant: str, extra: bool = True) -> Workflow:
    """a -> b -> c -> z, and a -> d or z -> e; c saves progress and fails when ``fail``."""

    landed = asyncio.Event()

    def f(ctx: Any) -> str:
        landed.set()
        return f"f{variant}:{ctx['b']}"

    async def c(ctx: Any) -> PatternResult[str]:
        if fail:
            await landed.wait()  # f, in c's batch, finished: the progress checkpoint has it
            await current_step().save_progress({"done": 1, "of": 3})
            msg = "the model timed out"
            raise RuntimeError(msg)
        return PatternResult(f"c{variant}:{ctx['b']}", cost=TokenUsage(30, 3, 1))

    steps = [
        Step("a", lambda _ctx: {"text": "Grüße", "n": [1, None]}, version="v1"),
        Step("b", lambda ctx: f"b{variant}:{ctx['a']['text']}", depends_on=("a",)),
        Step("c", c, depends_on=("b",)),
        Step("f", f, depends_on=("b",), inline=True),  # it sets an asyncio event
    ]
    if extra:
        steps.append(Step("d", lambda _ctx: ["d", variant], depends_on=("a",)))
    steps.append(Step("z", lambda ctx: f"z{variant}:{ctx['c']}", depends_on=("c",)))
    if not extra:
        steps.append(Step("e", lambda ctx: f"e{variant}:{ctx['z']}", depends_on=("z",)))
    return Workflow(steps)


def run_story(save: Callable[[WorkflowCheckpoint], None], load: Callable[[], Any]) -> list[Any]:
    """Fail with progress, resume, rerun b (replacing b, c and z), then drop d; save each.

    Returns every checkpoint taken, in order; each run resumes from ``load()``.
    """
    taken: list[WorkflowCheckpoint] = []

    def keep(checkpoint: WorkflowCheckpoint) -> None:
        save(checkpoint)
        taken.append(checkpoint)

    runs: list[tuple[Workflow, dict[str, Any]]] = [
        (story_workflow(fail=True, variant="1"), {}),
        (story_workflow(fail=False, variant="2"), {}),
        (story_workflow(fail=False, variant="3"), {"rerun": ["b"]}),
        (story_workflow(fail=False, variant="4", extra=False), {"unknown_steps": "discard"}),
    ]
    for workflow, options in runs:
        with contextlib.suppress(WorkflowFailed):
            workflow.run_sync(
                {"topic": "t"},
                checkpoint_fn=keep,
                resume_from=load(),
                run_id="story",
                metadata={"job": "story"},
                **options,
            )
    return taken


def as_json(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(checkpoint.to_dict()))
    return result


def assert_exact(
    got: Sequence[WorkflowCheckpoint | None], want: Sequence[WorkflowCheckpoint]
) -> None:
    """Each rebuilt checkpoint equals the saved one, outputs and step info in the same order."""
    assert [None if c is None else c.seq for c in got] == [c.seq for c in want]
    for rebuilt, saved in zip(got, want, strict=True):
        assert rebuilt is not None
        assert as_json(rebuilt) == as_json(saved)
        assert list(rebuilt.outputs) == list(saved.outputs)
        assert list(rebuilt.step_info) == list(saved.step_info)


def chain_checkpoints(n: int, run_id: str = "w") -> list[WorkflowCheckpoint]:
    steps = [Step("s0", lambda _ctx: "x")]
    steps += [Step(f"s{i}", lambda _ctx: "x", depends_on=(f"s{i - 1}",)) for i in range(1, n)]
    taken: list[WorkflowCheckpoint] = []
    Workflow(steps).run_sync(checkpoint_fn=taken.append, run_id=run_id)
    return taken


def open_store(kind: str, where: str, *, history: bool = False) -> Any:
    if kind == "sqlite":
        return SQLiteStore(where, history=history)
    return PostgresStore(where, history=history)


def racing_writer(  # noqa: PLR0917 - a process target takes its arguments in order
    kind: str, where: str, dicts: list[str], seed: int, start: Barrier, out: Any
) -> None:
    """A worker process: save the run's checkpoints in a shuffled order, report what it got."""
    store = open_store(kind, where, history=True)
    order = [WorkflowCheckpoint.from_dict(json.loads(text)) for text in dicts]
    random.Random(seed).shuffle(order)
    start.wait()
    accepted, refused = [], []
    for checkpoint in order:
        try:
            store(checkpoint)
        except StaleCheckpointError as exc:
            refused.append((checkpoint.seq, exc.stored_seq))
        else:
            accepted.append(checkpoint.seq)
    out.put((seed, accepted, refused))


def stuck_writer(kind: str, where: str, dicts: list[str], inside: Event) -> None:
    """A worker process that saves the first checkpoint, then stops inside the second's write.

    It signals ``inside`` once every row of the second checkpoint is written but
    not committed, then waits to be killed.
    """
    from executionkit.stores import _sql  # noqa: PLC0415

    store = open_store(kind, where)
    first, second = (WorkflowCheckpoint.from_dict(json.loads(text)) for text in dicts)
    store(first)
    original = _sql.SqlCheckpoints.save

    def save_then_wait(self: Any, *args: Any) -> Any:
        result = original(self, *args)
        inside.set()
        threading_event_never_set().wait()
        return result

    setattr(_sql.SqlCheckpoints, "save", save_then_wait)  # noqa: B010 - in this process only
    store(second)


def threading_event_never_set() -> Any:
    import threading  # noqa: PLC0415

    return threading.Event()
