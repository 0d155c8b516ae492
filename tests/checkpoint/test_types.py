"""Tests for the value types `TokenUsage` and `PatternResult`."""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType
from typing import Any

import pytest

import executionkit
import executionkit.types
from executionkit import PatternResult, TokenUsage

# --------------------------------------------------------------------------- TokenUsage


def test_token_usage_defaults_are_zero() -> None:
    usage = TokenUsage()
    assert (usage.input_tokens, usage.output_tokens, usage.llm_calls) == (0, 0, 0)
    assert usage.total_tokens == 0


def test_token_usage_positional_and_keyword_construction_agree() -> None:
    assert TokenUsage(1, 2, 3) == TokenUsage(input_tokens=1, output_tokens=2, llm_calls=3)
    assert TokenUsage(1, 2, 3) != TokenUsage(1, 2, 4)


@pytest.mark.parametrize("field_name", ["input_tokens", "output_tokens", "llm_calls"])
def test_token_usage_is_frozen(field_name: str) -> None:
    usage = TokenUsage(1, 2, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(usage, field_name, 9)
    assert usage == TokenUsage(1, 2, 3)


def test_token_usage_rejects_new_attributes_with_attribute_error() -> None:
    """Assigning a non-field attribute is an AttributeError, like any frozen dataclass."""
    usage = TokenUsage()
    with pytest.raises(AttributeError):
        usage.extra = 1  # type: ignore[attr-defined]


def test_token_usage_is_hashable_by_value() -> None:
    assert len({TokenUsage(1, 2, 3), TokenUsage(1, 2, 3), TokenUsage()}) == 2


def test_token_usage_add_is_field_wise() -> None:
    assert TokenUsage(1, 2, 3) + TokenUsage(10, 20, 30) == TokenUsage(11, 22, 33)


def test_token_usage_sub_is_field_wise_and_may_go_negative() -> None:
    assert TokenUsage(10, 20, 30) - TokenUsage(1, 2, 3) == TokenUsage(9, 18, 27)
    assert TokenUsage(1, 2, 3) - TokenUsage(2, 2, 2) == TokenUsage(-1, 0, 1)


def test_token_usage_add_does_not_mutate_operands() -> None:
    left, right = TokenUsage(1, 1, 1), TokenUsage(2, 2, 2)
    total = left + right
    assert total is not left
    assert total is not right
    assert (left, right) == (TokenUsage(1, 1, 1), TokenUsage(2, 2, 2))


def test_token_usage_sum_with_start() -> None:
    parts = [TokenUsage(1, 2, 1), TokenUsage(3, 4, 1), TokenUsage(5, 6, 1)]
    assert sum(parts, TokenUsage()) == TokenUsage(9, 12, 3)
    assert sum([], TokenUsage()) == TokenUsage()


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            lambda usage, other: usage + other,
            "unsupported operand type(s) for +: 'TokenUsage' and 'int'",
        ),
        (
            lambda usage, other: other + usage,
            "unsupported operand type(s) for +: 'int' and 'TokenUsage'",
        ),
        (
            lambda usage, other: usage - other,
            "unsupported operand type(s) for -: 'TokenUsage' and 'int'",
        ),
    ],
    ids=["add", "radd", "sub"],
)
def test_token_usage_arithmetic_with_other_types_raises_type_error(
    expression: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(message)):
        expression(TokenUsage(1, 2, 3), 1)


def test_token_usage_sum_without_start_raises_type_error() -> None:
    parts: list[Any] = [TokenUsage(1, 2, 3)]
    with pytest.raises(TypeError, match=re.escape("'int' and 'TokenUsage'")):
        sum(parts)


@pytest.mark.parametrize("field_name", ["input_tokens", "output_tokens", "llm_calls"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [(1.5, "float 1.5"), ("1", "str '1'"), (True, "bool True"), (None, "NoneType None")],
)
def test_token_usage_rejects_non_int_fields(field_name: str, value: object, shown: str) -> None:
    fields: dict[str, Any] = {field_name: value}
    with pytest.raises(TypeError) as info:
        TokenUsage(**fields)
    assert str(info.value) == f"TokenUsage.{field_name} must be an int, got {shown}"


def test_token_usage_total_tokens_is_input_plus_output() -> None:
    assert TokenUsage(input_tokens=7, output_tokens=5, llm_calls=100).total_tokens == 12


# ------------------------------------------------------------------------ PatternResult


def test_pattern_result_defaults() -> None:
    result = PatternResult("text")
    assert result.value == "text"
    assert result.score is None
    assert result.cost == TokenUsage()
    assert isinstance(result.metadata, MappingProxyType)
    assert dict(result.metadata) == {}


def test_pattern_result_is_generic_at_runtime() -> None:
    result = PatternResult[int](3)
    assert isinstance(result, PatternResult)
    assert result.value == 3
    assert result == PatternResult(3)


def test_pattern_result_generic_alias_accepts_all_fields() -> None:
    result = PatternResult[str]("x", score=0.5, cost=TokenUsage(1, 2, 1))
    assert (result.value, result.score, result.cost) == ("x", 0.5, TokenUsage(1, 2, 1))


def test_pattern_result_keeps_given_fields() -> None:
    cost = TokenUsage(3, 4, 1)
    result = PatternResult(value=[1, 2], score=0.75, cost=cost)
    assert result.value == [1, 2]
    assert result.score == 0.75
    assert result.cost is cost


def test_pattern_result_metadata_dict_becomes_read_only_copy() -> None:
    original: dict[str, Any] = {"model": "m1", "attempts": 2}
    metadata: Any = original
    result = PatternResult("v", metadata=metadata)
    assert isinstance(result.metadata, MappingProxyType)
    assert dict(result.metadata) == {"model": "m1", "attempts": 2}
    with pytest.raises(TypeError):
        result.metadata["model"] = "m2"  # type: ignore[index]
    original["model"] = "changed"
    original["new"] = 1
    assert dict(result.metadata) == {"model": "m1", "attempts": 2}


def test_pattern_result_metadata_proxy_is_kept() -> None:
    proxy = MappingProxyType({"k": "v"})
    assert PatternResult(1, metadata=proxy).metadata is proxy


@pytest.mark.parametrize(
    ("cost", "shown"),
    [({}, "dict {}"), (None, "NoneType None"), (5, "int 5"), ((1, 2, 3), "tuple (1, 2, 3)")],
)
def test_pattern_result_rejects_non_token_usage_cost(cost: object, shown: str) -> None:
    bad: Any = cost
    with pytest.raises(TypeError) as info:
        PatternResult("v", cost=bad)
    assert str(info.value) == f"PatternResult.cost must be a TokenUsage, got {shown}"


@pytest.mark.parametrize("value", [3, "hello", 2.5, None, [1, "a"], {"k": 1}])
def test_pattern_result_str_is_str_of_value(value: object) -> None:
    assert str(PatternResult(value)) == str(value)


@pytest.mark.parametrize("field_name", ["value", "score", "cost", "metadata"])
def test_pattern_result_is_frozen(field_name: str) -> None:
    result = PatternResult(1, score=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(result, field_name, None)
    assert result == PatternResult(1, score=0.5)


def test_pattern_result_rejects_new_attributes_with_attribute_error() -> None:
    result = PatternResult(1)
    with pytest.raises(AttributeError):
        result.extra = 1  # type: ignore[attr-defined]


def test_pattern_result_equality_is_by_value() -> None:
    assert PatternResult(1, cost=TokenUsage(1, 1, 1)) == PatternResult(1, cost=TokenUsage(1, 1, 1))
    assert PatternResult(1, cost=TokenUsage(1, 1, 1)) != PatternResult(1, cost=TokenUsage(1, 1, 2))
    assert PatternResult(1) != PatternResult(2)


# ------------------------------------------------------------------ 0.4 import paths


def test_types_module_exports_the_same_objects() -> None:
    from executionkit.types import PatternResult as LegacyPatternResult  # noqa: PLC0415
    from executionkit.types import TokenUsage as LegacyTokenUsage  # noqa: PLC0415

    assert LegacyPatternResult is executionkit.PatternResult
    assert LegacyTokenUsage is executionkit.TokenUsage
    assert executionkit.types.__all__ == ["PatternResult", "TokenUsage"]
