"""The fields of the checkpoints a `Record` cannot describe from its output log alone.

Parts of `executionkit._record._record.Record.snapshot`, for the rarer checkpoints: one
taken mid-batch (outputs landed and not merged yet, or in-step progress), one
with failures, and one describing the rooms (items of unfinished maps,
questions, sub-workflows).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._output_log import Extended
from executionkit._errors import error_text

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._record._record import Record


def describe_exactly(record: Record, fields: dict[str, Any], since: int) -> None:
    """Fill in the fields a rare checkpoint cannot derive from the log alone.

    Mid-batch (a step saved progress), outputs that landed in this batch are
    not in the log yet, so the checkpoint gets a copy; steps holding progress
    are described in ``step_info`` too; and names a mid-batch checkpoint
    already announced as new are not announced again.
    """
    log = record.log
    info = record.graph.step_info
    outputs: Mapping[str, Any] = log.outputs(len(log.names))
    new = log.names_between(since, len(log.names))
    if record.landed:
        names = record.graph.names
        landed = sorted(record.landed)
        copied = dict(outputs)
        copied.update((names[p], record.landed[p][1]) for p in landed)
        outputs = MappingProxyType(copied)
        new += tuple(names[p] for p in landed)
    if record.reported:
        new = tuple(name for name in new if name not in record.reported)
    if record.landed:
        record.reported.update(new)
    else:
        record.reported.clear()
    described = {**outputs, **record.progress}
    fields["step_index"] = len(outputs)
    fields["outputs"] = outputs
    fields["step_info"] = MappingProxyType({name: info[name] for name in described})
    fields["new_outputs"] = new
    if record.progress:
        fields["progress"] = MappingProxyType(dict(record.progress))


def describe_rooms(record: Record, fields: dict[str, Any], length: int) -> None:
    """Add what the rooms hold (items of unfinished maps, questions, children)."""
    info = record.graph.step_info
    named: list[str] = []
    for room in record.rooms:
        if room:
            named += room.describe(fields)
    described = fields.get("step_info")
    if described is None:
        described = record.log.info(length, info)
    extra = {name: info[name] for name in named if name not in described}
    fields["step_info"] = MappingProxyType(Extended(described, extra))


def error_texts(record: Record) -> Mapping[str, str]:
    """The failures' texts by step name, in declaration order."""
    names = record.graph.names
    return MappingProxyType({names[p]: error_text(e) for p, e in sorted(record.failures.items())})
