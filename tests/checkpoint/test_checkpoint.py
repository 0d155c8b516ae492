"""Tests for `WorkflowCheckpoint`: construction, `to_dict` and validating `from_dict`."""

from __future__ import annotations

import builtins
import copy
import dataclasses
import importlib
import json
import os
import pickle
import re
from datetime import UTC, timedelta, timezone
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executionkit import CheckpointFormatError, ExecutionKitError, TokenUsage, WorkflowCheckpoint
from executionkit._checkpoint._fields import MAX_COUNT

if TYPE_CHECKING:
    from collections.abc import Callable

V1_KEYS = (
    "version",
    "run_id",
    "seq",
    "step_index",
    "created_at",
    "outputs",
    "cost",
    "context_keys",
    "errors",
    "metadata",
)
TOP_KEYS = (*V1_KEYS, "progress", "step_info")
COST_KEYS = ("input_tokens", "output_tokens", "llm_calls")
COST = {"input_tokens": 10, "output_tokens": 20, "llm_calls": 2}


def _valid() -> dict[str, Any]:
    """A fresh, valid current-format checkpoint dict."""
    return {
        "version": 2,
        "run_id": "run-1",
        "seq": 3,
        "step_index": 2,
        "created_at": "2024-05-01T12:00:00+00:00",
        "outputs": {"a": 1, "b": "two"},
        "cost": dict(COST),
        "context_keys": ["doc", "client"],
        "errors": {},
        "metadata": {"job": "j1"},
        "progress": {"c": {"done": 3}},
        "step_info": {
            "a": {"version": None, "depends_on": []},
            "b": {"version": "2", "depends_on": ["a"]},
        },
    }


def _with(**changes: Any) -> dict[str, Any]:
    return {**_valid(), **changes}


def _without(key: str) -> dict[str, Any]:
    data = _valid()
    del data[key]
    return data


def _cost(**changes: Any) -> dict[str, Any]:
    return _with(cost={**COST, **changes})


def _cost_without(key: str) -> dict[str, Any]:
    cost = dict(COST)
    del cost[key]
    return _with(cost=cost)


def _legacy(**changes: Any) -> dict[str, Any]:
    return {"step_index": 1, "outputs": {"a": 1}, "cost": dict(COST), **changes}


def _make(**fields: Any) -> WorkflowCheckpoint:
    base: dict[str, Any] = {"step_index": 0, "outputs": {}, "cost": TokenUsage()}
    return WorkflowCheckpoint(**{**base, **fields})


def _assert_format_error(error: BaseException) -> None:
    assert isinstance(error, CheckpointFormatError)
    assert isinstance(error, ExecutionKitError)
    assert isinstance(error, ValueError)


# ----------------------------------------------------------------------- construction


def test_construct_with_the_three_04_fields() -> None:
    cp = WorkflowCheckpoint(
        step_index=1, outputs=MappingProxyType({"a": 1}), cost=TokenUsage(1, 2, 3)
    )
    assert cp.step_index == 1
    assert dict(cp.outputs) == {"a": 1}
    assert cp.cost == TokenUsage(1, 2, 3)
    assert cp.version == 5
    assert cp.run_id is None
    assert cp.seq == 0
    assert cp.context_keys == ()
    assert isinstance(cp.errors, MappingProxyType)
    assert dict(cp.errors) == {}
    assert cp.created_at is None
    assert isinstance(cp.metadata, MappingProxyType)
    assert dict(cp.metadata) == {}


def test_construct_with_positional_04_fields() -> None:
    cp = WorkflowCheckpoint(2, MappingProxyType({"a": 1, "b": 2}), TokenUsage())
    assert (cp.step_index, dict(cp.outputs), cp.cost) == (2, {"a": 1, "b": 2}, TokenUsage())


@pytest.mark.parametrize(
    ("field_name", "value"),
    [
        ("step_index", 5),
        ("outputs", MappingProxyType({})),
        ("cost", TokenUsage()),
        ("version", 0),
        ("run_id", "other"),
        ("seq", 9),
        ("context_keys", ("x",)),
        ("errors", MappingProxyType({})),
        ("created_at", None),
        ("metadata", MappingProxyType({})),
    ],
)
def test_checkpoint_is_frozen(field_name: str, value: object) -> None:
    cp = _make(step_index=1, outputs={"a": 1}, run_id="r")
    before = cp.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cp, field_name, value)
    assert cp.to_dict() == before


def test_checkpoint_rejects_new_attributes_with_attribute_error() -> None:
    cp = _make()
    with pytest.raises(AttributeError):
        cp.extra = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("field_name", ["outputs", "errors", "metadata"])
def test_mappings_become_read_only_copies(field_name: str) -> None:
    original: dict[str, Any] = {"a": "1"}
    cp = _make(**{field_name: original}, step_index=1 if field_name == "outputs" else 0)
    mapping: Any = getattr(cp, field_name)
    with pytest.raises(TypeError):
        mapping["a"] = "2"
    assert isinstance(mapping, MappingProxyType)
    assert dict(mapping) == {"a": "1"}
    original["a"] = "changed"
    original["b"] = "new"
    assert dict(getattr(cp, field_name)) == {"a": "1"}


def test_mapping_proxy_arguments_are_copied() -> None:
    """A proxy still wraps the caller's dict, so it is copied like a dict."""
    underlying = {"a": 1}
    cp = _make(step_index=1, outputs=MappingProxyType(underlying))
    underlying["a"] = 2
    assert dict(cp.outputs) == {"a": 1}


def test_context_keys_list_becomes_tuple() -> None:
    cp = _make(context_keys=["doc", "client"])
    assert cp.context_keys == ("doc", "client")


def test_checkpoints_compare_by_value() -> None:
    one = _make(step_index=1, outputs={"a": [1, 2]}, run_id="r", metadata={"k": "v"})
    two = _make(
        step_index=1, outputs=MappingProxyType({"a": [1, 2]}), run_id="r", metadata={"k": "v"}
    )
    assert one == two
    assert one != _make(step_index=1, outputs={"a": [1, 3]}, run_id="r", metadata={"k": "v"})


@pytest.mark.parametrize(
    ("fields", "message", "path"),
    [
        (
            {"step_index": -1},
            "checkpoint field 'step_index' must be a non-negative int, got int -1",
            "step_index",
        ),
        (
            {"step_index": True},
            "checkpoint field 'step_index' must be a non-negative int, got bool True",
            "step_index",
        ),
        (
            {"step_index": 1.0},
            "checkpoint field 'step_index' must be a non-negative int, got float 1.0",
            "step_index",
        ),
        (
            {"seq": -1},
            "checkpoint field 'seq' must be a non-negative int, got int -1",
            "seq",
        ),
        (
            {"version": "1"},
            "checkpoint field 'version' must be a non-negative int, got str '1'",
            "version",
        ),
        (
            {"version": -1},
            "checkpoint field 'version' must be a non-negative int, got int -1",
            "version",
        ),
        ({"cost": {}}, "checkpoint field 'cost' must be a TokenUsage, got dict {}", "cost"),
        (
            {"cost": None},
            "checkpoint field 'cost' must be a TokenUsage, got NoneType None",
            "cost",
        ),
        (
            {"run_id": 5},
            "checkpoint field 'run_id' must be a non-empty str or None, got int 5",
            "run_id",
        ),
        (
            {"created_at": 5},
            "checkpoint field 'created_at' must be an ISO-8601 timestamp str or None, got int 5",
            "created_at",
        ),
        (
            {"outputs": [("a", 1)]},
            "checkpoint field 'outputs' must be a dict, got list [('a', 1)]",
            "outputs",
        ),
        (
            {"errors": None},
            "checkpoint field 'errors' must be a dict, got NoneType None",
            "errors",
        ),
        (
            {"metadata": "x"},
            "checkpoint field 'metadata' must be a dict, got str 'x'",
            "metadata",
        ),
    ],
)
def test_constructor_type_errors(fields: dict[str, Any], message: str, path: str) -> None:
    with pytest.raises(CheckpointFormatError, match=f"^{re.escape(message)}$") as info:
        _make(**fields)
    _assert_format_error(info.value)
    assert info.value.path == path


def test_constructor_rejects_non_iterable_context_keys_with_format_error() -> None:
    """A wrong-typed field is a CheckpointFormatError, never a bare TypeError."""
    with pytest.raises(CheckpointFormatError) as info:
        _make(context_keys=None)
    _assert_format_error(info.value)
    assert info.value.path == "context_keys"


# ------------------------------------------------------------------------------ to_dict


def test_to_dict_of_a_full_checkpoint_is_exact() -> None:
    cp = WorkflowCheckpoint(
        step_index=2,
        outputs=MappingProxyType({"fetch": {"pages": [1, 2]}, "summary": "short"}),
        cost=TokenUsage(input_tokens=120, output_tokens=45, llm_calls=3),
        version=1,
        run_id="run-42",
        seq=5,
        context_keys=("doc", "client"),
        errors=MappingProxyType({"translate": "TimeoutError: too slow"}),
        created_at="2024-05-01T12:00:00+00:00",
        metadata=MappingProxyType({"job": "nightly", "attempt": 2}),
    )
    data = cp.to_dict()
    assert data == {
        "version": 1,
        "run_id": "run-42",
        "seq": 5,
        "step_index": 2,
        "created_at": "2024-05-01T12:00:00+00:00",
        "outputs": {"fetch": {"pages": [1, 2]}, "summary": "short"},
        "cost": {"input_tokens": 120, "output_tokens": 45, "llm_calls": 3},
        "context_keys": ["doc", "client"],
        "errors": {"translate": "TimeoutError: too slow"},
        "metadata": {"job": "nightly", "attempt": 2},
    }
    assert list(data) == list(V1_KEYS)
    assert type(data["outputs"]) is dict
    assert type(data["context_keys"]) is list
    assert type(data["errors"]) is dict
    assert type(data["metadata"]) is dict


def test_to_dict_of_defaults_is_exact() -> None:
    data = WorkflowCheckpoint(
        step_index=0, outputs=MappingProxyType({}), cost=TokenUsage()
    ).to_dict()
    assert data == {
        "version": 5,
        "run_id": None,
        "seq": 0,
        "step_index": 0,
        "created_at": None,
        "outputs": {},
        "cost": {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0},
        "context_keys": [],
        "errors": {},
        "metadata": {},
        "progress": {},
        "step_info": {},
        "skipped": {},
        "items": {},
        "pending": {},
        "children": {},
        "ledger": [],
        "in_flight": [],
        "trace": None,
        "lineage": {},
        "attempts": [],
        "waits": {},
        "in_flight_items": {},
    }


def test_to_dict_of_a_legacy_checkpoint_has_the_04_shape() -> None:
    cp = WorkflowCheckpoint(
        step_index=1,
        outputs=MappingProxyType({"a": [1], "doc": "x"}),
        cost=TokenUsage(3, 4, 1),
        version=0,
    )
    assert cp.to_dict() == {
        "step_index": 1,
        "outputs": {"a": [1], "doc": "x"},
        "cost": {"input_tokens": 3, "output_tokens": 4, "llm_calls": 1},
    }


def test_to_dict_returns_fresh_containers() -> None:
    cp = _make(step_index=1, outputs={"a": 1}, context_keys=("k",), metadata={"m": 1})
    data = cp.to_dict()
    data["outputs"]["b"] = 2
    data["cost"]["llm_calls"] = 99
    data["context_keys"].append("z")
    data["metadata"]["m"] = 2
    assert (
        cp.to_dict()
        == _make(step_index=1, outputs={"a": 1}, context_keys=("k",), metadata={"m": 1}).to_dict()
    )


def test_to_dict_keeps_outputs_identical() -> None:
    value = object()
    data = _make(step_index=1, outputs={"a": value}).to_dict()
    assert data["outputs"]["a"] is value


# --------------------------------------------------------------------------- round trip

ROUND_TRIP_CHECKPOINTS = [
    WorkflowCheckpoint(step_index=0, outputs=MappingProxyType({}), cost=TokenUsage()),
    WorkflowCheckpoint(
        step_index=3,
        outputs=MappingProxyType(
            {
                "fetch": {"pages": [{"n": 1, "text": "héllo"}, {"n": 2, "text": None}]},
                "score": 0.25,
                "flag": False,
            }
        ),
        cost=TokenUsage(1000, 2000, 7),
        run_id="0f3c",
        seq=12,
        context_keys=("doc", "api_client"),
        errors=MappingProxyType({"translate": "ValueError: bad input", "other": ""}),
        created_at="2024-05-01T12:00:00.123456+00:00",
        metadata=MappingProxyType({"job": "j-1", "labels": ["a", "b"], "nested": {"x": None}}),
    ),
    WorkflowCheckpoint(
        step_index=1,
        outputs=MappingProxyType({"only": []}),
        cost=TokenUsage(0, 0, 0),
        run_id="r",
        seq=0,
        created_at="2024-05-01",
    ),
    WorkflowCheckpoint(
        step_index=2,
        outputs=MappingProxyType({"a": 1, "doc": "context value from 0.4"}),
        cost=TokenUsage(5, 6, 2),
        version=0,
    ),
]


@pytest.mark.parametrize("cp", ROUND_TRIP_CHECKPOINTS)
def test_round_trip_through_dict(cp: WorkflowCheckpoint) -> None:
    assert WorkflowCheckpoint.from_dict(cp.to_dict()) == cp


@pytest.mark.parametrize("cp", ROUND_TRIP_CHECKPOINTS)
def test_round_trip_through_json(cp: WorkflowCheckpoint) -> None:
    restored = WorkflowCheckpoint.from_dict(json.loads(json.dumps(cp.to_dict())))
    assert restored == cp
    assert restored.to_dict() == cp.to_dict()


def test_from_dict_returns_read_only_mappings_independent_of_input() -> None:
    data = _valid()
    cp = WorkflowCheckpoint.from_dict(data)
    assert isinstance(cp.outputs, MappingProxyType)
    assert isinstance(cp.errors, MappingProxyType)
    assert isinstance(cp.metadata, MappingProxyType)
    assert isinstance(cp.context_keys, tuple)
    data["outputs"]["c"] = 3
    data["metadata"]["job"] = "other"
    data["context_keys"].append("more")
    assert dict(cp.outputs) == {"a": 1, "b": "two"}
    assert dict(cp.metadata) == {"job": "j1"}
    assert cp.context_keys == ("doc", "client")


def test_from_dict_accepts_tuple_context_keys() -> None:
    assert WorkflowCheckpoint.from_dict(_with(context_keys=("x", "y"))).context_keys == ("x", "y")


# ------------------------------------------------------------------- validation errors

LEGACY_EXTRA_MESSAGE = (
    "checkpoint is missing key 'version' (a dict without it is read as an ExecutionKit 0.4 "
    "checkpoint, which has only 'step_index', 'outputs' and 'cost', but this one also has "
)
LONG_VALUE = "x" * 100
NONE_KEY: dict[object, object] = {None: 1, "step_index": 0}
INT_KEY: dict[Any, Any] = {**_valid(), 1: "x"}

VALIDATION_CASES: list[tuple[str, object, str, str]] = [
    ("list", [], "checkpoint data must be a dict, got list []", ""),
    ("none", None, "checkpoint data must be a dict, got NoneType None", ""),
    ("str", "{}", "checkpoint data must be a dict, got str '{}'", ""),
    ("int", 7, "checkpoint data must be a dict, got int 7", ""),
    ("int-key", INT_KEY, "checkpoint keys must be str, got int 1", ""),
    ("none-key", NONE_KEY, "checkpoint keys must be str, got NoneType None", ""),
    *[
        (f"missing-{key}", _without(key), f"checkpoint field {key!r} is missing", key)
        for key in TOP_KEYS
        if key != "version"
    ],
    ("extra-key", _with(extra=1), "checkpoint has unexpected field 'extra'", "extra"),
    (
        "version-6",
        _with(version=6),
        (
            "checkpoint format version 6 is newer than this executionkit reads (up to 5); "
            "upgrade executionkit to load it"
        ),
        "version",
    ),
    (
        "version-0",
        _with(version=0),
        "checkpoint field 'version' must be a positive int, got int 0",
        "version",
    ),
    (
        "version-negative",
        _with(version=-1),
        "checkpoint field 'version' must be a positive int, got int -1",
        "version",
    ),
    (
        "version-bool",
        _with(version=True),
        "checkpoint field 'version' must be a positive int, got bool True",
        "version",
    ),
    (
        "version-str",
        _with(version="1"),
        "checkpoint field 'version' must be a positive int, got str '1'",
        "version",
    ),
    (
        "version-float",
        _with(version=1.0),
        "checkpoint field 'version' must be a positive int, got float 1.0",
        "version",
    ),
    (
        "version-null",
        _with(version=None),
        "checkpoint field 'version' must be a positive int, got NoneType None",
        "version",
    ),
    (
        "step_index-bool",
        _with(step_index=True),
        "checkpoint field 'step_index' must be a non-negative int, got bool True",
        "step_index",
    ),
    (
        "step_index-negative",
        _with(step_index=-1),
        "checkpoint field 'step_index' must be a non-negative int, got int -1",
        "step_index",
    ),
    (
        "step_index-str",
        _with(step_index="2"),
        "checkpoint field 'step_index' must be a non-negative int, got str '2'",
        "step_index",
    ),
    (
        "step_index-float",
        _with(step_index=2.0),
        "checkpoint field 'step_index' must be a non-negative int, got float 2.0",
        "step_index",
    ),
    (
        "step_index-mismatch",
        _with(step_index=3),
        "checkpoint field 'step_index' must equal the number of outputs (2), got 3",
        "step_index",
    ),
    (
        "step_index-mismatch-low",
        _with(step_index=0),
        "checkpoint field 'step_index' must equal the number of outputs (2), got 0",
        "step_index",
    ),
    (
        "outputs-list",
        _with(outputs=[1]),
        "checkpoint field 'outputs' must be a dict, got list [1]",
        "outputs",
    ),
    (
        "outputs-null",
        _with(outputs=None),
        "checkpoint field 'outputs' must be a dict, got NoneType None",
        "outputs",
    ),
    (
        "outputs-int-key",
        _with(step_index=1, outputs={1: "x"}),
        "checkpoint field 'outputs' must have str keys, got key int 1",
        "outputs",
    ),
    (
        "outputs-empty-name",
        _with(step_index=1, outputs={"": 1}),
        "checkpoint field 'outputs' must have non-empty step names as keys, got ''",
        "outputs",
    ),
    ("cost-str", _with(cost="x"), "checkpoint field 'cost' must be a dict, got str 'x'", "cost"),
    (
        "cost-list",
        _with(cost=[1, 2, 3]),
        "checkpoint field 'cost' must be a dict, got list [1, 2, 3]",
        "cost",
    ),
    (
        "cost-int-key",
        _with(cost={**COST, 0: 1}),
        "checkpoint field 'cost' must have str keys, got key int 0",
        "cost",
    ),
    *[
        (
            f"cost-missing-{key}",
            _cost_without(key),
            f"checkpoint field 'cost.{key}' is missing",
            f"cost.{key}",
        )
        for key in COST_KEYS
    ],
    ("cost-extra", _cost(extra=1), "checkpoint has unexpected field 'cost.extra'", "cost.extra"),
    *[
        (
            f"cost-{key}-{label}",
            _cost(**{key: value}),
            f"checkpoint field 'cost.{key}' must be a non-negative int, got {shown}",
            f"cost.{key}",
        )
        for key in COST_KEYS
        for label, value, shown in [
            ("str", "7", "str '7'"),
            ("bool", True, "bool True"),
            ("negative", -1, "int -1"),
            ("float", 1.5, "float 1.5"),
            ("null", None, "NoneType None"),
        ]
    ],
    (
        "run_id-int",
        _with(run_id=5),
        "checkpoint field 'run_id' must be a non-empty str or None, got int 5",
        "run_id",
    ),
    (
        "run_id-list",
        _with(run_id=["r"]),
        "checkpoint field 'run_id' must be a non-empty str or None, got list ['r']",
        "run_id",
    ),
    (
        "seq-negative",
        _with(seq=-1),
        "checkpoint field 'seq' must be a non-negative int, got int -1",
        "seq",
    ),
    (
        "seq-bool",
        _with(seq=False),
        "checkpoint field 'seq' must be a non-negative int, got bool False",
        "seq",
    ),
    (
        "seq-null",
        _with(seq=None),
        "checkpoint field 'seq' must be a non-negative int, got NoneType None",
        "seq",
    ),
    (
        "context_keys-str",
        _with(context_keys="doc"),
        "checkpoint field 'context_keys' must be a list of str, got str 'doc'",
        "context_keys",
    ),
    (
        "context_keys-dict",
        _with(context_keys={"doc": 1}),
        "checkpoint field 'context_keys' must be a list of str, got dict {'doc': 1}",
        "context_keys",
    ),
    (
        "context_keys-non-str",
        _with(context_keys=["doc", 1]),
        "checkpoint field 'context_keys[1]' must be a str, got int 1",
        "context_keys[1]",
    ),
    (
        "context_keys-null-item",
        _with(context_keys=[None]),
        "checkpoint field 'context_keys[0]' must be a str, got NoneType None",
        "context_keys[0]",
    ),
    (
        "context_keys-duplicate",
        _with(context_keys=["doc", "client", "doc"]),
        (
            "checkpoint field 'context_keys' must be a list of distinct str, "
            "got list ['doc', 'client', 'doc']"
        ),
        "context_keys",
    ),
    (
        "errors-list",
        _with(errors=[]),
        "checkpoint field 'errors' must be a dict, got list []",
        "errors",
    ),
    (
        "errors-int-key",
        _with(errors={3: "ValueError: x"}),
        "checkpoint field 'errors' must have str keys, got key int 3",
        "errors",
    ),
    (
        "errors-non-str-value",
        _with(errors={"c": "ValueError: x", "translate": 1}),
        "checkpoint field 'errors.translate' must be a str, got int 1",
        "errors.translate",
    ),
    (
        "errors-null-value",
        _with(errors={"c": None}),
        "checkpoint field 'errors.c' must be a str, got NoneType None",
        "errors.c",
    ),
    (
        "created_at-not-iso",
        _with(created_at="yesterday"),
        (
            "checkpoint field 'created_at' must be an ISO-8601 timestamp str or None, "
            "got str 'yesterday'"
        ),
        "created_at",
    ),
    (
        "created_at-empty",
        _with(created_at=""),
        "checkpoint field 'created_at' must be an ISO-8601 timestamp str or None, got str ''",
        "created_at",
    ),
    (
        "created_at-int",
        _with(created_at=1714564800),
        (
            "checkpoint field 'created_at' must be an ISO-8601 timestamp str or None, "
            "got int 1714564800"
        ),
        "created_at",
    ),
    (
        "created_at-long-value-is-shortened",
        _with(created_at=LONG_VALUE),
        (
            "checkpoint field 'created_at' must be an ISO-8601 timestamp str or None, "
            f"got str '{'x' * 56}..."
        ),
        "created_at",
    ),
    (
        "metadata-list",
        _with(metadata=["job"]),
        "checkpoint field 'metadata' must be a dict, got list ['job']",
        "metadata",
    ),
    (
        "metadata-int-key",
        _with(metadata={1: "x"}),
        "checkpoint field 'metadata' must have str keys, got key int 1",
        "metadata",
    ),
    (
        "legacy-with-extra-keys",
        _legacy(run_id="r", seq=1),
        LEGACY_EXTRA_MESSAGE + "'run_id', 'seq')",
        "version",
    ),
    (
        "current-without-version",
        _without("version"),
        LEGACY_EXTRA_MESSAGE
        + "'context_keys', 'created_at', 'errors', 'metadata', 'progress', 'run_id', 'seq', "
        + "'step_info')",
        "version",
    ),
    ("empty-dict", {}, "checkpoint field 'cost' is missing", "cost"),
    *[
        (
            f"legacy-missing-{key}",
            {k: v for k, v in _legacy().items() if k != key},
            f"checkpoint field {key!r} is missing",
            key,
        )
        for key in ("step_index", "outputs", "cost")
    ],
    (
        "legacy-step_index-bool",
        _legacy(step_index=True),
        "checkpoint field 'step_index' must be a non-negative int, got bool True",
        "step_index",
    ),
    (
        "legacy-outputs-list",
        _legacy(outputs=["a"]),
        "checkpoint field 'outputs' must be a dict, got list ['a']",
        "outputs",
    ),
    (
        "legacy-cost-missing-llm_calls",
        _legacy(cost={"input_tokens": 1, "output_tokens": 2}),
        "checkpoint field 'cost.llm_calls' is missing",
        "cost.llm_calls",
    ),
]


@pytest.mark.parametrize(
    ("data", "message", "path"),
    [case[1:] for case in VALIDATION_CASES],
    ids=[case[0] for case in VALIDATION_CASES],
)
def test_from_dict_validation_errors(data: object, message: str, path: str) -> None:
    snapshot = copy.deepcopy(data)
    with pytest.raises(CheckpointFormatError, match=f"^{re.escape(message)}$") as info:
        WorkflowCheckpoint.from_dict(data)
    _assert_format_error(info.value)
    assert str(info.value) == message
    assert info.value.path == path
    assert data == snapshot, "from_dict must not modify its input"


def test_validation_case_ids_are_unique() -> None:
    ids = [case[0] for case in VALIDATION_CASES]
    assert len(ids) == len(set(ids))


def test_base_validation_dict_is_valid() -> None:
    """Every error case above differs from this valid dict in one place."""
    cp = WorkflowCheckpoint.from_dict(_valid())
    assert cp.to_dict() == _valid()
    assert WorkflowCheckpoint.from_dict(_legacy()).to_dict() == _legacy()


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (_with(step_index=-(10**5000)), "step_index"),
        (_with(step_index=10**5000), "step_index"),
        (_with(version=-(10**5000)), "version"),
        (_cost(llm_calls=-(10**5000)), "cost.llm_calls"),
        (_legacy(step_index=-(10**5000)), "step_index"),
    ],
    ids=["negative-step_index", "step_index-mismatch", "version", "cost", "legacy"],
)
def test_from_dict_huge_ints_raise_format_error(data: object, path: str) -> None:
    """Ints too long to print (> 4300 digits) still give the documented error."""
    with pytest.raises(CheckpointFormatError) as info:
        WorkflowCheckpoint.from_dict(data)
    _assert_format_error(info.value)
    assert info.value.path == path


# ------------------------------------------------------------------ ExecutionKit 0.4 dicts


def test_04_dict_reads_as_version_0() -> None:
    data = {
        "step_index": 2,
        "outputs": {"a": 1, "doc": "x"},
        "cost": {"input_tokens": 11, "output_tokens": 22, "llm_calls": 2},
    }
    cp = WorkflowCheckpoint.from_dict(data)
    assert cp.version == 0
    assert cp.step_index == 2
    assert dict(cp.outputs) == {"a": 1, "doc": "x"}
    assert cp.cost == TokenUsage(11, 22, 2)
    assert cp.run_id is None
    assert cp.seq == 0
    assert cp.context_keys == ()
    assert dict(cp.errors) == {}
    assert cp.created_at is None
    assert dict(cp.metadata) == {}
    assert cp.to_dict() == data
    assert WorkflowCheckpoint.from_dict(json.loads(json.dumps(cp.to_dict()))) == cp


def test_04_dict_step_index_need_not_match_outputs() -> None:
    """0.4 kept the initial context inside outputs, so counts may differ."""
    data = {"step_index": 1, "outputs": {"a": 1, "doc": "x", "client": "c"}, "cost": COST}
    cp = WorkflowCheckpoint.from_dict(data)
    assert (cp.version, cp.step_index, len(cp.outputs)) == (0, 1, 3)
    assert cp.to_dict() == data


# -------------------------------------------------------------------- nothing evaluated

SUSPICIOUS = "__import__('os').system('x')"


def test_from_dict_never_evaluates_imports_or_unpickles() -> None:
    calls: list[str] = []

    def forbid(name: str) -> Callable[..., Any]:
        def forbidden(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            msg = f"{name} called"
            raise AssertionError(msg)

        return forbidden

    pickled = pickle.dumps({"x": 1}).hex()
    data = _with(
        step_index=3,
        outputs={"code": SUSPICIOUS, "pickle": pickled, "lambda": "lambda: 1"},
        run_id=SUSPICIOUS,
        errors={"other code": SUSPICIOUS},
        metadata={"eval": "eval('1+1')", "__class__": "os.system"},
        context_keys=["__builtins__"],
        step_info={},
    )
    json_copy = json.loads(json.dumps(data))
    targets: list[tuple[object, str]] = [
        (builtins, "eval"),
        (builtins, "exec"),
        (builtins, "compile"),
        (importlib, "import_module"),
        (pickle, "loads"),
        (pickle, "load"),
        (os, "system"),
        (builtins, "__import__"),
    ]
    saved = [(module, name, getattr(module, name)) for module, name in targets]
    try:
        for module, name in targets:
            setattr(module, name, forbid(name))
        cp = WorkflowCheckpoint.from_dict(data)
        restored = WorkflowCheckpoint.from_dict(json_copy)
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
    assert calls == []
    assert type(cp.outputs["code"]) is str
    assert cp.outputs["code"] == SUSPICIOUS
    assert cp.outputs["pickle"] == pickled
    assert cp.run_id == SUSPICIOUS
    assert cp.errors["other code"] == SUSPICIOUS
    assert dict(cp.metadata) == {"eval": "eval('1+1')", "__class__": "os.system"}
    assert restored == cp


# --------------------------------------------------------------------------- properties

ZONES = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
key_names = st.sampled_from([*TOP_KEYS, *COST_KEYS]) | st.text(max_size=8)
real_key_dicts = st.dictionaries(key_names, json_values, max_size=len(TOP_KEYS) + 2)
cost_like = st.dictionaries(
    st.sampled_from(COST_KEYS) | st.text(max_size=4),
    st.integers(min_value=-3, max_value=1000) | json_scalars,
    max_size=4,
)
nearly_valid = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from([0, 1, 2, True, "1", None]) | json_values,
        "run_id": st.none() | st.text(max_size=8) | json_values,
        "seq": st.integers(min_value=-2, max_value=5) | json_values,
        "step_index": st.integers(min_value=-2, max_value=5) | json_values,
        "created_at": st.sampled_from(["2024-05-01T12:00:00+00:00", "nope", None]) | json_values,
        "outputs": st.dictionaries(st.text(max_size=4), json_values, max_size=4) | json_values,
        "cost": cost_like | json_values,
        "context_keys": st.lists(st.text(max_size=4) | json_scalars, max_size=3) | json_values,
        "errors": st.dictionaries(st.text(max_size=4), st.text(max_size=6) | json_scalars)
        | json_values,
        "metadata": st.dictionaries(st.text(max_size=4), json_values, max_size=3) | json_values,
    },
)
any_input = json_values | real_key_dicts | nearly_valid


def _check_from_dict_contract(data: object) -> WorkflowCheckpoint | None:
    """Call from_dict; only success or CheckpointFormatError is allowed."""
    failure: CheckpointFormatError | None = None
    try:
        cp = WorkflowCheckpoint.from_dict(data)
    except CheckpointFormatError as error:
        failure = error
    if failure is not None:
        _assert_format_error(failure)
        assert str(failure).startswith("checkpoint ")
        assert isinstance(failure.path, str)
        return None
    assert isinstance(cp, WorkflowCheckpoint)
    assert WorkflowCheckpoint.from_dict(cp.to_dict()) == cp
    assert WorkflowCheckpoint.from_dict(json.loads(json.dumps(cp.to_dict()))) == cp
    return cp


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_input)
def test_from_dict_on_arbitrary_json_like_values(data: object) -> None:
    _check_from_dict_contract(data)


@st.composite
def valid_checkpoints(draw: st.DrawFn) -> WorkflowCheckpoint:
    outputs = draw(st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=5))
    cost = TokenUsage(
        draw(st.integers(min_value=0, max_value=MAX_COUNT)),
        draw(st.integers(min_value=0, max_value=MAX_COUNT)),
        draw(st.integers(min_value=0, max_value=10_000)),
    )
    if draw(st.booleans()) and draw(st.booleans()):
        return WorkflowCheckpoint(
            step_index=draw(st.integers(min_value=0, max_value=10)),
            outputs=MappingProxyType(outputs),
            cost=cost,
            version=0,
        )
    created = draw(
        st.none()
        | st.datetimes().map(lambda moment: moment.isoformat())
        | st.datetimes(timezones=st.sampled_from(ZONES)).map(
            lambda moment: moment.isoformat(timespec="seconds")
        )
    )
    return WorkflowCheckpoint(
        step_index=len(outputs),
        outputs=MappingProxyType(outputs),
        cost=cost,
        run_id=draw(st.none() | st.text(min_size=1, max_size=12)),
        seq=draw(st.integers(min_value=0, max_value=MAX_COUNT)),
        context_keys=tuple(draw(st.lists(st.text(max_size=8), unique=True, max_size=4))),
        errors=MappingProxyType(
            draw(
                st.dictionaries(
                    st.text(max_size=8).filter(lambda name: name not in outputs),
                    st.text(),
                    max_size=3,
                )
            )
        ),
        created_at=created,
        metadata=MappingProxyType(
            draw(st.dictionaries(st.text(max_size=8), json_values, max_size=3))
        ),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_checkpoints())
def test_valid_checkpoints_round_trip_through_json(cp: WorkflowCheckpoint) -> None:
    text = json.dumps(cp.to_dict())
    restored = WorkflowCheckpoint.from_dict(json.loads(text))
    assert restored == cp
    assert json.dumps(restored.to_dict()) == text
    assert WorkflowCheckpoint.from_dict(cp.to_dict()) == cp


def _mutate(data: dict[str, Any], draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
    """Apply one random mutation to a checkpoint dict in place."""
    kind = draw(
        st.sampled_from(
            ["delete", "delete-cost", "replace", "replace-nested", "add", "add-nested", "version"]
        )
    )
    containers = [key for key in sorted(data) if isinstance(data[key], (dict, list))]
    if kind == "delete" and data:
        del data[draw(st.sampled_from(sorted(data)))]
    elif kind == "delete-cost" and isinstance(data.get("cost"), dict) and data["cost"]:
        del data["cost"][draw(st.sampled_from(sorted(data["cost"])))]
    elif kind == "replace" and data:
        data[draw(st.sampled_from(sorted(data)))] = draw(json_values)
    elif kind == "replace-nested" and containers:
        container = data[draw(st.sampled_from(containers))]
        if isinstance(container, dict):
            existing = st.sampled_from(sorted(container)) if container else st.nothing()
            container[draw(existing | st.text(max_size=6))] = draw(json_values)
        elif container:
            position = draw(st.integers(min_value=0, max_value=len(container) - 1))
            container[position] = draw(json_values)
        else:
            container.append(draw(json_values))
    elif kind == "add-nested":
        target = draw(st.sampled_from(["cost", "outputs", "errors", "metadata"]))
        if isinstance(data.get(target), dict):
            data[target][draw(key_names)] = draw(json_values)
    elif kind == "version":
        data["version"] = draw(st.integers(min_value=-2, max_value=3) | json_values)
    else:
        data[draw(key_names)] = draw(json_values)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_checkpoints(), st.data())
def test_from_dict_on_mutated_valid_dicts(cp: WorkflowCheckpoint, data: st.DataObject) -> None:
    mutated = copy.deepcopy(cp.to_dict())
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        _mutate(mutated, data.draw)
    result = _check_from_dict_contract(mutated)
    if result is not None:
        json.dumps(result.to_dict())


@pytest.mark.parametrize(
    ("mutation", "path"),
    [
        (lambda data: data.pop("seq"), "seq"),
        (lambda data: data["cost"].pop("output_tokens"), "cost.output_tokens"),
        (lambda data: data.__setitem__("version", 6), "version"),
        (lambda data: data.__setitem__("surprise", 1), "surprise"),
        (lambda data: data["cost"].__setitem__("input_tokens", -5), "cost.input_tokens"),
        (lambda data: data["outputs"].__setitem__("c", 3), "step_index"),
    ],
    ids=["delete", "delete-cost", "version", "add", "negative-cost", "extra-output"],
)
def test_specific_mutations_name_the_field(
    mutation: Callable[[dict[str, Any]], object], path: str
) -> None:
    data = _valid()
    mutation(data)
    with pytest.raises(CheckpointFormatError) as info:
        WorkflowCheckpoint.from_dict(data)
    assert info.value.path == path


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"step_index": 5, "version": 2}, "step_index"),
        ({"step_index": 5, "run_id": "r"}, "step_index"),
        ({"cost": TokenUsage(-1, 0, 0)}, "cost.input_tokens"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"context_keys": ("a", "a")}, "context_keys"),
        ({"context_keys": "ab"}, "context_keys"),
        ({"context_keys": None}, "context_keys"),
        ({"errors": {"s": 1}}, "errors.s"),
        ({"outputs": {1: "x"}, "step_index": 1}, "outputs"),
        ({"metadata": {1: "x"}}, "metadata"),
        ({"version": 6}, "version"),
    ],
)
def test_constructor_rejects_what_from_dict_would_reject(
    fields: dict[str, Any], path: str
) -> None:
    """Every checkpoint that can be built can be written and read back."""
    with pytest.raises(CheckpointFormatError) as caught:
        _make(**fields)
    assert caught.value.path == path


def test_empty_run_id_is_rejected_like_run_does() -> None:
    """run(run_id="") is refused, so a checkpoint cannot carry one either."""
    with pytest.raises(CheckpointFormatError) as caught:
        _make(run_id="")
    assert str(caught.value) == (
        "checkpoint field 'run_id' must be a non-empty str or None, got str ''"
    )


@pytest.mark.parametrize(
    ("fields", "message", "path"),
    [
        (
            {"version": 1, "progress": {"c": 1}},
            "checkpoint field 'progress' needs format version 2, got version 1",
            "progress",
        ),
        (
            {"version": 0, "step_info": {"a": {"version": None, "depends_on": ()}}},
            "checkpoint field 'step_info' needs format version 2, got version 0",
            "step_info",
        ),
        (
            {"progress": {"a": {"page": 2}}},
            (
                "checkpoint field 'progress' names completed steps ['a']; progress is dropped "
                "when a step completes"
            ),
            "progress",
        ),
    ],
)
def test_progress_and_step_info_fit_the_version_and_the_outputs(
    fields: dict[str, Any], message: str, path: str
) -> None:
    with pytest.raises(CheckpointFormatError) as caught:
        _make(step_index=1, outputs={"a": 1}, **fields)
    assert str(caught.value) == message
    assert caught.value.path == path
