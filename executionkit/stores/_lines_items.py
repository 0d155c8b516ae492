"""The items of unfinished maps in `JsonLinesStore` lines: written as they are recorded.

A line's ``i`` maps each map the checkpoint lists in ``items`` to ``[items,
cost]``: the items recorded since the line before (key to stored output) and
the map's token usage ``[input, output, calls]``. The rebuild adds those items
to the ones it holds for the map. An entry ``[items, cost, "all"]`` holds every
item of the map instead, replacing what the file held (a resume dropped or
replaced some, or the line starts the file over). A map a line does not name has
no items from then on: it finished (its output is in ``n``), or a resume dropped
it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._errors import CheckpointFormatError
    from executionkit._types import TokenUsage

ALL = "all"
_ENTRY = "[items, cost] or [items, cost, 'all'], items an object and cost three counts"


def _cost(usage: TokenUsage) -> list[int]:
    return [usage.input_tokens, usage.output_tokens, usage.llm_calls]


def _lineage(checkpoint: WorkflowCheckpoint) -> object:
    """What every checkpoint of the run that took ``checkpoint`` shares, or None."""
    return checkpoint.__dict__.get("_shared")


def next_items(checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None) -> bool:
    """Whether ``checkpoint.new_items`` says exactly what is new since ``previous``.

    True when both were taken by the same run, one after the other: ``new_items``
    then names every item recorded since, and a map absent from ``items`` has
    finished. Anything else (another run, a checkpoint skipped, one built by
    `WorkflowCheckpoint.from_dict`) is compared item by item (`item_differences`).
    """
    if previous is None:
        return False
    shared = _lineage(checkpoint)
    return (
        shared is not None and shared is _lineage(previous) and checkpoint.seq == previous.seq + 1
    )


def new_item_entries(checkpoint: WorkflowCheckpoint) -> dict[str, list[Any]]:
    """The ``i`` of the run's next checkpoint: O(maps + new items)."""
    new = checkpoint.new_items
    entries: dict[str, list[Any]] = {}
    for name, entry in checkpoint.items.items():
        outputs = entry["outputs"]
        keys = new.get(name, ())
        entries[name] = [{key: outputs[key] for key in keys}, _cost(entry["cost"])]
    return entries


def item_differences(
    checkpoint: WorkflowCheckpoint, previous: WorkflowCheckpoint | None
) -> dict[str, list[Any]]:
    """The ``i`` of a checkpoint that does not follow ``previous`` (the file's latest).

    Per map: the items after the longest run of items the file holds that
    start the checkpoint's (same keys, in the same order, equal values), or every
    item with ``"all"`` when what the file holds is not such a start. Without
    ``previous`` (the file is empty, or holds another run) every entry is ``"all"``.
    """
    held_items: Mapping[str, Mapping[str, Any]] = {} if previous is None else previous.items
    new = checkpoint.new_items
    entries: dict[str, list[Any]] = {}
    for name, entry in checkpoint.items.items():
        outputs = entry["outputs"]
        cost = _cost(entry["cost"])
        held = held_items.get(name)
        if previous is None:
            entries[name] = [dict(outputs), cost, ALL]
            continue
        if held is None:
            entries[name] = [dict(outputs), cost]
            continue
        held_outputs = held["outputs"]
        reported = set(new.get(name, ()))
        keys = list(outputs)
        start = len(held_outputs) <= len(keys) and all(
            key == want and key not in reported and _unchanged(value, outputs[want])
            for (key, value), want in zip(held_outputs.items(), keys, strict=False)
        )
        if start:
            entries[name] = [{key: outputs[key] for key in keys[len(held_outputs) :]}, cost]
        else:
            entries[name] = [dict(outputs), cost, ALL]
    return entries


def _unchanged(held: object, value: object) -> bool:
    try:
        return held is value or bool(held == value)
    except RecursionError:  # too deep to compare: write it again rather than fail
        return False


def fold_items(
    held: dict[str, dict[str, Any]],
    packed: object,
    bad: Callable[[str], CheckpointFormatError],
) -> dict[str, dict[str, Any]]:
    """The items after a line whose ``i`` is ``packed``, in the ``to_dict()`` shape.

    ``held`` (the items before the line) is reused: each map's outputs grow in place.
    """
    if not isinstance(packed, dict):
        raise bad("'i' must be an object")
    folded: dict[str, dict[str, Any]] = {}
    for name, entry in packed.items():
        if not (
            isinstance(entry, list)
            and len(entry) in (2, 3)
            and isinstance(entry[0], dict)
            and isinstance(entry[1], list)
            and len(entry[1]) == 3  # noqa: PLR2004 - [input, output, calls]
            and (len(entry) == 2 or entry[2] == ALL)  # noqa: PLR2004 - [items, cost]
        ):
            raise bad(f"'i.{name}' must be {_ENTRY}")
        before = held.get(name)
        if before is None or len(entry) == 3:  # noqa: PLR2004 - [items, cost, "all"]
            outputs = dict(entry[0])
        else:
            outputs = before["outputs"]
            outputs.update(entry[0])
        cost = dict(zip(("input_tokens", "output_tokens", "llm_calls"), entry[1], strict=True))
        folded[name] = {"outputs": outputs, "cost": cost}
    return folded


def legacy_items(value: object, bad: Callable[[str], CheckpointFormatError]) -> dict[str, Any]:
    """``x.items`` of a line written before items had ``i``: every item, whole."""
    if not isinstance(value, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("outputs"), dict)
        for entry in value.values()
    ):
        raise bad("'x.items' must map each map step to {'outputs': {...}, 'cost': {...}}")
    return {name: {**entry, "outputs": dict(entry["outputs"])} for name, entry in value.items()}
