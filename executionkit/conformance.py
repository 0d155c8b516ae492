"""A conformance kit for checkpoint stores: does your save/load pair behave as resuming needs?

Any ``checkpoint_fn`` plus a way to load the latest checkpoint back is a store:
a JSON file, a database row, a Redis key. `check_store` runs the properties
resuming relies on against yours and raises `StoreConformanceError` naming the
first one it breaks:

- **nothing saved**: loading from empty storage returns ``None``.
- **round trip**: what ``load()`` returns equals the checkpoint saved (compared
  through `WorkflowCheckpoint.to_dict`): the first of a run, a finished run's,
  a failed run's with ``errors`` and ``progress``, and one read back with
  `WorkflowCheckpoint.from_dict` (whose ``new_outputs`` is empty).
- **latest wins**: after saving ``seq`` 1, 2, 3, 4 of a run, ``load()`` returns
  each one just saved.
- **stale writer**: after seq 3, saving seq 2 again, or another worker's
  different checkpoint with seq 3, leaves seq 3 stored; the store may ignore
  the stale checkpoint or refuse it by raising ``stale_error``. Seq 4 is then
  still accepted.
- **same checkpoint twice**: saving a checkpoint again (or an equal copy) does
  not raise and changes nothing.
- **resumed run**: the checkpoints of a run resumed after a failure, and of one
  resumed with ``rerun`` (which drops recorded outputs), each load back equal.

The checkpoints are real: the kit runs a small workflow (a diamond with token
usage, metadata, a versioned step, unicode and nested outputs, a step that
saves progress and fails) with a list as ``checkpoint_fn``, so ``seq``,
``run_id`` and ``new_outputs`` are what `Workflow.run` produces. Every
checkpoint has the run_id `RUN_ID`, so a store keyed by run can load it.

Example, for a store that keeps each run's checkpoint as JSON in a dict:

```python
import json

from executionkit import WorkflowCheckpoint
from executionkit.conformance import RUN_ID, check_store


def make_store():
    rows = {}  # run_id -> (seq, JSON text)

    def save(checkpoint):
        stored = rows.get(checkpoint.run_id)
        if stored is None or checkpoint.seq > stored[0]:  # stale: ignored
            rows[checkpoint.run_id] = (checkpoint.seq, json.dumps(checkpoint.to_dict()))

    def load():
        stored = rows.get(RUN_ID)
        return None if stored is None else WorkflowCheckpoint.from_dict(json.loads(stored[1]))

    return save, load


check_store(make_store)  # raises StoreConformanceError if a property fails
```
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeAlias

from executionkit._checkpoint import WorkflowCheckpoint
from executionkit._errors import WorkflowFailed
from executionkit._step import Step
from executionkit._step_context import current_step
from executionkit._types import PatternResult, TokenUsage
from executionkit._workflow import Workflow

__all__ = [
    "RUN_ID",
    "Load",
    "Save",
    "StoreConformanceError",
    "StoreFactory",
    "check_store",
    "check_store_async",
]

RUN_ID = "executionkit-conformance"
"""The ``run_id`` of every checkpoint the kit saves."""

Save: TypeAlias = Callable[[WorkflowCheckpoint], object]
"""Saves a checkpoint: any ``checkpoint_fn``. May return an awaitable (`check_store_async`)."""

Load: TypeAlias = Callable[[], "WorkflowCheckpoint | Awaitable[WorkflowCheckpoint | None] | None"]
"""Returns the latest checkpoint saved, or None (an awaitable of it for `check_store_async`)."""

StoreFactory: TypeAlias = Callable[[], tuple[Save, Load]]
"""Returns the ``(save, load)`` pair of a new store over fresh, empty storage."""

NOTHING_SAVED = "nothing saved"
ROUND_TRIP = "round trip"
LATEST_WINS = "latest wins"
STALE_WRITER = "stale writer"
SAVED_TWICE = "same checkpoint twice"
RESUMED_RUN = "resumed run"


class StoreConformanceError(AssertionError):
    """A store broke a property of the conformance kit.

    The message starts with the property's name, such as ``"stale writer: "``,
    and says what was saved and what ``load()`` returned.

    Attributes:
        property: The name of the property that failed.
    """

    def __init__(self, name: str, message: str) -> None:
        """Create the error for property ``name``."""
        super().__init__(f"{name}: {message}")
        self.property = name


def check_store(make_store: StoreFactory, *, stale_error: type[Exception] = Exception) -> None:
    """Check that a store behaves as resuming relies on; raise on the first broken property.

    The properties are listed in this module's documentation. ``make_store``
    is called once per scenario (about ten times) and must return the
    ``(save, load)`` pair of a store over fresh, empty storage each time: a
    new file in a temporary folder, a new key prefix, an emptied table.
    ``save`` is a ``checkpoint_fn``; ``load()`` takes no arguments and returns
    the latest checkpoint saved or ``None`` (bind the run_id `RUN_ID` if your
    store needs one).

    Args:
        make_store: Returns a fresh store's ``(save, load)`` pair.
        stale_error: The exception a store may raise to refuse a stale
            checkpoint (ignoring it is accepted too). The default accepts any
            `Exception`; pass your store's own error to make sure a stale
            checkpoint is refused with it and not by some unrelated failure.

    Raises:
        StoreConformanceError: The first property the store breaks (an
            `AssertionError`, so test runners report it as a failure).
        TypeError: If ``save`` or ``load`` returned an awaitable: use
            `check_store_async`.
        RuntimeError: If called while an event loop is running in this thread
            (the kit runs a workflow with `Workflow.run_sync`): use
            ``await check_store_async(...)`` there.

    Example:
        Each scenario gets a new file in a temporary folder:

        ```python
        import itertools
        import tempfile
        from pathlib import Path

        from executionkit.conformance import check_store
        from executionkit.stores import JsonFileStore, StaleCheckpointError

        folder = Path(tempfile.mkdtemp())
        numbers = itertools.count()


        def make_store():
            store = JsonFileStore(folder / f"{next(numbers)}.json")
            return store, store.load


        check_store(make_store, stale_error=StaleCheckpointError)
        ```
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        msg = (
            "check_store() cannot run while an event loop is running in this thread; "
            "use 'await check_store_async(...)' instead"
        )
        raise RuntimeError(msg)
    samples = asyncio.run(_Samples.build())
    _drive(_Kit(make_store, stale_error, samples, sync=True).check())


async def check_store_async(
    make_store: StoreFactory, *, stale_error: type[Exception] = Exception
) -> None:
    """Like `check_store`, for stores whose ``save`` or ``load`` return awaitables.

    Plain functions work too. Use it from async code (an async test), where
    `check_store` cannot start its own event loop.
    """
    samples = await _Samples.build()
    await _Kit(make_store, stale_error, samples, sync=False).check()


# --- the checkpoints the kit saves ------------------------------------------------------

_CONTEXT = {"document": "never stored: only this key's name is"}
_METADATA = {"job": "conformance", "labels": ["kit", "ünïcode"]}


def _workflow(*, variant: str = "", fail: bool = False) -> Workflow:
    """Four batches: a; b and c (a diamond); d; e."""

    def a(_ctx: Any) -> PatternResult[dict[str, Any]]:
        value = {"text": "Grüße, 世界 ✓", "n": 1, "ratio": 0.25, "items": [1, None, True, "x"]}
        return PatternResult(value, cost=TokenUsage(120, 30, 1))

    def b(_ctx: Any) -> PatternResult[list[Any]]:
        return PatternResult(
            ["summary", {"nested": {"deep": [1, 2.5]}}], cost=TokenUsage(200, 50, 1)
        )

    async def d(ctx: Any) -> PatternResult[str]:
        if fail:
            await current_step().save_progress({"done": 2, "of": 5})
            msg = "the model timed out"
            raise RuntimeError(msg)
        return PatternResult(f"report{variant}: {ctx['c']}", cost=TokenUsage(300, 80, 2))

    return Workflow(
        [
            Step("a", a, version="prompt-v1"),
            Step("b", b, depends_on=("a",)),
            Step("c", lambda ctx: f"{len(ctx['a']['items'])} items", depends_on=("a",)),
            Step("d", d, depends_on=("b", "c")),
            Step("e", lambda _ctx: None, depends_on=("d",)),
        ]
    )


async def _run(
    workflow: Workflow, resume_from: WorkflowCheckpoint | None = None, **options: Any
) -> tuple[WorkflowCheckpoint, ...]:
    taken: list[WorkflowCheckpoint] = []
    with contextlib.suppress(WorkflowFailed):  # the failing run's checkpoints are the point
        await workflow.run(
            _CONTEXT,
            checkpoint_fn=taken.append,
            resume_from=resume_from,
            run_id=RUN_ID,
            metadata=_METADATA,
            **options,
        )
    return tuple(taken)


@dataclass(frozen=True)
class _Samples:
    run: tuple[WorkflowCheckpoint, ...]  # seq 1-4 of a run that finishes
    sibling: WorkflowCheckpoint  # another worker's seq 3, resumed from run[1]
    failed: tuple[WorkflowCheckpoint, ...]  # a run whose step d saves progress, then fails
    resumed: tuple[WorkflowCheckpoint, ...]  # resumed from failed[-1], finishes
    rerun: tuple[WorkflowCheckpoint, ...]  # resumed from run[-1] with rerun=["c"]
    copy: WorkflowCheckpoint  # run[-1] after to_dict, json and from_dict

    @classmethod
    async def build(cls) -> _Samples:
        run = await _run(_workflow())
        sibling = (await _run(_workflow(variant=" (another worker)"), run[1]))[0]
        failed = await _run(_workflow(fail=True))
        resumed = await _run(_workflow(), failed[-1])
        rerun = await _run(_workflow(variant=" (rerun)"), run[-1], rerun=["c"])
        copy = WorkflowCheckpoint.from_dict(json.loads(json.dumps(run[-1].to_dict())))
        return cls(run, sibling, failed, resumed, rerun, copy)


# --- the checks -------------------------------------------------------------------------

_PREVIEW_CHARS = 80
_ORDER = ("run_id", "seq", "step_index", "outputs")


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 3] + "..."


def _describe(checkpoint: object) -> str:
    if isinstance(checkpoint, WorkflowCheckpoint):
        return f"the checkpoint with seq={checkpoint.seq}"
    return _preview(checkpoint)


def _difference(expected: dict[str, Any], got: dict[str, Any]) -> str | None:
    """How ``got`` differs from ``expected``, most telling field first; None if equal."""
    if expected == got:
        return None
    if expected.get("seq") != got.get("seq"):
        return f"load() returned seq={got.get('seq')!r}, expected seq={expected.get('seq')!r}"
    keys = [*_ORDER, *(key for key in expected if key not in _ORDER)]
    keys += [key for key in got if key not in keys]
    for key in keys:
        want, have = expected.get(key), got.get(key)
        if want != have:
            return f"load() returned a checkpoint whose {_field_difference(key, want, have)}"
    return "load() returned a different checkpoint"  # pragma: no cover - dict == covers it


def _field_difference(key: str, want: object, have: object) -> str:
    if isinstance(want, dict) and isinstance(have, dict):
        for name in want:
            if name not in have:
                return f"{key!r} lacks {name!r}"
        for name in have:
            if name not in want:
                return f"{key!r} has {name!r}, which was not saved"
        for name, value in want.items():
            if have[name] != value:
                return f"{key!r}[{name!r}] is {_preview(have[name])}, expected {_preview(value)}"
    return f"{key!r} is {_preview(have)}, expected {_preview(want)}"


class _AwaitableInSyncCheckError(TypeError):
    pass


class _Kit:
    def __init__(
        self,
        make_store: StoreFactory,
        stale_error: type[Exception],
        samples: _Samples,
        *,
        sync: bool,
    ) -> None:
        self.make_store = make_store
        self.stale_error = stale_error
        self.samples = samples
        self.sync = sync

    async def check(self) -> None:
        await self.nothing_saved()
        await self.round_trip()
        await self.latest_wins()
        await self.stale_writer()
        await self.saved_twice()
        await self.resumed_run()

    # -- helpers --

    def fresh(self, name: str) -> tuple[Save, Load]:
        try:
            pair = self.make_store()
            save, load = pair
        except (TypeError, ValueError) as exc:
            msg = f"make_store() must return a (save, load) pair: {type(exc).__name__}: {exc}"
            raise StoreConformanceError(name, msg) from exc
        return save, load

    async def call(self, function: Callable[..., object], *args: object) -> object:
        result = function(*args)
        if inspect.isawaitable(result):
            if self.sync:
                if inspect.iscoroutine(result):
                    result.close()
                msg = (
                    f"{_name(function)} returned an awaitable; check async stores with "
                    f"'await check_store_async(...)'"
                )
                raise _AwaitableInSyncCheckError(msg)
            result = await result
        return result

    async def save(self, name: str, save: Save, checkpoint: WorkflowCheckpoint, when: str) -> None:
        try:
            await self.call(save, checkpoint)
        except _AwaitableInSyncCheckError:
            raise
        except Exception as exc:
            msg = f"{when}: save(seq={checkpoint.seq}) raised {type(exc).__name__}: {exc}"
            raise StoreConformanceError(name, msg) from exc

    async def load(self, name: str, load: Load, when: str) -> object:
        try:
            return await self.call(load)
        except _AwaitableInSyncCheckError:
            raise
        except Exception as exc:
            msg = f"{when}: load() raised {type(exc).__name__}: {exc}"
            raise StoreConformanceError(name, msg) from exc

    async def expect(
        self, name: str, load: Load, expected: WorkflowCheckpoint, when: str, hint: str = ""
    ) -> None:
        got = await self.load(name, load, when)
        if got is None:
            problem = "load() returned None"
        elif not isinstance(got, WorkflowCheckpoint):
            problem = f"load() returned {_preview(got)}, not a WorkflowCheckpoint"
        else:
            difference = _difference(expected.to_dict(), got.to_dict())
            if difference is None:
                return
            problem = difference
        raise StoreConformanceError(name, f"{when}, {problem}{hint}")

    async def save_all(
        self,
        name: str,
        save: Save,
        load: Load,
        checkpoints: tuple[WorkflowCheckpoint, ...],
        what: str,
    ) -> None:
        for checkpoint in checkpoints:
            when = f"after saving seq {checkpoint.seq} of {what}"
            await self.save(name, save, checkpoint, when)
            await self.expect(name, load, checkpoint, when)

    # -- the properties --

    async def nothing_saved(self) -> None:
        name = NOTHING_SAVED
        _, load = self.fresh(name)
        got = await self.load(name, load, "on empty storage")
        if got is not None:
            msg = f"on empty storage, load() returned {_describe(got)}, expected None"
            raise StoreConformanceError(name, msg)

    async def round_trip(self) -> None:
        samples = self.samples
        cases = (
            ("the first checkpoint of a run", samples.run[0]),
            ("a finished run's checkpoint", samples.run[-1]),
            ("a failed run's checkpoint (with errors and progress)", samples.failed[-1]),
            ("a checkpoint read back with from_dict (empty new_outputs)", samples.copy),
        )
        for label, checkpoint in cases:
            save, load = self.fresh(ROUND_TRIP)
            when = f"after saving {label} (seq {checkpoint.seq}) to empty storage"
            await self.save(ROUND_TRIP, save, checkpoint, when)
            await self.expect(ROUND_TRIP, load, checkpoint, when)

    async def latest_wins(self) -> None:
        save, load = self.fresh(LATEST_WINS)
        await self.save_all(LATEST_WINS, save, load, self.samples.run, "a run")

    async def stale_writer(self) -> None:
        name = STALE_WRITER
        run = self.samples.run
        save, load = self.fresh(name)
        for checkpoint in run[:3]:
            await self.save(name, save, checkpoint, f"saving seq {checkpoint.seq}")
        stale = (
            (run[1], "then the stale seq 2 again"),
            (self.samples.sibling, "then another worker's different checkpoint with seq 3"),
        )
        for checkpoint, what in stale:
            when = f"after saving seq 1, 2, 3 {what}"
            await self.save_stale(save, checkpoint, when)
            hint = (
                "; a store must ignore or refuse (raise) a checkpoint whose seq is not newer "
                "than the stored one of its run"
            )
            await self.expect(name, load, run[2], when, hint)
        when = "after refusing stale checkpoints, then saving seq 4"
        await self.save(name, save, run[3], when)
        await self.expect(name, load, run[3], when)

    async def save_stale(self, save: Save, checkpoint: WorkflowCheckpoint, when: str) -> None:
        try:
            await self.call(save, checkpoint)
        except _AwaitableInSyncCheckError:
            raise
        except self.stale_error:
            pass
        except Exception as exc:
            msg = (
                f"{when}: save(seq={checkpoint.seq}) raised {type(exc).__name__}: {exc}; "
                f"expected it to return or raise {self.stale_error.__name__}"
            )
            raise StoreConformanceError(STALE_WRITER, msg) from exc

    async def saved_twice(self) -> None:
        name = SAVED_TWICE
        run = self.samples.run
        save, load = self.fresh(name)
        steps = (
            (run[0], "seq 1"),
            (run[0], "seq 1 again"),
            (run[1], "seq 1, seq 1 again, seq 2"),
            (run[1], "seq 1, seq 1 again, seq 2, seq 2 again"),
            (
                WorkflowCheckpoint.from_dict(json.loads(json.dumps(run[1].to_dict()))),
                "seq 1, seq 1 again, seq 2, seq 2 again, an equal copy of seq 2",
            ),
            (run[2], "seq 1, seq 1 again, seq 2, seq 2 again, an equal copy of seq 2, seq 3"),
        )
        for checkpoint, what in steps:
            when = f"after saving {what}"
            await self.save(name, save, checkpoint, when)
            await self.expect(name, load, checkpoint, when)

    async def resumed_run(self) -> None:
        name = RESUMED_RUN
        samples = self.samples
        save, load = self.fresh(name)
        await self.save_all(name, save, load, samples.failed, "a failing run")
        await self.save_all(name, save, load, samples.resumed, "that run resumed")
        save, load = self.fresh(name)
        await self.save_all(name, save, load, samples.run, "a run")
        await self.save_all(name, save, load, samples.rerun, "that run resumed with rerun=['c']")


def _name(function: Callable[..., object]) -> str:
    return f"{getattr(function, '__qualname__', type(function).__name__)}()"


def _drive(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never suspends (its stores are all synchronous)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()  # pragma: no cover - call() refuses awaitables when sync
    msg = "internal error: the synchronous check suspended"  # pragma: no cover
    raise RuntimeError(msg)  # pragma: no cover
