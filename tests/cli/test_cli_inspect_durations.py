"""``executionkit inspect`` shows how long each step ran, from the checkpoint's ``attempts``.

The JSON adds ``step_times`` (nothing it printed before changes); the text adds a
``durations`` field, only when the checkpoint has attempt times, so that the
output of older checkpoints stays as it was. A map's items count for their map,
a sub-workflow's steps for their step.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from test_cli_waits import _main

from executionkit import Step, TokenUsage, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit.stores import JsonFileStore

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

T = 1_796_000_000_000  # milliseconds since the epoch
ATTEMPTS: list[list[Any]] = [
    ["fetch", None, 1, "failed", T, T + 400],
    ["fetch", None, 2, "ok", T + 2400, T + 12_400],
    ["double", "0", 1, "ok", T + 12_400, T + 12_500],
    ["double", "1", 1, "rate_limited", T + 12_400, T + 12_410],
    ["double", "1", 2, "ok", T + 13_000, T + 197_400],
    ["research/search", None, 1, "ok", T + 197_400, T + 198_250],
    ["research/summarize", None, 1, "timeout", T + 198_250, T + 199_000],
]


def _write(tmp_path: Path, attempts: list[list[Any]], outputs: dict[str, Any]) -> None:
    """``run.json`` in ``tmp_path``: a format 5 checkpoint with ``attempts`` and ``outputs``."""
    data = WorkflowCheckpoint(0, {}, TokenUsage(), version=5, run_id="r", seq=3).to_dict()
    data.update(step_index=len(outputs), outputs=outputs, attempts=attempts)
    checkpoint = WorkflowCheckpoint.from_dict(data)
    (tmp_path / "run.json").write_text(json.dumps(checkpoint.to_dict()), encoding="utf-8")


OUTPUTS = {"fetch": 1, "double": [0, 2], "research": "notes", "old": 4}


def test_json_adds_each_steps_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, ATTEMPTS, OUTPUTS)
    code, out, err = _main(capsys, "inspect", "run.json", "--json")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert summary["step_times"] == {
        "fetch": {
            "started_ms": T,
            "ended_ms": T + 12_400,
            "duration_ms": 12_400,
            "attempts": 2,
            "ended": 2,
            "outcomes": {"failed": 1, "ok": 1},
            "items": None,
        },
        "double": {
            "started_ms": T + 12_400,
            "ended_ms": T + 197_400,
            "duration_ms": 185_000,
            "attempts": 2,
            "ended": 3,
            "outcomes": {"ok": 2, "rate_limited": 1},
            "items": 2,
        },
        "research": {
            "started_ms": T + 197_400,
            "ended_ms": T + 199_000,
            "duration_ms": 1600,
            "attempts": 0,
            "ended": 2,
            "outcomes": {"ok": 1, "timeout": 1},
            "items": None,
        },
    }
    assert list(summary["outputs"]) == list(OUTPUTS)  # what it printed before is unchanged


def test_text_adds_a_durations_field_after_the_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, ATTEMPTS, OUTPUTS)
    code, out, err = _main(capsys, "inspect", "run.json")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    start = lines.index("steps       4 recorded (--workflow MODULE:ATTR shows the total)")
    assert lines[start + 1 : start + 5] == [
        "durations   fetch: 12.4 s, 2 attempts (1 failed, 1 ok)",
        "            double: 3 min 05 s, 2 items, 3 attempts (2 ok, 1 rate_limited)",
        "            research: 1.6 s, 2 attempts of its steps (1 ok, 1 timeout)",
        "failed      (none)",
    ]


def test_without_attempt_times_nothing_is_added(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint of an older version (no times): no ``durations`` line, an empty field."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, [], OUTPUTS)
    code, out, _ = _main(capsys, "inspect", "run.json")
    assert code == 0
    assert "durations" not in out
    code, out, _ = _main(capsys, "inspect", "run.json", "--json")
    assert json.loads(out)["step_times"] == {}


FLOW = """\
from executionkit import Step, Workflow

workflow = Workflow(
    [
        Step("old", lambda ctx: 4),
        Step("research", lambda ctx: "notes"),
        Step("double", lambda ctx: [0, 2]),
        Step("fetch", lambda ctx: 1),
    ]
)
"""


def test_with_the_workflow_the_steps_follow_its_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "durations_flow.py").write_text(FLOW, encoding="utf-8")
    _write(tmp_path, ATTEMPTS, OUTPUTS)
    code, out, err = _main(
        capsys, "inspect", "run.json", "--json", "--workflow", "durations_flow:workflow"
    )
    assert (code, err) == (0, "")
    assert list(json.loads(out)["step_times"]) == ["research", "double", "fetch"]


def test_names_that_would_drive_a_terminal_are_shown_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name = "evil\x1b[2J\nname"
    _write(tmp_path, [[name, None, 1, "ok", T, T + 850]], {name: 1})
    code, out, _ = _main(capsys, "inspect", "run.json")
    assert code == 0
    assert "\x1b" not in out
    assert 'durations   "evil\\u001b[2J\\nname": 850 ms, 1 attempt (1 ok)' in out.splitlines()


def _parse(ctx: Any) -> str:
    from executionkit import current_step  # noqa: PLC0415

    if current_step().attempt == 1:
        msg = "the model answered nonsense"
        raise ValueError(msg)
    return "parsed"


def test_a_real_run_shows_the_retry_it_took(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's step that failed once then succeeded: two attempts, from the run's own times."""
    monkeypatch.chdir(tmp_path)
    workflow = Workflow(
        [
            Step("fetch", lambda ctx: "text"),
            Step(
                "parse", _parse, depends_on=("fetch",), retries=1, retry_delay=0.05, retry_jitter=0
            ),
            Step("items", lambda ctx: [1, 2, 3]),
            Step.map("double", lambda item, ctx: item * 2, over="items"),
            Step("refuses", lambda ctx: 1 / 0, depends_on=("parse", "double")),
        ]
    )
    with contextlib.suppress(WorkflowFailed):
        workflow.run_sync(checkpoint_fn=JsonFileStore(tmp_path / "run.json"))
    code, out, _ = _main(capsys, "inspect", "run.json", "--json")
    assert code == 0
    times = json.loads(out)["step_times"]
    assert set(times) == {"fetch", "parse", "items", "double", "refuses"}
    assert times["parse"]["outcomes"] == {"failed": 1, "ok": 1}
    assert times["parse"]["duration_ms"] >= 50  # the retry's backoff is part of it
    assert (times["double"]["items"], times["double"]["ended"]) == (3, 3)
    assert times["refuses"]["outcomes"] == {"failed": 1}
    code, text, _ = _main(capsys, "inspect", "run.json")
    assert any(
        line.startswith("            parse: ") and line.endswith(", 2 attempts (1 failed, 1 ok)")
        for line in text.splitlines()
    )
