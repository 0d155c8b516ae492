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

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from executionkit._checkpoint import WorkflowCheckpoint
from executionkit._errors import BudgetExceeded
from executionkit._map import Unfinished
from executionkit._questions import join_path
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Mapping

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
    """The run_id of a child: the parent's, ``/``, then the step name and item key.

    The step name and key are escaped and joined as in a question path
    (`join_path`), so no two children of a run share a run_id.
    """
    return f"{parent}/{join_path(step) if key is None else join_path(step, key)}"


async def run_child(
    landing: ChildLanding,
    position: int,
    workflow: Workflow,
    context: Mapping[str, Any],
    key: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) the child of the step at ``position``; return its outputs as a dict."""
    resume, options = landing.child_start(position, key)
    if resume is not None and resume.run_id is not None:
        # A resumed child keeps its run_id, even one derived before names were escaped in it.
        options["run_id"] = resume.run_id

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
        # parent's result lists them by path ("step/question"), and a resume answers them.
        names = ", ".join(map(repr, result.pending))
        msg = f"the sub-workflow waits for answers to {names}"
        raise Unfinished(msg)
    landing.child_finished(position, key, result.cost)
    return dict(result.outputs)


_ZERO = TokenUsage()


class Children:
    """The sub-workflows in progress of one run: their latest checkpoints and spending.

    ``latest`` maps a step to its child's checkpoint, or for a map of
    sub-workflows to ``{item key: checkpoint}``; ``answers`` holds the answers
    given to the run for each child, until the child takes them.
    """

    def __init__(self, restored: dict[str, Any]) -> None:
        """Start from the children restored from a checkpoint (or none)."""
        self.latest = restored
        self.answers: dict[tuple[str, str | None], dict[str, Any]] = {}
        self._spent: dict[tuple[str, str | None], TokenUsage] = {}
        for name, child in restored.items():
            if isinstance(child, WorkflowCheckpoint):
                self._spent[name, None] = child.cost
            else:
                for key, item in child.items():
                    self._spent[name, key] = item.cost

    def __bool__(self) -> bool:
        """Whether any sub-workflow is in progress."""
        return bool(self.latest)

    def checkpoint(self, name: str, key: str | None) -> WorkflowCheckpoint | None:
        """The latest checkpoint of the child of step ``name`` (item ``key``), if any."""
        child = self.latest.get(name)
        if child is None or key is None:
            return child if isinstance(child, WorkflowCheckpoint) else None
        found: WorkflowCheckpoint | None = child.get(key)
        return found

    def keep(self, name: str, key: str | None, checkpoint: WorkflowCheckpoint) -> TokenUsage:
        """Keep the child's latest checkpoint; return what it spent since the last one."""
        spent = checkpoint.cost - self._spent.get((name, key), _ZERO)
        self._spent[name, key] = checkpoint.cost
        if key is None:
            self.latest[name] = checkpoint
        else:
            self.latest.setdefault(name, {})[key] = checkpoint
        return spent

    def drop(self, name: str, key: str | None, cost: TokenUsage) -> TokenUsage:
        """The child completed with total ``cost``: forget it; return what it spent since."""
        spent = cost - self._spent.pop((name, key), _ZERO)
        if key is None:
            self.latest.pop(name, None)
        else:
            items = self.latest.get(name)
            if items is not None:
                items.pop(key, None)
                if not items:
                    del self.latest[name]
        return spent

    def spent(self, name: str, key: str | None) -> TokenUsage:
        """What the child of step ``name`` (item ``key``) has spent so far."""
        return self._spent.get((name, key), _ZERO)

    def take_answers(self, name: str, key: str | None) -> dict[str, Any] | None:
        """The answers given to the run for this child (once)."""
        return self.answers.pop((name, key), None)

    def field(self) -> MappingProxyType[str, Any]:
        """The checkpoint's ``children`` field: a read-only view of each child's latest."""
        return MappingProxyType(
            {
                name: MappingProxyType(
                    {"checkpoint": child}
                    if isinstance(child, WorkflowCheckpoint)
                    else {"items": MappingProxyType(dict(child))}
                )
                for name, child in self.latest.items()
            }
        )
