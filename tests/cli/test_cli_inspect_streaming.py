"""``executionkit inspect`` shows what a running run's steps stream, from the store's inbox.

Only while a live process claims the run, and only what it wrote since its claim
(`RunInbox.streams` with ``since``): what a process killed mid-step left is never
shown as the run's. A map's items show under their key; the text is shown by its
last 100 characters, on one line.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from test_cli_waits import _main

from executionkit import Step, Workflow
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _store(tmp_path: Path) -> SQLiteStore:
    """A database holding run ``r``: its first step recorded."""
    store = SQLiteStore(tmp_path / "runs.db")
    Workflow([Step("fetch", lambda _ctx: "page")]).run_sync(checkpoint_fn=store, run_id="r")
    return store


def test_a_claimed_runs_streamed_text_is_shown_and_in_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store(tmp_path)
    where = f"sqlite:///{tmp_path / 'runs.db'}?run_id=r"
    store.inbox.put_streams("r", {("talk", None): (1, "left by a killed process")})
    long = "x" * 150 + "\nthe end"
    try:
        with store.claim("r"):
            store.inbox.put_streams(
                "r", {("summarize", None): (2, "The cat\nsat"), ("score", "7"): (1, long)}
            )
            code, out, err = _main(capsys, "inspect", where)
            assert (code, err) == (0, "")
            lines = out.splitlines()
            at = lines.index('streaming   score[7], attempt 1: "...' + "x" * 92 + '\\nthe end"')
            assert lines[at + 1] == '            summarize, attempt 2: "The cat\\nsat"'
            assert "killed" not in out
            code, out, err = _main(capsys, "inspect", where, "--json")
            assert (code, err) == (0, "")
            assert json.loads(out)["streaming"] == [
                {"step": "score", "item": "7", "attempt": 1, "text": long},
                {"step": "summarize", "item": None, "attempt": 2, "text": "The cat\nsat"},
            ]
        code, out, err = _main(capsys, "inspect", where, "--json")  # nobody claims it now
        assert (code, err) == (0, "")
        summary = json.loads(out)
        assert summary["claimed_by"] is None
        assert "streaming" not in summary
        code, out, err = _main(capsys, "inspect", where)
        assert "streaming" not in out
    finally:
        store.close()
