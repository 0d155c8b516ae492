"""Checkpoint format 5 through every bundled store: attempts, waits, map items in flight, code.

Each store rebuilds a format 5 checkpoint exactly (``to_dict()`` equal) and
writes each ``attempts`` entry once, as it writes the ledger's rows (JSON
Lines: the line key ``a``, with ``ak`` when a checkpoint does not extend the
entries stored; SQL: the table ``executionkit_attempts`` of schema 5, the header
holding their number). ``waits`` and ``in_flight_items`` (a few entries each)
ride whole: under ``x`` in a line, in the SQL header. The step info keys
``code`` and ``answered_by`` ride with their step, wherever its info goes. A
database of schema 4 (or 2, 3) is read as it is and upgraded on first write.
"""

from __future__ import annotations

import contextlib
import copy
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
from test_format_4_stores import EXAMPLES, FILE_KINDS, Stores, full, history, load, save_all

from executionkit import CheckpointFormatError, Step, TokenUsage, Workflow, WorkflowCheckpoint
from executionkit._checkpoint._step_info import LATER_INFO_KEYS
from executionkit._checkpoint._times import ATTEMPT_OUTCOMES
from executionkit._checkpoint._value import FORMAT_VERSION
from executionkit.conformance import StoreConformanceError, check_store
from executionkit.conformance._samples import CHAIN_LENGTH, CountedAttempts, count_attempts
from executionkit.stores import JsonLinesStore, PostgresStore, SQLiteStore
from executionkit.stores._lines_format import pack_info, unpack_info

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

CODE = "0123456789abcdef"
ATTEMPTS = "SELECT step, item, attempt, outcome, started, ended FROM executionkit_attempts"


def full5() -> dict[str, Any]:
    """`full()` with every step info key format 5 adds, on a recorded step and on another.

    ``approve`` is an ask step answered at its deadline (``answered_by``), with a
    code fingerprint; ``draft`` saved progress, so its info rides apart from the
    outputs (a line's ``progress_info``, the SQL header).
    """
    data = full()
    data["step_index"] = 3
    data["outputs"]["approve"] = {"ok": True}
    data["progress"] = {"draft": {"done": 2}}
    data["step_info"]["summarize"]["code"] = CODE
    data["step_info"]["approve"] = {
        "version": "v1",
        "depends_on": ["summarize"],
        "kind": "ask",
        "code": CODE[::-1],
        "answered_by": "deadline",
    }
    data["step_info"]["draft"] = {"version": None, "depends_on": [], "code": "feedc0de"}
    return data


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    made = Stores(tmp_path)
    yield made
    made.close()


def _lines(store: JsonLinesStore) -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.path.read_text().splitlines()]


def _sqlite(path: Path, sql: str, *params: object) -> list[Any]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute(sql, params).fetchall()


# --- the full dict through every store ----------------------------------------------------


def test_a_full_format_5_dict_round_trips_exactly_through_json() -> None:
    data = full5()
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))
    assert checkpoint.version == FORMAT_VERSION == 5
    assert checkpoint.to_dict() == data
    assert checkpoint.step_info["approve"]["answered_by"] == "deadline"


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_every_store_keeps_every_format_5_field(stores: Stores, kind: str) -> None:
    store = stores.make(kind)
    store(WorkflowCheckpoint.from_dict(full5()))
    loaded = load(store, "parent")
    assert loaded is not None
    assert loaded.to_dict() == full5()
    if kind != "json-file":
        assert load(store, "parent", seq=3).to_dict() == full5()  # type: ignore[union-attr]


def test_postgres_keeps_every_format_5_field(pg_uri: str, tmp_path: Path) -> None:
    made = Stores(tmp_path, pg_uri)
    try:
        store = made.make("postgres")
        store(WorkflowCheckpoint.from_dict(full5()))
        assert store.load("parent").to_dict() == full5()
        assert store.load("parent", seq=3).to_dict() == full5()
        assert [c.to_dict() for c in store.history("parent")] == [full5()]
    finally:
        made.close()


# --- step info: code and answered_by ride with their step ---------------------------------


def test_json_lines_packs_code_and_answered_by_with_the_step(stores: Stores) -> None:
    store = stores.make("json-lines")
    store(WorkflowCheckpoint.from_dict(full5()))
    (line,) = _lines(store)
    assert line["n"]["summarize"] == ["short", {"v": None, "d": [], "c": CODE}]
    assert line["n"]["approve"] == [
        {"ok": True},
        {"v": "v1", "d": ["summarize"], "k": "ask", "c": CODE[::-1], "a": "deadline"},
    ]
    assert line["n"]["research"][1] == {"v": None, "d": ["summarize"], "k": "workflow"}
    assert line["progress_info"] == {"draft": {"v": None, "d": [], "c": "feedc0de"}}


@pytest.mark.parametrize("key", LATER_INFO_KEYS)
def test_every_later_step_info_key_survives_packing(key: str) -> None:
    """A key format 5 (or a later one) adds to step info entries is never dropped by a line."""
    info: dict[str, Any] = {"version": None, "depends_on": ["a"], "kind": "ask", key: "deadline"}
    assert unpack_info(json.loads(json.dumps(pack_info(info)))) == info
    plain: dict[str, Any] = {"version": None, "depends_on": [], key: "abc"}
    assert unpack_info(pack_info(plain)) == plain


def test_sql_output_rows_carry_code_and_answered_by(stores: Stores) -> None:
    store = stores.make("sqlite")
    store(WorkflowCheckpoint.from_dict(full5()))
    rows = dict(_sqlite(store.path, "SELECT name, value FROM executionkit_outputs"))
    assert json.loads(rows["approve"]) == [{"ok": True}, full5()["step_info"]["approve"]]
    assert json.loads(rows["summarize"])[1] == {"version": None, "depends_on": [], "code": CODE}
    ((header,),) = _sqlite(store.path, "SELECT header FROM executionkit_headers")
    assert json.loads(header)["step_info"] == {"draft": full5()["step_info"]["draft"]}


# --- each attempts entry written once ------------------------------------------------------


def _growing(count: int, run_id: str = "parent") -> list[WorkflowCheckpoint]:
    """``count`` checkpoints of one run, each ending one attempt more, naming it new."""
    base = full5()
    taken = []
    for number in range(count):
        data = copy.deepcopy(base)
        data["run_id"] = run_id
        data["seq"] = number + 1
        data["attempts"] = [
            ["s", f"k{n}" if n % 2 else None, 1 + n % 3, ATTEMPT_OUTCOMES[n % 5], n, n + 7]
            for n in range(number + 1)
        ]
        data["waits"] = {} if number % 3 else base["waits"]
        data["in_flight_items"] = {"chunks": number + 1}
        read = WorkflowCheckpoint.from_dict(data)
        taken.append(_with_new(read, new_attempts=read.attempts[-1:]))
    return taken


def _with_new(checkpoint: WorkflowCheckpoint, **new: Any) -> WorkflowCheckpoint:
    """``checkpoint`` with the non-dict fields ``new`` (``new_attempts``, ``new_outputs``)."""
    fields = {
        name: getattr(checkpoint, name)
        for name in WorkflowCheckpoint.__dataclass_fields__
        if not name.startswith("new_")
    }
    return WorkflowCheckpoint(**fields, **new)


def test_json_lines_writes_each_attempt_once_under_a(stores: Stores) -> None:
    store = stores.make("json-lines")
    taken = _growing(5)
    save_all(store, taken)
    lines = _lines(store)
    assert [line["a"] for line in lines] == [[list(c.attempts[-1])] for c in taken]
    assert all("ak" not in line for line in lines)
    # waits and in_flight_items are small: whole, under "x", only when not empty.
    assert [line["x"] for line in lines] == [
        {**({"waits": c.to_dict()["waits"]} if c.waits else {}), "in_flight_items": {"chunks": n}}
        for n, c in enumerate(taken, start=1)
    ]


@pytest.mark.parametrize("history_kept", [True, False], ids=["history", "latest-only"])
def test_sqlite_writes_each_attempt_once_and_the_header_counts_them(
    tmp_path: Path, history_kept: bool
) -> None:
    store = SQLiteStore(tmp_path / "runs.db", history=history_kept)
    taken = _growing(5)
    for checkpoint in taken:
        store(checkpoint)
        assert store.load("parent") == checkpoint
    assert [list(row) for row in _sqlite(store.path, f"{ATTEMPTS} ORDER BY ord")] == [
        list(entry) for entry in taken[-1].attempts
    ]
    assert _sqlite(store.path, "SELECT DISTINCT added FROM executionkit_attempts ORDER BY 1") == [
        (c.seq,) for c in taken
    ]
    headers = [
        json.loads(text)
        for (text,) in _sqlite(store.path, "SELECT header FROM executionkit_headers ORDER BY seq")
    ]
    kept = taken if history_kept else taken[-1:]
    assert [header["attempts"] for header in headers] == [len(c.attempts) for c in kept]
    assert [header["waits"] for header in headers] == [c.to_dict()["waits"] for c in kept]
    assert [header["in_flight_items"] for header in headers] == [
        dict(c.in_flight_items) for c in kept
    ]
    if history_kept:
        assert store.history("parent") == taken
    store.close()


# --- a run's checkpoints: the fast path writes only the new entries ------------------------


def _chain_run(length: int, run_id: str) -> tuple[WorkflowCheckpoint, ...]:
    """A chain's checkpoints, their ``attempts`` read from a `CountedAttempts` (as the kit's)."""

    def make(number: int) -> Step:
        def run(_ctx: Any) -> int:
            from executionkit import current_step  # noqa: PLC0415 - the step's own context

            current_step().add_usage(TokenUsage(1 + number, 1, 1), model="m")
            return number

        depends_on = (f"s{number - 1}",) if number else ()
        return Step(f"s{number}", run, depends_on=depends_on)

    taken: list[WorkflowCheckpoint] = []
    Workflow([make(n) for n in range(length)]).run_sync(checkpoint_fn=taken.append, run_id=run_id)
    chain = tuple(taken)
    count_attempts(chain)
    return chain


def _save_counting(store: Any, chain: Sequence[WorkflowCheckpoint]) -> list[int]:
    """Save each checkpoint; for each, how many attempts entries the save read.

    Its ``new_attempts`` are read (and kept by the checkpoint) before counting:
    a store that reads only those reads none, one that reads ``attempts`` all.
    """
    read = []
    for checkpoint in chain:
        assert checkpoint.new_attempts is not None
        CountedAttempts.touched = 0
        store(checkpoint)
        read.append(CountedAttempts.touched)
    return read


@pytest.mark.parametrize("kind", ["json-lines", "sqlite"])
def test_a_run_s_next_checkpoint_writes_only_its_new_attempts(stores: Stores, kind: str) -> None:
    chain = _chain_run(30, "parent")
    store = stores.make(kind)
    read = _save_counting(store, chain)
    assert read[1:] == [0] * (len(chain) - 1)  # none of the entries stored before
    last = chain[-1]
    assert len(last.attempts) == 30
    assert load(store, "parent").to_dict() == last.to_dict()  # type: ignore[union-attr]
    if kind == "json-lines":
        assert sum(len(line.get("a", [])) for line in _lines(store)) == len(last.attempts)
    else:
        assert len(_sqlite(store.path, ATTEMPTS)) == len(last.attempts)
    assert [c.to_dict() for c in history(store, "parent")] == [c.to_dict() for c in chain]


@pytest.mark.parametrize("history_kept", [True, False], ids=["history", "latest-only"])
def test_postgres_writes_only_the_new_attempts_in_its_one_statement(
    pg_uri: str, history_kept: bool
) -> None:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need it

    chain = _chain_run(12, "parent")
    store = PostgresStore(pg_uri, history=history_kept)
    try:
        read = _save_counting(store, chain)
        assert read[1:] == [0] * (len(chain) - 1)
        assert store.load("parent") == chain[-1]
        if history_kept:
            assert store.history("parent") == list(chain)
    finally:
        store.close()
    with psycopg.connect(pg_uri) as connection:
        stored = connection.execute(f"{ATTEMPTS} ORDER BY ord").fetchall()
    assert [tuple(row) for row in stored] == list(chain[-1].attempts)


# --- random runs: growing attempts, sometimes diverging ------------------------------------

_entries = st.lists(
    st.tuples(
        st.sampled_from(["a", "research/draft", "ünï/cöde"]),
        st.one_of(st.none(), st.sampled_from(["0", "doc-1", "ключ"])),
        st.integers(1, 4),
        st.sampled_from(ATTEMPT_OUTCOMES),
        st.integers(0, 2 * 10**12),
        st.integers(0, 10**6),
    ).map(lambda e: [e[0], e[1], e[2], e[3], e[4], e[4] + e[5]]),
    max_size=4,
)
_waits = st.dictionaries(
    st.sampled_from(["cool_down", "wait ✓"]),
    st.sampled_from(
        [
            {"due": "2026-12-01T11:00:00+00:00", "since": "2026-12-01T10:00:00+00:00"},
            {"due": "2027-01-01T00:00:00.250000+00:00", "since": "2026-12-31T23:59:59+00:00"},
        ]
    ),
    max_size=2,
)
_counts = st.dictionaries(st.sampled_from(["m", "chunks", "ünï"]), st.integers(1, 10**6))


@st.composite
def runs(draw: st.DrawFn) -> list[WorkflowCheckpoint]:
    """The checkpoints of one run: outputs and attempts grow; sometimes the attempts diverge.

    Each names its new outputs and new entries (``new_attempts``); a diverging
    checkpoint (another worker's, one made by hand) keeps only part of the
    attempts stored before it. Some steps have a code fingerprint.
    """
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    outputs: dict[str, Any] = {}
    info: dict[str, Any] = {}
    attempts: list[list[Any]] = []
    taken = []
    for number in range(draw(st.integers(1, 5))):
        new_names = [f"s{len(outputs) + i}" for i in range(draw(st.integers(0, 2)))]
        for name in new_names:
            outputs[name] = {"n": len(outputs), "text": draw(st.text(max_size=6))}
            info[name] = {"version": None, "depends_on": list(info)[-1:]}
            if draw(st.booleans()):
                info[name]["code"] = f"{len(outputs):08x}"
        if attempts and draw(st.integers(0, 4)) == 0:
            attempts = attempts[: draw(st.integers(0, len(attempts) - 1))]  # diverges
        new_entries = draw(_entries)
        attempts = [*attempts, *new_entries]
        data = full()
        data.update(
            run_id=run_id,
            seq=number + 1,
            step_index=len(outputs),
            outputs=dict(outputs),
            step_info=copy.deepcopy(info),
            ledger=[],
            in_flight=[],
            attempts=[list(entry) for entry in attempts],
            waits=draw(_waits),
            in_flight_items=draw(_counts),
        )
        read = WorkflowCheckpoint.from_dict(copy.deepcopy(data))
        new = read.attempts[len(read.attempts) - len(new_entries) :]
        taken.append(_with_new(read, new_outputs=tuple(new_names), new_attempts=new))
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


# --- attempts that do not extend the stored ones ------------------------------------------


def _diverging() -> list[WorkflowCheckpoint]:
    """Seq 1 to 3 of `_growing`, then another worker's seq 4 keeping only the first entry."""
    taken = _growing(3)
    data = taken[-1].to_dict()
    data["seq"] = 4
    data["attempts"] = [data["attempts"][0], ["other", None, 1, "ok", 100, 200]]
    return [*taken, WorkflowCheckpoint.from_dict(data)]


@pytest.mark.parametrize("kind", ["json-lines", "sqlite"])
def test_attempts_that_do_not_extend_the_stored_ones_are_rebuilt_exactly(
    stores: Stores, kind: str
) -> None:
    """The history keeps the entries the diverging checkpoint dropped, for the ones before."""
    store = stores.make(kind)
    save_all(store, _diverging())
    if kind == "json-lines":
        last = _lines(store)[-1]
        assert last["ak"] == 1
        assert last["a"] == [["other", None, 1, "ok", 100, 200]]
    else:
        dropped = _sqlite(
            store.path, "SELECT added, dropped FROM executionkit_attempts ORDER BY ord"
        )
        assert dropped == [(1, None), (2, 4), (3, 4), (4, None)]


def test_postgres_rebuilds_attempts_that_do_not_extend_the_stored_ones(
    pg_uri: str, tmp_path: Path
) -> None:
    made = Stores(tmp_path, pg_uri)
    try:
        save_all(made.make("postgres"), _diverging())
    finally:
        made.close()


def test_a_store_without_history_forgets_the_attempts_no_checkpoint_holds(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    for checkpoint in _diverging():
        store(checkpoint)
    assert store.load("parent") == _diverging()[-1]
    assert _sqlite(store.path, ATTEMPTS) == [tuple(e) for e in _diverging()[-1].attempts]
    assert store.delete("parent")
    assert _sqlite(store.path, ATTEMPTS) == []


def test_prune_forgets_the_attempts_no_kept_checkpoint_holds(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db", history=True)
    for checkpoint in _diverging():
        store(checkpoint)
    assert len(_sqlite(store.path, ATTEMPTS)) == 4  # seq 2 and 3 still hold the two dropped
    assert store.prune(keep_last=1) == 3
    assert _sqlite(store.path, ATTEMPTS) == [tuple(e) for e in _diverging()[-1].attempts]
    assert store.history("parent") == [_diverging()[-1]]


def test_a_line_starting_another_run_starts_the_attempts_over(stores: Stores) -> None:
    store = stores.make("json-lines")
    store(_growing(3, run_id="first")[-1])
    other = _growing(2, run_id="second")
    save_all(store, other)
    assert _lines(store)[1]["a"] == [list(entry) for entry in other[0].attempts]
    assert store.load().attempts == other[-1].attempts


def test_compacting_a_json_lines_file_writes_every_attempt_once(stores: Stores) -> None:
    store = stores.make("json-lines")
    taken = _diverging()
    for checkpoint in taken:
        store(checkpoint)
    store.compact()
    (line,) = _lines(store)
    assert line["a"] == [list(entry) for entry in taken[-1].attempts]
    assert "ak" not in line
    assert JsonLinesStore(store.path).load() == taken[-1]


# --- damage is named ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"a": {"x": 1}}, "'a' must be a list of attempts [step, item, attempt, outcome, "),
        ({"a": [7]}, "'a' must be a list of attempts [step, item, attempt, outcome, "),
        ({"ak": 5}, "'ak' must count attempts the lines before hold (0 to 1)"),
        ({"ak": "1"}, "'ak' must count attempts the lines before hold (0 to 1)"),
        ({"x": {"attempts": []}}, "'x' must be a dict of the fields a line has no key for"),
    ],
)
def test_damaged_attempts_in_a_line_are_named(
    stores: Stores, change: dict[str, Any], detail: str
) -> None:
    store = stores.make("json-lines")
    for checkpoint in _growing(2):
        store(checkpoint)
    lines = _lines(store)
    lines[1].update(change)
    store.path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(store.path).load()
    assert f"{store.path}:2: not a checkpoint line ({detail}" in str(caught.value)


def test_a_header_counting_attempts_the_table_lacks_is_damage(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    store(_growing(3)[-1])
    with contextlib.closing(sqlite3.connect(store.path)) as connection, connection:
        connection.execute(
            "DELETE FROM executionkit_attempts "
            "WHERE ord = (SELECT MAX(ord) FROM executionkit_attempts)"
        )
    with pytest.raises(CheckpointFormatError) as caught:
        SQLiteStore(store.path).load("parent")
    assert str(caught.value) == (
        f"{store!r}, run 'parent': checkpoint seq=3 counts 3 attempts, 2 are stored"
    )


# --- a database of schema 4 -----------------------------------------------------------------


def _as_schema_4(path: Path) -> None:
    """Make the database at ``path`` what a schema 4 store would have written.

    No attempts table; each format 5 header holds its checkpoint's attempts whole
    (schema 4 kept every field but outputs, items and ledger in the header).
    """
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        headers = connection.execute("SELECT run_id, seq, header FROM executionkit_headers")
        for run_id, seq, text in headers.fetchall():
            header = json.loads(text)
            if "attempts" in header:
                rows = connection.execute(
                    f"{ATTEMPTS} WHERE run_id = ? AND added <= ? "
                    "AND (dropped IS NULL OR dropped > ?) ORDER BY ord",
                    (run_id, seq, seq),
                )
                header["attempts"] = [list(row) for row in rows]
                connection.execute(
                    "UPDATE executionkit_headers SET header = ? WHERE run_id = ? AND seq = ?",
                    (json.dumps(header), run_id, seq),
                )
        connection.execute("DROP TABLE executionkit_attempts")
        connection.execute("UPDATE executionkit_schema SET version = 4")


def _format_4(seq: int) -> WorkflowCheckpoint:
    data = full()
    data.update(version=4, seq=seq)
    for key in ("attempts", "waits", "in_flight_items"):
        del data[key]
    data["ledger"] = [row for row in data["ledger"] if row[3] != "rate_limited"]
    return WorkflowCheckpoint.from_dict(data)


def _upgrade_run() -> tuple[list[WorkflowCheckpoint], list[WorkflowCheckpoint]]:
    """What a schema 4 database holds (seq 1 of format 4, seq 2 and 3 of format 5), and more."""
    growing = _growing(5)
    return [_format_4(1), *growing[1:3]], growing[3:]


def test_a_schema_4_database_is_read_and_upgraded_on_first_write(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    old, new = _upgrade_run()
    writer = SQLiteStore(path, history=True)
    for checkpoint in old:
        writer(checkpoint)
    writer.close()
    _as_schema_4(path)
    ((text,),) = _sqlite(path, "SELECT header FROM executionkit_headers WHERE seq = 3")
    assert json.loads(text)["attempts"] == [list(entry) for entry in old[-1].attempts]
    store = SQLiteStore(path, history=True)
    assert store.load("parent") == old[-1]  # read as it is: the attempts in the header
    assert store.history("parent") == old
    assert _sqlite(path, "SELECT version FROM executionkit_schema") == [(4,)]  # reading: as is
    for checkpoint in new:
        store(checkpoint)
    assert _sqlite(path, "SELECT version FROM executionkit_schema") == [(5,)]
    assert store.load("parent") == new[-1]
    assert store.history("parent") == [*old, *new]
    # The first write after the upgrade wrote every entry (none was in the table), then one.
    assert _sqlite(path, "SELECT added, COUNT(*) FROM executionkit_attempts GROUP BY added") == [
        (4, 4),
        (5, 1),
    ]
    assert SQLiteStore(path).load("parent", seq=2) == old[1]
    store.close()


def test_deleting_from_a_schema_4_database_upgrades_it_first(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    SQLiteStore(path)(_growing(2)[-1])
    _as_schema_4(path)
    assert SQLiteStore(path).delete("parent")
    assert _sqlite(path, "SELECT version FROM executionkit_schema") == [(5,)]
    assert _sqlite(path, ATTEMPTS) == []


def test_a_postgres_schema_4_database_is_upgraded_on_first_write(pg_uri: str) -> None:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need it

    old, new = _upgrade_run()
    store = PostgresStore(pg_uri, history=True)
    try:
        for checkpoint in old:
            store(checkpoint)
    finally:
        store.close()
    with psycopg.connect(pg_uri) as connection:
        for seq, checkpoint in ((2, old[1]), (3, old[2])):
            found = connection.execute(
                "SELECT header FROM executionkit_headers WHERE seq = %s", (seq,)
            ).fetchone()
            assert found is not None
            header = json.loads(found[0])
            header["attempts"] = [list(entry) for entry in checkpoint.attempts]
            connection.execute(
                "UPDATE executionkit_headers SET header = %s WHERE seq = %s",
                (json.dumps(header), seq),
            )
        connection.execute("DROP TABLE executionkit_attempts")
        connection.execute("UPDATE executionkit_schema SET version = 4")
    store = PostgresStore(pg_uri, history=True)
    try:
        assert store.history("parent") == old
        for checkpoint in new:
            store(checkpoint)
        assert store.load("parent") == new[-1]
        assert store.history("parent") == [*old, *new]
    finally:
        store.close()
    with psycopg.connect(pg_uri) as connection:
        version = connection.execute("SELECT version FROM executionkit_schema").fetchall()
        stored = connection.execute(f"{ATTEMPTS} ORDER BY ord").fetchall()
    assert version == [(5,)]
    assert [tuple(row) for row in stored] == list(new[-1].attempts)


# --- the conformance kit -------------------------------------------------------------------


class CopiesTheAttempts(AppendsNewOutputs):
    """Appends only the new outputs, but copies every attempts entry on every save."""

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        super().save(checkpoint)
        self.entries = [list(entry) for entry in checkpoint.attempts]


def test_the_kit_catches_a_store_that_reads_every_attempts_entry_each_save() -> None:
    with pytest.raises(StoreConformanceError) as caught:
        check_store(pairs(CopiesTheAttempts), incremental=True)
    assert caught.value.property == "constant cost"
    message = str(caught.value)
    assert "the store read the attempts entries of earlier checkpoints" in message
    assert message.endswith("each checkpoint should write only its new_attempts")


def test_the_kit_s_samples_hold_every_format_5_field() -> None:
    import asyncio  # noqa: PLC0415

    from executionkit.conformance._samples import CODE as KIT_CODE  # noqa: PLC0415
    from executionkit.conformance._samples import Samples  # noqa: PLC0415

    samples = asyncio.run(Samples.build(incremental=True))
    sample = samples.spending[-2]  # the one the round trip saves
    assert {entry[3] for entry in sample.attempts} == set(ATTEMPT_OUTCOMES)
    assert any(entry[1] is not None for entry in sample.attempts)
    assert "rate_limited" in {row.outcome for row in sample.ledger}
    assert sample.waits
    assert sample.in_flight_items
    assert sample.step_info["a"]["code"] == KIT_CODE
    assert [len(c.new_attempts) for c in samples.spending] == [2, 4, 3, 1]
    deadline = samples.deadline
    assert deadline.step_info["approve"]["answered_by"] == "deadline"
    assert all("code" in info for info in deadline.step_info.values())
    chain = samples.chain
    assert len(chain[-1].attempts) >= CHAIN_LENGTH  # one entry or more per step
    assert sum(len(c.new_attempts) for c in chain) == len(chain[-1].attempts)
