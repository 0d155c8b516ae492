"""Format 5's ``attempts``: every way an attempt runs writes its entry, with its times.

Under a `VirtualClock`, time passes only when the run waits, so each entry's
start and end are exact: a step that sleeps two seconds took 2,000 ms, a
retry's backoff is the gap between two entries. Each path an attempt can take
through the runner is here: a lone async step, a plain step in a thread, an
inline one, one returning an awaitable, retries, timeouts, a 429 met on the
lean path, map items (lean and retried), sub-workflows and maps of them,
processes, a resume, and the stores that keep them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    RateLimited,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit._checkpoint._times import busy_seconds
from executionkit.events import RunStarted
from executionkit.progress import ConsoleProgress
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore
from executionkit.testing import VirtualClock

if TYPE_CHECKING:
    from pathlib import Path

START = datetime(2026, 6, 18, 9, 0, tzinfo=UTC)
T0 = int(START.timestamp() * 1000)


def run(
    workflow: Workflow, context: dict[str, Any] | None = None, **options: Any
) -> list[WorkflowCheckpoint]:
    """Run ``workflow`` under a virtual clock starting at `START`; its checkpoints."""
    kept: list[WorkflowCheckpoint] = []
    with VirtualClock(start=START), contextlib.suppress(WorkflowFailed):
        workflow.run_sync(context, checkpoint_fn=kept.append, sleep_up_to=math.inf, **options)
    return kept


def relative(checkpoint: WorkflowCheckpoint) -> list[tuple[Any, ...]]:
    """The checkpoint's entries with times in ms since `START`."""
    return [(*entry[:4], entry[4] - T0, entry[5] - T0) for entry in checkpoint.attempts]


async def sleepy(ctx: Any) -> str:
    await asyncio.sleep(2)
    return "slept"


def plain(ctx: Any) -> str:
    return "plain"


def test_a_lone_async_step_and_its_dependant_each_get_an_entry_with_their_times() -> None:
    kept = run(Workflow([Step("a", sleepy), Step("b", sleepy, depends_on=("a",))]))
    assert relative(kept[-1]) == [
        ("a", None, 1, "ok", 0, 2000),
        ("b", None, 1, "ok", 2000, 4000),
    ]
    # Each entry is written once, in the checkpoint after its attempt ended.
    assert [relative_new(c) for c in kept] == [
        [("a", None, 1, "ok", 0, 2000)],
        [("b", None, 1, "ok", 2000, 4000)],
    ]


def relative_new(checkpoint: WorkflowCheckpoint) -> list[tuple[Any, ...]]:
    return [(*entry[:4], entry[4] - T0, entry[5] - T0) for entry in checkpoint.new_attempts]


def test_plain_steps_in_threads_inline_and_returning_an_awaitable_get_entries() -> None:
    def returns_awaitable(ctx: Any) -> Any:
        return sleepy(ctx)

    kept = run(
        Workflow(
            [
                Step("thread", plain),
                Step("inline", plain, inline=True),
                Step("awaitable", returns_awaitable, inline=True, depends_on=("inline",)),
            ]
        )
    )
    entries = {entry[0]: entry for entry in relative(kept[-1])}
    assert set(entries) == {"thread", "inline", "awaitable"}
    assert all(entry[1:4] == (None, 1, "ok") for entry in entries.values())
    assert entries["awaitable"][5] - entries["awaitable"][4] == 2000
    assert entries["inline"][5] - entries["inline"][4] == 0


def test_retries_write_one_entry_per_attempt_and_the_backoff_is_the_gap() -> None:
    calls = {"n": 0}

    async def flaky(ctx: Any) -> str:
        calls["n"] += 1
        await asyncio.sleep(1)
        if calls["n"] < 3:
            msg = "overloaded"
            raise RuntimeError(msg)
        return "ok"

    kept = run(
        Workflow([Step("f", flaky, retries=2, retry_delay=5, retry_backoff=2, retry_jitter=0)])
    )
    assert relative(kept[-1]) == [
        ("f", None, 1, "failed", 0, 1000),
        ("f", None, 2, "failed", 6000, 7000),  # 5 s of backoff
        ("f", None, 3, "ok", 17000, 18000),  # then 10 s
    ]


def test_timeouts_are_entries_of_their_own_outcome_ending_at_the_timeout() -> None:
    async def slow(ctx: Any) -> str:
        await asyncio.sleep(60)
        return "never"

    kept = run(Workflow([Step("t", slow, timeout=3, retries=1, retry_delay=0)]))
    assert relative(kept[-1]) == [
        ("t", None, 1, "timeout", 0, 3000),
        ("t", None, 2, "timeout", 3000, 6000),
    ]
    assert "t" in kept[-1].errors


def test_a_429_on_the_lean_path_is_a_rate_limited_entry_then_the_next_attempt() -> None:
    calls = {"n": 0}

    async def limited(ctx: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RateLimited(retry_after=4)
        return "ok"

    kept = run(Workflow([Step("r", limited)]))
    assert relative(kept[-1]) == [
        ("r", None, 1, "rate_limited", 0, 0),
        ("r", None, 2, "ok", 4000, 4000),
    ]


def test_map_items_lean_and_retried_each_get_their_entries() -> None:
    failed: set[str] = set()

    async def item(value: int, ctx: Any) -> int:
        await asyncio.sleep(value)
        key = current_step().item_key
        assert key is not None
        if value == 2 and key not in failed:
            failed.add(key)
            msg = "once"
            raise RuntimeError(msg)
        return value

    lean = run(Workflow([Step.map("m", item, over="xs")]), context={"xs": [1, 3]})
    assert sorted(relative(lean[-1])) == [
        ("m", "0", 1, "ok", 0, 1000),
        ("m", "1", 1, "ok", 0, 3000),
    ]
    retried = run(
        Workflow([Step.map("m", item, over="xs", retries=1, retry_delay=1, retry_jitter=0)]),
        context={"xs": [2]},
    )
    assert relative(retried[-1]) == [
        ("m", "0", 1, "failed", 0, 2000),
        ("m", "0", 2, "ok", 3000, 5000),
    ]


def test_sub_workflows_and_maps_of_them_write_their_steps_under_their_paths() -> None:
    child = Workflow([Step("x", sleepy), Step("y", sleepy, depends_on=("x",))])
    kept = run(
        Workflow([Step("sub", child), Step.map("each", child, over="xs")]), context={"xs": ["p"]}
    )
    entries = sorted(relative(kept[-1]))
    assert entries == [
        ("each/0/x", None, 1, "ok", 0, 2000),
        ("each/0/y", None, 1, "ok", 2000, 4000),
        ("sub/x", None, 1, "ok", 0, 2000),
        ("sub/y", None, 1, "ok", 2000, 4000),
    ]
    # The parent writes each child entry once too.
    written = [entry for checkpoint in kept for entry in checkpoint.new_attempts]
    assert sorted(written) == sorted(kept[-1].attempts)


def process_step(ctx: Any) -> str:
    return "from another process"


def test_plain_steps_in_processes_get_entries() -> None:
    with ProcessPoolExecutor(max_workers=1) as pool:
        kept: list[WorkflowCheckpoint] = []
        Workflow([Step("p", process_step)]).run_sync(checkpoint_fn=kept.append, executor=pool)
    ((step, item, attempt, outcome, started, ended),) = kept[-1].attempts
    assert (step, item, attempt, outcome) == ("p", None, 1, "ok")
    assert 0 < started <= ended


def test_a_resume_keeps_the_entries_before_it_and_appends_its_own() -> None:
    broken = {"b": True}

    async def b(ctx: Any) -> str:
        await asyncio.sleep(1)
        if broken["b"]:
            msg = "down"
            raise RuntimeError(msg)
        return "b"

    workflow = Workflow([Step("a", sleepy), Step("b", b, depends_on=("a",))])
    first = run(workflow)
    assert [entry[:4] for entry in first[-1].attempts] == [
        ("a", None, 1, "ok"),
        ("b", None, 1, "failed"),
    ]
    broken["b"] = False
    saved = WorkflowCheckpoint.from_dict(first[-1].to_dict())
    second = run(workflow, resume_from=saved)
    assert second[-1].attempts[:2] == first[-1].attempts
    assert [entry[:4] for entry in second[-1].attempts[2:]] == [("b", None, 1, "ok")]
    assert [entry[:4] for entry in second[-1].new_attempts] == [("b", None, 1, "ok")]


@pytest.mark.parametrize("kind", ["json", "jsonl", "sqlite"])
def test_every_file_store_gives_back_the_entries_a_run_wrote(tmp_path: Path, kind: str) -> None:
    path = tmp_path / f"run.{kind}"
    store: Any = {"json": JsonFileStore, "jsonl": JsonLinesStore, "sqlite": SQLiteStore}[kind](
        path
    )
    kept: list[WorkflowCheckpoint] = []

    def both(checkpoint: WorkflowCheckpoint) -> None:
        store(checkpoint)
        kept.append(checkpoint)

    calls = {"n": 0}

    def flaky(ctx: Any) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            msg = "once"
            raise RuntimeError(msg)
        return "ok"

    workflow = Workflow(
        [Step("a", plain), Step("f", flaky, retries=1, retry_delay=0, depends_on=("a",))]
    )
    workflow.run_sync(checkpoint_fn=both)
    loaded = store.load()
    assert loaded is not None
    assert loaded.attempts == kept[-1].attempts
    assert [entry[:4] for entry in loaded.attempts] == [
        ("a", None, 1, "ok"),
        ("f", None, 1, "failed"),
        ("f", None, 2, "ok"),
    ]
    if hasattr(store, "close"):
        store.close()


def test_a_resume_says_how_long_the_attempts_before_it_ran_overlaps_once() -> None:
    """RunStarted.ran_before and ConsoleProgress's lines: busy time, not time between calls."""
    broken = {"c": True}

    async def c(ctx: Any) -> str:
        await asyncio.sleep(5)
        if broken["c"]:
            msg = "down"
            raise RuntimeError(msg)
        return "c"

    workflow = Workflow(
        [Step("a", sleepy), Step("b", sleepy), Step("c", c, depends_on=("a", "b"))]
    )
    first = run(workflow)
    assert busy_seconds(first[-1].attempts) == 7.0  # a and b at once (2 s), then c (5 s)
    broken["c"] = False
    events: list[Any] = []
    out = io.StringIO()

    def both(event: Any) -> None:
        events.append(event)
        progress(event)

    progress = ConsoleProgress(out, live=False)
    with VirtualClock(start=START) as clock:
        clock.advance(days=3)  # the resume comes days later: not counted
        workflow.run_sync(resume_from=first[-1], on_event=both)
    (started,) = [event for event in events if isinstance(event, RunStarted)]
    assert started.ran_before == 7.0
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("resumed: 2/3 steps recorded (7.0s of attempts before)")
    assert "finished (and 7.0s of attempts before the resume)" in lines[-1]
    fresh: list[Any] = []
    run(workflow, on_event=fresh.append)
    assert next(e for e in fresh if isinstance(e, RunStarted)).ran_before == 0.0


def test_busy_seconds_counts_overlaps_once_and_gaps_not_at_all() -> None:
    def entry(start: int, end: int) -> Any:
        return ("s", None, 1, "ok", start, end)

    assert busy_seconds([]) == 0.0
    assert busy_seconds([entry(0, 1000), entry(500, 1500), entry(5000, 5250)]) == 1.75
    assert busy_seconds([entry(0, 3000), entry(1000, 2000)]) == 3.0
    assert busy_seconds([entry(10, 10)]) == 0.0
