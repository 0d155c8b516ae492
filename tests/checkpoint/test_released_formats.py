"""Every checkpoint format ever released still loads, round-trips and resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from executionkit import WorkflowCheckpoint
from executionkit._checkpoint._value import FORMAT_VERSION

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
sys.path.insert(0, str(FIXTURES))

from make_fixtures import DOCUMENT, fixture_workflow  # noqa: E402

CASES = sorted(FIXTURES.glob("v*/*.json"))
CONTEXT = {"document": DOCUMENT, "fail_report": False}


def _version_of(path: Path) -> int:
    return int(path.parent.name.removeprefix("v"))


def test_every_format_version_has_fixtures() -> None:
    """Fixtures exist for format 0 (ExecutionKit 0.4) up to the current one."""
    assert {_version_of(path) for path in CASES} == set(range(FORMAT_VERSION + 1))
    assert all(
        len(list((FIXTURES / f"v{v}").glob("*.json"))) >= 3 for v in range(FORMAT_VERSION + 1)
    )


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_loads_and_round_trips_in_its_own_shape(path: Path) -> None:
    """from_dict reads it; to_dict writes it back exactly as that version did."""
    data = json.loads(path.read_text(encoding="utf-8"))
    checkpoint = WorkflowCheckpoint.from_dict(data)
    assert checkpoint.version == _version_of(path)
    assert checkpoint.to_dict() == data


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_resumes_to_the_uninterrupted_result(path: Path) -> None:
    """Resuming skips what the fixture records and ends where an uninterrupted run does."""
    expected = fixture_workflow().run_sync(CONTEXT)
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))
    workflow = fixture_workflow()
    recorded = [step.name for step in workflow.steps if step.name in checkpoint.outputs]
    result = workflow.run_sync(CONTEXT, resume_from=checkpoint)
    assert dict(result.outputs) == dict(expected.outputs)
    assert result.cost == expected.cost
    assert list(result.restored) == recorded
    assert set(result.executed) == {step.name for step in workflow.steps} - set(recorded)
    assert dict(result.invalidated) == {}
