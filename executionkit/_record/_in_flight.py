"""What a checkpoint lists as in flight: the attempts that may be spending when it is taken.

A resume from a checkpoint books each attempt it lists as ``"unknown"`` (its
usage never came back), so the list must hold every attempt that could spend
before the next checkpoint: the attempts running (the ledger's open ones,
except a map's items: they are counted, `InFlight.counts`, and a map of
sub-workflows is listed once, by its name), the steps
about to start (the loop's ready list, kept until they end), and the steps
that outputs landed since the last merge make ready (a map item's or a
step's progress checkpoint holds those outputs before the loop saw them), and
the attempts a stopping run abandoned in their threads.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from executionkit._checkpoint._output_log import OutputLog
    from executionkit._record._record import Record

Attempt = tuple[str, "str | None", int]
"""(step path, item key or None, attempt number)."""


class InFlight:
    """The room of a run's record that knows what may be spending now."""

    __slots__ = (
        "_pruned",
        "_record",
        "abandoned",
        "counts",
        "growing",
        "listed_at",
        "maps",
        "next_up",
    )

    def __init__(self, record: Record) -> None:
        self._record = record
        # Steps about to start, and those started since that have not ended (and, while
        # it grows, some that have: they are left out when read).
        self.next_up: list[int] = []
        # Maps of sub-workflows running now: their items may be spending.
        self.maps: set[int] = set()
        # Maps of functions: how many of their items run or are about to start, by
        # position, raised before they start (see executionkit._run._map). A checkpoint
        # lists the counts in `in_flight_items`, and never such a map in `in_flight`.
        self.counts: dict[int, int] = {}
        # The record's change count when next_up was listed: nothing listed ended since
        # while it is unchanged (every ending is a change).
        self.listed_at = -1
        # Whether next_up grows in place (eager mode): a checkpoint then keeps the
        # length it saw, never the list alone (`upcoming`).
        self.growing = False
        # The length of next_up when it was last rebuilt without the steps that ended.
        self._pruned = 0
        # Attempts a stopping run left running in their threads (past the grace): they
        # may still spend, so they stay listed, to the run's last checkpoint.
        self.abandoned: list[Attempt] = []

    def coming(self, ready: list[int] | None, fresh: list[int] | None = None) -> None:
        """Steps about to start; None: no step starts any more.

        Steps still running are listed by their attempts. ``fresh``: the steps of
        ``ready`` that became ready since the last call (eager mode), added to
        the steps listed before, which stay listed until they end. Without it,
        ``ready`` replaces the list. A list is never changed but by appending:
        checkpoints taken before keep the length they saw.
        """
        if ready is None:
            self.next_up = []
            self.growing = False
            return
        listed = self.next_up
        if fresh is None or not listed:
            self.next_up = list(ready)
            self.growing = False
            self._pruned = len(ready)
        else:
            if len(listed) > 2 * self._pruned + _SLACK:
                # Rebuilt once it has doubled: linear in all, however long the run.
                ended = self.ended
                listed = self.next_up = [p for p in listed if not ended(p)]
                self._pruned = len(listed)
            listed += fresh
            self.growing = True
        self.listed_at = self._record.changes

    def upcoming(self) -> Collection[int]:
        """The steps about to start that a checkpoint taken now lists, as it will read them.

        O(1) in the usual case: the list itself when nothing ended since it was
        listed, or an `Upcoming` view of it that leaves out, when read, the steps
        recorded by now. With failures or skips (rare), computed now.
        """
        listed = self.next_up
        record = self._record
        if not self.growing and record.changes == self.listed_at:
            return listed
        skips = record.skips
        if record.failures or skips.skipped or skips.decided or record.landed:
            return tuple(self.pending())
        return Upcoming(listed, len(listed), record.log, record.graph.names)

    def pending(self) -> list[int]:
        """The steps about to start that have not ended since they were listed.

        Returns a list no one changes later, but while it grows (eager mode):
        copy it then.
        """
        listed = self.next_up
        changes = self._record.changes
        if changes == self.listed_at and not self.growing:
            return listed
        # A list that grew in place (eager mode) holds steps listed before listed_at,
        # which may have ended before it: it is never taken as it is.
        self.listed_at = changes
        ended = self.ended
        for position in listed:
            if ended(position):
                listed = self.next_up = [p for p in listed if not ended(p)]
                self._pruned = len(listed)
                break
        return listed

    def now(self) -> tuple[Attempt, ...]:
        """The attempts running now and the steps about to start (their first attempt)."""
        record = self._record
        # A running map is listed by itself (item key None), not item by item: its
        # checkpoints stay small however many items run at once.
        running = tuple(a for a in record.ledger.in_flight() if a[1] is None)
        if self.abandoned:
            running += tuple(self.abandoned)
        if not self.next_up and not self.maps and not record.landed:
            return running
        graph = record.graph
        names = graph.names
        opened = {(step, key) for step, key, _attempt in running}
        workflows = graph.workflows
        upcoming: list[Attempt] = []
        maps = graph.maps
        for p in sorted({*self.next_up, *self.maps, *self._freed()}):
            if (names[p], None) in opened or p in graph.asks or self.ended(p):
                continue
            if p in maps and p not in workflows:
                continue  # its items are counted before they start: none runs yet
            if p in workflows and p not in graph.maps:
                # A sub-workflow lists its steps in its own checkpoints; until it has
                # handed one over, its parent lists the attempts it starts first.
                if record.children.checkpoint(names[p], None) is None:
                    upcoming += ((path, None, 1) for path in graph.first_attempts(p))
                continue
            upcoming.append((names[p], None, 1))  # a map of sub-workflows: by its name
        return running + tuple(upcoming)

    def counted(self) -> dict[str, int]:
        """``in_flight_items``: each map's count of items that may be spending, by name."""
        names = self._record.graph.names
        return {names[p]: count for p, count in self.counts.items() if count}

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


_SLACK = 16
"""How much longer than twice its last pruned length next_up grows before it is pruned."""


class Upcoming(Collection[int]):
    """The steps a checkpoint lists as about to start, read when its ``in_flight`` is.

    The first ``length`` steps of a list that only grows, less those the
    output log had recorded when the checkpoint was taken (its first
    ``recorded`` names). Taken when the run had no failure, no skip and nothing
    landed unrecorded, so that recorded is what ended means then.
    """

    __slots__ = ("_index", "_length", "_listed", "_names", "_recorded")

    def __init__(
        self, listed: list[int], length: int, log: OutputLog, names: Sequence[str]
    ) -> None:
        self._listed = listed
        self._length = length
        self._index = log.index
        self._recorded = len(log.names)
        self._names = names

    def __iter__(self) -> Iterator[int]:
        """Each step listed that was not recorded yet, in the order listed."""
        index = self._index
        names = self._names
        recorded = self._recorded
        for position in self._listed[: self._length]:
            at = index.get(names[position])
            if at is None or at >= recorded:
                yield position

    def __len__(self) -> int:
        """How many steps it lists."""
        return sum(1 for _ in self)

    def __contains__(self, position: object) -> bool:
        """Whether it lists ``position``."""
        return any(position == listed for listed in self)
