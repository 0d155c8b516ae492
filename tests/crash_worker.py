"""The process the crash test kills: a 24-step workflow checkpointed to a JSON file.

Usage: ``python tests/crash_worker.py CHECKPOINT EVENTS``. Not a test module (pytest
only collects ``test_*.py``); `crash_harness` starts it, SIGKILLs it at seeded random
moments and starts it again until it prints ``done``.

- Checkpoints are written atomically: a temp file in the same folder is written,
  flushed and fsynced, then moved over CHECKPOINT with ``os.replace``, then the
  folder is fsynced. A kill at any instant leaves either the previous checkpoint or the new one.
- If CHECKPOINT exists, the run resumes from it.
- With ``CRASH_WORKER_MODE=mixed`` in the environment, every other step is a plain
  function blocking in ``time.sleep`` (run in a worker thread), the rest async.
- Every event is one line appended to EVENTS (opened with ``O_APPEND``, one
  ``os.write`` per line, so lines stay whole whatever moment the kill lands) and then
  printed to stdout, so the harness counts events to choose its kill moment:

  ``run-start <pid> <recorded steps resumed from, comma-separated>``,
  ``step-start <step> <idempotency key>``, ``step-end <step>``,
  ``checkpoint-write <seq>`` (before writing, so kills can land inside the write),
  ``checkpoint <seq>`` (once the file was replaced), ``done``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    current_step,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

LAYERS = 6
WIDTH = 4
MODE = os.environ.get("CRASH_WORKER_MODE", "async")
STEP_NAMES = tuple(f"s{layer}_{index}" for layer in range(LAYERS) for index in range(WIDTH))


def dependencies(layer: int, index: int) -> tuple[str, ...]:
    """One to three steps of earlier layers; always the same index one layer up."""
    if layer == 0:
        return ()
    deps = [f"s{layer - 1}_{index}"]
    if (layer + index) % 2 == 0:
        deps.append(f"s{layer - 1}_{(index + 1) % WIDTH}")
    if layer >= 2 and (layer * index) % 3 == 1:
        deps.append(f"s{layer - 2}_{(index + 3) % WIDTH}")
    return tuple(deps)


def step_cost(position: int) -> TokenUsage:
    """The fixed token usage step number ``position`` reports."""
    return TokenUsage(input_tokens=100 + 7 * position, output_tokens=20 + position, llm_calls=1)


def build_workflow(emit: Callable[[str], None]) -> Workflow:
    """The workflow: 6 layers of 4 parallel steps, so 6 batches of 4."""

    def make(layer: int, index: int) -> Step:
        name = f"s{layer}_{index}"
        deps = dependencies(layer, index)
        position = layer * WIDTH + index
        delay = 0.001 * (1 + position % 5)

        def value_of(ctx: Mapping[str, Any]) -> PatternResult[dict[str, Any]]:
            text = "|".join([name, *(ctx[dep]["digest"] for dep in deps)])
            value = {
                "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
                "depth": 1 + max((ctx[dep]["depth"] for dep in deps), default=0),
                "inputs": list(deps),
            }
            emit(f"step-end {name}")
            return PatternResult(value, cost=step_cost(position))

        async def run(ctx: Mapping[str, Any]) -> PatternResult[dict[str, Any]]:
            emit(f"step-start {name} {current_step().idempotency_key}")
            await asyncio.sleep(delay)  # simulated latency, so kills land inside batches
            return value_of(ctx)

        def run_plain(ctx: Mapping[str, Any]) -> PatternResult[dict[str, Any]]:
            emit(f"step-start {name} {current_step().idempotency_key}")
            time.sleep(delay)  # a blocking call, in the step's worker thread
            return value_of(ctx)

        if MODE == "mixed" and position % 2:
            return Step(name, run_plain, deps)
        return Step(name, run, deps)

    return Workflow(make(layer, index) for layer in range(LAYERS) for index in range(WIDTH))


def write_json_atomically(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` as JSON so that no reader ever sees a partial file."""
    temp = path.with_name(path.name + ".tmp")  # same folder, so os.replace is atomic
    with temp.open("w", encoding="utf-8") as file:
        json.dump(data, file, sort_keys=True)
        file.flush()
        os.fsync(file.fileno())
    temp.replace(path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # make the rename itself durable
    finally:
        os.close(folder)


def load_checkpoint(path: Path) -> WorkflowCheckpoint | None:
    """The checkpoint stored at ``path``, or None if there is none yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return WorkflowCheckpoint.from_dict(json.loads(text))


class EventLog:
    """Appends whole event lines to a file and echoes them to stdout."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, line: str) -> None:
        os.write(self._fd, f"{line}\n".encode())  # one write per line: whole after a kill
        print(line, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: crash_worker.py CHECKPOINT EVENTS", file=sys.stderr)
        return 2
    checkpoint_path, events_path = Path(argv[0]), Path(argv[1])
    events = EventLog(events_path)
    resume = load_checkpoint(checkpoint_path)
    recorded = "" if resume is None else ",".join(resume.outputs)
    events.emit(f"run-start {os.getpid()} {recorded}")

    def save(checkpoint: WorkflowCheckpoint) -> None:
        events.emit(f"checkpoint-write {checkpoint.seq}")
        write_json_atomically(checkpoint_path, checkpoint.to_dict())
        events.emit(f"checkpoint {checkpoint.seq}")

    # A stable run_id, as a job id would be: a kill before the first checkpoint loses a
    # random one, and with it the idempotency keys the first batch already used.
    run_id = "crash-" + hashlib.sha256(str(checkpoint_path.resolve()).encode()).hexdigest()[:16]
    build_workflow(events.emit).run_sync(checkpoint_fn=save, resume_from=resume, run_id=run_id)
    events.emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
