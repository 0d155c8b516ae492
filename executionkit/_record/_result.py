"""`WorkflowResult`: what a completed (or suspended) run returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from executionkit._checkpoint._ledger import Spending
from executionkit._types import TokenUsage


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
