"""What a checkpoint records of unfinished map steps, for ``inspect``, ``graph`` and ``run``.

Also how many steps it records, counted one way for every command (`recorded_steps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._workflow import Workflow


@dataclass(frozen=True)
class MapItems:
    """The items of one unfinished map a checkpoint records.

    Attributes:
        recorded: How many of its items are recorded.
        total: How many items the map has, when the checkpoint tells: the map is
            over a step whose output it records. None without the workflow, or
            when the items come from the initial context (never stored).
        cost: The token usage of the recorded items (already in the checkpoint's
            ``cost``); for a map of sub-workflows, with what its items in progress
            have spent so far.
        keys: The keys of the recorded items, in the checkpoint's order.
    """

    recorded: int
    total: int | None
    cost: TokenUsage
    keys: tuple[str, ...] = ()

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
        name: MapItems(
            len(entry["outputs"]),
            _total(name, checkpoint, workflow),
            entry["cost"] + _in_progress(name, checkpoint),
            tuple(entry["outputs"]),
        )
        for name, entry in checkpoint.items.items()
    }


def _in_progress(name: str, checkpoint: WorkflowCheckpoint) -> TokenUsage:
    """What the sub-workflows of map ``name`` still in progress have spent so far."""
    from executionkit._types import TokenUsage  # noqa: PLC0415

    children = checkpoint.children.get(name, {}).get("items", {})
    return sum((child.cost for child in children.values()), TokenUsage())


def recorded_steps(checkpoint: WorkflowCheckpoint, workflow: Workflow | None) -> int:
    """How many steps ``checkpoint`` records: those with an output and those skipped.

    The one way every command counts, as `ConsoleProgress` counts steps done (a
    condition's skip is recorded, so that a resume never asks again). With the
    workflow, only its steps count; without it, an ExecutionKit 0.4 checkpoint
    counts its ``step_index`` (its outputs held the initial context too).
    """
    from executionkit._checkpoint._value import LEGACY_VERSION  # noqa: PLC0415

    if workflow is None and checkpoint.version == LEGACY_VERSION:
        return checkpoint.step_index
    names = {*checkpoint.outputs, *checkpoint.skipped}
    if workflow is not None:
        names &= {step.name for step in workflow.steps}
    return len(names)


def failed_items(checkpoint: WorkflowCheckpoint) -> dict[str, dict[str, dict[str, str]]]:
    """For each map of sub-workflows, its items' failed steps: ``{map: {key: {step: error}}}``.

    Only sub-workflows keep a checkpoint of their own while their map is unfinished,
    so only theirs say why an item failed; a plain item's error is in ``run``'s output.
    """
    found: dict[str, dict[str, dict[str, str]]] = {}
    for name, entry in checkpoint.children.items():
        failed = {
            key: dict(child.errors)
            for key, child in entry.get("items", {}).items()
            if child.errors
        }
        if failed:
            found[name] = failed
    return found


def map_sources(workflow: Workflow) -> dict[str, str]:
    """Each map step of ``workflow`` and the step or input its items come from (``over``)."""
    from executionkit._define._step_kinds import MapStep  # noqa: PLC0415 - only the commands that draw maps

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
