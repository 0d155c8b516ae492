"""Error messages: suggestions for unknown names, safe descriptions, WorkflowFailed's text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from executionkit import BudgetExceeded, TokenUsage, WorkflowCheckpoint, WorkflowFailed
from executionkit._errors import did_you_mean, preview, safe_str

ROOT = Path(__file__).resolve().parents[2]


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


# --- WorkflowFailed ----------------------------------------------------------------------

TAIL = "resume from it to run only what is left"


def _checkpoint(steps: int, seq: int = 4) -> WorkflowCheckpoint:
    outputs = {f"s{i}": i for i in range(steps)}
    return WorkflowCheckpoint(step_index=steps, outputs=outputs, cost=TokenUsage(), seq=seq)


@pytest.mark.parametrize(
    ("errors", "steps", "message"),
    [
        (
            {"fetch": ValueError("context window is 8192")},
            0,
            (
                "workflow failed: step 'fetch' raised ValueError: context window is 8192. "
                f"The checkpoint (.checkpoint, seq=4) records no completed step; {TAIL}"
            ),
        ),
        (
            {"fetch": ValueError("context window is 8192")},
            1,
            (
                "workflow failed: step 'fetch' raised ValueError: context window is 8192. "
                f"The checkpoint (.checkpoint, seq=4) records 1 completed step; {TAIL}"
            ),
        ),
        (
            {"fetch": TimeoutError("no reply in 30 s")},
            12,
            (
                "workflow failed: step 'fetch' raised TimeoutError: no reply in 30 s. "
                f"The checkpoint (.checkpoint, seq=4) records 12 completed steps; {TAIL}"
            ),
        ),
        (
            {"fetch": RuntimeError("The model refused.")},
            2,
            (
                "workflow failed: step 'fetch' raised RuntimeError: The model refused. "
                f"The checkpoint (.checkpoint, seq=4) records 2 completed steps; {TAIL}"
            ),
        ),
        (
            {"fetch": RuntimeError("why?")},
            2,
            (
                "workflow failed: step 'fetch' raised RuntimeError: why? "
                f"The checkpoint (.checkpoint, seq=4) records 2 completed steps; {TAIL}"
            ),
        ),
        (
            {"fetch": KeyError("doc")},
            2,
            (
                "workflow failed: step 'fetch' raised KeyError: 'doc'. "
                f"The checkpoint (.checkpoint, seq=4) records 2 completed steps; {TAIL}"
            ),
        ),
        (
            {"fetch": ValueError()},
            2,
            (
                "workflow failed: step 'fetch' raised ValueError. "
                f"The checkpoint (.checkpoint, seq=4) records 2 completed steps; {TAIL}"
            ),
        ),
        (
            {"a": RuntimeError("a broke"), "b": ValueError("b broke")},
            1,
            (
                "workflow failed: 2 steps raised ('a', 'b'; see .errors); the first, 'a', raised "
                "RuntimeError: a broke. "
                f"The checkpoint (.checkpoint, seq=4) records 1 completed step; {TAIL}"
            ),
        ),
        (
            {"z": OSError(), "y": RuntimeError("y"), "x": RuntimeError("x")},
            0,
            (
                "workflow failed: 3 steps raised ('z', 'y', 'x'; see .errors); the first, 'z', "
                "raised OSError. "
                f"The checkpoint (.checkpoint, seq=4) records no completed step; {TAIL}"
            ),
        ),
    ],
    ids=[
        "none-recorded",
        "one-recorded",
        "several-recorded",
        "message-ends-a-sentence",
        "message-asks",
        "key-error",
        "empty-message",
        "two-failed",
        "three-failed",
    ],
)
def test_workflow_failed_message(
    errors: dict[str, BaseException], steps: int, message: str
) -> None:
    failed = WorkflowFailed(errors, _checkpoint(steps))
    assert str(failed) == message
    assert failed.errors == errors


class BadStrError(Exception):
    def __str__(self) -> str:
        raise ValueError


def test_workflow_failed_survives_an_exception_whose_str_raises() -> None:
    failed = WorkflowFailed({"s": BadStrError()}, _checkpoint(1, seq=1))
    assert str(failed) == (
        "workflow failed: step 's' raised BadStrError: <BadStrError whose str() raised "
        f"ValueError>. The checkpoint (.checkpoint, seq=1) records 1 completed step; {TAIL}"
    )


@pytest.mark.parametrize(
    ("steps", "recorded"),
    [(0, "no completed step"), (1, "1 completed step"), (2, "2 completed steps")],
)
def test_budget_exceeded_message(steps: int, recorded: str) -> None:
    budget = TokenUsage(llm_calls=3)
    error = BudgetExceeded(_checkpoint(steps, seq=2), TokenUsage(10, 5, 3), budget)
    assert str(error) == (
        "budget reached: llm_calls 3 of 3; no new step or retry was started. The checkpoint "
        f"(.checkpoint, seq=2) records {recorded}; resume from it with a larger budget "
        "to continue"
    )
