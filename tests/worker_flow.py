"""The workflow the worker process tests carry on: a map, a question, a timer, a deadline.

Not a test module. Every step and item appends ``pid run step key`` to the file
named by ``EK_WORKER_LOG`` as its last act before returning, one ``write`` on a
descriptor opened with ``O_APPEND``: the test reads which process ran what.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from executionkit import Step, Workflow

ITEMS = 3


def _ran(ctx: Any, step: str, key: str = "-") -> None:
    path = os.environ.get("EK_WORKER_LOG")
    if path is None:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{os.getpid()} {ctx['seed']} {step} {key}\n".encode())
    finally:
        os.close(fd)


def topics(ctx: Any) -> list[str]:
    """A plain function, run in a thread."""
    found = [f"{ctx['seed']}-{index}" for index in range(ITEMS)]
    _ran(ctx, "topics")
    return found


async def draft(item: str, ctx: Any) -> str:
    """A coroutine per item, taking a little while."""
    await asyncio.sleep(random.uniform(0.0, 0.05))
    _ran(ctx, "drafts", item.rsplit("-", 1)[1])
    return item.upper()


def final(ctx: Any) -> dict[str, Any]:
    """What the run ends with."""
    _ran(ctx, "final")
    return {"drafts": ctx["drafts"], "approve": ctx["approve"], "extra": ctx["extra"]}


def expected(seed: str, answer: str) -> dict[str, Any]:
    """The outputs of an uninterrupted run of ``seed`` answered ``answer``, past its deadline."""
    drafts = [f"{seed}-{index}".upper() for index in range(ITEMS)]
    return {
        "topics": [f"{seed}-{index}" for index in range(ITEMS)],
        "drafts": drafts,
        "approve": answer,
        "cool": None,
        "extra": "none",
        "final": {"drafts": drafts, "approve": answer, "extra": "none"},
    }


workflow = Workflow(
    [
        Step("topics", topics),
        Step.map("drafts", draft, over="topics"),
        Step.ask("approve", lambda ctx: f"publish {ctx['drafts']}?", depends_on=("drafts",)),
        Step.wait("cool", seconds=2, depends_on=("approve",)),
        Step.ask(
            "extra",
            lambda ctx: "anything to add?",
            depends_on=("cool",),
            expires_after=1,
            default="none",
        ),
        Step("final", final, depends_on=("extra",)),
    ],
    inputs=("seed",),
)
