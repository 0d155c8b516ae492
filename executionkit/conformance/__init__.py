"""A conformance kit for checkpoint stores: does your save/load pair behave as resuming needs?

Any ``checkpoint_fn`` plus a way to load the latest checkpoint back is a store:
a JSON file, a database row, a Redis key. `check_store` runs the properties
resuming relies on against yours and raises `StoreConformanceError` naming the
first one it breaks:

- **nothing saved**: loading from empty storage returns ``None``.
- **round trip**: what ``load()`` returns equals the checkpoint saved (compared
  through `WorkflowCheckpoint.to_dict`): the first of a run, a finished run's,
  a failed run's with ``errors`` and ``progress``, one read back with
  `WorkflowCheckpoint.from_dict` (whose ``new_outputs`` is empty), one with
  every field format 3 adds for steps without an output (the recorded items of
  an unfinished map, a skipped step, a question waiting for an answer with its
  deadline), one with sub-workflow checkpoints in ``children``, one with
  every field formats 4 and 5 add (a cost ledger with failed, timed-out,
  cancelled, unknown, late and rate-limited attempts, models and a
  sub-workflow's rows; attempts in flight; a trace; a lineage; the attempts
  with their times; a wait; items of a map in flight; a step's ``code``
  fingerprint), and one whose question was answered at its deadline
  (``answered_by`` in ``step_info``).
- **latest wins**: after saving ``seq`` 1, 2, 3, 4 of a run, ``load()`` returns
  each one just saved; so it does for a run whose cost ledger and attempts
  grow with each checkpoint (each naming its new rows in ``new_ledger`` and
  its new entries in ``new_attempts``).
- **stale writer**: after seq 3, saving seq 2 again, or another worker's
  different checkpoint with seq 3, leaves seq 3 stored; the store may ignore
  the stale checkpoint or refuse it by raising ``stale_error``. Seq 4 is then
  still accepted.
- **same checkpoint twice**: saving a checkpoint again (or an equal copy) does
  not raise and changes nothing.
- **resumed run**: the checkpoints of a run resumed after a failure, of one
  resumed with ``rerun`` (which drops recorded outputs), and of one resumed with
  the answer to its question (which drops the question, then the map's items),
  each load back equal.

- **claims**, for a store whose ``save`` has a ``claim`` method (one that grants
  one process at a time the ownership of a run; see the execution model): on
  empty storage, ``claim(RUN_ID)`` (a sync or async context manager) is
  granted and gives None; a second claim of the run while it is held raises
  `executionkit.RunClaimedError`, even from the same store object; after seq
  1 to 4 were saved and the claim given up, claiming again gives 4. If the
  store has an ``owner`` method, ``owner(RUN_ID)`` returns a
  `executionkit.RunOwner` with this process's pid while the claim is held, and
  None once it is given up.

Two more properties are opt-in, because not every correct store has them:

- **constant cost** (``incremental=True``, for stores that claim to write only
  what is new): saving the checkpoints of a 60-step chain (whose steps report
  usage, some failing once first), one after the other, serialises, compares
  or copies each earlier output at most about once in all, instead of once per
  later checkpoint as a full snapshot does; and reads each earlier ledger row
  and ``attempts`` entry at most about once in all too (a store writes each
  checkpoint's ``new_ledger`` and ``new_attempts``, not its whole ``ledger``
  and ``attempts``).
- **concurrent writers** (``writers=N``, for stores that several threads share):
  ``N`` threads (tasks, in `check_store_async`) save competing checkpoints of
  one run at once, each worker its own seq 3 and 4 after a shared seq 1 and 2;
  afterwards ``load()`` returns one of the seq 4 checkpoints whose save
  returned, whole.

The checkpoints are real: the kit runs a small workflow (a diamond with token
usage, metadata, a versioned step, unicode and nested outputs, a step that
saves progress and fails; and a map, a condition and a question) with a list
as ``checkpoint_fn``, so ``seq``, ``run_id``, ``new_outputs``, ``new_items``
and ``new_ledger`` are what `Workflow.run` produces (the format 4 and 5 sample
adds its ledger, in-flight attempts, trace, lineage, attempts, wait, items in
flight and code by hand, naming its new rows in ``new_ledger`` and
``new_attempts`` as a run does). Every
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

from executionkit.conformance._kit import Kit, drive
from executionkit.conformance._names import (
    RUN_ID,
    Load,
    Save,
    StoreConformanceError,
    StoreFactory,
)
from executionkit.conformance._samples import Samples

__all__ = [
    "RUN_ID",
    "Load",
    "Save",
    "StoreConformanceError",
    "StoreFactory",
    "check_store",
    "check_store_async",
]

# Shown and pickled under the module users import it from.
StoreConformanceError.__module__ = __name__


def check_store(
    make_store: StoreFactory,
    *,
    stale_error: type[Exception] = Exception,
    incremental: bool = False,
    writers: int = 0,
) -> None:
    """Check that a store behaves as resuming relies on; raise on the first broken property.

    The properties are listed in this module's documentation. ``make_store``
    is called once per scenario (about a dozen times) and must return the
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
            a library that reads dicts without calling their methods. Ledger
            rows and ``attempts`` entries are counted as the checkpoint hands
            them out: reading ``checkpoint.ledger`` (or ``to_dict()``) reads
            every row, reading ``new_ledger`` only the new ones; the same for
            ``attempts`` and ``new_attempts``.
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
    samples = asyncio.run(Samples.build(incremental=incremental, writers=writers))
    drive(Kit(make_store, stale_error, samples, sync=True).check())


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
    samples = await Samples.build(incremental=incremental, writers=writers)
    await Kit(make_store, stale_error, samples, sync=False).check()


def _check_writers(writers: int) -> None:
    if type(writers) is not int or writers == 1 or writers < 0:
        msg = f"writers must be 0 (no concurrency check) or an int of at least 2, got {writers!r}"
        raise ValueError(msg)
