"""Questions to a person (`Step.ask`): asking, the clock, and checking answers.

Plain synchronous code. A question is recorded as pending with the time it
was asked and its deadline; an answer given to ``run`` is checked against the
pending questions before anything runs.

A question is named by its path (`join_path`): the ask step's name, after the
sub-workflow step (and item key) it is asked in, each segment escaped so that
no two questions share a path whatever their names hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._errors import CheckpointMismatchError, RunArgumentError, did_you_mean
from executionkit._paths import join_path, split_path
from executionkit._plain import plain_copy

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._graph import Graph
    from executionkit._define._step_kinds import AskStep


def utc_now() -> datetime:
    """The time questions are asked and answers are checked at (tests replace it)."""
    return _clock.utc_now()


def asked(step: AskStep, question: object) -> MappingProxyType[str, Any]:
    """The pending entry of ``step`` asking ``question`` now (checked to be plain data)."""
    recorded = plain_copy(question, f"question of step {step.name!r}")
    now = utc_now()
    expires = deadline(step, now)
    return MappingProxyType(
        {
            "question": recorded,
            "asked_at": now.isoformat(),
            "expires_at": None if expires is None else expires.isoformat(),
        }
    )


def deadline(step: AskStep, asked_at: datetime) -> datetime | None:
    """When a question ``step`` asked at ``asked_at`` expires (None: never)."""
    lifetime = step.lifetime
    return None if lifetime is None else asked_at + timedelta(seconds=lifetime)


def check_deadline(step: AskStep, entry: Mapping[str, Any]) -> None:
    """Refuse a pending question whose ``expires_at`` is not its deadline as declared now.

    A question's deadline is always ``asked_at`` plus the step's ``expires_after``
    (never, without one); the recorded ``expires_at`` only repeats it, so a
    checkpoint edited to extend or remove a deadline is refused, not trusted.

    Raises:
        CheckpointMismatchError: Naming the field, with ``rerun`` as the way out.
    """
    asked_at = entry["asked_at"]
    expected = deadline(step, datetime.fromisoformat(asked_at))
    recorded = entry["expires_at"]
    if (None if recorded is None else datetime.fromisoformat(recorded)) == expected:
        return
    name = step.name
    path = f"pending.{name}.expires_at"
    if expected is None:
        why = "has no expires_after, so its question never expires"
    else:
        why = f"asked at {asked_at} expires at {expected.isoformat()} (expires_after)"
    msg = (
        f"checkpoint field {path!r} is {recorded!r}, but step {name!r} "
        f"{why}; a deadline comes from the step's expires_after, never from the checkpoint: "
        f"pass rerun=[{name!r}] to ask again"
    )
    raise CheckpointMismatchError(msg)


class Answers:
    """The answers given to one run, checked against its pending questions."""

    def __init__(
        self,
        graph: Graph,
        pending: Mapping[str, Mapping[str, Any]],
        recorded: Mapping[str, Any],
        answers: Mapping[str, Any],
        nested: Iterable[str] = (),
    ) -> None:
        """Check every answer (by ask step name) before anything runs.

        ``nested`` are the paths of the questions pending in sub-workflows, listed
        with this run's own when an answer is refused.

        Raises:
            RunArgumentError: If an answer names a step that is not waiting for
                one, listing the pending questions.
            Exception: Whatever a step's ``check`` raised for its answer.
        """
        wrong = [
            f"{join_path(name)!r} ({_why_not(graph, name, recorded)})"
            for name in answers
            if name not in pending
        ]
        if wrong:
            waiting = _listed(pending, nested)
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


def overdue(
    graph: Graph, pending: Mapping[str, Mapping[str, Any]], now: datetime
) -> tuple[dict[str, Any], dict[str, Exception]]:
    """The questions in ``pending`` whose deadline passed by ``now``: their defaults, or why not.

    A question with a ``default`` takes it as its answer (through the step's
    ``check``; what that raises fails the step); one without fails closed
    with a `TimeoutError` naming the deadline. In declaration order.
    """
    taken: dict[str, Any] = {}
    failed: dict[str, Exception] = {}
    for name in graph.names:
        entry = pending.get(name)
        if entry is None or entry["expires_at"] is None:
            continue
        deadline = entry["expires_at"]
        if now <= datetime.fromisoformat(deadline):
            continue
        step: Any = graph.steps[graph.index[name]]
        if step.default is ...:
            msg = (
                f"step {name!r}: the question expired at {deadline} without an answer "
                f"(it has no default); rerun=[{name!r}] asks it again"
            )
            failed[name] = TimeoutError(msg)
            continue
        try:
            value = step.default if step.check is None else step.check(step.default)
            taken[name] = plain_copy(value, f"default answer of step {name!r}")
        except Exception as exc:  # noqa: BLE001 - a default its check refuses fails the step
            exc.add_note(f"executionkit: check of step {name!r} refused its default answer")
            failed[name] = exc
    return taken, failed


def _listed(own: Iterable[str], nested: Iterable[str]) -> str:
    """The paths of the pending questions, for a message: this run's, then nested ones."""
    return ", ".join(repr(path) for path in (*map(join_path, own), *nested)) or "none"


def _why_not(graph: Graph, name: str, recorded: Mapping[str, Any]) -> str:
    position = graph.index.get(name)
    if position is None:
        return "no such step" + did_you_mean(join_path(name), list(map(join_path, graph.names)))
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
    """Every question pending in ``checkpoint`` by path, its sub-workflows' as ``step/question``.

    A map of sub-workflows names them ``step/item key/question``; deeper nesting
    adds a segment per level. Each segment is escaped (`join_path`).
    """
    found = {join_path(name): entry for name, entry in checkpoint.pending.items()}
    for name, nested in checkpoint.children.items():
        found.update(_nested(name, nested))
    return found


def child_checkpoints(name: str, entry: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The checkpoints a ``children`` entry of step ``name`` holds, each with its path prefix.

    ``{"checkpoint": ...}`` for a sub-workflow step (prefix ``name``), or
    ``{"items": {key: ...}}`` for a map of sub-workflows (``name/key``).
    """
    if "checkpoint" in entry:
        return [(join_path(name), entry["checkpoint"])]
    return [(join_path(name, key), child) for key, child in entry["items"].items()]


def _nested(name: str, entry: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    children = child_checkpoints(name, entry)
    return {
        f"{prefix}/{question}": pending
        for prefix, child in children
        for question, pending in waiting_in(child).items()
    }


def nested_pending(graph: Graph, children: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The questions pending inside a run's sub-workflows, in declaration order."""
    from executionkit._checkpoint._value import WorkflowCheckpoint  # noqa: PLC0415 - a cycle

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

    Answers are named by question path (`split_path`). A path of one segment is
    this run's, by ask step name; in a longer one the first segment is a
    sub-workflow step of this workflow, in a map of sub-workflows the second is
    the item key, and the rest of the path goes to that child. Raises
    `RunArgumentError` for a path that `join_path` never makes or a nested one no
    child is waiting on.
    """
    mine: dict[str, Any] = {}
    routed: dict[tuple[str, str | None], dict[str, Any]] = {}
    wrong: list[str] = []
    for path, answer in answers.items():
        try:
            segments = split_path(path)
        except ValueError:
            wrong.append(f"{path!r} (not a question path: write '%' as '%25', '/' as '%2F')")
            continue
        if len(segments) == 1:
            mine[segments[0]] = answer
            continue
        if path not in nested:
            hint = f" (the step {path!r} is answered as {join_path(path)!r})"
            wrong.append(repr(path) + (hint if path in graph.index else ""))
            continue
        step, *rest = segments
        key: str | None = None
        if graph.index[step] in graph.maps:
            key, *rest = rest
        routed.setdefault((step, key), {})[join_path(*rest)] = answer
    if wrong:
        msg = (
            f"answers given for questions no sub-workflow is waiting on: {', '.join(wrong)}; "
            f"the questions pending in resume_from: {_listed(own, nested)}"
        )
        raise RunArgumentError(msg)
    return mine, routed
