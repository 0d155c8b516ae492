"""`StepInfo`: a checkpoint's step_info entry behaves as the read-only dict it stands for."""

from __future__ import annotations

import copy
import json
import pickle
from types import MappingProxyType

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint
from executionkit._checkpoint._step_info import StepInfo


def test_a_plain_steps_entry_is_its_two_fields() -> None:
    info = StepInfo(None, ("a",), None)
    assert dict(info) == {"version": None, "depends_on": ("a",)}
    assert (len(info), list(info), "kind" in info, "version" in info) == (
        2,
        ["version", "depends_on"],
        False,
        True,
    )
    assert info.get("kind") is None
    assert info.get("kind", "step") == "step"
    with pytest.raises(KeyError):
        info["kind"]


def test_another_kinds_entry_adds_kind() -> None:
    info = StepInfo("v2", (), "map")
    assert dict(info) == {"version": "v2", "depends_on": (), "kind": "map"}
    assert (info["kind"], len(info), "kind" in info) == ("map", 3, True)


@pytest.mark.parametrize(
    ("info", "other", "equal"),
    [
        (StepInfo(None, ("a",), None), {"version": None, "depends_on": ("a",)}, True),
        (
            StepInfo(None, ("a",), None),
            MappingProxyType({"version": None, "depends_on": ("a",)}),
            True,
        ),
        (StepInfo(None, ("a",), None), StepInfo(None, ("a",), None), True),
        (StepInfo(None, ("a",), None), StepInfo("1", ("a",), None), False),
        (StepInfo(None, ("a",), None), StepInfo(None, ("a",), "ask"), False),
        (StepInfo(None, ("a", "b"), None), StepInfo(None, ("b", "a"), None), False),
        (StepInfo(None, (), "map"), {"version": None, "depends_on": ()}, False),
    ],
)
def test_equality_is_by_items(info: StepInfo, other: object, equal: bool) -> None:
    assert (info == other) is equal
    assert (other == info) is equal


def test_it_is_read_only_unhashable_and_survives_pickle_and_copy() -> None:
    info = StepInfo("v", ("a",), "workflow")
    with pytest.raises(TypeError):
        info["version"] = "w"  # type: ignore[index]
    with pytest.raises(TypeError):
        hash(info)
    pickled = pickle.loads(pickle.dumps(info))  # noqa: S301 - our own bytes
    for clone in (pickled, copy.deepcopy(info), copy.copy(info)):
        assert type(clone) is StepInfo
        assert clone == info
    assert repr(info) == "{'version': 'v', 'depends_on': ('a',), 'kind': 'workflow'}"


def test_checkpoints_of_a_run_and_of_from_dict_hold_equal_entries() -> None:
    saved: list[WorkflowCheckpoint] = []
    Workflow(
        [Step("a", lambda ctx: 1), Step("b", lambda ctx: 2, depends_on=("a",), version="2")]
    ).run_sync(checkpoint_fn=saved.append)
    data = saved[-1].to_dict()
    codes = {name: entry["code"] for name, entry in data["step_info"].items()}
    assert codes["a"] != codes["b"]  # two functions: two fingerprints
    assert data["step_info"] == {
        "a": {"version": None, "depends_on": [], "code": codes["a"]},
        "b": {"version": "2", "depends_on": ["a"], "code": codes["b"]},
    }
    json.dumps(data)
    loaded = WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))
    assert loaded.step_info == saved[-1].step_info
    assert all(type(entry) is StepInfo for entry in loaded.step_info.values())
