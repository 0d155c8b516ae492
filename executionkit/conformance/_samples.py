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


def _never(_ctx: Any) -> bool:
    return False


def _questions(*, broken: bool = False) -> Workflow:
    """What format 3 records: a map's items, a skipped step, a question waiting for an answer.

    ``split`` gives three chunks; ``summaries`` maps over them (``c`` fails when
    ``broken``); ``shortcut`` is skipped by its condition; ``approve`` asks a person
    about the plan; ``publish`` needs the answer and the summaries.
    """

    def summarise(chunk: str, _ctx: Any) -> PatternResult[str]:
        if broken and chunk == "c":
            msg = "the model timed out on c"
            raise RuntimeError(msg)
        return PatternResult(f"summary of {chunk} ✓", cost=TokenUsage(40, 8, 1))

    return Workflow(
        [
            Step("split", lambda _ctx: ["a", "b", "c"]),
            Step.map("summaries", summarise, over="split", max_concurrency=1, version="v2"),
            Step("shortcut", lambda _ctx: "never", depends_on=("split",), when=_never),
            Step.ask(
                "approve",
                lambda ctx: {"plan": ctx["split"], "note": "Grüße, 世界"},
                depends_on=("split",),
                expires_after=7 * 24 * 3600,
            ),
            Step(
                "publish",
                lambda ctx: {"answer": ctx["approve"], "summaries": ctx["summaries"]},
                depends_on=("approve", "summaries"),
            ),
        ]
    )


def _with_children(
    checkpoint: WorkflowCheckpoint, child: WorkflowCheckpoint
) -> WorkflowCheckpoint:
    """``checkpoint`` with two sub-workflows in progress: one step's, and a map's items."""
    data = checkpoint.to_dict()
    child_data = child.to_dict()
    data["step_info"] = {
        **data["step_info"],
        "research": {"version": None, "depends_on": ["split"], "kind": "workflow"},
        "per_chunk": {"version": "v1", "depends_on": ["split"], "kind": "workflow"},
    }
    data["children"] = {
        "research": {"checkpoint": child_data},
        "per_chunk": {
            "items": {"0": child_data, "1": {**child_data, "run_id": f"{RUN_ID}/per_chunk/1"}}
        },
    }
    return WorkflowCheckpoint.from_dict(data)


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
    waiting: tuple[WorkflowCheckpoint, ...]  # format 3: items, a skip, a question; then fails
    answered: tuple[WorkflowCheckpoint, ...]  # resumed from waiting[-1] with the answer
    children: WorkflowCheckpoint  # waiting[-1] with sub-workflow checkpoints in ``children``
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
        waiting = await _run(_questions(broken=True), on_error="continue")
        answered = await _run(_questions(), waiting[-1], answers={"approve": {"ok": True}})
        research: list[WorkflowCheckpoint] = []
        await Workflow([Step("search", lambda _ctx: ["a", "b"])]).run(
            checkpoint_fn=research.append, run_id=f"{RUN_ID}/research"
        )
        children = _with_children(waiting[-1], research[-1])
        chain = await _run(_chain(CHAIN_LENGTH)) if incremental else ()
        workers = [run]
        for number in range(1, writers):
            fork = await _run(_workflow(variant=f" (worker {number})"), run[1])
            workers.append((*run[:2], *fork[:2]))
        return cls(
            run,
            sibling,
            failed,
            resumed,
            rerun,
            copy,
            waiting,
            answered,
            children,
            chain,
            tuple(workers[:writers]),
        )


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
