"""The checkpoints of a run's `Record`, and what the run ends with, built from it.

The record holds state; `Snapshots` reads it. `Snapshots.take` builds a
checkpoint in a few field assignments: every checkpoint of a run shares the
record's output log and ledger, and covers a prefix of each. The rarer
checkpoints need more, each from a function below: one taken mid-batch (outputs
landed and not merged yet, or in-step progress, `describe_exactly`), one with
failures (`error_texts`), and one describing the rooms (items of unfinished
maps, questions, sub-workflows: `describe_rooms`). A run that ends builds its
`WorkflowResult`, `WorkflowFailed` or `BudgetExceeded` here too.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._checkpoint._output_log import Extended
from executionkit._checkpoint._value import trusted_checkpoint
from executionkit._errors import error_text
from executionkit._record._result import (
    BudgetExceeded,
    WorkflowFailed,
    WorkflowResult,
    run_result,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._record._record import Record

EMPTY: MappingProxyType[str, Any] = MappingProxyType({})


class Snapshots:
    """Takes the checkpoints of one run's record and builds what the run ends with."""

    __slots__ = ("_ended", "_length", "_rows", "last", "record")

    def __init__(self, record: Record, resumed: WorkflowCheckpoint | None) -> None:
        """Serve ``record``, of a run that resumed from ``resumed`` (None: a fresh run)."""
        self.record = record
        # The last checkpoint taken (the one resumed from, before any).
        self.last = resumed
        # How much of the output log and of the ledger the last checkpoint covered.
        self._length = record.resumed_length
        self._rows = 0 if resumed is None else len(resumed.ledger)
        self._ended = 0 if resumed is None else len(resumed.attempts)

    def take(self) -> WorkflowCheckpoint:
        """Take a checkpoint of everything recorded (and landed) so far."""
        record = self.record
        record.seq += 1
        log = record.log
        since = self._length
        length = self._length = len(log.names)
        # Every other field is computed from these when first read (see
        # executionkit._checkpoint._value._Deferred): most checkpoints are stored or
        # dropped without anyone reading their views or timestamp.
        ledger = record.ledger
        if ledger.late:
            record.book_late()
        rows_since = self._rows
        rows = self._rows = len(ledger.entries)
        fields: dict[str, Any] = {
            "step_index": length,
            "cost": record.cost,
            "seq": record.seq,
            "_shared": record.shared,
            "_since": since,
            "_rows": rows,
            "_ns": _clock.wall_ns(),
        }
        ended_since = self._ended
        ended = self._ended = len(record.shared.attempts)
        if ended:
            fields["_ended"] = ended  # attempts: the first `_ended` of the run's log
            if ended != ended_since:
                fields["_ended_since"] = ended_since  # new_attempts: those since (none without)
        if rows != rows_since:
            fields["_rows_since"] = rows_since  # new_ledger: the rows since (none without)
        describe_in_flight(record, fields)
        if record.failures:
            fields["errors"] = error_texts(record)
        if record.landed or record.progress or record.reported:
            describe_exactly(record, fields, since)
        if record.has_rooms and (
            record.items or record.questions or record.children or record.waits
        ):
            describe_rooms(record, fields, length)
        skips = record.skips
        if skips.skipped or skips.decided:  # bool(skips), without the call
            described = fields.get("step_info")
            if described is None:
                described = record.log.info(length, record.step_info)
            extra = record.skips.describe(fields, record.step_info)
            fields["step_info"] = MappingProxyType(Extended(described, extra))
        checkpoint = trusted_checkpoint(fields)
        self.last = checkpoint
        return checkpoint

    def latest(self) -> WorkflowCheckpoint:
        """The checkpoint of everything recorded, taking one in memory if none is current."""
        record = self.record
        if self.last is None or record.changes != record.saved:
            self.take()
            record.saved = record.changes
        assert self.last is not None  # noqa: S101 - take() sets it
        return self.last

    def failure(self) -> WorkflowFailed:
        """The `WorkflowFailed` for the failures recorded, with the latest checkpoint."""
        record = self.record
        names = record.graph.names
        errors = {names[p]: exc for p, exc in sorted(record.failures.items())}
        error = WorkflowFailed(errors, self.latest())
        error.__cause__ = next(iter(errors.values()))
        return error

    def budget_exceeded(self) -> BudgetExceeded:
        """The `BudgetExceeded` for the budget reached, with the latest checkpoint."""
        record = self.record
        if record.dollars is None:
            assert record.budget is not None  # noqa: S101 - only called once over_budget() said so
            return BudgetExceeded(self.latest(), record.cost, record.budget)
        from executionkit._prices import Budget  # noqa: PLC0415 - loaded: the run has prices

        budget = Budget(tokens=record.budget, dollars=record.dollars)
        dollars = (record.spent_dollars, record.dollars, record.unpriced)
        return BudgetExceeded(self.latest(), record.cost, budget, dollars=dollars)

    def result(self) -> WorkflowResult:
        """The `WorkflowResult` of a run that completed."""
        record = self.record
        outputs = record.outputs
        names = record.graph.names
        if len(outputs) == len(names) and tuple(outputs) == names:
            ordered = dict(outputs)  # landed in declaration order: one copy at C speed
        else:
            ordered = {name: outputs[name] for name in names if name in outputs}
        ledger = record.ledger
        return run_result(
            tuple(ledger.entries),
            ledger.restored,
            outputs=MappingProxyType(ordered),
            pending=MappingProxyType(record.waiting()),
            waits=MappingProxyType(record.timers()),
            cost=record.cost,
            run_id=record.run_id,
            executed=tuple(record.executed),
            restored=record.restored,
            invalidated=record.invalidated,
            discarded=record.discarded,
            skipped=record.skips.in_order() if record.skips.skipped else EMPTY,
        )


def describe_in_flight(record: Record, fields: dict[str, Any]) -> None:
    """What may be spending: ``in_flight`` (or what computes it) and ``in_flight_items``."""
    in_flight = record.in_flight
    if (
        record.ledger.open
        or in_flight.maps
        or record.landed
        or in_flight.abandoned
        or (in_flight.next_up and record.graph.workflows)
    ):
        fields["in_flight"] = in_flight.now()
    elif in_flight.next_up:
        # Only steps about to start: in_flight is computed when read. The list itself
        # when none of them ended since it was listed (a batch's, nothing changed).
        fields["_next"] = (
            in_flight.next_up
            if in_flight.listed_at == record.changes and not in_flight.growing
            else in_flight.upcoming()
        )
    if in_flight.counts:
        fields["in_flight_items"] = MappingProxyType(in_flight.counted())


def describe_exactly(record: Record, fields: dict[str, Any], since: int) -> None:
    """Fill in the fields a rare checkpoint cannot derive from the log alone.

    Mid-batch (a step saved progress), outputs that landed in this batch are
    not in the log yet, so the checkpoint gets a copy; steps holding progress
    are described in ``step_info`` too; and names a mid-batch checkpoint
    already announced as new are not announced again.
    """
    log = record.log
    info = record.step_info
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
    """Add what the rooms hold (items of unfinished maps, questions, children, waits)."""
    info = record.step_info
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
