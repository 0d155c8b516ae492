"""The bundled demo: the first thing a newcomer runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING

import pytest

from executionkit import TokenUsage, WorkflowCheckpoint
from executionkit._cli import main
from executionkit._cli._demo import CALLS, run_demo

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
        "restored (already paid for): load_document, extract_facts, summarize, "
        "classify_topic, fact_check, headline"
    ) in out
    assert "ran now: translate_summary, assemble_report" in out
    assert "-> exact" in out
    assert "only the key names ['document', 'llm'], never the values" in out
    assert out.endswith(f"\n  executionkit inspect {tmp_path / 'checkpoint.json'}\n")
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


def test_cli_demo_subprocess_exits_zero(tmp_path: Path) -> None:
    """python -m executionkit demo works as a command."""
    done = _demo_subprocess(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Token accounting" in done.stdout
    assert done.stderr == ""


def _demo_subprocess(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m executionkit demo``, its temporary folder made under ``tmp_path``."""
    return subprocess.run(
        [sys.executable, "-m", "executionkit", "demo", "--no-delay"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )


def test_the_demo_keeps_its_checkpoint_and_the_command_it_prints_shows_it(
    tmp_path: Path,
) -> None:
    """The file the demo talks about outlives it, and the printed inspect command works."""
    done = _demo_subprocess(tmp_path)
    assert done.returncode == 0, done.stderr
    *_, kept, command = done.stdout.splitlines()
    folders = list(tmp_path.glob("executionkit-demo-*"))
    assert len(folders) == 1
    path = folders[0] / "checkpoint.json"
    assert kept == f"The checkpoint file is kept in {folders[0]}. To see what it holds, run:"
    # Run as python -m, where the executionkit script may not be on PATH: named in full.
    assert shlex.split(command) == [sys.executable, "-m", "executionkit", "inspect", str(path)]
    assert WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8"))).seq == 5
    shown = subprocess.run(  # noqa: S603 - the command the demo printed: our own interpreter
        shlex.split(command), capture_output=True, text=True, check=False, timeout=60
    )
    assert (shown.returncode, shown.stderr) == (0, "")
    assert f"file        {path}" in shown.stdout.splitlines()
    assert "steps       8 recorded (--workflow MODULE:ATTR shows the total)" in shown.stdout


def test_the_demo_names_the_executionkit_script_when_run_through_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "bin" / "executionkit"), "demo"])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["demo", "--no-delay"]) == 0
    (path,) = tmp_path.glob("executionkit-demo-*/checkpoint.json")
    assert capsys.readouterr().out.endswith(f"\n  executionkit inspect {path}\n")


def test_cli_without_a_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """No command: argparse prints usage and exits 2."""
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "usage: executionkit" in capsys.readouterr().err
