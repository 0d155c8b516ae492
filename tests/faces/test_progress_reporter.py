"""The console progress reporter: exact lines for real runs, live mode, and its defaults.

A fake clock moves on by a fixed amount before each event, so elapsed times and step
durations in the output are exact.
"""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import struct
import termios
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    BudgetExceeded,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit import events as ev
from executionkit.progress import ConsoleProgress, _duration

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit.events import EventCallback

RUN = "r1"


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


class Pipeline:
    """fetch and translate run together; summarize retries once; publish may break.

    In the first run (no ``translate_version``) ``translate`` waits until ``fetch`` has
    returned, so the order of events does not depend on how the loop schedules the two.
    """

    def __init__(self, *, translate_version: str | None = None, broken: bool = True) -> None:
        self.fetched = asyncio.Event()
        self.summarize_attempts = 0
        self.translate_version = translate_version
        self.broken = broken

    async def fetch(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        await asyncio.sleep(0)
        self.fetched.set()
        return PatternResult("text", cost=TokenUsage(1200, 300, 1))

    async def translate(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        if self.translate_version is None:  # the first run: fetch runs beside it
            await self.fetched.wait()
        return PatternResult("texte", cost=TokenUsage(2000, 500, 2))

    def summarize(self, ctx: Mapping[str, Any]) -> PatternResult[str]:
        self.summarize_attempts += 1
        if self.summarize_attempts == 1:
            msg = "connection reset\nby peer"
            raise ConnectionError(msg)
        return PatternResult("short", cost=TokenUsage(4000, 45, 1))

    def publish(self, ctx: Mapping[str, Any]) -> str:
        if self.broken:
            msg = "no route to the CMS"
            raise ValueError(msg)
        return "published"

    def workflow(self) -> Workflow:
        return Workflow(
            [
                Step("fetch", self.fetch),
                Step("translate", self.translate, version=self.translate_version),
                # inline: on the loop, their lines come in one order
                Step(
                    "summarize",
                    self.summarize,
                    ("fetch",),
                    retries=1,
                    retry_delay=0,
                    inline=True,
                ),
                Step("publish", self.publish, ("translate",), inline=True),
            ]
        )


FAILED_RUN_LINES = [
    "executionkit: run r1 started: 4 steps",
    (
        "executionkit: fetch finished in 9.0s; 1/4 done, 1 running (translate), 13s, "
        "1,500 tokens in 1 call"
    ),
    "executionkit: translate finished in 9.0s; 2/4 done, 18s, 4,000 tokens in 3 calls",
    (
        "executionkit: summarize attempt 1 failed (ConnectionError: connection reset); "
        "retrying in 0.0s"
    ),
    (
        "executionkit: publish failed after 9.0s: ValueError: no route to the CMS; 2/4 done, "
        "1 running (summarize), 1 failed, 40s, 4,000 tokens in 3 calls"
    ),
    "executionkit: summarize finished in 22s; 3/4 done, 1 failed, 49s, 8,045 tokens in 4 calls",
    (
        "executionkit: run r1 failed: WorkflowFailed; 3/4 done, 1 failed, 58s, "
        "8,045 tokens in 4 calls"
    ),
]


async def run_failing(stream: io.StringIO, clock: FakeClock) -> WorkflowCheckpoint:
    reporter = ConsoleProgress(stream, clock=clock)
    workflow = Pipeline().workflow()
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(
            run_id=RUN, checkpoint_fn=lambda cp: None, on_event=ticking(reporter, clock, 4.5)
        )
    return caught.value.checkpoint


async def test_plain_lines_for_a_run_with_a_retry_and_a_failure() -> None:
    stream = io.StringIO()
    await run_failing(stream, FakeClock())
    assert stream.getvalue().splitlines() == FAILED_RUN_LINES
    assert stream.getvalue().endswith("\n")
    assert "\r" not in stream.getvalue()


async def test_plain_lines_for_a_resumed_run_count_restored_steps_and_tokens() -> None:
    """fetch and summarize are restored, translate was bumped; the first run's usage counts.

    The first run spent 8,045 tokens in 4 calls (translate's included: invalidated work
    stays paid for), so every line of the resumed run shows at least that.
    """
    clock = FakeClock()
    checkpoint = await run_failing(io.StringIO(), clock)
    assert sorted(checkpoint.outputs) == ["fetch", "summarize", "translate"]
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=clock)
    pipeline = Pipeline(translate_version="2", broken=False)
    await pipeline.workflow().run(
        resume_from=checkpoint,
        checkpoint_fn=lambda cp: None,
        on_event=ticking(reporter, clock, 2.0),
    )
    assert stream.getvalue().splitlines() == [
        "executionkit: run r1 resumed: 2/4 steps recorded",
        "executionkit: translate invalidated: version changed from no version to '2'",
        "executionkit: translate finished in 2.0s; 3/4 done, 10s, 10,545 tokens in 6 calls",
        "executionkit: publish finished in 2.0s; 4/4 done, 16s, 10,545 tokens in 6 calls",
        "executionkit: run r1 finished; 4/4 done, 20s, 10,545 tokens in 6 calls",
    ]


def on_screen(output: str) -> list[str]:
    """The lines a terminal shows: each line as its last carriage return left it."""
    assert output.endswith("\n")
    return [line.rsplit("\r", 1)[-1].rstrip() for line in output.split("\n")[:-1]]


def two_steps() -> Workflow:
    def draft(ctx: Mapping[str, Any]) -> PatternResult[str]:
        return PatternResult("draft", cost=TokenUsage(900, 100, 1))

    async def polish(ctx: Mapping[str, Any]) -> PatternResult[str]:
        await asyncio.sleep(0)
        return PatternResult("polished", cost=TokenUsage(11_000, 345, 1))

    return Workflow([Step("draft", draft), Step("polish", polish, ("draft",))])


async def test_live_mode_rewrites_one_line_and_ends_it_with_a_newline() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    reporter = ConsoleProgress(stream, live=True, clock=clock)
    await two_steps().run(
        run_id=RUN, checkpoint_fn=lambda cp: None, on_event=ticking(reporter, clock, 1.0)
    )
    frames = [
        "executionkit 0/2 done, 0.0s",  # RunStarted
        "executionkit 0/2 done, 1 running (draft), 1.0s",
        "executionkit 1/2 done, 2.0s, 1,000 tokens in 1 call",
        "executionkit 1/2 done, 3.0s, 1,000 tokens in 1 call",  # CheckpointTaken
        "executionkit 1/2 done, 1 running (polish), 4.0s, 1,000 tokens in 1 call",
        "executionkit 2/2 done, 5.0s, 12,345 tokens in 2 calls",
        "executionkit 2/2 done, 6.0s, 12,345 tokens in 2 calls",  # CheckpointTaken
    ]
    final = "executionkit: run r1 finished; 2/2 done, 7.0s, 12,345 tokens in 2 calls"
    expected = "executionkit: run r1 started: 2 steps\n" + frames[0]
    for previous, frame in zip(frames, [*frames[1:], final], strict=True):
        expected += "\r" + frame + " " * max(0, len(previous) - len(frame))
    assert stream.getvalue() == expected + "\n"
    # What a terminal shows at the end: the first line, and the summary over the live line.
    screen = on_screen(stream.getvalue())
    assert screen == ["executionkit: run r1 started: 2 steps", final]


async def test_live_mode_writes_failures_on_lines_of_their_own() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    reporter = ConsoleProgress(stream, live=True, clock=clock)
    workflow = Pipeline().workflow()
    with pytest.raises(WorkflowFailed):
        await workflow.run(
            run_id=RUN, checkpoint_fn=lambda cp: None, on_event=ticking(reporter, clock, 4.5)
        )
    screen = on_screen(stream.getvalue())
    assert screen == [
        "executionkit: run r1 started: 4 steps",
        FAILED_RUN_LINES[3],
        "executionkit: publish failed after 9.0s: ValueError: no route to the CMS",
        FAILED_RUN_LINES[-1],
    ]
    assert stream.getvalue().endswith("\n")


def test_the_status_names_at_most_three_running_steps() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 40, ("old",), resumed=True))
    for name in ["summarize", "translate", "classify", "embed", "rank"]:
        reporter(ev.StepStarted(RUN, name, 1))
    reporter(ev.StepFinished(RUN, "classify", 0.5, TokenUsage(12_000, 345, 8)))
    assert stream.getvalue().splitlines()[-1] == (
        "executionkit: classify finished in 0.0s; 2/40 done, "
        "4 running (summarize, translate, embed, +1 more), 0.0s, 12,345 tokens in 8 calls"
    )


def test_a_step_seen_only_finishing_reports_the_events_duration() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.StepFinished(RUN, "x", 75.0, TokenUsage()))
    assert stream.getvalue().splitlines()[-1] == (
        "executionkit: x finished in 1m15s; 1/1 done, 0.0s"
    )


def test_elapsed_time_counts_from_run_started_even_at_time_zero() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    clock.now = 0.0
    reporter = ConsoleProgress(stream, clock=clock)
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    clock.now = 75.0
    reporter(ev.RunFinished(RUN, 75.0, TokenUsage(), 0))
    assert stream.getvalue().splitlines()[-1] == "executionkit: run r1 finished; 0/1 done, 1m15s"


@pytest.mark.parametrize(
    ("error", "ending"),
    [
        (asyncio.CancelledError(), "interrupted: CancelledError"),
        (KeyboardInterrupt(), "interrupted: KeyboardInterrupt"),
        (OSError("disk full\nmore detail"), "failed: OSError: disk full"),
        (RuntimeError("x" * 200), f"failed: RuntimeError: {'x' * 117}..."),
    ],
)
def test_the_summary_says_how_the_run_ended(error: BaseException, ending: str) -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 2, (), resumed=False))
    reporter(ev.StepStarted(RUN, "a", 1))
    reporter(ev.RunFailed(RUN, 0.1, error, {}))
    assert stream.getvalue().splitlines()[-1] == f"executionkit: run r1 {ending}; 0/2 done, 0.0s"


async def test_a_budget_stop_shows_the_total_the_error_carries() -> None:
    def spend(ctx: Mapping[str, Any]) -> PatternResult[str]:
        return PatternResult("x", cost=TokenUsage(700, 300, 1))

    workflow = Workflow([Step("one", spend), Step("two", spend, ("one",))])
    checkpoints: list[WorkflowCheckpoint] = []
    await workflow.run(run_id=RUN, checkpoint_fn=checkpoints.append)
    first_only = checkpoints[0]
    longer = Workflow([*workflow.steps, Step("three", spend, ("two",))])
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    with pytest.raises(BudgetExceeded):
        await longer.run(resume_from=first_only, budget=TokenUsage(llm_calls=2), on_event=reporter)
    assert stream.getvalue().splitlines()[-1] == (
        "executionkit: run r1 stopped: budget reached; 2/3 done, 0.0s, 2,000 tokens in 2 calls"
    )


def test_a_new_run_starts_the_counts_afresh() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    for run_id in ["first", "second"]:
        reporter(ev.RunStarted(run_id, 1, (), resumed=False))
        reporter(ev.StepStarted(run_id, "a", 1))
        reporter(ev.StepFinished(run_id, "a", 0.0, TokenUsage(1, 1, 1)))
        reporter(ev.RunFinished(run_id, 0.0, TokenUsage(1, 1, 1), 1))
    assert stream.getvalue().splitlines()[-1] == (
        "executionkit: run second finished; 1/1 done, 0.0s, 2 tokens in 1 call"
    )


def test_it_writes_to_standard_error_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    two_steps().run_sync(run_id=RUN, on_event=ConsoleProgress())
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == "executionkit: run r1 started: 2 steps"
    assert lines[-1].startswith("executionkit: run r1 finished; 2/2 done, ")
    assert lines[-1].endswith("s, 12,345 tokens in 2 calls")
    assert "\r" not in captured.err  # captured stderr is not a terminal


def open_terminal(columns: int) -> tuple[io.TextIOWrapper, int]:
    """A pseudo-terminal ``columns`` wide: the writable end as a text stream, the reading fd."""
    reader, writer = os.openpty()
    fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return os.fdopen(writer, "w", encoding="utf-8"), reader


def read_all(fd: int) -> str:
    chunks = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the writer is closed and everything was read
            break
        if not chunk:
            break
        chunks += chunk
    return chunks.decode()


@pytest.mark.parametrize(("columns", "cut"), [(200, False), (30, True)])
def test_on_a_terminal_it_is_live_by_default_and_never_wider_than_it(
    columns: int, cut: bool
) -> None:
    stream, reader = open_terminal(columns)
    try:
        reporter = ConsoleProgress(stream, clock=FakeClock())
        reporter(ev.RunStarted(RUN, 2, (), resumed=False))
        reporter(ev.StepStarted(RUN, "a-step-with-a-long-name", 1))
    finally:
        stream.close()
    # The terminal turns "\n" into "\r\n" on output.
    shown = read_all(reader).replace("\r\n", "\n")
    os.close(reader)
    started, live = shown.split("\n")
    assert started == "executionkit: run r1 started: 2 steps"
    frames = live.split("\r")
    full = "executionkit 0/2 done, 1 running (a-step-with-a-long-name), 0.0s"
    if cut:
        assert frames == ["executionkit 0/2 done, 0.0s", full[:26] + "..."]
        assert all(len(frame) < columns for frame in frames)
    else:
        assert frames == ["executionkit 0/2 done, 0.0s", full]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-1.0, "0.0s"),
        (0.0, "0.0s"),
        (0.46, "0.4s"),
        (9.99, "9.9s"),
        (10.0, "10s"),
        (59.9, "59s"),
        (60.0, "1m00s"),
        (62.5, "1m02s"),
        (3599.0, "59m59s"),
        (3600.0, "1h00m00s"),
        (7509.0, "2h05m09s"),
    ],
)
def test_durations(seconds: float, text: str) -> None:
    assert _duration(seconds) == text


def test_the_live_default_follows_the_stream() -> None:
    plain = io.StringIO()
    reporter = ConsoleProgress(plain, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.StepStarted(RUN, "a", 1))
    assert plain.getvalue() == "executionkit: run r1 started: 1 step\n"
    forced = io.StringIO()
    reporter = ConsoleProgress(forced, live=False, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    assert forced.getvalue() == "executionkit: run r1 started: 1 step\n"


async def test_names_and_messages_that_would_drive_a_terminal_are_escaped() -> None:
    """Used straight from Python, the reporter never writes an escape sequence or a stray line."""
    stream = io.StringIO()

    def fails(ctx: object) -> None:
        msg = "\x1b]0;pwned\x07 \u202eevil \x9b2J"
        raise ValueError(msg)

    workflow = Workflow(
        [
            Step("ok\x1b[2J\nname", lambda ctx: 1),
            Step("bad\rname", fails, depends_on=("ok\x1b[2J\nname",)),
        ]
    )
    with pytest.raises(WorkflowFailed):
        await workflow.run(on_event=ConsoleProgress(stream))
    lines = stream.getvalue().splitlines()
    assert all(line.isprintable() for line in lines), lines
    assert lines[1].startswith('executionkit: "ok\\u001b[2J\\nname" finished in ')
    assert lines[2].startswith('executionkit: "bad\\rname" failed after ')
    assert "ValueError: \\x1b]0;pwned\\x07 \\u202eevil \\x9b2J" in lines[2]


def test_a_wait_for_a_limit_gets_a_line_with_how_long() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    reporter = ConsoleProgress(stream, clock=clock)
    for event in (
        ev.RunStarted(RUN, 2, (), resumed=False, cost=TokenUsage()),
        ev.StepStarted(RUN, "a", 1),
        ev.WaitingForLimit(RUN, "b", "openai", float("inf")),
        ev.WaitingForLimit(RUN, "m", "openai", 1.5, item="7"),
    ):
        clock.now += 1.0
        reporter(event)
    assert stream.getvalue().splitlines()[1:] == [
        "executionkit: b waiting for limit openai; 0/2 done, 1 running (a), 2.0s",
        "executionkit: m item 7 waiting for limit openai, 1.5s; 0/2 done, 1 running (a), 3.0s",
    ]


def test_a_real_run_says_which_step_waits_for_its_limit() -> None:
    from executionkit import Limit  # noqa: PLC0415 - only this test needs it

    stream = io.StringIO()
    release = asyncio.Event()

    async def first(ctx: Any) -> str:
        await release.wait()
        return "a"

    async def second(ctx: Any) -> str:
        return "b"

    def on_event(event: ev.Event) -> None:
        reporter(event)
        if isinstance(event, ev.WaitingForLimit):
            release.set()  # the second waits: let the first end

    reporter = ConsoleProgress(stream)
    workflow = Workflow([Step("a", first, limit="solo"), Step("b", second, limit="solo")])
    asyncio.run(workflow.run(limits=[Limit("solo", concurrency=1)], on_event=on_event))
    assert any(
        line.startswith("executionkit: b waiting for limit solo;")
        for line in stream.getvalue().splitlines()
    )


def test_with_prices_the_status_shows_the_bill_in_dollars() -> None:
    from executionkit import Price, Prices  # noqa: PLC0415 - only this test needs them

    stream = io.StringIO()
    clock = FakeClock()
    reporter = ConsoleProgress(stream, clock=clock)

    def model(ctx: Any) -> PatternResult[str]:
        from executionkit import current_step  # noqa: PLC0415

        current_step().add_usage(TokenUsage(1_000_000, 100_000, 1), model="large")
        return PatternResult("ok")

    prices = Prices({"large": Price(input_per_million="2.50", output_per_million="10.00")})
    Workflow([Step("a", model), Step("b", model, depends_on=("a",))]).run_sync(
        on_event=ticking(reporter, clock, 1.0), prices=prices, checkpoint_fn=lambda cp: None
    )
    lines = stream.getvalue().splitlines()
    # $3.50 a call, shown from the checkpoint after each, and in the last line.
    assert lines[-1].endswith("2,200,000 tokens in 2 calls, $7.0000")
    assert any(line.endswith("1,100,000 tokens in 1 call, $3.5000") for line in lines)
