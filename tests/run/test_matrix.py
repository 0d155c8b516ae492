"""The generated matrix, small profile: seeded cases attacking options, stores and faults together.

Each case (see `matrix_harness`) draws a workflow mixing every kind of step
(async, plain in threads or inline, maps of async and plain items, a
sub-workflow and a map of them, questions, conditions, retries whose first
attempt fails, a timeout that must not fire, usage by ``add_usage`` and by
``PatternResult.cost``), the run options, a store and a fault (none, a store
failing once or for good, a cancel at an event or after loop turns, a step
failing for good, a lost PostgreSQL claim). It runs the case, resumes it to the
end and checks every promise: the run ends in time with an allowed error, no
task or save outlives it, every checkpoint reads back, a resume runs nothing
recorded and ends like an uninterrupted run, the ledger counts every attempt
once (the lost ones as unknown), and the events agree with the checkpoints.

The tests are split by store so that pytest-xdist spreads them; the checker's
own tests below show that each kind of broken promise is reported.
``benchmarks/matrix_soak.py`` runs thousands of seeds.
"""

from __future__ import annotations

from collections import Counter

import pytest
from matrix_harness import (
    Book,
    Ending,
    Leg,
    Saves,
    bill,
    check_run,
    covered,
    draw_case,
    recorded,
    round_trip,
    run_case,
    run_case_report,
)
from matrix_harness import _nothing_again as nothing_again

from executionkit import (
    LedgerEntry,
    Spending,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
)
from executionkit.events import StepFinished

SEEDS = 40  # per store: about 6 s each under coverage
FIRST = {"list": 0, "json": 1000, "jsonl": 2000, "sqlite": 3000}


@pytest.mark.parametrize("store", sorted(FIRST))
def test_generated_cases_keep_every_promise(store: str) -> None:
    """Forty seeded cases against one store, every fault drawn: no promise broken."""
    first = FIRST[store]
    problems: list[str] = []
    for seed in range(first, first + SEEDS):
        problems += run_case(seed, store=store)
    assert problems == []


def test_generated_cases_against_postgres_keep_every_promise(pg_uri: str) -> None:
    """Cases against PostgreSQL, then claims lost at an event: no promise broken."""
    problems: list[str] = []
    for seed in range(5000, 5006):
        problems += run_case(seed, store="postgres", pg_uri=pg_uri)
    endings = []
    for seed in range(5100, 5104):
        report = run_case_report(seed, store="postgres", fault="claim_lost", pg_uri=pg_uri)
        problems += report.problems
        endings.append(report.ending)
    assert problems == []
    assert "ClaimLostError" in endings  # the fault lands: a save after it is refused


def test_a_seed_draws_the_same_case_every_time() -> None:
    """A case is rebuilt from its seed alone, so a failure message can be reproduced."""
    assert str(draw_case(7)) == str(draw_case(7))
    assert draw_case(7, store="sqlite", fault="none").store == "sqlite"
    cases = [draw_case(seed) for seed in range(300)]
    kinds = Counter(plan.kind for case in cases for plan in case.steps)
    assert set(kinds) == {
        "async",
        "plain",
        "inline",
        "map_async",
        "map_plain",
        "sub",
        "msub",
        "ask",
    }
    assert {case.fault for case in cases} >= {
        "none",
        "store_once",
        "store_after",
        "cancel_event",
        "cancel_turns",
        "step_fails",
    }


def _checkpoints() -> list[WorkflowCheckpoint]:
    """Every checkpoint of a run with a step, a map of inline items and a child that asks."""
    child = Workflow([Step("c0", lambda ctx: 1), Step.ask("c1", lambda ctx: "?")])
    workflow = Workflow(
        [
            Step("a", lambda ctx: ["x", "y"]),
            Step.map("m", lambda item, ctx: item, over="a", inline=True),
            Step("sub", child, depends_on=("m",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    workflow.run_sync(checkpoint_fn=saved.append)
    return [round_trip(checkpoint) for checkpoint in saved]


def test_the_checker_names_a_recorded_unit_that_runs_again() -> None:
    """A call in a resume of a step, item or child step its checkpoint records is reported."""
    saved = _checkpoints()
    checkpoint = next(cp for cp in saved if "m" in cp.items)
    outputs, items = recorded(checkpoint)
    assert (outputs, items) == ({"a"}, {("m", "0")})
    assert covered("a", None, outputs, items)
    assert covered("m", "0", outputs, items)
    assert not covered("m", "1", outputs, items)
    assert covered("m/0/c0", None, outputs, items)  # a child of a recorded item
    assert not covered("m/1/c0", None, outputs, items)
    assert recorded(saved[-1]) == ({"a", "m", "sub/c0"}, set())
    assert covered("sub/c0", None, *recorded(saved[-1]))
    assert not covered("sub/c1", None, *recorded(saved[-1]))
    book = Book("r")
    book.calls[1, "a", None] += 1
    book.calls[1, "m", "1"] += 1
    book.calls[2, "m", "0"] += 1  # another run: not this leg's
    leg = Leg(Ending(), Saves(), checkpoint, 1)
    assert nothing_again(book, leg) == ["recorded units ran again: ['a']"]


def test_the_checker_names_a_bill_that_counts_twice_or_loses_a_report() -> None:
    """Rows beyond the attempts started, lost reports beyond the unknown ones, extra tokens."""
    book = Book("r")
    usage = TokenUsage(10, 1, 1)
    book.attempts[0, "a", None, 1] += 1
    book.attempts[1, "a", None, 1] += 1
    book.reported = {0: usage, 1: usage}
    ok = LedgerEntry("a", None, 1, "ok", "m", usage)
    unknown = LedgerEntry("a", None, 1, "unknown", None, TokenUsage())
    assert bill(book, Spending.of([ok, unknown]), frozenset()) == []
    assert "missing from the ledger" in bill(book, Spending.of([ok]), frozenset())[0]
    assert bill(book, Spending.of([ok]), frozenset({0})) == []
    twice = bill(book, Spending.of([ok, ok, ok]), frozenset())
    assert any("more report rows than bodies" in problem for problem in twice)
    assert any("more than the attempts reported" in problem for problem in twice)
    late = LedgerEntry("a", None, 1, "timeout", "m", usage)
    assert any(
        "a timeout fired" in problem
        for problem in bill(book, Spending.of([late, ok]), frozenset())
    )


def test_the_checker_names_a_late_save_and_an_announced_step_left_out() -> None:
    """A save after run() ended, a StepFinished its last checkpoint lacks, an unreadable one."""
    checkpoint = _checkpoints()[0]
    saves = Saves(handed=[checkpoint], last_ok=True, after_end=1)
    ending = Ending(
        events=[
            StepFinished("r", "a", 0.0, TokenUsage()),
            StepFinished("r", "z", 0.0, TokenUsage()),
        ]
    )
    problems = check_run(ending, saves, "r")
    assert problems == [
        "checkpoint_fn called 1 time(s) after run() ended",
        "StepFinished(z) but the last checkpoint lacks it",
    ]
