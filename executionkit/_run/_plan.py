"""What a resume would do, worked out without running anything (`Workflow.plan`).

Plain synchronous code with no asyncio in it. The plan checks the arguments
with `RunOptions.check` and the checkpoint with `restore`, exactly as `run` does
before its first step, so it raises what `run` would raise; then it reads what
is left to do off the restored state. No step function, condition or
``checkpoint_fn`` is called, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from executionkit._define._conditions import Conditions
from executionkit._define._options import RunOptions
from executionkit._record._children import Children
from executionkit._record._items import item_pairs
from executionkit._record._questions import Questions
from executionkit._resume._restore import restore
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._graph import Graph
    from executionkit._define._step_kinds import MapStep
    from executionkit._resume._restore import Restored

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What resuming a checkpoint would do: returned by `Workflow.plan`, which runs nothing.

    Every step name is listed in declaration order. Each step of the workflow is
    in exactly one of ``would_run``, ``restored``, ``skipped``, ``answered`` and
    the own (unnested) questions of ``waiting``.

    Attributes:
        would_run: The steps the resume would decide or run: every step whose
            output (or skip) is not kept. A step in ``may_skip`` may end up
            skipped by a condition instead; the others run (or fail), though
            those after a question run only once it is answered.
        may_skip: The steps of ``would_run`` that a condition (``when``, or a
            ``join`` rule over skipped dependencies) decides before they start.
        restored: The steps whose recorded output is kept, as
            `WorkflowResult.restored` would list them.
        skipped: The steps whose recorded skip is kept, each with its reason.
        invalidated: The recorded work that would not be used, step name to
            reason (a changed version or dependencies, ``rerun``, depending on
            such a step, dropped items or questions), as
            `WorkflowResult.invalidated` would report it before any step runs.
        discarded: Recorded steps the workflow does not have, dropped because
            ``unknown_steps="discard"`` was passed.
        answered: The ask steps whose pending question ``answers`` answers, or
            whose deadline passed and whose ``default`` answers it.
        questions: The ask steps of ``would_run`` that would ask a new question.
        waiting: The questions still pending after ``answers`` (by question path,
            those of sub-workflows as ``step/question``); the resume waits for
            them. A question answered late, or past its deadline with no answer
            and no default, stays here: the resume would fail that ask step.
        items: For each unfinished map whose recorded items are kept: the count
            of recorded items, and the keys of the items the resume would run
            (in item order), or None when they are known only by running (the
            ``over`` step has no recorded output).
        code_changed: The restored steps whose code changed since their
            output was recorded (``on_code_change="keep"``): step name to what
            running it again would cost, the usage its recorded attempts
            spent (their ledger rows). Under ``"rerun"`` they are in
            ``would_run`` and ``invalidated`` instead.
    """

    would_run: tuple[str, ...]
    may_skip: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    invalidated: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    discarded: tuple[str, ...] = ()
    answered: tuple[str, ...] = ()
    questions: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    items: Mapping[str, tuple[int, tuple[str, ...] | None]] = field(default_factory=lambda: _EMPTY)
    code_changed: Mapping[str, TokenUsage] = field(default_factory=lambda: _EMPTY)


def plan_resume(graph: Graph, arguments: Mapping[str, object]) -> ResumePlan:
    """The plan of a run of ``graph`` with ``arguments`` (`Workflow.plan`'s, by name).

    Raises what `Workflow.run` raises before any step runs.
    """
    options = RunOptions.check(
        graph,
        {
            "checkpoint_fn": None,
            "metadata": None,
            "on_error": "finish",
            "budget": None,
            "prices": None,
            "validate_json": False,
            "schedule": "batch",
            "max_concurrency": None,
            "on_event": None,
            "executor": None,
            "checkpoint_every": "batch",
            "stop_grace": 5.0,
            **arguments,
        },
    )
    context = options.context
    checkpoint = options.resume_from
    if checkpoint is None:
        return ResumePlan(
            would_run=graph.names,
            may_skip=_may_skip(graph, context, {}, {}),
            questions=tuple(
                name for position, name in enumerate(graph.names) if position in graph.asks
            ),
        )
    state = restore(
        graph,
        checkpoint,
        context,
        run_id=options.run_id,
        metadata=None,
        rerun=options.rerun,
        unknown_steps=options.unknown_steps,
        on_code_change=options.on_code_change,
    )
    restored = tuple(name for name in graph.names if name in state.outputs)
    questions = Questions(graph, state.pending)
    children = Children(state.children)
    answered: tuple[str, ...] = ()
    if options.answers or state.pending:
        # The run's own check of the answers: what it refuses, the plan refuses.
        checked = questions.answer(options.answers, state.outputs, children)
        taken, _failed = questions.overdue(checked.expired)  # defaults past their deadline
        stored = {**checked.stored, **taken}
        answered = tuple(name for name in graph.names if name in stored)
        for name in answered:
            state.outputs[name] = stored[name]
    waiting = questions.waiting(children)
    done = {*state.outputs, *state.skipped, *questions.pending}
    would_run = tuple(name for name in graph.names if name not in done)
    may_skip = set(_may_skip(graph, context, state.outputs, state.skipped))
    return ResumePlan(
        would_run=would_run,
        may_skip=tuple(name for name in would_run if name in may_skip),
        restored=restored,
        skipped=MappingProxyType(
            {name: state.skipped[name] for name in graph.names if name in state.skipped}
        ),
        invalidated=MappingProxyType(dict(state.invalidated)),
        discarded=state.discarded,
        answered=answered,
        questions=tuple(
            name
            for name in would_run
            if graph.index[name] in graph.asks and name not in state.pending
        ),
        waiting=tuple(waiting),
        items=MappingProxyType(_items(graph, state, context)),
        code_changed=MappingProxyType(_rerun_costs(checkpoint, state.code_changed)),
    )


def _rerun_costs(
    checkpoint: WorkflowCheckpoint, changed: Mapping[str, Any]
) -> dict[str, TokenUsage]:
    """What each step in ``changed`` spent on its recorded output: its rows in the ledger."""
    if not changed:
        return {}
    by_step = checkpoint.spending.by_step()
    return {name: (by_step[name].total if name in by_step else TokenUsage()) for name in changed}


def _may_skip(
    graph: Graph, context: Mapping[str, Any], outputs: Mapping[str, Any], skipped: dict[str, str]
) -> tuple[str, ...]:
    """The steps a condition decides before they start (whether or not they run)."""
    if not graph.conditional and not skipped:
        return ()
    deciding = Conditions(graph, context, outputs, skipped).deciding
    return tuple(name for position, name in enumerate(graph.names) if position in deciding)


def _items(
    graph: Graph, state: Restored, context: Mapping[str, Any]
) -> dict[str, tuple[int, tuple[str, ...] | None]]:
    """Each unfinished map: its recorded item count and the keys left, when known."""
    found: dict[str, tuple[int, tuple[str, ...] | None]] = {}
    for name in graph.names:
        if name not in state.items:
            continue
        recorded = state.items[name][0]
        step = cast("MapStep", graph.steps[graph.index[name]])
        over = step.over
        source = state.outputs if over in graph.index else context
        left: tuple[str, ...] | None = None
        if over in source:
            try:
                pairs, _ = item_pairs(step, {over: source[over]})
            except Exception:  # noqa: BLE001 - the run would fail the map step; no keys known
                pairs = None
            if pairs is not None:
                left = tuple(key for key, _ in pairs if key not in recorded)
        found[name] = (len(recorded), left)
    return found
