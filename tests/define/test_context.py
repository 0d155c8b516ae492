"""The read-only ``ctx`` a step receives: exactly its initial context and ancestors."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import pytest

from executionkit import (
    ContextKeyError,
    ExecutionKitError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit._define._context import ContextView
from executionkit._define._graph import Graph

INITIAL = {"model": "m-1", "api_key": "s3cret-value"}

# Declared out of dependency order on purpose: e depends on d and c, d on b, b on a.
SPEC: dict[str, tuple[str, ...]] = {
    "c": (),
    "a": (),
    "b": ("a",),
    "d": ("b",),
    "e": ("d", "c"),
}

EXPECTED_KEYS = {
    "c": ["model", "api_key"],
    "a": ["model", "api_key"],
    "b": ["model", "api_key", "a"],
    "d": ["model", "api_key", "a", "b"],
    "e": ["model", "api_key", "c", "a", "b", "d"],
}

Probe = Callable[[str, Mapping[str, Any]], None]


def _workflow(probe: Probe, spec: Mapping[str, tuple[str, ...]] = SPEC) -> Workflow:
    def make(name: str) -> Callable[[Mapping[str, Any]], str]:
        def run(ctx: Mapping[str, Any]) -> str:
            probe(name, ctx)
            return f"out-{name}"

        return run

    return Workflow([Step(name, make(name), depends_on=deps) for name, deps in spec.items()])


def _expected_dict(name: str) -> dict[str, Any]:
    return {key: INITIAL.get(key, f"out-{key}") for key in EXPECTED_KEYS[name]}


# --- Contents ----------------------------------------------------------------------------


async def test_ctx_holds_exactly_initial_context_and_ancestor_outputs() -> None:
    seen: dict[str, dict[str, Any]] = {}

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        seen[name] = {
            "dict": dict(ctx),
            "len": len(ctx),
            "list": list(ctx),
            "keys": list(ctx.keys()),
        }

    result = await _workflow(probe).run(INITIAL)
    assert set(seen) == set(SPEC)
    for name, observed in seen.items():
        assert observed["dict"] == _expected_dict(name), name
        assert observed["len"] == len(EXPECTED_KEYS[name]), name
        assert observed["list"] == EXPECTED_KEYS[name], name
        assert observed["keys"] == EXPECTED_KEYS[name], name
    assert dict(result.outputs) == {name: f"out-{name}" for name in SPEC}


async def test_ctx_membership_and_get() -> None:
    seen: dict[str, Any] = {}

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        if name != "d":
            return
        seen["in"] = {key: key in ctx for key in ("model", "api_key", "a", "b", "c", "d", "e")}
        odd: list[object] = [5, None, "", "nope", ("a",)]
        seen["in_odd"] = [key in ctx for key in odd]
        seen["get"] = [
            ctx.get("a"),
            ctx.get("b", "dflt"),
            ctx.get("model", "dflt"),
            ctx.get("c", "dflt"),  # completed earlier, but not an ancestor
            ctx.get("e"),
            ctx.get("nope", "dflt"),
            ctx.get("d", "dflt"),  # the step itself
        ]
        seen["values"] = list(ctx.values())
        seen["items"] = list(ctx.items())

    await _workflow(probe).run(INITIAL)
    assert seen["in"] == {
        "model": True,
        "api_key": True,
        "a": True,
        "b": True,
        "c": False,
        "d": False,
        "e": False,
    }
    assert seen["in_odd"] == [False, False, False, False, False]
    assert seen["get"] == ["out-a", "out-b", "m-1", "dflt", None, "dflt", "dflt"]
    assert seen["values"] == ["m-1", "s3cret-value", "out-a", "out-b"]
    assert seen["items"] == [
        ("model", "m-1"),
        ("api_key", "s3cret-value"),
        ("a", "out-a"),
        ("b", "out-b"),
    ]


async def test_ctx_without_initial_context_holds_only_ancestors() -> None:
    seen: dict[str, dict[str, Any]] = {}

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        seen[name] = dict(ctx)

    await _workflow(probe).run()
    assert seen == {
        "c": {},
        "a": {},
        "b": {"a": "out-a"},
        "d": {"a": "out-a", "b": "out-b"},
        "e": {"c": "out-c", "a": "out-a", "b": "out-b", "d": "out-d"},
    }


async def test_ctx_of_a_sibling_in_the_same_batch_is_hidden() -> None:
    seen: dict[str, list[str]] = {}

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        seen[name] = list(ctx)

    spec = {"root": (), "left": ("root",), "right": ("root",), "sink": ("right",)}
    await _workflow(probe, spec).run()
    assert seen == {"root": [], "left": ["root"], "right": ["root"], "sink": ["root", "right"]}


# --- Missing keys ------------------------------------------------------------------------


def _failed_read(key: object, reader: str = "d") -> ContextKeyError:
    """Run the workflow with step ``reader`` reading ``key``; return the error it raised."""

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        if name == reader:
            ctx[key]  # type: ignore[index]

    with pytest.raises(WorkflowFailed) as info:
        _workflow(probe).run_sync(INITIAL)
    assert list(info.value.errors) == [reader]
    error = info.value.errors[reader]
    assert isinstance(error, ContextKeyError)
    assert info.value.__cause__ is error
    return error


def test_reading_a_step_that_is_not_an_ancestor() -> None:
    message = (
        "step 'd' cannot read 'c' from ctx: 'c' is a step but not one 'd' depends on; "
        "add 'c' to depends_on of step 'd'"
    )
    error = _failed_read("c")
    assert str(error) == message
    assert isinstance(error, KeyError)
    assert isinstance(error, ExecutionKitError)
    assert error.step == "d"
    assert error.key == "c"


def test_reading_a_later_step_names_it_too() -> None:
    error = _failed_read("e", reader="b")
    assert str(error) == (
        "step 'b' cannot read 'e' from ctx: 'e' is a step but not one 'b' depends on; "
        "add 'e' to depends_on of step 'b'"
    )
    assert (error.step, error.key) == ("b", "e")


def test_reading_an_unknown_key() -> None:
    error = _failed_read("nope")
    assert str(error) == (
        "step 'd' has no 'nope' in ctx; ctx holds the initial context keys "
        "['model', 'api_key'] and the outputs of the steps it depends on ['a', 'b']"
    )
    assert (error.step, error.key) == ("d", "nope")
    assert isinstance(error, KeyError)


@pytest.mark.parametrize(
    ("key", "reader", "suggestion"),
    [
        ("modle", "d", "model"),
        ("api-key", "a", "api_key"),
        ("bb", "d", "b"),
        ("ee", "d", "e"),
    ],
    ids=["initial-key", "initial-key-punctuation", "ancestor", "not-an-ancestor"],
)
def test_reading_a_misspelt_key_suggests_the_closest_name(
    key: str, reader: str, suggestion: str
) -> None:
    """Initial-context keys and step names are suggested; reading a step names depends_on."""
    error = _failed_read(key, reader=reader)
    assert str(error).endswith(f"; did you mean {suggestion!r}?")
    deps = "['a', 'b']" if reader == "d" else "[]"
    assert str(error) == (
        f"step {reader!r} has no {key!r} in ctx; ctx holds the initial context keys "
        f"['model', 'api_key'] and the outputs of the steps it depends on {deps}; "
        f"did you mean {suggestion!r}?"
    )


def test_a_step_reading_its_own_misspelt_name_is_not_pointed_at_itself() -> None:
    error = _failed_read("dd", reader="d")
    assert str(error) == (
        "step 'd' has no 'dd' in ctx; ctx holds the initial context keys "
        "['model', 'api_key'] and the outputs of the steps it depends on ['a', 'b']"
    )


def test_reading_a_non_str_key() -> None:
    error = _failed_read(5, reader="a")
    assert str(error) == (
        "step 'a' has no 5 in ctx; ctx holds the initial context keys "
        "['model', 'api_key'] and the outputs of the steps it depends on []"
    )
    assert error.key == 5


def test_failed_read_is_reported_by_workflow_failed_and_its_checkpoint() -> None:
    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        if name == "d":
            ctx["c"]

    checkpoints: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as info:
        _workflow(probe).run_sync(INITIAL, checkpoint_fn=checkpoints.append)
    detail = (
        "step 'd' cannot read 'c' from ctx: 'c' is a step but not one 'd' depends on; "
        "add 'c' to depends_on of step 'd'"
    )
    assert str(info.value) == (
        f"workflow failed: step 'd' raised ContextKeyError: {detail}. The checkpoint "
        "(.checkpoint, seq=3) records 3 completed steps; resume from it to run only "
        "what is left"
    )
    assert info.value.checkpoint is checkpoints[-1]
    assert dict(info.value.checkpoint.errors) == {"d": f"ContextKeyError: {detail}"}
    assert list(info.value.checkpoint.outputs) == ["c", "a", "b"]


def _context(initial: Mapping[str, Any], spec: Mapping[str, tuple[str, ...]], step: str) -> Any:
    graph = Graph(Step(name, print, depends_on=deps) for name, deps in spec.items())
    outputs = {name: f"out-{name}" for name in spec}
    return ContextView(graph, graph.index[step], initial, outputs)


@pytest.mark.parametrize(
    ("n_initial", "n_deps", "initial_text", "deps_text"),
    [
        (0, 0, "[]", "[]"),
        (
            8,
            8,
            "['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7']",
            "['s0', 's1', 's2', 's3', 's4', 's5', 's6', 's7']",
        ),
        (
            9,
            10,
            "['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', ... 1 more]",
            "['s0', 's1', 's2', 's3', 's4', 's5', 's6', 's7', ... 2 more]",
        ),
        (
            12,
            3,
            "['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', ... 4 more]",
            "['s0', 's1', 's2']",
        ),
    ],
)
def test_unknown_key_message_truncates_long_lists(
    n_initial: int, n_deps: int, initial_text: str, deps_text: str
) -> None:
    initial = {f"k{i}": i for i in range(n_initial)}
    spec: dict[str, tuple[str, ...]] = {f"s{i}": () for i in range(n_deps)}
    spec["other"] = ()
    spec["reader"] = tuple(f"s{i}" for i in range(n_deps))
    ctx = _context(initial, spec, "reader")
    message = (
        f"step 'reader' has no 'missing' in ctx; ctx holds the initial context keys "
        f"{initial_text} and the outputs of the steps it depends on {deps_text}"
    )
    with pytest.raises(ContextKeyError, match=re.escape(message)) as info:
        ctx["missing"]
    assert str(info.value) == message
    assert (info.value.step, info.value.key) == ("reader", "missing")
    with pytest.raises(ContextKeyError) as not_ancestor:
        ctx["other"]
    assert str(not_ancestor.value) == (
        "step 'reader' cannot read 'other' from ctx: 'other' is a step but not one "
        "'reader' depends on; add 'other' to depends_on of step 'reader'"
    )


def test_unknown_key_message_lists_transitive_ancestors_in_declaration_order() -> None:
    ctx = _context({}, {"z": (), "y": ("z",), "x": ("y",), "w": ()}, "x")
    with pytest.raises(ContextKeyError) as info:
        ctx["w2"]
    assert str(info.value) == (
        "step 'x' has no 'w2' in ctx; ctx holds the initial context keys [] and the "
        "outputs of the steps it depends on ['z', 'y']; did you mean 'w'?"
    )


# --- Read-only ---------------------------------------------------------------------------


async def test_ctx_is_read_only() -> None:
    seen: dict[str, Any] = {}

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        if name != "d":
            return
        writable: Any = ctx
        try:
            writable["x"] = 1
        except TypeError as exc:
            seen["set"] = str(exc)
        try:
            writable["a"] = "overwritten"
        except TypeError as exc:
            seen["set_existing"] = str(exc)
        seen["mutable"] = isinstance(ctx, MutableMapping)
        seen["a_after"] = ctx["a"]

    result = await _workflow(probe).run(INITIAL)
    assert seen == {
        "set": (
            "ctx of step 'd' is read-only; return the value from the step instead of "
            "storing 'x' in ctx"
        ),
        "set_existing": (
            "ctx of step 'd' is read-only; return the value from the step instead of "
            "storing 'a' in ctx"
        ),
        "mutable": False,
        "a_after": "out-a",
    }
    assert result.outputs["a"] == "out-a"
    assert "x" not in result.outputs


async def test_ctx_refuses_item_deletion_with_a_type_error() -> None:
    seen: dict[str, BaseException] = {}

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        if name == "d":
            writable: Any = ctx
            try:
                del writable["a"]
            except Exception as exc:  # noqa: BLE001 - the type is what is checked
                seen["del"] = exc

    await _workflow(probe).run(INITIAL)
    # A read-only mapping refuses deletion like assignment, with a TypeError naming
    # the step (as MappingProxyType does), not an AttributeError.
    assert isinstance(seen["del"], TypeError), repr(seen["del"])
    assert "ctx of step 'd' is read-only" in str(seen["del"])


def test_setitem_message_is_pinned() -> None:
    ctx = _context({"k": 1}, {"a": (), "b": ("a",)}, "b")
    with pytest.raises(
        TypeError,
        match=re.escape(
            "ctx of step 'b' is read-only; return the value from the step instead of "
            "storing 'x' in ctx"
        ),
    ):
        ctx["x"] = 1
    assert dict(ctx) == {"k": 1, "a": "out-a"}


async def test_repr_shows_keys_never_values() -> None:
    seen: dict[str, str] = {}

    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        seen[name] = repr(ctx)

    await _workflow(probe).run(INITIAL)
    assert seen["d"] == "<ctx of step 'd': ['model', 'api_key', 'a', 'b']>"
    assert seen["c"] == "<ctx of step 'c': ['model', 'api_key']>"
    for text in seen.values():
        assert "s3cret-value" not in text
        assert "m-1" not in text
        assert "out-" not in text


# --- Same ctx after resume ---------------------------------------------------------------


def _capture(seen: dict[str, tuple[list[str], dict[str, Any]]]) -> Probe:
    def probe(name: str, ctx: Mapping[str, Any]) -> None:
        seen[name] = (list(ctx), dict(ctx))

    return probe


def _json_round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


async def test_resumed_steps_see_the_same_ctx() -> None:
    baseline: dict[str, tuple[list[str], dict[str, Any]]] = {}
    checkpoints: list[WorkflowCheckpoint] = []
    await _workflow(_capture(baseline)).run(INITIAL, checkpoint_fn=checkpoints.append)
    assert len(checkpoints) == 4
    for checkpoint in checkpoints:
        resumed: dict[str, tuple[list[str], dict[str, Any]]] = {}
        await _workflow(_capture(resumed)).run(
            dict(INITIAL), resume_from=_json_round_trip(checkpoint)
        )
        assert set(resumed) == set(SPEC) - set(checkpoint.outputs)
        for name, observed in resumed.items():
            assert observed == baseline[name], (checkpoint.seq, name)


async def test_failed_step_sees_the_same_ctx_when_resumed() -> None:
    baseline: dict[str, tuple[list[str], dict[str, Any]]] = {}
    await _workflow(_capture(baseline)).run(INITIAL)

    def failing(name: str, ctx: Mapping[str, Any]) -> None:
        if name == "d":
            msg = "transient"
            raise RuntimeError(msg)

    with pytest.raises(WorkflowFailed) as info:
        await _workflow(failing).run(INITIAL)
    resumed: dict[str, tuple[list[str], dict[str, Any]]] = {}
    await _workflow(_capture(resumed)).run(
        INITIAL, resume_from=_json_round_trip(info.value.checkpoint)
    )
    assert set(resumed) == {"d", "e"}
    assert resumed["d"] == baseline["d"]
    assert resumed["e"] == baseline["e"]


async def test_steps_resumed_from_a_0_4_dict_see_the_same_ctx() -> None:
    baseline: dict[str, tuple[list[str], dict[str, Any]]] = {}
    checkpoints: list[WorkflowCheckpoint] = []
    await _workflow(_capture(baseline)).run(INITIAL, checkpoint_fn=checkpoints.append)
    recorded = checkpoints[1]  # after c, a and b
    legacy = {
        "step_index": recorded.step_index,
        "outputs": {**INITIAL, **recorded.outputs},
        "cost": {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0},
    }
    resumed: dict[str, tuple[list[str], dict[str, Any]]] = {}
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(json.dumps(legacy)))
    await _workflow(_capture(resumed)).run(resume_from=checkpoint)
    assert set(resumed) == {"d", "e"}
    assert resumed["d"][1] == baseline["d"][1]
    assert resumed["e"][1] == baseline["e"][1]
