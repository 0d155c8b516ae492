"""The matrix's process tier: a generated case run in a process of its own, then killed.

`run_process_case` takes the case of a seed (`matrix_harness.draw_case`, no
fault, a SQLite or JSON file store), runs the uninterrupted reference run in this
process, then starts ``tests/matrix_worker.py`` on the case and reads its lines:
``A`` when an attempt's body starts (before it reports usage), ``S`` when a save
returned. After the K-th of them, K drawn from the seed over the lines the
reference run's first invocation wrote (a quarter of the draws before its first
save), it sends SIGKILL or SIGTERM, so that kills land before the first save,
between saves, while plain steps run in threads and while map items run. Then:

1. the worker ends within `EXIT_BOUND` seconds of the signal, the way it allows:
   after SIGKILL, killed or its run's own ending; after SIGTERM, status 143
   (``run_sync`` stopped the run and saved), its run's own ending if that came
   first, or killed by SIGTERM's default action only once its run had ended
   (``run_sync`` had put the default back: the store holds a run that finished,
   suspended on a question, or went over its budget, with nothing in flight);
2. every checkpoint it handed over read back through JSON (it says so on ``X``
   lines), and the store loads: empty when no save had returned (the kill came
   before the first save: nothing more to check), else the last checkpoint saved
   or the one being saved when the kill came;
3. a resume in this process from what the store holds, answering questions, runs
   nothing that checkpoint records, and the chain ends with the reference run's
   outputs and ``spending.spent``;
4. the bill (`matrix_harness.bill`): the attempts the worker started (its ``A``
   lines) that the final ledger has no row for are at most ``spending.unknown``,
   a map listed in flight by its name standing for its running items.

`tests/run/test_matrix_processes.py` runs a small profile;
``benchmarks/matrix_soak.py --processes N`` runs many.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import math
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGKILL, SIGTERM, Signals
from typing import TYPE_CHECKING, Any

from matrix_harness import (
    BOUND,
    CASE_BOUND,
    MAP_KINDS,
    MAX_RESUMES,
    PATTERN_COST,
    Book,
    Case,
    Chain,
    Options,
    Report,
    Saver,
    Saves,
    Stores,
    _threads_done,
    build,
    check_legs,
    compare,
    draw_case,
    resume_legs,
    round_trip,
    run_to_the_end,
    usage_of,
)

from executionkit import StepContext, TokenUsage, WorkflowCheckpoint, WorkflowResult

if TYPE_CHECKING:
    from collections.abc import Mapping

TESTS = Path(__file__).resolve().parent
WORKER = TESTS / "matrix_worker.py"
ROOT = TESTS.parent
EXIT_BOUND = BOUND  # seconds from the signal to the worker's end: past it, SIGTERM was ignored
PROCESS_STORES = ("sqlite", "json")
STORE_FILES = {"json": "run.json", "sqlite": "runs.db"}  # the names `Stores` opens
SIGNALS = (SIGKILL, SIGTERM)
BEFORE_FIRST_SAVE = 0.25  # the share of draws whose kill comes before the first save


# --- the worker's lines ------------------------------------------------------------------


def parse_line(text: str) -> tuple[str, list[Any]]:
    """A worker line: its kind, then its JSON-encoded fields."""
    kind, _, rest = text.rstrip("\n").partition(" ")
    decoder = json.JSONDecoder()
    fields: list[Any] = []
    at = 0
    while at < len(rest):
        value, at = decoder.raw_decode(rest, at)
        fields.append(value)
        while at < len(rest) and rest[at] == " ":
            at += 1
    return kind, fields


@dataclass
class WorkerRun:
    """What one worker process said and how it ended."""

    lines: list[tuple[str, list[Any]]] = field(default_factory=list)
    signalled_after: int | None = None  # lines read when the signal was sent
    landed: str = "not signalled"  # what the K-th line was
    returncode: int | None = None
    late: bool = False  # still running `EXIT_BOUND` s after the signal: killed
    stderr: str = ""

    @property
    def attempts(self) -> list[tuple[str, str | None, int]]:
        return [(f[0], f[1], f[2]) for kind, f in self.lines if kind == "A"]

    @property
    def patterns(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "P")

    @property
    def saves(self) -> list[int]:
        return [f[0] for kind, f in self.lines if kind == "S"]

    @property
    def unreadable(self) -> list[str]:
        return [f[0] for kind, f in self.lines if kind == "X"]

    @property
    def end(self) -> dict[str, Any] | None:
        ends = [f[0] for kind, f in self.lines if kind == "END"]
        return ends[-1] if ends else None


def unit_kind(case: Case, path: str, key: str | None) -> str:
    """What kind of body an ``A`` line names: a plain step in a thread, a map item, ..."""
    top = path.split("/", maxsplit=1)[0]
    plan = next(plan for plan in case.steps if plan.name == top)
    if "/" in path:
        return "child step"
    if plan.kind in MAP_KINDS and key is not None:
        threaded = plan.kind == "map_plain" and plan.yields != 0
        return "map item in a thread" if threaded else "map item"
    return {"plain": "plain step in a thread", "inline": "inline step"}.get(
        plan.kind, "async step"
    )


def drive_worker(
    case: Case,
    signum: int,
    *,
    kill_after: int,
    store_path: Path,
    budget_calls: int | None,
    started: list[subprocess.Popen[str]],
) -> WorkerRun:
    """Start the worker, read its lines, send ``signum`` after the ``kill_after``-th A/S line."""
    run = WorkerRun()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(TESTS)]))}
    arguments = [str(case.seed), case.store, str(store_path), str(budget_calls or "-")]
    with (store_path.parent / "stderr.txt").open("w+", encoding="utf-8") as stderr:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, str(WORKER), *arguments],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )
        started.append(process)
        late = threading.Event()

        def too_late() -> None:  # a bound, never a synchronisation: a worker past it failed
            late.set()
            process.kill()

        watchdog = threading.Timer(CASE_BOUND, too_late)
        watchdog.start()
        try:
            assert process.stdout is not None
            counted = 0
            saved = False
            for text in process.stdout:
                kind, fields = parse_line(text)
                run.lines.append((kind, fields))
                if kind not in ("A", "S"):
                    continue
                counted += 1
                if counted == kill_after:
                    process.send_signal(signum)
                    watchdog.cancel()
                    watchdog = threading.Timer(EXIT_BOUND, too_late)
                    watchdog.start()
                    run.signalled_after = len(run.lines)
                    what = "a save" if kind == "S" else unit_kind(case, fields[0], fields[1])
                    when = "after a save" if saved or kind == "S" else "before the first save"
                    run.landed = f"{when}, at {what}"
                saved = saved or kind == "S"
            run.returncode = process.wait(timeout=EXIT_BOUND)
        except subprocess.TimeoutExpired:
            late.set()
        finally:
            watchdog.cancel()
            if process.poll() is None:
                process.kill()
            process.wait()
            assert process.stdout is not None
            process.stdout.close()
        run.late = late.is_set()
        stderr.seek(0)
        run.stderr = stderr.read()
    return run


def had_ended(case: Case, checkpoint: WorkflowCheckpoint | None, budget_calls: int | None) -> bool:
    """Whether the store holds a run that ended: finished, suspended or over budget, idle."""
    if checkpoint is None or checkpoint.in_flight:
        return False
    names = {plan.name for plan in case.steps}
    done = set(checkpoint.outputs) | set(checkpoint.skipped)
    over = budget_calls is not None and checkpoint.cost.llm_calls >= budget_calls
    return asks(checkpoint) or names <= done or over


def asks(checkpoint: WorkflowCheckpoint) -> bool:
    """Whether a question waits for an answer: in the run, or in a sub-workflow of it."""
    children: list[WorkflowCheckpoint] = []
    for entry in checkpoint.children.values():
        if "checkpoint" in entry:
            children.append(entry["checkpoint"])
        children.extend(entry.get("items", {}).values())
    return bool(checkpoint.pending) or any(asks(child) for child in children)


def exit_problems(signum: int, run: WorkerRun, *, budget: bool, ended: bool) -> list[str]:
    """Invariant 1: the worker ended in time, in a way the signal (or its run's end) explains.

    ``budget``: the run had a budget (``BudgetExceeded`` is an ending of its own);
    ``ended``: the store holds a run that had ended (see `had_ended`).
    """
    name = Signals(signum).name
    signalled = run.signalled_after is not None
    if run.late:
        after = f"{EXIT_BOUND} s after {name}" if signalled else f"{CASE_BOUND} s after it started"
        return [f"the worker was still running {after}"]
    end = run.end
    ending = None if end is None else end.get("ending")
    own = {"finished", "suspended", *(("BudgetExceeded",) if budget else ())}
    code = run.returncode
    problems: list[str] = []
    if ending is not None and ending not in own and ending != "SystemExit":
        problems.append(f"the worker's run ended with {end}")
    explained = (
        (code == 0 and ending in ("finished", "suspended"))
        or (code == 1 and ending == "BudgetExceeded" and budget)
        or (code == 143 and signum == SIGTERM and signalled and ending == "SystemExit")
        or (code == -SIGKILL and signum == SIGKILL and signalled)
        # SIGTERM's default action, once run_sync had put it back after the run ended:
        or (code == -SIGTERM and signum == SIGTERM and signalled and (ending in own or ended))
    )
    if not explained:
        tail = run.stderr.strip().splitlines()[-3:]
        problems.append(
            f"the worker exited with status {code} (ending {end}, "
            f"{'signalled' if signalled else 'not signalled'}): {tail}"
        )
    return problems


# --- the reference run, counting the lines a worker would write --------------------------


@dataclass
class LineBook(Book):
    """A book that also notes, per phase, each line a worker would write, in order."""

    log: list[tuple[int, str]] = field(default_factory=list)

    def begin(self, ctx: Mapping[str, Any]) -> tuple[StepContext, str, str | None]:
        with self.lock:
            self.log.append((ctx["phase"], "A"))
        return super().begin(ctx)


class LineSaver(Saver):
    """A list saver noting each save in a `LineBook`'s log."""

    def __init__(
        self, target: list[WorkflowCheckpoint], saves: Saves, book: LineBook, phase: int
    ) -> None:
        super().__init__(target, saves)
        self.book = book
        self.phase = phase

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        with self.book.lock:
            self.book.log.append((self.phase, "S"))


async def reference(case: Case) -> tuple[WorkflowResult | str, list[str]]:
    """The uninterrupted run, questions answered: its result, and its first leg's lines."""
    book = LineBook(case.run_id)
    saved: list[WorkflowCheckpoint] = []
    phases = iter(range(MAX_RESUMES + 2))
    executor = ThreadPoolExecutor(max_workers=2) if case.executor else None
    stores = Stores(dataclasses.replace(case, store="list"), Path(), None)  # into a list
    chain = Chain(case, book, build(case, book), stores, executor, Report(case.seed, "", "", ""))
    try:
        legs = await run_to_the_end(
            chain,
            chain.workflow,
            lambda: LineSaver(saved, Saves(), book, next(phases)),
            lambda: saved[-1] if saved else None,
            Options(phase=0),
        )
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
    first = [what for phase, what in book.log if phase == 0]
    result = legs[-1].ending.result
    if result is None or result.pending:
        last = legs[-1].ending
        return f"the reference run did not finish: {last.name} {last.error!r}", first
    return result, first


def kill_moment(seed: int, signum: int, lines: list[str]) -> int:
    """K: the A/S line after which the signal goes, drawn from the seed over ``lines``."""
    rng = random.Random(seed * 31 + signum)
    if not lines:
        return 1
    first_save = lines.index("S") + 1 if "S" in lines else len(lines)
    if first_save > 1 and rng.random() < BEFORE_FIRST_SAVE:
        return rng.randint(1, first_save - 1)
    return rng.randint(1, len(lines))


# --- a case ------------------------------------------------------------------------------


@dataclass
class ProcessReport:
    """What a process case found, and what the soak counts."""

    seed: int
    signal: str
    store: str
    case: str
    kill_after: int = 0
    landed: str = "?"
    ending: str = "?"  # the worker's: its run's ending, or how it was ended
    returncode: int | None = None
    resumed_from: int | None = None  # seq of the checkpoint the store held
    unknown: int = 0  # spending.unknown at the end of the chain
    lost: int = 0  # attempts of the chain whose report the final ledger lacks (the worker's)
    problems: list[str] = field(default_factory=list)


def store_path(case: Case, folder: Path) -> Path:
    return folder / STORE_FILES[case.store]


async def check_process_case(
    case: Case, signum: int, folder: Path, report: ProcessReport, started: list[Any]
) -> None:
    """Reference run, the worker signalled, the store loaded and resumed; every check."""
    problems = report.problems
    expected, lines = await reference(case)
    if isinstance(expected, str):
        problems.append(expected)
        return
    budget_calls = (
        None if case.budget is None else max(1, math.ceil(expected.cost.llm_calls * case.budget))
    )
    report.kill_after = kill_moment(case.seed, signum, lines)
    run = await asyncio.to_thread(
        functools.partial(
            drive_worker,
            case,
            signum,
            kill_after=report.kill_after,
            store_path=store_path(case, folder),
            budget_calls=budget_calls,
            started=started,
        )
    )
    report.landed = run.landed
    report.returncode = run.returncode
    end = run.end
    code = run.returncode
    if end is not None:
        report.ending = end["ending"]
    elif code is not None and code < 0:
        report.ending = f"killed by {Signals(-code).name}"
    else:
        report.ending = f"status {code}"
    problems.extend(f"the worker's {message}" for message in run.unreadable)
    stores = Stores(case, folder, None)
    executor = ThreadPoolExecutor(max_workers=2) if case.executor else None
    try:
        try:
            start = stores.load()
        except Exception as exc:  # noqa: BLE001 - any refusal is the broken promise
            problems.append(f"the store does not load after the worker ended: {exc!r}")
            return
        problems.extend(
            exit_problems(
                signum,
                run,
                budget=case.budget is not None,
                ended=had_ended(case, start, budget_calls),
            )
        )
        book = book_of(case, run)
        await resume_process_case(
            case,
            book,
            stores=stores,
            executor=executor,
            run=run,
            start=start,
            expected=expected,
            report=report,
        )
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
        stores.close()


def book_of(case: Case, run: WorkerRun) -> Book:
    """The chain's book, its phase 0 the attempts and pattern results the worker named."""
    book = Book(case.run_id)
    reported = TokenUsage()
    for path, key, attempt in run.attempts:
        book.attempts[0, path, key, attempt] += 1
        book.calls[0, path, key] += 1
        reported += usage_of(path, key)
    for _ in range(run.patterns):
        reported += PATTERN_COST
    book.reported[0] = reported
    return book


async def resume_process_case(
    case: Case,
    book: Book,
    *,
    stores: Stores,
    executor: ThreadPoolExecutor | None,
    run: WorkerRun,
    start: WorkflowCheckpoint | None,
    expected: WorkflowResult,
    report: ProcessReport,
) -> None:
    """Invariants 2 to 4: the store's checkpoint, then the resumes from it and the bill."""
    problems = report.problems
    saves = run.saves
    if start is None:
        if saves:
            problems.append(f"the store is empty, though save seq={saves[-1]} returned")
        return  # killed before its first save: nothing was recorded, nothing to resume
    report.resumed_from = start.seq
    try:
        again = round_trip(start)
    except Exception as exc:  # noqa: BLE001 - any refusal is the broken promise
        problems.append(f"the store's checkpoint seq={start.seq} does not read back: {exc!r}")
        return
    if again.to_dict() != start.to_dict():
        problems.append(f"the store's checkpoint seq={start.seq} reads back different")
    last = saves[-1] if saves else 0
    if start.seq not in (last, last + 1):
        problems.append(
            f"the store holds seq={start.seq}; the last save that returned was seq={last}"
        )
    end = run.end
    pending = end.get("pending", []) if end is not None else []
    chain = Chain(case, book, build(case, book), stores, executor, Report(case.seed, "", "", ""))
    chain.report.problems = problems
    legs = await resume_legs(chain, start, pending)
    final = check_legs(chain, legs)
    if final is None or final.pending:
        problems.append("the chain never finished")
        return
    if not await _threads_done(book):
        problems.append(f"step bodies still running {BOUND} s after the resumes")
        return
    problems.extend(compare(chain, final, expected, frozenset()))
    report.unknown = final.spending.unknown
    rows = Counter(
        (row.step, row.item, row.attempt)
        for row in final.spending.entries
        if row.outcome != "unknown" and row.model is not None
    )
    started: Counter[tuple[str, str | None, int]] = Counter()
    for (_, path, key, attempt), count in book.attempts.items():
        started[path, key, attempt] += count
    report.lost = sum(max(0, count - rows[unit]) for unit, count in started.items())


def run_process_report(seed: int, *, signal: int, store_kind: str, folder: Path) -> ProcessReport:
    """Run the process case of ``seed`` (in a loop of its own, in a daemon thread); report."""
    case = draw_case(seed, store=store_kind, fault="none")
    report = ProcessReport(seed, Signals(signal).name, store_kind, str(case))
    folder.mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen[str]] = []

    def target() -> None:
        try:
            asyncio.run(check_process_case(case, signal, folder, report, started))
        except BaseException as exc:  # noqa: BLE001 - reported, never lost in the thread
            report.problems.append(f"the harness raised {exc!r}")

    thread = threading.Thread(target=target, daemon=True, name=f"matrix-process-{seed}")
    try:
        thread.start()
        thread.join(CASE_BOUND + EXIT_BOUND)
        if thread.is_alive():
            report.problems.append(f"the case did not end within {CASE_BOUND} s (a hang)")
    finally:
        for process in started:  # every worker is ended and reaped, whatever happened
            if process.poll() is None:
                process.kill()
            process.wait()
    report.problems = [
        f"seed {seed} {report.signal} ({case}; kill after line {report.kill_after}, "
        f"{report.landed}): {problem}"
        for problem in report.problems
    ]
    return report


def run_process_case(seed: int, *, signal: int, store_kind: str, folder: Path) -> list[str]:
    """The broken promises of the process case of ``seed`` (empty when all held)."""
    return run_process_report(seed, signal=signal, store_kind=store_kind, folder=folder).problems


def profile(count: int, first: int = 0) -> list[tuple[int, int, str]]:
    """``count`` (seed, signal, store) from seed ``first``: both signals, both stores in turn."""
    return [
        (seed, SIGNALS[seed % 2], PROCESS_STORES[(seed // 2) % 2])
        for seed in range(first, first + count)
    ]
