"""Questions to a person (`Step.ask`): asking, the clock, and checking answers.

Plain synchronous code. A question is recorded as pending with the time it
was asked and its deadline; an answer given to ``run`` is checked against the
pending questions before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._errors import RunArgumentError, did_you_mean
from executionkit._plain import plain_copy

if TYPE_CHECKING:
    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._graph import Graph
    from executionkit._step_kinds import AskStep


def utc_now() -> datetime:
    """The time questions are asked and answers are checked at (tests replace it)."""
    return datetime.now(UTC)


def asked(step: AskStep, question: object) -> MappingProxyType[str, Any]:
    """The pending entry of ``step`` asking ``question`` now (checked to be plain data)."""
    recorded = plain_copy(question, f"question of step {step.name!r}")
    now = utc_now()
    lifetime = step.lifetime
    expires = None if lifetime is None else (now + timedelta(seconds=lifetime)).isoformat()
    return MappingProxyType(
        {"question": recorded, "asked_at": now.isoformat(), "expires_at": expires}
    )


class Answers:
    """The answers given to one run, checked against its pending questions."""

    def __init__(
        self,
        graph: Graph,
        pending: Mapping[str, Mapping[str, Any]],
        recorded: Mapping[str, Any],
        answers: Mapping[str, Any],
    ) -> None:
        """Check every answer before anything runs.

        Raises:
            RunArgumentError: If an answer names a step that is not waiting for
                one, listing the pending questions.
            Exception: Whatever a step's ``check`` raised for its answer.
        """
        wrong = [
            f"{name!r} ({_why_not(graph, name, recorded)})"
            for name in answers
            if name not in pending
        ]
        if wrong:
            waiting = ", ".join(map(repr, pending)) or "none"
            msg = (
                f"answers given for steps that are not waiting for one: {', '.join(wrong)}; "
                f"the questions pending in resume_from: {waiting}"
            )
            raise RunArgumentError(msg)
        self.stored: dict[str, Any] = {}
        self.expired: dict[str, Exception] = {}
        now = utc_now()
        for name, answer in answers.items():
            step: Any = graph.steps[graph.index[name]]
            value = answer
            if step.check is not None:
                try:
                    value = step.check(answer)
                except Exception as exc:
                    exc.add_note(f"executionkit: check of step {name!r} refused the answer")
                    raise
            self.stored[name] = plain_copy(value, f"answer of step {name!r}")
            deadline = pending[name]["expires_at"]
            if deadline is not None and now > datetime.fromisoformat(deadline):
                msg = (
                    f"step {name!r}: the question expired at {deadline}, before the answer "
                    f"given at {now.isoformat()}; rerun=[{name!r}] asks it again"
                )
                self.expired[name] = TimeoutError(msg)
        for name in self.expired:
            del self.stored[name]


def _why_not(graph: Graph, name: str, recorded: Mapping[str, Any]) -> str:
    position = graph.index.get(name)
    if position is None:
        return "no such step" + did_you_mean(name, graph.names)
    if position not in graph.asks:
        return "not an ask step"
    if name in recorded:
        return "already answered"
    return "not asked yet"


def checked_answers(value: object) -> Mapping[str, Any]:
    """``answers`` as given to ``run``: a mapping with str keys."""
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        msg = (
            f"answers must be a dict of ask step name to answer, "
            f"got {type(value).__name__} {value!r}"
        )
        raise RunArgumentError(msg)
    return MappingProxyType(dict(value))


def waiting_in(checkpoint: WorkflowCheckpoint) -> dict[str, Mapping[str, Any]]:
    """Every question pending in ``checkpoint``, its sub-workflows' as ``step/question``.

    A map of sub-workflows names them ``step/item key/question``; deeper nesting
    adds a segment per level.
    """
    found = dict(checkpoint.pending)
    for name, nested in checkpoint.children.items():
        found.update(_nested(name, nested))
    return found


def _nested(name: str, entry: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    children = (
        [(name, entry["checkpoint"])]
        if "checkpoint" in entry
        else [(f"{name}/{key}", child) for key, child in entry["items"].items()]
    )
    return {
        f"{prefix}/{question}": pending
        for prefix, child in children
        for question, pending in waiting_in(child).items()
    }


def nested_pending(graph: Graph, children: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The questions pending inside a run's sub-workflows, in declaration order."""
    from executionkit._checkpoint import WorkflowCheckpoint  # noqa: PLC0415 - a cycle

    found: dict[str, Mapping[str, Any]] = {}
    for name in graph.names:
        child = children.get(name)
        if isinstance(child, WorkflowCheckpoint):
            found.update(_nested(name, {"checkpoint": child}))
        elif child is not None:
            found.update(_nested(name, {"items": child}))
    return found


def route_answers(
    graph: Graph,
    own: Mapping[str, Mapping[str, Any]],
    nested: Mapping[str, Mapping[str, Any]],
    answers: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[tuple[str, str | None], dict[str, Any]]]:
    """Split ``answers`` into this run's and each sub-workflow's (by step and item key).

    A name that is a step of this workflow is this run's; ``step/...`` and
    ``step/key/...`` go to that child, with the rest of the name. Raises
    `RunArgumentError` for a nested name no child is waiting on.
    """
    mine: dict[str, Any] = {}
    routed: dict[tuple[str, str | None], dict[str, Any]] = {}
    wrong: list[str] = []
    for name, answer in answers.items():
        if name in graph.index or "/" not in name:
            mine[name] = answer
            continue
        if name not in nested:
            wrong.append(name)
            continue
        step, rest = name.split("/", 1)
        position = graph.index.get(step)
        key: str | None = None
        if position is not None and position in graph.maps:
            key, rest = rest.split("/", 1)
        routed.setdefault((step, key), {})[rest] = answer
    if wrong:
        waiting = ", ".join(map(repr, [*own, *nested])) or "none"
        msg = (
            f"answers given for questions no sub-workflow is waiting on: "
            f"{', '.join(map(repr, wrong))}; the questions pending in resume_from: {waiting}"
        )
        raise RunArgumentError(msg)
    return mine, routed
