"""The plugin's fixtures in this process (the suite runs with ``-p no:executionkit``)."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow, WorkflowFailed

if TYPE_CHECKING:
    from executionkit.testing import Cassette, VirtualClock
    from executionkit.testing.pytest_plugin import Checkpoints

pytest_plugins = ("executionkit.testing.pytest_plugin",)


def waiting() -> Workflow:
    return Workflow(
        [
            Step("a", lambda ctx: 1),
            Step.wait("w", seconds=timedelta(days=2), depends_on=("a",)),
            Step("b", lambda ctx: ctx["a"] + 1, depends_on=("w",)),
        ]
    )


def test_the_clock_and_the_checkpoints(
    ek_checkpoints: Checkpoints, ek_clock: VirtualClock
) -> None:
    result = waiting().run_sync(checkpoint_fn=ek_checkpoints, sleep_up_to=math.inf)
    assert result.outputs["b"] == 2
    assert ek_clock.passed == timedelta(days=2)
    assert ek_checkpoints.last.outputs["b"] == 2


def test_a_cassette_with_no_recording_misses(ek_cassette: Cassette) -> None:
    calls: list[Any] = []

    def paid(ctx: Any) -> str:
        calls.append(1)
        return "paid"

    assert ek_cassette.mode == "replay"
    assert ek_cassette.path.endswith(
        "cassettes/test_plugin_fixtures/test_a_cassette_with_no_recording_misses.jsonl"
    )
    with pytest.raises(WorkflowFailed, match="CassetteMiss"):
        ek_cassette.wrap(Workflow([Step("paid", paid)])).run_sync()
    assert calls == []
