"""The bundled demo: the first thing a newcomer runs."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from executionkit import TokenUsage, WorkflowCheckpoint
from executionkit._cli import main
from executionkit._demo import CALLS, run_demo

if TYPE_CHECKING:
    from pathlib import Path


def test_demo_fails_saves_and_resumes_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run 1 fails at the translation, run 2 resumes from the file with exact totals."""
    assert run_demo(tmp_path, delay=False) == 0
    out = capsys.readouterr().out
    assert "-> WorkflowFailed: model provider answered 503" in out
    assert (
        "recorded steps (6): load_document, extract_facts, summarize, classify_topic, "
        "fact_check, headline"
    ) in out
    assert (
        "skipped (already paid for): load_document, extract_facts, summarize, "
        "classify_topic, fact_check, headline"
    ) in out
    assert "ran now: translate_summary, assemble_report" in out
    assert "-> exact" in out
    assert "only the key names ['document', 'llm'], never the values" in out
    final = WorkflowCheckpoint.from_dict(json.loads((tmp_path / "checkpoint.json").read_text()))
    assert final.step_index == 8
    assert final.seq == 5
    assert final.cost == sum((call.usage for call in CALLS.values()), TokenUsage())
    assert dict(final.metadata) == {"job": "demo-report"}


def test_demo_each_paid_step_runs_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Across both runs every model call except the failed one is made exactly once."""
    run_demo(tmp_path, delay=False)
    out = capsys.readouterr().out
    for step in CALLS:
        assert out.count(f"ran  {step} ") == 1, step
    assert out.count("FAIL translate_summary") == 1


def test_cli_demo_subprocess_exits_zero() -> None:
    """python -m executionkit demo works as a command."""
    done = subprocess.run(
        [sys.executable, "-m", "executionkit", "demo", "--no-delay"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Token accounting" in done.stdout
    assert done.stderr == ""


def test_cli_without_a_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """No command: argparse prints usage and exits 2."""
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "usage: executionkit" in capsys.readouterr().err
