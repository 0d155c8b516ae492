"""One owner per run: who owns a run, and how a run takes its store's claim.

A store that can be shared by several processes grants *claims*: exclusive
ownership of one run by one live process, which dies with that process (see
decision 0008). The protocol a store implements, beside being a
``checkpoint_fn``:

- ``claim(run_id)`` returns a context manager, sync or async. Entering it takes
  the claim or raises `RunClaimedError` naming the owner; it returns the
  ``seq`` of the latest checkpoint the store holds of the run, read once the
  claim is held (None when it holds none). Leaving it gives the claim up.
- ``owner(run_id)``, optional, returns the `RunOwner` of a claimed run, or None.

`Workflow.run` enters the claim before any step starts and leaves it once it
has returned or raised; this module is the runner's side of that, with no
asyncio at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executionkit._errors import StaleCheckpointError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AsyncExitStack

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._record._result import WorkflowResult


async def take_claim(stack: AsyncExitStack, checkpoint_fn: object, run_id: str) -> int | None:
    """Enter ``checkpoint_fn.claim(run_id)`` on ``stack`` if the store grants claims.

    Returns the seq of the latest checkpoint the store holds of the run (None
    when it holds none, or does not grant claims). Raises what the claim raises,
    `RunClaimedError` when someone else owns the run.
    """
    claim = getattr(checkpoint_fn, "claim", None)
    if claim is None or not callable(claim):
        return None
    manager = claim(run_id)
    if hasattr(manager, "__aenter__"):
        stored = await stack.enter_async_context(manager)
    elif hasattr(manager, "__enter__"):
        stored = stack.enter_context(manager)
    else:
        msg = (
            f"{checkpoint_fn!r}.claim({run_id!r}) must return a context manager (sync or "
            f"async), got {type(manager).__name__}"
        )
        raise TypeError(msg)
    if stored is not None and (type(stored) is not int or stored < 0):
        msg = (
            f"{checkpoint_fn!r}.claim({run_id!r}) must give the seq of the run's latest "
            f"stored checkpoint (an int >= 0) or None, got {stored!r}"
        )
        raise TypeError(msg)
    return stored


def check_latest(store: object, run_id: str, resumed: int | None, stored: int | None) -> None:
    """Refuse to start when the store holds a later checkpoint of the run than ours.

    ``resumed`` is the seq of ``resume_from`` (None for a fresh run). A store
    holding an older checkpoint of the run, or none (a run moved from another
    store), is fine: what the run records from here on is newer.
    """
    if stored is None:
        return
    if resumed is None or stored > resumed:
        raise StaleCheckpointError(repr(store), run_id, resumed or 0, stored, before_start=True)


async def claimed(
    execute: Callable[[], Awaitable[WorkflowResult]],
    checkpoint_fn: object,
    run_id: str,
    resume_from: WorkflowCheckpoint | None,
) -> WorkflowResult:
    """Run ``execute()`` holding the store's claim on ``run_id``, the store not ahead of us.

    The claim is taken, and the store's latest checkpoint of the run checked,
    before anything starts (a refusal raises, nothing ran); it is given up once
    the run has returned or raised.
    """
    import contextlib  # noqa: PLC0415 - only runs with a claiming store get here

    async with contextlib.AsyncExitStack() as stack:
        stored = await take_claim(stack, checkpoint_fn, run_id)
        check_latest(
            checkpoint_fn, run_id, None if resume_from is None else resume_from.seq, stored
        )
        return await execute()
