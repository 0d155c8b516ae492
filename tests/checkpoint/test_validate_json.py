"""``run(validate_json=True)``: every output must survive a JSON round trip, checked as recorded.

A violation fails its step with `CheckpointValueError` naming the step and the
path inside the output; it is handled like any other step failure: the steps
that completed are checkpointed, `WorkflowFailed` is raised.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointValueError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from executionkit._define._options import OnError

HINT = (
    "checkpoints hold plain data only: dict with str keys, list, str, int, finite float, "
    "bool, None"
)
FETCH = TokenUsage(1, 10, 1)
SCORE = TokenUsage(2, 20, 1)
SIBLING = TokenUsage(4, 40, 1)


def message(path: str, problem: str, step: str = "score") -> str:
    where = f" at {path}" if path else ""
    return f"output of step {step!r}{where}: {problem}; {HINT}"


def scoring_workflow(
    score_output: Any,
    calls: Counter[str],
    *,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
) -> Workflow:
    """fetch -> (score, sibling); after(score); sibling finishes after score returned."""
    scored = asyncio.Event()

    def fetch(ctx: Mapping[str, Any]) -> PatternResult[str]:
        calls["fetch"] += 1
        return PatternResult("doc", cost=FETCH)

    def score(ctx: Mapping[str, Any]) -> PatternResult[Any]:
        calls["score"] += 1
        scored.set()
        return PatternResult(score_output, cost=SCORE)

    async def sibling(ctx: Mapping[str, Any]) -> PatternResult[str]:
        calls["sibling"] += 1
        await scored.wait()
        return PatternResult("sib", cost=SIBLING)

    def after(ctx: Mapping[str, Any]) -> str:
        calls["after"] += 1
        return f"after {ctx['score']!r}"

    return Workflow(
        [
            Step("fetch", fetch),
            # inline: it sets an asyncio event, which only the loop's thread may do
            Step("score", score, ("fetch",), encode=encode, decode=decode, inline=True),
            Step("sibling", sibling, ("fetch",)),
            Step("after", after, ("score",)),
        ]
    )


def assert_json_safe(checkpoints: list[WorkflowCheckpoint]) -> None:
    """Every checkpoint handed to checkpoint_fn writes as JSON and reads back the same."""
    assert checkpoints
    for checkpoint in checkpoints:
        data = checkpoint.to_dict()
        # As the stores write it: UTF-8, no escapes (a lone surrogate would not encode).
        text = json.dumps(data, allow_nan=False, ensure_ascii=False).encode()
        assert WorkflowCheckpoint.from_dict(json.loads(text)).to_dict() == data


# --- violations ---------------------------------------------------------------------------


def _nan() -> tuple[Any, Any]:
    value = float("nan")
    return value, value


def _inf() -> tuple[Any, Any]:
    value = float("inf")
    return {"x": value}, value


def _negative_inf() -> tuple[Any, Any]:
    value = float("-inf")
    return [1.0, value], value


def _deep_nan() -> tuple[Any, Any]:
    value = float("nan")
    items: list[Any] = [{"value": 0}, {"value": 1.5}, {"value": "x"}, {"value": value}]
    return {"items": items, "z": "never reached"}, value


def _set() -> tuple[Any, Any]:
    tags = {"a"}
    return {"tags": tags}, tags


def _large_set() -> tuple[Any, Any]:
    numbers = set(range(30))
    return [numbers], numbers


def _tuple() -> tuple[Any, Any]:
    pair = (1, 2)
    return {"pair": pair}, pair


def _datetime() -> tuple[Any, Any]:
    when = datetime(2024, 1, 2, 3, 4, 5)  # noqa: DTZ001 - its repr is the point
    return [when], when


def _bytes() -> tuple[Any, Any]:
    raw = b"ab"
    return {"raw": raw}, raw


def _int_key() -> tuple[Any, Any]:
    key = 1
    return {"ok": 1, "counts": {"two": 2, key: "one"}}, key


def _none_key() -> tuple[Any, Any]:
    return {None: 1}, None


def _cyclic_list() -> tuple[Any, Any]:
    items: list[Any] = [1]
    items.append(items)
    return {"items": items}, items


def _cyclic_dict() -> tuple[Any, Any]:
    node: dict[str, Any] = {"name": "n"}
    node["self"] = node
    return node, node


def _indirect_cycle() -> tuple[Any, Any]:
    outer: dict[str, Any] = {"children": []}
    outer["children"].append({"parent": outer})
    return [outer], outer


def _lone_surrogate() -> tuple[Any, Any]:
    text = "caf\udce9"  # what os.fsdecode makes of the Latin-1 byte 0xe9
    return {"items": [{"title": "ok"}, {"title": text}]}, text


def _lone_surrogate_key() -> tuple[Any, Any]:
    key = "\ud800x"
    return {"counts": {"a": 1, key: 2}}, key


def _huge_int() -> tuple[Any, Any]:
    number = 10**5000
    return {"total": number}, number


VIOLATIONS = [
    pytest.param(_nan, "", "float('nan') is not valid JSON", id="nan"),
    pytest.param(_inf, "['x']", "float('inf') is not valid JSON", id="inf"),
    pytest.param(_negative_inf, "[1]", "float('-inf') is not valid JSON", id="negative-inf"),
    pytest.param(
        _deep_nan, "['items'][3]['value']", "float('nan') is not valid JSON", id="deep-path"
    ),
    pytest.param(_set, "['tags']", "{'a'} (set) is not plain data", id="set"),
    pytest.param(
        _large_set,
        "[0]",
        "{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16... (set) is not plain data",
        id="large-set-preview",
    ),
    # json.dumps writes a tuple as a list, which reads back unequal: rejected.
    pytest.param(_tuple, "['pair']", "(1, 2) (tuple) is not plain data", id="tuple"),
    pytest.param(
        _datetime,
        "[0]",
        "datetime.datetime(2024, 1, 2, 3, 4, 5) (datetime) is not plain data",
        id="datetime",
    ),
    pytest.param(_bytes, "['raw']", "b'ab' (bytes) is not plain data", id="bytes"),
    pytest.param(_int_key, "['counts']", "key 1 is not a str", id="int-key"),
    pytest.param(_none_key, "", "key None is not a str", id="none-key"),
    # The stores write UTF-8, which has no encoding for a lone surrogate.
    pytest.param(
        _lone_surrogate,
        "['items'][1]['title']",
        "str 'caf\\udce9' has a lone surrogate '\\udce9' at index 3, which UTF-8 cannot encode",
        id="lone-surrogate",
    ),
    pytest.param(
        _lone_surrogate_key,
        "['counts']",
        "key '\\ud800x' has a lone surrogate '\\ud800' at index 0, which UTF-8 cannot encode",
        id="lone-surrogate-key",
    ),
    # json.dumps cannot print an int past Python's digit limit.
    pytest.param(
        _huge_int,
        "['total']",
        "an int of 16,610 bits has more digits than Python prints "
        "(sys.get_int_max_str_digits()), so it is not valid JSON",
        id="huge-int",
    ),
    pytest.param(
        _cyclic_list,
        "['items'][1]",
        "a container that contains itself is not valid JSON",
        id="self-containing-list",
    ),
    pytest.param(
        _cyclic_dict,
        "['self']",
        "a container that contains itself is not valid JSON",
        id="self-containing-dict",
    ),
    pytest.param(
        _indirect_cycle,
        "[0]['children'][0]['parent']",
        "a container that contains itself is not valid JSON",
        id="indirect-cycle",
    ),
]


@pytest.mark.parametrize(("make", "path", "problem"), VIOLATIONS)
async def test_violation_fails_the_step_and_keeps_what_completed(
    make: Callable[[], tuple[Any, Any]], path: str, problem: str
) -> None:
    output, offending = make()
    calls: Counter[str] = Counter()
    saved: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        await scoring_workflow(output, calls).run(checkpoint_fn=saved.append, validate_json=True)
    failed = caught.value
    expected = message(path, problem)
    assert list(failed.errors) == ["score"]
    error = failed.errors["score"]
    assert type(error) is CheckpointValueError
    assert str(error) == expected
    assert error.path == path
    assert error.value is offending
    assert failed.__cause__ is error
    assert str(failed) == (
        f"workflow failed: step 'score' raised CheckpointValueError: {expected}. The "
        f"checkpoint (.checkpoint, seq=2) records 2 completed steps; resume from it to run "
        f"only what is left"
    )
    # The earlier batch and the same-batch sibling are recorded; the dependent never ran.
    assert calls == Counter(fetch=1, score=1, sibling=1)
    checkpoint = failed.checkpoint
    assert checkpoint is saved[-1]
    assert dict(checkpoint.outputs) == {"fetch": "doc", "sibling": "sib"}
    assert dict(checkpoint.errors) == {"score": f"CheckpointValueError: {expected}"}
    # The tokens score spent are counted although its output was refused.
    assert checkpoint.cost == FETCH + SCORE + SIBLING
    assert [list(cp.outputs) for cp in saved] == [["fetch"], ["fetch", "sibling"]]
    assert_json_safe(saved)


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


async def test_an_output_nested_deeper_than_python_recurses_fails_its_step() -> None:
    """Never a RecursionError: the error names the step and where the nesting got too deep."""
    deep = _nested(100_000)
    calls: Counter[str] = Counter()
    saved: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        await scoring_workflow({"tree": deep}, calls).run(
            checkpoint_fn=saved.append, validate_json=True
        )
    error = caught.value.errors["score"]
    assert type(error) is CheckpointValueError
    # How deep Python gets depends on the stack the check starts from.
    levels = error.path.count("[0]")
    assert error.path == "['tree']" + "[0]" * levels
    assert 100 < levels < 100_000
    problem = "nested too deeply to check or to store as JSON (RecursionError)"
    assert str(error) == (
        f"output of step 'score' at ['tree']{'[0]' * 7}... ({levels + 1:,} levels down): "
        f"{problem}; {HINT}"
    )
    found: Any = deep
    for _ in range(levels):
        found = found[0]
    assert error.value is found
    assert dict(caught.value.checkpoint.outputs) == {"fetch": "doc", "sibling": "sib"}
    assert_json_safe(saved)


async def test_deep_but_ordinary_nesting_passes() -> None:
    value = {"tree": _nested(200)}
    calls: Counter[str] = Counter()
    saved: list[WorkflowCheckpoint] = []
    await scoring_workflow(value, calls).run(checkpoint_fn=saved.append, validate_json=True)
    recorded = saved[-1].outputs["score"]
    assert recorded == value
    assert recorded is not value  # the checked copy


async def test_resume_after_a_violation_runs_only_the_failed_step_and_its_dependents() -> None:
    calls: Counter[str] = Counter()
    with pytest.raises(WorkflowFailed) as caught:
        await scoring_workflow({"v": float("nan")}, calls).run(validate_json=True)
    stored = json.loads(json.dumps(caught.value.checkpoint.to_dict()))
    calls.clear()
    result = await scoring_workflow({"v": 0.5}, calls).run(
        resume_from=WorkflowCheckpoint.from_dict(stored), validate_json=True
    )
    assert calls == Counter(score=1, after=1)
    assert dict(result.outputs) == {
        "fetch": "doc",
        "score": {"v": 0.5},
        "sibling": "sib",
        "after": "after {'v': 0.5}",
    }
    assert result.cost == FETCH + SCORE + SIBLING + SCORE


async def test_violation_in_the_first_batch_checkpoints_no_outputs() -> None:
    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("score", lambda ctx: PatternResult([(1,)], cost=SCORE))])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(checkpoint_fn=saved.append, validate_json=True)
    expected = message("[0]", "(1,) (tuple) is not plain data")
    assert str(caught.value.errors["score"]) == expected
    assert [cp.to_dict()["outputs"] for cp in saved] == [{}]
    assert saved[0].step_index == 0
    assert saved[0].cost == SCORE
    assert dict(saved[0].errors) == {"score": f"CheckpointValueError: {expected}"}
    assert_json_safe(saved)


@pytest.mark.parametrize("on_error", ["finish", "continue"])
async def test_violation_follows_the_on_error_policy(on_error: OnError) -> None:
    """Under "continue" the branch that does not depend on the failed step runs on."""
    calls: Counter[str] = Counter()

    def counted(name: str, value: Any) -> Callable[[Mapping[str, Any]], Any]:
        def run(ctx: Mapping[str, Any]) -> Any:
            calls[name] += 1
            return value

        return run

    workflow = Workflow(
        [
            Step("fetch", counted("fetch", "doc")),
            Step("score", counted("score", {"bad": {1, 2}}), ("fetch",)),
            Step("sibling", counted("sibling", "sib"), ("fetch",)),
            Step("child", counted("child", "kid"), ("sibling",)),
            Step("after", counted("after", "x"), ("score",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(checkpoint_fn=saved.append, validate_json=True, on_error=on_error)
    assert list(caught.value.errors) == ["score"]
    recorded = ["fetch", "sibling"] if on_error == "finish" else ["fetch", "sibling", "child"]
    assert list(caught.value.checkpoint.outputs) == recorded
    assert calls == Counter(dict.fromkeys(["score", *recorded], 1))
    assert_json_safe(saved)


async def test_violation_is_not_retried() -> None:
    """The output is refused after the step returned: no attempt is repeated for it."""
    calls: Counter[str] = Counter()

    def score(ctx: Mapping[str, Any]) -> float:
        calls["score"] += 1
        return math.nan

    workflow = Workflow([Step("score", score, retries=3, retry_delay=0)])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(validate_json=True)
    assert str(caught.value.errors["score"]) == message("", "float('nan') is not valid JSON")
    assert calls == Counter(score=1)


# --- valid outputs ------------------------------------------------------------------------

_shared = [1, "two"]

VALID = [
    pytest.param(None, id="none"),
    pytest.param(True, id="true"),
    pytest.param(False, id="false"),
    pytest.param(0, id="zero"),
    pytest.param(2**200, id="big-int"),
    pytest.param(-(2**64) - 1, id="big-negative-int"),
    pytest.param(1.5, id="float"),
    pytest.param(1e308, id="huge-float"),
    pytest.param(5e-324, id="tiny-float"),
    pytest.param(-0.0, id="negative-zero"),
    pytest.param("", id="empty-str"),
    pytest.param('ünïcødé ✓ 𝄞 — 中文 \u0000 \n "quoted" \\', id="unicode"),
    pytest.param([], id="empty-list"),
    pytest.param({}, id="empty-dict"),
    pytest.param({"": "", "ключ": "значение", "🔑": ["🎉"]}, id="unicode-keys"),
    pytest.param(
        {"items": [{"value": 1, "tags": ["a", "b"]}, {"value": None, "ok": True}], "n": -3},
        id="nested",
    ),
    # The same list twice is not a cycle: JSON writes it twice and reads back equal.
    pytest.param({"a": _shared, "b": [_shared, _shared]}, id="shared-reference"),
    pytest.param([[[[[[[[[[[]]]]]]]]]]], id="deeply-nested"),
]


@pytest.mark.parametrize("value", VALID)
async def test_plain_outputs_of_every_json_type_pass(value: Any) -> None:
    calls: Counter[str] = Counter()
    saved: list[WorkflowCheckpoint] = []
    result = await scoring_workflow(value, calls).run(
        checkpoint_fn=saved.append, validate_json=True
    )
    assert result.outputs["score"] is value
    assert calls == Counter(fetch=1, score=1, sibling=1, after=1)
    assert_json_safe(saved)
    stored = json.loads(json.dumps(saved[-1].to_dict()))["outputs"]["score"]
    assert stored == value
    assert type(stored) is type(value)
    if isinstance(value, float):
        assert math.copysign(1.0, stored) == math.copysign(1.0, value)


async def test_by_default_outputs_are_not_checked() -> None:
    """Without validate_json a set reaches the checkpoint; json.dumps then fails."""
    calls: Counter[str] = Counter()
    saved: list[WorkflowCheckpoint] = []
    result = await scoring_workflow({"a"}, calls).run(checkpoint_fn=saved.append)
    assert result.outputs["score"] == {"a"}
    assert saved[-1].outputs["score"] == {"a"}
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        json.dumps(saved[-1].to_dict())


# --- with encode --------------------------------------------------------------------------


async def test_the_encoded_form_is_what_is_validated() -> None:
    """A datetime encoded as an ISO string passes; ctx and the result keep the datetime."""
    when = datetime(2024, 5, 17, 12, 30, tzinfo=UTC)
    calls: Counter[str] = Counter()
    saved: list[WorkflowCheckpoint] = []
    workflow = scoring_workflow(
        when, calls, encode=datetime.isoformat, decode=datetime.fromisoformat
    )
    result = await workflow.run(checkpoint_fn=saved.append, validate_json=True)
    assert result.outputs["score"] is when
    assert result.outputs["after"] == f"after {when!r}"
    assert saved[-1].outputs["score"] == "2024-05-17T12:30:00+00:00"
    assert_json_safe(saved)


async def test_a_non_plain_output_with_a_plain_encoding_passes() -> None:
    calls: Counter[str] = Counter()
    saved: list[WorkflowCheckpoint] = []
    workflow = scoring_workflow({"b", "a"}, calls, encode=sorted, decode=set)
    result = await workflow.run(checkpoint_fn=saved.append, validate_json=True)
    assert result.outputs["score"] == {"a", "b"}
    # The dependent step saw the live set itself (its repr order follows the hash seed).
    assert result.outputs["after"] == f"after {result.outputs['score']!r}"
    assert saved[-1].outputs["score"] == ["a", "b"]
    assert_json_safe(saved)


@pytest.mark.parametrize(
    ("encode", "path", "problem"),
    [
        pytest.param(lambda v: {"a"}, "", "{'a'} (set) is not plain data", id="set"),
        pytest.param(
            lambda v: {"value": [v]}, "['value'][0]", "float('nan') is not valid JSON", id="nan"
        ),
        pytest.param(lambda v: (v,), "", "(nan,) (tuple) is not plain data", id="tuple"),
    ],
)
async def test_an_encoding_that_is_not_plain_fails(
    encode: Callable[[Any], Any], path: str, problem: str
) -> None:
    calls: Counter[str] = Counter()
    workflow = scoring_workflow(math.nan, calls, encode=encode, decode=lambda v: v)
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(validate_json=True)
    error = caught.value.errors["score"]
    assert isinstance(error, CheckpointValueError)
    assert str(error) == message(path, problem)
    assert error.path == path
    assert list(caught.value.checkpoint.outputs) == ["fetch", "sibling"]


# --- the argument ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0], ids=repr)
async def test_validate_json_must_be_a_bool(value: Any) -> None:
    calls: Counter[str] = Counter()
    with pytest.raises(
        RunArgumentError, match=f"^{re.escape(f'validate_json must be a bool, got {value!r}')}$"
    ):
        await scoring_workflow("ok", calls).run(validate_json=value)
    assert calls == Counter()
