"""The console progress reporter and map steps: item counts, failed items, no flooding.

A fake clock moves on by a fixed amount before each event, so elapsed times and
durations are exact. Items run one at a time (``max_concurrency=1``), so the order
of their events is fixed too.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit import events as ev
from executionkit.progress import ConsoleProgress

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


def chunks_workflow(broken: set[str]) -> Workflow:
    """split -> summaries (a map over its chunks) -> join; items named in ``broken`` fail."""

    def summarise(chunk: str, ctx: Mapping[str, Any]) -> PatternResult[str]:
        if chunk in broken:
            msg = f"model overloaded on {chunk}"
            raise RuntimeError(msg)
        return PatternResult(chunk.upper(), cost=TokenUsage(100, 10, 1))

    return Workflow(
        [
            Step("split", lambda ctx: ["a", "b", "c", "d"]),
            Step.map("summaries", summarise, over="split", max_concurrency=1),
            Step("join", lambda ctx: " ".join(ctx["summaries"]), depends_on=("summaries",)),
        ]
    )


async def run_failing(stream: io.StringIO, clock: FakeClock) -> WorkflowCheckpoint:
    reporter = ConsoleProgress(stream, clock=clock)
    with pytest.raises(WorkflowFailed) as caught:
        await chunks_workflow({"c"}).run(
            run_id=RUN,
            checkpoint_fn=lambda cp: None,
            on_event=ticking(reporter, clock, 1.0),
            on_error="continue",
        )
    return caught.value.checkpoint


FAILED_RUN_LINES = [
    "executionkit: run r1 started: 3 steps",
    "executionkit: split finished in 1.0s; 1/3 done, 2.0s",
    "executionkit: summaries: 4 items",
    (
        "executionkit: 1/3 done, 1 running (summaries), summaries: 1/4 items, 8.0s, "
        "110 tokens in 1 call"
    ),
    (
        "executionkit: 1/3 done, 1 running (summaries), summaries: 2/4 items, 11s, "
        "220 tokens in 2 calls"
    ),
    (
        "executionkit: summaries item 2 failed after 1.0s: RuntimeError: model overloaded on c; "
        "1/3 done, 1 running (summaries), summaries: 2/4 items (1 failed), 14s, "
        "220 tokens in 2 calls"
    ),
    (
        "executionkit: 1/3 done, 1 running (summaries), summaries: 3/4 items (1 failed), 17s, "
        "330 tokens in 3 calls"
    ),
    (
        "executionkit: summaries failed after 15s: ExceptionGroup: map step 'summaries': 1 of 4 "
        "items failed ('2'); the others that completed are recorded, and a resume runs only the "
        "r...; 1/3 done, 1 failed, 19s, 330 tokens in 3 calls"
    ),
    "executionkit: run r1 failed: WorkflowFailed; 1/3 done, 1 failed, 21s, 330 tokens in 3 calls",
]


async def test_plain_lines_count_items_and_name_the_failed_one() -> None:
    stream = io.StringIO()
    await run_failing(stream, FakeClock())
    assert stream.getvalue().splitlines() == FAILED_RUN_LINES


async def test_a_resumed_map_counts_its_recorded_items_and_their_tokens() -> None:
    """Three items were recorded before; the status starts from them and their usage."""
    clock = FakeClock()
    checkpoint = await run_failing(io.StringIO(), clock)
    assert sorted(checkpoint.items["summaries"]["outputs"]) == ["0", "1", "3"]
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=clock)
    result = await chunks_workflow(set()).run(
        resume_from=checkpoint, on_event=ticking(reporter, clock, 2.0)
    )
    assert result.outputs["join"] == "A B C D"
    assert stream.getvalue().splitlines() == [
        "executionkit: run r1 resumed: 1/3 steps recorded",
        "executionkit: summaries: 4 items, 3 recorded before",
        (
            "executionkit: summaries finished in 8.0s (4 items); 2/3 done, 12s, "
            "440 tokens in 4 calls"
        ),
        "executionkit: join finished in 2.0s; 3/3 done, 16s, 440 tokens in 4 calls",
        "executionkit: run r1 finished; 3/3 done, 18s, 440 tokens in 4 calls",
    ]


def feed_map(reporter: ConsoleProgress, items: int, *, clock: FakeClock | None = None) -> None:
    """The events of a map of ``items`` items that all finish, each costing one call."""
    reporter(ev.RunStarted(RUN, 2, (), resumed=False))
    reporter(ev.StepStarted(RUN, "summaries", 1))
    reporter(ev.MapStarted(RUN, "summaries", items, 0))
    for number in range(items):
        if clock is not None:
            clock.now += 1 / 32  # exact in binary, so the count of redraws is too
        reporter(ev.ItemStarted(RUN, "summaries", str(number), 1))
        reporter(
            ev.ItemFinished(RUN, "summaries", str(number), 0.0, TokenUsage(1, 1, 1), number + 1)
        )
        reporter(ev.CheckpointTaken(RUN, number + 1, 0, ()))
    reporter(ev.StepFinished(RUN, "summaries", 1.0, TokenUsage()))


def test_ten_thousand_items_give_a_line_per_tenth_in_plain_mode() -> None:
    stream = io.StringIO()
    feed_map(ConsoleProgress(stream, clock=FakeClock()), 10_000)
    lines = stream.getvalue().splitlines()
    assert lines[:2] == [
        "executionkit: run r1 started: 2 steps",
        "executionkit: summaries: 10,000 items",
    ]
    assert lines[2:11] == [
        f"executionkit: 0/2 done, 1 running (summaries), summaries: {tenth:,}/10,000 items, "
        f"0.0s, {2 * tenth:,} tokens in {tenth:,} calls"
        for tenth in range(1000, 10_000, 1000)
    ]
    assert lines[11:] == [
        (
            "executionkit: summaries finished in 0.0s (10,000 items); 1/2 done, 0.0s, "
            "20,000 tokens in 10,000 calls"
        )
    ]


def test_a_slow_map_gives_its_count_every_half_minute_in_plain_mode() -> None:
    """Between tenths, the count is written once 30 seconds have passed since the last."""
    stream = io.StringIO()
    clock = FakeClock()
    reporter = ConsoleProgress(stream, clock=clock)
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.MapStarted(RUN, "m", 1000, 0))
    for number, seconds in enumerate([10.0, 10.0, 9.0, 2.0, 29.0, 1.0]):
        clock.now += seconds
        reporter(ev.ItemFinished(RUN, "m", str(number), seconds, TokenUsage(), number + 1))
    assert stream.getvalue().splitlines()[2:] == [
        "executionkit: 0/1 done, m: 4/1,000 items, 31s",
        "executionkit: 0/1 done, m: 6/1,000 items, 1m01s",
    ]


def test_ten_thousand_items_redraw_the_live_line_at_most_ten_times_a_second() -> None:
    """Items 1/32 s apart: a redraw for every fourth (0.125 s), none for the others.

    Without the limit, each item's start, finish and checkpoint would redraw: 30,000
    frames. With it: run started, step started, map started, 2,500 items, step finished.
    """
    stream = io.StringIO()
    clock = FakeClock()
    feed_map(ConsoleProgress(stream, live=True, clock=clock), 10_000, clock=clock)
    frames = [frame.rstrip() for frame in stream.getvalue().split("\r")]
    assert len(frames) == 3 + 2500 + 1
    assert frames[3] == (
        "executionkit 0/2 done, 1 running (summaries), summaries: 4/10,000 items, 0.1s, "
        "8 tokens in 4 calls"
    )
    assert frames[-2] == (
        "executionkit 0/2 done, 1 running (summaries), summaries: 10,000/10,000 items, 5m12s, "
        "20,000 tokens in 10,000 calls"
    )
    assert frames[-1] == "executionkit 1/2 done, 5m12s, 20,000 tokens in 10,000 calls"


def test_live_item_events_with_the_clock_standing_still_draw_once() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, live=True, clock=FakeClock())
    feed_map(reporter, 500)
    frames = stream.getvalue().split("\r")
    assert [frame.rstrip() for frame in frames] == [
        "executionkit: run r1 started: 2 steps\nexecutionkit 0/2 done, 0.0s",
        "executionkit 0/2 done, 1 running (summaries), 0.0s",
        "executionkit 0/2 done, 1 running (summaries), summaries: 0/500 items, 0.0s",
        "executionkit 1/2 done, 0.0s, 1,000 tokens in 500 calls",
    ]


def test_the_first_three_failed_items_get_a_line_and_then_one_says_more_failed() -> None:
    stream = io.StringIO()
    clock = FakeClock()
    reporter = ConsoleProgress(stream, clock=clock)
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.MapStarted(RUN, "m", 10, 0))
    for number in range(10):
        reporter(ev.ItemStarted(RUN, "m", f"k{number}", 1))
    for number in range(10):
        clock.now += 1.0
        reporter(ev.ItemFailed(RUN, "m", f"k{number}", 9.9, ValueError(f"bad {number}")))
    assert stream.getvalue().splitlines()[2:] == [
        (
            f"executionkit: m item k{number} failed after {number + 1}.0s: ValueError: bad "
            f"{number}; 0/1 done, m: 0/10 items ({number + 1} failed), {number + 1}.0s"
        )
        for number in range(3)
    ] + ["executionkit: m: more items failed; 0/1 done, m: 0/10 items (4 failed), 4.0s"]
    reporter(ev.StepFailed(RUN, "m", 10.0, ExceptionGroup("map step 'm' failed", [ValueError()])))
    assert stream.getvalue().splitlines()[-1] == (
        "executionkit: m failed after 10s: ExceptionGroup: map step 'm' failed (1 sub-exception); "
        "0/1 done, 1 failed, 10s"
    )


def test_item_failures_are_lines_of_their_own_in_live_mode() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, live=True, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.MapStarted(RUN, "m", 2, 0))
    reporter(ev.ItemFailed(RUN, "m", "0", 1.5, RuntimeError("boom")))
    reporter(ev.ItemFinished(RUN, "m", "1", 0.5, TokenUsage(), 1))
    reporter(ev.RunFailed(RUN, 2.0, RuntimeError("over"), {}))
    screen = [line.rsplit("\r", 1)[-1].rstrip() for line in stream.getvalue().split("\n")[:-1]]
    assert screen == [
        "executionkit: run r1 started: 1 step",
        "executionkit: m item 0 failed after 1.5s: RuntimeError: boom",
        "executionkit: run r1 failed: RuntimeError: over; 0/1 done, 0.0s",
    ]


def test_a_map_steps_own_usage_is_not_counted_twice() -> None:
    """Its items' usage counts as each finishes; the step's own event adds nothing more."""
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 2, (), resumed=False))
    reporter(ev.MapStarted(RUN, "m", 1, 0))
    reporter(ev.ItemFinished(RUN, "m", "0", 0.5, TokenUsage(10, 5, 1), 1))
    reporter(ev.StepFinished(RUN, "m", 0.5, TokenUsage(10, 5, 1)))
    reporter(ev.StepFinished(RUN, "plain", 0.5, TokenUsage(1, 1, 1)))
    assert stream.getvalue().splitlines()[-2:] == [
        "executionkit: m finished in 0.5s (1 item); 1/2 done, 0.0s, 15 tokens in 1 call",
        "executionkit: plain finished in 0.5s; 2/2 done, 0.0s, 17 tokens in 2 calls",
    ]


def test_item_keys_that_would_drive_a_terminal_are_escaped() -> None:
    stream = io.StringIO()
    reporter = ConsoleProgress(stream, clock=FakeClock())
    reporter(ev.RunStarted(RUN, 1, (), resumed=False))
    reporter(ev.MapStarted(RUN, "m\x1b[2J", 1, 0))
    reporter(ev.ItemStarted(RUN, "m\x1b[2J", "\x1b]0;pwned\x07\n", 1))
    reporter(ev.ItemFailed(RUN, "m\x1b[2J", "\x1b]0;pwned\x07\n", 0.0, ValueError("x\x9b")))
    lines = stream.getvalue().splitlines()
    assert all(line.isprintable() for line in lines), lines
    assert lines[-1].startswith(
        'executionkit: "m\\u001b[2J" item "\\u001b]0;pwned\\u0007\\n" failed after 0.0s: '
        "ValueError: x\\x9b; "
    )
