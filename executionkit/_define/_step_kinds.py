"""The kinds of step that are not called as they are: maps (`Step.map`) and asks (`Step.ask`).

Each is a `Step` subclass, so a workflow holds them like any step; the plan
(`executionkit._define._graph`) knows them by their class and records their kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from typing import Any, TypeAlias

from executionkit._define._step import Step
from executionkit._define._step_checks import _check_number, check_call, is_async_callable
from executionkit._errors import WorkflowDefinitionError

MAP_OPTIONS = frozenset(
    {
        "retries",
        "retry_on",
        "retry_delay",
        "retry_backoff",
        "retry_max_delay",
        "retry_jitter",
        "timeout",
        "version",
        "encode",
        "decode",
        "when",
        "join",
        "inline",
        "limit",
        "tokens_estimate",
    }
)

ItemFn: TypeAlias = Callable[[Any, Mapping[str, Any]], Any]
"""A map item's ``run``: takes the item and the read-only ``ctx``."""


@dataclass(frozen=True, repr=False)
class MapStep(Step):
    """A step that runs its ``run`` once per item; build one with `Step.map`."""

    _: KW_ONLY
    over: str = ""
    key: Callable[[Any], str] | None = None
    max_concurrency: int | None = None

    _called_as = ("the map function", "fn(item, ctx)", 2)

    def __post_init__(self) -> None:
        """Validate the map settings as well as the step's own."""
        super().__post_init__()
        name = self.name
        over: object = self.over
        if not isinstance(over, str) or not over:
            msg = (
                f"step {name!r}: over must name a step or an initial-context key (a non-empty "
                f"str), got {type(over).__name__} {over!r}"
            )
            raise WorkflowDefinitionError(msg)
        key: object = self.key
        if key is not None and not callable(key):
            msg = f"step {name!r}: key must be callable (item -> str) or None, got {key!r}"
            raise WorkflowDefinitionError(msg)
        if key is not None:
            check_call(name, key, "key", "key(item)", 1)
        limit: object = self.max_concurrency
        if limit is not None and (type(limit) is not int or limit < 1):
            msg = f"step {name!r}: max_concurrency must be a positive int or None, got {limit!r}"
            raise WorkflowDefinitionError(msg)

    def __repr__(self) -> str:
        """Show what `Step` shows, and the map settings."""
        parts = [f"over={self.over!r}"]
        if self.key is not None:
            parts.append(f"key={self.key!r}")
        if self.max_concurrency is not None:
            parts.append(f"max_concurrency={self.max_concurrency!r}")
        return f"Step.map({super().__repr__()[5:-1]}, {', '.join(parts)})"

    def __hash__(self) -> int:
        """Hash by name, callable, dependencies and ``over``."""
        return hash((self.name, self.run, self.depends_on, self.over))


@dataclass(frozen=True, repr=False)
class AskStep(Step):
    """A step whose output is a person's answer; build one with `Step.ask`."""

    _: KW_ONLY
    check: Callable[[Any], Any] | None = None
    expires_after: float | timedelta | None = None

    _called_as = ("the question", "question(ctx)", 1)

    def __post_init__(self) -> None:
        """Validate the question settings as well as the step's own."""
        super().__post_init__()
        name = self.name
        if is_async_callable(self.run):
            msg = (
                f"step {name!r}: the question must be a plain function (ctx -> JSON data), "
                f"not a coroutine function"
            )
            raise WorkflowDefinitionError(msg)
        check: object = self.check
        if check is not None and not callable(check):
            msg = (
                f"step {name!r}: check must be callable (answer -> answer) or None, got {check!r}"
            )
            raise WorkflowDefinitionError(msg)
        if check is not None:
            check_call(name, check, "check", "check(answer)", 1)
        expires: object = self.expires_after
        if isinstance(expires, timedelta):
            expires = expires.total_seconds()
        if expires is not None and _check_number(name, "expires_after", expires, 0.0) == 0:
            msg = f"step {name!r}: expires_after must be a positive duration or None, got 0"
            raise WorkflowDefinitionError(msg)

    @property
    def lifetime(self) -> float | None:
        """``expires_after`` in seconds, or None."""
        expires = self.expires_after
        return expires.total_seconds() if isinstance(expires, timedelta) else expires

    def __repr__(self) -> str:
        """Show the step as `Step.ask` builds it."""
        parts = [f"name={self.name!r}", f"question={self.run!r}"]
        parts.append(f"depends_on={self.depends_on!r}")
        parts.extend(
            f"{setting}={getattr(self, setting)!r}"
            for setting in ("check", "expires_after", "version")
            if getattr(self, setting) is not None
        )
        return f"Step.ask({', '.join(parts)})"

    def __hash__(self) -> int:
        """Hash by name, question and dependencies."""
        return hash((self.name, self.run, self.depends_on))
