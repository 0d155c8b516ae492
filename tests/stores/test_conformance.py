"""The conformance kit: the built-in stores pass it; broken stores fail it, saying why."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import threading
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import RunClaimedError, RunOwner, WorkflowCheckpoint
from executionkit.conformance import (
    RUN_ID,
    Load,
    Save,
    StoreConformanceError,
    check_store,
    check_store_async,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore, StaleCheckpointError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

STALE_HINT = (
    "; a store must ignore or refuse (raise) a checkpoint whose seq is not newer than the "
    "stored one of its run"
)


def _copy(data: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(data))
    return copied


class MemoryStore:
    """A correct store in memory that ignores stale checkpoints; subclasses break one thing."""

    def __init__(self) -> None:
        self.data: dict[str, Any] | None = None

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.data is None or checkpoint.seq > self.data["seq"]:
            self.data = _copy(checkpoint.to_dict())

    def load(self) -> WorkflowCheckpoint | None:
        return None if self.data is None else WorkflowCheckpoint.from_dict(self.data)


def pairs(kind: Callable[[], MemoryStore]) -> Callable[[], tuple[Save, Load]]:
    def make_store() -> tuple[Save, Load]:
        store = kind()
        return store.save, store.load

    return make_store


# --- the built-in stores -----------------------------------------------------------------


def _factory(tmp_path: Path, make: Callable[[Path], Any]) -> Callable[[], tuple[Save, Load]]:
    numbers = itertools.count()

    def make_store() -> tuple[Save, Load]:
        store = make(tmp_path / f"store-{next(numbers)}")
        return store, store.load

    return make_store


BUILT_IN: list[tuple[str, Callable[[Path], Any]]] = [
    ("json-file", JsonFileStore),
    ("json-lines", JsonLinesStore),
    ("sqlite", SQLiteStore),
    ("sqlite-history", lambda path: SQLiteStore(path, history=True)),
]


@pytest.mark.parametrize("make", [make for _, make in BUILT_IN], ids=[n for n, _ in BUILT_IN])
def test_every_built_in_store_passes_the_kit(tmp_path: Path, make: Callable[[Path], Any]) -> None:
    """They refuse stale checkpoints with StaleCheckpointError, also from 8 threads at once."""
    check_store(_factory(tmp_path, make), stale_error=StaleCheckpointError, writers=8)


INCREMENTAL = {"json-lines", "sqlite", "sqlite-history"}


@pytest.mark.parametrize("make", [make for _, make in BUILT_IN], ids=[n for n, _ in BUILT_IN])
def test_only_the_incremental_built_in_store_has_constant_cost(
    tmp_path: Path, make: Callable[[Path], Any], request: pytest.FixtureRequest
) -> None:
    """JsonLinesStore and SQLiteStore pass incremental=True; JsonFileStore fails it, saying why."""
    factory = _factory(tmp_path, make)
    if request.node.callspec.id in INCREMENTAL:
        check_store(factory, stale_error=StaleCheckpointError, incremental=True)
        return
    with pytest.raises(StoreConformanceError) as caught:
        check_store(factory, stale_error=StaleCheckpointError, incremental=True)
    assert str(caught.value) == SNAPSHOT_COST


@pytest.mark.parametrize("make", [make for _, make in BUILT_IN], ids=[n for n, _ in BUILT_IN])
async def test_the_async_kit_accepts_async_wrappers(
    tmp_path: Path, make: Callable[[Path], Any]
) -> None:
    """Stores used as `lambda cp: asyncio.to_thread(store, cp)` pass check_store_async."""
    numbers = itertools.count()

    def make_store() -> tuple[Save, Load]:
        store = make(tmp_path / f"store-{next(numbers)}")
        return (
            lambda checkpoint: asyncio.to_thread(store, checkpoint),
            lambda: asyncio.to_thread(store.load),
        )

    await check_store_async(make_store, stale_error=StaleCheckpointError, writers=4)


def test_a_store_that_ignores_stale_checkpoints_passes() -> None:
    """Ignoring is as good as refusing: saving returns and the newer checkpoint stays."""
    check_store(pairs(MemoryStore))
    check_store(pairs(MemoryStore), stale_error=StaleCheckpointError)


async def test_the_async_kit_accepts_plain_functions_too() -> None:
    await check_store_async(pairs(MemoryStore))


def test_a_store_keyed_by_run_binds_the_kit_run_id(tmp_path: Path) -> None:
    """Every checkpoint the kit saves carries RUN_ID; a keyed store binds it in load."""
    numbers = itertools.count()
    seen: list[str | None] = []

    def make_store() -> tuple[Save, Load]:
        store = SQLiteStore(tmp_path / f"{next(numbers)}.db")

        def save(checkpoint: WorkflowCheckpoint) -> None:
            seen.append(checkpoint.run_id)
            store(checkpoint)

        return save, lambda: store.load(RUN_ID)

    check_store(make_store, stale_error=StaleCheckpointError)
    assert set(seen) == {RUN_ID}
    assert len(seen) > 20


# --- broken stores fail, naming the property -----------------------------------------------


class ReturnsEmptyDict(MemoryStore):
    def load(self) -> Any:
        return {} if self.data is None else super().load()


class LastWriterWins(MemoryStore):
    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        self.data = _copy(checkpoint.to_dict())


class AcceptsEqualSeq(MemoryStore):
    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.data is None or checkpoint.seq >= self.data["seq"]:
            self.data = _copy(checkpoint.to_dict())


class KeepsFirstCopy(MemoryStore):
    """Caches what it loaded first and keeps returning it."""

    def __init__(self) -> None:
        super().__init__()
        self.cached: WorkflowCheckpoint | None = None

    def load(self) -> WorkflowCheckpoint | None:
        if self.cached is None:
            self.cached = super().load()
        return self.cached


class WritesOnlyNewOutputs(MemoryStore):
    """A naive append-only store: trusts new_outputs even in fresh storage."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: dict[str, Any] = {}
        self.info: dict[str, Any] = {}

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.data is not None and checkpoint.seq <= self.data["seq"]:
            return
        data = _copy(checkpoint.to_dict())
        for name in checkpoint.new_outputs:
            self.outputs[name] = data["outputs"][name]
            self.info[name] = data["step_info"][name]
        data["outputs"] = dict(self.outputs)
        data["step_info"] = {
            n: i for n, i in {**self.info, **data["step_info"]}.items() if n in data["progress"]
        } | {n: self.info[n] for n in self.outputs}
        data["step_index"] = len(self.outputs)
        self.data = data


class NeverDropsOutputs(MemoryStore):
    """Merges outputs into what it holds, so outputs a rerun dropped come back."""

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.data is not None and checkpoint.seq <= self.data["seq"]:
            return
        data = _copy(checkpoint.to_dict())
        if self.data is not None:
            data["outputs"] = {**self.data["outputs"], **data["outputs"]}
            data["step_info"] = {**self.data["step_info"], **data["step_info"]}
            data["step_index"] = len(data["outputs"])
        self.data = data


class KeepsOnlyTheOldFields(MemoryStore):
    """Written before format 3: keeps the fields it knew, so skips, items and questions go."""

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        assert self.data is not None
        for field in ("skipped", "items", "pending", "children"):
            self.data[field] = {}
        kept = {*self.data["outputs"], *self.data["progress"]}
        self.data["step_info"] = {
            name: info for name, info in self.data["step_info"].items() if name in kept
        }


class DropsChildren(MemoryStore):
    """Stores each sub-workflow's checkpoint apart, and never reads them back."""

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        assert self.data is not None
        self.data["children"] = {}
        self.data["step_info"] = {
            name: info
            for name, info in self.data["step_info"].items()
            if info.get("kind") != "workflow"
        }


class NeverDropsQuestions(MemoryStore):
    """Merges pending questions into what it holds, so an answered question stays pending."""

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        previous = self.data
        super().save(checkpoint)
        if previous is not None and self.data is not None and self.data is not previous:
            self.data["pending"] = {**previous["pending"], **self.data["pending"]}


class LosesMetadata(MemoryStore):
    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        assert self.data is not None
        self.data["metadata"] = {}


class ReturnsTheDict(MemoryStore):
    def load(self) -> Any:
        return self.data


class RaisesOnDuplicates(MemoryStore):
    """Refuses every checkpoint that is not newer, the very same one included."""

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.data is not None and checkpoint.seq <= self.data["seq"]:
            raise StaleCheckpointError(
                "strict", checkpoint.run_id, checkpoint.seq, self.data["seq"]
            )
        super().save(checkpoint)


class RefusesWithTheWrongError(MemoryStore):
    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.data is not None and checkpoint.seq < self.data["seq"]:
            msg = "older"
            raise RuntimeError(msg)
        super().save(checkpoint)


class WedgesAfterRefusing(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.refused = False

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.refused or (self.data is not None and checkpoint.seq <= self.data["seq"]):
            self.refused = True
            raise StaleCheckpointError("wedged", checkpoint.run_id, checkpoint.seq, 0)
        super().save(checkpoint)


SHARED: dict[str, Any] = {}


class SharesItsStorage(MemoryStore):
    """A factory that hands out the same storage every time: not fresh, not empty."""

    def __init__(self) -> None:
        super().__init__()
        self.data = SHARED.get("data")

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        SHARED["data"] = self.data


class ForgetsEverything(MemoryStore):
    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        pass


class AddsMetadata(MemoryStore):
    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        assert self.data is not None
        self.data["metadata"]["stored_by"] = "me"


class LoadRaisesWhenEmpty(MemoryStore):
    def load(self) -> WorkflowCheckpoint | None:
        if self.data is None:
            msg = "no such key"
            raise KeyError(msg)
        return super().load()


REFUSED = (
    "written by another writer or before this run resumed from an older checkpoint; resume "
    "from the store's load() instead"
)
FIRST = "after saving the first checkpoint of a run (seq 1) to empty storage"
BROKEN: list[tuple[str, type[MemoryStore], str, str]] = [
    (
        "empty-dict",
        ReturnsEmptyDict,
        "nothing saved",
        "nothing saved: on empty storage, load() returned {}, expected None",
    ),
    (
        "load-raises",
        LoadRaisesWhenEmpty,
        "nothing saved",
        "nothing saved: on empty storage: load() raised KeyError: 'no such key'",
    ),
    (
        "forgets",
        ForgetsEverything,
        "round trip",
        f"round trip: {FIRST}, load() returned None",
    ),
    (
        "adds-metadata",
        AddsMetadata,
        "round trip",
        (
            f"round trip: {FIRST}, load() returned a checkpoint whose 'metadata' has "
            f"'stored_by', which was not saved"
        ),
    ),
    (
        "new-outputs-only",
        WritesOnlyNewOutputs,
        "round trip",
        (
            "round trip: after saving a finished run's checkpoint (seq 4) to empty storage, "
            "load() returned a checkpoint whose 'step_index' is 1, expected 5"
        ),
    ),
    (
        "loses-metadata",
        LosesMetadata,
        "round trip",
        f"round trip: {FIRST}, load() returned a checkpoint whose 'metadata' lacks 'job'",
    ),
    (
        "returns-dict",
        ReturnsTheDict,
        "round trip",
        (
            f"round trip: {FIRST}, load() returned {{'version': 5, 'run_id': "
            f"'executionkit-conformance', 'seq': 1, 'step_index': ..., not a WorkflowCheckpoint"
        ),
    ),
    (
        "stale-copy",
        KeepsFirstCopy,
        "latest wins",
        "latest wins: after saving seq 2 of a run, load() returned seq=1, expected seq=2",
    ),
    (
        "last-writer-wins",
        LastWriterWins,
        "stale writer",
        (
            "stale writer: after saving seq 1, 2, 3 then the stale seq 2 again, load() "
            "returned seq=2, expected seq=3" + STALE_HINT
        ),
    ),
    (
        "equal-seq-overwrites",
        AcceptsEqualSeq,
        "stale writer",
        (
            "stale writer: after saving seq 1, 2, 3 then another worker's different checkpoint "
            "with seq 3, load() returned a checkpoint whose 'outputs'['d'] is "
            "'report (another worker): 4 items', expected 'report: 4 items'" + STALE_HINT
        ),
    ),
    (
        "wrong-error",
        RefusesWithTheWrongError,
        "stale writer",
        (
            "stale writer: after saving seq 1, 2, 3 then the stale seq 2 again: save(seq=2) "
            "raised RuntimeError: older; expected it to return or raise StaleCheckpointError"
        ),
    ),
    (
        "wedged",
        WedgesAfterRefusing,
        "stale writer",
        (
            "stale writer: after refusing stale checkpoints, then saving seq 4: save(seq=4) "
            "raised StaleCheckpointError: wedged: refused checkpoint seq=4 of run "
            f"'executionkit-conformance': the store already holds seq=0 of that run, {REFUSED}"
        ),
    ),
    (
        "duplicates-refused",
        RaisesOnDuplicates,
        "same checkpoint twice",
        (
            "same checkpoint twice: after saving seq 1 again: save(seq=1) raised "
            "StaleCheckpointError: strict: refused checkpoint seq=1 of run "
            "'executionkit-conformance': the store already holds a different checkpoint with "
            f"seq=1 of that run, {REFUSED}"
        ),
    ),
    (
        "never-drops",
        NeverDropsOutputs,
        "resumed run",
        (
            "resumed run: after saving seq 5 of that run resumed with rerun=['c']: load() "
            "raised CheckpointFormatError: checkpoint field 'in_flight[0]' names step 'd', "
            "which the checkpoint records: a recorded attempt has ended, it cannot be in flight"
        ),
    ),
    # The run with map items checkpoints five times: its map counts its first item
    # (format 5's in_flight_items) in a checkpoint of its own before the item starts;
    # resumed with the answer, it goes on from seq 6.
    (
        "format-2-fields-only",
        KeepsOnlyTheOldFields,
        "round trip",
        (
            "round trip: after saving a checkpoint with map items, a skipped step and a question "
            "waiting for an answer (seq 5) to empty storage, load() returned a checkpoint whose "
            "'skipped' lacks 'shortcut'"
        ),
    ),
    (
        "drops-children",
        DropsChildren,
        "round trip",
        (
            "round trip: after saving a checkpoint with sub-workflow checkpoints in children "
            "(seq 5) to empty storage, load() returned a checkpoint whose 'children' lacks "
            "'research'"
        ),
    ),
    (
        "never-drops-questions",
        NeverDropsQuestions,
        "resumed run",
        (
            "resumed run: after saving seq 6 of that run resumed with the answer: load() raised "
            "CheckpointFormatError: checkpoint field 'pending' names recorded steps ['approve']; "
            "an answered question is an output"
        ),
    ),
]


@pytest.mark.parametrize(
    ("kind", "name", "message"),
    [(kind, name, message) for _, kind, name, message in BROKEN],
    ids=[case for case, *_ in BROKEN],
)
def test_a_broken_store_fails_with_the_property_it_breaks(
    kind: type[MemoryStore], name: str, message: str
) -> None:
    SHARED.clear()
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(kind), stale_error=StaleCheckpointError)
    assert caught.value.property == name
    assert isinstance(caught.value, AssertionError)
    assert str(caught.value) == message


async def test_the_async_kit_fails_broken_stores_the_same_way() -> None:
    with pytest.raises(
        StoreConformanceError,
        match=re.escape(
            "latest wins: after saving seq 2 of a run, load() returned seq=1, expected seq=2"
        ),
    ):
        await check_store_async(pairs(KeepsFirstCopy))


def test_without_stale_error_any_exception_counts_as_refusing() -> None:
    """The default stale_error=Exception accepts a store that refuses with its own error."""
    check_store(pairs(RefusesWithTheWrongError))


def test_storage_that_is_not_fresh_fails_nothing_saved() -> None:
    """The first scenario saves into shared storage; the next one finds it not empty."""
    SHARED.clear()
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(SharesItsStorage))
    assert str(caught.value) == (
        "round trip: after saving a failed run's checkpoint (with errors and progress) (seq 4) "
        "to empty storage, load() returned a checkpoint whose 'step_index' is 5, expected 3"
    )
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(SharesItsStorage))
    assert str(caught.value) == (
        "nothing saved: on empty storage, load() returned the checkpoint with seq=4, expected None"
    )


def test_the_sync_kit_names_an_async_save() -> None:
    store = MemoryStore()

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        store.save(checkpoint)

    with pytest.raises(TypeError) as caught:
        check_store(lambda: (save, store.load))
    assert str(caught.value) == (
        "test_the_sync_kit_names_an_async_save.<locals>.save() returned an awaitable; check "
        "async stores with 'await check_store_async(...)'"
    )


def test_the_sync_kit_refuses_async_stores() -> None:
    async def save(checkpoint: WorkflowCheckpoint) -> None:
        pass

    async def load() -> None:
        return None

    with pytest.raises(TypeError) as caught:
        check_store(lambda: (save, load))
    assert str(caught.value) == (
        "test_the_sync_kit_refuses_async_stores.<locals>.load() returned an awaitable; check "
        "async stores with 'await check_store_async(...)'"
    )


async def test_the_sync_kit_refuses_to_run_inside_an_event_loop() -> None:
    with pytest.raises(RuntimeError) as caught:
        check_store(pairs(MemoryStore))
    assert str(caught.value) == (
        "check_store() cannot run while an event loop is running in this thread; use "
        "'await check_store_async(...)' instead"
    )


def test_a_factory_that_returns_no_pair_is_reported() -> None:
    with pytest.raises(StoreConformanceError) as caught:
        check_store(lambda: None)  # type: ignore[arg-type,return-value]
    assert str(caught.value) == (
        "nothing saved: make_store() must return a (save, load) pair: TypeError: cannot "
        "unpack non-iterable NoneType object"
    )


def test_each_scenario_gets_fresh_storage() -> None:
    """make_store is called once per scenario, so state never leaks between them."""
    made: list[MemoryStore] = []

    def make_store() -> tuple[Save, Load]:
        store = MemoryStore()
        made.append(store)
        return store.save, store.load

    check_store(make_store)
    assert len(made) == 17
    assert len({id(store) for store in made}) == 17


# --- the opt-in properties: constant cost and concurrent writers ------------------------

SNAPSHOT_COST = (
    "constant cost: after saving the 69 checkpoints of a 60-step chain, the store serialised, "
    "compared or copied outputs of earlier checkpoints 2049 times (at most 59, at seq 68), "
    "expected at most 69: each checkpoint should write only its new_outputs"
)


class AppendsNewOutputs(MemoryStore):
    """Keeps the outputs apart and adds each checkpoint's new ones: constant cost."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: dict[str, Any] = {}
        self.lock = threading.Lock()

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        with self.lock:
            if self.data is not None and checkpoint.seq <= self.data["seq"]:
                return
            new = checkpoint.new_outputs if self.data is not None else tuple(checkpoint.outputs)
            if self.data is not None and len(self.outputs) + len(new) != len(checkpoint.outputs):
                new = tuple(checkpoint.outputs)  # not the next checkpoint: take them all
                self.outputs = {}
            self.outputs.update(_copy({name: checkpoint.outputs[name] for name in new}))
            self.outputs = {name: self.outputs[name] for name in checkpoint.outputs}
            self.data = {"seq": checkpoint.seq, "head": checkpoint}

    def load(self) -> WorkflowCheckpoint | None:
        if self.data is None:
            return None
        head: WorkflowCheckpoint = self.data["head"]
        rest = {key: value for key, value in head.to_dict().items() if key != "outputs"}
        return WorkflowCheckpoint.from_dict({**_copy(rest), "outputs": dict(self.outputs)})


def test_a_store_that_writes_only_new_outputs_has_constant_cost() -> None:
    check_store(pairs(AppendsNewOutputs), incremental=True, writers=4)


def test_a_full_snapshot_store_fails_constant_cost_naming_the_count() -> None:
    """MemoryStore copies to_dict() through json on every save: 59 + 58 + ... touches."""
    check_store(pairs(MemoryStore))  # without the opt-in, nothing is said about cost
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(MemoryStore), incremental=True)
    assert caught.value.property == "constant cost"
    assert str(caught.value) == SNAPSHOT_COST


async def test_the_async_kit_checks_constant_cost_too() -> None:
    await check_store_async(pairs(AppendsNewOutputs), incremental=True, writers=4)
    with pytest.raises(StoreConformanceError, match=r"^constant cost: "):
        await check_store_async(pairs(MemoryStore), incremental=True)


class PerThread(MemoryStore):
    """Keeps a checkpoint per thread, like an in-memory database opened in each thread."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        data = getattr(self.local, "data", None)
        if data is None or checkpoint.seq > data["seq"]:
            self.local.data = _copy(checkpoint.to_dict())

    def load(self) -> WorkflowCheckpoint | None:
        data = getattr(self.local, "data", None)
        return None if data is None else WorkflowCheckpoint.from_dict(data)


class OneThreadOnly(MemoryStore):
    """Refuses to be used from any thread but the one that made it, like a sqlite3 connection."""

    def __init__(self) -> None:
        super().__init__()
        self.owner = threading.get_ident()

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if threading.get_ident() != self.owner:
            msg = "objects created in a thread can only be used in that same thread"
            raise RuntimeError(msg)
        super().save(checkpoint)


def test_a_store_whose_threads_do_not_share_storage_fails_concurrent_writers() -> None:
    check_store(pairs(PerThread))  # one thread at a time, it is fine
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(PerThread), writers=4)
    assert caught.value.property == "concurrent writers"
    assert str(caught.value) == (
        "concurrent writers: after 4 writers each saved seq 1 to 4 of one run at once, load() "
        "returned None, expected one of the 4 checkpoints with seq=4 whose save returned, whole"
    )


def test_a_store_that_fails_in_other_threads_fails_concurrent_writers() -> None:
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(OneThreadOnly), writers=2)
    assert str(caught.value) == (
        "concurrent writers: while 2 writers saved at once, save(seq=4) raised RuntimeError: "
        "objects created in a thread can only be used in that same thread; yet no other "
        "writer's seq 4 was saved, so it was not stale"
    )
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(OneThreadOnly), stale_error=StaleCheckpointError, writers=2)
    assert str(caught.value) == (
        "concurrent writers: while 2 writers saved at once, save(seq=1) raised RuntimeError: "
        "objects created in a thread can only be used in that same thread; expected it to "
        "return or raise StaleCheckpointError"
    )


@pytest.mark.parametrize("writers", [1, -1, 2.0, True])
def test_writers_is_zero_or_at_least_two(writers: Any) -> None:
    with pytest.raises(ValueError, match="writers must be 0") as caught:
        check_store(pairs(MemoryStore), writers=writers)
    assert str(caught.value) == (
        f"writers must be 0 (no concurrency check) or an int of at least 2, got {writers!r}"
    )


# --- format 3: what the kit saves besides outputs ----------------------------------------


def test_the_kit_saves_every_format_3_field_from_real_runs() -> None:
    """Skips, map items, a question with a deadline, children; then the answer drops them."""
    saved: list[WorkflowCheckpoint] = []

    class Recording(MemoryStore):
        def save(self, checkpoint: WorkflowCheckpoint) -> None:
            saved.append(checkpoint)
            super().save(checkpoint)

    check_store(pairs(Recording))
    waiting = next(cp for cp in saved if cp.pending and cp.items and cp.skipped)
    entry = waiting.pending["approve"]
    assert entry["question"] == {"plan": ["a", "b", "c"], "note": "Grüße, 世界"}
    assert entry["expires_at"] is not None
    assert sorted(waiting.items["summaries"]["outputs"]) == ["0", "1"]
    assert waiting.skipped == {"shortcut": "condition _never returned False"}
    nested = next(cp for cp in saved if cp.children)
    assert sorted(nested.children) == ["per_chunk", "research"]
    assert nested.children["research"]["checkpoint"].outputs == {"search": ["a", "b"]}
    answered = [cp for cp in saved if cp.outputs.get("approve") == {"ok": True}]
    assert all(not cp.pending for cp in answered)
    assert not answered[-1].items
    assert list(answered[-1].outputs) == ["split", "approve", "summaries", "publish"]


# --- claims ------------------------------------------------------------------------------


class Claiming(MemoryStore):
    """A correct store that grants claims, in memory; subclasses break one thing."""

    def __init__(self) -> None:
        super().__init__()
        self.holder: RunOwner | None = None

    @contextlib.contextmanager
    def claim(self, run_id: str) -> Iterator[int | None]:
        if self.holder is not None:
            raise RunClaimedError(repr(self), run_id, self.holder)
        self.holder = RunOwner.this_process(run_id)
        try:
            yield None if self.data is None else self.data["seq"]
        finally:
            self.holder = None

    def owner(self, run_id: str) -> RunOwner | None:
        return self.holder if self.holder is not None and self.holder.run_id == run_id else None

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.save(checkpoint)


def claim_pairs(kind: Callable[[], Claiming]) -> Callable[[], tuple[Save, Load]]:
    def make_store() -> tuple[Save, Load]:
        store = kind()
        return store, store.load

    return make_store


class CallableClaiming(Claiming):
    """The correct store, by another name for the tables below."""


class AsyncClaiming(CallableClaiming):
    """The claim as an async context manager."""

    @contextlib.asynccontextmanager
    async def claim(self, run_id: str) -> AsyncIterator[int | None]:  # type: ignore[override]
        await asyncio.sleep(0)
        with super().claim(run_id) as stored:
            yield stored


class GrantsTwice(CallableClaiming):
    @contextlib.contextmanager
    def claim(self, run_id: str) -> Iterator[int | None]:
        yield None if self.data is None else self.data["seq"]


class ForgetsTheSeq(CallableClaiming):
    @contextlib.contextmanager
    def claim(self, run_id: str) -> Iterator[int | None]:
        with super().claim(run_id):
            yield None


class NamesNoOwner(CallableClaiming):
    def owner(self, run_id: str) -> RunOwner | None:
        return None


class KeepsItsClaim(CallableClaiming):
    @contextlib.contextmanager
    def claim(self, run_id: str) -> Iterator[int | None]:
        if self.holder is not None:
            raise RunClaimedError(repr(self), run_id, self.holder)
        self.holder = RunOwner.this_process(run_id)
        yield None if self.data is None else self.data["seq"]


def test_a_store_that_grants_claims_passes_sync_and_async() -> None:
    """A claim refusing a second claimant, giving the seq and naming the owner passes."""
    check_store(claim_pairs(CallableClaiming))
    asyncio.run(check_store_async(claim_pairs(AsyncClaiming)))


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (
            GrantsTwice,
            (
                "claims: claiming it again while the first claim is held: the second claim was "
                "granted; expected RunClaimedError"
            ),
        ),
        (
            ForgetsTheSeq,
            (
                "claims: claiming it again after giving it up gave None; expected 4 (seq 4 "
                "stored last)"
            ),
        ),
        (
            NamesNoOwner,
            (
                "claims: while the claim is held: owner('executionkit-conformance') returned "
                "None; expected a RunOwner of run 'executionkit-conformance' with pid"
            ),
        ),
        (
            KeepsItsClaim,
            (
                "claims: after the claim was given up: owner('executionkit-conformance') returned "
                "RunOwner("
            ),
        ),
    ],
)
def test_a_store_whose_claims_are_broken_fails_claims(
    kind: Callable[[], Claiming], message: str
) -> None:
    """Each broken claim is named."""
    with pytest.raises(StoreConformanceError) as caught:
        check_store(claim_pairs(kind))
    assert caught.value.property == "claims"
    assert str(caught.value).startswith(message)
