"""Conditional steps: ``when=`` skips a step, ``join=`` says what skipped dependencies do.

Every rule in both schedules (and with ``checkpoint_every="step"``): a falsy
condition skips the step, which never runs, has no output, is absent from its
dependants' ctx and is recorded in the checkpoint's ``skipped``; skipping
propagates under ``join="all"`` and stops at a ``join="any"`` step that has a
dependency that ran; the condition is evaluated once, only when the join rule
lets the step run, and never again on resume, unless the step or an ancestor is
invalidated. A condition that raises fails its step.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointMismatchError,
    ContextKeyError,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
    current_step,
)
from executionkit import events as ev
from executionkit.progress import ConsoleProgress

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

SCHEDULES = [
    pytest.param({"schedule": "batch"}, id="batch"),
    pytest.param({"schedule": "batch", "checkpoint_every": "step"}, id="batch-step"),
    pytest.param({"schedule": "eager"}, id="eager"),
    pytest.param({"schedule": "eager", "max_concurrency": 1}, id="eager-limit"),
]
COST = TokenUsage(100, 10, 1)


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


class Branches:
    """A classifier, two exclusive branches, a join of them, and a step after each branch.

    Counts every call of a step and of a condition.
    """

    def __init__(self, *, fail_report: bool = False) -> None:
        self.calls: Counter[str] = Counter()
        self.fail_report = fail_report
        self.seen: dict[str, list[str]] = {}

    def is_long(self, ctx: Mapping[str, Any]) -> bool:
        self.calls["is_long?"] += 1
        return bool(ctx["classify"] == "long")

    def is_short(self, ctx: Mapping[str, Any]) -> bool:
        self.calls["is_short?"] += 1
        return bool(ctx["classify"] == "short")

    def step(self, name: str, *, is_async: bool = False) -> Callable[[Mapping[str, Any]], Any]:
        def run(ctx: Mapping[str, Any]) -> Any:
            self.calls[name] += 1
            self.seen[name] = list(ctx)
            if name == "report" and self.fail_report:
                msg = "report failed"
                raise RuntimeError(msg)
            if name == "classify":
                return PatternResult("long" if len(ctx["doc"]) > 10 else "short", cost=COST)
            return PatternResult(f"{name} output", cost=COST)

        if not is_async:
            return run

        async def run_async(ctx: Mapping[str, Any]) -> Any:
            await asyncio.sleep(0)
            return run(ctx)

        return run_async

    def workflow(self, *, version: str | None = None) -> Workflow:
        return Workflow(
            [
                Step("classify", self.step("classify"), version=version),
                Step(
                    "summarize",
                    self.step("summarize", is_async=True),
                    depends_on=("classify",),
                    when=self.is_long,
                ),
                Step(
                    "answer",
                    self.step("answer", is_async=True),
                    depends_on=("classify",),
                    when=self.is_short,
                ),
                Step("polish", self.step("polish"), depends_on=("summarize",)),
                Step(
                    "report",
                    self.step("report", is_async=True),
                    depends_on=("polish", "answer"),
                    join="any",
                ),
            ]
        )


# --- definition -----------------------------------------------------------------------------


def test_when_must_be_a_plain_function() -> None:
    async def decide(ctx: Mapping[str, Any]) -> bool:
        return True

    with pytest.raises(WorkflowDefinitionError, match=r"step 'b': when must be a plain function"):
        Step("b", lambda ctx: 1, when=decide)
    with pytest.raises(WorkflowDefinitionError, match=r"step 'b': when must be a function"):
        Step("b", lambda ctx: 1, when=True)  # type: ignore[arg-type]


def test_join_must_be_all_or_any() -> None:
    with pytest.raises(
        WorkflowDefinitionError, match=r"^step 'b': join must be 'all' or 'any', got 'either'$"
    ):
        Step("b", lambda ctx: 1, join="either")  # type: ignore[arg-type]


def test_repr_shows_a_condition_and_a_join() -> None:
    def ok(ctx: Mapping[str, Any]) -> bool:
        return True

    text = repr(Step("b", print, when=ok, join="any"))
    assert f"when={ok!r}" in text
    assert "join='any'" in text
    assert "when" not in repr(Step("b", print))


# --- the exclusive branches and the join ----------------------------------------------------


@pytest.mark.parametrize("options", SCHEDULES)
@pytest.mark.parametrize(("doc", "taken", "not_taken"), [("short", "answer", "summarize")])
async def test_exclusive_branches_join_runs_exactly_once(
    options: dict[str, Any], doc: str, taken: str, not_taken: str
) -> None:
    branches = Branches()
    saved: list[WorkflowCheckpoint] = []
    result = await branches.workflow().run({"doc": doc}, checkpoint_fn=saved.append, **options)
    assert list(result.outputs) == ["classify", "answer", "report"]
    assert dict(result.skipped) == {
        "summarize": "condition is_long returned False",
        "polish": "dependency 'summarize' was skipped",
    }
    assert result.executed == ("classify", "answer", "report")
    assert result.cost == TokenUsage(300, 30, 3)
    assert branches.calls == Counter(
        {"classify": 1, "is_long?": 1, "is_short?": 1, "answer": 1, "report": 1}
    )
    # The skipped branch is absent from the join's ctx.
    assert branches.seen["report"] == ["doc", "classify", "answer"]
    final = saved[-1]
    assert dict(final.skipped) == dict(result.skipped)
    assert set(final.step_info) == {"classify", "answer", "report", "summarize", "polish"}
    assert final.cost == result.cost
    assert round_trip(final) == final


@pytest.mark.parametrize("options", SCHEDULES)
async def test_the_other_branch(options: dict[str, Any]) -> None:
    branches = Branches()
    result = await branches.workflow().run({"doc": "a long document"}, **options)
    assert list(result.outputs) == ["classify", "summarize", "polish", "report"]
    assert dict(result.skipped) == {"answer": "condition is_short returned False"}
    assert branches.seen["report"] == ["doc", "classify", "summarize", "polish"]


@pytest.mark.parametrize("options", SCHEDULES)
async def test_join_any_is_skipped_only_when_every_dependency_was(
    options: dict[str, Any],
) -> None:
    calls: Counter[str] = Counter()

    def no(ctx: Mapping[str, Any]) -> bool:
        calls["no"] += 1
        return False

    def never(ctx: Mapping[str, Any]) -> bool:  # pragma: no cover - must not be called
        calls["never"] += 1
        return True

    workflow = Workflow(
        [
            Step("a", lambda ctx: 1, when=no),
            Step("b", lambda ctx: 2, when=no),
            Step("both", lambda ctx: 3, depends_on=("a", "b"), join="any", when=never),
            Step("after", lambda ctx: 4, depends_on=("both",), join="any"),
            Step("free", lambda ctx: 5),
        ]
    )
    result = await workflow.run(**options)
    assert dict(result.outputs) == {"free": 5}
    assert dict(result.skipped) == {
        "a": "condition no returned False",
        "b": "condition no returned False",
        "both": "every dependency was skipped ('a', 'b')",
        "after": "every dependency was skipped ('both')",
    }
    assert calls == Counter({"no": 2})


@pytest.mark.parametrize("options", SCHEDULES)
async def test_join_all_skips_on_any_skipped_dependency_without_asking_the_condition(
    options: dict[str, Any],
) -> None:
    asked: list[str] = []

    def ask(name: str) -> Callable[[Mapping[str, Any]], bool]:
        def condition(ctx: Mapping[str, Any]) -> bool:
            asked.append(name)
            return name != "b"

        return condition

    workflow = Workflow(
        [
            Step("a", lambda ctx: 1, when=ask("a")),
            Step("b", lambda ctx: 2, when=ask("b")),
            Step("c", lambda ctx: 3, depends_on=("a", "b"), when=ask("c")),
            Step("d", lambda ctx: 4, depends_on=("c",)),
            Step("e", lambda ctx: 5, depends_on=("a",), when=ask("e")),
        ]
    )
    result = await workflow.run(**options)
    assert dict(result.outputs) == {"a": 1, "e": 5}
    assert dict(result.skipped) == {
        "b": "condition condition returned False",
        "c": "dependency 'b' was skipped",
        "d": "dependency 'c' was skipped",
    }
    assert sorted(asked) == ["a", "b", "e"]


@pytest.mark.parametrize(
    ("verdict", "shown"),
    [(0, "0"), ("", "''"), (None, "None"), ([], "[]"), (False, "False")],
)
async def test_every_falsy_result_skips_and_is_shown_in_the_reason(
    verdict: object, shown: str
) -> None:
    def check(ctx: Mapping[str, Any]) -> object:
        return verdict

    result = await Workflow([Step("a", lambda ctx: 1, when=check)]).run()
    assert dict(result.skipped) == {"a": f"condition check returned {shown}"}
    assert dict(result.outputs) == {}


async def test_the_condition_gets_the_ctx_the_step_would_get() -> None:
    seen: list[tuple[list[str], Any]] = []

    def look(ctx: Mapping[str, Any]) -> bool:
        seen.append((list(ctx), ctx["a"]))
        with pytest.raises(TypeError, match="read-only"):
            ctx["x"] = 1  # type: ignore[index]
        with pytest.raises(ContextKeyError, match="add 'other' to depends_on"):
            ctx["other"]
        return True

    def step_b(ctx: Mapping[str, Any]) -> list[str]:
        return list(ctx)

    workflow = Workflow(
        [
            Step("a", lambda ctx: "A"),
            Step("other", lambda ctx: "O"),
            Step("b", step_b, depends_on=("a",), when=look),
        ]
    )
    result = await workflow.run({"key": 1})
    assert seen == [(["key", "a"], "A")]
    assert result.outputs["b"] == ["key", "a"]


async def test_reading_a_skipped_dependency_says_it_was_skipped() -> None:
    read: dict[str, object] = {}

    def join(ctx: Mapping[str, Any]) -> str:
        read["in"] = "a" in ctx
        read["get"] = ctx.get("a", "absent")
        read["len"] = len(ctx)
        read["keys"] = list(ctx)
        return ctx["a"]  # type: ignore[no-any-return]

    workflow = Workflow(
        [
            Step("a", lambda ctx: 1, when=lambda ctx: False),
            Step("b", lambda ctx: 2),
            Step("join", join, depends_on=("a", "b"), join="any"),
        ]
    )
    with pytest.raises(WorkflowFailed) as info:
        await workflow.run()
    error = info.value.errors["join"]
    assert isinstance(error, ContextKeyError)
    assert str(error) == (
        "step 'join' cannot read 'a' from ctx: a condition skipped step 'a', so it has no "
        "output; test for it with 'a' in ctx or ctx.get('a')"
    )
    assert read == {"in": False, "get": "absent", "len": 1, "keys": ["b"]}


# --- recording a skip -----------------------------------------------------------------------


@pytest.mark.parametrize("options", SCHEDULES)
async def test_a_skip_is_checkpointed_like_an_output(options: dict[str, Any]) -> None:
    saved: list[tuple[list[str], dict[str, str]]] = []
    workflow = Workflow(
        [
            Step("a", lambda ctx: 1),
            Step("b", lambda ctx: 2, depends_on=("a",), when=lambda ctx: ctx["a"] > 1),
            Step("c", lambda ctx: 3, depends_on=("b",)),
        ]
    )
    result = await workflow.run(
        checkpoint_fn=lambda cp: saved.append((list(cp.outputs), dict(cp.skipped))), **options
    )
    assert result.executed == ("a",)
    reason_b = "condition <lambda> returned False"
    assert saved == [
        (["a"], {}),
        (["a"], {"b": reason_b}),
        (["a"], {"b": reason_b, "c": "dependency 'b' was skipped"}),
    ]


async def test_a_skip_decided_mid_batch_is_in_a_progress_checkpoint() -> None:
    """A step saving progress while its batch-mate was skipped: the skip is in the save."""
    saved: list[WorkflowCheckpoint] = []
    release = asyncio.Event()

    async def long(ctx: Mapping[str, Any]) -> str:
        await current_step().save_progress({"page": 1})
        await release.wait()
        return "long"

    async def save(checkpoint: WorkflowCheckpoint) -> None:
        saved.append(checkpoint)
        release.set()

    workflow = Workflow([Step("long", long), Step("maybe", lambda ctx: 1, when=lambda ctx: False)])
    await workflow.run(checkpoint_fn=save)
    first = saved[0]
    assert dict(first.progress) == {"long": {"page": 1}}
    assert dict(first.skipped) == {"maybe": "condition <lambda> returned False"}
    assert set(first.step_info) == {"long", "maybe"}
    assert round_trip(first) == first


@pytest.mark.parametrize("options", SCHEDULES)
async def test_events_say_which_steps_were_skipped(options: dict[str, Any]) -> None:
    events: list[ev.Event] = []
    branches = Branches()
    await branches.workflow().run({"doc": "short"}, on_event=events.append, **options)
    skipped = [(e.step, e.reason) for e in events if isinstance(e, ev.StepSkipped)]
    assert skipped == [
        ("summarize", "condition is_long returned False"),
        ("polish", "dependency 'summarize' was skipped"),
    ]
    started = {e.step for e in events if isinstance(e, ev.StepStarted)}
    assert started == {"classify", "answer", "report"}
    finished = [e for e in events if isinstance(e, ev.RunFinished)]
    assert finished[0].executed == 3


async def test_console_progress_shows_skipped_steps() -> None:
    import io  # noqa: PLC0415

    stream = io.StringIO()
    clock = iter(range(100))
    progress = ConsoleProgress(stream, live=False, clock=lambda: float(next(clock)))
    await Branches().workflow().run({"doc": "short"}, on_event=progress, run_id="r")
    assert stream.getvalue().splitlines() == [
        "executionkit: run r started: 5 steps",
        "executionkit: classify finished in 1.0s; 1/5 done, 2.0s, 110 tokens in 1 call",
        (
            "executionkit: summarize skipped: condition is_long returned False; "
            "2/5 done (1 skipped), 3.0s, 110 tokens in 1 call"
        ),
        "executionkit: answer finished in 1.0s; 3/5 done (1 skipped), 5.0s, 220 tokens in 2 calls",
        (
            "executionkit: polish skipped: dependency 'summarize' was skipped; "
            "4/5 done (2 skipped), 6.0s, 220 tokens in 2 calls"
        ),
        "executionkit: report finished in 1.0s; 5/5 done (2 skipped), 8.0s, 330 tokens in 3 calls",
        "executionkit: run r finished; 5/5 done (2 skipped), 9.0s, 330 tokens in 3 calls",
    ]


# --- a condition that raises ----------------------------------------------------------------


@pytest.mark.parametrize("options", SCHEDULES)
async def test_a_raising_condition_fails_its_step(options: dict[str, Any]) -> None:
    def broken(ctx: Mapping[str, Any]) -> bool:
        msg = "no verdict"
        raise ValueError(msg)

    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [
            Step("a", lambda ctx: 1),
            Step("b", lambda ctx: 2, depends_on=("a",), when=broken),
            Step("c", lambda ctx: 3, depends_on=("b",)),
            Step("d", lambda ctx: 4, depends_on=("a",)),
            Step("e", lambda ctx: 5, depends_on=("d",)),
        ]
    )
    with pytest.raises(WorkflowFailed) as info:
        await workflow.run(checkpoint_fn=saved.append, on_error="continue", **options)
    assert list(info.value.errors) == ["b"]
    error = info.value.errors["b"]
    assert isinstance(error, ValueError)
    assert error.__notes__ == ["executionkit: the when condition of step 'b' raised"]
    checkpoint = info.value.checkpoint
    assert dict(checkpoint.errors) == {"b": "ValueError: no verdict"}
    assert dict(checkpoint.outputs) == {"a": 1, "d": 4, "e": 5}
    assert dict(checkpoint.skipped) == {}
    # Resuming evaluates the condition again: a failure is not a decision.
    fixed = Workflow(
        [
            Step("a", lambda ctx: 1),
            Step("b", lambda ctx: 2, depends_on=("a",), when=lambda ctx: True),
            Step("c", lambda ctx: 3, depends_on=("b",)),
            Step("d", lambda ctx: 4, depends_on=("a",)),
            Step("e", lambda ctx: 5, depends_on=("d",)),
        ]
    )
    result = await fixed.run(resume_from=round_trip(checkpoint), **options)
    assert result.executed == ("b", "c")


async def test_a_raising_condition_with_on_error_finish_stops_the_run() -> None:
    def broken(ctx: Mapping[str, Any]) -> bool:
        raise KeyError("x")

    events: list[ev.Event] = []
    workflow = Workflow(
        [
            Step("a", lambda ctx: 1, when=broken),
            Step("b", lambda ctx: 2),
            Step("c", lambda ctx: 3, depends_on=("b",)),
        ]
    )
    with pytest.raises(WorkflowFailed, match="'a'") as info:
        await workflow.run(on_event=events.append)
    assert dict(info.value.checkpoint.outputs) == {"b": 2}  # the batch-mate finished
    failed = [e.step for e in events if isinstance(e, ev.StepFailed)]
    assert failed == ["a"]


async def test_a_condition_returning_an_awaitable_fails_its_step() -> None:
    async def later() -> bool:
        return True

    workflow = Workflow([Step("a", lambda ctx: 1, when=lambda ctx: later())])
    with pytest.raises(WorkflowFailed) as info:
        await workflow.run()
    error = info.value.errors["a"]
    assert isinstance(error, TypeError)
    assert str(error) == (
        "step 'a': when returned an awaitable; a condition must be a plain function "
        "returning a truth value"
    )


@pytest.mark.parametrize("options", SCHEDULES)
async def test_a_condition_raising_keyboard_interrupt_checkpoints_first(
    options: dict[str, Any],
) -> None:
    def interrupt(ctx: Mapping[str, Any]) -> bool:
        raise KeyboardInterrupt

    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [
            Step("a", lambda ctx: 1),
            Step("skip", lambda ctx: 2, depends_on=("a",), when=lambda ctx: False),
            Step("b", lambda ctx: 3, depends_on=("skip",), join="any"),
            Step("c", lambda ctx: 3, depends_on=("a",), when=interrupt),
        ]
    )
    with pytest.raises(KeyboardInterrupt):
        await workflow.run(checkpoint_fn=saved.append, **options)
    last = saved[-1]
    assert dict(last.outputs) == {"a": 1}
    assert set(last.skipped) <= {"skip", "b"}
    assert "skip" in last.skipped or options.get("max_concurrency") is None


# --- resume ---------------------------------------------------------------------------------


@pytest.mark.parametrize("options", SCHEDULES)
async def test_a_recorded_skip_is_never_decided_again(options: dict[str, Any]) -> None:
    """A run that fails after its skips; resumed twice; each condition was called once."""
    branches = Branches(fail_report=True)
    workflow = branches.workflow()
    with pytest.raises(WorkflowFailed) as info:
        await workflow.run({"doc": "short"}, **options)
    checkpoint = round_trip(info.value.checkpoint)
    assert set(checkpoint.skipped) == {"summarize", "polish"}
    with pytest.raises(WorkflowFailed) as again:
        await workflow.run({"doc": "short"}, resume_from=checkpoint, **options)
    branches.fail_report = False
    events: list[ev.Event] = []
    result = await workflow.run(
        {"doc": "short"},
        resume_from=round_trip(again.value.checkpoint),
        on_event=events.append,
        **options,
    )
    assert branches.calls == Counter(
        {"classify": 1, "is_long?": 1, "is_short?": 1, "answer": 1, "report": 3}
    )
    assert result.executed == ("report",)
    assert result.restored == ("classify", "answer")
    assert dict(result.skipped) == {
        "summarize": "condition is_long returned False",
        "polish": "dependency 'summarize' was skipped",
    }
    restored = [e.step for e in events if isinstance(e, ev.StepRestored)]
    assert restored == ["classify", "summarize", "answer", "polish"]
    (started,) = [e for e in events if isinstance(e, ev.RunStarted)]
    assert started.recorded == ("classify", "summarize", "answer", "polish")
    assert not [e for e in events if isinstance(e, ev.StepSkipped)]


async def test_resuming_from_the_final_checkpoint_decides_nothing() -> None:
    branches = Branches()
    saved: list[WorkflowCheckpoint] = []
    workflow = branches.workflow()
    first = await workflow.run({"doc": "short"}, checkpoint_fn=saved.append)
    again: list[WorkflowCheckpoint] = []
    result = await workflow.run(
        {"doc": "short"}, resume_from=round_trip(saved[-1]), checkpoint_fn=again.append
    )
    assert again == []
    assert result.executed == ()
    assert dict(result.outputs) == dict(first.outputs)
    assert dict(result.skipped) == dict(first.skipped)
    assert result.cost == first.cost
    assert branches.calls["is_long?"] == branches.calls["is_short?"] == 1


async def test_a_step_after_a_recorded_skip_is_trusted() -> None:
    """A recorded output whose dependency is recorded as skipped is kept on resume."""
    branches = Branches()
    saved: list[WorkflowCheckpoint] = []
    await branches.workflow().run({"doc": "short"}, checkpoint_fn=saved.append)
    result = await branches.workflow().run({"doc": "short"}, resume_from=round_trip(saved[-1]))
    assert result.invalidated == {}
    assert result.restored == ("classify", "answer", "report")
    assert branches.calls["report"] == 1


@pytest.mark.parametrize("options", SCHEDULES)
async def test_invalidating_an_ancestor_decides_again(options: dict[str, Any]) -> None:
    branches = Branches()
    saved: list[WorkflowCheckpoint] = []
    await branches.workflow().run({"doc": "short"}, checkpoint_fn=saved.append, **options)
    result = await branches.workflow(version="2").run(
        {"doc": "a long document"}, resume_from=round_trip(saved[-1]), **options
    )
    assert dict(result.invalidated) == {
        "classify": "version changed from no version to '2'",
        "summarize": "recorded skip dropped: depends on invalidated step 'classify'",
        "answer": "depends on invalidated step 'classify'",
        "polish": "recorded skip dropped: depends on invalidated step 'summarize'",
        "report": "depends on invalidated step 'answer'",
    }
    assert list(result.outputs) == ["classify", "summarize", "polish", "report"]
    assert dict(result.skipped) == {"answer": "condition is_short returned False"}
    assert branches.calls["is_long?"] == branches.calls["is_short?"] == 2


async def test_a_version_bump_or_rerun_of_the_skipped_step_decides_it_again() -> None:
    asked: list[str] = []
    answer = {"value": False}

    def check(ctx: Mapping[str, Any]) -> bool:
        asked.append("check")
        return answer["value"]

    def workflow(version: str | None = None) -> Workflow:
        return Workflow(
            [
                Step("a", lambda ctx: 1),
                Step("b", lambda ctx: 2, depends_on=("a",), when=check, version=version),
                Step("c", lambda ctx: 3, depends_on=("b",)),
            ]
        )

    saved: list[WorkflowCheckpoint] = []
    await workflow().run(checkpoint_fn=saved.append)
    recorded = round_trip(saved[-1])
    assert dict(recorded.skipped) == {
        "b": "condition check returned False",
        "c": "dependency 'b' was skipped",
    }
    assert recorded.step_info["b"]["version"] is None
    answer["value"] = True
    bumped = await workflow("2").run(resume_from=recorded)
    assert dict(bumped.invalidated) == {
        "b": "recorded skip dropped: version changed from no version to '2'",
        "c": "recorded skip dropped: depends on invalidated step 'b'",
    }
    assert bumped.executed == ("b", "c")
    assert dict(bumped.skipped) == {}
    rerun = await workflow().run(resume_from=recorded, rerun=["b"])
    assert dict(rerun.invalidated)["b"] == "recorded skip dropped: rerun requested"
    assert rerun.executed == ("b", "c")
    assert asked == ["check", "check", "check"]


async def test_a_recorded_skip_of_a_step_the_workflow_lacks() -> None:
    saved: list[WorkflowCheckpoint] = []
    await Workflow(
        [Step("a", lambda ctx: 1), Step("gone", lambda ctx: 2, when=lambda ctx: False)]
    ).run(checkpoint_fn=saved.append)
    smaller = Workflow([Step("a", lambda ctx: 1)])
    with pytest.raises(
        CheckpointMismatchError,
        match=r"checkpoint records skips of steps this workflow does not have: 'gone'",
    ):
        await smaller.run(resume_from=saved[-1])
    result = await smaller.run(resume_from=saved[-1], unknown_steps="discard")
    assert result.discarded == ("gone",)
    assert dict(result.skipped) == {}


async def test_a_restored_skip_whose_condition_is_gone_is_refused_until_rerun() -> None:
    """A recorded skip of a step nothing skips any more is refused (issue 19); rerun runs it."""
    saved: list[WorkflowCheckpoint] = []
    await Workflow([Step("a", lambda ctx: 1, when=lambda ctx: False)]).run(
        checkpoint_fn=saved.append
    )
    grown = Workflow([Step("a", lambda ctx: 1), Step("b", lambda ctx: 2, depends_on=("a",))])
    with pytest.raises(CheckpointMismatchError, match=r"^checkpoint field 'skipped\.a' says"):
        await grown.run(resume_from=round_trip(saved[-1]))
    result = await grown.run(resume_from=round_trip(saved[-1]), rerun=["a"])
    assert dict(result.invalidated) == {"a": "recorded skip dropped: rerun requested"}
    assert result.executed == ("a", "b")


# --- interplay ------------------------------------------------------------------------------


async def test_a_cancelled_run_keeps_the_skips_decided_before() -> None:
    started = asyncio.Event()

    async def slow(ctx: Mapping[str, Any]) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"  # pragma: no cover

    saved: list[WorkflowCheckpoint] = []
    workflow = Workflow([Step("slow", slow), Step("maybe", lambda ctx: 1, when=lambda ctx: False)])
    task = asyncio.create_task(workflow.run(checkpoint_fn=saved.append))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert dict(saved[-1].skipped) == {"maybe": "condition <lambda> returned False"}
    resumed = await Workflow(
        [Step("slow", lambda ctx: "done"), Step("maybe", lambda ctx: 1, when=lambda ctx: True)]
    ).run(resume_from=round_trip(saved[-1]))
    assert resumed.executed == ("slow",)
    assert dict(resumed.skipped) == {"maybe": "condition <lambda> returned False"}


async def test_conditions_with_a_thread_executor() -> None:
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    with ThreadPoolExecutor(2) as pool:
        result = await Branches().workflow().run({"doc": "short"}, executor=pool)
    assert list(result.outputs) == ["classify", "answer", "report"]


async def test_a_budget_counts_nothing_for_skips() -> None:
    branches = Branches()
    result = await branches.workflow().run({"doc": "short"}, budget=TokenUsage(llm_calls=3))
    assert result.cost.llm_calls == 3


@pytest.mark.parametrize("kind", ["json", "jsonl", "sqlite"])
async def test_every_store_keeps_the_skips_and_resuming_from_it_decides_nothing(
    kind: str, tmp_path: Any
) -> None:
    from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore  # noqa: PLC0415

    store: JsonFileStore | JsonLinesStore | SQLiteStore
    if kind == "json":
        store = JsonFileStore(tmp_path / "run.json")
    elif kind == "jsonl":
        store = JsonLinesStore(tmp_path / "run.jsonl")
    else:
        store = SQLiteStore(tmp_path / "run.db", history=True)
    branches = Branches(fail_report=True)
    with pytest.raises(WorkflowFailed):
        await branches.workflow().run(
            {"doc": "short"}, checkpoint_fn=store, checkpoint_every="step", run_id="r"
        )
    loaded = store.load("r") if isinstance(store, SQLiteStore) else store.load()
    assert loaded is not None
    assert dict(loaded.skipped) == {
        "summarize": "condition is_long returned False",
        "polish": "dependency 'summarize' was skipped",
    }
    branches.fail_report = False
    result = await branches.workflow().run({"doc": "short"}, resume_from=loaded)
    assert result.executed == ("report",)
    assert branches.calls["is_long?"] == branches.calls["is_short?"] == 1
    if isinstance(store, SQLiteStore):
        for checkpoint in store.history("r"):
            assert set(checkpoint.step_info) == {*checkpoint.outputs, *checkpoint.skipped}


@pytest.mark.parametrize("options", SCHEDULES)
async def test_a_map_step_can_have_a_condition(options: dict[str, Any]) -> None:
    asked: list[str] = []
    items: list[str] = []

    def wanted(ctx: Mapping[str, Any]) -> bool:
        asked.append("wanted")
        return bool(ctx["mode"] == "map")

    def each(item: str, ctx: Mapping[str, Any]) -> str:
        items.append(item)
        return item.upper()

    workflow = Workflow(
        [
            Step("mode", lambda ctx: ctx["m"]),
            Step("docs", lambda ctx: ["a", "b"]),
            Step.map("each", each, over="docs", depends_on=("mode",), when=wanted),
            Step("after", lambda ctx: ctx.get("each"), depends_on=("each", "docs"), join="any"),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    skipped = await workflow.run({"m": "plain"}, checkpoint_fn=saved.append, **options)
    assert dict(skipped.skipped) == {"each": "condition wanted returned False"}
    assert skipped.outputs["after"] is None
    assert saved[-1].step_info["each"]["kind"] == "map"
    again = await workflow.run({"m": "plain"}, resume_from=round_trip(saved[-1]), **options)
    assert again.executed == ()
    assert (asked, items) == (["wanted"], [])
    ran = await workflow.run({"m": "map"}, **options)
    assert ran.outputs["after"] == ["A", "B"]
    assert sorted(items) == ["a", "b"]  # items run side by side, in threads


async def test_a_question_after_a_skipped_step_is_never_asked() -> None:
    workflow = Workflow(
        [
            Step("draft", lambda ctx: "text", when=lambda ctx: ctx["needed"]),
            Step.ask("approve", lambda ctx: f"publish {ctx['draft']}?", depends_on=("draft",)),
            Step("publish", lambda ctx: "done", depends_on=("approve",)),
        ]
    )
    result = await workflow.run({"needed": False})
    assert dict(result.pending) == {}
    assert dict(result.skipped) == {
        "draft": "condition <lambda> returned False",
        "approve": "dependency 'draft' was skipped",
        "publish": "dependency 'approve' was skipped",
    }
    asked = await workflow.run({"needed": True})
    assert dict(asked.pending) == {"approve": "publish text?"}
