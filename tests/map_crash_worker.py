"""The process the map kill test kills: a 40-item map recorded into a JSON Lines file.

Usage: ``python tests/map_crash_worker.py CHECKPOINT [plain | inline]``. Not a
test module. With ``plain``, the items are a plain function (run in worker
threads) instead of a coroutine function; with ``inline``, a plain function
marked ``inline=True`` (which blocks the event loop while it runs). Each
event is one line on stdout, written with one ``os.write`` so lines stay whole:
``run-start <recorded item keys, comma-separated>`` (what the file held when the
run began; ``*`` when the map's output itself was recorded), ``item-start <key>``,
``resume-unknown <n>`` (resuming: the attempts the checkpoint lists in flight plus
the map items it counts, which the resume books as unknown), ``checkpoint <seq>``
(once stored) and finally ``done <outputs and cost as JSON>``.
If CHECKPOINT exists the run resumes from it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from executionkit import PatternResult, Step, TokenUsage, Workflow, WorkflowCheckpoint
from executionkit.stores import JsonLinesStore

ITEMS = 40


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


async def summarise(item: int, ctx: Any) -> PatternResult[int]:
    say(f"item-start {item}")
    for _ in range(item % 5):
        await asyncio.sleep(0.0005)  # work of varying length, so items finish out of order
    return PatternResult(item * item, cost=TokenUsage(item, 1, 1))


def summarise_plain(item: int, ctx: Any) -> PatternResult[int]:
    say(f"item-start {item}")
    time.sleep(0.0005 * (item % 5))  # the work: a plain function blocks while it runs
    return PatternResult(item * item, cost=TokenUsage(item, 1, 1))


def workflow(run: Any, *, inline: bool = False) -> Workflow:
    return Workflow(
        [
            Step("split", lambda ctx: list(range(ITEMS))),
            Step.map("squares", run, over="split", key=str, max_concurrency=4, inline=inline),
            Step("total", lambda ctx: sum(ctx["squares"]), depends_on=("squares",)),
        ]
    )


WORKFLOW = workflow(summarise)


def main(path: str, mode: str) -> None:
    store = JsonLinesStore(path)
    resume = store.load()
    if resume is None:
        recorded = ""
    elif "squares" in resume.outputs:
        recorded = "*"
    else:
        recorded = ",".join(resume.items.get("squares", {"outputs": {}})["outputs"])
    say(f"run-start {recorded}")
    if resume is not None:
        # What a resume books as unknown: the attempts in flight and the map items counted.
        unknown = len(resume.in_flight) + sum(resume.in_flight_items.values())
        say(f"resume-unknown {unknown}")

    def save(checkpoint: WorkflowCheckpoint) -> None:
        store(checkpoint)
        say(f"checkpoint {checkpoint.seq}")

    chosen = WORKFLOW if not mode else workflow(summarise_plain, inline=mode == "inline")
    result = chosen.run_sync(resume_from=resume, checkpoint_fn=save)
    cost = result.cost
    summary = {"total": result.outputs["total"], "cost": [cost.input_tokens, cost.llm_calls]}
    say(f"done {json.dumps(summary)}")


if __name__ == "__main__":
    main(sys.argv[1], mode=sys.argv[2] if len(sys.argv) > 2 else "")
