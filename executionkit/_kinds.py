"""What a run does for the steps that are not called as they are.

A map's items (`executionkit._map`), a sub-workflow's checkpoints
(`executionkit._children`), a question (`Step.ask`) and a condition's
decision (`executionkit._conditions`) each report to this object: it records
them in the run's `Record`, has them checkpointed and announces them. What
only the run knows (whether it is stopping, how it fails) it asks the run.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

from executionkit._children import child_run_id
from executionkit._types import TokenUsage
from executionkit.events import (
    ItemFailed,
    ItemFinished,
    ItemStarted,
    MapStarted,
    QuestionAsked,
    StepInvalidated,
    StepSkipped,
)

if TYPE_CHECKING:
    from collections.abc import Collection

    from executionkit._announcer import Announcer
    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._checkpointer import Checkpointer
    from executionkit._conditions import Conditions
    from executionkit._options import RunOptions
    from executionkit._record import Record


class _Run(Protocol):
    """What `Kinds` asks of the run."""

    def may_start_item(self) -> bool: ...

    def landed_error(self, position: int, error: Exception) -> None: ...

    def landed_interrupt(self, error: BaseException) -> None: ...


class Kinds:
    """Records, checkpoints and announces map items, child checkpoints and questions."""

    def __init__(  # noqa: PLR0917 - the parts of one run, built once by it
        self,
        record: Record,
        options: RunOptions,
        announcer: Announcer,
        checkpointer: Checkpointer,
        run: _Run,
        conditions: Conditions,
    ) -> None:
        """Serve the run ``run`` of ``record``, deciding conditions with ``conditions``."""
        self._record = record
        self._options = options
        self._announcer = announcer
        self._checkpointer = checkpointer
        self._run = run
        self._conditions = conditions
        self._run_id = record.run_id
        self.on_error: str = options.on_error
        self.item_limit = options.max_concurrency

    # --- the items of map steps (see executionkit._map) -----------------------------------

    def recorded_items(self, position: int) -> Collection[str]:
        """The keys of the items of the map at ``position`` recorded so far."""
        entry = self._record.items.get(self._record.graph.names[position])
        return () if entry is None else entry.log.index

    def map_started(self, position: int, items: int, recorded: int) -> None:
        """The map at ``position`` found its items."""
        if self._announcer.observed:
            name = self._record.graph.names[position]
            self._announcer.emit(MapStarted(self._run_id, name, items, recorded))

    def items_dropped(self, position: int, keys: list[str]) -> None:
        """Recorded items no longer among the map's items: reported, and left out of its output.

        They were paid for, so their token usage stays counted.
        """
        name = self._record.graph.names[position]
        shown = ", ".join(map(repr, keys[:5])) + (", ..." if len(keys) > 5 else "")  # noqa: PLR2004
        reason = f"recorded items dropped: {shown} no longer among the items"
        self._record.note_invalidated(name, reason)
        if self._announcer.observed:
            self._announcer.emit(StepInvalidated(self._run_id, name, reason))

    def item_started(self, position: int, key: str) -> None:
        """An item of the map at ``position`` starts."""
        if self._announcer.observed:
            self._announcer.emit(
                ItemStarted(self._run_id, self._record.graph.names[position], key, 1)
            )

    def may_start_item(self) -> bool:
        """Whether a map may start another item (the run is not stopping, nor over budget)."""
        return self._run.may_start_item()

    def landed_interrupt(self, error: BaseException) -> None:
        """An item raised an interrupt: the run stops."""
        self._run.landed_interrupt(error)

    def landed_item(self, position: int, key: str, result: Any, began: float) -> Exception | None:
        """Record an item's output and have it checkpointed; return why not if it cannot be."""
        record = self._record
        cost, error = record.land_item(position, key, result)
        if error is not None:
            self.item_failed(position, key, error, began)
            return error
        self._checkpointer.save_soon(asyncio.get_running_loop())
        if self._announcer.observed:
            name = self._record.graph.names[position]
            done = len(record.items[name].log)
            duration = time.perf_counter() - began
            self._announcer.emit(ItemFinished(self._run_id, name, key, duration, cost, done))
        return None

    def item_failed(self, position: int, key: str, error: Exception, began: float) -> None:
        """An item of the map at ``position`` failed (after its retries)."""
        if self._announcer.observed:
            name = self._record.graph.names[position]
            duration = time.perf_counter() - began
            self._announcer.emit(ItemFailed(self._run_id, name, key, duration, error))

    # --- sub-workflows (see executionkit._children) ----------------------------------------

    def child_start(
        self, position: int, key: str | None
    ) -> tuple[WorkflowCheckpoint | None, dict[str, Any]]:
        """The child's checkpoint to resume from, and the options it runs with."""
        record = self._record
        name = self._record.graph.names[position]
        options = self._options
        budget = options.budget
        if budget is not None:
            # What the rest of the run has not spent of each limit (0 stays "no limit").
            elsewhere = record.cost - record.children.spent(name, key)
            budget = TokenUsage(
                *(
                    0 if limit == 0 else max(1, limit - used)
                    for limit, used in (
                        (budget.input_tokens, elsewhere.input_tokens),
                        (budget.output_tokens, elsewhere.output_tokens),
                        (budget.llm_calls, elsewhere.llm_calls),
                    )
                )
            )
        inherited = {
            "run_id": child_run_id(self._run_id, name, key),
            "on_error": options.on_error,
            "budget": budget,
            "validate_json": options.validate_json,
            "schedule": options.schedule,
            "max_concurrency": options.max_concurrency,
            "on_event": options.on_event,
            "executor": options.executor,
            "checkpoint_every": "step",
            "answers": record.children.take_answers(name, key),
        }
        return record.children.checkpoint(name, key), inherited

    def child_saved(
        self, position: int, key: str | None, checkpoint: WorkflowCheckpoint
    ) -> asyncio.Future[None]:
        """A checkpoint of a child: into the record; resolves once the run is checkpointed."""
        self._record.child_saved(self._record.graph.names[position], key, checkpoint)
        return self._checkpointer.save_soon(asyncio.get_running_loop())

    def child_finished(self, position: int, key: str | None, cost: TokenUsage) -> None:
        """A child completed with total ``cost``."""
        self._record.child_finished(self._record.graph.names[position], key, cost)

    # --- questions (Step.ask) -------------------------------------------------------------

    def asking(self, position: int) -> bool:
        """Whether the ask step at ``position`` has yet to ask (no question is pending)."""
        return self._record.graph.names[position] not in self._record.pending

    def landed_question(self, position: int, question: object) -> None:
        """The ask step at ``position`` asked ``question``: record it as pending."""
        try:
            entry = self._record.ask(position, question)
        except Exception as exc:  # noqa: BLE001 - a question that cannot be recorded fails
            self._run.landed_error(position, exc)
            return
        if self._announcer.observed:
            name = self._record.graph.names[position]
            event = QuestionAsked(self._run_id, name, entry["question"], entry["expires_at"])
            self._announcer.emit(event)

    # --- conditions (see executionkit._conditions) ----------------------------------------

    def decide(self, position: int) -> bool:
        """Whether the step at ``position`` runs; if not, its skip or failure has landed.

        A skip lands like an output, synchronously: it completes the step for the
        frontier at the next merge and is in the next checkpoint. A condition
        that raises fails the step as the step raising would.
        """
        try:
            reason = self._conditions.reason_to_skip(position)
        except Exception as exc:  # noqa: BLE001 - a failing condition fails its step
            self._run.landed_error(position, exc)
            return False
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, ...
            self._run.landed_interrupt(exc)
            return False
        if reason is None:
            return True
        self._record.skip(position, reason)
        if self._announcer.observed:
            name = self._record.graph.names[position]
            self._announcer.emit(StepSkipped(self._run_id, name, reason))
        return False
