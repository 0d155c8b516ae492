"""A worker process for the two-process tests of claims (tests/run/test_race_processes.py).

Modes, by the first argument:

- ``answer``: serves trials, one JSON command per line on stdin, one JSON reply per
  line on stdout. Each trial opens a new store object, loads the run's latest
  checkpoint and resumes it with its answer to the question ``approve``. Every
  step body appends ``run_id step answer pid`` to the log file.
- ``answer-once KIND WHERE RUN_ID LOG ANSWER``: resumes the run once, answering the
  question ``approve`` with ANSWER if it still waits for one (else without answers),
  and exits as ``map`` does.
  ``execute`` prints ``execute <the answer it acts on>`` when it starts and logs
  ``execute <that answer> pid`` when it ends.
- ``map KIND WHERE RUN_ID LOG ITEMS``: resumes (or starts) one run of a map of
  ITEMS items and exits: 0 when it finished, 4 when another process owns the run,
  5 when the store was ahead of the checkpoint it loaded. Each item appends
  ``start key pid`` and ``end key pid`` to LOG and prints ``item key`` on stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from executionkit import (
    RunArgumentError,
    RunClaimedError,
    StaleCheckpointError,
    Step,
    Workflow,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore

EXIT_CLAIMED = 4
EXIT_STALE = 5


def note(log: str, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def open_store(kind: str, where: str) -> Any:
    if kind == "json":
        return JsonFileStore(where)
    if kind == "jsonl":
        return JsonLinesStore(where)
    if kind == "sqlite":
        return SQLiteStore(where)
    from executionkit.stores import PostgresStore  # noqa: PLC0415 - psycopg only when needed

    return PostgresStore(where)


def load(store: Any, kind: str, run_id: str) -> Any:
    if kind in {"json", "jsonl"}:
        return store.load()
    return store.load(run_id)


def close(store: Any) -> None:
    closer = getattr(store, "close", None)
    if closer is not None:
        closer()


def gated(log: str, answer: str) -> Workflow:
    """draft -> approve (ask) -> execute -> after; each body logs itself."""

    def body(name: str, value: Any) -> Any:
        def run(ctx: Any) -> Any:
            note(log, f"{ctx['run']} {name} {answer} {os.getpid()}")
            return value(ctx) if callable(value) else value

        return run

    return Workflow(
        [
            Step("draft", body("draft", "the plan")),
            Step.ask("approve", lambda ctx: f"run {ctx['draft']}?", depends_on=("draft",)),
            Step("execute", body("execute", lambda ctx: ctx["approve"]), depends_on=("approve",)),
            Step("after", body("after", "done"), depends_on=("execute",)),
        ]
    )


def answer_trial(command: dict[str, Any]) -> dict[str, Any]:
    kind, where, run_id = command["kind"], command["where"], command["run_id"]
    answer, log = command["answer"], command["log"]
    store = open_store(kind, where)
    try:
        time.sleep(command["jitter"])  # varies who gets there first; never synchronises
        checkpoint = load(store, kind, run_id)
        try:
            result = gated(log, answer).run_sync(
                {"run": run_id},
                checkpoint_fn=store,
                resume_from=checkpoint,
                answers={"approve": answer},
                checkpoint_every="step",
                schedule=command["schedule"],
            )
        except RunClaimedError as exc:
            owner = exc.owner
            return {"outcome": "claimed", "owner": None if owner is None else owner.pid}
        except StaleCheckpointError as exc:
            return {"outcome": "stale", "seq": exc.seq, "stored_seq": exc.stored_seq}
        except RunArgumentError as exc:  # the other finished before this one loaded
            return {"outcome": "not waiting", "error": str(exc)}
        return {"outcome": "ran", "approve": result.outputs["approve"]}
    finally:
        close(store)


def serve_answers() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        try:
            reply = answer_trial(command)
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            reply = {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"}
        reply["pid"] = os.getpid()
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def run_map(kind: str, where: str, run_id: str, log: str, items: int) -> int:
    async def item(key: str, ctx: Any) -> str:
        note(log, f"start {key} {os.getpid()}")
        sys.stdout.write(f"item {key}\n")
        sys.stdout.flush()
        await asyncio.sleep(0.002)  # the work a kill lands in
        note(log, f"end {key} {os.getpid()}")
        return f"done {key}"

    workflow = Workflow([Step.map("items", item, over="keys", max_concurrency=2)])
    store = open_store(kind, where)
    try:
        checkpoint = load(store, kind, run_id)
        try:
            workflow.run_sync(
                {"keys": [f"k{n}" for n in range(items)]},
                checkpoint_fn=store,
                resume_from=checkpoint,
                run_id=None if checkpoint is not None else run_id,
                checkpoint_every="step",
            )
        except RunClaimedError:
            return EXIT_CLAIMED
        except StaleCheckpointError:
            return EXIT_STALE
        return 0
    finally:
        close(store)


def answer_once(kind: str, where: str, run_id: str, log: str, answer: str) -> int:
    def execute(ctx: Any) -> str:
        sys.stdout.write(f"execute {ctx['approve']}\n")
        sys.stdout.flush()
        time.sleep(0.002)  # the work a kill lands in
        note(log, f"execute {ctx['approve']} {os.getpid()}")
        return f"done with {ctx['approve']}"

    workflow = Workflow(
        [
            Step("draft", lambda ctx: "the plan"),
            Step.ask("approve", lambda ctx: f"run {ctx['draft']}?", depends_on=("draft",)),
            Step("execute", execute, depends_on=("approve",)),
        ]
    )
    store = open_store(kind, where)
    try:
        checkpoint = load(store, kind, run_id)
        waiting = checkpoint is not None and "approve" in checkpoint.pending
        try:
            workflow.run_sync(
                {"run": run_id},
                checkpoint_fn=store,
                resume_from=checkpoint,
                run_id=None if checkpoint is not None else run_id,
                answers={"approve": answer} if waiting else None,
                checkpoint_every="step",
            )
        except RunClaimedError:
            return EXIT_CLAIMED
        except StaleCheckpointError:
            return EXIT_STALE
        return 0
    finally:
        close(store)


def main() -> int:
    if sys.argv[1] == "answer":
        serve_answers()
        return 0
    if sys.argv[1] == "answer-once":
        kind, where, run_id, log, answer = sys.argv[2:7]
        return answer_once(kind, where, run_id, log, answer)
    kind, where, run_id, log, items = sys.argv[2:7]
    return run_map(kind, where, run_id, log, int(items))


if __name__ == "__main__":
    sys.exit(main())
