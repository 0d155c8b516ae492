"""Format 5's time fields: every bad ``attempts`` and ``waits`` entry is named."""

from __future__ import annotations

from typing import Any

import pytest

from executionkit import CheckpointFormatError, TokenUsage, WorkflowCheckpoint

DUE = "2026-12-02T11:00:00+00:00"
SINCE = "2026-12-02T10:00:00+00:00"


def _base(**changes: Any) -> dict[str, Any]:
    data = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage()).to_dict()
    data.update(changes)
    return data


GOOD = ["s", None, 1, "ok", 1_000, 2_000]


@pytest.mark.parametrize(
    ("attempts", "path", "message"),
    [
        ("no", "attempts", "a list of [step, item, attempt, outcome, started, ended]"),
        ([["s", None, 1]], "attempts[0]", "a list of 6 values"),
        ([["", None, 1, "ok", 1, 2]], "attempts[0][0]", "a step path"),
        ([["s", "", 1, "ok", 1, 2]], "attempts[0][1]", "a non-empty str or None"),
        ([["s", None, 0, "ok", 1, 2]], "attempts[0][2]", "an attempt number"),
        ([["s", None, True, "ok", 1, 2]], "attempts[0][2]", "an attempt number"),
        ([["s", None, 1, "late", 1, 2]], "attempts[0][3]", "one of 'ok', 'failed'"),
        ([["s", None, 1, "ok", -1, 2]], "attempts[0][4]", "milliseconds since the Unix epoch"),
        ([["s", None, 1, "ok", 1, 2.5]], "attempts[0][5]", "milliseconds since the Unix epoch"),
        ([["s", None, 1, "ok", 5, 4]], "attempts[0][5]", "ended (4) before it started (5)"),
    ],
)
def test_a_bad_attempts_entry_is_named(attempts: object, path: str, message: str) -> None:
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(_base(attempts=attempts))
    assert caught.value.path == path
    assert message in str(caught.value)


def test_attempts_round_trip_and_need_format_5() -> None:
    data = _base(attempts=[GOOD, ["m", "k", 2, "rate_limited", 3_000, 3_000]])
    checkpoint = WorkflowCheckpoint.from_dict(data)
    assert checkpoint.attempts[1] == ("m", "k", 2, "rate_limited", 3_000, 3_000)
    assert checkpoint.to_dict() == data
    old = {k: v for k, v in data.items() if k not in {"attempts", "waits", "in_flight_items"}}
    with pytest.raises(CheckpointFormatError, match="unexpected field 'attempts'"):
        WorkflowCheckpoint.from_dict({**old, "version": 4, "attempts": [GOOD]})
    fields: tuple[tuple[str, Any], ...] = (
        ("attempts", (tuple(GOOD),)),
        ("waits", {"w": {"due": DUE, "since": SINCE}}),
        ("in_flight_items", {"m": 1}),
    )
    for field, value in fields:
        changed: dict[str, Any] = {field: value}
        with pytest.raises(CheckpointFormatError, match="needs format version 5") as caught:
            WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage(), version=4, **changed)
        assert caught.value.path == field


def test_new_attempts_are_the_last_entries() -> None:
    entry = ("s", None, 1, "ok", 1_000, 2_000)
    other = ("t", None, 1, "failed", 2_000, 2_500)
    kept = WorkflowCheckpoint(
        step_index=0, outputs={}, cost=TokenUsage(), attempts=(entry, other), new_attempts=(other,)
    )
    assert kept.new_attempts == (other,)
    for wrong in ((entry,), (other, other, other), [other]):
        with pytest.raises(CheckpointFormatError) as caught:
            WorkflowCheckpoint(
                step_index=0,
                outputs={},
                cost=TokenUsage(),
                attempts=(entry, other),
                new_attempts=wrong,  # type: ignore[arg-type]
            )
        assert caught.value.path == "new_attempts"


@pytest.mark.parametrize(
    ("waits", "extra", "path", "message"),
    [
        ("no", {}, "waits", "a dict"),
        ({"": {"due": DUE, "since": SINCE}}, {}, "waits", "non-empty step names"),
        ({"w": "soon"}, {}, "waits.w", "a dict"),
        ({"w": {"due": DUE}}, {}, "waits.w.since", "is missing"),
        ({"w": {"due": DUE, "since": SINCE, "note": 1}}, {}, "waits.w.note", "unexpected"),
        ({"w": {"due": "tomorrow", "since": SINCE}}, {}, "waits.w.due", "UTC ISO-8601"),
        ({"w": {"due": SINCE, "since": DUE}}, {}, "waits.w.due", "is before"),
        (
            {"w": {"due": DUE, "since": SINCE}},
            {"outputs": {"w": None}, "step_index": 1},
            "waits.w",
            "a wait that is over is an output",
        ),
        (
            {"w": {"due": DUE, "since": SINCE}},
            {"skipped": {"w": "condition c returned False"}},
            "waits.w",
            "a skipped step does not wait",
        ),
    ],
)
def test_a_bad_wait_is_named(
    waits: object, extra: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(_base(waits=waits, **extra))
    assert caught.value.path == path
    assert message in str(caught.value)


def test_a_wait_round_trips() -> None:
    data = _base(waits={"cool_down": {"due": DUE, "since": SINCE}})
    checkpoint = WorkflowCheckpoint.from_dict(data)
    assert dict(checkpoint.waits["cool_down"]) == {"due": DUE, "since": SINCE}
    assert checkpoint.to_dict() == data
