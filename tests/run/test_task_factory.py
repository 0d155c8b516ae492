"""A loop's task factory: the run creates its steps' and items' tasks through it when set."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from executionkit import Step, Workflow

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Coroutine, Generator, Mapping


async def one(ctx: Mapping[str, Any]) -> int:
    """A no-op async step."""
    del ctx
    await asyncio.sleep(0)
    return 1


async def double(item: int, ctx: Mapping[str, Any]) -> int:
    """A no-op async map item."""
    del ctx
    await asyncio.sleep(0)
    return 2 * item


async def test_steps_and_items_get_their_tasks_from_the_loops_task_factory() -> None:
    """With a task factory set, each step of a batch and each map item is a task it made."""
    made: list[str] = []

    def factory(
        loop: asyncio.AbstractEventLoop,
        coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any],
        context: contextvars.Context | None = None,
    ) -> asyncio.Future[Any]:
        made.append(getattr(coro, "__qualname__", ""))
        return asyncio.Task(coro, loop=loop, context=context)

    workflow = Workflow(
        [
            Step("a", one),
            Step("b", one),
            Step("items", lambda ctx: [1, 2, 3]),
            Step.map("doubled", double, over="items"),
        ]
    )
    loop = asyncio.get_running_loop()
    before = loop.get_task_factory()
    loop.set_task_factory(factory)
    try:
        result = await workflow.run(checkpoint_fn=lambda checkpoint: None)
    finally:
        loop.set_task_factory(before)
    assert result.outputs["doubled"] == [2, 4, 6]
    # a, b, and items (a plain step started after the first task of its batch); the map
    # runs alone, in the run's own task
    assert made.count("Attempts.task") == 3
    assert made.count("_Driver._one") == 3


async def test_without_a_task_factory_the_outputs_are_the_same() -> None:
    """Without a task factory (the usual case) the same workflow gives the same outputs."""
    workflow = Workflow(
        [
            Step("a", one),
            Step("b", one),
            Step("items", lambda ctx: [1, 2, 3]),
            Step.map("doubled", double, over="items"),
        ]
    )
    assert asyncio.get_running_loop().get_task_factory() is None
    result = await workflow.run(checkpoint_fn=lambda checkpoint: None)
    assert result.outputs == {"a": 1, "b": 1, "items": [1, 2, 3], "doubled": [2, 4, 6]}
