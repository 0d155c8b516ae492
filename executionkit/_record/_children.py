"""The record's room for sub-workflows in progress: their latest checkpoints, no asyncio.

A child's checkpoints are not stored by themselves: each is kept here, under
its step (and item key, for a map of sub-workflows), described in every
checkpoint of the parent (``children``), and dropped once the child completes.
What each child spent is counted in the parent's total as it spends it, once.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit._types import TokenUsage

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

    def describe(self, fields: dict[str, Any]) -> tuple[str, ...]:
        """Add ``children`` to a checkpoint's fields: a read-only view of each child's latest.

        Returns the steps it names.
        """
        fields["children"] = MappingProxyType(
            {
                name: MappingProxyType(
                    {"checkpoint": child}
                    if isinstance(child, WorkflowCheckpoint)
                    else {"items": MappingProxyType(dict(child))}
                )
                for name, child in self.latest.items()
            }
        )
        return tuple(self.latest)
