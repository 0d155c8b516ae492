"""What a checkpoint records of unfinished map steps, for ``inspect``, ``graph`` and ``run``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._workflow import Workflow


@dataclass(frozen=True)
class MapItems:
    """The items of one unfinished map a checkpoint records.

    Attributes:
        recorded: How many of its items are recorded.
        total: How many items the map has, when the checkpoint tells: the map is
            over a step whose output it records. None without the workflow, or
            when the items come from the initial context (never stored).
        cost: The recorded items' token usage (already in the checkpoint's ``cost``).
    """

    recorded: int
    total: int | None
    cost: TokenUsage

    def text(self) -> str:
        """``3 of 4 items recorded``, or ``3 items recorded`` when the total is unknown."""
        return items_text(self.recorded, self.total)


def items_text(recorded: int, total: int | None) -> str:
    """``3 of 4 items recorded``, or ``3 items recorded`` when the total is unknown."""
    if total is None:
        return f"{recorded:,} item{'' if recorded == 1 else 's'} recorded"
    return f"{recorded:,} of {total:,} items recorded"


def unfinished_maps(
    checkpoint: WorkflowCheckpoint, workflow: Workflow | None
) -> dict[str, MapItems]:
    """Each map with items in ``checkpoint``, in the checkpoint's order."""
    return {
        name: MapItems(len(entry["outputs"]), _total(name, checkpoint, workflow), entry["cost"])
        for name, entry in checkpoint.items.items()
    }


def map_sources(workflow: Workflow) -> dict[str, str]:
    """Each map step of ``workflow`` and the step or input its items come from (``over``)."""
    from executionkit._step_kinds import MapStep  # noqa: PLC0415 - only the commands that draw maps

    return {step.name: step.over for step in workflow.steps if isinstance(step, MapStep)}


def _total(name: str, checkpoint: WorkflowCheckpoint, workflow: Workflow | None) -> int | None:
    """How many items the map ``name`` has: the length of the recorded output it is over.

    The output is decoded first if its step has a ``decode``; a decode that fails, an
    output that is not a list or a mapping, or items from the initial context (whose
    values checkpoints never hold) leave the total unknown.
    """
    if workflow is None:
        return None
    over = map_sources(workflow).get(name)
    if over is None or over not in checkpoint.outputs:
        return None
    value = checkpoint.outputs[over]
    source = next((step for step in workflow.steps if step.name == over), None)
    if source is not None and source.decode is not None:
        try:
            value = source.decode(value)
        except Exception:  # noqa: BLE001 - the user's decode failing only hides the total
            return None
    if isinstance(value, (list, tuple, Mapping)):
        return len(value)
    return None
