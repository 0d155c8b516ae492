"""Checkpoint format 3: skipped steps, map items, pending questions and child checkpoints.

Every new field is read as strictly as the old ones (each error names its
path), written back exactly, kept out of older versions, and carried whole by
every bundled store.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import CheckpointFormatError, TokenUsage, WorkflowCheckpoint
from executionkit._checkpoint._value import FORMAT_VERSION
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path


USAGE = {"input_tokens": 5, "output_tokens": 2, "llm_calls": 1}


def child() -> dict[str, Any]:
    """A complete checkpoint dict of a sub-workflow that recorded one step."""
    return {
        "version": 3,
        "run_id": "parent/research",
        "seq": 2,
        "step_index": 1,
        "created_at": "2026-12-01T10:00:00+00:00",
        "outputs": {"search": ["a", "b"]},
        "cost": dict(USAGE),
        "context_keys": ["topic"],
        "errors": {},
        "metadata": {},
        "progress": {},
        "step_info": {"search": {"version": None, "depends_on": []}},
        "skipped": {},
        "items": {},
        "pending": {},
        "children": {},
    }


def full() -> dict[str, Any]:
    """A version 3 dict using every new key."""
    return {
        "version": 3,
        "run_id": "parent",
        "seq": 7,
        "step_index": 1,
        "created_at": "2026-12-01T10:00:00+00:00",
        "outputs": {"classify": "long"},
        "cost": {"input_tokens": 20, "output_tokens": 8, "llm_calls": 4},
        "context_keys": ["document"],
        "errors": {},
        "metadata": {},
        "progress": {},
        "step_info": {
            "classify": {"version": None, "depends_on": []},
            "short_path": {"version": None, "depends_on": ["classify"]},
            "summaries": {"version": "v2", "depends_on": ["classify"], "kind": "map"},
            "approve": {"version": None, "depends_on": ["classify"], "kind": "ask"},
            "research": {"version": None, "depends_on": ["classify"], "kind": "workflow"},
            "per_doc": {"version": None, "depends_on": ["classify"], "kind": "workflow"},
        },
        "skipped": {"short_path": "condition is_short returned False"},
        "items": {"summaries": {"outputs": {"0": "first", "2": "third"}, "cost": dict(USAGE)}},
        "pending": {
            "approve": {
                "question": {"plan": ["a", "b"], "budget": 3},
                "asked_at": "2026-12-01T10:00:01.500000+00:00",
                "expires_at": "2026-12-02T10:00:01.500000+00:00",
            }
        },
        "children": {
            "research": {"checkpoint": child()},
            "per_doc": {"items": {"doc-1": child(), "doc-2": {**child(), "run_id": "p/d2"}}},
        },
    }


def test_a_full_dict_round_trips_exactly_through_json() -> None:
    data = full()
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))
    assert checkpoint.to_dict() == data
    assert list(checkpoint.to_dict()) == list(data)
    assert checkpoint.skipped == {"short_path": "condition is_short returned False"}
    assert checkpoint.items["summaries"]["cost"] == TokenUsage(5, 2, 1)
    assert dict(checkpoint.items["summaries"]["outputs"]) == {"0": "first", "2": "third"}
    assert checkpoint.pending["approve"]["question"] == {"plan": ["a", "b"], "budget": 3}
    research = checkpoint.children["research"]["checkpoint"]
    assert isinstance(research, WorkflowCheckpoint)
    assert research.outputs == {"search": ["a", "b"]}
    assert checkpoint.children["per_doc"]["items"]["doc-2"].run_id == "p/d2"
    assert checkpoint.step_info["summaries"]["kind"] == "map"
    assert "kind" not in checkpoint.step_info["classify"]
    assert WorkflowCheckpoint.from_dict(checkpoint.to_dict()) == checkpoint


def test_the_new_fields_are_read_only() -> None:
    checkpoint = WorkflowCheckpoint.from_dict(full())
    with pytest.raises(TypeError):
        checkpoint.skipped["x"] = "y"  # type: ignore[index]
    with pytest.raises(TypeError):
        checkpoint.items["summaries"]["outputs"]["9"] = 1
    with pytest.raises(TypeError):
        checkpoint.pending["approve"]["question"] = 1  # type: ignore[index]


def test_the_constructor_takes_them_as_the_checkpoint_keeps_them() -> None:
    loaded = WorkflowCheckpoint.from_dict(full())
    built = WorkflowCheckpoint(
        step_index=1,
        outputs={"classify": "long"},
        cost=TokenUsage(20, 8, 4),
        version=3,
        run_id="parent",
        seq=7,
        context_keys=("document",),
        created_at="2026-12-01T10:00:00+00:00",
        step_info=loaded.step_info,
        skipped=loaded.skipped,
        items={
            "summaries": {"outputs": {"0": "first", "2": "third"}, "cost": TokenUsage(5, 2, 1)}
        },
        pending=loaded.pending,
        children=loaded.children,
    )
    assert built == loaded
    assert built.to_dict() == full()


def _set(path: str, value: object) -> dict[str, Any]:
    data = full()
    *parents, last = path.split(".")
    where: Any = data
    for key in parents:
        where = where[key]
    if value is _DELETE:
        del where[last]
    else:
        where[last] = value
    return data


_DELETE = object()

BAD = [
    (("skipped", []), "checkpoint field 'skipped' must be a dict, got list []", "skipped"),
    (
        ("skipped.short_path", 3),
        (
            "checkpoint field 'skipped.short_path' must be a str (why the step was skipped), "
            "got int 3"
        ),
        "skipped.short_path",
    ),
    (
        ("skipped.classify", "no"),
        (
            "checkpoint field 'skipped' names recorded steps ['classify']; a skipped step has no "
            "output"
        ),
        "skipped",
    ),
    (
        ("skipped.", "no"),
        "checkpoint field 'skipped' must have non-empty step names as keys, got ''",
        "skipped",
    ),
    (
        ("items.summaries.cost.llm_calls", -1),
        "checkpoint field 'items.summaries.cost.llm_calls' must be a non-negative int, got int -1",
        "items.summaries.cost.llm_calls",
    ),
    (
        ("items.summaries.outputs", ["first"]),
        "checkpoint field 'items.summaries.outputs' must be a dict, got list ['first']",
        "items.summaries.outputs",
    ),
    (
        ("items.summaries.extra", 1),
        "checkpoint has unexpected field 'items.summaries.extra'",
        "items.summaries.extra",
    ),
    (
        ("items.classify", {"outputs": {}, "cost": USAGE}),
        (
            "checkpoint field 'items' names recorded steps ['classify']; a finished map's items "
            "are in its output"
        ),
        "items",
    ),
    (
        ("pending.approve.asked_at", "yesterday"),
        (
            "checkpoint field 'pending.approve.asked_at' must be a UTC ISO-8601 timestamp str, "
            "got str 'yesterday'"
        ),
        "pending.approve.asked_at",
    ),
    (
        ("pending.approve.expires_at", "2026-12-02T10:00:00"),
        (
            "checkpoint field 'pending.approve.expires_at' must be a UTC ISO-8601 timestamp str "
            "or None, got str '2026-12-02T10:00:00'"
        ),
        "pending.approve.expires_at",
    ),
    (
        ("pending.approve.question", _DELETE),
        "checkpoint field 'pending.approve.question' is missing",
        "pending.approve.question",
    ),
    (
        ("children.research.checkpoint.seq", -2),
        (
            "checkpoint field 'children.research.checkpoint' is not a valid checkpoint: "
            "checkpoint field 'seq' must be a non-negative int, got int -2"
        ),
        "children.research.checkpoint.seq",
    ),
    (
        ("children.per_doc.items.doc-1.version", 9),
        (
            "checkpoint field 'children.per_doc.items.doc-1' is not a valid checkpoint: "
            "checkpoint format version 9 is newer than this executionkit reads "
            f"(up to {FORMAT_VERSION}); upgrade executionkit to load it"
        ),
        "children.per_doc.items.doc-1.version",
    ),
    (
        ("children.research", {"both": 1}),
        (
            "checkpoint field 'children.research' must be {'checkpoint': {...}} or {'items': "
            "{key: {...}}}, got dict {'both': 1}"
        ),
        "children.research",
    ),
    (
        ("step_info.summaries.kind", "loop"),
        (
            "checkpoint field 'step_info.summaries.kind' must be 'step' or 'map' or 'ask' or "
            "'workflow', got str 'loop'"
        ),
        "step_info.summaries.kind",
    ),
    (
        ("step_info.ghost", {"version": None, "depends_on": []}),
        (
            "checkpoint field 'step_info' must describe the recorded steps and the steps with "
            "progress, skipped, items, pending questions, waits or children; missing [], none of "
            "those ['ghost']"
        ),
        "step_info",
    ),
]


@pytest.mark.parametrize(("change", "message", "path"), BAD, ids=[case[0][0] for case in BAD])
def test_each_bad_value_is_named_by_its_path(
    change: tuple[str, object], message: str, path: str
) -> None:
    data = _set(*change)
    snapshot = copy.deepcopy(data)
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(data)
    assert str(caught.value) == message
    assert caught.value.path == path
    assert data == snapshot, "from_dict must not modify its input"


@pytest.mark.parametrize("key", ["skipped", "items", "pending", "children"])
def test_a_version_3_dict_needs_every_new_key(key: str) -> None:
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(_set(key, _DELETE))
    assert str(caught.value) == f"checkpoint field {key!r} is missing"
    assert caught.value.path == key


@pytest.mark.parametrize("key", ["skipped", "items", "pending", "children"])
def test_older_versions_cannot_hold_the_new_fields(key: str) -> None:
    data = full()
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint(
            step_index=1,
            outputs={"classify": "long"},
            cost=TokenUsage(),
            version=2,
            **{key: WorkflowCheckpoint.from_dict(data).__getattribute__(key)},
        )
    assert str(caught.value) == (f"checkpoint field {key!r} needs format version 3, got version 2")
    assert caught.value.path == key
    data["version"] = 2
    with pytest.raises(CheckpointFormatError) as unexpected:
        WorkflowCheckpoint.from_dict(data)
    assert str(unexpected.value) == "checkpoint has unexpected field 'skipped'"


def test_a_kind_needs_version_3() -> None:
    info: dict[str, Any] = {"a": {"version": None, "depends_on": [], "kind": "map"}}
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint(
            step_index=1, outputs={"a": 1}, cost=TokenUsage(), version=2, step_info=info
        )
    assert caught.value.path == "step_info.a.kind"
    assert "absent (format 2 has no kinds)" in str(caught.value)


def test_children_nested_deeper_than_python_recurses_is_a_format_error() -> None:
    data: dict[str, Any] = child()
    for _ in range(2000):
        data = {**child(), "step_index": 0, "outputs": {}, "step_info": {}}
        data["children"] = {"deep": {"checkpoint": data}}
    with pytest.raises(CheckpointFormatError):
        WorkflowCheckpoint.from_dict(data)


def test_a_run_writes_version_3_with_the_new_keys_empty() -> None:
    from executionkit import Step, Workflow  # noqa: PLC0415 - local to this test

    saved: list[WorkflowCheckpoint] = []
    Workflow([Step("a", lambda ctx: 1)]).run_sync(checkpoint_fn=saved.append)
    data = saved[-1].to_dict()
    assert data["version"] == FORMAT_VERSION  # 3 when written; the current format since
    assert [data[key] for key in ("skipped", "items", "pending", "children")] == [{}] * 4
    assert WorkflowCheckpoint.from_dict(json.loads(json.dumps(data))) == saved[-1]


# --- every bundled store carries the new fields whole -----------------------------------


def current(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` in the current format, its later keys empty: what a JSON Lines store holds.

    A JSON Lines store keeps checkpoints of the current format only (what a run
    writes), so it carries the format 3 fields as a current checkpoint does.
    """
    return {**data, "version": FORMAT_VERSION, **LATER_EMPTY}


LATER_EMPTY: dict[str, Any] = {
    "ledger": [],
    "in_flight": [],
    "trace": None,
    "lineage": {},
    "attempts": [],
    "waits": {},
    "in_flight_items": {},
}


def _stored_and_loaded(store: Any, data: dict[str, Any]) -> WorkflowCheckpoint:
    checkpoint = WorkflowCheckpoint.from_dict(data)
    store(checkpoint)
    loaded = store.load() if not hasattr(store, "run_ids") else store.load("parent")
    assert isinstance(loaded, WorkflowCheckpoint)
    return loaded


@pytest.mark.parametrize("kind", ["json-file", "json-lines", "sqlite"])
def test_file_stores_keep_every_new_field(tmp_path: Path, kind: str) -> None:
    store: Any
    if kind == "json-file":
        store = JsonFileStore(tmp_path / "cp.json")
    elif kind == "json-lines":
        store = JsonLinesStore(tmp_path / "cp.jsonl")
    else:
        store = SQLiteStore(tmp_path / "cp.db")
    data = current(full()) if kind == "json-lines" else full()
    loaded = _stored_and_loaded(store, data)
    assert loaded.to_dict() == data
    if kind == "json-lines":
        # And read back by a fresh store from the file alone.
        again = JsonLinesStore(tmp_path / "cp.jsonl").load()
        assert again is not None
        assert again.to_dict() == data


def test_json_lines_drops_the_new_fields_when_they_empty(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path / "cp.jsonl")
    first = WorkflowCheckpoint.from_dict(current(full()))
    store(first)
    data = current(full())
    data["seq"] = 8
    for key in ("skipped", "items", "pending", "children"):
        data[key] = {}
    data["step_info"] = {"classify": data["step_info"]["classify"]}
    store(WorkflowCheckpoint.from_dict(data))
    loaded = JsonLinesStore(tmp_path / "cp.jsonl").load()
    assert loaded is not None
    assert loaded.to_dict() == data


def test_postgres_store_keeps_every_new_field(pg_uri: str) -> None:
    store = PostgresStore(pg_uri)
    try:
        loaded = _stored_and_loaded(store, full())
        assert loaded.to_dict() == full()
    finally:
        store.close()
