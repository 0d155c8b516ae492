"""Checkpoint format 4 through every bundled store: the ledger, in-flight attempts, trace, lineage.

Each store rebuilds a format 4 checkpoint exactly (``to_dict()`` equal, ledger
order included), writes each ledger row once (JSON Lines: the line key ``l``;
SQL: the table ``executionkit_ledger``, never the header), keeps each
checkpoint's ledger exactly in its history, and still reads what it wrote
before format 4 (a schema 2 database is upgraded in place on first write).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import sqlite3
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_conformance import AppendsNewOutputs, pairs

from executionkit import Step, TokenUsage, Workflow, WorkflowCheckpoint
from executionkit._checkpoint._ledger import OUTCOMES
from executionkit._checkpoint._value import FORMAT_VERSION
from executionkit._record._result import WorkflowFailed
from executionkit._run._step_context import current_step
from executionkit.conformance import StoreConformanceError, check_store
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
LINEAGE = {
    "parent_run_id": "parent-run",
    "parent_seq": 12,
    "overridden": ["summarize", "research/draft"],
    "rerun": ["translate"],
    "note": "fixed the summary by hand",
}
EXAMPLES = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def full() -> dict[str, Any]:
    """A current dict using every key formats 4 and 5 add, each outcome and a child's rows."""
    return {
        "version": 5,
        "run_id": "parent",
        "seq": 3,
        "step_index": 2,
        "created_at": "2026-12-01T10:00:00+00:00",
        "outputs": {"summarize": "short", "research": ["a", "b"]},
        "cost": {"input_tokens": 1307, "output_tokens": 146, "llm_calls": 9},
        "context_keys": ["document"],
        "errors": {},
        "metadata": {"job": "format 4"},
        "progress": {},
        "step_info": {
            "summarize": {"version": None, "depends_on": []},
            "research": {"version": None, "depends_on": ["summarize"], "kind": "workflow"},
        },
        "skipped": {},
        "items": {},
        "pending": {},
        "children": {},
        "ledger": [
            ["summarize", None, 1, "failed", "gpt-4o-mini", 100, 0, 1],
            ["summarize", None, 2, "timeout", "gpt-4o-mini", 200, 10, 1],
            ["summarize", None, 3, "ok", "gpt-4o-mini", 300, 40, 1],
            ["research/draft", "doc-1", 1, "unknown", None, 0, 0, 0],
            ["research/draft", "doc-1", 2, "ok", "claude-3-haiku", 400, 60, 2],
            ["research/draft", "doc-2", 1, "cancelled", "gpt-4o", 7, 0, 1],
            ["research/draft", "doc-2", 1, "late", "gpt-4o", 300, 36, 2],
            ["research", None, 1, "ok", None, 0, 0, 1],
            ["summarize", None, 1, "override", None, 0, 0, 0],
            ["chunks", "c-7", 1, "rate_limited", "gpt-4o-mini", 50, 0, 1],
        ],
        "in_flight": [["translate", None, 1], ["research/draft", "doc-3", 2]],
        "trace": TRACE,
        "lineage": copy.deepcopy(LINEAGE),
        "attempts": [
            ["summarize", None, 1, "failed", 1764583200000, 1764583201250],
            ["research/draft", "doc-1", 2, "ok", 1764583201300, 1764583209999],
            ["chunks", "c-7", 1, "rate_limited", 1764583210000, 1764583210000],
        ],
        "waits": {
            "cool_down": {"due": "2026-12-01T11:00:00+00:00", "since": "2026-12-01T10:00:00+00:00"}
        },
        "in_flight_items": {"chunks": 3, "späť/ключ": 1},
    }


# --- the stores, each over fresh storage ---------------------------------------------------


class Stores:
    """Makes each bundled store over fresh storage in ``folder`` (PostgreSQL: ``pg_uri``)."""

    def __init__(self, folder: Path, pg_uri: str | None = None) -> None:
        self.folder = folder
        self.pg_uri = pg_uri
        self.numbers = itertools.count()
        self.opened: list[Any] = []

    def make(self, kind: str) -> Any:
        number = next(self.numbers)
        store: Any
        if kind == "json-file":
            store = JsonFileStore(self.folder / f"{number}.json")
        elif kind == "json-lines":
            store = JsonLinesStore(self.folder / f"{number}.jsonl")
        elif kind == "sqlite":
            store = SQLiteStore(self.folder / f"{number}.db", history=True)
        else:
            assert self.pg_uri is not None
            store = PostgresStore(self.pg_uri, history=True)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close() if hasattr(store, "close") else None


def load(store: Any, run_id: str | None, seq: int | None = None) -> WorkflowCheckpoint | None:
    found: WorkflowCheckpoint | None
    if isinstance(store, (SQLiteStore, PostgresStore)):
        found = store.load(run_id) if seq is None else store.load(run_id, seq=seq)
    else:
        found = store.load() if seq is None else store.load(seq=seq)
    return found


def history(store: Any, run_id: str) -> list[WorkflowCheckpoint]:
    """Every checkpoint the store keeps of ``run_id``, rebuilt, oldest first."""
    if isinstance(store, (SQLiteStore, PostgresStore)):
        kept = store.history(run_id)
        by_seq = [load(store, run_id, info.seq) for info in store.checkpoints(run_id)]
        assert [c.to_dict() for c in kept] == [c.to_dict() for c in by_seq if c is not None]
        return kept
    if isinstance(store, JsonLinesStore):
        return [store.load(seq=info.seq) for info in store.checkpoints()]  # type: ignore[misc]
    return []  # a JSON file keeps the latest only


def save_all(store: Any, checkpoints: Sequence[WorkflowCheckpoint]) -> None:
    """Save each checkpoint; load() then returns it exactly; the history holds each one."""
    for checkpoint in checkpoints:
        store(checkpoint)
        loaded = load(store, checkpoint.run_id)
        assert loaded is not None
        assert loaded.to_dict() == checkpoint.to_dict()
    kept = history(store, checkpoints[-1].run_id)  # type: ignore[arg-type]
    if kept:
        assert [c.to_dict() for c in kept] == [c.to_dict() for c in checkpoints]


FILE_KINDS = ["json-file", "json-lines", "sqlite"]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    made = Stores(tmp_path)
    yield made
    made.close()


# --- the full dict through every store --------------------------------------------------


def test_a_full_dict_round_trips_exactly_through_json() -> None:
    data = full()
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))
    assert checkpoint.version == FORMAT_VERSION == 5
    assert checkpoint.to_dict() == data
    assert list(checkpoint.to_dict()) == list(data)


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_every_store_keeps_every_format_4_field(stores: Stores, kind: str) -> None:
    store = stores.make(kind)
    store(WorkflowCheckpoint.from_dict(full()))
    loaded = load(store, "parent")
    assert loaded is not None
    assert loaded.to_dict() == full()


def test_postgres_keeps_every_format_4_field(pg_uri: str, tmp_path: Path) -> None:
    made = Stores(tmp_path, pg_uri)
    try:
        store = made.make("postgres")
        store(WorkflowCheckpoint.from_dict(full()))
        loaded = load(store, "parent")
        assert loaded is not None
        assert loaded.to_dict() == full()
        assert store.load("parent", seq=3).to_dict() == full()
    finally:
        made.close()


# --- random checkpoints of one run, growing ledgers ----------------------------------------

_rows = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "research/draft", "m", "ünï/cöde"]),
        st.one_of(st.none(), st.sampled_from(["0", "1", "doc-1", "ключ"])),
        st.integers(1, 4),
        st.sampled_from(OUTCOMES),
        st.one_of(st.none(), st.sampled_from(["gpt-4o", "claude-3-haiku", "mödel ✓"])),
        st.integers(0, 10**9),
        st.integers(0, 10**6),
        st.integers(0, 50),
    ).map(list),
    max_size=4,
)
_in_flight = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "research/draft"]),
        st.one_of(st.none(), st.sampled_from(["0", "1"])),
        st.integers(1, 3),
    ).map(list),
    max_size=3,
)
_counts = st.dictionaries(st.sampled_from(["m", "chunks", "ünï"]), st.integers(1, 10**6))
_traces = st.one_of(
    st.just(TRACE),
    st.tuples(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1)).map(
        lambda ids: f"00-{ids[0]:032x}-{ids[1]:016x}-01"
    ),
)
_lineages = st.one_of(
    st.just({}),
    st.builds(
        lambda seq, note: {**copy.deepcopy(LINEAGE), "parent_seq": seq, "note": note},
        st.integers(0, 99),
        st.one_of(st.none(), st.text(min_size=1, max_size=8)),
    ),
)


@st.composite
def runs(draw: st.DrawFn) -> list[WorkflowCheckpoint]:
    """The checkpoints of one run: outputs and ledger grow; sometimes the ledger diverges.

    Each names its new outputs and new ledger rows (``new_ledger``); the trace
    appears at some checkpoint and stays (a resume that starts tracing); the
    lineage and metadata stay. A diverging checkpoint (another worker's, made
    by hand) keeps only part of the ledger stored before it.
    """
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    lineage = draw(_lineages)
    trace = draw(_traces)
    trace_from = draw(st.integers(0, 3))
    count = draw(st.integers(1, 5))
    outputs: dict[str, Any] = {}
    info: dict[str, Any] = {}
    ledger: list[list[Any]] = []
    taken = []
    for number in range(count):
        new_names = [f"s{len(outputs) + i}" for i in range(draw(st.integers(0, 2)))]
        for name in new_names:
            outputs[name] = {"n": len(outputs), "text": draw(st.text(max_size=6))}
            info[name] = {"version": None, "depends_on": list(info)[-1:]}
        if ledger and draw(st.integers(0, 4)) == 0:
            ledger = ledger[: draw(st.integers(0, len(ledger) - 1))]  # diverges
        new_rows = draw(_rows)
        ledger = [*ledger, *new_rows]
        data = {
            "version": FORMAT_VERSION,
            "run_id": run_id,
            "seq": number + 1,
            "step_index": len(outputs),
            "created_at": f"2026-12-01T10:00:{number:02d}+00:00",
            "outputs": dict(outputs),
            "cost": {"input_tokens": number, "output_tokens": 0, "llm_calls": number},
            "context_keys": ["document"],
            "errors": {},
            "metadata": {"job": "property"},
            "progress": {},
            "step_info": dict(info),
            "skipped": {},
            "items": {},
            "pending": {},
            "children": {},
            "ledger": [list(row) for row in ledger],
            "in_flight": draw(_in_flight),
            "trace": trace if number >= trace_from else None,
            "lineage": lineage,
            "attempts": [],
            "waits": {},
            "in_flight_items": draw(_counts),
        }
        read = WorkflowCheckpoint.from_dict(copy.deepcopy(data))
        new = read.ledger[len(read.ledger) - len(new_rows) :]
        taken.append(
            WorkflowCheckpoint(
                **{
                    name: getattr(read, name)
                    for name in WorkflowCheckpoint.__dataclass_fields__
                    if name not in {"new_outputs", "new_items", "new_ledger"}
                },
                new_outputs=tuple(new_names),
                new_ledger=new,
            )
        )
    return taken


@pytest.mark.parametrize("kind", FILE_KINDS)
@EXAMPLES
@given(checkpoints=runs())
def test_random_runs_round_trip_through_every_store(
    kind: str, checkpoints: list[WorkflowCheckpoint]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        made = Stores(Path(folder))
        try:
            save_all(made.make(kind), checkpoints)
        finally:
            made.close()


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(checkpoints=runs())
def test_random_runs_round_trip_through_postgres(
    pg_uri: str, tmp_path: Path, checkpoints: list[WorkflowCheckpoint]
) -> None:
    made = Stores(tmp_path, pg_uri)  # each example its own run_id in the one database
    try:
        save_all(made.make("postgres"), checkpoints)
    finally:
        made.close()


# --- real runs: each row written once, by the run's fast path -------------------------------


def _spending_run(plan: Sequence[tuple[int, int, str | None]]) -> list[WorkflowCheckpoint]:
    """A chain whose step i reports usage ``reports`` times and fails ``fails`` times first."""
    tries: dict[int, int] = {}

    def make(number: int, reports: int, fails: int, model: str | None) -> Step:
        def run(_ctx: Any) -> dict[str, int]:
            attempt = tries[number] = tries.get(number, 0) + 1
            for report in range(reports):
                current_step().add_usage(TokenUsage(number + report, 1, 1), model=model)
            if attempt <= fails:
                msg = f"step {number} failed"
                raise RuntimeError(msg)
            return {"step": number}

        depends_on = (f"s{number - 1}",) if number else ()
        return Step(f"s{number}", run, depends_on=depends_on, retries=2, retry_delay=0)

    steps = [make(number, *entry) for number, entry in enumerate(plan)]
    taken: list[WorkflowCheckpoint] = []
    with contextlib.suppress(WorkflowFailed):
        Workflow(steps).run_sync(checkpoint_fn=taken.append, run_id="spent", metadata={"m": 1})
    return taken


_plans = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.sampled_from([None, "gpt-4o", "mödel"])),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("kind", FILE_KINDS)
@EXAMPLES
@given(plan=_plans)
def test_a_run_s_ledger_round_trips_and_each_row_is_written_once(
    kind: str, plan: list[tuple[int, int, str | None]]
) -> None:
    checkpoints = _spending_run(plan)
    with tempfile.TemporaryDirectory() as folder:
        made = Stores(Path(folder))
        try:
            store = made.make(kind)
            save_all(store, checkpoints)
            rows = len(checkpoints[-1].ledger)
            if kind == "json-lines":
                lines = [json.loads(line) for line in store.path.read_text().splitlines()]
                assert sum(len(line.get("l", [])) for line in lines) == rows
                assert all("lk" not in line for line in lines)
            elif kind == "sqlite":
                with contextlib.closing(sqlite3.connect(store.path)) as connection:
                    stored = connection.execute("SELECT COUNT(*) FROM executionkit_ledger")
                    assert stored.fetchone() == (rows,)
                    headers = connection.execute("SELECT header FROM executionkit_headers")
                    counts = [json.loads(text)["ledger"] for (text,) in headers]
                assert counts == [len(c.ledger) for c in checkpoints]
        finally:
            made.close()


def test_json_lines_writes_the_ledger_rows_under_l_and_the_run_s_fields_in_run(
    tmp_path: Path,
) -> None:
    store = JsonLinesStore(tmp_path / "run.jsonl")
    first, second = (WorkflowCheckpoint.from_dict(data) for data in _two_checkpoints())
    store(first)
    store(second)
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert lines[0]["run"]["trace"] == TRACE
    assert lines[0]["run"]["lineage"] == LINEAGE
    assert lines[0]["l"] == full()["ledger"][:3]
    assert lines[0]["f"] == [["research", None, 1]]
    assert lines[0]["a"] == full()["attempts"][:1]  # format 5's attempts: under "a"
    assert lines[0]["x"] == {"waits": full()["waits"]}  # no map item in flight: left out
    assert lines[1]["x"] == {
        "waits": full()["waits"],
        "in_flight_items": full()["in_flight_items"],
    }
    assert "run" not in lines[1]  # the trace and lineage did not change
    assert lines[1]["l"] == full()["ledger"][3:]
    assert lines[1]["a"] == full()["attempts"][1:]  # each entry written once
    assert lines[1]["f"] == full()["in_flight"]
    assert "lk" not in lines[1]
    assert "ak" not in lines[1]
    assert JsonLinesStore(store.path).load().to_dict() == second.to_dict()  # type: ignore[union-attr]
    assert store.load(seq=2).to_dict() == first.to_dict()  # type: ignore[union-attr]


def _two_checkpoints() -> list[dict[str, Any]]:
    """`full()`, and the checkpoint before it (seq 2): three rows, another attempt in flight.

    It holds the first of ``full()``'s attempts, and no map item in flight.
    """
    before = full()
    before.update(
        seq=2,
        step_index=1,
        outputs={"summarize": "short"},
        ledger=before["ledger"][:3],
        in_flight=[["research", None, 1]],
        attempts=before["attempts"][:1],
        in_flight_items={},
    )
    before["step_info"] = {"summarize": before["step_info"]["summarize"]}
    return [before, full()]


@pytest.mark.parametrize("kind", ["json-lines", "sqlite"])
def test_a_ledger_that_does_not_extend_the_stored_one_is_rebuilt_exactly(
    stores: Stores, kind: str
) -> None:
    """Another worker's seq 3: some stored rows no longer count; the history keeps them."""
    store = stores.make(kind)
    first, second = (WorkflowCheckpoint.from_dict(data) for data in _two_checkpoints())
    third = full()
    third["seq"] = 4
    third["ledger"] = [*third["ledger"][:2], ["summarize", None, 3, "failed", "x", 1, 1, 1]]
    save_all(store, [first, second, WorkflowCheckpoint.from_dict(third)])
    if kind == "json-lines":
        last = json.loads(store.path.read_text().splitlines()[-1])
        assert last["lk"] == 2
        assert last["l"] == [["summarize", None, 3, "failed", "x", 1, 1, 1]]


def test_a_store_without_history_forgets_the_rows_no_checkpoint_holds(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    first, second = (WorkflowCheckpoint.from_dict(data) for data in _two_checkpoints())
    third = full()
    third["seq"] = 4
    third["ledger"] = third["ledger"][:1]
    for data in (first, second, WorkflowCheckpoint.from_dict(third)):
        store(data)
    assert store.load("parent").to_dict() == third  # type: ignore[union-attr]
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        rows = connection.execute("SELECT COUNT(*) FROM executionkit_ledger").fetchone()
    assert rows == (1,)
    assert store.delete("parent")
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        rows = connection.execute("SELECT COUNT(*) FROM executionkit_ledger").fetchone()
    assert rows == (0,)


def test_the_header_holds_the_number_of_ledger_rows_not_the_rows(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store(WorkflowCheckpoint.from_dict(full()))
    with contextlib.closing(sqlite3.connect(store.path)) as connection:
        (header,) = connection.execute("SELECT header FROM executionkit_headers").fetchone()
        ledger = connection.execute(
            "SELECT step, item, attempt, outcome, model, input_tokens, output_tokens, llm_calls "
            "FROM executionkit_ledger ORDER BY ord"
        ).fetchall()
    stored = json.loads(header)
    assert stored["ledger"] == len(full()["ledger"])
    assert [stored[key] for key in ("in_flight", "trace", "lineage")] == [
        full()["in_flight"],
        TRACE,
        LINEAGE,
    ]
    assert [list(row) for row in ledger] == full()["ledger"]


# --- what the stores wrote before format 4 ------------------------------------------------


def test_json_lines_written_before_format_4_still_load_and_continue(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    run = {"run_id": "old", "context_keys": [], "metadata": {}, "keep": ["a"]}
    path.write_text(
        json.dumps({"s": 1, "n": {"a": [1, []]}, "c": [5, 2, 1], "t": None, "run": run}) + "\n"
    )
    loaded = JsonLinesStore(path).load()
    assert loaded is not None
    assert loaded.version == FORMAT_VERSION
    assert (loaded.ledger, loaded.in_flight, loaded.trace, dict(loaded.lineage)) == (
        (),
        (),
        None,
        {},
    )
    data = loaded.to_dict()
    data.update(seq=2, ledger=[["b", None, 1, "failed", None, 3, 0, 1]], trace=TRACE)
    later = WorkflowCheckpoint.from_dict(data)
    store = JsonLinesStore(path)
    store(later)
    assert JsonLinesStore(path).load().to_dict() == data  # type: ignore[union-attr]
    assert json.loads(path.read_text().splitlines()[-1])["run"]["trace"] == TRACE


def _as_schema_2(path: Path) -> None:
    """Make the database at ``path`` look as a schema 2 store left it: no ledger table."""
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("DROP TABLE executionkit_ledger")
        connection.execute("UPDATE executionkit_schema SET version = 2")


def _format_3(seq: int) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        1, {"a": 1}, TokenUsage(5, 2, 1), version=3, run_id="parent", seq=seq
    )


def test_a_schema_2_database_is_read_and_upgraded_on_first_write(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    old = _format_3(1)
    SQLiteStore(path, history=True)(old)
    _as_schema_2(path)
    store = SQLiteStore(path, history=True)
    assert store.load("parent") == old  # read as it is: no ledger table needed
    assert store.history("parent") == [old]
    new = full()  # seq 3 of the same run, resumed and written in format 4
    store(WorkflowCheckpoint.from_dict(new))
    with contextlib.closing(sqlite3.connect(path)) as connection:
        version = connection.execute("SELECT version FROM executionkit_schema").fetchall()
    assert version == [(5,)]  # upgraded to the current schema
    assert store.load("parent").to_dict() == new  # type: ignore[union-attr]
    assert [c.to_dict() for c in store.history("parent")] == [old.to_dict(), new]
    assert SQLiteStore(path).load("parent", seq=1) == old


def test_deleting_from_a_schema_2_database_upgrades_it_first(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    SQLiteStore(path)(_format_3(1))
    _as_schema_2(path)
    assert SQLiteStore(path).delete("parent")
    with contextlib.closing(sqlite3.connect(path)) as connection:
        version = connection.execute("SELECT version FROM executionkit_schema").fetchall()
    assert version == [(5,)]  # upgraded to the current schema


def test_a_postgres_schema_2_database_is_upgraded_on_first_write(pg_uri: str) -> None:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need it

    old = _format_3(1)
    store = PostgresStore(pg_uri, history=True)
    try:
        store(old)
    finally:
        store.close()
    with psycopg.connect(pg_uri) as connection:
        connection.execute("DROP TABLE executionkit_ledger")
        connection.execute("UPDATE executionkit_schema SET version = 2")
    store = PostgresStore(pg_uri, history=True)
    try:
        assert store.load("parent") == old
        store(WorkflowCheckpoint.from_dict(full()))
        assert store.load("parent").to_dict() == full()  # type: ignore[union-attr]
        assert [c.to_dict() for c in store.history("parent")] == [old.to_dict(), full()]
    finally:
        store.close()
    with psycopg.connect(pg_uri) as connection:
        version = connection.execute("SELECT version FROM executionkit_schema").fetchall()
    assert version == [(5,)]  # upgraded to the current schema


# --- the conformance kit -------------------------------------------------------------------


class CopiesTheLedger(AppendsNewOutputs):
    """Appends only the new outputs, but copies the whole ledger on every save."""

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        self.rows = [row.to_list() for row in checkpoint.ledger]


def test_the_kit_catches_a_store_that_reads_every_ledger_row_each_save() -> None:
    check_store(pairs(AppendsNewOutputs), incremental=True)
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(CopiesTheLedger), incremental=True)
    assert caught.value.property == "constant cost"
    message = str(caught.value)
    assert "the store read the ledger rows of earlier checkpoints" in message
    assert message.endswith("each checkpoint should write only its new_ledger")


def test_the_kit_s_samples_hold_every_format_4_field() -> None:
    from executionkit.conformance._samples import TRACE as KIT_TRACE  # noqa: PLC0415
    from executionkit.conformance._samples import Samples  # noqa: PLC0415

    samples = asyncio.run(Samples.build())
    last = samples.spending[-1]
    outcomes = {row.outcome for row in last.ledger}
    assert {"ok", "failed", "timeout", "cancelled", "unknown"} <= outcomes
    assert any(row.model for row in last.ledger)
    assert any(row.step == "research/draft" for row in last.ledger)
    assert last.in_flight
    assert last.trace == KIT_TRACE == TRACE
    assert last.lineage["parent_seq"] == 12
    written = [len(c.new_ledger) for c in samples.spending]
    assert sum(written) == len(last.ledger)


def test_json_lines_writes_the_change_of_a_long_in_flight_list(tmp_path: Path) -> None:
    """A wide map's attempts: each line says which ended and which started, not all again."""
    store = JsonLinesStore(tmp_path / "run.jsonl")
    attempts = [["m", f"k{number}", 1] for number in range(6)]
    flights = [attempts[:4], attempts[1:5], attempts[1:5], [attempts[4], attempts[2]], []]
    checkpoints = []
    for seq, flight in enumerate(flights, start=1):
        data = full()
        data.update(seq=seq, in_flight=flight)
        checkpoints.append(WorkflowCheckpoint.from_dict(data))
    save_all(store, checkpoints)
    written = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert [{key: line[key] for key in ("f", "fd") if key in line} for line in written] == [
        {"f": attempts[:4]},
        {"fd": [[attempts[0]], [attempts[4]]]},  # k0 ended, k4 started
        {"fd": [[], []]},  # the same attempts
        {"f": [attempts[4], attempts[2]]},  # another order: all of them, shorter anyway
        {},
    ]
