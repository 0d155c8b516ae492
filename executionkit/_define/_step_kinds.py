"""The kinds of step that are not called as they are: maps, asks and waits.

`Step.map`, `Step.ask` and `Step.wait` build them.

Each is a `Step` subclass, so a workflow holds them like any step; the plan
(`executionkit._define._graph`) knows them by their class and records their kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from executionkit._define._step import Step
from executionkit._define._step_checks import _check_number, check_call, is_async_callable
from executionkit._errors import CheckpointValueError, WorkflowDefinitionError
from executionkit._plain import plain_copy

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
    # The answer taken once the deadline passed; ... (Ellipsis): none.
    default: Any = ...

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
        if self.default is not ...:
            self._check_default()

    def _check_default(self) -> None:
        """A ``default`` needs a deadline and must be plain data (it goes into checkpoints)."""
        name = self.name
        if self.expires_after is None:
            msg = (
                f"step {name!r}: default is the answer taken once the deadline passed, "
                f"so it needs expires_after"
            )
            raise WorkflowDefinitionError(msg)
        try:
            plain_copy(self.default, f"default of step {name!r}")
        except CheckpointValueError as exc:
            raise WorkflowDefinitionError(str(exc)) from None

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
        if self.default is not ...:
            parts.append(f"default={self.default!r}")
        return f"Step.ask({', '.join(parts)})"

    def __hash__(self) -> int:
        """Hash by name, question and dependencies."""
        return hash((self.name, self.run, self.depends_on))


def _fixed_time(ctx: Mapping[str, Any]) -> None:
    """The ``run`` of a wait of so many seconds: nothing to compute from ``ctx``."""
    del ctx


@dataclass(frozen=True, repr=False)
class WaitStep(Step):
    """A step that waits until a time, recorded in checkpoints; build one with `Step.wait`.

    Its ``run`` is ``until`` (``until(ctx)``, the time to wait for), or
    `_fixed_time` for a wait of ``seconds``.
    """

    _: KW_ONLY
    seconds: float | timedelta | None = None

    _called_as = ("until", "until(ctx)", 1)

    @classmethod
    def built(  # noqa: PLR0917 - Step.wait's arguments, in its order
        cls,
        name: str,
        seconds: float | timedelta | None,
        until: Callable[[Mapping[str, Any]], datetime] | None,
        depends_on: tuple[str, ...],
        version: str | None,
        metadata: Mapping[str, Any],
    ) -> WaitStep:
        """The step `Step.wait` describes, its settings checked."""
        given: object = until
        if (seconds is None) == (until is None):
            msg = (
                f"step {name!r}: Step.wait takes seconds=... or until=..., exactly one of them"
                if seconds is None
                else f"step {name!r}: Step.wait takes seconds=... or until=..., not both"
            )
            raise WorkflowDefinitionError(msg)
        if until is not None and (not callable(given) or is_async_callable(given)):
            msg = (
                f"step {name!r}: until must be a plain function (ctx -> aware datetime), "
                f"got {until!r}"
            )
            raise WorkflowDefinitionError(msg)
        return cls(
            name,
            _fixed_time if until is None else until,
            depends_on,
            metadata,
            version=version,
            seconds=seconds,
        )

    def __post_init__(self) -> None:
        """Validate the wait's settings as well as the step's own."""
        super().__post_init__()
        seconds: object = self.seconds
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if seconds is not None:
            _check_number(self.name, "seconds", seconds, 0.0)

    @property
    def duration(self) -> float | None:
        """``seconds`` as a number, or None for a wait ``until`` a time."""
        seconds = self.seconds
        return seconds.total_seconds() if isinstance(seconds, timedelta) else seconds

    def __repr__(self) -> str:
        """Show the step as `Step.wait` builds it."""
        parts = [f"name={self.name!r}"]
        if self.seconds is not None:
            parts.append(f"seconds={self.seconds!r}")
        else:
            parts.append(f"until={self.run!r}")
        parts.append(f"depends_on={self.depends_on!r}")
        if self.version is not None:
            parts.append(f"version={self.version!r}")
        return f"Step.wait({', '.join(parts)})"

    def __hash__(self) -> int:
        """Hash by name, ``until`` (or the seconds) and dependencies."""
        return hash((self.name, self.run, self.seconds, self.depends_on))
