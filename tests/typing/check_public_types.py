"""Type-checked by mypy, never run: guards the types the public API promises."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, assert_type

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowResult,
)
from executionkit.stores import SQLiteStore, StreamPublisher

if TYPE_CHECKING:
    from collections.abc import Mapping


def sync_step(ctx: Mapping[str, Any]) -> int:
    return len(ctx)


async def async_step(ctx: Mapping[str, Any]) -> PatternResult[str]:
    return PatternResult("x", cost=TokenUsage(1, 2, 1))


async def check() -> None:
    workflow = Workflow([Step("a", sync_step), Step("b", async_step, depends_on=("a",))])
    saved: list[WorkflowCheckpoint] = []
    result = await workflow.run({"k": 1}, checkpoint_fn=saved.append)
    assert_type(result, WorkflowResult)
    assert_type(result.outputs, MappingProxyType[str, Any])
    assert_type(result.cost + TokenUsage(), TokenUsage)
    assert_type(workflow.run_sync(resume_from=saved[-1]), WorkflowResult)
    assert_type(WorkflowCheckpoint.from_dict(saved[-1].to_dict()), WorkflowCheckpoint)
    assert_type(PatternResult(3).value, int)

    async def save(cp: WorkflowCheckpoint) -> None:
        saved.append(cp)

    await workflow.run(checkpoint_fn=save)

    store = SQLiteStore("runs.db")
    publisher = StreamPublisher(lambda: SQLiteStore("runs.db"))
    await workflow.run(checkpoint_fn=store, on_event=[publisher])
    assert_type(store.inbox.streams("r"), dict[tuple[str, str | None], tuple[int, str]])
