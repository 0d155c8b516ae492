"""`plain_copy`: what ``validate_json`` and ``save_progress`` accept is what the stores can write.

The stores write UTF-8 JSON: a lone surrogate cannot be encoded, an int past
Python's digit limit cannot be printed, and nesting deeper than Python recurses
cannot be encoded either. Each is a `CheckpointValueError` naming the path, never
a `UnicodeEncodeError`, `ValueError` or `RecursionError` later.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import CheckpointValueError, Step, Workflow, WorkflowCheckpoint, current_step
from executionkit._plain import plain_copy

if TYPE_CHECKING:
    from collections.abc import Mapping

HINT = (
    "checkpoints hold plain data only: dict with str keys, list, str, int, finite float, "
    "bool, None"
)
WHAT = "output of step 's'"


def refused(value: object) -> CheckpointValueError:
    with pytest.raises(CheckpointValueError) as caught:
        plain_copy(value, WHAT)
    return caught.value


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def stores_can_write(value: object) -> bool:
    """Whether ``value`` goes through the stores' encoding and reads back equal."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return bool(json.loads(text) == value)


@pytest.mark.parametrize(
    ("value", "path", "offending", "problem"),
    [
        (
            "caf\udce9",
            "",
            "caf\udce9",
            (
                "str 'caf\\udce9' has a lone surrogate '\\udce9' at index 3, "
                "which UTF-8 cannot encode"
            ),
        ),
        (
            {"a": ["ok", "\ud83d\ude00"]},
            "['a'][1]",
            "\ud83d\ude00",
            (
                "str '\\ud83d\\ude00' has a lone surrogate '\\ud83d' at index 0, "
                "which UTF-8 cannot encode"
            ),
        ),
        (
            [{"é": 1, "x\udfff": 2}],
            "[0]",
            "x\udfff",
            "key 'x\\udfff' has a lone surrogate '\\udfff' at index 1, which UTF-8 cannot encode",
        ),
        (
            {"n": [-(10**4300)]},
            "['n'][0]",
            -(10**4300),
            (
                "an int of 14,285 bits has more digits than Python prints "
                "(sys.get_int_max_str_digits()), so it is not valid JSON"
            ),
        ),
    ],
    ids=["str", "surrogate-pair-halves", "key", "huge-int"],
)
def test_values_the_stores_cannot_write_are_refused(
    value: object, path: str, offending: object, problem: str
) -> None:
    error = refused(value)
    where = f" at {path}" if path else ""
    assert str(error) == f"{WHAT}{where}: {problem}; {HINT}"
    assert error.path == path
    assert error.value == offending
    with pytest.raises((UnicodeEncodeError, ValueError)):
        stores_can_write(value)


@pytest.mark.parametrize(
    "value",
    [
        "café ☕ 😀 \u0000 \ufffd",
        {"naïve": ["ünïcödé", "\U0010ffff"]},
        10**4299,
        -(10**4299),
        2**2001,
        {"deep": nested(200)},
    ],
    ids=["non-ascii", "non-ascii-keys", "4300-digits", "negative", "past-the-quick-check", "deep"],
)
def test_values_the_stores_can_write_are_copied(value: object) -> None:
    assert stores_can_write(value)
    copied = plain_copy(value, WHAT)
    assert copied == value


def test_the_int_check_follows_the_interpreters_digit_limit() -> None:
    big = 10**5000
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # unlimited: json.dumps prints it
    try:
        assert plain_copy([big], WHAT) == [big]
        sys.set_int_max_str_digits(640)
        assert refused(10**700).path == ""
        assert plain_copy(10**600, WHAT) == 10**600
    finally:
        sys.set_int_max_str_digits(before)


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_nesting_deeper_than_python_recurses_is_refused_with_its_path(depth: int) -> None:
    value = {"tree": nested(depth)}
    error = refused(value)
    levels = error.path.count("[0]")
    assert error.path == "['tree']" + "[0]" * levels
    assert str(error) == (
        f"{WHAT} at ['tree'][0][0][0][0][0][0][0]... ({levels + 1:,} levels down): "
        f"nested too deeply to check or to store as JSON (RecursionError); {HINT}"
    )
    found: Any = value["tree"]
    for _ in range(levels):
        found = found[0]
    assert error.value is found


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError


def test_a_value_whose_repr_raises_is_described() -> None:
    error = refused({"x": BadRepr()})
    assert (
        str(error)
        == f"{WHAT} at ['x']: <repr() raised RuntimeError> (BadRepr) is not plain data; {HINT}"
    )


def test_a_short_path_is_shown_whole() -> None:
    value: Any = float("nan")
    for key in ("a", "b", "c", "d", "e", "f", "g"):
        value = {key: value}
    error = refused([value])
    assert error.path == "[0]['g']['f']['e']['d']['c']['b']['a']"
    assert str(error).startswith(f"{WHAT} at [0]['g']['f']['e']['d']['c']['b']['a']: ")


async def test_save_progress_refuses_a_lone_surrogate() -> None:
    errors: list[CheckpointValueError] = []

    async def step(ctx: Mapping[str, Any]) -> str:
        context = current_step()
        await context.save_progress({"page": 1})
        try:
            context.save_progress({"page": 2, "title": "caf\udce9"})
        except CheckpointValueError as exc:
            errors.append(exc)
        return "done"

    saved: list[WorkflowCheckpoint] = []
    await Workflow([Step("x", step)]).run(checkpoint_fn=saved.append)
    (error,) = errors
    assert str(error) == (
        "progress of step 'x' at ['title']: str 'caf\\udce9' has a lone surrogate '\\udce9' "
        f"at index 3, which UTF-8 cannot encode; {HINT}"
    )
    assert error.path == "['title']"
    assert [dict(cp.progress) for cp in saved] == [{"x": {"page": 1}}, {}]
