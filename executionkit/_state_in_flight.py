"""What a checkpoint lists as in flight: the attempts that may be spending when it is taken.

A resume from a checkpoint books each attempt it lists as ``"unknown"`` (its
usage never came back), so the list must hold every attempt that could spend
before the next checkpoint: the attempts running (the ledger's open ones,
except a map's items: a running map is listed once, by its name), the steps
about to start (the loop's ready list, kept until they end), and the steps
that outputs landed since the last merge make ready (a map item's or a
step's progress checkpoint holds those outputs before the loop saw them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from executionkit._record import Record

Attempt = tuple[str, "str | None", int]
"""(step path, item key or None, attempt number)."""


class InFlight:
    """The room of a run's record that knows what may be spending now."""

    __slots__ = ("_record", "listed_at", "maps", "next_up")

    def __init__(self, record: Record) -> None:
        self._record = record
        # Steps about to start, and those started since that have not ended.
        self.next_up: list[int] = []
        # Map steps running now: their items may be spending (see executionkit._map).
        self.maps: set[int] = set()
        # The record's change count when next_up was last pruned: nothing ended since
        # while it is unchanged (every ending is a change).
        self.listed_at = -1

    def coming(self, ready: list[int] | None, *, after_batch: bool = False) -> None:
        """Steps about to start; None: no step starts any more.

        Steps still running are listed by their attempts. ``after_batch``: every
        step listed before has ended (batch mode). The list is replaced, never
        changed in place: checkpoints taken before keep theirs.
        """
        if ready is None:
            self.next_up = []
            return
        listed = self.next_up
        if after_batch or not listed:
            self.next_up = list(ready)
        else:
            ended = self.ended
            listed = [p for p in listed if not ended(p)]
            listed += [p for p in ready if p not in listed]
            self.next_up = listed
        self.listed_at = self._record.changes

    def pending(self) -> list[int]:
        """The steps about to start that have not ended since they were listed.

        Returns a list no one changes later (a checkpoint computes its
        ``in_flight`` from it when read).
        """
        listed = self.next_up
        changes = self._record.changes
        if changes == self.listed_at:
            return listed
        self.listed_at = changes
        ended = self.ended
        for position in listed:
            if ended(position):
                listed = self.next_up = [p for p in listed if not ended(p)]
                break
        return listed

    def now(self) -> tuple[Attempt, ...]:
        """The attempts running now and the steps about to start (their first attempt)."""
        record = self._record
        # A running map is listed by itself (item key None), not item by item: its
        # checkpoints stay small however many items run at once.
        running = tuple(a for a in record.ledger.in_flight() if a[1] is None)
        if not self.next_up and not self.maps and not record.landed:
            return running
        graph = record.graph
        names = graph.names
        opened = {(step, key) for step, key, _attempt in running}
        upcoming = tuple(
            (names[p], None, 1)
            for p in sorted({*self.next_up, *self.maps, *self._freed()})
            if (names[p], None) not in opened
            and p not in graph.asks
            and p not in graph.workflows
            and not self.ended(p)
        )
        return running + upcoming

    def _freed(self) -> set[int]:
        """Steps that outputs landed since the last merge make ready."""
        record = self._record
        landed = record.landed
        if not landed:
            return set()
        graph = record.graph
        names = graph.names
        outputs = record.outputs
        skipped = record.skips.skipped
        freed: set[int] = set()
        for position in landed:
            for child in graph.dependents[position]:
                if all(
                    dep in landed or names[dep] in outputs or names[dep] in skipped
                    for dep in graph.dependencies[child]
                ):
                    freed.add(child)
        return freed

    def ended(self, position: int) -> bool:
        """Whether the step at ``position`` has ended: recorded, landed, failed or skipped."""
        record = self._record
        name = record.graph.names[position]
        return (
            name in record.outputs
            or position in record.landed
            or position in record.failures
            or name in record.skips.skipped
        )
