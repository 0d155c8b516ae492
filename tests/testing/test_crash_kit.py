"""`crash_test`: it passes on sound workflows, and finds the bugs planted in storage."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from executionkit import (
    PatternResult,
    Step,
    StepContext,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    current_step,
)
from executionkit.testing import VirtualClock, crash_test

CALLS: Counter[str] = Counter()


def fetch(ctx: Any) -> PatternResult[str]:
    CALLS["fetch"] += 1
    return PatternResult(f"text of {ctx['url']}", cost=TokenUsage(100, 10, 1))


async def summarize(item: str, ctx: Any) -> PatternResult[str]:
    await asyncio.sleep(0.001)
    current_step().add_usage(TokenUsage(50, 5, 1), model="small")
    return PatternResult(item.upper())


def long(ctx: Any) -> int:
    step = current_step()
    done = step.progress or 0
    while done < 3:
        done += 1
        step.save_progress(done)
    return done


def every_kind() -> Workflow:
    """A step paid for, a map, progress saves, a sub-workflow's question, a timer, a deadline."""
    review = Workflow(
        [
            Step.ask("approve", lambda ctx: "ok?"),
            Step("note", lambda ctx: f"noted {ctx['approve']}", depends_on=("approve",)),
        ]
    )
    return Workflow(
        [
            Step("fetch", fetch),
            Step("parts", lambda ctx: ctx["fetch"].split(), depends_on=("fetch",)),
            Step.map("sums", summarize, over="parts"),
            Step("long", long),
            Step("skipped", lambda ctx: "never", when=lambda ctx: False),
            Step("review", review, depends_on=("sums",)),
            Step.wait("later", seconds=86400, depends_on=("review",)),
            Step.ask(
                "final",
                lambda ctx: "go?",
                depends_on=("later",),
                expires_after=3600,
                default="auto",
            ),
            Step(
                "end",
                lambda ctx: [ctx["sums"], ctx["final"], ctx["review"]],
                depends_on=("final", "long"),
            ),
        ],
        inputs=("url",),
    )


INPUTS = {"url": "a b c"}
ANSWERS = {"review/approve": "yes"}


@pytest.mark.parametrize(
    "options",
    [{}, {"checkpoint_every": "step"}, {"schedule": "eager"}, {"max_concurrency": 1}],
    ids=["batch", "every-step", "eager", "one-at-a-time"],
)
def test_a_sound_workflow_passes_at_every_crash_point(options: dict[str, Any]) -> None:
    report = crash_test(every_kind(), INPUTS, answers=ANSWERS, **options)
    assert report.tried >= 10
    sums = ["TEXT", "OF", "A", "B", "C"]
    assert report.outputs["end"] == [sums, "auto", {"approve": "yes", "note": "noted yes"}]
    first = report.points[0]
    assert first.index == 1
    assert [point.index for point in report.points] == list(range(1, report.tried + 1))
    assert [point.seq for point in report.points] == sorted(point.seq for point in report.points)
    assert "end" in report.points[-1].recorded
    assert "crash points, each resumed to the end" in str(report)


def test_what_ran_again_is_what_was_in_flight_with_its_idempotency_keys() -> None:
    report = crash_test(every_kind(), INPUTS, answers=ANSWERS)
    again = {label for point in report.points for label in point.reran}
    assert "long" in again  # in flight while it saved its progress
    for point in report.points:
        assert len(point.idempotency_keys) == len(point.reran)
    point = next(point for point in report.points if "long" in point.reran)
    run_id = "the run"  # the key depends on the run id and the step only
    del run_id
    assert all(len(key) == 32 for key in point.idempotency_keys)


def test_the_report_names_the_clean_outputs_even_inside_a_clock_of_the_test() -> None:
    with VirtualClock() as clock:
        report = crash_test(every_kind(), INPUTS, answers=ANSWERS)
        assert clock.passed.days >= 1  # the kit used the test's clock: a day's timer passed on it
    assert report.outputs["final"] == "auto"


def test_a_store_that_drops_an_output_is_caught() -> None:
    """Planted: storage loses a step's output once its dependants ran (never saved, in effect)."""

    def lossy(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
        data = checkpoint.to_dict()
        if "parts" in data["outputs"]:
            data["outputs"].pop("fetch", None)
            data["step_info"].pop("fetch", None)
            data["step_index"] -= 1
        return WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))

    with pytest.raises(AssertionError) as caught:
        crash_test(every_kind(), INPUTS, answers=ANSWERS, roundtrip=lossy)
    text = str(caught.value)
    assert "broken promise(s)" in text
    assert "crash point 3 (right after seq 3): fetch started again although the checkpoint" in text


def test_a_store_that_drops_the_ledger_is_caught() -> None:
    """Planted: a checkpoint function that drops a field (the cost ledger)."""

    def forgetful(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
        data = checkpoint.to_dict()
        data["ledger"] = []
        return WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))

    with pytest.raises(AssertionError, match=r"the ledger lacks an attempt of step 'fetch'"):
        crash_test(every_kind(), INPUTS, answers=ANSWERS, roundtrip=forgetful)


def test_a_store_that_drops_what_was_in_flight_is_caught() -> None:
    def no_flight(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
        data = checkpoint.to_dict()
        data["in_flight"] = []
        return WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))

    with pytest.raises(AssertionError, match=r"attempt\(s\) were in flight at the crash"):
        crash_test(every_kind(), INPUTS, answers=ANSWERS, roundtrip=no_flight)


def test_a_store_that_cannot_give_a_checkpoint_back_is_named() -> None:
    def broken(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
        data = checkpoint.to_dict()
        data.pop("ledger")
        return WorkflowCheckpoint.from_dict(data)

    with pytest.raises(
        AssertionError, match=r"storage could not give the checkpoint back.*ledger"
    ):
        crash_test(every_kind(), INPUTS, answers=ANSWERS, roundtrip=broken)


def test_a_store_that_drops_the_recorded_items_is_caught() -> None:
    def no_items(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
        data = checkpoint.to_dict()
        for entry in data["items"].values():
            entry["outputs"].pop("0", None)  # the first item recorded, lost
        return WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))

    flow = Workflow(
        [
            Step("parts", lambda ctx: ["a", "b", "c", "d"]),
            Step.map("sums", summarize, over="parts", max_concurrency=1),
        ]
    )
    with pytest.raises(AssertionError, match=r"sums\[0\] started again although"):
        crash_test(flow, roundtrip=no_items, checkpoint_every="step")


def test_a_step_that_is_not_deterministic_is_named() -> None:
    draws = iter(range(1000))
    flow = Workflow(
        [
            Step("first", lambda ctx: 1),
            Step("draw", lambda ctx: next(draws), depends_on=("first",)),
        ]
    )
    with pytest.raises(AssertionError, match=r"step 'draw' ended with \d+, the clean run with 0"):
        crash_test(flow)


def test_a_question_without_answer_or_deadline_is_a_clear_failure() -> None:
    flow = Workflow([Step.ask("approve", lambda ctx: "ok?")])
    with pytest.raises(AssertionError, match=r"waits for an answer to 'approve'.*answers="):
        crash_test(flow)


def test_options_the_kit_sets_itself_are_refused() -> None:
    with pytest.raises(TypeError, match="crash_test sets checkpoint_fn itself"):
        crash_test(every_kind(), INPUTS, checkpoint_fn=print)


def test_a_failing_workflow_is_reported_before_any_crash() -> None:
    def broken(ctx: Any) -> None:
        msg = "no model today"
        raise RuntimeError(msg)

    with pytest.raises(AssertionError, match=r"the uninterrupted run failed.*no model today"):
        crash_test(Workflow([Step("broken", broken)]))


def test_idempotency_keys_are_those_the_step_saw() -> None:
    seen: list[str] = []

    def pay(ctx: Any) -> str:
        seen.append(current_step().idempotency_key)
        return "paid"

    report = crash_test(Workflow([Step("pay", pay), Step("after", lambda ctx: 1)]))
    assert set(seen) == {seen[0]}  # every call of the step, crashed or not, got one key
    expected = StepContext(None, "pay", "x", 1, 1).idempotency_key  # type: ignore[arg-type]
    assert len(expected) == len(seen[0])
    assert report.tried >= 1
