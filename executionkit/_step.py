"""`Step`: one named unit of work in a workflow."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

from executionkit._errors import WorkflowDefinitionError

StepFn: TypeAlias = Callable[[Mapping[str, Any]], Any]
"""A step's ``run``: takes the read-only ``ctx``, returns the output or an awaitable of it."""


def _empty_metadata() -> MappingProxyType[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Step:
    """A named unit of work and the steps it depends on.

    Args:
        name: Unique, non-empty name; the key of the step's output in ``ctx``,
            in results and in checkpoints.
        run: Called as ``run(ctx)``; a plain function or a coroutine function.
            ``ctx`` is a read-only mapping of the run's initial context plus the
            outputs of this step's ancestors. Return the output, or a
            `PatternResult` whose ``value`` is the output and whose ``cost`` is
            added to the run's token usage.
        depends_on: Names of the steps whose outputs this step needs. Any
            iterable of names (not a single string); stored as a tuple with
            duplicates removed.
        metadata: Free-form labels for your own use; stored read-only and never
            written to checkpoints.

    Raises:
        WorkflowDefinitionError: If ``name`` is not a non-empty string, ``run``
            is not callable, ``depends_on`` is a string or holds something other
            than non-empty strings, the step depends on itself, or ``metadata``
            is not a mapping.
    """

    name: str
    run: StepFn
    depends_on: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=_empty_metadata)

    def __post_init__(self) -> None:
        """Validate and normalise the fields, naming the step in every error."""
        name: object = self.name
        if not isinstance(name, str) or not name:
            msg = f"step name must be a non-empty str, got {type(name).__name__} {name!r}"
            raise WorkflowDefinitionError(msg)
        run: object = self.run
        if not callable(run):
            msg = (
                f"step {name!r}: run must be callable (a function or coroutine function "
                f"taking ctx), got {type(run).__name__} {run!r}"
            )
            raise WorkflowDefinitionError(msg)
        object.__setattr__(self, "depends_on", _normalise_depends_on(name, self.depends_on))
        metadata: object = self.metadata
        if not isinstance(metadata, Mapping):
            msg = (
                f"step {name!r}: metadata must be a mapping, "
                f"got {type(metadata).__name__} {metadata!r}"
            )
            raise WorkflowDefinitionError(msg)
        if not isinstance(metadata, MappingProxyType):
            object.__setattr__(self, "metadata", MappingProxyType(dict(metadata)))

    def __hash__(self) -> int:
        """Hash by name, callable and dependencies (metadata is not hashable)."""
        return hash((self.name, self.run, self.depends_on))


def _normalise_depends_on(name: str, depends_on: object) -> tuple[str, ...]:
    if isinstance(depends_on, str):
        msg = (
            f"step {name!r}: depends_on must be a collection of step names, not a single "
            f"str; write depends_on=({depends_on!r},)"
        )
        raise WorkflowDefinitionError(msg)
    if not isinstance(depends_on, Iterable):
        msg = (
            f"step {name!r}: depends_on must be a collection of step names, "
            f"got {type(depends_on).__name__} {depends_on!r}"
        )
        raise WorkflowDefinitionError(msg)
    seen: dict[str, None] = {}
    for dep in depends_on:
        if not isinstance(dep, str) or not dep:
            msg = (
                f"step {name!r}: every dependency must be a non-empty str step name, "
                f"got {type(dep).__name__} {dep!r}"
            )
            raise WorkflowDefinitionError(msg)
        if dep == name:
            msg = f"step {name!r} depends on itself"
            raise WorkflowDefinitionError(msg)
        seen[dep] = None
    return tuple(seen)
