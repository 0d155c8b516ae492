"""Helpers for error messages: suggestions for unknown names, safe descriptions of values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from executionkit import TokenUsage, WorkflowCheckpoint, WorkflowFailed
from executionkit._errors import did_you_mean, preview, safe_str

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("name", "candidates", "hint"),
    [
        ("fetc", ["fetch", "summarize"], "; did you mean 'fetch'?"),
        ("sumary", ["fetch", "summarize", "summary_v2"], "; did you mean 'summary_v2'?"),
        ("Fetch", ["fetch"], "; did you mean 'fetch'?"),
        ("report", ["fetch", "summarize"], ""),
        ("fetch", ["fetch"], ""),
        ("x", [], ""),
        ("", ["a"], ""),
    ],
    ids=["typo", "closest-of-several", "case", "nothing-close", "only-itself", "empty", "blank"],
)
def test_did_you_mean(name: str, candidates: list[str], hint: str) -> None:
    assert did_you_mean(name, candidates) == hint


def test_did_you_mean_takes_any_iterable_once() -> None:
    assert did_you_mean("fetc", (name for name in ("fetch", "fetched"))) == (
        "; did you mean 'fetch'?"
    )


def test_did_you_mean_quotes_the_name_as_python_would() -> None:
    assert did_you_mean("it's", ["its'"]) == '; did you mean "its\'"?'


def test_importing_executionkit_does_not_import_difflib() -> None:
    code = "import sys, executionkit; print('difflib' in sys.modules)"
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "False"


class BadRepr:
    def __repr__(self) -> str:
        raise ValueError


class BadStr:
    def __str__(self) -> str:
        raise ValueError


def test_preview_never_raises() -> None:
    deep: list[object] = []
    for _ in range(50_000):
        deep = [deep]
    assert preview(deep) == "<nested too deeply to show>"
    assert preview(BadRepr()) == "<repr() raised ValueError>"
    assert preview(10**5000) == "<repr() raised ValueError>"
    assert preview("x" * 100) == "'" + "x" * 56 + "..."
    assert preview("x" * 58) == "'" + "x" * 58 + "'"
    assert preview([1, 2], limit=5) == "[1, 2]"[:2] + "..."


def test_safe_str_never_raises() -> None:
    assert safe_str(BadStr()) == "<BadStr whose str() raised ValueError>"
    assert safe_str(ValueError("boom")) == "boom"


class BadStrError(Exception):
    def __str__(self) -> str:
        raise ValueError


def test_workflow_failed_survives_an_exception_whose_str_raises() -> None:
    checkpoint = WorkflowCheckpoint(step_index=1, outputs={"a": 1}, cost=TokenUsage(), seq=1)
    failed = WorkflowFailed({"s": BadStrError()}, checkpoint)
    assert str(failed).startswith(
        "workflow failed: step 's' raised; first error: BadStrError: "
        "<BadStrError whose str() raised ValueError>. "
    )
