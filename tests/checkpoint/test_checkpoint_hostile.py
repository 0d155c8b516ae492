"""Hostile checkpoint data: from_dict and the constructor raise CheckpointFormatError only.

Deep nesting, values whose ``__repr__``, ``__hash__`` or ``__eq__`` raise, unhashable
items and mappings that fail: whatever the data, the documented error comes out,
naming the field, never a RecursionError, TypeError or the caller's own exception.
Values the format does not check (outputs, metadata and progress values) load
however deep they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from executionkit import CheckpointFormatError, TokenUsage, WorkflowCheckpoint

DEEP = (3_000, 100_000)
DEEP_TEXT = "list <nested too deeply to show>"


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` levels deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def valid() -> dict[str, Any]:
    """A fresh, valid version 2 checkpoint dict."""
    return {
        "version": 2,
        "run_id": "run-1",
        "seq": 3,
        "step_index": 2,
        "created_at": "2024-05-01T12:00:00+00:00",
        "outputs": {"a": 1, "b": "two"},
        "cost": {"input_tokens": 10, "output_tokens": 20, "llm_calls": 2},
        "context_keys": ["doc"],
        "errors": {"c": "ValueError: no"},
        "metadata": {"job": "j1"},
        "progress": {"c": {"done": 3}},
        "step_info": {
            "a": {"version": None, "depends_on": []},
            "b": {"version": "2", "depends_on": ["a"]},
        },
    }


def valid_fields() -> dict[str, Any]:
    """Constructor arguments of a valid checkpoint, every field given."""
    data = valid()
    return {
        **data,
        "cost": TokenUsage(10, 20, 2),
        "context_keys": ("doc",),
        "new_outputs": ("b",),
    }


class Boom(Exception):  # noqa: N818 - a test double, named for what it does
    """What the hostile objects raise."""


class BadRepr:
    """An object whose repr raises."""

    def __repr__(self) -> str:
        raise Boom


class BadStr(Exception):  # noqa: N818 - an exception whose str() raises
    """An exception whose message cannot be shown."""

    def __str__(self) -> str:
        raise Boom


class BadHashStr(str):
    """A str whose hash raises (so a set of them cannot be built)."""

    __slots__ = ()

    def __hash__(self) -> int:
        raise Boom


class RecursiveHashStr(str):
    """A str whose hash recurses without end."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self)


class BadEqStr(str):
    """A str equal to nothing: comparing it raises (its hash is a plain str's)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        raise Boom

    def __hash__(self) -> int:
        return str.__hash__(self)


class BadReprStr(str):
    """A str whose repr raises."""

    __slots__ = ()

    def __repr__(self) -> str:
        raise Boom


class BadMapping(Mapping[str, Any]):
    """A mapping every method of which raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getitem__(self, key: str) -> Any:
        raise self.error

    def __iter__(self) -> Iterator[str]:
        raise self.error

    def __len__(self) -> int:
        raise self.error


def _fail_loading(data: object) -> CheckpointFormatError:
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(data)
    return caught.value


def _fail_building(**changes: Any) -> CheckpointFormatError:
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint(**{**valid_fields(), **changes})
    return caught.value


# --------------------------------------------------------------------------- deep nesting


def _at(path: tuple[str | int, ...], value: object) -> dict[str, Any]:
    """A valid dict with ``value`` placed at ``path``."""
    data = valid()
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return data


DEEP_FIELDS: list[tuple[tuple[str | int, ...], str, str]] = [
    (("version",), "version", "must be a positive int"),
    (("run_id",), "run_id", "must be a non-empty str or None"),
    (("seq",), "seq", "must be a non-negative int"),
    (("step_index",), "step_index", "must be a non-negative int"),
    (("created_at",), "created_at", "must be an ISO-8601 timestamp str or None"),
    (("outputs",), "outputs", "must be a dict"),
    (("cost",), "cost", "must be a dict"),
    (("cost", "llm_calls"), "cost.llm_calls", "must be a non-negative int"),
    (("context_keys", 0), "context_keys[0]", "must be a str"),
    (("errors",), "errors", "must be a dict"),
    (("errors", "c"), "errors.c", "must be a str"),
    (("metadata",), "metadata", "must be a dict"),
    (("progress",), "progress", "must be a dict"),
    (("step_info",), "step_info", "must be a dict"),
    (("step_info", "a"), "step_info.a", "must be a dict"),
    (("step_info", "a", "version"), "step_info.a.version", "must be a non-empty str or None"),
    (("step_info", "a", "depends_on"), "step_info.a.depends_on", "must be a list of step names"),
]


@pytest.mark.parametrize("depth", DEEP)
@pytest.mark.parametrize(("where", "path", "expected"), DEEP_FIELDS)
def test_from_dict_names_a_deeply_nested_field(
    where: tuple[str | int, ...], path: str, expected: str, depth: int
) -> None:
    """A list nested thousands of levels deep in a field is a format error at that field."""
    error = _fail_loading(_at(where, nested(depth)))
    assert str(error) == f"checkpoint field {path!r} {expected}, got {DEEP_TEXT}"
    assert error.path == path


@pytest.mark.parametrize("depth", DEEP)
def test_from_dict_of_a_deeply_nested_list(depth: int) -> None:
    error = _fail_loading(nested(depth))
    assert str(error) == f"checkpoint data must be a dict, got {DEEP_TEXT}"
    assert error.path == ""


@pytest.mark.parametrize("depth", DEEP)
def test_from_dict_of_a_04_dict_with_a_deep_step_index(depth: int) -> None:
    data = {"step_index": nested(depth), "outputs": {}, "cost": valid()["cost"]}
    error = _fail_loading(data)
    expected = f"checkpoint field 'step_index' must be a non-negative int, got {DEEP_TEXT}"
    assert str(error) == expected
    assert error.path == "step_index"


@pytest.mark.parametrize("depth", DEEP)
@pytest.mark.parametrize(
    ("field", "path", "expected"),
    [
        ("version", "version", "must be a non-negative int"),
        ("step_index", "step_index", "must be a non-negative int"),
        ("seq", "seq", "must be a non-negative int"),
        ("cost", "cost", "must be a TokenUsage"),
        ("run_id", "run_id", "must be a non-empty str or None"),
        ("created_at", "created_at", "must be an ISO-8601 timestamp str or None"),
        ("outputs", "outputs", "must be a dict"),
        ("errors", "errors", "must be a dict"),
        ("metadata", "metadata", "must be a dict"),
        ("progress", "progress", "must be a dict"),
        ("step_info", "step_info", "must be a dict"),
        ("context_keys", "context_keys[0]", "must be a str"),
        ("new_outputs", "new_outputs", "must be a tuple of recorded step names"),
    ],
)
def test_constructor_names_a_deeply_nested_field(
    field: str, path: str, expected: str, depth: int
) -> None:
    error = _fail_building(**{field: nested(depth)})
    assert str(error) == f"checkpoint field {path!r} {expected}, got {DEEP_TEXT}"
    assert error.path == path


@pytest.mark.parametrize("depth", DEEP)
@pytest.mark.parametrize(
    "where", [("outputs", "a"), ("metadata", "job"), ("progress", "c")], ids=str
)
def test_deep_values_the_format_does_not_check_load_as_they_are(
    where: tuple[str, str], depth: int
) -> None:
    """Outputs, metadata and progress values are the caller's data: kept, however deep."""
    value = nested(depth)
    cp = WorkflowCheckpoint.from_dict(_at(where, value))
    field, key = where
    assert getattr(cp, field)[key] is value
    written = cp.to_dict()
    assert written[field][key] is value
    again = WorkflowCheckpoint.from_dict(written)
    assert getattr(again, field)[key] is value


# ------------------------------------------------------------ objects that fight back


def test_unhashable_new_outputs_item_is_a_format_error() -> None:
    error = _fail_building(new_outputs=([],))
    assert str(error) == (
        "checkpoint field 'new_outputs' must be a tuple of recorded step names, got tuple ([],)"
    )
    assert error.path == "new_outputs"


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"step_index": BadRepr()}, "step_index"),
        ({"run_id": BadRepr()}, "run_id"),
        ({"errors": {"c": BadRepr()}}, "errors.c"),
        ({"context_keys": (BadRepr(),)}, "context_keys[0]"),
        ({"new_outputs": (BadRepr(),)}, "new_outputs"),
        ({"outputs": BadRepr()}, "outputs"),
    ],
)
def test_a_value_whose_repr_raises_is_described_not_raised(
    changes: dict[str, Any], path: str
) -> None:
    error = _fail_building(**changes)
    assert error.path == path
    assert "<repr() raised Boom>" in str(error)
    assert error.__cause__ is None


def test_message_for_a_value_whose_repr_raises() -> None:
    error = _fail_building(step_index=BadRepr())
    assert str(error) == (
        "checkpoint field 'step_index' must be a non-negative int, "
        "got BadRepr <repr() raised Boom>"
    )


@pytest.mark.parametrize(
    ("changes", "message", "path"),
    [
        (
            {"context_keys": (BadHashStr("doc"),)},
            "checkpoint field 'context_keys' could not be read: reading it raised Boom",
            "context_keys",
        ),
        (
            {"context_keys": (RecursiveHashStr("doc"),)},
            "checkpoint field 'context_keys' is nested too deeply to read (RecursionError)",
            "context_keys",
        ),
        (
            {"outputs": BadMapping(Boom("no items"))},
            "checkpoint field 'outputs' could not be read: reading it raised Boom: no items",
            "outputs",
        ),
        (
            {"metadata": BadMapping(BadStr())},
            (
                "checkpoint field 'metadata' could not be read: reading it raised BadStr: "
                "<BadStr whose str() raised Boom>"
            ),
            "metadata",
        ),
        (
            {"progress": BadMapping(Boom())},
            "checkpoint field 'progress' could not be read: reading it raised Boom",
            "progress",
        ),
        (
            {"step_info": BadMapping(Boom())},
            "checkpoint field 'step_info' could not be read: reading it raised Boom",
            "step_info",
        ),
        (
            {"errors": BadMapping(Boom())},
            "checkpoint field 'errors' could not be read: reading it raised Boom",
            "errors",
        ),
        (
            {"outputs": {BadEqStr(""): 1}, "step_index": 1},
            "checkpoint field 'outputs' could not be read: reading it raised Boom",
            "outputs",
        ),
    ],
)
def test_failing_objects_are_reported_at_their_field(
    changes: dict[str, Any], message: str, path: str
) -> None:
    """Whatever the caller's objects raise while a field is read, the field is named."""
    error = _fail_building(**changes)
    assert str(error) == message
    assert error.path == path
    assert error.__cause__ is not None


def test_from_dict_reports_what_a_failing_mapping_raises() -> None:
    error = _fail_loading(BadMapping(Boom("no keys")))
    assert str(error) == "checkpoint data could not be read: reading it raised Boom: no keys"
    assert error.path == ""
    assert isinstance(error.__cause__, Boom)


def test_from_dict_reports_a_failing_cost_mapping_at_cost() -> None:
    for data in (_at(("cost",), BadMapping(Boom())), {**_at(("cost",), {}), "cost": None}):
        error = _fail_loading(data)
        assert error.path == "cost"
    legacy = {"step_index": 0, "outputs": {}, "cost": BadMapping(Boom())}
    assert _fail_loading(legacy).path == "cost"


def test_from_dict_reports_failing_keys_at_their_field() -> None:
    data = _at(("step_info",), {"a": valid()["step_info"]["a"]})
    data["outputs"] = {"a": 1, BadReprStr("b"): 2}
    error = _fail_loading(data)
    assert error.path == "step_info"
    assert str(error) == "checkpoint field 'step_info' could not be read: reading it raised Boom"


def test_a_04_dict_with_a_strange_extra_key_is_described() -> None:
    error = _fail_loading({"step_index": 0, "outputs": {}, "cost": {}, BadReprStr("x"): 1})
    assert error.path == "version"
    assert str(error).endswith("but this one also has <repr() raised Boom>)")


def test_keyboard_interrupt_is_never_converted() -> None:
    """Only Exception subclasses become format errors; interrupts propagate."""
    with pytest.raises(KeyboardInterrupt):
        WorkflowCheckpoint(**{**valid_fields(), "outputs": BadMapping(KeyboardInterrupt())})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties


def _deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


comparable_hostile = st.one_of(
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    st.integers(min_value=4_300, max_value=5_000).map(lambda digits: 10**digits),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), None, True, 0, -1, 1.5, ""]),
    st.builds(BadRepr),
    st.sampled_from(["a", "b", "c", "doc", "x"]).map(BadReprStr),
)
# BadEqStr cannot be generated as a dictionary key: hypothesis compares the keys it draws.
hashable_hostile = comparable_hostile | st.sampled_from(["", "a", "b", "c", "doc", "x"]).map(
    BadEqStr
)
hostile = st.one_of(
    hashable_hostile,
    st.sampled_from([1_000, 5_000, 20_000]).map(nested),
    st.sampled_from([1_000, 5_000]).map(_deep_dict),
    st.sampled_from([[], {}, set(), [[]], ([],), {1: "x"}, {None: 1}, {(1, 2): 3}]),
    st.sampled_from(["a", "doc"]).map(BadHashStr),
    st.sampled_from(["a", "doc"]).map(RecursiveHashStr),
    st.sampled_from([Boom("x"), BadStr()]).map(BadMapping),
    st.dictionaries(comparable_hostile, st.integers(), max_size=2),
    st.lists(hashable_hostile, max_size=2),
)

VALUE_PATHS: list[tuple[str | int, ...]] = [
    *[(key,) for key in valid()],
    *[("cost", key) for key in ("input_tokens", "output_tokens", "llm_calls")],
    ("outputs", "a"),
    ("errors", "c"),
    ("metadata", "job"),
    ("progress", "c"),
    ("step_info", "a"),
    ("step_info", "a", "version"),
    ("step_info", "a", "depends_on"),
    ("context_keys", 0),
]
KEY_CONTAINERS = ["outputs", "errors", "metadata", "progress", "step_info", "cost", ""]


def _contract(load: Any) -> WorkflowCheckpoint | None:
    """Call ``load``: it returns a checkpoint or raises CheckpointFormatError, nothing else."""
    failure: CheckpointFormatError | None = None
    try:
        cp = load()
    except CheckpointFormatError as error:
        failure = error
    if failure is not None:
        assert isinstance(failure.path, str)
        assert str(failure).startswith("checkpoint ")
        return None
    assert isinstance(cp, WorkflowCheckpoint)
    cp.to_dict()
    return cp


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALUE_PATHS), hostile)
def test_from_dict_on_hostile_values_anywhere(where: tuple[str | int, ...], value: Any) -> None:
    _contract(lambda: WorkflowCheckpoint.from_dict(_at(where, value)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KEY_CONTAINERS), hashable_hostile)
def test_from_dict_on_hostile_keys_anywhere(container: str, key: Any) -> None:
    data = valid()
    target = data[container] if container else data
    try:
        target[key] = 1
    except Boom:
        reject()  # a key equal to nothing cannot join a dict holding its equal
    _contract(lambda: WorkflowCheckpoint.from_dict(data))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile)
def test_from_dict_on_hostile_whole_values(value: Any) -> None:
    _contract(lambda: WorkflowCheckpoint.from_dict(value))
    legacy = {"step_index": value, "outputs": {}, "cost": {}}
    _contract(lambda: WorkflowCheckpoint.from_dict(legacy))


CONSTRUCTOR_PATHS: list[tuple[str | int, ...]] = [
    *[(key,) for key in valid_fields()],
    ("outputs", "a"),
    ("errors", "c"),
    ("metadata", "job"),
    ("progress", "c"),
    ("step_info", "a"),
    ("step_info", "a", "version"),
    ("step_info", "a", "depends_on"),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CONSTRUCTOR_PATHS), hostile, st.booleans())
def test_constructor_on_hostile_values_anywhere(
    where: tuple[str | int, ...], value: Any, as_item: bool
) -> None:
    fields = valid_fields()
    target: Any = fields
    for step in where[:-1]:
        target = target[step]
    target[where[-1]] = value
    if as_item and where in {("context_keys",), ("new_outputs",)}:
        fields[str(where[0])] = (value,)
    cp = _contract(lambda: WorkflowCheckpoint(**fields))
    if cp is not None:
        # Whatever the constructor accepts, the dict format carries.
        restored = _contract(lambda: WorkflowCheckpoint.from_dict(cp.to_dict()))
        assert restored is not None


def test_the_hostile_values_round_trip_when_plain() -> None:
    """Sanity check of the helpers: the valid dict loads and survives JSON."""
    cp = WorkflowCheckpoint.from_dict(valid())
    assert WorkflowCheckpoint.from_dict(json.loads(json.dumps(cp.to_dict()))) == cp
    assert WorkflowCheckpoint(**valid_fields()) == cp
