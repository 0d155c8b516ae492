"""Declared inputs: ``Workflow(steps, inputs=...)`` checks initial_context before any step runs."""

from __future__ import annotations

from typing import Any

import pytest

from executionkit import (
    RunArgumentError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
)


def summarize_flow(calls: list[str]) -> Workflow:
    def fetch(ctx: Any) -> str:
        calls.append("fetch")
        return str(ctx["document"]).upper()

    return Workflow(
        [
            Step("fetch", fetch),
            Step("summary", lambda ctx: ctx["fetch"][:3], depends_on=("fetch",)),
        ],
        inputs=("document", "language"),
    )


def test_declared_inputs_are_kept_in_order() -> None:
    """Workflow.inputs returns the declared keys as a tuple."""
    assert summarize_flow([]).inputs == ("document", "language")
    assert Workflow([Step("a", lambda ctx: 1)]).inputs == ()


async def test_a_missing_input_is_refused_before_any_step_runs() -> None:
    """The error lists every missing input and suggests the closest key given."""
    calls: list[str] = []
    with pytest.raises(
        RunArgumentError,
        match=(
            r"^initial_context lacks the workflow's declared inputs: 'document', 'language'; "
            r"did you mean 'documents'\?$"
        ),
    ):
        await summarize_flow(calls).run({"documents": "x"})
    assert calls == []


async def test_a_missing_input_is_refused_on_resume_too() -> None:
    """Resuming checks the declared inputs as a fresh run does."""
    calls: list[str] = []
    saved: list[WorkflowCheckpoint] = []
    flow = summarize_flow(calls)
    await flow.run({"document": "abc", "language": "en"}, checkpoint_fn=saved.append)
    with pytest.raises(RunArgumentError, match=r"declared inputs: 'language'$"):
        await flow.run({"document": "abc"}, resume_from=saved[0])
    assert calls == ["fetch"]


def test_run_sync_checks_declared_inputs() -> None:
    """The blocking twin checks the same way; with every input given the run completes."""
    flow = summarize_flow([])
    with pytest.raises(RunArgumentError, match=r"declared inputs: 'document', 'language'$"):
        flow.run_sync()
    assert flow.run_sync({"document": "abc", "language": "en"}).outputs["summary"] == "ABC"


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            "document",
            (
                r"^Workflow inputs must be a collection of initial-context key names such as a "
                r"tuple, got str 'document'$"
            ),
        ),
        (42, r"^Workflow inputs must be a collection .*, got int 42$"),
        ((1,), r"^Workflow inputs must be non-empty str, got int 1$"),
        (("",), r"^Workflow inputs must be non-empty str, got str ''$"),
        (("doc", "doc"), r"^Workflow inputs name 'doc' more than once$"),
        (
            ("fetch",),
            (
                r"^Workflow inputs 'fetch' are step names; an input is an initial-context key, "
                r"and those cannot share a name with a step$"
            ),
        ),
    ],
)
def test_bad_inputs_are_definition_errors(inputs: Any, message: str) -> None:
    """Inputs must be distinct non-empty str that are not step names."""
    with pytest.raises(WorkflowDefinitionError, match=message):
        Workflow([Step("fetch", lambda ctx: 1)], inputs=inputs)


async def test_an_unknown_rerun_name_gets_a_suggestion() -> None:
    """rerun with a misspelt step name suggests the step meant."""
    saved: list[WorkflowCheckpoint] = []
    flow = summarize_flow([])
    await flow.run({"document": "a", "language": "en"}, checkpoint_fn=saved.append)
    with pytest.raises(
        RunArgumentError,
        match=(
            r"^rerun names steps this workflow does not have: 'sumary'; "
            r"did you mean 'summary'\?$"
        ),
    ):
        await flow.run(
            {"document": "a", "language": "en"}, resume_from=saved[-1], rerun=["sumary"]
        )
