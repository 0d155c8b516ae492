"""The arguments of `Workflow.run`, checked once before anything runs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from executionkit._checkpoint._value import LEGACY_VERSION, WorkflowCheckpoint
from executionkit._define._graph import graph_of
from executionkit._define._listeners import listeners_of
from executionkit._define._questions import checked_answers
from executionkit._errors import RunArgumentError, did_you_mean, preview
from executionkit._paths import join_path, split_path
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from concurrent.futures import Executor  # noqa: TC004 - an annotation only; keeps import cheap
    from decimal import Decimal  # noqa: TC004 - an annotation only; keeps import cheap

    from executionkit._define._graph import Graph
    from executionkit._limits import Limit  # noqa: TC004 - an annotation only
    from executionkit._prices import Prices  # noqa: TC004 - an annotation only

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

OnCodeChange: TypeAlias = Literal["keep", "rerun", "refuse"]
"""What resuming does with recorded outputs whose step's code changed since."""

_ON_ERROR = ("finish", "cancel", "continue")
_UNKNOWN_STEPS = ("error", "discard")
_SCHEDULES = ("batch", "eager")
_CHECKPOINT_EVERY = ("batch", "step")
_ON_CODE_CHANGE = ("keep", "rerun", "refuse")


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
    stop_grace: float = 5.0
    answers: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # A dollar budget (`Budget.dollars`), priced with `prices`.
    dollars: Decimal | None = None
    prices: Prices | None = None
    # The named limits the steps draw on (`Step.limit`), by key.
    limits: tuple[Limit, ...] = ()
    # Waits (`Step.wait`) due within this many seconds are slept through.
    sleep_up_to: float = 60.0
    # What a resume does with recorded outputs whose step's code changed.
    on_code_change: OnCodeChange = "keep"
    # rerun paths into sub-workflows: (step, item key or None) -> the rest of each path.
    rerun_within: Mapping[tuple[str, str | None], frozenset[str]] = field(
        default_factory=lambda: MappingProxyType({})
    )

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
        tokens, dollars, prices = _checked_money(arguments)
        rerun = arguments["rerun"]
        unknown_steps = arguments["unknown_steps"]
        validate_json = arguments["validate_json"]
        schedule = arguments["schedule"]
        max_concurrency = arguments["max_concurrency"]
        on_event = listeners_of(arguments["on_event"])
        executor = arguments["executor"]
        checkpoint_every = arguments["checkpoint_every"]
        answers = (
            _NO_ANSWERS if arguments["answers"] is None else checked_answers(arguments["answers"])
        )
        context = _checked_context(graph, initial_context)
        if graph.context_maps or graph.nested:
            _check_what_steps_read(graph, context, resume_from)
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
        if rerun is None:
            rerun_own, rerun_within = _NO_RERUN, _NO_RERUN_WITHIN
        else:
            rerun_own, paths = _checked_rerun(graph, rerun, resume_from)
            rerun_within = MappingProxyType(paths) if paths else _NO_RERUN_WITHIN
        _checked_modes(arguments)
        if type(validate_json) is not bool:
            msg = f"validate_json must be a bool, got {validate_json!r}"
            raise RunArgumentError(msg)
        if max_concurrency is not None and (
            type(max_concurrency) is not int or max_concurrency < 1
        ):
            msg = f"max_concurrency must be a positive int or None, got {max_concurrency!r}"
            raise RunArgumentError(msg)
        if on_event is not None and not callable(on_event):
            msg = (
                f"on_event must be callable, a list of callables, or None, got "
                f"{type(on_event).__name__}"
            )
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
            budget=tokens,
            dollars=dollars,
            prices=prices,
            rerun=rerun_own,
            rerun_within=rerun_within,
            unknown_steps=unknown_steps,  # type: ignore[arg-type]  # checked by _one_of
            validate_json=validate_json,
            schedule=schedule,  # type: ignore[arg-type]  # checked by _one_of
            max_concurrency=max_concurrency,
            on_event=on_event,
            executor=executor,  # type: ignore[arg-type]  # duck-typed: has submit()
            checkpoint_every=checkpoint_every,  # type: ignore[arg-type]  # checked by _one_of
            stop_grace=_checked_seconds("stop_grace", arguments["stop_grace"]),
            sleep_up_to=_checked_seconds("sleep_up_to", arguments.get("sleep_up_to", 60.0)),
            on_code_change=arguments.get("on_code_change", "keep"),  # type: ignore[arg-type]
            answers=answers,
            limits=_checked_limits(graph, arguments.get("limits")),
        )


# What a run without answers or rerun gets: shared, since none of them is ever changed.
_NO_ANSWERS: Mapping[str, Any] = MappingProxyType({})
_NO_RERUN: frozenset[str] = frozenset()
_NO_RERUN_WITHIN: Mapping[tuple[str, str | None], frozenset[str]] = MappingProxyType({})


def _checked_limits(graph: Graph, limits: object) -> tuple[Limit, ...]:
    """``limits``: `Limit` objects with distinct keys, one for every key a step draws on."""
    given: tuple[Limit, ...] = ()
    if limits is not None:
        from executionkit._limits import Limit  # noqa: PLC0415 - only runs with limits load it

        if isinstance(limits, (str, bytes, Limit)) or not isinstance(limits, Iterable):
            msg = f"limits must be a list of executionkit.Limit or None, got {preview(limits)}"
            raise RunArgumentError(msg)
        given = tuple(limits)
        keys: set[str] = set()
        for position, limit in enumerate(given):
            entry: object = limit
            if not isinstance(entry, Limit):
                msg = f"limits[{position}] must be an executionkit.Limit, got {preview(limit)}"
                raise RunArgumentError(msg)
            if limit.key in keys:
                msg = f"limits[{position}]: two limits have the key {limit.key!r}; keys are unique"
                raise RunArgumentError(msg)
            keys.add(limit.key)
    drawn = limit_keys(graph)
    known = [limit.key for limit in given]
    for key, where in drawn.items():
        if key not in known:
            have = f"has {names_text(known)}" if known else "has none"
            msg = (
                f"{where} draws on limit {key!r} (limit={key!r}), but run(limits=...) "
                f"{have}{did_you_mean(key, known)}: pass an executionkit.Limit with that key"
            )
            raise RunArgumentError(msg)
    return given


def limit_keys(graph: Graph) -> dict[str, str]:
    """Each limit key the steps of ``graph`` and its sub-workflows draw on, and a step using it."""
    drawn: dict[str, str] = {}
    for position in sorted(graph.limited):
        step = graph.steps[position]
        drawn.setdefault(step.limit, f"step {step.name!r}")  # type: ignore[arg-type]
    for nested in graph.nested:
        for position in sorted(nested.graph.limited):
            step = nested.graph.steps[position]
            drawn.setdefault(step.limit, f"step {step.name!r} of {nested.where}")  # type: ignore[arg-type]
    return drawn


def _checked_seconds(name: str, value: object) -> float:
    """``stop_grace`` or ``sleep_up_to``: a number of seconds, zero or more (or ``math.inf``)."""
    if type(value) not in {int, float} or not value >= 0:  # type: ignore[operator]
        msg = (
            f"{name} must be a number of seconds, zero or more (math.inf: no limit), got {value!r}"
        )
        raise RunArgumentError(msg)
    return float(value)  # type: ignore[arg-type]


def checked_submission(
    graph: Graph, inputs: object, run_id: object, metadata: object
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The inputs, run id and metadata of `Workflow.submit`, checked as `run` checks them.

    Raises `RunArgumentError` naming the argument; a new random run id when
    ``run_id`` is None.
    """
    from executionkit._paths import new_run_id  # noqa: PLC0415 - only submissions need it

    context = _checked_context(graph, inputs)
    if graph.context_maps or graph.nested:
        _check_what_steps_read(graph, context, None)
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        msg = f"run_id must be a non-empty str or None, got {type(run_id).__name__} {run_id!r}"
        raise RunArgumentError(msg)
    return (
        context,
        new_run_id() if run_id is None else run_id,
        {} if metadata is None else str_keyed(metadata, "metadata"),
    )


def _checked_context(graph: Graph, initial_context: object) -> dict[str, Any]:
    if initial_context is None and not graph.inputs:
        return {}  # nothing is missing, and nothing can collide
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


def _checked_modes(arguments: Mapping[str, object]) -> None:
    """Each argument that names a mode names one of its modes."""
    _one_of("on_error", arguments["on_error"], _ON_ERROR)
    _one_of("unknown_steps", arguments["unknown_steps"], _UNKNOWN_STEPS)
    _one_of("schedule", arguments["schedule"], _SCHEDULES)
    _one_of("checkpoint_every", arguments["checkpoint_every"], _CHECKPOINT_EVERY)
    _one_of("on_code_change", arguments.get("on_code_change", "keep"), _ON_CODE_CHANGE)


def _one_of(argument: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        msg = f"{argument} must be one of {names_text(allowed)}, got {value!r}"
        raise RunArgumentError(msg)


def _checked_money(
    arguments: Mapping[str, object],
) -> tuple[TokenUsage | None, Decimal | None, Prices | None]:
    """The ``budget`` (its token limits and its dollars) and the ``prices``, checked."""
    tokens, dollars = _checked_budget(arguments["budget"])
    return tokens, dollars, _checked_prices(arguments.get("prices"), dollars)


def _checked_budget(budget: object) -> tuple[TokenUsage | None, Decimal | None]:
    """The token limits and the dollar limit of ``budget``: a `TokenUsage`, a `Budget` or None."""
    if budget is None:
        return None, None
    dollars = None
    if not isinstance(budget, TokenUsage):
        from executionkit._prices import Budget  # noqa: PLC0415 - loads decimal: only when used

        if not isinstance(budget, Budget):
            msg = (
                f"budget must be a TokenUsage, a Budget or None, got "
                f"{type(budget).__name__} {budget!r}"
            )
            raise RunArgumentError(msg)
        dollars = budget.dollars
        budget = budget.tokens
        if budget is None:
            return None, dollars
    if min(budget.input_tokens, budget.output_tokens, budget.llm_calls) < 0:
        msg = f"budget fields must be non-negative (0 means no limit), got {budget!r}"
        raise RunArgumentError(msg)
    return budget, dollars


def _checked_prices(prices: object, dollars: Decimal | None) -> Prices | None:
    """``prices``: a `Prices` or None, and given whenever the budget is in dollars."""
    if prices is None:
        if dollars is not None:
            msg = (
                f"budget=Budget(dollars={dollars}) needs prices=Prices({{...}}) to turn the "
                f"ledger's tokens into dollars"
            )
            raise RunArgumentError(msg)
        return None
    from executionkit._prices import Prices  # noqa: PLC0415 - loads decimal: only when used

    if not isinstance(prices, Prices):
        msg = f"prices must be a Prices or None, got {type(prices).__name__}"
        raise RunArgumentError(msg)
    return prices


def _check_what_steps_read(graph: Graph, context: dict[str, Any], resume_from: object) -> None:
    """Refuse, before any step runs, what the initial context makes fail later.

    A map whose ``over`` names neither a step nor a key of ``context``, and a
    sub-workflow (at any depth) with a step named like a key of ``context`` or a
    map whose items are nowhere in its initial context. Maps and sub-workflows
    a condition may skip are left to the condition.
    """
    keys = set(context)
    if isinstance(resume_from, WorkflowCheckpoint) and resume_from.version == LEGACY_VERSION:
        # 0.4 kept the initial context among the outputs; the resume restores it later.
        keys.update(name for name in resume_from.outputs if name not in graph.index)
    for position in graph.context_maps:
        over: str = getattr(graph.steps[position], "over", "")
        if over not in keys:
            msg = (
                f"step {graph.names[position]!r}: over={over!r} names neither a step nor a key "
                f"of initial_context (keys: {_listed(keys)}){did_you_mean(over, keys)}"
            )
            raise RunArgumentError(msg)
    given = {key: f"the initial_context key {key!r}" for key in keys} if graph.nested else {}
    for nested in graph.nested:
        clash = nested.clash(given)
        if clash is not None:
            raise RunArgumentError(clash)
        child = nested.graph
        for position in () if nested.skippable else child.context_maps:
            over = getattr(child.steps[position], "over", "")
            if over not in keys and over not in nested.keys:
                visible = {*keys, *nested.keys}
                msg = (
                    f"step {child.names[position]!r} of the sub-workflow of {nested.where}: "
                    f"over={over!r} names neither a step nor a key of its initial context "
                    f"(keys: {_listed(visible)}){did_you_mean(over, visible)}"
                )
                raise RunArgumentError(msg)


def _listed(keys: Collection[str], shown: int = 8) -> str:
    """The first ``shown`` of ``keys`` in order, quoted, for a message."""
    ordered = sorted(keys)
    more = ", ..." if len(ordered) > shown else ""
    return (names_text(ordered[:shown]) + more) or "none"


def _checked_rerun(
    graph: Graph, rerun: object, resume_from: object
) -> tuple[frozenset[str], dict[tuple[str, str | None], frozenset[str]]]:
    """The steps of this workflow to rerun, and the paths to route to each sub-workflow.

    A name of this workflow's step is taken as it is (a name may hold ``/``);
    anything else is a path (`split_path`): a sub-workflow step, its item key in
    a map of sub-workflows, then a step of the child, checked against the child
    workflow down to the last segment and against ``resume_from`` (a finished
    sub-workflow keeps no checkpoint to rerun a step in).
    """
    if rerun is None:
        return frozenset(), {}
    if isinstance(rerun, (str, bytes, Mapping)) or not isinstance(rerun, Collection):
        msg = (
            f"rerun must be a collection of step names such as a list, "
            f"got {type(rerun).__name__} {rerun!r}"
        )
        raise RunArgumentError(msg)
    own, paths = _parsed_rerun(graph, rerun)
    for entry, segments in paths.items():
        _check_path(graph, entry, segments)
    if (own or paths) and resume_from is None:
        msg = "rerun needs resume_from: without a checkpoint every step runs anyway"
        raise RunArgumentError(msg)
    routed: dict[tuple[str, str | None], set[str]] = {}
    for entry, segments in paths.items():
        if segments[0] in own:
            continue  # the whole sub-workflow runs again: nothing in it is kept
        assert isinstance(resume_from, WorkflowCheckpoint)  # noqa: S101 - checked above
        _check_unfinished(graph, entry, segments, resume_from)
        step, *rest = segments
        key = rest.pop(0) if graph.index[step] in graph.maps else None
        routed.setdefault((step, key), set()).add(join_path(*rest))
    return frozenset(own), {where: frozenset(rest) for where, rest in routed.items()}


def _parsed_rerun(
    graph: Graph, rerun: Collection[object]
) -> tuple[set[str], dict[str, list[str]]]:
    """The names of this workflow's steps, and the paths by entry; unknown names refused."""
    own: set[str] = set()
    paths: dict[str, list[str]] = {}
    unknown: list[object] = []
    for entry in rerun:
        if not isinstance(entry, str):
            unknown.append(entry)
        elif entry in graph.index:
            own.add(entry)
        elif len(segments := _segments(entry)) > 1:
            paths[entry] = segments
        elif segments[0] in graph.index:
            own.add(segments[0])
        else:
            unknown.append(entry)
    if unknown:
        hint = did_you_mean(unknown[0], graph.names) if isinstance(unknown[0], str) else ""
        msg = (
            f"rerun names steps this workflow does not have: {', '.join(map(repr, unknown))}{hint}"
        )
        raise RunArgumentError(msg)
    return own, paths


def _segments(entry: str) -> list[str]:
    try:
        return split_path(entry)
    except ValueError:
        msg = (
            f"rerun names {entry!r}, which is not a path of step names: write '%' as '%25' "
            f"and '/' as '%2F' in a name"
        )
        raise RunArgumentError(msg) from None


def _check_path(graph: Graph, entry: str, segments: list[str]) -> None:
    """Refuse a rerun path that names no step, naming the first segment that does not fit."""
    within = "this workflow"
    at = 0
    while True:
        name = segments[at]
        position = graph.index.get(name)
        if position is None:
            msg = (
                f"rerun names {entry!r}: {within} has no step {name!r}"
                f"{did_you_mean(name, graph.names)}"
            )
            raise RunArgumentError(msg)
        if at == len(segments) - 1:
            return
        step = f"step {name!r}" + ("" if at == 0 else f" of {within}")
        if position not in graph.workflows:
            msg = (
                f"rerun names {entry!r}: {step} does not run a sub-workflow, so it has no "
                f"steps of its own to rerun"
            )
            raise RunArgumentError(msg)
        child = graph_of(graph.steps[position].run)
        if position in graph.maps:
            at += 1
            if at == len(segments) - 1:
                example = join_path(*segments, child.names[0])
                msg = (
                    f"rerun names {entry!r}: one item of a map cannot be rerun alone; pass "
                    f"rerun=[{join_path(*segments[:at])!r}] to run the map again, or name a "
                    f"step of the item's sub-workflow, as {example!r}"
                )
                raise RunArgumentError(msg)
        graph = child
        within = f"the sub-workflow of {step}"
        at += 1


def _check_unfinished(
    graph: Graph, entry: str, segments: list[str], checkpoint: WorkflowCheckpoint | None
) -> None:
    """Refuse a rerun path into a sub-workflow that ``checkpoint`` records as finished.

    A finished child's checkpoint is dropped from its parent's: there is no
    recorded step left in it to rerun. A child with nothing recorded runs
    whole anyway, so a path into it needs nothing.
    """
    at = 0
    while checkpoint is not None and at < len(segments) - 1:
        name = segments[at]
        position = graph.index[name]
        is_map = position in graph.maps
        whole = join_path(*segments[: at + 1])
        if name in checkpoint.skipped:
            msg = (
                f"rerun names {entry!r}, but step {name!r} is recorded as skipped in "
                f"resume_from, so its sub-workflow never ran; pass rerun=[{whole!r}] to "
                f"decide again whether it runs"
            )
            raise RunArgumentError(msg)
        what = (
            f"the map of sub-workflows {name!r}"
            if is_map
            else f"the sub-workflow of step {name!r}"
        )
        finished = name in checkpoint.outputs
        nested: Mapping[str, Any] = checkpoint.children.get(name, {})
        if is_map:
            at += 1
            key = segments[at]
            if not finished and key in checkpoint.items.get(name, {}).get("outputs", {}):
                what, finished = f"item {key!r} of {what}", True
            following = nested.get("items", {}).get(key)
        else:
            following = nested.get("checkpoint")
        if finished:
            again = "run the map again" if is_map else "run it again whole"
            msg = (
                f"rerun names {entry!r}, but {what} is recorded as finished in resume_from, "
                f"and a finished sub-workflow keeps no checkpoint of its own to rerun a step "
                f"in; pass rerun=[{whole!r}] to {again}"
            )
            raise RunArgumentError(msg)
        checkpoint = following
        graph = graph_of(graph.steps[position].run)
        at += 1
