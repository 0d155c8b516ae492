"""SIGTERM handled like Ctrl-C while `Workflow.run_sync` runs.

Process managers, containers and deploys stop a program with SIGTERM, whose
default action kills it on the spot: no checkpoint of what completed. While
`run_sync` runs in the main thread, SIGTERM instead cancels the run, which
checkpoints what completed (as for Ctrl-C); `run_sync` then raises
``SystemExit(143)``, the status a process killed by SIGTERM reports.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Coroutine

_R = TypeVar("_R")

TERMINATED_STATUS = 128 + signal.SIGTERM
"""The exit status of a process ended by SIGTERM (143)."""


class Terminated(Exception):  # noqa: N818 - internal, turned into SystemExit by run_sync
    """The run was cancelled because the process received SIGTERM."""


async def terminate_on_sigterm(run: Coroutine[Any, Any, _R]) -> _R:
    """Await ``run``; a SIGTERM meanwhile cancels it and raises `Terminated` once it ended.

    The handler is installed only in the main thread and only over the default
    action (a program that installed its own SIGTERM handler, or ignores the
    signal, keeps it), and the previous handler is back when this returns. A
    second SIGTERM while the run is saving its last checkpoint gets the
    previous (default) action: the way to insist.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        return await run
    task = asyncio.current_task()
    assert task is not None  # noqa: S101 - asyncio.run drives this in a task
    loop = asyncio.get_running_loop()
    received: list[int] = []

    def on_sigterm() -> None:
        received.append(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one: the default action
        task.cancel()

    # Through the loop, not signal.signal alone: the kernel hands a process signal to
    # any thread, and one taken by a step's worker thread must wake a loop that has
    # nothing scheduled (its wakeup fd does; Ctrl-C's handler gains it too).
    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        return await run
    except asyncio.CancelledError:
        if not received:
            raise
        task.uncancel()
        raise Terminated from None
    finally:
        loop.remove_signal_handler(signal.SIGTERM)  # back to the default action
