"""The incremental stores and Step.map: each item stored as it lands, O(new) bytes, exact rebuilds.

Each item of the map awaits its own `asyncio.Event`; the test releases them one
at a time, each only once ``checkpoint_fn`` has stored the checkpoint of the
one before, so every item lands in a checkpoint of its own. Before any item
starts, the map counts them in a checkpoint of its own (format 5's
``in_flight_items``), with no new item. No sleeps.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_fixture import new_database

from executionkit import (
    CheckpointFormatError,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit.stores import (
    JsonLinesStore,
    PostgresStore,
    SQLiteStore,
    _json_lines,
    _lines_items,
)
from executionkit.stores import _sql_items as sql_items

if TYPE_CHECKING:
    from collections.abc import Sequence


KINDS = ["json-lines", "sqlite", "postgres"]
PAD = "p" * 24


@dataclass
class Target:
    """A store, a second store object reading the same place, and how to measure it."""

    kind: str
    store: Any
    reader: Any
    where: Any  # the file, or the connection string
    closers: list[Any] = field(default_factory=list)

    def load(self) -> WorkflowCheckpoint | None:
        if self.kind == "json-lines":
            return JsonLinesStore(self.where).load()  # a fresh object: the file alone
        loaded: WorkflowCheckpoint | None = self.reader.load()
        return loaded

    def history(self, run_id: str | None) -> list[WorkflowCheckpoint]:
        assert run_id is not None
        return [] if self.kind == "json-lines" else list(self.reader.history(run_id))

    def size(self) -> int:
        """Bytes the store holds for what it wrote (the file; the headers and rows)."""
        if self.kind == "json-lines":
            return int(self.where.stat().st_size) if self.where.exists() else 0
        if self.kind == "sqlite":
            exists = "SELECT COUNT(*) FROM sqlite_master WHERE name = 'executionkit_headers'"
        else:
            exists = "SELECT COUNT(to_regclass('executionkit_headers'))"
        if self.sql(exists) != [(1,)]:
            return 0
        query = """SELECT (SELECT COALESCE(SUM(LENGTH(header)), 0) FROM executionkit_headers)
            + (SELECT COALESCE(SUM(LENGTH(value) + LENGTH(item)), 0) FROM executionkit_items)
            + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM executionkit_outputs)"""
        return int(self.sql(query)[0][0])

    def sql(self, query: str, *params: object) -> list[Any]:
        if self.kind == "sqlite":
            lite = sqlite3.connect(self.where)
            try:
                return lite.execute(query, params).fetchall()
            finally:
                lite.close()
        with psycopg.connect(self.where) as connection:
            return connection.execute(query.replace("?", "%s"), params).fetchall()

    def close(self) -> None:
        for store in (self.store, self.reader, *self.closers):
            if hasattr(store, "close"):
                store.close()


def make_target(
    kind: str, folder: Path, request: pytest.FixtureRequest, *, history: bool
) -> Target:
    if kind == "json-lines":
        path = folder / "run.jsonl"
        return Target(kind, JsonLinesStore(path), None, path)
    if kind == "sqlite":
        path = folder / "runs.db"
        return Target(kind, SQLiteStore(path, history=history), SQLiteStore(path), path)
    uri = new_database(request.getfixturevalue("pg_server"))  # one per target
    return Target(kind, PostgresStore(uri, history=history), PostgresStore(uri), uri)


def output(key: str) -> dict[str, Any]:
    return {"key": key, "pad": PAD}


def mapped(
    n: int,
    calls: list[str],
    events: dict[str, asyncio.Event],
    fail: str | None = None,
    **options: Any,
) -> Workflow:
    """A split step listing ``n`` item keys, and a map whose items each wait for their event."""

    async def item(key: str, _ctx: Any) -> PatternResult[dict[str, Any]]:
        calls.append(key)
        await events[key].wait()
        if key == fail:
            msg = f"item {key} failed"
            raise RuntimeError(msg)
        return PatternResult(output(key), cost=TokenUsage(len(key), 1, 1))

    keys = [f"k{i}" for i in range(n)]
    return Workflow(
        [
            Step("split", lambda _ctx: keys),
            Step.map("m", item, over="split", key=lambda key: key, **options),
            Step("after", lambda ctx: len(ctx["m"]), depends_on=("m",)),
        ]
    )


@dataclass
class Drive:
    """One run of `mapped`, its items released in ``order``, every checkpoint checked."""

    target: Target
    check_each: bool = True
    saved: list[WorkflowCheckpoint] = field(default_factory=list)
    growth: list[int] = field(default_factory=list)  # bytes each save added
    calls: list[str] = field(default_factory=list)

    def save(
        self, checkpoint: WorkflowCheckpoint, stored: asyncio.Queue[WorkflowCheckpoint]
    ) -> None:
        before = self.target.size()
        self.target.store(checkpoint)
        self.growth.append(self.target.size() - before)
        self.saved.append(checkpoint)
        if self.check_each:
            assert_same(self.target.load(), checkpoint)
        stored.put_nowait(checkpoint)

    async def run(
        self,
        n: int,
        order: Sequence[str],
        *,
        resume_from: WorkflowCheckpoint | None = None,
        fail: str | None = None,
        **options: Any,
    ) -> Any:
        """Release the items of ``order`` one at a time; then ``fail`` (made to raise), if any."""
        stored: asyncio.Queue[WorkflowCheckpoint] = asyncio.Queue()
        events = {f"k{i}": asyncio.Event() for i in range(n)}
        workflow = mapped(n, self.calls, events, fail, **options)
        run = asyncio.ensure_future(
            workflow.run(
                checkpoint_fn=lambda c: self.save(c, stored),
                resume_from=resume_from,
                on_error="cancel",
            )
        )

        async def next_stored() -> WorkflowCheckpoint:
            # The run ending instead (a checkpoint_fn that raised) fails the test, not hangs it.
            getting = asyncio.ensure_future(stored.get())
            await asyncio.wait({getting, run}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                run.result()  # raises what the run raised
                pytest.fail("the run ended before storing the checkpoint the test waits for")
            return getting.result()

        if resume_from is None:
            first = await next_stored()
            assert first.new_outputs == ("split",)
        # The map counts the items it starts (every item it has not recorded: no
        # concurrency limit) in a checkpoint of its own before they start: no new
        # output, no new item.
        counting = await next_stored()
        assert counting.new_outputs == ()
        assert dict(counting.new_items) == {}
        running = n - len(counting.items.get("m", {}).get("outputs", {}))
        assert dict(counting.in_flight_items) == {"m": running}
        # Then one checkpoint per item: the item, off the count.
        for key in order[:-1] if fail is None else order:
            events[key].set()
            checkpoint = await next_stored()
            running -= 1
            assert dict(checkpoint.new_items) == {"m": (key,)}
            assert dict(checkpoint.in_flight_items) == {"m": running}
        if fail is not None:
            events[fail].set()
        elif order:
            events[order[-1]].set()
        try:
            return await run
        except WorkflowFailed as error:
            return error


def assert_same(loaded: WorkflowCheckpoint | None, checkpoint: WorkflowCheckpoint) -> None:
    """Equal, in to_dict() (orders included), and through a JSON round trip."""
    assert loaded is not None
    assert loaded == checkpoint
    assert loaded.to_dict() == checkpoint.to_dict()
    assert json.dumps(loaded.to_dict()) == json.dumps(checkpoint.to_dict())  # every order
    copy = WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))
    assert copy == loaded
    for name, entry in checkpoint.items.items():
        assert list(loaded.items[name]["outputs"]) == list(entry["outputs"])


def in_order(n: int) -> list[str]:
    return [f"k{i}" for i in range(n)]


def shuffled(n: int) -> list[str]:
    keys = in_order(n)
    return keys[1::2] + keys[::2]  # a fixed order other than the items'


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path


# --- one checkpoint per item, rebuilt exactly ----------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_checkpoint_of_a_map_is_stored_one_item_at_a_time_and_rebuilt_exactly(
    kind: str, folder: Path, request: pytest.FixtureRequest
) -> None:
    target = make_target(kind, folder, request, history=True)
    drive = Drive(target)
    try:
        result = asyncio.run(drive.run(12, shuffled(12)))
        assert result.outputs["m"] == [output(key) for key in in_order(12)]
        saved = drive.saved
        # The split's checkpoint, then the map's counting its twelve items before they
        # start (no item, no output): the first item lands in the third.
        assert [c.seq for c in saved[:2]] == [1, 2]
        assert not saved[1].items
        assert dict(saved[1].in_flight_items) == {"m": 12}
        with_items = [c for c in saved if c.items]
        assert len(with_items) >= 11  # the last item may land with the map's output
        assert [c.seq for c in with_items[:11]] == list(range(3, 14))
        assert [dict(c.new_items)["m"] for c in with_items[:11]] == [
            (key,) for key in shuffled(12)[:11]
        ]
        # While items run they are counted; the map is not listed by name in in_flight.
        assert [dict(c.in_flight_items) for c in with_items[:11]] == [
            {"m": 12 - landed} for landed in range(1, 12)
        ]
        assert all(not c.in_flight for c in saved if c.in_flight_items)
        assert with_items[3].items["m"]["cost"] == TokenUsage(8, 4, 4)
        last = target.load()
        assert last is not None
        assert not last.items  # the map finished: its items are gone, its output is in
        assert last.outputs["m"] == result.outputs["m"]
        history = target.history(saved[0].run_id)
        if kind != "json-lines":
            assert len(history) == len(saved)
            for loaded, checkpoint in zip(history, saved, strict=True):
                assert_same(loaded, checkpoint)
            assert target.sql("SELECT COUNT(*) FROM executionkit_items WHERE dropped IS NULL") == [
                (0,)
            ]
    finally:
        target.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_finished_maps_items_are_deleted_without_history(
    kind: str, folder: Path, request: pytest.FixtureRequest
) -> None:
    target = make_target(kind, folder, request, history=False)
    drive = Drive(target)
    try:
        asyncio.run(drive.run(6, in_order(6)))
        last = target.load()
        assert last is not None
        assert not last.items
        assert_same(last, drive.saved[-1])
        if kind == "json-lines":
            lines = [json.loads(line) for line in target.where.read_text().splitlines()]
            assert lines[1]["x"] == {"in_flight_items": {"m": 6}}  # the map's counting line
            final = lines[-1]
            assert "i" not in final
            assert "x" not in final
        else:
            assert target.sql("SELECT COUNT(*) FROM executionkit_items") == [(0,)]
            assert target.sql("SELECT COUNT(*) FROM executionkit_headers") == [(1,)]
    finally:
        target.close()


# --- bytes per checkpoint ------------------------------------------------------------------


def _item_growth(kind: str, folder: Path, request: pytest.FixtureRequest, n: int) -> list[int]:
    target = make_target(kind, folder / str(n), request, history=True)
    (folder / str(n)).mkdir()
    drive = Drive(target, check_each=False)
    try:
        asyncio.run(drive.run(n, in_order(n)))
        last = target.load()
        assert last is not None
        assert_same(last, drive.saved[-1])
        if kind != "json-lines":
            history = target.history(drive.saved[0].run_id)
            for loaded, checkpoint in zip(history, drive.saved, strict=True):
                assert loaded == checkpoint
            added = dict(
                target.sql("SELECT added, COUNT(*) FROM executionkit_items GROUP BY added")
            )
            one_item = [c.seq for c in drive.saved if c.new_items]
            assert {seq: added.get(seq) for seq in one_item} == dict.fromkeys(one_item, 1)
            assert sum(added.values()) == n
    finally:
        target.close()
    # The checkpoints that each stored one item: all but the first two (the split's, and
    # the map's counting its items) and the last two (the map's output, the step after).
    one_item = [c.seq for c in drive.saved if c.new_items]
    assert one_item == list(range(3, n + 3))
    assert [c.seq for c in drive.saved] == list(range(1, n + 5))
    assert dict(drive.saved[1].in_flight_items) == {"m": n}
    return [drive.growth[1]] + [
        g for c, g in zip(drive.saved, drive.growth, strict=True) if c.new_items
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_written_per_item_do_not_grow_with_the_number_of_items(
    kind: str, folder: Path, request: pytest.FixtureRequest
) -> None:
    # Ten times the items; on PostgreSQL each save is a durable commit, so 200 (not more)
    # keeps this test at a few seconds.
    (small_count, *small) = _item_growth(kind, folder, request, 20)
    (large_count, *large) = _item_growth(kind, folder, request, 200)
    item_size = len(json.dumps(output("k199"), separators=(",", ":")))
    # A line (or a header and a row) of a constant size plus the new item: a few
    # more digits in the key, seq, cost and count of items in flight at 200 items,
    # never the items before.
    assert max(large) <= 600 + item_size
    assert max(large) - max(small) <= 16
    assert min(large) >= item_size  # the item itself is written
    # The checkpoint counting the map's items before they start holds no item: a
    # line (or a header) of a constant size, a count of items, not the items.
    assert large_count <= 600
    assert large_count - small_count <= 16


# --- resume ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_resume_after_a_failure_mid_map_stores_only_the_rest(
    kind: str, folder: Path, request: pytest.FixtureRequest
) -> None:
    target = make_target(kind, folder, request, history=True)
    first = Drive(target)
    try:
        failed = asyncio.run(first.run(8, ["k3", "k0", "k6"], fail="k5"))
        assert isinstance(failed, WorkflowFailed)
        stored = target.load()
        assert stored is not None
        assert_same(stored, failed.checkpoint)
        assert list(stored.items["m"]["outputs"]) == ["k3", "k0", "k6"]
        assert "m" not in stored.outputs

        again = Drive(target)
        rest = ["k1", "k2", "k4", "k5", "k7"]
        result = asyncio.run(again.run(8, rest, resume_from=stored))
        assert sorted(again.calls) == sorted(rest)  # recorded items never run again
        assert result.outputs["m"] == [output(key) for key in in_order(8)]
        assert not again.saved[-1].items
        assert_same(target.load(), again.saved[-1])
        if kind != "json-lines":
            history = target.history(stored.run_id)
            assert len(history) == len(first.saved) + len(again.saved)
            for loaded, checkpoint in zip(history, [*first.saved, *again.saved], strict=True):
                assert_same(loaded, checkpoint)
    finally:
        target.close()


@pytest.mark.parametrize("kind", KINDS)
def test_rerun_of_a_map_drops_the_stored_items(
    kind: str, folder: Path, request: pytest.FixtureRequest
) -> None:
    target = make_target(kind, folder, request, history=True)
    try:
        asyncio.run(Drive(target).run(5, ["k0", "k1", "k2"], fail="k3"))
        stored = target.load()
        assert stored is not None
        assert list(stored.items["m"]["outputs"]) == ["k0", "k1", "k2"]
        again = Drive(target)
        # The map's version changed: its items are dropped and every item runs again.
        result = asyncio.run(
            again.run(5, ["k4", "k2", "k3", "k1", "k0"], resume_from=stored, version="v2")
        )
        assert sorted(again.calls) == in_order(5)
        assert result.outputs["m"] == [output(key) for key in in_order(5)]
        # The old items never come back: each checkpoint holds only the items released,
        # from the first, which counts the five items about to run again.
        assert not again.saved[0].items
        assert dict(again.saved[0].in_flight_items) == {"m": 5}
        later = [list(c.items["m"]["outputs"]) for c in again.saved if c.items]
        assert later[:3] == [["k4"], ["k4", "k2"], ["k4", "k2", "k3"]]
        if kind != "json-lines":
            history = target.history(stored.run_id)
            for loaded, checkpoint in zip(history[-len(again.saved) :], again.saved, strict=True):
                assert_same(loaded, checkpoint)
    finally:
        target.close()


# --- the fast path, and orders drawn by hypothesis ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_runs_next_checkpoint_writes_its_new_items_without_comparing(
    kind: str, folder: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[int] = []
    if kind == "json-lines":
        original = _lines_items.item_differences

        def lines_counted(checkpoint: WorkflowCheckpoint, previous: Any) -> Any:
            compared.append(checkpoint.seq)
            return original(checkpoint, previous)

        monkeypatch.setattr(_json_lines, "item_differences", lines_counted)
    else:
        rows = sql_items.ItemRows.save_differences

        def rows_counted(self: Any, db: Any, run_id: str, checkpoint: Any, *rest: Any) -> Any:
            compared.append(checkpoint.seq)
            return rows(self, db, run_id, checkpoint, *rest)

        monkeypatch.setattr(sql_items.ItemRows, "save_differences", rows_counted)
    target = make_target(kind, folder, request, history=True)
    try:
        asyncio.run(Drive(target).run(10, in_order(10)))
    finally:
        target.close()
    # Only the store object's first save compares (the SQL stores; it holds no items).
    assert compared == ([] if kind == "json-lines" else [1])


def _resumed_story(kind: str, order: list[str], fail: str | None) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        path = folder / ("run.jsonl" if kind == "json-lines" else "runs.db")
        store: Any = (
            JsonLinesStore(path) if kind == "json-lines" else SQLiteStore(path, history=True)
        )
        reader = None if kind == "json-lines" else SQLiteStore(path)
        target = Target(kind, store, reader, path)
        try:
            cut = len(order) // 2
            first = Drive(target)
            released = order if fail is None else order[:cut]
            outcome = asyncio.run(first.run(len(order), released, fail=fail))
            saved = list(first.saved)
            if fail is not None:
                assert isinstance(outcome, WorkflowFailed)
                stored = target.load()
                assert stored is not None
                rest = [
                    key for key in order if key not in stored.items.get("m", {}).get("outputs", {})
                ]
                again = Drive(target)
                result = asyncio.run(again.run(len(order), rest, resume_from=stored))
                assert sorted(again.calls) == sorted(rest)
                saved += again.saved
            else:
                result = outcome
            assert result.outputs["m"] == [output(key) for key in in_order(len(order))]
            if kind == "sqlite":
                history = target.history(saved[0].run_id)
                for loaded, checkpoint in zip(history, saved, strict=True):
                    assert_same(loaded, checkpoint)
        finally:
            target.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["json-lines", "sqlite"]),
    order=st.permutations([f"k{i}" for i in range(6)]),
    fail=st.one_of(st.none(), st.integers(0, 5)),
)
def test_any_order_and_failure_point_rebuilds_every_checkpoint(
    kind: str, order: list[str], fail: int | None
) -> None:
    failing = (
        None if fail is None else order[len(order) // 2 :][fail % (len(order) - len(order) // 2)]
    )
    _resumed_story(kind, list(order), failing)


# --- JSON Lines: the line format ------------------------------------------------------------


def _items_file(tmp_path: Path) -> tuple[JsonLinesStore, WorkflowCheckpoint]:
    """A file left by a run that failed mid-map, and its latest checkpoint."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    target = Target("json-lines", store, None, store.path)
    failed = asyncio.run(Drive(target).run(4, ["k2", "k0"], fail="k1"))
    assert isinstance(failed, WorkflowFailed)
    return store, failed.checkpoint


def test_item_lines_hold_the_new_items_and_each_maps_cost(tmp_path: Path) -> None:
    store, latest = _items_file(tmp_path)
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert [line["s"] for line in lines] == [1, 2, 3, 4, 5]
    assert [line.get("i") for line in lines] == [
        None,
        None,  # the map counts its first items before they start: no item yet
        {"m": [{"k2": output("k2")}, [2, 1, 1]]},
        {"m": [{"k0": output("k0")}, [4, 2, 2]]},
        {"m": [{}, [4, 2, 2]]},  # the failure: no new item, the cost as it was
    ]
    # The items running or about to start, by map (format 5's in_flight_items, under
    # "x"): all four, then one fewer as each lands; none once the map failed.
    assert [line.get("x") for line in lines] == [
        None,
        {"in_flight_items": {"m": 4}},
        {"in_flight_items": {"m": 3}},
        {"in_flight_items": {"m": 2}},
        None,
    ]
    assert lines[1]["n"] == {}
    # A map of functions is counted, not listed by name among the attempts in flight.
    assert all("f" not in line and "fd" not in line for line in lines)
    assert_same(JsonLinesStore(store.path).load(), latest)


def test_compact_keeps_the_items_of_an_unfinished_map(tmp_path: Path) -> None:
    store, latest = _items_file(tmp_path)
    store.compact()
    (line,) = store.path.read_text().splitlines()
    assert json.loads(line)["i"] == {
        "m": [{"k2": output("k2"), "k0": output("k0")}, [4, 2, 2], "all"]
    }
    assert "x" not in json.loads(line)  # the map failed: no item counted in flight
    assert_same(JsonLinesStore(store.path).load(), latest)


def test_lines_written_before_items_had_their_own_key_still_load(tmp_path: Path) -> None:
    store, latest = _items_file(tmp_path)
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    for line in lines:  # as the store wrote them before: every item, whole, under "x"
        if "i" in line:
            del line["i"]
            line["x"] = {**line.get("x", {}), "items": latest.to_dict()["items"]}
    store.path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert_same(JsonLinesStore(store.path).load(), latest)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"i": []}, "'i' must be an object"),
        ({"i": {"m": [{}, [1, 2]]}}, "'i.m' must be [items, cost] or [items, cost, 'all']"),
        (
            {"i": {"m": [{}, [1, 2, 3], "some"]}},
            "'i.m' must be [items, cost] or [items, cost, 'all']",
        ),
        ({"x": {"items": {}}}, "'x' must be a dict of the fields a line has no key for"),
        ({"i": None, "x": {"items": []}}, "'x.items' must map each map step to"),
    ],
)
def test_damaged_item_entries_name_the_line(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    store, _ = _items_file(tmp_path)
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    first_item = lines[2]  # after the split's line and the map's counting line
    assert "i" in first_item
    first_item.update(change)
    if first_item.get("i") is None:
        first_item.pop("i")
    store.path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(store.path).load()
    assert str(caught.value).startswith(f"{store.path}:3: not a checkpoint line (")
    assert problem in str(caught.value)


# --- SQL: the schema ---------------------------------------------------------------------------


def test_sqlite_tables_of_schema_version_1_are_refused_by_name(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    target = Target("sqlite", store, SQLiteStore(store.path), store.path)
    asyncio.run(Drive(target).run(2, in_order(2)))
    target.close()
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("UPDATE executionkit_schema SET version = 1")
    connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        SQLiteStore(store.path).load()
    assert str(caught.value) == (
        f"{store!r}: the executionkit tables have schema version [1], this version of "
        f"executionkit reads [2, 3, 4, 5] (version 1, written by an unreleased executionkit, kept "
        f"the items of unfinished maps whole in every checkpoint's header; save into a new "
        f"database)"
    )


def test_sql_item_rows_of_a_map_the_header_does_not_list_are_damage(tmp_path: Path) -> None:
    store, _ = _items_file_sqlite(tmp_path)
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("UPDATE executionkit_items SET step = 'other'")
    connection.close()
    with pytest.raises(CheckpointFormatError) as caught:
        SQLiteStore(store.path).load()
    assert "the stored items of map step 'other' belong to no map the checkpoint lists" in str(
        caught.value
    )


def _items_file_sqlite(tmp_path: Path) -> tuple[SQLiteStore, WorkflowCheckpoint]:
    store = SQLiteStore(tmp_path / "runs.db")
    target = Target("sqlite", store, SQLiteStore(store.path), store.path)
    failed = asyncio.run(Drive(target).run(4, ["k2", "k0"], fail="k1"))
    target.close()
    assert isinstance(failed, WorkflowFailed)
    return store, failed.checkpoint
