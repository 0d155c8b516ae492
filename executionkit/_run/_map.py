"""Running a map step: its items, each recorded as it completes.

`drive` is the body of a map step's attempt. It reads the items from ``ctx``,
names each with its key (checked before any item runs), skips the items the
record already holds, and runs the others concurrently within the run's
concurrency slots and the map's own limit. Each item that ends is handed to the
run (`Landing.ended`, with its key), which records it and has it checkpointed;
the map step's own output, the list or dict of every item's output, is
assembled by the record once every item is in it. Failures among items follow
the run's ``on_error`` (`Policies`).

Items are counted before they start (`InFlight.counts`, a checkpoint's
``in_flight_items``): the driver raises its map's count for the items it picks
and starts them once a checkpoint holding the count was handed to
``checkpoint_fn``, so a resume after a crash books exactly the items that may
have been paid for as unknown. An item that ends takes itself off the count in
the same record change as its output, and the items its ending lets start are
picked then too, so that one checkpoint serves both (decision 0016).
"""

from __future__ import annotations

import asyncio
import contextlib
from functools import partial
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._record._items import MapDone, item_pairs
from executionkit._run._aio import task_maker, wait_through
from executionkit._run._outcome import FAILED, UNFINISHED, VALUE, Unfinished, caught
from executionkit.events import ItemStarted, MapStarted, StepInvalidated, WaitingForLimit

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from executionkit._define._step_kinds import MapStep
    from executionkit._limits import Ticket
    from executionkit._record._record import Record
    from executionkit._run._announcer import Announcer
    from executionkit._run._checkpointer import Checkpointer
    from executionkit._run._limiter import Limiter, Waiting
    from executionkit._run._outcome import Ending, Landing
    from executionkit._run._policies import Policies, Slots


class MapRun:
    """What a map uses of its run: where items end, the rules, the record, the events."""

    __slots__ = (
        "announcer",
        "checkpointer",
        "in_turn",
        "landing",
        "limiter",
        "policies",
        "record",
        "run_id",
    )

    def __init__(  # noqa: PLR0917 - the run's parts, gathered once
        self,
        landing: Landing,
        policies: Policies,
        record: Record,
        announcer: Announcer,
        checkpointer: Checkpointer,
        limiter: Limiter | None = None,
    ) -> None:
        """Gather the parts of one run a map needs."""
        self.limiter = limiter
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
    driver = _Driver(position, step, run_item, run, takes_slots=takes_slots)
    # Items of sub-workflows are listed in checkpoints' in_flight, by the map's name,
    # while it runs; items of functions are counted instead (see _Driver).
    running = run.record.in_flight.maps if not takes_slots else set()
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
        driver.unadmit()
        running.discard(position)
        counts = run.record.in_flight.counts
        if counts.get(position) == 0:
            del counts[position]
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
        step: MapStep,
        run_item: Callable[..., Awaitable[Any]],
        run: MapRun,
        *,
        takes_slots: bool,
    ) -> None:
        self.position = position
        self.name = step.name
        # The limit its items draw on: each starts once admitted (a ticket each).
        self.limiter = run.limiter if step.limit is not None and takes_slots else None
        self.limit_key: str = step.limit or ""
        self.estimate = step.tokens_estimate
        # The admissions of the items started (each closed as its item ends, or by
        # `unadmit` for an item cancelled before it began).
        self.tickets: list[Ticket] = []
        self.room: Waiting | None = None
        self.run_item = run_item
        self.run_ = run
        slots = run.policies.slots
        # Items count against the run's slots only under a limit (nothing reads them else).
        self.slots = slots if takes_slots and slots.limit is not None else None
        self.failures: dict[str, Exception] = {}
        record = run.record
        self.record = record
        # Items of functions are counted before they start (a sub-workflow's are not:
        # its own checkpoints list what it runs).
        self.counts = record.in_flight.counts if takes_slots else None
        if self.counts is not None:
            self.counts.setdefault(position, 0)
        # What `run` starts from; picked from again as each item ends (`_done`).
        self.todo: list[tuple[str, Any]] = []
        self.limit: int | None = None
        self.cancelled = False
        # The items running, by key. An item's task says it is done at the end of its
        # own body (no done callback, a loop iteration each); one cancelled before its
        # body began gets a callback then (`_cancel`).
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.wake: asyncio.Future[None] | None = None

    def _count(self, change: int) -> None:
        """Raise or lower the map's count of items in flight: a change of the record."""
        counts = self.counts
        if counts is not None:
            counts[self.position] += change
            self.record.changes += 1

    def _done(self, key: str) -> None:
        del self.tasks[key]
        if self.slots is not None:
            self.slots.release()  # wakes this driver too, through _wake_up
        if self.todo and not self.cancelled:
            # Picked now, in the change that recorded the item that ended: one
            # checkpoint counts the new items and records the old one.
            self._start_items(self.todo, self.limit)
        self._wake_up()

    def _cancel(self) -> None:
        """Cancel every item running; those whose body never begins are done all the same."""
        self.cancelled = True
        self._stop_waiting()
        for key, task in list(self.tasks.items()):
            if task.cancel():
                task.add_done_callback(partial(self._done_unstarted, key))

    def _done_unstarted(self, key: str, task: asyncio.Task[None]) -> None:
        if self.tasks.get(key) is task:  # its body never ran, so never said it was done
            self._count(-1)
            self._done(key)

    def unadmit(self) -> None:
        """The map ended: admissions of items whose body never ran are given back."""
        limiter = self.limiter
        if limiter is not None:
            for ticket in self.tickets:
                if ticket.open:
                    limiter.done(ticket, 0)
            self.tickets = []

    def _wait_for_room(self, seconds: float) -> None:
        """The limit has no room for the next item: be woken when it may have."""
        if self.room is not None or self.limiter is None:
            return
        self.room = self.limiter.when_room(self.limit_key, seconds, self._room_again)
        announcer = self.run_.announcer
        if announcer.observed:
            announcer.emit(WaitingForLimit(self.run_.run_id, self.name, self.limit_key, seconds))

    def _room_again(self) -> None:
        self.room = None
        self._wake_up()

    def _stop_waiting(self) -> None:
        room, self.room = self.room, None
        if room is not None:
            room.cancel()

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
        self.todo = todo
        self.limit = limit
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
            self.todo = []
            self._stop_waiting()
            if slots is not None:
                slots.forget(self._wake_up)

    async def run_in_turn(self, todo: list[tuple[str, Any]]) -> None:
        """Run plain items one at a time, here, each handed to checkpoint_fn before the next.

        A plain function blocks the loop while it runs: started as tasks, the
        items would all run before anything could be saved.
        """
        run = self.run_
        policies = run.policies
        checkpointer = run.checkpointer
        slots = self.slots
        counted = self.counts is not None
        ahead = False  # whether the next item is counted (and that count saved) already
        try:
            while todo and policies.may_start_item(bool(self.failures)):
                if slots is not None and not self._slot():
                    await self._released(slots)
                    continue
                if counted and not ahead:
                    self._count(1)
                    with contextlib.suppress(Exception):  # the run stops on it, and raises it
                        await checkpointer.save()
                ahead = False
                if checkpointer.storage_error is not None or policies.stopping:
                    self._count(-1)  # its count could not be saved, or the run stops: not run
                    if slots is not None:
                        slots.release()
                    return
                key, item = todo.pop()
                try:
                    await self._one(key, item)
                finally:
                    if slots is not None:
                        slots.release()
                if counted and todo and policies.may_start_item(bool(self.failures)):
                    self._count(1)  # the next one, counted in the checkpoint of this one
                    ahead = True
                with contextlib.suppress(Exception):  # the run stops on it, and raises it
                    await checkpointer.save()
        finally:
            if ahead:
                self._count(-1)

    async def _released(self, slots: Slots) -> None:
        """Wait until another unit of work of the run gives a slot back."""
        self.wake = asyncio.get_running_loop().create_future()
        slots.listen(self._wake_up)
        try:
            await self.wake
        finally:
            slots.forget(self._wake_up)

    def _start_items(self, todo: list[tuple[str, Any]], limit: int | None) -> bool:
        """Start items while allowed; return whether one waits for a slot or its limit."""
        if not todo or not self.run_.policies.may_start_item(bool(self.failures)):
            return False
        want = len(todo) if limit is None else min(len(todo), limit - len(self.tasks))
        slots = self.slots
        free = None if slots is None else slots.free()
        waiting = free is not None and free < want
        if free is not None:
            want = min(want, free)
        if want <= 0:
            return waiting
        if self.limiter is not None:
            admitted, wait = self.limiter.admit_up_to(self.limit_key, self.estimate, want)
            if len(admitted) < want:
                self._wait_for_room(wait)
                waiting = True
            if not admitted:
                return waiting
            if len(admitted) == want:
                self._stop_waiting()
            want = len(admitted)
            self.tickets += admitted
        else:
            admitted = None
        if slots is not None:
            slots.take(want)
        self._start([todo.pop() for _ in range(want)], admitted)
        return waiting

    def _start(self, picked: list[tuple[str, Any]], tickets: list[Ticket] | None = None) -> None:
        """Count the items picked, then start them once a checkpoint holding the count is saved.

        ``tickets``: each item's admission by the map's limit, in order.
        """
        run = self.run_
        ready: asyncio.Future[None] | None = None
        if self.counts is not None:
            self._count(len(picked))
            checkpointer = run.checkpointer
            if checkpointer.active:
                ready = checkpointer.save_soon(asyncio.get_running_loop())
        create_task = task_maker()
        tasks = self.tasks
        if tickets is None:
            for key, item in picked:
                tasks[key] = create_task(self._one(key, item, ready))
        else:
            for (key, item), ticket in zip(picked, tickets, strict=True):
                tasks[key] = create_task(self._one(key, item, ready, ticket))

    async def _one(
        self,
        key: str,
        item: Any,
        ready: asyncio.Future[None] | None = None,
        ticket: Ticket | None = None,
    ) -> None:
        began = _clock.elapsed()
        ending: Ending
        run = self.run_
        try:
            if ready is not None and not await self._may_begin(ready):
                unstarted = Unfinished(f"item {key!r} of step {self.name!r} did not start")
                run.landing.ended(self.position, UNFINISHED, unstarted, key, began)
                return
            if run.announcer.observed:
                run.announcer.emit(ItemStarted(run.run_id, self.name, key, 1))
            try:
                value = await (
                    self.run_item(key, item)
                    if ticket is None
                    else self.run_item(key, item, ticket=ticket)
                )
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
            if ticket is not None and ticket.open:
                self.limiter.done(ticket, 0)  # type: ignore[union-attr]  # not run, or stopped
            if self.counts is not None:
                self._count(-1)  # in the change that recorded it (no await since)
            if key in self.tasks:  # a task's (run_in_turn awaits it without one)
                self._done(key)

    async def _may_begin(self, ready: asyncio.Future[None]) -> bool:
        """Wait for the checkpoint counting an item (``ready``); whether it may start now.

        Its count is in a checkpoint handed over before it starts: a crash then
        books it as unknown, never as nothing.
        """
        if not ready.done():
            # A cancellation goes on (the item's, or the save's once the run has ended).
            with contextlib.suppress(Exception):  # checkpoint_fn failed: read below
                await asyncio.shield(ready)
        saved = not ready.cancelled() and ready.exception() is None
        # What decided it may start is asked again: an item that failed meanwhile stops it.
        return saved and self.run_.policies.may_start_item(bool(self.failures))

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
