"""`current_step()`: what a running step knows about itself."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from executionkit._types import TokenUsage

if TYPE_CHECKING:
    import asyncio


class _Host(Protocol):
    """The run a step context belongs to."""

    def progress_of(self, name: str) -> Any: ...

    def save_progress(self, name: str, value: object) -> asyncio.Future[None]: ...

    def add_usage(
        self, name: str, key: str | None, attempt: int, usage: TokenUsage, model: str | None
    ) -> None: ...

    def stream(self, name: str, key: str | None, attempt: int, text: str) -> None: ...


class StepContext:
    """The identity and progress of the step that is running now.

    Get it with `current_step` from inside a step, sync or async. Each attempt
    of each step sees its own; concurrently running steps never see each
    other's.

    Attributes:
        name: The step's name.
        run_id: The run's identifier, the same across resumes.
        attempt: 1 for the first attempt, 2 for the first retry, and so on.
        max_attempts: ``retries + 1``.
        item_key: In an item of a `Step.map`, the item's key (``name`` is the
            map step's); None in other steps.
    """

    __slots__ = ("_host", "attempt", "item_key", "max_attempts", "name", "run_id")

    def __init__(  # noqa: PLR0917 - built positionally from the runner's tuple
        self,
        host: _Host,
        name: str,
        run_id: str,
        attempt: int,
        max_attempts: int,
        item_key: str | None = None,
    ) -> None:
        """Create the context of one attempt (done by the runner, not by you)."""
        self._host = host
        self.name = name
        self.run_id = run_id
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.item_key = item_key

    @property
    def idempotency_key(self) -> str:
        """A key that is the same for every attempt and every resume of this step in this run.

        32 hex characters derived from ``run_id`` and the step name (and, in a
        map item, the item key, so each item has its own). Pass it to APIs that
        accept idempotency keys (payments, LLM batch APIs) so a step that ran
        again after a crash does not repeat the side effect.
        """
        import hashlib  # noqa: PLC0415 - only steps that ask pay for the import

        identity = f"{self.run_id}\0{self.name}"
        if self.item_key is not None:
            identity += f"\0{self.item_key}"
        return hashlib.sha256(identity.encode()).hexdigest()[:32]

    @property
    def progress(self) -> Any:
        """The progress value this step saved last, restored on resume; None if none."""
        return self._host.progress_of(self.name)

    def add_usage(self, usage: TokenUsage, *, model: str | None = None) -> None:
        """Count tokens this attempt spent, as it spends them.

        Call it after every model call (or once with a sum), from the step
        itself or a thread it runs in. The usage counts whatever happens next:
        if the attempt then fails, times out or is cancelled, it is counted as
        wasted (`WorkflowResult.spending`), in the run's ``cost``, in budgets
        and in every checkpoint. ``PatternResult.cost`` of the step's result
        adds to it: report each call once, one way or the other. In a process
        or Dask executor, the usage travels back with the result or exception.

        Args:
            usage: The tokens and calls spent.
            model: The model that spent them, so that cost can be split by
                model (`Spending.by_model`).

        Raises:
            TypeError: If ``usage`` is not a `TokenUsage` or ``model`` is not
                a str or None.
        """
        given: object = usage
        if not isinstance(given, TokenUsage):
            msg = (
                f"step {self.name!r}: add_usage() takes a TokenUsage, got "
                f"{type(usage).__name__}; build one with "
                f"TokenUsage(input_tokens=..., output_tokens=..., llm_calls=...)"
            )
            raise TypeError(msg)
        if model is not None and type(model) is not str:
            got = type(model).__name__
            msg = f"step {self.name!r}: add_usage(model=...) must be a str or None, got {got}"
            raise TypeError(msg)
        self._host.add_usage(self.name, self.item_key, self.attempt, usage, model)

    def stream(self, text: str) -> None:
        """Send a piece of this attempt's output as it arrives: model tokens, say.

        Listeners get it at once as a `StepStreamed` event (``on_event``, the
        page of ``executionkit serve``); it is never checkpointed, and the
        step's output is still what it returns. Call it from the step itself
        or a thread it runs in; pieces of one thread arrive in order. A retry
        streams afresh: its events carry its own attempt number. In a process
        or Dask executor, the pieces are dropped.

        Args:
            text: The piece, appended to what this attempt streamed so far.

        Raises:
            TypeError: If ``text`` is not a str.
        """
        if type(text) is not str:
            msg = f"step {self.name!r}: stream() takes a str, got {type(text).__name__}"
            raise TypeError(msg)
        if text:
            self._host.stream(self.name, self.item_key, self.attempt, text)

    def save_progress(self, value: object) -> asyncio.Future[None]:
        """Record ``value`` as this step's progress and have it checkpointed.

        Saving triggers a checkpoint that carries the value (calls to
        ``checkpoint_fn`` still never overlap). An async step can ``await`` the
        returned future to continue only once that checkpoint was taken; a sync
        step can ignore it. On resume, the step reads the value back from
        `progress`; when the step completes, its progress is dropped.

        Args:
            value: Plain data only: dicts with str keys, lists, str, int,
                finite float, bool and None.

        Raises:
            CheckpointValueError: If ``value`` is not plain data; the message
                names the step and the path of the offending part.
        """
        if self.item_key is not None:
            msg = (
                f"step {self.name!r}, item {self.item_key!r}: save_progress() is not available "
                f"in the items of a map; each item is recorded as soon as it completes"
            )
            raise RuntimeError(msg)
        return self._host.save_progress(self.name, value)

    def __repr__(self) -> str:
        """Show the step, run and attempt (and the item key in a map item)."""
        item = "" if self.item_key is None else f", item_key={self.item_key!r}"
        return (
            f"StepContext(name={self.name!r}, run_id={self.run_id!r}{item}, "
            f"attempt={self.attempt}, max_attempts={self.max_attempts})"
        )


# The runner stores the StepContext's arguments (cheaper on every step than building it);
# current_step() builds the object when a step asks.
CURRENT_STEP: ContextVar[
    StepContext | tuple[Any, str, str, int, int] | tuple[Any, str, str, int, int, str]
] = ContextVar("executionkit_current_step")


def current_step() -> StepContext:
    """Return the `StepContext` of the step running in this task or thread.

    Raises:
        RuntimeError: If called outside a running step.
    """
    try:
        current = CURRENT_STEP.get()
    except LookupError:
        msg = (
            "executionkit.current_step() was called outside a running step; call it from "
            "inside a step's run function"
        )
        raise RuntimeError(msg) from None
    if isinstance(current, StepContext):
        return current
    return StepContext(*current)
