"""The arguments of `Workflow.run`, checked once before anything runs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from executionkit._checkpoint import WorkflowCheckpoint
from executionkit._errors import RunArgumentError, did_you_mean
from executionkit._questions import checked_answers
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from concurrent.futures import Executor  # noqa: TC004 - an annotation only; keeps import cheap

    from executionkit._graph import Graph

CheckpointFn: TypeAlias = Callable[[WorkflowCheckpoint], object]
"""Receives each checkpoint; may return an awaitable, which is awaited before anything else."""

OnError: TypeAlias = Literal["finish", "cancel", "continue"]
"""What a run does when a step fails; see `Workflow.run`."""

UnknownSteps: TypeAlias = Literal["error", "discard"]
"""What resuming does with recorded outputs of steps the workflow does not have."""

Schedule: TypeAlias = Literal["batch", "eager"]
"""When steps start: after their whole batch (and its checkpoint), or as soon as ready."""

CheckpointEvery: TypeAlias = Literal["batch", "step"]
"""In batch mode, checkpoint after each batch, or as each step completes."""

_ON_ERROR = ("finish", "cancel", "continue")
_UNKNOWN_STEPS = ("error", "discard")
_SCHEDULES = ("batch", "eager")
_CHECKPOINT_EVERY = ("batch", "step")


def names_text(names: list[str] | tuple[str, ...]) -> str:
    """``'a', 'b'``: names quoted the way error messages show them."""
    return ", ".join(repr(name) for name in names)


@dataclass(frozen=True)
class RunOptions:
    """Everything `Workflow.run` was given, validated against the workflow."""

    context: dict[str, Any]
    checkpoint_fn: CheckpointFn | None
    resume_from: WorkflowCheckpoint | None
    run_id: str | None
    metadata: Mapping[str, Any] | None
    on_error: OnError
    budget: TokenUsage | None
    rerun: frozenset[str]
    unknown_steps: UnknownSteps
    validate_json: bool
    schedule: Schedule = "batch"
    max_concurrency: int | None = None
    on_event: Callable[[Any], object] | None = None
    executor: Executor | None = None
    checkpoint_every: CheckpointEvery = "batch"
    answers: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def check(cls, graph: Graph, arguments: Mapping[str, object]) -> RunOptions:
        """Raise `RunArgumentError` naming the first argument that does not fit.

        ``arguments`` holds every parameter of `Workflow.run` by name (its
        ``locals()``): the signature of `run` is the one definition of the run
        options, and this is the one place they are checked.
        """
        initial_context = arguments["initial_context"]
        checkpoint_fn = arguments["checkpoint_fn"]
        resume_from = arguments["resume_from"]
        run_id = arguments["run_id"]
        metadata = arguments["metadata"]
        on_error = arguments["on_error"]
        budget = arguments["budget"]
        rerun = arguments["rerun"]
        unknown_steps = arguments["unknown_steps"]
        validate_json = arguments["validate_json"]
        schedule = arguments["schedule"]
        max_concurrency = arguments["max_concurrency"]
        on_event = arguments["on_event"]
        executor = arguments["executor"]
        checkpoint_every = arguments["checkpoint_every"]
        answers = checked_answers(arguments["answers"])
        context = _checked_context(graph, initial_context)
        if checkpoint_fn is not None and not callable(checkpoint_fn):
            msg = f"checkpoint_fn must be callable or None, got {type(checkpoint_fn).__name__}"
            raise RunArgumentError(msg)
        if resume_from is not None and not isinstance(resume_from, WorkflowCheckpoint):
            msg = (
                f"resume_from must be a WorkflowCheckpoint, got {type(resume_from).__name__}; "
                f"load saved data with WorkflowCheckpoint.from_dict(data)"
            )
            raise RunArgumentError(msg)
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            msg = f"run_id must be a non-empty str or None, got {type(run_id).__name__} {run_id!r}"
            raise RunArgumentError(msg)
        _one_of("on_error", on_error, _ON_ERROR)
        _one_of("unknown_steps", unknown_steps, _UNKNOWN_STEPS)
        if type(validate_json) is not bool:
            msg = f"validate_json must be a bool, got {validate_json!r}"
            raise RunArgumentError(msg)
        _one_of("schedule", schedule, _SCHEDULES)
        _one_of("checkpoint_every", checkpoint_every, _CHECKPOINT_EVERY)
        if max_concurrency is not None and (
            type(max_concurrency) is not int or max_concurrency < 1
        ):
            msg = f"max_concurrency must be a positive int or None, got {max_concurrency!r}"
            raise RunArgumentError(msg)
        if on_event is not None and not callable(on_event):
            msg = f"on_event must be callable or None, got {type(on_event).__name__}"
            raise RunArgumentError(msg)
        if executor is not None and not callable(getattr(executor, "submit", None)):
            msg = (
                f"executor must be a concurrent.futures.Executor (something with submit()) "
                f"or None, got {type(executor).__name__}"
            )
            raise RunArgumentError(msg)
        return cls(
            context=context,
            checkpoint_fn=checkpoint_fn,
            resume_from=resume_from,
            run_id=run_id,
            metadata=(
                None if metadata is None else MappingProxyType(str_keyed(metadata, "metadata"))
            ),
            on_error=on_error,  # type: ignore[arg-type]  # checked by _one_of
            budget=_checked_budget(budget),
            rerun=_checked_rerun(graph, rerun, resuming=resume_from is not None),
            unknown_steps=unknown_steps,  # type: ignore[arg-type]  # checked by _one_of
            validate_json=validate_json,
            schedule=schedule,  # type: ignore[arg-type]  # checked by _one_of
            max_concurrency=max_concurrency,
            on_event=on_event,
            executor=executor,  # type: ignore[arg-type]  # duck-typed: has submit()
            checkpoint_every=checkpoint_every,  # type: ignore[arg-type]  # checked by _one_of
            answers=answers,
        )


def _checked_context(graph: Graph, initial_context: object) -> dict[str, Any]:
    context = {} if initial_context is None else str_keyed(initial_context, "initial_context")
    missing = [name for name in graph.inputs if name not in context]
    if missing:
        hint = did_you_mean(missing[0], [key for key in context if key not in graph.inputs])
        msg = f"initial_context lacks the workflow's declared inputs: {names_text(missing)}{hint}"
        raise RunArgumentError(msg)
    colliding = [name for name in graph.names if name in context]
    if colliding:
        msg = (
            f"initial_context keys collide with step names: {names_text(colliding)}; "
            f"a step's output and a context value cannot share a ctx key, so rename them"
        )
        raise RunArgumentError(msg)
    return context


def str_keyed(value: object, argument: str) -> dict[str, Any]:
    """Copy a mapping with str keys, or raise `RunArgumentError` naming ``argument``."""
    if not isinstance(value, Mapping):
        msg = f"{argument} must be a mapping with str keys, got {type(value).__name__}"
        raise RunArgumentError(msg)
    result: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            msg = f"{argument} keys must be str, got {type(key).__name__} {key!r}"
            raise RunArgumentError(msg)
        result[key] = item
    return result


def _one_of(argument: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        msg = f"{argument} must be one of {names_text(allowed)}, got {value!r}"
        raise RunArgumentError(msg)


def _checked_budget(budget: object) -> TokenUsage | None:
    if budget is None:
        return None
    if not isinstance(budget, TokenUsage):
        msg = f"budget must be a TokenUsage or None, got {type(budget).__name__} {budget!r}"
        raise RunArgumentError(msg)
    if min(budget.input_tokens, budget.output_tokens, budget.llm_calls) < 0:
        msg = f"budget fields must be non-negative (0 means no limit), got {budget!r}"
        raise RunArgumentError(msg)
    return budget


def _checked_rerun(graph: Graph, rerun: object, *, resuming: bool) -> frozenset[str]:
    if rerun is None:
        return frozenset()
    if isinstance(rerun, (str, bytes, Mapping)) or not isinstance(rerun, Collection):
        msg = (
            f"rerun must be a collection of step names such as a list, "
            f"got {type(rerun).__name__} {rerun!r}"
        )
        raise RunArgumentError(msg)
    unknown = [name for name in rerun if name not in graph.index]
    if unknown:
        msg = (
            f"rerun names steps this workflow does not have: {names_text(unknown)}"
            f"{did_you_mean(unknown[0], graph.names)}"
        )
        raise RunArgumentError(msg)
    if rerun and not resuming:
        msg = "rerun needs resume_from: without a checkpoint every step runs anyway"
        raise RunArgumentError(msg)
    return frozenset(rerun)
