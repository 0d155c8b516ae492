"""Value types shared by steps and runs: token usage and pattern results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_USAGE_FIELDS = ("input_tokens", "output_tokens", "llm_calls")


@dataclass(frozen=True)
class TokenUsage:
    """Token and call counts spent by LLM calls.

    Instances are immutable and add up field by field with ``+``; ``-`` gives
    the field-wise difference (which may be negative, for deltas).

    Attributes:
        input_tokens: Prompt tokens sent.
        output_tokens: Completion tokens received.
        llm_calls: Number of model calls made.

    Raises:
        TypeError: If a field is not an ``int`` (``bool`` is rejected too).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0

    def __post_init__(self) -> None:
        """Reject non-int counts early, where the mistake was made."""
        for name in _USAGE_FIELDS:
            value = getattr(self, name)
            if type(value) is not int:
                msg = f"TokenUsage.{name} must be an int, got {type(value).__name__} {value!r}"
                raise TypeError(msg)

    def __add__(self, other: TokenUsage) -> TokenUsage:
        """Return the field-wise sum."""
        if not isinstance(other, TokenUsage):
            return NotImplemented
        return _usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.llm_calls + other.llm_calls,
        )

    def __sub__(self, other: TokenUsage) -> TokenUsage:
        """Return the field-wise difference, without clamping at zero."""
        if not isinstance(other, TokenUsage):
            return NotImplemented
        return _usage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.llm_calls - other.llm_calls,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


def _usage(input_tokens: int, output_tokens: int, llm_calls: int) -> TokenUsage:
    """A `TokenUsage` of counts known to be ints (a sum or difference of two): unchecked.

    Half the cost of the constructor, which checks each field: usage is added
    several times per step that reports it.
    """
    usage = _new(TokenUsage)
    usage.__dict__.update(
        input_tokens=input_tokens, output_tokens=output_tokens, llm_calls=llm_calls
    )
    return usage


_new = object.__new__


def _empty_metadata() -> MappingProxyType[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class PatternResult(Generic[T]):
    """A value together with what it cost to produce.

    Return one from a step to report token usage: the workflow records
    ``value`` as the step's output and adds ``cost`` to the run's total.

    Attributes:
        value: The result itself; becomes the step's output.
        score: An optional quality score.
        cost: Token usage spent producing ``value``.
        metadata: Free-form details; not recorded in checkpoints.
    """

    value: T
    score: float | None = None
    cost: TokenUsage = field(default_factory=TokenUsage)
    metadata: Mapping[str, Any] = field(default_factory=_empty_metadata)

    def __post_init__(self) -> None:
        """Check ``cost`` and make ``metadata`` read-only."""
        cost: object = self.cost
        if not isinstance(cost, TokenUsage):
            msg = f"PatternResult.cost must be a TokenUsage, got {type(cost).__name__} {cost!r}"
            raise TypeError(msg)
        metadata: object = self.metadata
        if not isinstance(metadata, MappingProxyType):
            object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    def __str__(self) -> str:
        """Return ``str(value)``."""
        return str(self.value)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with a plain dict for ``metadata`` (a read-only proxy cannot be pickled).

        Steps run in a process pool or on a cluster return their results this way.
        """
        return (PatternResult, (self.value, self.score, self.cost, dict(self.metadata)))
