"""Running a map step: its items, each recorded as it completes.

`drive` is the body of a map step's attempt. It reads the items from ``ctx``,
names each with its key (checked before any item runs), skips the items the
record already holds, and runs the others concurrently within the map's limit.
Each item that completes is handed to the run (`ItemLanding.landed_item`),
which records it and has it checkpointed; the map step's own output, the list
or dict of every item's output, is assembled by the record once every item is
in it. Failures among items follow the run's ``on_error``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from executionkit._aio import wait_through
from executionkit._errors import ContextKeyError
from executionkit._snapshot import OutputLog

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from executionkit._step_kinds import MapStep
    from executionkit._types import TokenUsage


@dataclass(frozen=True, slots=True)
class MapDone:
    """What a map step returns once every item is recorded: the keys, in item order."""

    keys: tuple[str, ...]
    mapping: bool


class Unfinished(Exception):  # noqa: N818 - not an error: the map stopped starting items
    """A map stopped before running every item (the budget, or the run is stopping)."""


class ItemLanding(Protocol):
    """What the run does with each item, and whether it lets more start."""

    on_error: str
    item_limit: int | None

    def recorded_items(self, position: int) -> Collection[str]: ...

    def landed_item(self, position: int, key: str, result: Any, began: float) -> Exception | None:
        """Record an item's result; return the error if it cannot be recorded."""
        ...

    def item_failed(self, position: int, key: str, error: Exception, began: float) -> None: ...

    def landed_interrupt(self, error: BaseException) -> None: ...

    def may_start_item(self) -> bool: ...

    def item_started(self, position: int, key: str) -> None: ...

    def map_started(self, position: int, items: int, recorded: int) -> None: ...

    def items_dropped(self, position: int, keys: list[str]) -> None:
        """Recorded items whose keys the map's items no longer have."""
        ...


def _items(step: MapStep, ctx: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], bool]:
    """The items and their keys, checked: unique non-empty str keys."""
    name = step.name
    try:
        value = ctx[step.over]
    except ContextKeyError as exc:
        msg = (
            f"map step {name!r}: over={step.over!r} names neither a step it depends on nor "
            f"a key of the initial context ({exc})"
        )
        raise LookupError(msg) from None
    mapping = isinstance(value, Mapping)
    if mapping:
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)):
        pairs = [(str(position), item) for position, item in enumerate(value)]
    else:
        msg = (
            f"map step {name!r}: over={step.over!r} must be a list, a tuple or a mapping of "
            f"items, got {type(value).__name__}"
        )
        raise TypeError(msg)
    if step.key is not None:
        pairs = [(step.key(item), item) for _, item in pairs]
    bad = [key for key, _ in pairs if not isinstance(key, str) or not key]
    if bad:
        shown = ", ".join(repr(key) for key in bad[:5]) + (", ..." if len(bad) > 5 else "")  # noqa: PLR2004
        msg = f"map step {name!r}: item keys must be non-empty str, got {shown}"
        raise TypeError(msg)
    if len({key for key, _ in pairs}) != len(pairs):
        counts: dict[str, int] = {}
        for key, _ in pairs:
            counts[key] = counts.get(key, 0) + 1
        twice = sorted(key for key, count in counts.items() if count > 1)
        shown = ", ".join(map(repr, twice[:5])) + (", ..." if len(twice) > 5 else "")  # noqa: PLR2004
        msg = f"map step {name!r}: item keys must be unique; {shown} name more than one item"
        raise ValueError(msg)
    return pairs, mapping


async def drive(
    position: int,
    step: MapStep,
    ctx: Mapping[str, Any],
    run_item: Callable[[str, Any], Awaitable[Any]],
    landing: ItemLanding,
) -> MapDone:
    """Run every item not yet recorded; return the keys once all are.

    Raises an `ExceptionGroup` of the items' errors when any failed (each
    noted with its key), or `Unfinished` when items were left unstarted.
    """
    pairs, mapping = _items(step, ctx)
    recorded = landing.recorded_items(position)
    todo = [(key, item) for key, item in reversed(pairs) if key not in recorded]
    landing.map_started(position, len(pairs), len(pairs) - len(todo))
    if len(recorded) > len(pairs) - len(todo):
        keys = {key for key, _ in pairs}
        landing.items_dropped(position, [key for key in recorded if key not in keys])
    limit = landing.item_limit
    if step.max_concurrency is not None:
        limit = step.max_concurrency if limit is None else min(limit, step.max_concurrency)
    driver = _Driver(position, step.name, run_item, landing)
    await driver.run(todo, limit)
    if driver.failures:
        raise driver.failed(len(pairs))
    recorded = landing.recorded_items(position)
    left = sum(1 for key, _ in pairs if key not in recorded)
    if left:
        msg = f"map step {step.name!r}: {left} of {len(pairs)} items did not complete"
        raise Unfinished(msg)
    return MapDone(tuple(key for key, _ in pairs), mapping)


class _Driver:
    """Starts a map's items within its limit and follows the run's failure policy."""

    def __init__(
        self,
        position: int,
        name: str,
        run_item: Callable[[str, Any], Awaitable[Any]],
        landing: ItemLanding,
    ) -> None:
        self.position = position
        self.name = name
        self.run_item = run_item
        self.landing = landing
        self.failures: dict[str, Exception] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.wake: asyncio.Future[None] | None = None

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _may_start(self) -> bool:
        if self.failures and self.landing.on_error != "continue":
            return False
        return self.landing.may_start_item()

    async def run(self, todo: list[tuple[str, Any]], limit: int | None) -> None:
        """Start items popped from ``todo`` while allowed; return once none runs."""
        loop = asyncio.get_running_loop()
        tasks = self.tasks
        try:
            while True:
                while todo and (limit is None or len(tasks) < limit) and self._may_start():
                    key, item = todo.pop()
                    self.landing.item_started(self.position, key)
                    task = loop.create_task(self._one(key, item))
                    tasks.add(task)
                    task.add_done_callback(self._done)
                if not tasks:
                    return
                self.wake = loop.create_future()
                await self.wake
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            while tasks:
                self.wake = loop.create_future()
                await wait_through(self.wake)
            raise

    async def _one(self, key: str, item: Any) -> None:
        landing = self.landing
        began = time.perf_counter()
        try:
            result = await self.run_item(key, item)
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if this is not None and not this.cancelling():
                # The item raised CancelledError itself: an interrupt, as for a step.
                message = f"item {key!r} of step {self.name!r} was cancelled"
                landing.landed_interrupt(asyncio.CancelledError(message))
            raise
        except Unfinished:
            return  # a sub-workflow waiting for answers, or stopped by the budget
        except Exception as exc:  # noqa: BLE001 - an item's failure is data here
            self.failures[key] = exc
            landing.item_failed(self.position, key, exc, began)
            if landing.on_error == "cancel":
                for other in self.tasks:
                    other.cancel()
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, ...
            landing.landed_interrupt(exc)
        else:
            unrecorded = landing.landed_item(self.position, key, result, began)
            if unrecorded is not None:
                self.failures[key] = unrecorded

    def failed(self, total: int) -> ExceptionGroup[Exception]:
        """The error of the map step: every item's error, each noted with its key."""
        errors = []
        for key, error in self.failures.items():
            error.add_note(f"executionkit: item {key!r} of map step {self.name!r}")
            errors.append(error)
        keys = list(self.failures)
        shown = ", ".join(map(repr, keys[:10])) + (", ..." if len(keys) > 10 else "")  # noqa: PLR2004
        msg = (
            f"map step {self.name!r}: {len(keys)} of {total} items failed ({shown}); the "
            f"others that completed are recorded, and a resume runs only the rest"
        )
        return ExceptionGroup(msg, errors)


class MapItems:
    """The finished items of one map that has not finished, in recording order."""

    __slots__ = ("cost", "live", "log", "since")

    def __init__(self, stored: Mapping[str, Any], live: dict[str, Any], cost: TokenUsage) -> None:
        """Start from the items restored from a checkpoint (or none)."""
        self.log = OutputLog(stored)
        self.live = live
        self.cost = cost
        self.since = len(self.log)
