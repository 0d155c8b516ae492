"""The process the matrix's process tier signals: one generated case, run once.

Usage: ``python tests/matrix_worker.py SEED STORE_KIND STORE_PATH [BUDGET_CALLS]``.
Not a test module (pytest only collects ``test_*.py``); `matrix_processes` starts
it, reads its lines and sends SIGKILL or SIGTERM after a seeded number of them.

It draws the case of SEED (`matrix_harness.draw_case`) with no fault and the store
STORE_KIND (``sqlite`` or ``json``: `SQLiteStore` or `JsonFileStore` at STORE_PATH),
builds the case's workflow and runs it once with the case's options through
``run_sync`` (which handles SIGTERM itself: the run stops, saves, and the process
exits 143), with no resume and no answers; BUDGET_CALLS, if given and not ``-``,
is the run's budget in ``llm_calls``. Each line on stdout is one ``os.write``, so
lines stay whole whatever moment a kill lands, each field JSON-encoded:

- ``A <path> <item key or null> <attempt>``: an attempt's body starts, written
  before it reports its usage (so every attempt that could have spent is named);
- ``P``: a body returns a `PatternResult` (its usage is about to be reported);
- ``S <seq>``: a checkpoint was saved (written once the store's save returned);
- ``X <message>``: a checkpoint handed over does not read back through JSON;
- ``END <{"ending": ..., "pending": [...], "code": ...}>``: how ``run_sync`` ended.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matrix_harness import Book, Case, Saves, StoreSaver, build, draw_case, round_trip

from executionkit import StepContext, TokenUsage, WorkflowCheckpoint, current_step
from executionkit.stores import JsonFileStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Mapping


def say(*fields: Any) -> None:
    """One line, in one write: the kind, then each field as JSON."""
    kind, *rest = fields
    line = " ".join([kind, *(json.dumps(value) for value in rest)]) + "\n"
    os.write(1, line.encode())


@dataclass
class SayingBook(Book):
    """The harness's book, naming each attempt on stdout before its body reports usage."""

    def begin(self, ctx: Mapping[str, Any]) -> tuple[StepContext, str, str | None]:
        step = current_step()
        say("A", self.path_of(step), step.item_key, step.attempt)
        return super().begin(ctx)

    def result(self, value: Any, phase: int, *, pattern: bool) -> Any:
        if pattern:
            say("P")
        return super().result(value, phase, pattern=pattern)


class SayingSaver(StoreSaver):
    """The harness's store saver (claims pass through), saying each successful save."""

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        try:
            again = round_trip(checkpoint)
        except Exception as exc:  # noqa: BLE001 - any refusal is the broken promise
            say("X", f"checkpoint seq={checkpoint.seq} does not read back: {exc!r}")
        else:
            if again.to_dict() != checkpoint.to_dict():
                say("X", f"checkpoint seq={checkpoint.seq} reads back different")
        super().__call__(checkpoint)
        say("S", checkpoint.seq)


def open_store(case: Case, kind: str, path: Path) -> Any:
    """The case's store at ``path``, opened as the harness's `Stores` opens it."""
    if kind == "json":
        return JsonFileStore(path)
    if kind == "sqlite":
        synchronous = "NORMAL" if case.seed % 2 else "FULL"
        return SQLiteStore(path, history=case.history, synchronous=synchronous)
    msg = f"unknown store kind {kind!r}"
    raise ValueError(msg)


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    # A program stopped by a process manager has SIGTERM's default action, which is
    # what run_sync installs its handler over; a test runner's SIG_IGN is inherited
    # across exec, so the worker puts the default back first.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    seed, kind, path = int(argv[0]), argv[1], Path(argv[2])
    budget_calls = argv[3] if len(argv) == 4 else "-"
    case = draw_case(seed, store=kind, fault="none")
    book = SayingBook(case.run_id)
    store = open_store(case, kind, path)
    executor = ThreadPoolExecutor(max_workers=2) if case.executor else None
    try:
        result = build(case, book).run_sync(
            {"phase": 0},
            checkpoint_fn=SayingSaver(store, Saves()),
            run_id=case.run_id,
            on_error=case.on_error,  # type: ignore[arg-type]
            budget=None if budget_calls == "-" else TokenUsage(llm_calls=int(budget_calls)),
            schedule=case.schedule,  # type: ignore[arg-type]
            max_concurrency=case.max_concurrency,
            executor=executor,
            checkpoint_every=case.every,  # type: ignore[arg-type]
            stop_grace=case.stop_grace,
        )
    except SystemExit as exc:
        say("END", {"ending": "SystemExit", "code": exc.code})
        raise
    except BaseException as exc:  # noqa: BLE001 - said on stdout, judged by the harness
        say("END", {"ending": type(exc).__name__, "error": repr(exc)})
        return 1
    else:
        ending = "suspended" if result.pending else "finished"
        say("END", {"ending": ending, "pending": sorted(result.pending)})
        return 0
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
        close = getattr(store, "close", None)
        if close is not None:
            close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
