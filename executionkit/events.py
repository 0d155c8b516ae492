"""Typed events describing a run as it happens, for ``Workflow.run(..., on_event=...)``.

Every event is a frozen dataclass carrying the ``run_id``. A callback receives
them in order; it may be a plain function or a coroutine function (awaited in
order, on a task of the run's that never outlives it). An exception raised by
the callback is logged on the ``executionkit`` logger and never affects the run.

Example:
    >>> from executionkit.events import StepFinished
    >>> def show(event):
    ...     if isinstance(event, StepFinished):
    ...         print(event.step, event.cost.total_tokens)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from decimal import Decimal  # noqa: TC004 - an annotation only; keeps import cheap

__all__ = [
    "CheckpointTaken",
    "CodeChanged",
    "Event",
    "EventCallback",
    "ItemFailed",
    "ItemFinished",
    "ItemStarted",
    "MapStarted",
    "QuestionAnswered",
    "QuestionAsked",
    "RunFailed",
    "RunFinished",
    "RunStarted",
    "RunSuspended",
    "StepFailed",
    "StepFinished",
    "StepInvalidated",
    "StepRestored",
    "StepRetried",
    "StepSkipped",
    "StepStarted",
    "StepStreamed",
    "WaitingForLimit",
]


@dataclass(frozen=True)
class Event:
    """Base of all events.

    Attributes:
        run_id: The run the event belongs to.
    """

    run_id: str


@dataclass(frozen=True)
class RunStarted(Event):
    """The run is about to start its first step (or has nothing left to do).

    Attributes:
        steps: Number of steps in the workflow.
        recorded: Steps restored from ``resume_from``, which will not run: those
            with an output and those a condition skipped, in declaration order.
        resumed: Whether the run continues from a checkpoint.
        cost: Token usage restored from that checkpoint (zero for a fresh run).
        trace: The run's trace context stored in that checkpoint (a W3C
            ``traceparent`` string), or None.
        parent: For the run of a sub-workflow, ``(parent run_id, step name,
            item key or None)`` of the step that runs it; None otherwise.
        ran_before: Seconds the attempts recorded in that checkpoint ran
            (its ``attempts``, overlapping ones counted once, the time between
            calls not at all); 0.0 for a fresh run.
    """

    steps: int
    recorded: tuple[str, ...]
    resumed: bool
    cost: TokenUsage = field(default_factory=TokenUsage)
    trace: str | None = None
    parent: tuple[str, str, str | None] | None = None
    ran_before: float = 0.0


@dataclass(frozen=True)
class StepRestored(Event):
    """A step is not run because the checkpoint resumed from records it.

    Recorded outputs and recorded skips alike: a skipped step's condition is
    not evaluated again.

    Attributes:
        step: The step's name.
    """

    step: str


@dataclass(frozen=True)
class StepSkipped(Event):
    """A condition skipped a step: it will not run and has no output.

    Emitted when the skip is decided (the step's ``when`` returned a falsy
    value, or its ``join`` rule found skipped dependencies). A skip restored
    from the checkpoint resumed from is announced with `StepRestored` instead.

    Attributes:
        step: The step's name.
        reason: Why, as in `WorkflowResult.skipped`.
    """

    step: str
    reason: str


@dataclass(frozen=True)
class StepInvalidated(Event):
    """A recorded step will run again (or its saved progress was dropped).

    Attributes:
        step: The step's name.
        reason: Why, as in `WorkflowResult.invalidated`.
    """

    step: str
    reason: str


@dataclass(frozen=True)
class CodeChanged(Event):
    """On resume: the code of a recorded step changed since its output was recorded, kept.

    Said once per such step under ``on_code_change="keep"``, after the
    `StepInvalidated` events (under ``"rerun"`` the step is invalidated
    instead, with the reason ``code changed (...)``).

    Attributes:
        step: The step's name.
        recorded: The fingerprint of the code that recorded its output.
        current: The fingerprint of its code now.
    """

    step: str
    recorded: str
    current: str


@dataclass(frozen=True)
class StepStarted(Event):
    """A step (or a retry of it) started.

    Attributes:
        step: The step's name.
        attempt: 1 for the first attempt, 2 for the first retry, and so on.
    """

    step: str
    attempt: int


@dataclass(frozen=True)
class MapStarted(Event):
    """A map step (`Step.map`) found its items; those not recorded yet start now.

    Attributes:
        step: The map step's name.
        items: How many items the map has.
        recorded: How many of them were recorded already (restored on resume).
    """

    step: str
    items: int
    recorded: int


@dataclass(frozen=True)
class ItemStarted(Event):
    """An item of a map step (`Step.map`) started (or a retry of it).

    Attributes:
        step: The map step's name.
        item: The item's key.
        attempt: 1 for the first attempt, 2 for the first retry, and so on.
    """

    step: str
    item: str
    attempt: int


@dataclass(frozen=True)
class ItemFinished(Event):
    """An item of a map step completed and was recorded.

    Attributes:
        step: The map step's name.
        item: The item's key.
        duration: Seconds from the item's first attempt to its end.
        cost: What the item's successful attempt spent.
        recorded: How many items of the map are recorded now, restored ones included.
        dollars: With ``run(prices=...)``, the run's bill so far in dollars
            (as `CheckpointTaken.dollars`), this attempt's usage included; None
            without prices.
    """

    step: str
    item: str
    duration: float
    cost: TokenUsage
    recorded: int
    dollars: Decimal | None = None


@dataclass(frozen=True)
class ItemFailed(Event):
    """An item of a map step failed (after its retries); the map step will fail.

    Attributes:
        step: The map step's name.
        item: The item's key.
        duration: Seconds from the item's first attempt to its end.
        error: What it raised.
        usage: What its last attempt spent (wasted: no output was recorded).
        dollars: With ``run(prices=...)``, the run's bill so far in dollars
            (as `CheckpointTaken.dollars`), this attempt's usage included; None
            without prices.
    """

    step: str
    item: str
    duration: float
    error: BaseException
    usage: TokenUsage = field(default_factory=TokenUsage)
    dollars: Decimal | None = None


@dataclass(frozen=True)
class QuestionAsked(Event):
    """An ask step (`Step.ask`) asked its question; it is recorded as pending.

    Attributes:
        step: The ask step's name.
        question: The question, as recorded.
        expires_at: When it expires (UTC ISO 8601), or None.
    """

    step: str
    question: Any
    expires_at: str | None


@dataclass(frozen=True)
class QuestionAnswered(Event):
    """An answer given to ``run`` (or its default) became the output of its ask step.

    Attributes:
        step: The ask step's name.
        answered_by: ``"deadline"`` when the answer is the step's ``default``,
            taken because the question's deadline passed; None when given.
    """

    step: str
    answered_by: str | None = None


@dataclass(frozen=True)
class StepRetried(Event):
    """An attempt failed and the step will be tried again after ``delay`` seconds.

    Attributes:
        step: The step's name.
        attempt: The attempt that failed.
        error: What it raised.
        delay: Seconds until the next attempt.
        item: In a map step, the key of the item being retried; None otherwise.
        usage: What the failed attempt spent (wasted, and counted in the run's cost).
        dollars: With ``run(prices=...)``, the run's bill so far in dollars
            (as `CheckpointTaken.dollars`), this attempt's usage included; None
            without prices.
    """

    step: str
    attempt: int
    error: BaseException
    delay: float
    item: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    dollars: Decimal | None = None


@dataclass(frozen=True)
class StepStreamed(Event):
    """A piece of a running attempt's output, sent by `StepContext.stream` as it arrives.

    Model tokens as a client streams them, for a person to read while the step
    runs. Never checkpointed: the step's output is still its return value. Each
    attempt streams its own text: an event with a higher ``attempt`` than the
    text shown so far starts a new text (a retry never continues the failed
    attempt's).

    Attributes:
        step: The step's name.
        attempt: The attempt streaming (1 for the first).
        text: This piece, to append to the attempt's text so far.
        item: In a map step, the item's key; None otherwise.
    """

    step: str
    attempt: int
    text: str
    item: str | None = None


@dataclass(frozen=True)
class WaitingForLimit(Event):
    """A step (or a map's next items) waits for room in its limit (`executionkit.Limit`).

    Waiting is not an attempt: nothing runs, nothing is paid, and no slot of
    ``max_concurrency`` is held meanwhile. Said once per wait; the next
    `StepStarted`, `ItemStarted` or `StepRetried` ends it.

    Attributes:
        step: The step's name (a map step's for its items).
        key: The limit's key.
        seconds: How long until the limit's window may have room (the end of a
            pause after a 429, or of the oldest attempt in the window);
            ``math.inf`` when it waits for an attempt of the key to end.
        item: The item's key for a retry of one map item; None otherwise.
    """

    step: str
    key: str
    seconds: float
    item: str | None = None


@dataclass(frozen=True)
class StepFinished(Event):
    """A step completed and its output was recorded.

    Attributes:
        step: The step's name.
        duration: Seconds from its start to its completion, retries included.
        cost: What its successful attempt spent: usage reported with
            `StepContext.add_usage` plus its result's ``PatternResult.cost``
            (failed attempts' usage came with `StepRetried`).
        dollars: With ``run(prices=...)``, the run's bill so far in dollars
            (as `CheckpointTaken.dollars`), this attempt's usage included; None
            without prices.
    """

    step: str
    duration: float
    cost: TokenUsage
    dollars: Decimal | None = None


@dataclass(frozen=True)
class StepFailed(Event):
    """A step failed on its last attempt (or its output could not be recorded).

    Attributes:
        step: The step's name.
        duration: Seconds from its start to the failure.
        error: What it raised.
        usage: What its last attempt spent (wasted: no output was recorded).
        dollars: With ``run(prices=...)``, the run's bill so far in dollars
            (as `CheckpointTaken.dollars`), this attempt's usage included; None
            without prices.
    """

    step: str
    duration: float
    error: BaseException
    usage: TokenUsage = field(default_factory=TokenUsage)
    dollars: Decimal | None = None


@dataclass(frozen=True)
class CheckpointTaken(Event):
    """``checkpoint_fn`` returned (or its awaitable finished) for a checkpoint.

    Attributes:
        seq: The checkpoint's ``seq``.
        step_index: Number of steps it records.
        new_outputs: Steps it records that the previous checkpoint did not.
        dollars: With ``run(prices=...)``, the run's bill so far in dollars (its
            ledger priced, restored usage included; usage of models the prices
            do not list is not in it); None without prices.
    """

    seq: int
    step_index: int
    new_outputs: tuple[str, ...]
    dollars: Decimal | None = None


@dataclass(frozen=True)
class RunFinished(Event):
    """Every step is recorded; ``run`` is about to return.

    Attributes:
        duration: Seconds the call of ``run`` took.
        cost: Total token usage, restored usage included.
        executed: Number of steps that ran in this call.
        dollars: With ``run(prices=...)``, the run's bill in dollars (as
            `CheckpointTaken.dollars`); None without prices.
    """

    duration: float
    cost: TokenUsage
    executed: int
    dollars: Decimal | None = None


@dataclass(frozen=True)
class RunSuspended(Event):
    """Nothing else can run until questions are answered or waits are due; ``run`` returns.

    Attributes:
        duration: Seconds the call of ``run`` took.
        cost: Total token usage, restored usage included.
        pending: The ask steps waiting for an answer, in declaration order.
        dollars: With ``run(prices=...)``, the run's bill in dollars (as
            `CheckpointTaken.dollars`); None without prices.
        waits: The wait steps not due yet (`Step.wait`), by path, as
            `WorkflowResult.waits` names them.
    """

    duration: float
    cost: TokenUsage
    pending: tuple[str, ...]
    dollars: Decimal | None = None
    waits: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunFailed(Event):
    """``run`` is about to raise (a failure, budget, cancellation or interrupt).

    Attributes:
        duration: Seconds the call of ``run`` took.
        error: The exception ``run`` raises.
        invalidated: Steps whose recorded outputs were dropped on resume, with why.
        cost: Total token usage, restored usage and wasted attempts included.
        dollars: With ``run(prices=...)``, the run's bill in dollars (as
            `CheckpointTaken.dollars`); None without prices.
    """

    duration: float
    error: BaseException
    invalidated: Mapping[str, str]
    cost: TokenUsage = field(default_factory=TokenUsage)
    dollars: Decimal | None = None


EventCallback: TypeAlias = Callable[[Event], object]
"""Receives each event; may return an awaitable, which is awaited in order."""
