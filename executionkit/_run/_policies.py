"""The run's rules for starting work: plain code, no asyncio, like `Frontier`.

`Policies` answers the questions the runner and the map driver ask before they
start anything: may this batch begin, may this step start, may this item
start; and what a failure means. It reads the run's ``on_error``, its budget
(through the record), why the run is stopping, and the concurrency `Slots`.

`Slots` is the run's ``max_concurrency``: one pool for everything that does
work, shared by the run's steps, its maps' items and its sub-workflows' steps
(decision 0009). A step that only holds other work (a map, a sub-workflow)
takes no slot; each of its items, and each step of its child, takes one.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from executionkit._define._options import OnError

FailureMeans = Literal["keep going", "start nothing new", "cancel"]

# The slots of the run whose sub-workflow is starting: its child's run takes them
# (set around the child's `Workflow.run` by `ChildRuns.run`, in that step's context).
SHARED_SLOTS: ContextVar[Slots | None] = ContextVar("executionkit_slots", default=None)
# Set by a sub-workflow step around its child's run: (parent run_id, step name, item key).
PARENT_STEP: ContextVar[tuple[str, str, str | None] | None] = ContextVar(
    "executionkit_parent_step", default=None
)


class Slots:
    """At most ``limit`` units of work at once (None: no limit), with listeners for releases."""

    __slots__ = ("_listeners", "limit", "taken")

    def __init__(self, limit: int | None) -> None:
        """A pool of ``limit`` slots, all free."""
        self.limit = limit
        self.taken = 0
        self._listeners: list[Callable[[], None]] = []

    def free(self) -> int | None:
        """How many slots are free now; None when there is no limit."""
        return None if self.limit is None else self.limit - self.taken

    def take(self, count: int = 1) -> None:
        """Take ``count`` slots (the caller asked `free` first)."""
        self.taken += count

    def release(self) -> None:
        """Give one slot back and tell whoever waits for one."""
        self.taken -= 1
        if self._listeners:
            for listener in tuple(self._listeners):
                listener()

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each release until `forget` is called."""
        self._listeners.append(listener)

    def forget(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""
        self._listeners.remove(listener)


class Policies:
    """Whether work may start, and what a failure means, for one run."""

    __slots__ = ("_eager", "_failures", "_over_budget", "on_error", "slots", "stopping")

    def __init__(
        self,
        on_error: OnError,
        slots: Slots,
        *,
        eager: bool,
        failures: Collection[object],
        over_budget: Callable[[], bool] | None,
    ) -> None:
        """Rules for a run with ``on_error``, its ``slots``, and its record's state."""
        self.on_error = on_error
        self.slots = slots
        self._eager = eager
        # Read, not called: the rules are asked before every step starts.
        self._failures = failures
        # None: the run has no budget, so nothing is asked before each step and batch.
        self._over_budget = over_budget
        # Set once the run stops for good: an interrupt, or checkpoint_fn failed.
        self.stopping = False

    def may_begin_batch(self) -> bool:
        """Whether the next batch may begin (batch mode)."""
        if self.stopping:
            return False
        if self._failures and self.on_error != "continue":
            return False
        over_budget = self._over_budget
        return over_budget is None or not over_budget()

    def may_start_ready(self) -> bool:
        """Whether steps that are ready may still start (eager mode), slots aside."""
        if self.stopping:
            return False
        if self._failures and self.on_error == "cancel":
            return False
        return self._may_start_more()

    def may_start(self) -> bool:
        """Whether another step may start now.

        Without a concurrency limit, a batch starts as a whole: a failure or the
        budget stops the batches after it. Eager steps start one by one, and so
        do steps under a limit: those stop at once.
        """
        if self.stopping:
            return False
        if self._failures and self.on_error == "cancel":
            return False
        slots = self.slots
        if slots.limit is None:
            return not self._eager or self._may_start_more()
        return slots.limit > slots.taken and self._may_start_more()

    def waits_for_slot(self) -> bool:
        """Whether a step may start but for the slots, all held by other work of the run now.

        That work (a sibling map's items, a sub-workflow's steps) always ends and
        releases them, so waiting for a release cannot wait forever.
        """
        free = self.slots.free()
        if free is None or free > 0 or self.stopping:
            return False
        if self._failures and self.on_error == "cancel":
            return False
        return self._may_start_more()

    def may_start_item(self, failed_here: bool) -> bool:
        """Whether a map may start another item; ``failed_here``: one of its items failed.

        The slot is the caller's to ask for (`Slots.free`), with its own limit.
        """
        if self.stopping:
            return False
        if failed_here and self.on_error != "continue":
            return False
        return self._may_start_more()

    def _may_start_more(self) -> bool:
        if self._failures and self.on_error != "continue":
            return False
        over_budget = self._over_budget
        return over_budget is None or not over_budget()

    def after_failure(self) -> FailureMeans:
        """What a step or item that failed means for the rest of the run."""
        if self.on_error == "cancel":
            return "cancel"
        if self.on_error == "finish":
            return "start nothing new"
        return "keep going"
