"""A resume keeps format 5's ``attempts`` its checkpoint held, and every store keeps them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from executionkit import Step, Workflow, WorkflowCheckpoint
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

ENTRY = ("a", None, 1, "ok", 1_764_000_000_000, 1_764_000_000_500)


def _flow() -> Workflow:
    return Workflow([Step("a", lambda ctx: 1), Step.ask("q", lambda ctx: "?", depends_on=("a",))])


def _with_attempts(run_id: str) -> WorkflowCheckpoint:
    saved: list[WorkflowCheckpoint] = []
    _flow().run_sync(checkpoint_fn=saved.append, run_id=run_id)
    data = saved[-1].to_dict()
    data["attempts"] = [list(ENTRY)]
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))


def test_a_resume_keeps_the_attempts_and_adds_none_as_new() -> None:
    after: list[WorkflowCheckpoint] = []
    _flow().run_sync(resume_from=_with_attempts("r"), checkpoint_fn=after.append, answers={"q": 1})
    assert after
    for checkpoint in after:
        assert checkpoint.attempts == (ENTRY,)
        assert checkpoint.new_attempts == ()


def test_every_store_keeps_them_across_a_resume(tmp_path: Path, pg_uri: str) -> None:
    makers: list[tuple[str, Any]] = [
        ("json-file", lambda: JsonFileStore(tmp_path / "a.json")),
        ("json-lines", lambda: JsonLinesStore(tmp_path / "a.jsonl")),
        ("sqlite", lambda: SQLiteStore(tmp_path / "a.db")),
        ("postgres", lambda: PostgresStore(pg_uri)),
    ]
    for kind, make in makers:
        store = make()
        start = _with_attempts(f"r-{kind}")
        store(start)
        loaded = store.load(f"r-{kind}") if hasattr(store, "run_ids") else store.load()
        assert loaded is not None
        assert loaded.attempts == (ENTRY,), kind
        _flow().run_sync(resume_from=loaded, checkpoint_fn=store, answers={"q": 1})
        final = make()
        latest = final.load(f"r-{kind}") if hasattr(final, "run_ids") else final.load()
        assert latest is not None
        assert latest.outputs["q"] == 1, kind
        assert latest.attempts == (ENTRY,), kind
        for opened in (store, final):
            close = getattr(opened, "close", None)
            if close is not None:
                close()
