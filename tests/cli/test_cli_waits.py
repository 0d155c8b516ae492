"""``executionkit run`` and ``inspect`` with waits (`Step.wait`): due times, exit status 3."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import executionkit._define._questions as questions
from executionkit._cli import main

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

FLOW = """\
from executionkit import Step, Workflow

workflow = Workflow(
    [
        Step("invite", lambda ctx: "invited"),
        Step.wait("pause", seconds=3600, depends_on=("invite",)),
        Step("remind", lambda ctx: "reminded", depends_on=("pause",)),
    ]
)
"""
START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_run_shows_the_wait_then_resumes_once_due(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "timed_flow.py").write_text(FLOW, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    now = [START]
    monkeypatch.setattr(questions, "utc_now", lambda: now[0])
    run = ("run", "timed_flow:workflow", "--checkpoint", "s.jsonl")
    code, out, err = _main(capsys, *run)
    assert code == 3, err
    assert out == "waiting for a timer:\n  pause due 2026-12-02T10:00:00+00:00\n"
    assert "waiting for pause (due from 2026-12-02T10:00:00+00:00); checkpoint saved to" in err
    code, out, _ = _main(capsys, "inspect", "s.jsonl")
    assert code == 0
    assert "timers      pause: due 2026-12-02T10:00:00+00:00\n" in out
    code, out, _ = _main(capsys, "inspect", "s.jsonl", "--json")
    assert json.loads(out)["timers"] == {
        "pause": {"due": "2026-12-02T10:00:00+00:00", "due_now": False}
    }
    now[0] = START.replace(hour=10)
    code, out, _ = _main(capsys, "inspect", "s.jsonl")
    assert "timers      pause: due 2026-12-02T10:00:00+00:00 (due now)\n" in out
    code, out, err = _main(capsys, *run)
    assert code == 0, err
    assert json.loads(out) == {"invite": "invited", "pause": None, "remind": "reminded"}
