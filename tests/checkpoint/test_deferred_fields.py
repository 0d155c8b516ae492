"""Checkpoints taken by a run compute most of their fields on first read.

Nothing about that may be observable: a field read late (after the run went on)
holds what it held when the checkpoint was taken, reads are stable, and the
class, the constructor and `from_dict` behave exactly as a plain dataclass.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, TokenUsage, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit._checkpoint._value import FORMAT_VERSION

if TYPE_CHECKING:
    from collections.abc import Mapping

DEFERRED = (
    "outputs",
    "version",
    "run_id",
    "context_keys",
    "errors",
    "created_at",
    "metadata",
    "progress",
    "step_info",
    "new_outputs",
)
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00")


def chain(n: int) -> Workflow:
    """s0 -> s1 -> ... ; each step returns its index and the value it read."""

    def make(i: int) -> Any:
        async def step(ctx: Mapping[str, Any]) -> dict[str, Any]:
            return {"i": i, "before": ctx[f"s{i - 1}"]["i"] if i else None}

        return step

    return Workflow(
        Step(f"s{i}", make(i), depends_on=(f"s{i - 1}",) if i else (), version=f"v{i}")
        for i in range(n)
    )


async def taken(n: int) -> list[WorkflowCheckpoint]:
    """Run a chain of ``n`` steps and keep its checkpoints, none of them read meanwhile."""
    saved: list[WorkflowCheckpoint] = []
    await chain(n).run(checkpoint_fn=saved.append)
    return saved


async def test_fields_read_after_the_run_show_the_moment_they_were_taken() -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    saved = await taken(5)
    after = datetime.now(UTC) + timedelta(seconds=1)
    assert [cp.step_index for cp in saved] == [1, 2, 3, 4, 5]
    for k, cp in enumerate(saved, start=1):
        names = [f"s{i}" for i in range(k)]
        assert list(cp.outputs) == names
        assert dict(cp.outputs) == {
            f"s{i}": {"i": i, "before": i - 1 if i else None} for i in range(k)
        }
        assert len(cp.outputs) == k
        assert f"s{k}" not in cp.outputs
        with pytest.raises(KeyError):
            cp.outputs[f"s{k}"]
        assert dict(cp.step_info) == {
            f"s{i}": {
                "version": f"v{i}",
                "depends_on": (f"s{i - 1}",) if i else (),
                "code": cp.step_info[f"s{i}"]["code"],  # the fingerprint of its function
            }
            for i in range(k)
        }
        assert cp.new_outputs == (f"s{k - 1}",)
        assert cp.created_at is not None
        assert TIMESTAMP.fullmatch(cp.created_at), cp.created_at
        assert before <= datetime.fromisoformat(cp.created_at) <= after
    stamps = [cp.created_at for cp in saved]
    assert stamps == sorted(stamps)  # type: ignore[type-var]


async def test_reads_are_stable_and_return_the_same_object() -> None:
    cp = (await taken(3))[1]
    for name in DEFERRED:
        assert getattr(cp, name) is getattr(cp, name)


async def test_a_deferred_checkpoint_equals_its_round_trip_and_an_eager_copy() -> None:
    for cp in await taken(4):
        again = WorkflowCheckpoint.from_dict(cp.to_dict())
        assert again == cp
        assert cp == again
        eager = WorkflowCheckpoint(**{f.name: getattr(cp, f.name) for f in dataclasses.fields(cp)})
        assert eager == cp
        assert eager.new_outputs == cp.new_outputs


async def test_two_unread_checkpoints_of_different_lengths_differ() -> None:
    first, second = (await taken(2))[:2]
    assert first != second
    assert first.outputs != second.outputs


async def test_copy_and_replace_see_every_field() -> None:
    cp = (await taken(3))[1]
    clone = copy.copy(cp)
    assert clone == cp
    assert clone.new_outputs == ("s1",)
    unread = (await taken(3))[1]
    changed = dataclasses.replace(unread, seq=99)  # through the validating constructor
    assert changed.seq == 99
    assert dict(changed.outputs) == dict(cp.outputs)
    assert changed.created_at == unread.created_at
    assert changed.new_outputs == ("s1",)


def test_the_class_and_the_constructor_behave_as_a_plain_dataclass() -> None:
    assert WorkflowCheckpoint.new_outputs == ()
    assert WorkflowCheckpoint.created_at is None
    assert WorkflowCheckpoint.version == FORMAT_VERSION
    assert WorkflowCheckpoint.run_id is None
    assert WorkflowCheckpoint.context_keys == ()
    for no_class_attribute in ("outputs", "errors", "metadata", "progress", "step_info"):
        assert not hasattr(WorkflowCheckpoint, no_class_attribute)
    defaults = {f.name: f for f in dataclasses.fields(WorkflowCheckpoint)}
    assert defaults["created_at"].default is None
    assert defaults["new_outputs"].default == ()
    cp = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage())
    assert cp.created_at is None
    assert cp.new_outputs == ()
    assert dict(cp.step_info) == {}
    assert set(DEFERRED) <= set(vars(cp))


async def test_a_failed_run_hands_over_a_deferred_checkpoint_that_reads_correctly() -> None:
    async def ok(ctx: Mapping[str, Any]) -> int:
        del ctx
        return 1

    async def boom(ctx: Mapping[str, Any]) -> int:
        del ctx
        msg = "no"
        raise RuntimeError(msg)

    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("a", ok), Step("b", boom, depends_on=("a",))])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(checkpoint_fn=saved.append)
    last = caught.value.checkpoint
    assert last is saved[-1]
    assert dict(last.outputs) == {"a": 1}
    assert last.new_outputs == ()
    assert dict(last.errors) == {"b": "RuntimeError: no"}
    assert saved[0].new_outputs == ("a",)


async def test_run_constant_fields_read_from_every_checkpoint_of_a_run() -> None:
    saved: list[WorkflowCheckpoint] = []
    await chain(3).run(
        {"topic": "x"}, checkpoint_fn=saved.append, run_id="run-7", metadata={"who": "me"}
    )
    for cp in saved:
        assert cp.version == FORMAT_VERSION
        assert cp.run_id == "run-7"
        assert cp.context_keys == ("topic",)
        assert dict(cp.metadata) == {"who": "me"}
        assert dict(cp.errors) == {}
        assert dict(cp.progress) == {}
    assert [cp.seq for cp in saved] == [1, 2, 3]
