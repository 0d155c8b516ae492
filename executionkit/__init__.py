"""executionkit: run a workflow of expensive steps, resumable from your checkpoints.

A `Workflow` runs named `Step`s in dependency order, concurrently batch by
batch, and hands a frozen `WorkflowCheckpoint` to your ``checkpoint_fn`` after
every batch. Store it anywhere via `WorkflowCheckpoint.to_dict`; pass it back as
``resume_from`` and no recorded step runs again: its output and token usage
restored exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._ledger import LedgerEntry, Spending
from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit._define._step import Step
from executionkit._errors import (
    CheckpointFormatError,
    CheckpointMismatchError,
    CheckpointValueError,
    ClaimLostError,
    ContextKeyError,
    ExecutionKitError,
    RunArgumentError,
    RunClaimedError,
    StaleCheckpointError,
    WorkflowDefinitionError,
)
from executionkit._limits import Limit, RateLimited
from executionkit._owner import RunOwner
from executionkit._record._result import BudgetExceeded, WorkflowFailed, WorkflowResult
from executionkit._run._plan import ResumePlan
from executionkit._run._step_context import StepContext, current_step
from executionkit._types import PatternResult, TokenUsage
from executionkit._workflow import Workflow

if TYPE_CHECKING:
    from executionkit._prices import Budget, Price, PricedSpending, Prices

__version__ = "0.5.0.dev0"

__all__ = [
    "Budget",
    "BudgetExceeded",
    "CheckpointFormatError",
    "CheckpointMismatchError",
    "CheckpointValueError",
    "ClaimLostError",
    "ContextKeyError",
    "ExecutionKitError",
    "LedgerEntry",
    "Limit",
    "PatternResult",
    "Price",
    "PricedSpending",
    "Prices",
    "RateLimited",
    "ResumePlan",
    "RunArgumentError",
    "RunClaimedError",
    "RunOwner",
    "Spending",
    "StaleCheckpointError",
    "Step",
    "StepContext",
    "TokenUsage",
    "Workflow",
    "WorkflowCheckpoint",
    "WorkflowDefinitionError",
    "WorkflowFailed",
    "WorkflowResult",
    "current_step",
]

_PRICES = frozenset({"Budget", "Price", "PricedSpending", "Prices"})


def __getattr__(name: str) -> Any:
    """The dollar types, imported on first use: `decimal` and `json` load only then."""
    if name in _PRICES:
        from executionkit import _prices  # noqa: PLC0415 - kept out of `import executionkit`

        return getattr(_prices, name)
    msg = f"module 'executionkit' has no attribute {name!r}"
    raise AttributeError(msg)
