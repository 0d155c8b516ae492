"""Small asyncio helpers shared by the parts of a run."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine


async def wait_through(future: asyncio.Future[Any]) -> bool:
    """Wait until ``future`` is done even if this task is cancelled meanwhile.

    Returns whether a cancellation arrived while waiting; the caller decides when
    to let it out. ``future``'s own outcome is left for the caller to read.
    """
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


def task_maker() -> Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]:
    """What makes tasks on the running loop: as ``loop.create_task`` makes them.

    Without the loop's checks on every call when it has no task factory; with
    one, the loop's own ``create_task``, which uses it.
    """
    loop = asyncio.get_running_loop()
    if loop.get_task_factory() is None:
        return partial(asyncio.Task, loop=loop)
    return loop.create_task
