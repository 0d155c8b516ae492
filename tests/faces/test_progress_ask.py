"""The console progress reporter and `Step.ask`: waiting for answers, answered, suspended.

A fake clock moves on by a fixed amount before each event, so elapsed times and
durations are exact; the library's clock (``executionkit._define._questions.utc_now``) is
fixed too, so deadlines are. A suspended run ends with a line of its own, never
one that says it failed.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

import executionkit._define._questions as questions
from executionkit import PatternResult, Step, TokenUsage, Workflow, WorkflowCheckpoint
from executionkit import events as ev
from executionkit.progress import ConsoleProgress

if TYPE_CHECKING:
    from executionkit.events import EventCallback

RUN = "r1"
ASKED = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ticking(reporter: ConsoleProgress, clock: FakeClock, seconds: float) -> EventCallback:
    """Move the clock on by ``seconds`` before handing each event to ``reporter``."""

    def on_event(event: ev.Event) -> None:
        clock.now += seconds
        reporter(event)

    return on_event


@pytest.fixture(autouse=True)
def fixed_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Questions are asked, and answers checked, at `ASKED`."""
    monkeypatch.setattr(questions, "utc_now", lambda: ASKED)


def approval() -> Workflow:
    """plan -> approve (ask, one hour to answer) -> execute; review (ask) on its own."""
    return Workflow(
        [
            Step(  # inline: its events come in one order beside the ask
                "plan",
                lambda ctx: PatternResult(["a", "b"], cost=TokenUsage(100, 20, 1)),
                inline=True,
            ),
            Step.ask(
                "approve",
                lambda ctx: {"plan": ctx["plan"]},
                depends_on=("plan",),
                expires_after=3600,
            ),
            Step.ask("review", lambda ctx: "Anything to add?"),
            Step("execute", lambda ctx: f"ran: {ctx['approve']}", depends_on=("approve",)),
        ]
    )


async def suspend(stream: io.StringIO, clock: FakeClock) -> WorkflowCheckpoint:
    """Run `approval` until it suspends; return its last checkpoint."""
    saved: list[WorkflowCheckpoint] = []
    result = await approval().run(
        run_id=RUN,
        checkpoint_fn=saved.append,
        on_event=ticking(ConsoleProgress(stream, clock=clock), clock, 1.0),
    )
    assert list(result.pending) == ["approve", "review"]
    return saved[-1]


SUSPENDED_LINES = [
    "executionkit: run r1 started: 4 steps",
    "executionkit: plan finished in 1.0s; 1/4 done, 2.0s, 120 tokens in 1 call",
    (
        "executionkit: review is waiting for an answer; 1/4 done, waiting for: review, 3.0s, "
        "120 tokens in 1 call"
    ),
    (
        "executionkit: approve is waiting for an answer until 2026-12-01T11:00:00+00:00; "
        "1/4 done, waiting for: review, approve, 5.0s, 120 tokens in 1 call"
    ),
    # RunSuspended names the waiting steps in declaration order.
    (
        "executionkit: run r1 suspended; 1/4 done, waiting for: approve, review, 7.0s, "
        "120 tokens in 1 call"
    ),
]


async def test_plain_lines_say_what_waits_and_the_run_suspends_without_failing() -> None:
    stream = io.StringIO()
    await suspend(stream, FakeClock())
    lines = stream.getvalue().splitlines()
    assert lines == SUSPENDED_LINES
    assert not any("failed" in line for line in lines)


async def test_an_answer_counts_its_step_done_and_the_run_suspends_again_for_the_rest() -> None:
    clock = FakeClock()
    checkpoint = await suspend(io.StringIO(), clock)
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=clock)
    result = await approval().run(
        resume_from=checkpoint, answers={"approve": "yes"}, on_event=ticking(reporter, clock, 1.0)
    )
    assert result.outputs["execute"] == "ran: yes"
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[:2] == [
        "executionkit: run r1 resumed: 1/4 steps recorded",
        "executionkit: approve answered; 2/4 done, 2.0s, 120 tokens in 1 call",
    ]
    assert lines[2].startswith("executionkit: execute finished in 1.0s; 3/4 done, ")
    assert lines[3] == (
        "executionkit: run r1 suspended; 3/4 done, waiting for: review, 5.0s, 120 tokens in 1 call"
    )


async def test_answering_the_last_question_finishes_the_run() -> None:
    clock = FakeClock()
    checkpoint = await suspend(io.StringIO(), clock)
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=clock)
    await approval().run(
        resume_from=checkpoint,
        answers={"approve": "yes", "review": "no"},
        on_event=ticking(reporter, clock, 1.0),
    )
    lines = stream.getvalue().splitlines()
    assert lines[1:3] == [
        "executionkit: approve answered; 2/4 done, 2.0s, 120 tokens in 1 call",
        "executionkit: review answered; 3/4 done, 3.0s, 120 tokens in 1 call",
    ]
    assert lines[-1] == "executionkit: run r1 finished; 4/4 done, 6.0s, 120 tokens in 1 call"
    assert not any("waiting" in line for line in lines)


async def test_the_live_line_names_the_waiting_steps_and_ends_with_the_suspension() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    reporter = ConsoleProgress(stream, live=True, clock=clock)
    await approval().run(run_id=RUN, on_event=ticking(reporter, clock, 1.0))
    text = stream.getvalue()
    assert text.endswith(
        "\rexecutionkit: run r1 suspended; 1/4 done, waiting for: approve, review, 5.0s, "
        "120 tokens in 1 call\n"
    )
    frames = [frame.rstrip() for frame in text.replace("\r", "\n").splitlines()]
    # A question asked is a line of its own above the live line, which then names it.
    at = frames.index(
        "executionkit: approve is waiting for an answer until 2026-12-01T11:00:00+00:00"
    )
    assert frames[at + 1] == (
        "executionkit 1/4 done, waiting for: review, approve, 4.0s, 120 tokens in 1 call"
    )
    assert not any("failed" in frame for frame in frames)


def test_many_waiting_steps_are_named_up_to_three() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 5, (), resumed=False))
    for name in ("a", "b", "c", "d"):
        reporter(ev.StepStarted(RUN, name, 1))
        reporter(ev.QuestionAsked(RUN, name, {"q": name}, None))
    reporter(ev.RunSuspended(RUN, 1.0, TokenUsage(), ("a", "b", "c", "d")))
    lines = stream.getvalue().splitlines()
    assert lines[4] == (
        "executionkit: d is waiting for an answer; 0/5 done, waiting for: a, b, c, +1 more, 0.0s"
    )
    assert lines[-1] == (
        "executionkit: run r1 suspended; 0/5 done, waiting for: a, b, c, +1 more, 0.0s"
    )


def test_a_suspension_names_what_waits_even_when_no_question_was_asked_in_this_call() -> None:
    """On resume, questions asked before emit no QuestionAsked: RunSuspended names them."""
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 3, ("plan",), resumed=True, cost=TokenUsage(5, 5, 1)))
    reporter(ev.StepRestored(RUN, "plan"))
    reporter(ev.StepStarted(RUN, "approve", 1))
    reporter(ev.RunSuspended(RUN, 1.0, TokenUsage(5, 5, 1), ("approve",)))
    assert stream.getvalue().splitlines() == [
        "executionkit: run r1 resumed: 1/3 steps recorded",
        (
            "executionkit: run r1 suspended; 1/3 done, waiting for: approve, 0.0s, "
            "10 tokens in 1 call"
        ),
    ]


def test_names_of_waiting_steps_are_escaped() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.QuestionAsked(RUN, "ok?\x1b[2J", "question", None))
    reporter(ev.RunSuspended(RUN, 1.0, TokenUsage(), ("ok?\x1b[2J",)))
    lines = stream.getvalue().splitlines()
    assert lines[1:] == [
        (
            'executionkit: "ok?\\u001b[2J" is waiting for an answer; 0/1 done, waiting for: '
            '"ok?\\u001b[2J", 0.0s'
        ),
        'executionkit: run r1 suspended; 0/1 done, waiting for: "ok?\\u001b[2J", 0.0s',
    ]
    assert all(line.isprintable() for line in lines)


def test_a_new_run_forgets_the_questions_of_the_last() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.QuestionAsked(RUN, "approve", "ok?", None))
    reporter(ev.RunSuspended(RUN, 1.0, TokenUsage(), ("approve",)))
    reporter(ev.RunStarted("r2", 1, (), resumed=False))
    reporter(ev.RunFinished("r2", 1.0, TokenUsage(), 0))
    assert stream.getvalue().splitlines()[-1] == "executionkit: run r2 finished; 0/1 done, 0.0s"
