"""What ExecutionKit 0.4 code does with checkpoints keeps working.

0.4 built checkpoints from three fields, with a ``step_index`` counting completed
steps while ``outputs`` also held the initial context, and promised that the
``outputs`` of every checkpoint a run hands over is a ``types.MappingProxyType``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointFormatError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    current_step,
)
from executionkit._checkpoint._value import FORMAT_VERSION

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

TWO = MappingProxyType({"a": "alpha", "b": "beta"})
COST = TokenUsage(input_tokens=100, output_tokens=50, llm_calls=4)


def test_a_04_call_with_a_step_index_that_is_not_the_output_count_builds() -> None:
    cp = WorkflowCheckpoint(step_index=7, outputs=TWO, cost=COST)
    assert (cp.step_index, dict(cp.outputs), cp.cost) == (7, dict(TWO), COST)
    assert cp.version == 0
    assert cp.to_dict() == {
        "step_index": 7,
        "outputs": {"a": "alpha", "b": "beta"},
        "cost": {"input_tokens": 100, "output_tokens": 50, "llm_calls": 4},
    }


def test_positional_04_call_builds_too() -> None:
    cp = WorkflowCheckpoint(3, TWO, COST)
    assert (cp.version, cp.step_index) == (0, 3)


def test_a_04_checkpoint_round_trips_through_json() -> None:
    original = WorkflowCheckpoint(step_index=7, outputs=TWO, cost=COST)
    restored = WorkflowCheckpoint.from_dict(json.loads(json.dumps(original.to_dict())))
    assert restored == original
    assert restored.step_index == 7
    assert restored.version == 0


def test_a_matching_step_index_still_builds_the_current_format() -> None:
    cp = WorkflowCheckpoint(step_index=2, outputs=TWO, cost=COST)
    assert cp.version == FORMAT_VERSION == 5
    assert next(iter(cp.to_dict())) == "version"


@pytest.mark.parametrize(
    "extra",
    [
        {"version": 2},
        {"version": 1},
        {"run_id": "r"},
        {"seq": 1},
        {"context_keys": ("doc",)},
        {"errors": {"x": "ValueError: no"}},
        {"created_at": "2024-05-01T12:00:00+00:00"},
        {"metadata": {"job": 1}},
        {"progress": {"c": 1}},
        {"step_info": {"a": {"version": None, "depends_on": ()}}},
        {"new_outputs": ("a",)},
    ],
    ids=lambda extra: next(iter(extra)),
)
def test_any_field_beyond_the_04_ones_keeps_the_count_checked(extra: dict[str, Any]) -> None:
    """Only a call 0.4 could have made is read as 0.4; the rest must be consistent."""
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint(step_index=7, outputs=TWO, cost=COST, **extra)
    assert str(caught.value) == (
        "checkpoint field 'step_index' must equal the number of outputs (2), got 7"
    )
    assert caught.value.path == "step_index"


def test_other_validation_applies_to_04_calls() -> None:
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint(step_index=7, outputs={"": 1}, cost=COST)
    assert caught.value.path == "outputs"
    with pytest.raises(CheckpointFormatError) as negative:
        WorkflowCheckpoint(step_index=-1, outputs=TWO, cost=COST)
    assert negative.value.path == "step_index"


def test_the_version_default_still_reads_as_the_current_format() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(WorkflowCheckpoint)}
    assert defaults["version"] == FORMAT_VERSION
    assert inspect.signature(WorkflowCheckpoint).parameters["version"].default == FORMAT_VERSION
    assert WorkflowCheckpoint.version == FORMAT_VERSION
    cp = WorkflowCheckpoint(step_index=0, outputs={}, cost=TokenUsage())
    assert type(cp.version) is int
    assert type(dataclasses.replace(cp, seq=1).version) is int


def test_replace_keeps_the_version_it_was_given() -> None:
    cp = WorkflowCheckpoint(step_index=2, outputs=TWO, cost=COST)
    with pytest.raises(CheckpointFormatError):
        dataclasses.replace(cp, step_index=7)
    legacy = WorkflowCheckpoint(step_index=7, outputs=TWO, cost=COST)
    assert dataclasses.replace(legacy, step_index=1).version == 0


def test_resuming_from_a_04_call_uses_its_context_values() -> None:
    """0.4 kept the initial context in outputs: resuming reads it back from there."""
    workflow = Workflow(
        [
            Step("fetch", lambda ctx: ctx["document"]),
            Step("shout", lambda ctx: ctx["fetch"].upper(), depends_on=("fetch",)),
        ]
    )
    saved = WorkflowCheckpoint(
        step_index=1, outputs={"document": "hello", "fetch": "hello"}, cost=TokenUsage()
    )
    result = workflow.run_sync(resume_from=saved)
    assert result.restored == ("fetch",)
    assert result.executed == ("shout",)
    assert result.outputs["shout"] == "HELLO"


# ------------------------------------------------------ mapping proxies from every run


def _returns(value: int) -> Callable[[Mapping[str, Any]], int]:
    return lambda ctx: value


def _chain(n: int) -> Workflow:
    return Workflow(
        Step(f"s{i}", _returns(i), depends_on=(f"s{i - 1}",) if i else ()) for i in range(n)
    )


def _assert_proxies(cp: WorkflowCheckpoint) -> None:
    for name in ("outputs", "step_info", "errors", "metadata", "progress"):
        assert type(getattr(cp, name)) is MappingProxyType, name


def test_run_checkpoints_hold_mapping_proxies() -> None:
    saved: list[WorkflowCheckpoint] = []
    _chain(3).run_sync({"topic": "x"}, checkpoint_fn=saved.append, metadata={"job": 1})
    for cp in saved:
        _assert_proxies(cp)
        for info in cp.step_info.values():  # read-only entries, equal to the dicts they stand for
            with pytest.raises(TypeError):
                info["version"] = "changed"  # type: ignore[index]
            assert info == {
                "version": None,
                "depends_on": tuple(info["depends_on"]),
                "code": info["code"],  # the fingerprint of the step's function
            }
    assert [dict(cp.outputs) for cp in saved] == [
        {"s0": 0},
        {"s0": 0, "s1": 1},
        {"s0": 0, "s1": 1, "s2": 2},
    ]


def test_a_run_checkpoints_outputs_behave_as_a_proxy_of_a_dict() -> None:
    saved: list[WorkflowCheckpoint] = []
    _chain(3).run_sync(checkpoint_fn=saved.append)
    outputs: Any = saved[1].outputs  # typed Mapping; a MappingProxyType at run time
    assert repr(outputs) == "mappingproxy({'s0': 0, 's1': 1})"
    assert outputs.copy() == {"s0": 0, "s1": 1}
    assert type(outputs.copy()) is dict
    assert list(reversed(outputs)) == ["s1", "s0"]
    assert outputs | {"x": 9} == {"s0": 0, "s1": 1, "x": 9}
    assert {"s1": 5, "x": 9} | outputs == {"s1": 1, "x": 9, "s0": 0}
    assert outputs == {"s0": 0, "s1": 1}
    assert outputs != saved[2].outputs
    assert outputs.get("s2") is None
    assert "s2" not in outputs
    assert len(outputs) == 2
    with pytest.raises(TypeError):
        outputs["s0"] = 1
    with pytest.raises(TypeError):
        outputs |= {"x": 1}
    with pytest.raises(TypeError):
        outputs | 1
    with pytest.raises(TypeError):
        1 | outputs


def test_mid_batch_progress_checkpoints_hold_mapping_proxies_too() -> None:
    release = asyncio.Event()

    async def slow(ctx: Mapping[str, Any]) -> str:
        await current_step().save_progress({"half": True})
        await release.wait()
        return "slow"

    async def quick(ctx: Mapping[str, Any]) -> str:
        return "quick"

    saved: list[WorkflowCheckpoint] = []

    def keep(cp: WorkflowCheckpoint) -> None:
        saved.append(cp)
        release.set()

    workflow = Workflow([Step("slow", slow), Step("quick", quick)])
    workflow.run_sync(checkpoint_fn=keep)
    assert any(dict(cp.progress) == {"slow": {"half": True}} for cp in saved)
    for cp in saved:
        _assert_proxies(cp)
