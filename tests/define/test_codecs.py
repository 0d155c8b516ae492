"""``Step(encode=..., decode=...)``: custom output types in and out of checkpoints.

Within a run, ``ctx`` and the result hold what the step returned; checkpoints
hold what ``encode`` made of it; a resumed run gets ``decode`` of the recorded
form back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointMismatchError,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
    current_step,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

MAKE = TokenUsage(3, 30, 1)
DESCRIBE = TokenUsage(5, 50, 1)


@dataclass(frozen=True)
class Point:
    x: int
    y: int


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


@dataclass
class Points:
    """make -> (describe, total); make returns a Point, encoded as a dict."""

    calls: Counter[str] = field(default_factory=Counter)
    seen: list[Any] = field(default_factory=list)
    made: list[Point] = field(default_factory=list)
    fail_decode: bool = False

    def encode(self, point: Point) -> dict[str, Any]:
        self.calls["encode"] += 1
        return dataclasses.asdict(point)

    def decode(self, data: dict[str, Any]) -> Point:
        self.calls["decode"] += 1
        if self.fail_decode:
            msg = f"no point in {data!r}"
            raise ValueError(msg)
        return Point(**data)

    def workflow(self) -> Workflow:
        def make(ctx: Mapping[str, Any]) -> PatternResult[Point]:
            self.calls["make"] += 1
            point = Point(1, 2)
            self.made.append(point)
            return PatternResult(point, cost=MAKE)

        async def describe(ctx: Mapping[str, Any]) -> PatternResult[str]:
            self.calls["describe"] += 1
            self.seen.append(ctx["make"])
            return PatternResult(f"described {ctx['make']!r}", cost=DESCRIBE)

        def total(ctx: Mapping[str, Any]) -> int:
            self.calls["total"] += 1
            point = ctx["make"]
            return int(point.x + point.y)

        return Workflow(
            [
                Step("make", make, encode=self.encode, decode=self.decode),
                Step("describe", describe, ("make",)),
                Step("total", total, ("make",)),
            ]
        )


async def test_within_the_run_ctx_and_result_keep_the_object() -> None:
    points = Points()
    saved: list[WorkflowCheckpoint] = []
    result = await points.workflow().run(checkpoint_fn=saved.append, validate_json=True)
    [made] = points.made
    assert points.seen == [made]
    assert points.seen[0] is made
    assert result.outputs["make"] is made
    assert result.outputs["describe"] == "described Point(x=1, y=2)"
    assert result.outputs["total"] == 3
    # Encoded once, when recorded, not once per checkpoint; never decoded in a fresh run.
    assert points.calls == Counter(make=1, describe=1, total=1, encode=1)
    assert [cp.to_dict()["outputs"] for cp in saved] == [
        {"make": {"x": 1, "y": 2}},
        {"make": {"x": 1, "y": 2}, "describe": "described Point(x=1, y=2)", "total": 3},
    ]
    assert all(type(cp.outputs["make"]) is dict for cp in saved)
    # The value of a PatternResult is encoded; its cost is counted all the same.
    assert saved[-1].cost == MAKE + DESCRIBE
    assert result.cost == MAKE + DESCRIBE


async def test_resume_decodes_the_recorded_form_for_the_steps_that_run() -> None:
    saved: list[WorkflowCheckpoint] = []
    await Points().workflow().run(checkpoint_fn=saved.append)
    points = Points()
    later: list[WorkflowCheckpoint] = []
    result = await points.workflow().run(
        resume_from=round_trip(saved[0]), checkpoint_fn=later.append
    )
    assert points.calls == Counter(decode=1, describe=1, total=1)
    assert points.seen == [Point(1, 2)]
    assert isinstance(points.seen[0], Point)
    assert result.outputs["make"] == Point(1, 2)
    assert isinstance(result.outputs["make"], Point)
    assert result.outputs["describe"] == "described Point(x=1, y=2)"
    assert result.outputs["total"] == 3
    assert result.restored == ("make",)
    # The resumed run's checkpoints still hold the recorded (encoded) form.
    assert later[-1].to_dict()["outputs"]["make"] == {"x": 1, "y": 2}
    assert result.cost == MAKE + DESCRIBE


async def test_rerun_of_a_dependent_sees_the_decoded_object() -> None:
    saved: list[WorkflowCheckpoint] = []
    await Points().workflow().run(checkpoint_fn=saved.append)
    points = Points()
    result = await points.workflow().run(resume_from=round_trip(saved[-1]), rerun=["describe"])
    assert points.calls == Counter(decode=1, describe=1)
    assert points.seen == [Point(1, 2)]
    assert isinstance(points.seen[0], Point)
    assert result.restored == ("make", "total")
    assert dict(result.invalidated) == {"describe": "rerun requested"}
    assert dict(result.outputs) == {
        "make": Point(1, 2),
        "describe": "described Point(x=1, y=2)",
        "total": 3,
    }
    assert result.cost == MAKE + DESCRIBE + DESCRIBE


async def test_restored_outputs_are_decoded_in_the_result() -> None:
    saved: list[WorkflowCheckpoint] = []
    await Points().workflow().run(checkpoint_fn=saved.append)
    points = Points()
    result = await points.workflow().run(resume_from=round_trip(saved[-1]))
    assert points.calls == Counter(decode=1)
    assert type(result.outputs["make"]) is Point
    assert result.outputs["make"] == Point(1, 2)
    assert result.executed == ()


async def test_datetimes_via_isoformat() -> None:
    when = datetime(2024, 5, 17, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    seen: list[Any] = []

    def after(ctx: Mapping[str, Any]) -> str:
        seen.append(ctx["when"])
        return f"{ctx['when'].astimezone(UTC):%H:%M}"

    def workflow() -> Workflow:
        return Workflow(
            [
                Step(
                    "when",
                    lambda ctx: when,
                    encode=datetime.isoformat,
                    decode=datetime.fromisoformat,
                ),
                Step("after", after, ("when",)),
            ]
        )

    saved: list[WorkflowCheckpoint] = []
    result = await workflow().run(checkpoint_fn=saved.append, validate_json=True)
    assert saved[0].outputs["when"] == "2024-05-17T12:30:15.123456+02:00"
    assert result.outputs["when"] is when
    assert result.outputs["after"] == "10:30"
    resumed = await workflow().run(resume_from=round_trip(saved[0]))
    assert seen[-1] == when
    assert seen[-1].utcoffset() == timedelta(hours=2)
    assert resumed.outputs["when"] == when
    assert resumed.outputs["after"] == "10:30"


async def test_mid_batch_progress_checkpoints_hold_the_encoded_form() -> None:
    """An output landed while a sibling is still running is checkpointed encoded."""
    encoded = asyncio.Event()

    def encode(point: Point) -> dict[str, Any]:
        encoded.set()
        return dataclasses.asdict(point)

    async def slow(ctx: Mapping[str, Any]) -> str:
        await encoded.wait()
        await current_step().save_progress({"half": True})
        return "done"

    workflow = Workflow(
        [
            Step("make", lambda ctx: Point(3, 4), encode=encode, decode=lambda d: Point(**d)),
            Step("slow", slow),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    await workflow.run(checkpoint_fn=saved.append, validate_json=True)
    middle = saved[0].to_dict()
    assert middle["outputs"] == {"make": {"x": 3, "y": 4}}
    assert middle["progress"] == {"slow": {"half": True}}
    assert saved[-1].to_dict()["outputs"] == {"make": {"x": 3, "y": 4}, "slow": "done"}


# --- failures -----------------------------------------------------------------------------


async def test_encode_raising_fails_the_step_with_a_note() -> None:
    calls: Counter[str] = Counter()

    def encode(point: Point) -> Any:
        msg = "cannot encode"
        raise ValueError(msg)

    def dependent(ctx: Mapping[str, Any]) -> str:
        calls["dependent"] += 1
        return "never"

    workflow = Workflow(
        [
            Step("other", lambda ctx: PatternResult("o", cost=DESCRIBE)),
            Step(
                "make",
                lambda ctx: PatternResult(Point(1, 2), cost=MAKE),
                encode=encode,
                decode=lambda d: Point(**d),
            ),
            Step("dependent", dependent, ("make",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(checkpoint_fn=saved.append)
    error = caught.value.errors["make"]
    assert list(caught.value.errors) == ["make"]
    assert type(error) is ValueError
    assert str(error) == "cannot encode"
    assert error.__notes__ == ["executionkit: encode of step 'make' failed"]
    assert calls == Counter()
    checkpoint = caught.value.checkpoint
    assert checkpoint is saved[-1]
    assert dict(checkpoint.outputs) == {"other": "o"}
    assert dict(checkpoint.errors) == {"make": "ValueError: cannot encode"}
    assert checkpoint.cost == DESCRIBE + MAKE


DECODE_FAILED = (
    "step 'make': decode failed on the recorded output "
    "(ValueError: no point in {'x': 1, 'y': 2}); fix decode, or pass rerun=['make']"
)


@pytest.mark.parametrize("rerun", [None, ["describe"], ["total", "describe"]])
async def test_decode_raising_on_resume_fails_before_any_step(rerun: list[str] | None) -> None:
    saved: list[WorkflowCheckpoint] = []
    await Points().workflow().run(checkpoint_fn=saved.append)
    points = Points(fail_decode=True)
    later: list[WorkflowCheckpoint] = []
    with pytest.raises(CheckpointMismatchError, match=f"^{re.escape(DECODE_FAILED)}$") as caught:
        await points.workflow().run(
            resume_from=round_trip(saved[-1]), rerun=rerun, checkpoint_fn=later.append
        )
    assert type(caught.value.__cause__) is ValueError
    assert points.calls == Counter(decode=1)
    assert later == []


async def test_rerun_of_the_step_skips_its_decode() -> None:
    saved: list[WorkflowCheckpoint] = []
    await Points().workflow().run(checkpoint_fn=saved.append)
    points = Points(fail_decode=True)
    result = await points.workflow().run(resume_from=round_trip(saved[-1]), rerun=["make"])
    assert points.calls == Counter(make=1, encode=1, describe=1, total=1)
    assert dict(result.invalidated) == {
        "make": "rerun requested",
        "describe": "depends on invalidated step 'make'",
        "total": "depends on invalidated step 'make'",
    }
    assert points.seen == points.made
    assert result.outputs["make"] is points.made[0]
    assert result.cost == MAKE + DESCRIBE + MAKE + DESCRIBE


async def test_decode_is_not_attempted_for_a_version_bumped_step() -> None:
    saved: list[WorkflowCheckpoint] = []
    await Points().workflow().run(checkpoint_fn=saved.append)
    points = Points(fail_decode=True)
    steps = list(points.workflow().steps)
    steps[0] = dataclasses.replace(steps[0], version="2")
    result = await Workflow(steps).run(resume_from=round_trip(saved[-1]))
    assert points.calls == Counter(make=1, encode=1, describe=1, total=1)
    assert result.invalidated["make"] == "version changed from no version to '2'"


# --- step validation ----------------------------------------------------------------------


def _point_from(data: Any) -> Point:
    return Point(**data)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param(
            {"encode": dataclasses.asdict},
            "step 'p': encode needs a matching decode, so that recorded outputs can be "
            "turned back into what the step returned",
            id="encode-without-decode",
        ),
        pytest.param(
            {"decode": _point_from},
            "step 'p': decode needs a matching encode, so that recorded outputs can be "
            "turned back into what the step returned",
            id="decode-without-encode",
        ),
        pytest.param(
            {"encode": 3, "decode": _point_from},
            "step 'p': encode must be callable or None, got 3",
            id="non-callable-encode",
        ),
        pytest.param(
            {"encode": 3},
            "step 'p': encode must be callable or None, got 3",
            id="non-callable-encode-alone",
        ),
        pytest.param(
            {"encode": dataclasses.asdict, "decode": "Point"},
            "step 'p': decode must be callable or None, got 'Point'",
            id="non-callable-decode",
        ),
        pytest.param(
            {"version": ""},
            "step 'p': version must be a non-empty str or None, got ''",
            id="empty-version",
        ),
        pytest.param(
            {"version": 3},
            "step 'p': version must be a non-empty str or None, got 3",
            id="int-version",
        ),
        pytest.param(
            {"version": b"1"},
            "step 'p': version must be a non-empty str or None, got b'1'",
            id="bytes-version",
        ),
    ],
)
def test_bad_resume_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=f"^{re.escape(message)}$"):
        Step("p", lambda ctx: None, **settings)


def test_good_resume_settings_are_kept_and_shown() -> None:
    step = Step("p", lambda ctx: None, version="2", encode=dataclasses.asdict, decode=_point_from)
    assert step.version == "2"
    assert step.encode is dataclasses.asdict
    assert step.decode is _point_from
    assert "version='2'" in repr(step)
    assert "decode=<function _point_from" in repr(step)
    assert "version" not in repr(Step("q", lambda ctx: None))
