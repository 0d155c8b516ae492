"""The checkpoints the kit saves: real runs of small workflows, taken with a list."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from executionkit._checkpoint import WorkflowCheckpoint
from executionkit._errors import WorkflowFailed
from executionkit._step import Step
from executionkit._step_context import current_step
from executionkit._types import PatternResult, TokenUsage
from executionkit._workflow import Workflow
from executionkit.conformance._names import RUN_ID

_CONTEXT = {"document": "never stored: only this key's name is"}
_METADATA = {"job": "conformance", "labels": ["kit", "ünïcode"]}


def _workflow(*, variant: str = "", fail: bool = False) -> Workflow:
    """Four batches: a; b and c (a diamond); d; e."""

    def a(_ctx: Any) -> PatternResult[dict[str, Any]]:
        value = {"text": "Grüße, 世界 ✓", "n": 1, "ratio": 0.25, "items": [1, None, True, "x"]}
        return PatternResult(value, cost=TokenUsage(120, 30, 1))

    def b(_ctx: Any) -> PatternResult[list[Any]]:
        return PatternResult(
            ["summary", {"nested": {"deep": [1, 2.5]}}], cost=TokenUsage(200, 50, 1)
        )

    async def d(ctx: Any) -> PatternResult[str]:
        if fail:
            await current_step().save_progress({"done": 2, "of": 5})
            msg = "the model timed out"
            raise RuntimeError(msg)
        return PatternResult(f"report{variant}: {ctx['c']}", cost=TokenUsage(300, 80, 2))

    return Workflow(
        [
            Step("a", a, version="prompt-v1"),
            Step("b", b, depends_on=("a",)),
            Step("c", lambda ctx: f"{len(ctx['a']['items'])} items", depends_on=("a",)),
            Step("d", d, depends_on=("b", "c")),
            Step("e", lambda _ctx: None, depends_on=("d",)),
        ]
    )


async def _run(
    workflow: Workflow, resume_from: WorkflowCheckpoint | None = None, **options: Any
) -> tuple[WorkflowCheckpoint, ...]:
    taken: list[WorkflowCheckpoint] = []
    with contextlib.suppress(WorkflowFailed):  # the failing run's checkpoints are the point
        await workflow.run(
            _CONTEXT,
            checkpoint_fn=taken.append,
            resume_from=resume_from,
            run_id=RUN_ID,
            metadata=_METADATA,
            **options,
        )
    return tuple(taken)


@dataclass(frozen=True)
class Samples:
    run: tuple[WorkflowCheckpoint, ...]  # seq 1-4 of a run that finishes
    sibling: WorkflowCheckpoint  # another worker's seq 3, resumed from run[1]
    failed: tuple[WorkflowCheckpoint, ...]  # a run whose step d saves progress, then fails
    resumed: tuple[WorkflowCheckpoint, ...]  # resumed from failed[-1], finishes
    rerun: tuple[WorkflowCheckpoint, ...]  # resumed from run[-1] with rerun=["c"]
    copy: WorkflowCheckpoint  # run[-1] after to_dict, json and from_dict
    chain: tuple[WorkflowCheckpoint, ...]  # a long chain of Counted outputs (incremental)
    workers: tuple[tuple[WorkflowCheckpoint, ...], ...]  # each writer's seq 1-4 (writers)

    @classmethod
    async def build(cls, *, incremental: bool = False, writers: int = 0) -> Samples:
        run = await _run(_workflow())
        sibling = (await _run(_workflow(variant=" (another worker)"), run[1]))[0]
        failed = await _run(_workflow(fail=True))
        resumed = await _run(_workflow(), failed[-1])
        rerun = await _run(_workflow(variant=" (rerun)"), run[-1], rerun=["c"])
        copy = WorkflowCheckpoint.from_dict(json.loads(json.dumps(run[-1].to_dict())))
        chain = await _run(_chain(CHAIN_LENGTH)) if incremental else ()
        workers = [run]
        for number in range(1, writers):
            fork = await _run(_workflow(variant=f" (worker {number})"), run[1])
            workers.append((*run[:2], *fork[:2]))
        return cls(run, sibling, failed, resumed, rerun, copy, chain, tuple(workers[:writers]))


CHAIN_LENGTH = 60
LAST_SEQ = 4  # every writer of the concurrency check saves seq 1 to 4


class Counted(dict[str, Any]):
    """An output that counts what a store does with it, other than hold a reference."""

    touched = 0  # reset and read by the kit around each save; saves run one at a time

    def _touch(self) -> None:
        Counted.touched += 1

    def items(self) -> Any:  # what json.dumps asks a dict subclass for
        self._touch()
        return super().items()

    def keys(self) -> Any:
        self._touch()
        return super().keys()

    def values(self) -> Any:
        self._touch()
        return super().values()

    def __iter__(self) -> Any:
        self._touch()
        return super().__iter__()

    def __eq__(self, other: object) -> bool:
        self._touch()
        return super().__eq__(other)

    __hash__ = None  # as a dict's

    def copy(self) -> dict[str, Any]:
        self._touch()
        return dict(super().items())

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickle and copy.deepcopy
        self._touch()
        return (dict, (dict(super().items()),))


def _chain(length: int) -> Workflow:
    def make(number: int) -> Step:
        def run(_ctx: Any) -> Counted:
            return Counted(step=number, text=f"output {number} of the chain")

        return Step(f"s{number}", run, depends_on=(f"s{number - 1}",) if number else ())

    return Workflow([make(number) for number in range(length)])
