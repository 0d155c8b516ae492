"""Small asyncio helpers shared by the parts of a run."""

from __future__ import annotations

import asyncio
from typing import Any


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
