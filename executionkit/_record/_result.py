"""What a run hands back: a `WorkflowResult`, or an error with the checkpoint of what completed.

`WorkflowFailed` and `BudgetExceeded` live here rather than with the other
errors: each holds the checkpoint a failed run still hands over, so they sit
above the checkpoint format, beside the result of a run that did not fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._ledger import Spending
from executionkit._errors import ExecutionKitError, safe_str
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from decimal import Decimal

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._prices import Budget


@dataclass(frozen=True)
class WorkflowResult:
    """The outputs and total token usage of a completed run.

    Attributes:
        outputs: Read-only mapping of every step's output, in declaration order;
            the initial context is not included.
        cost: Total token usage: restored from the checkpoint plus newly spent.
        run_id: The run's identifier (kept across resumes).
        executed: Steps that ran in this call, in the order they were recorded.
        restored: Steps restored from ``resume_from`` and not run, in declaration order.
        invalidated: Steps the checkpoint recorded but that ran again, each with
            the reason: a changed `Step.version` or dependencies, ``rerun``, or
            depending on such a step. Their earlier token usage stays counted.
        discarded: Recorded steps the workflow does not have, dropped because
            ``unknown_steps="discard"`` was passed.
        skipped: Read-only mapping of each step a condition skipped (in this
            call or restored from ``resume_from``) to the reason, in declaration
            order. A skipped step has no output: it is in neither ``outputs``,
            ``executed`` nor ``restored``.
        pending: The questions waiting for an answer (`Step.ask`): ask step name
            to its question, in declaration order. When it is not empty the run
            is suspended, not finished: ``outputs`` holds only what completed.
            Resume with ``answers={name: answer}``.
        spending: The cost ledger summed: what successful attempts spent and
            failed, timed-out or cancelled ones wasted, by step, model and
            item, and what this call spent against what was restored
            (`executionkit.Spending`). ``cost`` is its total plus any usage
            restored from checkpoints older than format 4.
        waits: The waits not due yet (`Step.wait`): wait step name (a
            sub-workflow's by path, as in ``pending``) to when it is due, an
            aware `datetime.datetime` in UTC. When it is not empty the run is
            suspended, not finished; resume it once they are due.
    """

    outputs: MappingProxyType[str, Any]
    cost: TokenUsage = field(default_factory=TokenUsage)
    run_id: str = ""
    executed: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()
    invalidated: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    discarded: tuple[str, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    pending: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    spending: Spending = field(default_factory=lambda: Spending.of(()))
    waits: Mapping[str, datetime] = field(default_factory=lambda: MappingProxyType({}))


class WorkflowFailed(ExecutionKitError):  # noqa: N818 - the name reads as an event, like StopIteration
    """One or more steps raised; everything that completed was checkpointed.

    Before this is raised, the steps still running in the failing batch were
    allowed to finish, their outputs were recorded and ``checkpoint_fn`` was
    called with a checkpoint whose ``errors`` name each failed step. Resume
    from `checkpoint` to run only the failed steps and what depends on them.

    Attributes:
        errors: Step name -> the exception that step raised, in declaration
            order. The first is also this exception's ``__cause__``.
        checkpoint: The checkpoint taken after the failure, usable as
            ``resume_from`` even if you stored nothing yourself.
    """

    def __init__(
        self,
        errors: Mapping[str, BaseException],
        checkpoint: WorkflowCheckpoint,
    ) -> None:
        """Create the error from the failed steps and the checkpoint taken."""
        self.errors = dict(errors)
        self.checkpoint = checkpoint
        names = ", ".join(repr(name) for name in self.errors)
        count = len(self.errors)
        first_name, first = next(iter(self.errors.items()))
        if count == 1:
            failed = f"step {first_name!r} raised {_exception_text(first)}"
        else:
            failed = (
                f"{count} steps raised ({names}; see .errors); the first, {first_name!r}, "
                f"raised {_exception_text(first)}"
            )
        super().__init__(
            f"workflow failed: {_sentence(failed)} The checkpoint (.checkpoint, "
            f"seq={checkpoint.seq}) records {_completed_steps(checkpoint.step_index)}; "
            f"resume from it to run only what is left"
        )


class BudgetExceeded(ExecutionKitError):  # noqa: N818 - reads as an event, like WorkflowFailed
    """The run's usage reached a limit of its ``budget``; nothing new started.

    Steps already running were allowed to finish and were recorded, and a
    checkpoint was taken. Resume from `checkpoint` with a larger budget to
    continue where the run stopped (restored usage counts against the budget).

    Attributes:
        checkpoint: The checkpoint taken when the run stopped.
        usage: Total token usage at that point, restored usage included.
        budget: The budget that was reached: the `TokenUsage` given, or the
            `Budget` (tokens and dollars).
        dollars: With a dollar budget, the dollars spent at that point (the
            ledger priced with the run's prices); None otherwise.
    """

    def __init__(
        self,
        checkpoint: WorkflowCheckpoint,
        usage: TokenUsage,
        budget: TokenUsage | Budget,
        *,
        dollars: tuple[Decimal | None, Decimal, tuple[str | None] | None] | None = None,
    ) -> None:
        """Create the error from the checkpoint, the usage and the budget.

        ``dollars``: (spent, limit, (the first model found unpriced,) or None).
        """
        self.checkpoint = checkpoint
        self.usage = usage
        self.budget = budget
        self.dollars = None if dollars is None else dollars[0]
        tokens = budget if isinstance(budget, TokenUsage) else budget.tokens
        parts = []
        if tokens is not None:
            parts += [
                f"{name} {used} of {limit}"
                for name, used, limit in (
                    ("input_tokens", usage.input_tokens, tokens.input_tokens),
                    ("output_tokens", usage.output_tokens, tokens.output_tokens),
                    ("llm_calls", usage.llm_calls, tokens.llm_calls),
                )
                if limit and used >= limit
            ]
        if dollars is not None:
            spent, limit, unpriced = dollars
            if unpriced is not None:
                model = (
                    "usage reported without a model"
                    if unpriced[0] is None
                    else (f"model {unpriced[0]!r}")
                )
                parts.append(
                    f"{model} has no price in the run's prices, so the dollar budget "
                    f"(${limit}) cannot count it (price it, or give Prices a default)"
                )
            elif spent is not None and spent >= limit:
                parts.append(f"dollars ${spent} of ${limit}")
        super().__init__(
            f"budget reached: {', '.join(parts)}; no new step or retry was started. The "
            f"checkpoint (.checkpoint, seq={checkpoint.seq}) records "
            f"{_completed_steps(checkpoint.step_index)}; resume from it with a larger budget "
            f"to continue"
        )


def _exception_text(error: BaseException) -> str:
    """Return ``"Type: message"``, or the type alone when the message is empty."""
    message = safe_str(error)
    name = type(error).__name__
    return f"{name}: {message}" if message else name


def _sentence(text: str) -> str:
    # The text ends in an exception's own message, which may end its sentence already.
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _completed_steps(count: int) -> str:
    if count == 0:
        return "no completed step"
    return "1 completed step" if count == 1 else f"{count} completed steps"


class _SummedWhenRead:
    """`WorkflowResult.spending` of a run's own result: its ledger rows summed when first read.

    Summing is a pass over every row; most results are used for their outputs
    only. A result built by its constructor holds ``spending`` in its
    ``__dict__``, which takes precedence: for it this is never called.
    """

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:  # the class attribute
            msg = "type object 'WorkflowResult' has no attribute 'spending'"
            raise AttributeError(msg)
        fields = instance.__dict__
        rows, restored = fields.pop("_rows")
        summed = fields["spending"] = Spending.of(rows, restored)
        return summed


def run_result(rows: tuple[Any, ...], restored_rows: int, **fields: Any) -> WorkflowResult:
    """A run's `WorkflowResult`, whose ``spending`` sums ``rows`` when first read.

    The first ``restored_rows`` of them came from the checkpoint resumed.
    """
    result = WorkflowResult(**fields)
    state = result.__dict__
    del state["spending"]
    state["_rows"] = (rows, restored_rows)
    return result


WorkflowResult.spending = _SummedWhenRead()  # type: ignore[assignment]  # after @dataclass
