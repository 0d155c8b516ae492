"""Running a map step: its items, each recorded as it completes.

`drive` is the body of a map step's attempt. It reads the items from ``ctx``,
names each with its key (checked before any item runs), skips the items the
record already holds, and runs the others concurrently within the run's
concurrency slots and the map's own limit. Each item that ends is handed to the
run (`Landing.ended`, with its key), which records it and has it checkpointed;
the map step's own output, the list or dict of every item's output, is
assembled by the record once every item is in it. Failures among items follow
the run's ``on_error`` (`Policies`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from executionkit._record._items import MapDone, item_pairs
from executionkit._run._aio import task_maker, wait_through
from executionkit._run._outcome import FAILED, UNFINISHED, VALUE, Unfinished, caught
from executionkit.events import ItemStarted, MapStarted, StepInvalidated

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from executionkit._define._step_kinds import MapStep
    from executionkit._record._record import Record
    from executionkit._run._announcer import Announcer
    from executionkit._run._checkpointer import Checkpointer
    from executionkit._run._outcome import Ending, Landing
    from executionkit._run._policies import Policies, Slots


class MapRun:
    """What a map uses of its run: where items end, the rules, the record, the events."""

    __slots__ = (
        "announcer",
        "checkpointer",
        "in_turn",
        "landing",
        "policies",
        "record",
        "run_id",
    )

    def __init__(
        self,
        landing: Landing,
        policies: Policies,
        record: Record,
        announcer: Announcer,
        checkpointer: Checkpointer,
    ) -> None:
        """Gather the parts of one run a map needs."""
        self.landing = landing
        self.policies = policies
        self.record = record
        self.announcer = announcer
        self.checkpointer = checkpointer
        self.run_id = record.run_id
        # Maps whose plain items run one at a time, each saved by the map itself.
        self.in_turn: set[int] = set()


async def drive(
    position: int,
    step: MapStep,
    ctx: Mapping[str, Any],
    run_item: Callable[[str, Any], Awaitable[Any]],
    run: MapRun,
    *,
    takes_slots: bool,
    plain: bool,
) -> MapDone | Unfinished:
    """Run every item not yet recorded; return the keys once all are.

    Raises an `ExceptionGroup` of the items' errors when any failed (each
    noted with its key); returns `Unfinished` when items were left unstarted.
    ``takes_slots``: each item takes one of the run's concurrency slots (not
    when the items are sub-workflows, whose own steps take them). ``plain``: the
    items are plain functions run on the loop's thread, which block it: with a
    ``checkpoint_fn``, they run one at a time, each handed to it once recorded,
    before the next starts (else nothing could be saved until all had run).
    """
    pairs, mapping = item_pairs(step, ctx)
    recorded = run.record.recorded_items(step.name)
    todo = [(key, item) for key, item in reversed(pairs) if key not in recorded]
    _announce_start(run, step.name, pairs, recorded, len(pairs) - len(todo))
    driver = _Driver(position, step.name, run_item, run, takes_slots=takes_slots)
    # Listed in checkpoints' in_flight while it runs: items of it may be spending.
    running = run.record.in_flight.maps
    running.add(position)
    try:
        if plain and run.checkpointer.active:
            run.in_turn.add(position)
            try:
                await driver.run_in_turn(todo)
            finally:
                run.in_turn.discard(position)
        else:
            await driver.run(todo, step.max_concurrency)
    finally:
        running.discard(position)
    if driver.failures:
        raise driver.failed(pairs)
    recorded = run.record.recorded_items(step.name)
    left = sum(1 for key, _ in pairs if key not in recorded)
    if left:
        return Unfinished(f"map step {step.name!r}: {left} of {len(pairs)} items did not complete")
    return MapDone(tuple(key for key, _ in pairs), mapping)


def _announce_start(
    run: MapRun, name: str, pairs: list[tuple[str, Any]], recorded: Any, restored: int
) -> None:
    """Say the map found its items; report recorded items no longer among them.

    Those were paid for, so their token usage stays counted.
    """
    announcer = run.announcer
    if announcer.observed:
        announcer.emit(MapStarted(run.run_id, name, len(pairs), restored))
    if len(recorded) > restored:
        keys = {key for key, _ in pairs}
        dropped = [key for key in recorded if key not in keys]
        shown = ", ".join(map(repr, dropped[:5])) + (", ..." if len(dropped) > 5 else "")  # noqa: PLR2004
        reason = f"recorded items dropped: {shown} no longer among the items"
        run.record.note_invalidated(name, reason)
        if announcer.observed:
            announcer.emit(StepInvalidated(run.run_id, name, reason))


class _Driver:
    """Starts a map's items within the run's slots and its own limit, by the run's rules."""

    def __init__(
        self,
        position: int,
        name: str,
        run_item: Callable[[str, Any], Awaitable[Any]],
        run: MapRun,
        *,
        takes_slots: bool,
    ) -> None:
        self.position = position
        self.name = name
        self.run_item = run_item
        self.run_ = run
        slots = run.policies.slots
        # Items count against the run's slots only under a limit (nothing reads them else).
        self.slots = slots if takes_slots and slots.limit is not None else None
        self.failures: dict[str, Exception] = {}
        # The items running, by key. An item's task says it is done at the end of its
        # own body (no done callback, a loop iteration each); one cancelled before its
        # body began gets a callback then (`_cancel`).
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.wake: asyncio.Future[None] | None = None

    def _done(self, key: str) -> None:
        del self.tasks[key]
        if self.slots is not None:
            self.slots.release()  # wakes this driver too, through _wake_up
        self._wake_up()

    def _cancel(self) -> None:
        """Cancel every item running; those whose body never begins are done all the same."""
        for key, task in list(self.tasks.items()):
            if task.cancel():
                task.add_done_callback(partial(self._done_unstarted, key))

    def _done_unstarted(self, key: str, task: asyncio.Task[None]) -> None:
        if self.tasks.get(key) is task:  # its body never ran, so never said it was done
            self._done(key)

    def _wake_up(self) -> None:
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _slot(self) -> bool:
        """Take a concurrency slot for the next item if one is free (or none is needed)."""
        slots = self.slots
        if slots is None:
            return True
        free = slots.free()
        if free is not None and free <= 0:
            return False
        slots.take()
        return True

    async def run(self, todo: list[tuple[str, Any]], limit: int | None) -> None:
        """Start items popped from ``todo`` while allowed; return once none runs or can start.

        With no free slot and no item of its own running, the map waits for a
        slot that another step or map of the run holds (leaf work that always
        ends, so the wait does too).
        """
        loop = asyncio.get_running_loop()
        tasks = self.tasks
        slots = self.slots
        if slots is not None:
            slots.listen(self._wake_up)
        try:
            while True:
                waiting = self._start_items(todo, limit)
                if not tasks and not waiting:
                    return
                self.wake = loop.create_future()
                await self.wake
        except asyncio.CancelledError:
            self._cancel()
            while tasks:
                self.wake = loop.create_future()
                await wait_through(self.wake)
            raise
        finally:
            if slots is not None:
                slots.forget(self._wake_up)

    async def run_in_turn(self, todo: list[tuple[str, Any]]) -> None:
        """Run plain items one at a time, here, each handed to checkpoint_fn before the next.

        A plain function blocks the loop while it runs: started as tasks, the
        items would all run before anything could be saved.
        """
        run = self.run_
        policies = run.policies
        announcer = run.announcer
        slots = self.slots
        while todo and policies.may_start_item(bool(self.failures)):
            if slots is not None and not self._slot():
                await self._released(slots)
                continue
            key, item = todo.pop()
            if announcer.observed:
                announcer.emit(ItemStarted(run.run_id, self.name, key, 1))
            try:
                await self._one(key, item)
            finally:
                if slots is not None:
                    slots.release()
            with contextlib.suppress(Exception):  # the run stops on it, and raises it
                await run.checkpointer.save()

    async def _released(self, slots: Slots) -> None:
        """Wait until another unit of work of the run gives a slot back."""
        self.wake = asyncio.get_running_loop().create_future()
        slots.listen(self._wake_up)
        try:
            await self.wake
        finally:
            slots.forget(self._wake_up)

    def _start_items(self, todo: list[tuple[str, Any]], limit: int | None) -> bool:
        """Start items while allowed; return whether one waits for a concurrency slot."""
        create_task = task_maker()
        tasks = self.tasks
        policies = self.run_.policies
        announcer = self.run_.announcer
        slots = self.slots
        while todo and (limit is None or len(tasks) < limit):
            if not policies.may_start_item(bool(self.failures)):
                return False
            if slots is not None and not self._slot():
                return True
            key, item = todo.pop()
            if announcer.observed:
                announcer.emit(ItemStarted(self.run_.run_id, self.name, key, 1))
            tasks[key] = create_task(self._one(key, item))
        return False

    async def _one(self, key: str, item: Any) -> None:
        began = time.perf_counter()
        ending: Ending
        try:
            try:
                value = await self.run_item(key, item)
            except BaseException as exc:  # noqa: BLE001 - sorted by caught(), the one ladder
                ending, value = caught(exc, f"item {key!r} of step {self.name!r}")
            else:
                ending = UNFINISHED if type(value) is Unfinished else VALUE
            unrecorded = self.run_.landing.ended(self.position, ending, value, key, began)
            if ending == FAILED or unrecorded is not None:
                self.failures[key] = unrecorded or value
                if ending == FAILED and self.run_.policies.after_failure() == "cancel":
                    self._cancel()
        finally:
            if key in self.tasks:  # a task's (run_in_turn awaits it without one)
                self._done(key)

    def failed(self, pairs: list[tuple[str, Any]]) -> ExceptionGroup[Exception]:
        """The error of the map step: every item's error, each noted with its key.

        In the items' order, whatever order they failed in (items run side by side).
        """
        failures = self.failures
        keys = [key for key, _ in pairs if key in failures]
        total = len(pairs)
        errors = []
        for key in keys:
            error = failures[key]
            error.add_note(f"executionkit: item {key!r} of map step {self.name!r}")
            errors.append(error)
        shown = ", ".join(map(repr, keys[:10])) + (", ..." if len(keys) > 10 else "")  # noqa: PLR2004
        msg = (
            f"map step {self.name!r}: {len(keys)} of {total} items failed ({shown}); the "
            f"others that completed are recorded, and a resume runs only the rest"
        )
        return ExceptionGroup(msg, errors)
