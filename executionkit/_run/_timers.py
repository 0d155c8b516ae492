"""A wait step in a run (`Step.wait`): reached once, slept through, or left for a resume.

The first time a run reaches a wait step, its due time is fixed (`_waits.reached`)
and recorded, and a checkpoint holding it is asked for at once: from then on
every resume, in any process, waits for that same time. A wait due within the
run's ``sleep_up_to`` seconds is slept through (holding no concurrency slot); a
later one leaves the step unfinished, and the run returns with it in
`WorkflowResult.waits`. Once due, the step's output is None and its entry
leaves the record in the same change.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from executionkit._define._waits import due_of, now, reached
from executionkit._run._checkpointer import retrieve
from executionkit._run._outcome import Unfinished

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._define._step_kinds import WaitStep
    from executionkit._record._record import Record
    from executionkit._run._checkpointer import Checkpointer


async def wait(
    step: WaitStep,
    ctx: Mapping[str, Any],
    record: Record,
    checkpointer: Checkpointer,
    sleep_up_to: float,
) -> Unfinished | None:
    """Run wait step ``step``: None once it is due, `Unfinished` if due past ``sleep_up_to``.

    Raises:
        TypeError: If its ``until(ctx)`` returned no aware datetime.
        OverflowError: If it would end past the year 9999.
    """
    name = step.name
    entry = record.waits.get(name)
    if entry is None:
        entry = reached(step, ctx)
        record.wait_reached(name, entry)
        if checkpointer.active:  # in a checkpoint before its time passes: kill -9 keeps it
            checkpointer.save_soon(asyncio.get_running_loop()).add_done_callback(retrieve)
    left = (due_of(entry) - now()).total_seconds()
    if left > sleep_up_to:
        return Unfinished(f"step {name!r} waits until {entry['due']}")
    if left > 0:
        await asyncio.sleep(left)
    record.wait_over(name)  # its output, None, lands next, with no await between
    return None
