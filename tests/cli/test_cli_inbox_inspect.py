"""``executionkit inspect`` shows the store's inbox: runs submitted, left alone, answers saved.

A database's listing adds the runs submitted and not started yet (their input
names, never values) and the runs a worker left alone, with the reason; one
run's view adds a line for each of those the inbox holds of it. Nothing is added
when the inbox holds nothing of the run: the output stays as it was.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from test_cli_waits import _main

from executionkit import Step, Workflow
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "sk-live-0123456789-never-printed"  # noqa: S105 - an input value inspect never prints
REASON = "it needs the inputs 'topic'\nwhich only a submitted run stores"


def _flow() -> Workflow:
    return Workflow(
        [
            Step("draft", lambda ctx: f"about {ctx['topic']}"),
            Step.ask("approve", lambda ctx: "Publish it?", depends_on=("draft",)),
        ],
        inputs=("topic", "api_secret"),
    )


INPUTS = {"topic": "cats", "api_secret": SECRET}


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SQLiteStore:
    """``runs.db`` in the working directory: ``review`` waiting, ``queued`` submitted only."""
    monkeypatch.chdir(tmp_path)
    store = SQLiteStore(tmp_path / "runs.db")
    _flow().run_sync(INPUTS, checkpoint_fn=store, run_id="review")
    _flow().submit(store, INPUTS, run_id="queued")
    return store


def test_the_listing_adds_runs_submitted_and_left_alone(
    database: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code, plain, _ = _main(capsys, "inspect", "sqlite:///runs.db")
    assert code == 0
    assert "submitted, not started yet" in plain  # the listing before anything was left alone
    assert "left alone" not in plain
    database.inbox.leave_alone("review", REASON)
    submission = database.inbox.submission("queued")
    assert submission is not None
    code, out, _ = _main(capsys, "inspect", "sqlite:///runs.db")
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == ["database: sqlite:///runs.db", "runs: 1"]
    assert lines[2].startswith("  review: seq ")
    assert lines[3:8] == [
        "submitted, not started yet: 1",
        (
            f"  queued: submitted {submission.submitted_at}; inputs: api_secret, topic (key "
            f"names only, never values)"
        ),
        "left alone by a worker: 1",
        "  review: it needs the inputs 'topic'\\nwhich only a submitted run stores",
        "inspect one with: executionkit inspect 'sqlite:///runs.db?run_id=review'",
    ]
    assert SECRET not in out
    code, out, _ = _main(capsys, "inspect", "sqlite:///runs.db", "--json")
    assert code == 0
    data = json.loads(out)
    assert [run["run_id"] for run in data["runs"]] == ["review"]
    assert data["submitted"] == [
        {
            "run_id": "queued",
            "submitted_at": submission.submitted_at,
            "input_keys": ["api_secret", "topic"],
        }
    ]
    assert data["left_alone"] == {"review": REASON}
    assert SECRET not in out


def test_a_listing_with_nothing_in_the_inbox_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _flow().run_sync(INPUTS, checkpoint_fn=SQLiteStore(tmp_path / "runs.db"), run_id="review")
    code, out, _ = _main(capsys, "inspect", "sqlite:///runs.db")
    assert code == 0
    assert len(out.splitlines()) == 4  # database, runs, the run, inspect one with
    assert "submitted" not in out
    data = json.loads(_main(capsys, "inspect", "sqlite:///runs.db", "--json")[1])
    assert (data["submitted"], data["left_alone"]) == ([], {})


def test_one_run_shows_its_submission_note_and_answers_saved(
    database: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "sqlite:///runs.db?run_id=review"
    code, before, _ = _main(capsys, "inspect", url)
    assert code == 0
    assert "submitted" not in before
    assert "left alone" not in before
    assert "answers saved" not in before
    assert "answers_saved" not in json.loads(_main(capsys, "inspect", url, "--json")[1])

    database.inbox.save_answer("review", "approve", "yes")
    database.inbox.leave_alone("review", REASON)
    code, out, _ = _main(capsys, "inspect", url)
    assert code == 0
    assert "left alone  it needs the inputs 'topic'\\nwhich only a submitted run stores\n" in out
    assert "answers saved approve (a worker resumes the run with them)\n" in out
    assert "\nsubmitted " not in out  # run directly, not submitted
    assert (
        out.replace(
            "left alone  it needs the inputs 'topic'\\nwhich only a submitted run stores\n"
            "answers saved approve (a worker resumes the run with them)\n",
            "",
        )
        == before
    )  # the lines added, and nothing else changed
    data = json.loads(_main(capsys, "inspect", url, "--json")[1])
    assert data["left_alone"] == REASON
    assert data["answers_saved"] == ["approve"]
    assert "submitted" not in data
    assert "yes" not in json.dumps(data["answers_saved"])  # paths, not the answers


def test_a_submitted_run_shows_when_and_its_input_names(
    database: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    submission = database.inbox.submission("queued")
    assert submission is not None
    at = submission.submitted_at
    code, out, err = _main(capsys, "inspect", "sqlite:///runs.db?run_id=queued")
    assert (code, err) == (0, "")
    assert out == (
        "file        sqlite:///runs.db\n"
        "run_id      queued\n"
        f"submitted   {at}; inputs: api_secret, topic (key names only, never values)\n"
        "            not started yet (no checkpoint): a worker starts it\n"
    )
    code, out, _ = _main(capsys, "inspect", "sqlite:///runs.db?run_id=queued", "--json")
    assert json.loads(out) == {
        "file": "sqlite:///runs.db",
        "run_id": "queued",
        "submitted": {"submitted_at": at, "input_keys": ["api_secret", "topic"]},
    }
    _flow().run_sync(INPUTS, checkpoint_fn=database, run_id="queued")  # as a worker starts it
    code, out, _ = _main(capsys, "inspect", "sqlite:///runs.db?run_id=queued")
    assert code == 0
    assert "context     api_secret, topic (key names only, never values)\n" in out
    assert (f"submitted   {at}; inputs: api_secret, topic (key names only, never values)\n") in out
    assert SECRET not in out
    code, _, err = _main(capsys, "inspect", "sqlite:///runs.db?run_id=missing")
    assert code == 2
    assert "holds no checkpoint of run 'missing'" in err


@pytest.mark.parametrize("suffix", ["json", "jsonl"])
def test_a_file_shows_its_submitted_run_and_why_it_was_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    path = tmp_path / f"run.{suffix}"
    store = JsonFileStore(path) if suffix == "json" else JsonLinesStore(path)
    _flow().submit(store, INPUTS, run_id="file-run")
    store.inbox.leave_alone("file-run", REASON)
    code, out, _ = _main(capsys, "inspect", str(path))
    assert code == 0
    assert out.startswith(f"file        {path}\nrun_id      file-run\nsubmitted   20")
    assert out.endswith(
        "left alone  it needs the inputs 'topic'\\nwhich only a submitted run stores\n"
    )
    assert SECRET not in out
    data = json.loads(_main(capsys, "inspect", str(path), "--json")[1])
    assert data["left_alone"] == REASON
    assert data["submitted"]["input_keys"] == ["api_secret", "topic"]
    code, _, err = _main(capsys, "inspect", str(tmp_path / f"other.{suffix}"))
    assert code == 2
    assert "other" in err
