"""Deadlines that act: `Step.ask(..., expires_after=..., default=VALUE)`.

Once a question's deadline has passed, a resume takes ``default`` as the answer,
recorded as given by the deadline (``answered_by: "deadline"`` in ``step_info``,
kept by every later checkpoint and every store); without a default the ask step
fails closed. An answer given in time wins; one given late fails as it always did.
The clock is the questions' (`executionkit._define._questions.utc_now`).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

import executionkit._define._questions as questions
from executionkit import (
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
)
from executionkit import events as ev
from executionkit.stores import JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

ASKED = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LATE = ASKED + timedelta(hours=2)


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = ASKED
        monkeypatch.setattr(questions, "utc_now", lambda: self.now)


def approval(calls: Counter[str], **ask: Any) -> Workflow:
    def counted(name: str, value: Any) -> Any:
        def run(ctx: Any) -> Any:
            calls[name] += 1
            return value(ctx)

        return run

    return Workflow(
        [
            Step("plan", counted("plan", lambda ctx: "the plan")),
            Step.ask(
                "approve", lambda ctx: f"approve {ctx['plan']}?", depends_on=("plan",), **ask
            ),
            Step(
                "execute",
                counted("execute", lambda ctx: f"ran: {ctx['approve']}"),
                depends_on=("approve",),
            ),
            Step(
                "report",
                counted("report", lambda ctx: ctx["execute"].upper()),
                depends_on=("execute",),
            ),
        ]
    )


def test_past_the_deadline_a_resume_takes_the_default_said_by_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    calls: Counter[str] = Counter()
    flow = approval(calls, expires_after=3600, default="rejected")
    saved: list[WorkflowCheckpoint] = []
    assert dict(flow.run_sync(checkpoint_fn=saved.append).pending) == {
        "approve": "approve the plan?"
    }
    clock.now = LATE
    events: list[Any] = []
    result = flow.run_sync(
        resume_from=round_trip(saved[-1]), checkpoint_fn=saved.append, on_event=events.append
    )
    assert result.outputs["approve"] == "rejected"
    assert result.outputs["report"] == "RAN: REJECTED"
    assert calls == Counter({"plan": 1, "execute": 1, "report": 1})
    answered = [e for e in events if isinstance(e, ev.QuestionAnswered)]
    assert [(e.step, e.answered_by) for e in answered] == [("approve", "deadline")]
    last = round_trip(saved[-1])
    assert last.step_info["approve"]["answered_by"] == "deadline"
    assert dict(last.pending) == {}
    # Every later checkpoint still says so: rerun a later step from it.
    again = flow.run_sync(resume_from=last, rerun=["report"], checkpoint_fn=saved.append)
    assert again.executed == ("report",)
    assert round_trip(saved[-1]).step_info["approve"]["answered_by"] == "deadline"
    assert "answered_by" not in round_trip(saved[-1]).step_info["plan"]


def test_before_the_deadline_the_question_waits_and_an_answer_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    flow = approval(Counter(), expires_after=3600, default="rejected")
    saved: list[WorkflowCheckpoint] = []
    flow.run_sync(checkpoint_fn=saved.append)
    clock.now = ASKED + timedelta(minutes=59)
    still = flow.run_sync(resume_from=saved[-1])
    assert dict(still.pending) == {"approve": "approve the plan?"}
    answered = flow.run_sync(
        resume_from=saved[-1], answers={"approve": "approved"}, checkpoint_fn=saved.append
    )
    assert answered.outputs["report"] == "RAN: APPROVED"
    assert "answered_by" not in round_trip(saved[-1]).step_info["approve"]
    clock.now = LATE  # a person answered: the deadline passing later changes nothing
    rerun = flow.run_sync(resume_from=saved[-1], rerun=["report"])
    assert rerun.outputs["approve"] == "approved"


def test_an_answer_given_late_still_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    flow = approval(Counter(), expires_after=3600, default="rejected")
    saved: list[WorkflowCheckpoint] = []
    flow.run_sync(checkpoint_fn=saved.append)
    clock.now = LATE
    with pytest.raises(WorkflowFailed) as caught:
        flow.run_sync(resume_from=saved[-1], answers={"approve": "approved"})
    assert "before the answer given at" in str(caught.value.errors["approve"])


def test_without_a_default_a_resume_past_the_deadline_fails_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    calls: Counter[str] = Counter()
    flow = approval(calls, expires_after=3600)
    saved: list[WorkflowCheckpoint] = []
    flow.run_sync(checkpoint_fn=saved.append)
    clock.now = LATE
    with pytest.raises(WorkflowFailed) as caught:
        flow.run_sync(resume_from=saved[-1], checkpoint_fn=saved.append)
    error = caught.value.errors["approve"]
    assert isinstance(error, TimeoutError)
    assert str(error) == (
        "step 'approve': the question expired at 2026-12-01T10:00:00+00:00 without an answer "
        "(it has no default); rerun=['approve'] asks it again"
    )
    assert calls["execute"] == 0
    assert "approve" in caught.value.checkpoint.pending  # as a question answered late
    asked_again = flow.run_sync(resume_from=caught.value.checkpoint, rerun=["approve"])
    assert dict(asked_again.pending) == {"approve": "approve the plan?"}


def test_the_default_goes_through_check(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    flow = approval(Counter(), expires_after=60, default="no", check=str.upper)
    saved: list[WorkflowCheckpoint] = []
    flow.run_sync(checkpoint_fn=saved.append)
    clock.now = LATE
    assert flow.run_sync(resume_from=saved[-1]).outputs["approve"] == "NO"

    def refuse(answer: Any) -> Any:
        raise ValueError(f"not an answer: {answer!r}")

    strict = approval(Counter(), expires_after=60, default="no", check=refuse)
    saved = []
    clock.now = ASKED
    strict.run_sync(checkpoint_fn=saved.append)
    clock.now = LATE
    with pytest.raises(WorkflowFailed) as caught:
        strict.run_sync(resume_from=saved[-1])
    error = caught.value.errors["approve"]
    assert str(error) == "not an answer: 'no'"
    assert "refused its default answer" in " ".join(getattr(error, "__notes__", []))


def test_a_sub_workflow_s_question_takes_its_default_too(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    child = approval(Counter(), expires_after=3600, default="rejected")
    parent = Workflow(
        [
            Step("review", child),
            Step("done", lambda c: c["review"]["report"], depends_on=("review",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    assert dict(parent.run_sync(checkpoint_fn=saved.append).pending) == {
        "review/approve": "approve the plan?"
    }
    clock.now = LATE
    assert parent.run_sync(resume_from=saved[-1]).outputs["done"] == "RAN: REJECTED"


def test_stores_keep_who_answered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def opened(kind: str) -> Any:
        if kind == "sqlite":
            return SQLiteStore(tmp_path / "cp.db")
        return JsonLinesStore(tmp_path / "cp.jsonl")

    def latest(store: Any, kind: str) -> Any:
        return store.load(f"r-{kind}") if kind == "sqlite" else store.load()

    for kind in ("json-lines", "sqlite"):
        clock = Clock(monkeypatch)
        store = opened(kind)
        flow = approval(Counter(), expires_after=60, default="rejected")
        flow.run_sync(checkpoint_fn=store, run_id=f"r-{kind}")
        clock.now = LATE
        flow.run_sync(resume_from=latest(store, kind), checkpoint_fn=store)
        reopened = opened(kind)  # what another process would open
        final = latest(reopened, kind)
        assert final is not None
        assert final.step_info["approve"]["answered_by"] == "deadline", kind
        assert final.outputs["approve"] == "rejected", kind
        for each in (store, reopened):
            close = getattr(each, "close", None)
            if close is not None:
                close()


def test_bad_defaults_are_named() -> None:
    with pytest.raises(WorkflowDefinitionError, match="so it needs expires_after"):
        Step.ask("q", lambda ctx: "?", default="no")
    with pytest.raises(
        WorkflowDefinitionError, match=r"default of step 'q': .* is not plain data"
    ):
        Step.ask("q", lambda ctx: "?", expires_after=5, default={1, 2})
    assert "default='no'" in repr(Step.ask("q", lambda ctx: "?", expires_after=5, default="no"))
    assert "default=" not in repr(Step.ask("q", lambda ctx: "?", expires_after=5))


def test_the_plan_says_the_default_would_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    flow = approval(Counter(), expires_after=3600, default="rejected")
    saved: list[WorkflowCheckpoint] = []
    flow.run_sync(checkpoint_fn=saved.append)
    assert flow.plan(resume_from=saved[-1]).waiting == ("approve",)
    clock.now = LATE
    plan = flow.plan(resume_from=saved[-1])
    assert plan.answered == ("approve",)
    assert plan.waiting == ()
    assert plan.would_run == ("execute", "report")
    without = approval(Counter(), expires_after=3600)
    clock.now = ASKED
    saved = []
    without.run_sync(checkpoint_fn=saved.append)
    clock.now = LATE
    assert without.plan(resume_from=saved[-1]).waiting == ("approve",)  # the resume fails it


def test_console_progress_says_the_deadline_answered(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from executionkit.progress import ConsoleProgress  # noqa: PLC0415

    clock = Clock(monkeypatch)
    flow = approval(Counter(), expires_after=60, default="rejected")
    saved: list[WorkflowCheckpoint] = []
    flow.run_sync(checkpoint_fn=saved.append)
    clock.now = LATE
    flow.run_sync(resume_from=saved[-1], on_event=ConsoleProgress(live=False))
    assert (
        "executionkit: approve answered by its deadline (its default)" in capsys.readouterr().err
    )
