"""The generated matrix's process tier: a case's process killed (SIGKILL) or stopped (SIGTERM).

Each case (see `matrix_processes`) runs a generated workflow in a process of its
own (``tests/matrix_worker.py``, with a SQLite or JSON file store), sends it
SIGKILL or SIGTERM after a seeded number of its lines (an attempt starting, a
save returning), so that the signal lands before the first save, between saves,
while plain steps run in threads and while map items run. It then holds the
process to ending in time the way the signal allows (SIGTERM: status 143 through
``run_sync``'s handler, or its run's own end), the store to loading, and a resume
in this process to running nothing recorded, ending like an uninterrupted run,
and counting every attempt the dead process started as a ledger row or as
unknown. Two cases run at a time, so that the profile's 24 processes fit in
about 7 seconds on 2 cores. The checker's own tests below show that each kind
of broken promise is reported. ``benchmarks/matrix_soak.py --processes N`` runs
many more.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from signal import SIGKILL, SIGTERM
from typing import TYPE_CHECKING

from matrix_harness import Book, bill, draw_case
from matrix_processes import (
    ProcessReport,
    WorkerRun,
    book_of,
    exit_problems,
    had_ended,
    kill_moment,
    parse_line,
    profile,
    run_process_report,
    unit_kind,
)

from executionkit import (
    LedgerEntry,
    PatternResult,
    Spending,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
)

if TYPE_CHECKING:
    from pathlib import Path

CASES = 24  # both signals, both stores in turn: about 0.75 s each, two at a time


def run_profile(tmp_path: Path, signum: int) -> list[ProcessReport]:
    """The profile's cases sent ``signum``, two at a time (each starts one interpreter)."""
    cases = [(seed, sig, store) for seed, sig, store in profile(CASES) if sig == signum]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(
            pool.map(
                lambda drawn: run_process_report(
                    drawn[0], signal=drawn[1], store_kind=drawn[2], folder=tmp_path / str(drawn[0])
                ),
                cases,
            )
        )


def test_killed_workers_resume_and_bill_every_attempt(tmp_path: Path) -> None:
    """Twelve processes SIGKILLed at seeded lines: the store loads, a resume keeps every promise.

    The kills must land both before the first save (nothing to resume) and after
    one (a resume from what the store held), and lose some attempts' reports
    (which the bill must find as unknown rows), or the profile attacks too little.
    """
    reports = run_profile(tmp_path, SIGKILL)
    assert [problem for report in reports for problem in report.problems] == []
    assert {report.store for report in reports} == {"sqlite", "json"}
    assert any(report.landed.startswith("before the first save") for report in reports)
    assert sum(report.resumed_from is not None for report in reports) >= 4
    assert any(report.returncode == -SIGKILL for report in reports)
    assert sum(report.lost for report in reports) > 0  # kills lost reports: the bill is tested


def test_stopped_workers_exit_143_and_resume(tmp_path: Path) -> None:
    """Twelve processes sent SIGTERM at seeded lines: each ends in time, saved; resumes hold.

    SIGTERM must end the process within the bound with status 143 (run_sync's
    handler stopped the run and saved) unless its run ended first.
    """
    reports = run_profile(tmp_path, SIGTERM)
    assert [problem for report in reports for problem in report.problems] == []
    assert sum(report.returncode == 128 + SIGTERM for report in reports) >= 6
    assert all(report.resumed_from is not None for report in reports if report.returncode == 143)


def test_worker_lines_keep_odd_paths_whole() -> None:
    """A field with spaces, quotes or a non-ASCII letter comes back whole from its line."""
    path = 'm 1/"0"/c0 é'
    line = " ".join(["A", json.dumps(path), json.dumps(None), json.dumps(2)]) + "\n"
    assert parse_line(line) == ("A", [path, None, 2])
    assert parse_line('END {"ending": "finished", "pending": []}\n') == (
        "END",
        [{"ending": "finished", "pending": []}],
    )
    run = WorkerRun(lines=[parse_line(line), ("S", [3]), ("P", []), ("X", ["no"])])
    assert (run.attempts, run.saves, run.patterns, run.unreadable) == (
        [(path, None, 2)],
        [3],
        1,
        ["no"],
    )


def test_the_checker_names_an_exit_the_signal_does_not_explain() -> None:
    """Late, killed by SIGTERM mid-run, 143 without SIGTERM, a failed run: each is reported."""
    stopped = WorkerRun(
        lines=[("END", [{"ending": "SystemExit", "code": 143}])],
        signalled_after=1,
        returncode=143,
    )
    assert exit_problems(SIGTERM, stopped, budget=False, ended=False) == []
    assert exit_problems(SIGKILL, stopped, budget=False, ended=False) != []
    late = WorkerRun(signalled_after=3, late=True)
    assert "still running" in exit_problems(SIGTERM, late, budget=False, ended=False)[0]
    defaulted = WorkerRun(signalled_after=3, returncode=-SIGTERM)
    assert exit_problems(SIGTERM, defaulted, budget=False, ended=False) != []  # mid-run
    assert exit_problems(SIGTERM, defaulted, budget=False, ended=True) == []  # after its end
    killed = WorkerRun(signalled_after=3, returncode=-SIGKILL)
    assert exit_problems(SIGKILL, killed, budget=False, ended=False) == []
    assert exit_problems(SIGKILL, WorkerRun(returncode=-SIGKILL), budget=False, ended=False)
    over = WorkerRun(lines=[("END", [{"ending": "BudgetExceeded"}])], returncode=1)
    assert exit_problems(SIGKILL, over, budget=True, ended=False) == []
    assert exit_problems(SIGKILL, over, budget=False, ended=False) != []
    failed = WorkerRun(lines=[("END", [{"ending": "WorkflowFailed"}])], returncode=1)
    assert len(exit_problems(SIGKILL, failed, budget=True, ended=False)) == 2


def test_the_checker_bills_the_attempts_a_dead_worker_named() -> None:
    """An attempt on an ``A`` line with no ledger row and no unknown row breaks the bill."""
    case = draw_case(0, store="json", fault="none")
    run = WorkerRun(lines=[("A", ["s0", None, 1]), ("P", [])])
    book = book_of(case, run)
    assert book.attempts == Counter({(0, "s0", None, 1): 1})
    assert book.calls == Counter({(0, "s0", None): 1})
    unknown = LedgerEntry("s0", None, 1, "unknown", None, TokenUsage())
    assert bill(book, Spending.of([unknown]), frozenset()) == []
    assert "missing from the ledger" in bill(book, Spending.of([]), frozenset())[0]
    assert bill(Book(case.run_id), Spending.of([]), frozenset()) == []


def test_kill_moments_cover_the_first_invocation() -> None:
    """K falls on every line of the reference's first invocation, a share before its first save."""
    lines = ["A", "A", "A", "S", "A", "A", "S", "A", "S"]
    moments = Counter(kill_moment(seed, SIGKILL, lines) for seed in range(400))
    assert set(moments) == set(range(1, len(lines) + 1))
    assert 0.3 < sum(moments[k] for k in (1, 2, 3)) / 400 < 0.7
    assert kill_moment(1, SIGTERM, []) == 1


def test_a_run_has_ended_only_when_nothing_is_left_to_run() -> None:
    """What SIGTERM's default action may leave: a run finished, asking or over budget, idle."""
    case = draw_case(0, store="json", fault="none")
    saved: list[WorkflowCheckpoint] = []
    names = [plan.name for plan in case.steps]
    Workflow(
        Step(
            name,
            lambda ctx: PatternResult(1, cost=TokenUsage(1, 1, 1)),
            depends_on=tuple(names[:at]),
        )
        for at, name in enumerate(names)
    ).run_sync(checkpoint_fn=saved.append)
    assert len(saved) == len(case.steps)  # one step recorded per checkpoint
    assert had_ended(case, saved[-1], None)
    assert not had_ended(case, saved[0], None)
    assert saved[0].in_flight  # the next step, about to start: not an ending
    assert not had_ended(case, saved[0], 1)
    idle = WorkflowCheckpoint.from_dict({**saved[0].to_dict(), "in_flight": []})
    assert had_ended(case, idle, 1)  # over a budget of one call, idle: its own ending
    assert not had_ended(case, idle, 2)
    assert not had_ended(case, None, None)
    child = Workflow([Step("c0", lambda ctx: 1), Step.ask("c1", lambda ctx: "?")])
    asking: list[WorkflowCheckpoint] = []
    Workflow([Step(plan.name, child) for plan in case.steps]).run_sync(checkpoint_fn=asking.append)
    assert not asking[-1].pending  # the questions wait in the sub-workflows' checkpoints
    assert had_ended(case, asking[-1], None)
    assert unit_kind(case, case.steps[0].name, None) in (
        "async step",
        "plain step in a thread",
        "inline step",
    )
