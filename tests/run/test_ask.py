"""`Step.ask`: a question recorded in the checkpoint, answered by name on resume.

Every rule of the issue: the run suspends and returns normally with what
completed; answers are checked before anything runs; several questions; expiry
fails closed; invalidation asks again; questions survive JSON and every store;
and over random DAGs any order of answering runs each step exactly once.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

import executionkit._define._questions as questions
from executionkit import (
    CheckpointValueError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
)
from executionkit import events as ev
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path


SCHEDULES = ["batch", "eager"]


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


class Approval:
    """plan -> approve (ask) -> execute, and an independent side branch."""

    def __init__(self, **ask: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.saved: list[WorkflowCheckpoint] = []
        self.workflow = Workflow(
            [
                Step("plan", self.count("plan", lambda ctx: {"steps": ["a", "b"]})),
                Step.ask("approve", self.count("question", self.question), **ask),
                Step("side", self.count("side", lambda ctx: "independent")),
                Step(
                    "execute",
                    self.count("execute", lambda ctx: f"ran with {ctx['approve']!r}"),
                    depends_on=("approve",),
                ),
            ]
        )

    def question(self, ctx: Any) -> dict[str, Any]:
        return {"approve this plan?": ctx["plan"]}

    def count(self, name: str, fn: Any) -> Any:
        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return fn(*args)

        return counted

    def run(self, **options: Any) -> Any:
        return self.workflow.run_sync(checkpoint_fn=self.saved.append, **options)


def approval(**ask: Any) -> Approval:
    return Approval(depends_on=("plan",), **ask)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_question_suspends_the_run_which_returns_what_completed(schedule: str) -> None:
    flow = approval()
    seen: list[ev.Event] = []
    result = flow.run(schedule=schedule, on_event=seen.append)
    assert dict(result.pending) == {"approve": {"approve this plan?": {"steps": ["a", "b"]}}}
    assert dict(result.outputs) == {"plan": {"steps": ["a", "b"]}, "side": "independent"}
    assert flow.calls == Counter({"plan": 1, "question": 1, "side": 1})
    last = flow.saved[-1]
    entry = last.pending["approve"]
    assert entry["question"] == {"approve this plan?": {"steps": ["a", "b"]}}
    assert entry["expires_at"] is None
    assert datetime.fromisoformat(entry["asked_at"]).tzinfo is not None
    assert last.step_info["approve"]["kind"] == "ask"
    assert "approve" not in last.outputs
    kinds = [type(e).__name__ for e in seen]
    assert "QuestionAsked" in kinds
    assert kinds[-1] == "RunSuspended"
    assert "RunFinished" not in kinds
    assert "RunFailed" not in kinds
    suspended = seen[-1]
    assert isinstance(suspended, ev.RunSuspended)
    assert suspended.pending == ("approve",)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_answer_becomes_the_output_and_only_the_rest_runs(schedule: str) -> None:
    flow = approval()
    flow.run(schedule=schedule)
    checkpoint = round_trip(flow.saved[-1])
    flow.calls.clear()
    seen: list[ev.Event] = []
    result = flow.run(
        resume_from=checkpoint,
        answers={"approve": {"ok": True}},
        schedule=schedule,
        on_event=seen.append,
    )
    assert result.outputs["approve"] == {"ok": True}
    assert result.outputs["execute"] == "ran with {'ok': True}"
    assert dict(result.pending) == {}
    assert flow.calls == Counter({"execute": 1})
    assert result.cost == TokenUsage()
    assert result.executed == ("execute",)
    assert ("QuestionAnswered", "approve") in [
        (type(e).__name__, getattr(e, "step", None)) for e in seen
    ]
    assert "approve" in flow.saved[-1].outputs
    assert flow.saved[-1].pending == {}
    # The answer is new in the resumed run's first checkpoint, so stores write it.
    resumed_first = next(cp for cp in flow.saved if cp.seq == checkpoint.seq + 1)
    assert resumed_first.new_outputs[0] == "approve"


def test_resuming_without_answers_keeps_the_question_and_never_asks_again() -> None:
    flow = approval()
    flow.run()
    again = flow.run(resume_from=round_trip(flow.saved[-1]))
    assert dict(again.pending) == {"approve": {"approve this plan?": {"steps": ["a", "b"]}}}
    assert flow.calls["question"] == 1
    first_asked = next(cp for cp in flow.saved if cp.pending)
    assert flow.saved[-1].pending["approve"] == first_asked.pending["approve"]


def test_two_questions_one_answered_the_other_still_pending() -> None:
    calls: Counter[str] = Counter()

    def after(name: str) -> Any:
        def run(ctx: Any) -> str:
            calls[name] += 1
            return name

        return run

    workflow = Workflow(
        [
            Step.ask("legal", lambda ctx: "ok to publish?"),
            Step.ask("budget", lambda ctx: "ok to spend?"),
            Step("publish", after("publish"), depends_on=("legal",)),
            Step("spend", after("spend"), depends_on=("budget",)),
            Step("report", after("report"), depends_on=("publish", "spend")),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    first = workflow.run_sync(checkpoint_fn=saved.append)
    assert list(first.pending) == ["legal", "budget"]
    second = workflow.run_sync(
        resume_from=round_trip(saved[-1]), answers={"budget": "yes"}, checkpoint_fn=saved.append
    )
    assert list(second.pending) == ["legal"]
    assert calls == Counter({"spend": 1})
    third = workflow.run_sync(resume_from=round_trip(saved[-1]), answers={"legal": "fine"})
    assert dict(third.pending) == {}
    assert calls == Counter({"spend": 1, "publish": 1, "report": 1})
    assert third.outputs["report"] == "report"


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        ({"aprove": 1}, "'aprove' (no such step; did you mean 'approve'?)"),
        ({"plan": 1}, "'plan' (not an ask step)"),
    ],
)
def test_an_answer_for_a_step_not_waiting_raises_before_anything_runs(
    answers: dict[str, Any], reason: str
) -> None:
    flow = approval()
    flow.run()
    checkpoint = flow.saved[-1]
    count = len(flow.saved)
    flow.calls.clear()
    with pytest.raises(RunArgumentError) as caught:
        flow.run(resume_from=checkpoint, answers={**answers, "approve": "yes"})
    assert str(caught.value) == (
        f"answers given for steps that are not waiting for one: {reason}; the questions "
        f"pending in resume_from: 'approve'"
    )
    assert flow.calls == Counter()
    assert len(flow.saved) == count


def test_an_answer_for_an_answered_or_unasked_question_is_refused() -> None:
    flow = approval()
    flow.run()
    flow.run(resume_from=flow.saved[-1], answers={"approve": "yes"})
    with pytest.raises(RunArgumentError, match=r"'approve' \(already answered\)"):
        flow.run(resume_from=flow.saved[-1], answers={"approve": "again"})
    fresh = approval()
    with pytest.raises(RunArgumentError, match=r"'approve' \(not asked yet\); .*: none"):
        fresh.run(answers={"approve": "early"})
    assert fresh.calls == Counter()


def test_a_check_that_raises_is_raised_and_nothing_changes() -> None:
    def must_say_yes(answer: object) -> bool:
        if answer not in ("yes", "no"):
            msg = f"answer yes or no, not {answer!r}"
            raise ValueError(msg)
        return answer == "yes"

    flow = approval(check=must_say_yes)
    flow.run()
    checkpoint = flow.saved[-1]
    count = len(flow.saved)
    flow.calls.clear()
    with pytest.raises(ValueError, match="answer yes or no, not 'maybe'") as caught:
        flow.run(resume_from=checkpoint, answers={"approve": "maybe"})
    assert caught.value.__notes__ == ["executionkit: check of step 'approve' refused the answer"]
    assert flow.calls == Counter()
    assert len(flow.saved) == count
    result = flow.run(resume_from=checkpoint, answers={"approve": "yes"})
    assert result.outputs["approve"] is True


def test_an_answer_that_is_not_json_data_is_refused_before_anything_runs() -> None:
    flow = approval()
    flow.run()
    flow.calls.clear()
    with pytest.raises(CheckpointValueError, match="answer of step 'approve'"):
        flow.run(resume_from=flow.saved[-1], answers={"approve": {"when": {1, 2}}})
    assert flow.calls == Counter()


def test_an_expired_answer_fails_the_ask_step_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    monkeypatch.setattr(questions, "utc_now", lambda: now)
    flow = approval(expires_after=timedelta(hours=1))
    flow.run()
    entry = flow.saved[-1].pending["approve"]
    assert entry["asked_at"] == "2026-12-01T09:00:00+00:00"
    assert entry["expires_at"] == "2026-12-01T10:00:00+00:00"
    now = datetime(2026, 12, 1, 10, 0, 1, tzinfo=UTC)
    flow.calls.clear()
    with pytest.raises(WorkflowFailed) as caught:
        flow.run(resume_from=round_trip(flow.saved[-1]), answers={"approve": "yes"})
    error = caught.value.errors["approve"]
    assert isinstance(error, TimeoutError)
    assert str(error) == (
        "step 'approve': the question expired at 2026-12-01T10:00:00+00:00, before the answer "
        "given at 2026-12-01T10:00:01+00:00; rerun=['approve'] asks it again"
    )
    assert flow.calls["execute"] == 0
    assert "approve" not in caught.value.checkpoint.outputs
    # In time, the same answer is taken.
    now = datetime(2026, 12, 1, 9, 59, tzinfo=UTC)
    result = flow.run(resume_from=round_trip(flow.saved[-1]), answers={"approve": "yes"})
    assert result.outputs["approve"] == "yes"


def test_an_invalidated_ancestor_asks_again() -> None:
    flow = approval()
    flow.run()
    changed = Workflow(
        [
            Step("plan", lambda ctx: {"steps": ["c"]}, version="v2"),
            Step.ask(
                "approve", lambda ctx: {"approve this plan?": ctx["plan"]}, depends_on=("plan",)
            ),
            Step("side", lambda ctx: "independent"),
            Step("execute", lambda ctx: "x", depends_on=("approve",)),
        ]
    )
    checkpoint = round_trip(flow.saved[-1])
    with pytest.raises(RunArgumentError, match=r"'approve' \(not asked yet\)"):
        changed.run_sync(resume_from=checkpoint, answers={"approve": "yes"})
    result = changed.run_sync(resume_from=checkpoint)
    assert dict(result.pending) == {"approve": {"approve this plan?": {"steps": ["c"]}}}
    assert result.invalidated == {
        "plan": "version changed from no version to 'v2'",
        "approve": "pending question dropped: depends on invalidated step 'plan'",
    }


def test_a_question_that_is_not_json_data_fails_the_step_naming_the_path() -> None:
    workflow = Workflow([Step.ask("pick", lambda ctx: {"options": [1, {2, 3}]})])
    with pytest.raises(WorkflowFailed) as caught:
        workflow.run_sync()
    error = caught.value.errors["pick"]
    assert isinstance(error, CheckpointValueError)
    assert "question of step 'pick'" in str(error)
    assert "['options'][1]" in str(error)
    assert caught.value.checkpoint.pending == {}


def test_a_question_function_that_raises_fails_the_step() -> None:
    def broken(ctx: Any) -> str:
        raise KeyError("draft")

    with pytest.raises(WorkflowFailed) as caught:
        Workflow([Step.ask("pick", broken)]).run_sync()
    assert isinstance(caught.value.errors["pick"], KeyError)


def test_definition_errors_name_the_step() -> None:
    async def question(ctx: Any) -> str:
        return "?"

    with pytest.raises(WorkflowDefinitionError, match=r"step 'q': the question must be a plain"):
        Step.ask("q", question)
    with pytest.raises(WorkflowDefinitionError, match=r"step 'q': check must be callable"):
        Step.ask("q", lambda ctx: "?", check="yes")  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match=r"step 'q': expires_after must be"):
        Step.ask("q", lambda ctx: "?", expires_after=-1)
    with pytest.raises(WorkflowDefinitionError, match=r"positive duration"):
        Step.ask("q", lambda ctx: "?", expires_after=timedelta(0))
    with pytest.raises(RunArgumentError, match="answers must be a dict"):
        Workflow([Step.ask("q", lambda ctx: "?")]).run_sync(answers=["q"])  # type: ignore[arg-type]
    assert repr(Step.ask("q", str)).startswith("Step.ask(name='q', question=")


# --- the question is plain JSON in every store, answered from another process ---------------


def stores(tmp_path: Path, uri: str) -> list[tuple[str, Any]]:
    return [
        ("json-file", lambda: JsonFileStore(tmp_path / "cp.json")),
        ("json-lines", lambda: JsonLinesStore(tmp_path / "cp.jsonl")),
        ("sqlite", lambda: SQLiteStore(tmp_path / "cp.db")),
        ("postgres", lambda: PostgresStore(uri)),
    ]


def test_every_store_keeps_the_question_for_another_process(tmp_path: Path, pg_uri: str) -> None:
    for kind, make in stores(tmp_path, pg_uri):
        flow = approval(expires_after=3600)
        writer = make()
        flow.workflow.run_sync(checkpoint_fn=writer, run_id=f"run-{kind}")
        reader = make()  # a fresh store object: what another process would open
        loaded = reader.load(f"run-{kind}") if hasattr(reader, "run_ids") else reader.load()
        assert isinstance(loaded, WorkflowCheckpoint), kind
        entry = loaded.pending["approve"]
        assert entry["question"] == {"approve this plan?": {"steps": ["a", "b"]}}, kind
        assert entry["expires_at"] is not None, kind
        result = flow.workflow.run_sync(
            resume_from=loaded, answers={"approve": "go"}, checkpoint_fn=reader
        )
        assert result.outputs["execute"] == "ran with 'go'", kind
        for store in (writer, reader):
            close = getattr(store, "close", None)
            if close is not None:
                close()


# --- any order of answering, over random DAGs -------------------------------------------------


def random_dag(seed: int) -> tuple[list[str], dict[str, tuple[str, ...]], set[str]]:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(3, 10))]
    deps = {
        name: tuple(rng.sample(names[:i], k=min(i, rng.randint(0, 2))))
        for i, name in enumerate(names)
    }
    asks = {name for name in names if rng.random() < 0.35}
    return names, deps, asks


def dag_workflow(seed: int, calls: Counter[str]) -> Workflow:
    names, deps, asks = random_dag(seed)

    def body(name: str) -> Any:
        def run(ctx: Any) -> PatternResult[str]:
            calls[name] += 1
            heard = ",".join(str(ctx[dep]) for dep in deps[name])
            return PatternResult(f"{name}({heard})", cost=TokenUsage(1, len(heard), 1))

        return run

    def question(name: str) -> Any:
        return lambda ctx: f"{name}?"

    return Workflow(
        [
            Step.ask(name, question(name), depends_on=deps[name])
            if name in asks
            else Step(name, body(name), depends_on=deps[name])
            for name in names
        ]
    )


@pytest.mark.parametrize("seed", range(40))
def test_any_order_of_answering_runs_each_step_once_and_ends_as_answering_at_once(
    seed: int,
) -> None:
    _, _, asks = random_dag(seed)
    answer = {name: f"answer to {name}" for name in asks}
    # Reference: answer every question as soon as it is asked.
    reference_calls: Counter[str] = Counter()
    reference = dag_workflow(seed, reference_calls)
    saved: list[WorkflowCheckpoint] = []
    result = reference.run_sync(checkpoint_fn=saved.append)
    while result.pending:
        result = reference.run_sync(
            resume_from=saved[-1],
            answers={name: answer[name] for name in result.pending},
            checkpoint_fn=saved.append,
        )
    # Now answer one pending question at a time, in a random order, through JSON.
    rng = random.Random(seed + 1000)
    calls: Counter[str] = Counter()
    workflow = dag_workflow(seed, calls)
    saved = []
    current = workflow.run_sync(checkpoint_fn=saved.append)
    while current.pending:
        name = rng.choice(sorted(current.pending))
        current = workflow.run_sync(
            resume_from=round_trip(saved[-1]),
            answers={name: answer[name]},
            checkpoint_fn=saved.append,
        )
    assert current.outputs == result.outputs
    assert current.cost == result.cost
    assert all(count == 1 for count in calls.values())
    assert calls == reference_calls


def test_an_ask_step_never_reports_a_start_without_an_end() -> None:
    """Asked or still pending, an ask step emits no StepStarted: QuestionAsked says it all."""
    workflow = Workflow([Step.ask("approve", lambda ctx: "ok?")])
    saved: list[WorkflowCheckpoint] = []
    first: list[ev.Event] = []
    workflow.run_sync(checkpoint_fn=saved.append, on_event=first.append)
    again: list[ev.Event] = []
    workflow.run_sync(resume_from=saved[-1], on_event=again.append)
    assert [type(e).__name__ for e in first] == [
        "RunStarted",
        "QuestionAsked",
        "CheckpointTaken",
        "RunSuspended",
    ]
    assert [type(e).__name__ for e in again] == ["RunStarted", "RunSuspended"]
