"""Sub-workflows: a step (or each item of a map) whose ``run`` is a `Workflow`.

The child runs as a run of its own, with the parent step's ``ctx`` (plus
``item`` and ``item_key`` in a map) as its initial context. Its checkpoints are
not stored by themselves: each one is handed to the parent's record, which
keeps it under the step in ``children`` and has the parent checkpointed; the
child goes on once that is done, so a crash inside a child loses at most the
child's steps in flight. Its token
usage is counted once, in the parent's total, as the child spends it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from executionkit._errors import BudgetExceeded
from executionkit._map import Unfinished

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Mapping

    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._types import TokenUsage
    from executionkit._workflow import Workflow


class ChildLanding(Protocol):
    """What the parent run does with its children's checkpoints and costs."""

    def child_start(
        self, position: int, key: str | None
    ) -> tuple[WorkflowCheckpoint | None, dict[str, Any]]:
        """The child's checkpoint to resume from, and the run options it inherits."""
        ...

    def child_saved(
        self, position: int, key: str | None, checkpoint: WorkflowCheckpoint
    ) -> asyncio.Future[None]:
        """Keep the child's checkpoint, count its new spending; resolves once saved."""
        ...

    def child_finished(self, position: int, key: str | None, cost: TokenUsage) -> None:
        """The child completed with total ``cost``."""
        ...


def child_run_id(parent: str, step: str, key: str | None) -> str:
    """The run_id of a child: derived from the parent's, the step name and the item key."""
    return f"{parent}/{step}" if key is None else f"{parent}/{step}/{key}"


async def run_child(
    landing: ChildLanding,
    position: int,
    workflow: Workflow,
    context: Mapping[str, Any],
    key: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) the child of the step at ``position``; return its outputs as a dict."""
    resume, options = landing.child_start(position, key)

    def saved(checkpoint: WorkflowCheckpoint) -> asyncio.Future[None]:
        # Awaited by the child: it goes on once its progress is in the parent's store.
        return landing.child_saved(position, key, checkpoint)

    try:
        result = await workflow.run(
            dict(context), checkpoint_fn=saved, resume_from=resume, **options
        )
    except BudgetExceeded as exc:
        # The parent's budget, passed down: the parent stops too, and says so.
        raise Unfinished(str(exc)) from exc
    if result.pending:
        # Suspended: its checkpoint (with its questions) is in the parent's record; the
        # parent's result lists them as "step/question", and a resume answers them.
        names = ", ".join(map(repr, result.pending))
        msg = f"the sub-workflow waits for answers to {names}"
        raise Unfinished(msg)
    landing.child_finished(position, key, result.cost)
    return dict(result.outputs)
