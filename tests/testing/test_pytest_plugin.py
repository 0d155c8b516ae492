"""The pytest plugin's fixtures, used by a user's test file run in a pytest subprocess."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

from cli_runner import ROOT

if TYPE_CHECKING:
    from pathlib import Path

USER_TESTS = """\
import math
from datetime import timedelta

from executionkit import PatternResult, Step, TokenUsage, Workflow

CALLS = []


def flow():
    def a(ctx):
        CALLS.append("a")
        return PatternResult(f"model says {ctx['topic']}", cost=TokenUsage(120, 30, 1))

    return Workflow(
        [
            Step("a", a),
            Step.wait("w", seconds=timedelta(days=3), depends_on=("a",)),
            Step("b", lambda ctx: ctx["a"] + "!", depends_on=("w",)),
        ],
        inputs=("topic",),
    )


def test_a_three_day_wait(ek_checkpoints, ek_clock):
    result = flow().run_sync({"topic": "owls"}, checkpoint_fn=ek_checkpoints, sleep_up_to=math.inf)
    assert result.outputs["b"] == "model says owls!"
    assert ek_clock.passed == timedelta(days=3)
    assert ek_checkpoints.last.outputs["b"] == "model says owls!"


def test_replayed(ek_cassette):
    CALLS.clear()
    result = ek_cassette.wrap(flow()).run_sync({"topic": "owls"}, sleep_up_to=0)
    assert result.outputs["a"] == "model says owls"
    assert result.cost.input_tokens == 120
    assert CALLS == (["a"] if RECORDING else [])
"""

BROKEN_TEST = """\
from executionkit import Step, Workflow


def test_an_output_that_is_not_json(ek_checkpoints):
    Workflow([Step("s", lambda ctx: {1, 2})]).run_sync(checkpoint_fn=ek_checkpoints)
"""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


def test_the_fixtures_work_in_a_users_test_file_and_record_then_replay(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(
        USER_TESTS.replace("RECORDING", "True"), encoding="utf-8"
    )
    recorded = _pytest(tmp_path, "--ek-record")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "2 passed" in recorded.stdout
    cassette = tmp_path / "cassettes" / "test_user" / "test_replayed.jsonl"
    assert cassette.is_file()
    (tmp_path / "test_user.py").write_text(
        USER_TESTS.replace("RECORDING", "False"), encoding="utf-8"
    )
    replayed = _pytest(tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "2 passed" in replayed.stdout


def test_a_replay_with_no_recording_fails_without_calling(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(
        USER_TESTS.replace("RECORDING", "False"), encoding="utf-8"
    )
    done = _pytest(tmp_path, "-k", "replayed")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "CassetteMiss" in done.stdout


def test_the_checkpoint_fixture_names_an_output_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text(BROKEN_TEST, encoding="utf-8")
    done = _pytest(tmp_path)
    assert done.returncode == 1
    assert "cannot be written as JSON: the output of step 's'" in done.stdout


def test_the_checkpoint_list_in_this_process() -> None:
    """The fixture's list itself, measured here (the subprocesses above are not)."""
    from executionkit import Step, Workflow  # noqa: PLC0415
    from executionkit.testing.pytest_plugin import Checkpoints  # noqa: PLC0415

    kept = Checkpoints()
    Workflow([Step("a", lambda ctx: (1, 2)), Step("b", lambda ctx: 3)]).run_sync(
        checkpoint_fn=kept
    )
    assert kept.last.outputs["b"] == 3
    assert len(kept) >= 1
    bad = Checkpoints()
    import pytest  # noqa: PLC0415

    with pytest.raises(Exception, match="cannot be written as JSON: the output of step 's'"):
        Workflow([Step("s", lambda ctx: {1})]).run_sync(checkpoint_fn=bad)
