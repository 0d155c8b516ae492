"""Sub-workflows: a step (or each item of a map) whose ``run`` is a `Workflow`.

The child's progress nests in the parent's checkpoints, taken through the
parent's ``checkpoint_fn``; resume continues the child where it stopped; its
token usage is counted once; the parent's budget, cancellation, failure policy
and versions reach through the nesting; the child's run_id is derived.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from executionkit import (
    BudgetExceeded,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit import events as ev


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


class Research:
    """A three-step child workflow that counts its calls and can fail at "read"."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.fail = False

    def step(self, name: str) -> Any:
        def run(ctx: Any) -> PatternResult[str]:
            self.calls[name] += 1
            if name == "read" and self.fail:
                raise RuntimeError("reader down")
            heard = ctx.get("topic", "?")
            return PatternResult(f"{name}({heard})", cost=TokenUsage(10, 1, 1))

        return run

    def workflow(self) -> Workflow:
        return Workflow(
            [
                Step("search", self.step("search")),
                Step("read", self.step("read"), depends_on=("search",)),
                Step("notes", self.step("notes"), depends_on=("read",)),
            ]
        )


def parent(child: Workflow, **options: Any) -> Workflow:
    return Workflow(
        [
            Step("topic", lambda ctx: PatternResult("llms", cost=TokenUsage(1, 1, 1))),
            Step("research", child, depends_on=("topic",), **options),
            Step(
                "essay",
                lambda ctx: f"essay on {ctx['research']['notes']}",
                depends_on=("research",),
            ),
        ]
    )


def test_the_output_is_the_childs_outputs_and_usage_is_counted_once() -> None:
    research = Research()
    result = parent(research.workflow()).run_sync()
    assert result.outputs["research"] == {
        "search": "search(llms)",
        "read": "read(llms)",
        "notes": "notes(llms)",
    }
    assert result.outputs["essay"] == "essay on notes(llms)"
    assert result.cost == TokenUsage(31, 4, 4)
    assert research.calls == Counter({"search": 1, "read": 1, "notes": 1})


def test_the_childs_progress_nests_in_the_parents_checkpoints() -> None:
    research = Research()
    saved: list[WorkflowCheckpoint] = []
    parent(research.workflow()).run_sync(checkpoint_fn=saved.append, run_id="p1")
    nested = [cp.children["research"]["checkpoint"] for cp in saved if "research" in cp.children]
    assert [list(child.outputs) for child in nested][-1] == ["search", "read", "notes"]
    assert all(child.run_id == "p1/research" for child in nested)
    assert any(list(child.outputs) == ["search"] for child in nested), "a checkpoint per step"
    # The parent's cost includes the child's spending as it goes.
    middle = next(cp for cp in saved if "research" in cp.children)
    assert middle.cost == TokenUsage(1, 1, 1) + middle.children["research"]["checkpoint"].cost
    assert middle.step_info["research"]["kind"] == "workflow"
    assert "research" not in saved[-1].children


@pytest.mark.parametrize("schedule", ["batch", "eager"])
def test_a_failed_child_resumes_where_it_stopped_with_exact_usage(schedule: str) -> None:
    research = Research()
    research.fail = True
    workflow = parent(research.workflow())
    with pytest.raises(WorkflowFailed) as caught:
        workflow.run_sync(schedule=schedule)  # type: ignore[arg-type]
    error = caught.value.errors["research"]
    assert isinstance(error, WorkflowFailed)
    assert "read" in error.errors
    checkpoint = round_trip(caught.value.checkpoint)
    child = checkpoint.children["research"]["checkpoint"]
    assert list(child.outputs) == ["search"]
    assert checkpoint.cost == TokenUsage(11, 2, 2)
    research.fail = False
    research.calls.clear()
    result = workflow.run_sync(resume_from=checkpoint, schedule=schedule)  # type: ignore[arg-type]
    assert research.calls == Counter({"read": 1, "notes": 1})
    assert result.cost == TokenUsage(31, 4, 4)
    assert result.outputs["essay"] == "essay on notes(llms)"


async def test_cancelling_the_parent_keeps_the_childs_finished_steps() -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()
    calls: Counter[str] = Counter()

    async def slow(ctx: Any) -> str:
        calls["slow"] += 1
        entered.set()
        await gate.wait()
        return "slow"

    def quick(ctx: Any) -> str:
        calls["quick"] += 1
        return "quick"

    child = Workflow(
        [
            Step("quick", quick),
            Step("slow", slow, depends_on=("quick",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("sub", child)])
    run = asyncio.ensure_future(workflow.run(checkpoint_fn=saved.append))
    await entered.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    last = round_trip(saved[-1])
    assert list(last.children["sub"]["checkpoint"].outputs) == ["quick"]
    gate.set()
    calls.clear()
    result = await workflow.run(resume_from=last)
    assert calls == Counter({"slow": 1})
    assert result.outputs["sub"] == {"quick": "quick", "slow": "slow"}


def test_the_parents_budget_bounds_the_child() -> None:
    research = Research()
    workflow = parent(research.workflow())
    with pytest.raises(BudgetExceeded) as caught:
        workflow.run_sync(budget=TokenUsage(llm_calls=2))
    checkpoint = round_trip(caught.value.checkpoint)
    assert research.calls == Counter({"search": 1})
    assert checkpoint.cost == TokenUsage(11, 2, 2)
    research.calls.clear()
    result = workflow.run_sync(resume_from=checkpoint, budget=TokenUsage(llm_calls=10))
    assert research.calls == Counter({"read": 1, "notes": 1})
    assert result.cost == TokenUsage(31, 4, 4)


def test_a_version_change_of_the_step_starts_the_child_over() -> None:
    research = Research()
    research.fail = True
    with pytest.raises(WorkflowFailed) as caught:
        parent(research.workflow(), version="v1").run_sync()
    research.fail = False
    research.calls.clear()
    result = parent(research.workflow(), version="v2").run_sync(
        resume_from=round_trip(caught.value.checkpoint)
    )
    assert research.calls == Counter({"search": 1, "read": 1, "notes": 1})
    assert result.invalidated == {
        "research": "sub-workflow progress dropped: version changed from 'v1' to 'v2'"
    }


def test_a_map_of_sub_workflows_keeps_each_items_child_apart() -> None:
    calls: Counter[str] = Counter()

    def summarise(ctx: Any) -> str:
        calls[ctx["item_key"]] += 1
        if ctx["item"] == "bad" and ctx["fail"]:
            raise ValueError("unreadable")
        return f"summary of {ctx['item']}"

    per_document = Workflow(
        [
            Step("length", lambda ctx: len(ctx["item"])),
            Step("summary", summarise, depends_on=("length",)),
        ]
    )
    workflow = Workflow([Step.map("documents", per_document, over="docs", key=str)])
    saved: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed) as caught:
        workflow.run_sync(
            {"docs": ["ab", "bad", "cde"], "fail": True},
            checkpoint_fn=saved.append,
            run_id="p",
            on_error="continue",
        )
    checkpoint = round_trip(caught.value.checkpoint)
    assert set(checkpoint.items["documents"]["outputs"]) == {"ab", "cde"}
    child = checkpoint.children["documents"]["items"]["bad"]
    assert child.run_id == "p/documents/bad"
    assert list(child.outputs) == ["length"]
    calls.clear()
    result = workflow.run_sync(
        {"docs": ["ab", "bad", "cde"], "fail": False}, resume_from=checkpoint
    )
    assert calls == Counter({"bad": 1})
    assert result.outputs["documents"] == [
        {"length": 2, "summary": "summary of ab"},
        {"length": 3, "summary": "summary of bad"},
        {"length": 3, "summary": "summary of cde"},
    ]


def test_child_events_reach_on_event_with_the_childs_run_id() -> None:
    seen: list[ev.Event] = []
    parent(Research().workflow()).run_sync(on_event=seen.append, run_id="p")
    child_steps = {
        e.step for e in seen if isinstance(e, ev.StepFinished) and e.run_id == "p/research"
    }
    assert child_steps == {"search", "read", "notes"}


def test_a_question_inside_a_child_suspends_the_parent_and_is_answered_by_path() -> None:
    calls: Counter[str] = Counter()

    def draft(ctx: Any) -> str:
        calls["draft"] += 1
        return f"draft on {ctx['topic']}"

    def final(ctx: Any) -> str:
        calls["final"] += 1
        return f"final ({ctx['approve']})"

    child = Workflow(
        [
            Step("draft", draft),
            Step.ask("approve", lambda ctx: {"draft": ctx["draft"]}, depends_on=("draft",)),
            Step("final", final, depends_on=("approve",)),
        ]
    )
    workflow = Workflow(
        [
            Step("topic", lambda ctx: "cats"),
            Step("research", child, depends_on=("topic",)),
            Step("publish", lambda ctx: ctx["research"]["final"], depends_on=("research",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    seen: list[ev.Event] = []
    first = workflow.run_sync(checkpoint_fn=saved.append, on_event=seen.append, run_id="p")
    assert dict(first.pending) == {"research/approve": {"draft": "draft on cats"}}
    assert list(first.outputs) == ["topic"]
    suspended = [e for e in seen if isinstance(e, ev.RunSuspended) and e.run_id == "p"]
    assert suspended[0].pending == ("research/approve",)
    checkpoint = round_trip(saved[-1])
    assert checkpoint.pending == {}
    assert "approve" in checkpoint.children["research"]["checkpoint"].pending
    with pytest.raises(RunArgumentError, match="no sub-workflow is waiting on: 'research/aprove'"):
        workflow.run_sync(resume_from=checkpoint, answers={"research/aprove": "yes"})
    again = workflow.run_sync(resume_from=checkpoint)
    assert dict(again.pending) == dict(first.pending)
    result = workflow.run_sync(resume_from=checkpoint, answers={"research/approve": "yes"})
    assert result.outputs["publish"] == "final (yes)"
    assert dict(result.pending) == {}
    assert calls == Counter({"draft": 1, "final": 1})


def test_questions_in_a_map_of_children_are_answered_one_item_at_a_time() -> None:
    per_document = Workflow([Step.ask("ok", lambda ctx: f"publish {ctx['item']}?")])
    workflow = Workflow([Step.map("docs", per_document, over="names")])
    saved: list[WorkflowCheckpoint] = []
    context = {"names": ["a", "b"]}
    first = workflow.run_sync(context, checkpoint_fn=saved.append)
    assert dict(first.pending) == {"docs/0/ok": "publish a?", "docs/1/ok": "publish b?"}
    second = workflow.run_sync(
        context,
        resume_from=round_trip(saved[-1]),
        answers={"docs/0/ok": "y"},
        checkpoint_fn=saved.append,
    )
    assert dict(second.pending) == {"docs/1/ok": "publish b?"}
    assert dict(round_trip(saved[-1]).items["docs"]["outputs"]) == {"0": {"ok": "y"}}
    third = workflow.run_sync(
        context, resume_from=round_trip(saved[-1]), answers={"docs/1/ok": "n"}
    )
    assert third.outputs["docs"] == [{"ok": "y"}, {"ok": "n"}]
    assert dict(third.pending) == {}


def test_a_step_that_became_a_sub_workflow_runs_again() -> None:
    saved: list[WorkflowCheckpoint] = []
    Workflow([Step("sub", lambda ctx: {"x": 1})]).run_sync(checkpoint_fn=saved.append)
    child = Workflow([Step("x", lambda ctx: 2)])
    result = Workflow([Step("sub", child)]).run_sync(resume_from=round_trip(saved[-1]))
    assert result.outputs["sub"] == {"x": 2}
    assert result.invalidated == {"sub": "kind changed from 'step' to 'workflow'"}
