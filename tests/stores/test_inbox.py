"""The run inbox of every bundled store: submissions, saved answers, runs left alone."""

from __future__ import annotations

import json
import multiprocessing
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointFormatError,
    CheckpointValueError,
    RunArgumentError,
    Step,
    Workflow,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

KINDS = ("json-file", "json-lines", "sqlite", "postgres")


def make(kind: str, tmp_path: Path, pg_uri: str) -> Any:
    if kind == "json-file":
        return JsonFileStore(tmp_path / "run.json")
    if kind == "json-lines":
        return JsonLinesStore(tmp_path / "run.jsonl")
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "runs.db")
    return PostgresStore(pg_uri)


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    uri = request.getfixturevalue("pg_uri") if request.param == "postgres" else ""
    made = make(request.param, tmp_path, uri)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def test_a_submission_comes_back_from_a_fresh_store_object(store: Any, tmp_path: Path) -> None:
    made = store.inbox.submit("r1", {"topic": "owls", "n": [1, 2]}, {"team": "a"})
    assert made.run_id == "r1"
    again = type(store)(store.path) if hasattr(store, "path") else store
    found = again.inbox.submission("r1")
    assert found is not None
    assert dict(found.inputs) == {"topic": "owls", "n": [1, 2]}
    assert dict(found.metadata) == {"team": "a"}
    assert found.submitted_at == made.submitted_at
    assert [s.run_id for s in again.inbox.submissions()] == ["r1"]
    assert again.inbox.submission("other") is None


def test_a_run_is_submitted_once(store: Any) -> None:
    store.inbox.submit("r1", {"a": 1})
    with pytest.raises(ValueError, match="'r1' was submitted already"):
        store.inbox.submit("r1", {"a": 2})
    submission = store.inbox.submission("r1")
    assert submission is not None
    assert dict(submission.inputs) == {"a": 1}


def test_a_run_with_checkpoints_cannot_be_submitted(store: Any) -> None:
    workflow = Workflow([Step("a", lambda ctx: 1)])
    workflow.run_sync(checkpoint_fn=store, run_id="started")
    with pytest.raises(ValueError, match="holds checkpoints of run 'started' already"):
        store.inbox.submit("started")
    assert store.inbox.submission("started") is None


def test_inputs_that_are_not_plain_data_are_refused_naming_the_key(store: Any) -> None:
    with pytest.raises(CheckpointValueError, match="inputs of run 'r1'"):
        store.inbox.submit("r1", {"client": object()})
    with pytest.raises(CheckpointValueError, match="metadata of run 'r1'"):
        store.inbox.submit("r1", {}, {"x": {1, 2}})
    assert store.inbox.submissions() == []


def test_answers_are_saved_replaced_and_forgotten(store: Any) -> None:
    assert store.inbox.answers("r1") == {}
    store.inbox.save_answer("r1", "approve", value=True)
    store.inbox.save_answer("r1", "review/notes", {"ok": [1, "two"]})
    store.inbox.save_answer("r1", "approve", value=False)  # a second answer replaces the first
    store.inbox.save_answer("r2", "approve", "other run")
    assert store.inbox.answers("r1") == {"approve": False, "review/notes": {"ok": [1, "two"]}}
    store.inbox.forget_answers("r1", ["approve"])
    assert store.inbox.answers("r1") == {"review/notes": {"ok": [1, "two"]}}
    store.inbox.forget_answers("r1")
    assert store.inbox.answers("r1") == {}
    assert store.inbox.answers("r2") == {"approve": "other run"}
    with pytest.raises(CheckpointValueError, match="answer to 'approve' of run 'r1'"):
        store.inbox.save_answer("r1", "approve", float("nan"))


def test_runs_left_alone_are_listed_until_taken_back(store: Any) -> None:
    store.inbox.leave_alone("r1", "needs inputs ['topic'] and none were stored")
    store.inbox.leave_alone("r2", "first reason")
    store.inbox.leave_alone("r2", "second reason")
    assert store.inbox.left_alone() == {
        "r1": "needs inputs ['topic'] and none were stored",
        "r2": "second reason",
    }
    store.inbox.take_back("r1")
    assert store.inbox.left_alone() == {"r2": "second reason"}
    store.inbox.submit("r2", {"x": 1})
    store.inbox.save_answer("r2", "q", 1)
    store.inbox.forget("r2")
    assert store.inbox.left_alone() == {}
    assert store.inbox.submission("r2") is None
    assert store.inbox.answers("r2") == {}


def test_a_file_store_takes_one_submission(tmp_path: Path) -> None:
    for store in (JsonFileStore(tmp_path / "a.json"), JsonLinesStore(tmp_path / "a.jsonl")):
        store.inbox.submit("first")
        with pytest.raises(ValueError, match="holds one run, and run 'first' was submitted"):
            store.inbox.submit("second")
        assert (tmp_path / f"{store.path.name}.inbox").is_file()


def test_deleting_a_sql_run_deletes_its_inbox_entries(tmp_path: Path, pg_uri: str) -> None:
    for store in (SQLiteStore(tmp_path / "d.db"), PostgresStore(pg_uri)):
        store.inbox.submit("gone", {"secret-ish": "input"})
        Workflow([Step("a", lambda ctx: 1)]).run_sync(checkpoint_fn=store, run_id="gone")
        store.inbox.save_answer("gone", "q", 1)
        store.inbox.submit("kept")
        assert store.delete("gone")
        assert store.inbox.submission("gone") is None
        assert store.inbox.answers("gone") == {}
        assert [s.run_id for s in store.inbox.submissions()] == ["kept"]
        store.close()


def test_a_damaged_inbox_file_is_reported_naming_it(tmp_path: Path) -> None:
    store = JsonFileStore(tmp_path / "run.json")
    (tmp_path / "run.json.inbox").write_text('{"not": "rows"}')
    with pytest.raises(CheckpointFormatError, match=r"run\.json\.inbox: not an inbox file"):
        store.inbox.submissions()
    (tmp_path / "run.json.inbox").write_text("[[")
    with pytest.raises(CheckpointFormatError, match="not an inbox file"):
        store.inbox.answers("r")


def _save_answers(path: str, worker: int, count: int) -> None:
    store = JsonLinesStore(path)
    for index in range(count):
        store.inbox.save_answer("r", f"q{worker}-{index}", index)


def test_processes_saving_answers_to_one_file_lose_none(tmp_path: Path) -> None:
    path = str(tmp_path / "run.jsonl")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_save_answers, args=(path, w, 15)) for w in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        assert worker.exitcode == 0
    answers = JsonLinesStore(path).inbox.answers("r")
    assert answers == {f"q{w}-{i}": i for w in range(3) for i in range(15)}
    assert json.loads((tmp_path / "run.jsonl.inbox").read_text())  # one valid document


def test_processes_submitting_one_run_to_a_database_submit_it_once(tmp_path: Path) -> None:
    path = str(tmp_path / "race.db")
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        outcomes = pool.map(_submit_race, [(path, n) for n in range(8)])
    assert sorted(outcomes).count("submitted") == 1
    submission = SQLiteStore(path).inbox.submission("race")
    assert submission is not None
    assert submission.inputs["by"] == outcomes.index("submitted")


def _submit_race(args: tuple[str, int]) -> str:
    path, number = args
    try:
        SQLiteStore(path).inbox.submit("race", {"by": number})
    except ValueError:
        return "refused"
    return "submitted"


def test_workflow_submit_checks_its_arguments_before_storing_anything(tmp_path: Path) -> None:
    flow = Workflow([Step("a", lambda ctx: 1)], inputs=("x",))
    store = SQLiteStore(tmp_path / "s.db")
    with pytest.raises(RunArgumentError, match="lacks the workflow's declared inputs: 'x'"):
        flow.submit(store)
    with pytest.raises(RunArgumentError, match="collide with step names: 'a'"):
        flow.submit(store, {"x": 1, "a": 2})
    with pytest.raises(RunArgumentError, match="run_id must be a non-empty str"):
        flow.submit(store, {"x": 1}, run_id="")
    with pytest.raises(RunArgumentError, match="metadata"):
        flow.submit(store, {"x": 1}, metadata=[1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="submit needs a store with an inbox"):
        flow.submit([].append, {"x": 1})
    with pytest.raises(CheckpointValueError, match="inputs of run 'r'"):
        flow.submit(store, {"x": b"bytes"}, run_id="r")
    assert store.inbox.submissions() == []
    run_id = flow.submit(store, {"x": 1})
    assert len(run_id) == 32
    submission = store.inbox.submission(run_id)
    assert submission is not None
    assert submission.steps == ("a",)
