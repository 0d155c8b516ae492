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

Two more properties are opt-in, because not every correct store has them:

- **constant cost** (``incremental=True``, for stores that claim to write only
  what is new): saving the 60 checkpoints of a 60-step chain, one after the
  other, serialises, compares or copies each earlier output at most about once
  in all, instead of once per later checkpoint as a full snapshot does.
- **concurrent writers** (``writers=N``, for stores that several threads share):
  ``N`` threads (tasks, in `check_store_async`) save competing checkpoints of
  one run at once, each worker its own seq 3 and 4 after a shared seq 1 and 2;
  afterwards ``load()`` returns one of the seq 4 checkpoints whose save
  returned, whole.

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
import threading
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
CONSTANT_COST = "constant cost"
CONCURRENT_WRITERS = "concurrent writers"


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


def check_store(
    make_store: StoreFactory,
    *,
    stale_error: type[Exception] = Exception,
    incremental: bool = False,
    writers: int = 0,
) -> None:
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
        incremental: Also check **constant cost**: that a store saving a long
            chain does not serialise, compare or copy earlier outputs again
            with every checkpoint. The kit sees only what happens to the
            outputs themselves (each is a `dict` subclass counting its
            ``items``, ``keys``, ``values``, iteration, ``==``, ``copy`` and
            pickling): it catches ``json.dumps(checkpoint.to_dict())`` and
            deep copies, not a store that copies references or encodes with
            a library that reads dicts without calling their methods.
        writers: Also check **concurrent writers** with this many threads
            (at least 2) saving into one store at once. Leave it 0 for a store
            meant for one writer at a time.

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
    _check_writers(writers)
    samples = asyncio.run(_Samples.build(incremental=incremental, writers=writers))
    _drive(_Kit(make_store, stale_error, samples, sync=True).check())


async def check_store_async(
    make_store: StoreFactory,
    *,
    stale_error: type[Exception] = Exception,
    incremental: bool = False,
    writers: int = 0,
) -> None:
    """Like `check_store`, for stores whose ``save`` or ``load`` return awaitables.

    Plain functions work too. Use it from async code (an async test), where
    `check_store` cannot start its own event loop. With ``writers``, the
    concurrent writers are tasks of this event loop rather than threads.
    """
    _check_writers(writers)
    samples = await _Samples.build(incremental=incremental, writers=writers)
    await _Kit(make_store, stale_error, samples, sync=False).check()


def _check_writers(writers: int) -> None:
    if type(writers) is not int or writers == 1 or writers < 0:
        msg = f"writers must be 0 (no concurrency check) or an int of at least 2, got {writers!r}"
        raise ValueError(msg)


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
    chain: tuple[WorkflowCheckpoint, ...]  # a long chain of Counted outputs (incremental)
    workers: tuple[tuple[WorkflowCheckpoint, ...], ...]  # each writer's seq 1-4 (writers)

    @classmethod
    async def build(cls, *, incremental: bool = False, writers: int = 0) -> _Samples:
        run = await _run(_workflow())
        sibling = (await _run(_workflow(variant=" (another worker)"), run[1]))[0]
        failed = await _run(_workflow(fail=True))
        resumed = await _run(_workflow(), failed[-1])
        rerun = await _run(_workflow(variant=" (rerun)"), run[-1], rerun=["c"])
        copy = WorkflowCheckpoint.from_dict(json.loads(json.dumps(run[-1].to_dict())))
        chain = await _run(_chain(CHAIN_LENGTH)) if incremental else ()
        workers = [run]
        for number in range(1, writers):
            fork = await _run(_workflow(variant=f" (worker {number})"), run[1])
            workers.append((*run[:2], *fork[:2]))
        return cls(run, sibling, failed, resumed, rerun, copy, chain, tuple(workers[:writers]))


CHAIN_LENGTH = 60
_LAST_SEQ = 4  # every writer of the concurrency check saves seq 1 to 4


class _Counted(dict[str, Any]):
    """An output that counts what a store does with it, other than hold a reference."""

    touched = 0  # reset and read by the kit around each save; saves run one at a time

    def _touch(self) -> None:
        _Counted.touched += 1

    def items(self) -> Any:  # what json.dumps asks a dict subclass for
        self._touch()
        return super().items()

    def keys(self) -> Any:
        self._touch()
        return super().keys()

    def values(self) -> Any:
        self._touch()
        return super().values()

    def __iter__(self) -> Any:
        self._touch()
        return super().__iter__()

    def __eq__(self, other: object) -> bool:
        self._touch()
        return super().__eq__(other)

    __hash__ = None  # as a dict's

    def copy(self) -> dict[str, Any]:
        self._touch()
        return dict(super().items())

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickle and copy.deepcopy
        self._touch()
        return (dict, (dict(super().items()),))


def _chain(length: int) -> Workflow:
    def make(number: int) -> Step:
        def run(_ctx: Any) -> _Counted:
            return _Counted(step=number, text=f"output {number} of the chain")

        return Step(f"s{number}", run, depends_on=(f"s{number - 1}",) if number else ())

    return Workflow([make(number) for number in range(length)])


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
        if self.samples.chain:
            await self.constant_cost()
        if self.samples.workers:
            await self.concurrent_writers()

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

    async def constant_cost(self) -> None:
        name = CONSTANT_COST
        chain = self.samples.chain
        save, load = self.fresh(name)
        total = worst = worst_seq = 0
        for checkpoint in chain:
            _Counted.touched = 0
            await self.save(name, save, checkpoint, f"saving seq {checkpoint.seq} of a chain")
            touched = _Counted.touched
            # The new outputs are written now: the store may look at each of them once.
            touched = max(0, touched - len(checkpoint.new_outputs))
            total += touched
            if touched > worst:
                worst, worst_seq = touched, checkpoint.seq
        when = f"after saving the {len(chain)} checkpoints of a {len(chain)}-step chain"
        await self.expect(name, load, chain[-1], when)
        if total > len(chain):
            msg = (
                f"{when}, the store serialised, compared or copied outputs of earlier "
                f"checkpoints {total} times (at most {worst}, at seq {worst_seq}), expected at "
                f"most {len(chain)}: each checkpoint should write only its new_outputs"
            )
            raise StoreConformanceError(name, msg)

    async def concurrent_writers(self) -> None:
        name = CONCURRENT_WRITERS
        workers = self.samples.workers
        save, load = self.fresh(name)
        if self.sync:
            outcomes = _in_threads(save, workers)
        else:
            outcomes = await asyncio.gather(*(self.worker(save, work) for work in workers))
        accepted: list[WorkflowCheckpoint] = []
        refused: list[tuple[WorkflowCheckpoint, BaseException]] = []
        for work, outcome in zip(workers, outcomes, strict=True):
            for checkpoint, problem in zip(work, outcome, strict=True):
                if problem is None:
                    accepted.append(checkpoint)
                elif isinstance(problem, self.stale_error):
                    refused.append((checkpoint, problem))
                else:
                    raise self.not_stale(len(workers), checkpoint, problem)
        if not any(checkpoint.seq == _LAST_SEQ for checkpoint in accepted):
            # The first seq 4 to arrive is newer than anything stored: it must be saved.
            checkpoint, problem = next((c, p) for c, p in refused if c.seq == _LAST_SEQ)
            raise self.not_stale(len(workers), checkpoint, problem)
        when = f"after {len(workers)} writers each saved seq 1 to 4 of one run at once"
        got = await self.load(name, load, when)
        top = _LAST_SEQ
        candidates = [c.to_dict() for c in accepted if c.seq == top]
        if isinstance(got, WorkflowCheckpoint) and got.to_dict() in candidates:
            return
        msg = (
            f"{when}, load() returned {_describe(got)}, expected one of the {len(candidates)} "
            f"checkpoints with seq={top} whose save returned, whole"
        )
        raise StoreConformanceError(name, msg)

    def not_stale(
        self, writers: int, checkpoint: WorkflowCheckpoint, problem: BaseException
    ) -> StoreConformanceError:
        msg = (
            f"while {writers} writers saved at once, save(seq={checkpoint.seq}) raised "
            f"{type(problem).__name__}: {problem}; "
            + (
                "yet no other writer's seq 4 was saved, so it was not stale"
                if isinstance(problem, self.stale_error)
                else f"expected it to return or raise {self.stale_error.__name__}"
            )
        )
        error = StoreConformanceError(CONCURRENT_WRITERS, msg)
        error.__cause__ = problem
        return error

    async def worker(
        self, save: Save, work: tuple[WorkflowCheckpoint, ...]
    ) -> list[BaseException | None]:
        """One writer of `concurrent_writers` as a task: None when saved, else what it raised."""
        outcome: list[BaseException | None] = []
        for checkpoint in work:
            await asyncio.sleep(0)  # let the other writers' saves interleave with this one
            try:
                await self.call(save, checkpoint)
            except _AwaitableInSyncCheckError:  # pragma: no cover - only the sync kit raises it
                raise
            except Exception as exc:  # noqa: BLE001 - judged with the others' outcomes
                outcome.append(exc)
            else:
                outcome.append(None)
        return outcome


def _in_threads(
    save: Save, workers: tuple[tuple[WorkflowCheckpoint, ...], ...]
) -> list[list[BaseException | None]]:
    """Run each worker's saves in its own thread, all released at once by a barrier."""
    outcomes: list[list[BaseException | None]] = [[] for _ in workers]
    start = threading.Barrier(len(workers))

    def work(number: int) -> None:
        start.wait()
        for checkpoint in workers[number]:
            try:
                result = save(checkpoint)
            except Exception as exc:  # noqa: BLE001 - judged with the others' outcomes
                outcomes[number].append(exc)
                continue
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                msg = "save returned an awaitable; use 'await check_store_async(...)'"
                outcomes[number].append(TypeError(msg))
            else:
                outcomes[number].append(None)

    threads = [threading.Thread(target=work, args=(number,)) for number in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


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
