"""`Workflow.plan` and ``executionkit run --dry-run``: what a resume would do, run for nothing.

Table cases pin the plan of each kind of checkpoint; a property over seeded
random DAGs with conditions resumes from a random checkpoint after its plan and
checks that the plan said what the resume then did, step for step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from cli_runner import run_subprocess
from test_conditions_property import Harness, random_dag, round_trip

from executionkit import (
    CheckpointMismatchError,
    ResumePlan,
    RunArgumentError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

PROPERTY_SEEDS = range(150)


class Counted:
    """Step functions and conditions that count their calls; ``failing`` steps raise."""

    def __init__(self, *failing: object) -> None:
        self.calls: Counter[str] = Counter()
        self.failing = set(failing)

    def step(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        def run(ctx: Mapping[str, Any]) -> Any:
            self.calls[name] += 1
            if name in self.failing:
                msg = f"{name} failed"
                raise ValueError(msg)
            return f"{name}-output"

        return run

    def when(self, name: str, *, verdict: bool) -> Callable[[Mapping[str, Any]], bool]:
        def condition(ctx: Mapping[str, Any]) -> bool:
            self.calls[f"{name}?"] += 1
            return verdict

        return condition

    def item(self, name: str) -> Callable[[Any, Mapping[str, Any]], Any]:
        def run(item: Any, ctx: Mapping[str, Any]) -> Any:
            self.calls[f"{name}[{item}]"] += 1
            if item in self.failing:
                msg = f"item {item} failed"
                raise ValueError(msg)
            return item * 2

        return run


def chain(counted: Counted, *, version: str | None = None, extra: bool = False) -> Workflow:
    """``a -> b -> c``, with ``b`` at ``version``, and optionally a fourth step ``old``."""
    steps = [
        Step("a", counted.step("a")),
        Step("b", counted.step("b"), depends_on=("a",), version=version),
        Step("c", counted.step("c"), depends_on=("b",)),
    ]
    if extra:
        steps.append(Step("old", counted.step("old"), depends_on=("a",)))
    return Workflow(steps)


def checkpoints_of(workflow: Workflow, **options: Any) -> list[WorkflowCheckpoint]:
    """The checkpoints of one run of ``workflow`` (which may fail)."""
    saved: list[WorkflowCheckpoint] = []
    with contextlib.suppress(WorkflowFailed):
        workflow.run_sync(checkpoint_fn=saved.append, **options)
    return saved


def test_a_fresh_run_would_run_every_step() -> None:
    """Without resume_from every step would run, and nothing is restored."""
    counted = Counted()
    assert chain(counted).plan() == ResumePlan(would_run=("a", "b", "c"))
    assert counted.calls == Counter()


def test_a_completed_checkpoint_would_run_nothing() -> None:
    """Every output is restored."""
    final = checkpoints_of(chain(Counted()))[-1]
    counted = Counted()
    assert chain(counted).plan(resume_from=final) == ResumePlan(
        would_run=(), restored=("a", "b", "c")
    )
    assert counted.calls == Counter()


def test_a_failed_runs_checkpoint_would_run_the_failed_step_and_after() -> None:
    """The steps that completed are restored; the failed one would run again."""
    last = checkpoints_of(chain(Counted("b")))[-1]
    assert dict(last.errors) == {"b": "ValueError: b failed"}
    plan = chain(Counted()).plan(resume_from=last)
    assert plan == ResumePlan(would_run=("b", "c"), restored=("a",))


@pytest.mark.parametrize(
    ("version", "rerun", "invalidated"),
    [
        (
            None,
            ["b"],
            {"b": "rerun requested", "c": "depends on invalidated step 'b'"},
        ),
        (
            "2",
            None,
            {
                "b": "version changed from no version to '2'",
                "c": "depends on invalidated step 'b'",
            },
        ),
    ],
    ids=["rerun", "version-bump"],
)
def test_rerun_and_a_version_bump_invalidate_the_step_and_its_dependants(
    version: str | None, rerun: list[str] | None, invalidated: dict[str, str]
) -> None:
    """The reasons are those `run` reports in `WorkflowResult.invalidated`."""
    final = checkpoints_of(chain(Counted()))[-1]
    plan = chain(Counted(), version=version).plan(resume_from=final, rerun=rerun)
    assert plan == ResumePlan(would_run=("b", "c"), restored=("a",), invalidated=invalidated)
    result = chain(Counted(), version=version).run_sync(resume_from=final, rerun=rerun)
    assert dict(result.invalidated) == dict(plan.invalidated)


def test_a_removed_step_is_discarded_or_refused_as_run_does() -> None:
    """unknown_steps='discard' lists it; the default raises run's CheckpointMismatchError."""
    final = checkpoints_of(chain(Counted(), extra=True))[-1]
    plan = chain(Counted()).plan(resume_from=final, unknown_steps="discard")
    assert plan == ResumePlan(would_run=(), restored=("a", "b", "c"), discarded=("old",))
    with pytest.raises(CheckpointMismatchError, match="does not have: 'old'"):
        chain(Counted()).plan(resume_from=final)


def asking(counted: Counted) -> Workflow:
    return Workflow(
        [
            Step("a", counted.step("a")),
            Step.ask("approve", lambda ctx: f"approve {ctx['a']}?", depends_on=("a",)),
            Step("c", counted.step("c"), depends_on=("approve",)),
        ]
    )


def test_questions_that_would_be_asked_wait_or_are_answered() -> None:
    """A fresh run would ask; a suspended one waits, unless answers answers it."""
    assert asking(Counted()).plan() == ResumePlan(
        would_run=("a", "approve", "c"), questions=("approve",)
    )
    suspended = checkpoints_of(asking(Counted()))[-1]
    assert dict(suspended.pending)["approve"]["question"] == "approve a-output?"
    assert asking(Counted()).plan(resume_from=suspended) == ResumePlan(
        would_run=("c",), restored=("a",), waiting=("approve",)
    )
    answered = asking(Counted()).plan(resume_from=suspended, answers={"approve": True})
    assert answered == ResumePlan(would_run=("c",), restored=("a",), answered=("approve",))
    assert WorkflowCheckpoint.from_dict(suspended.to_dict()) == suspended


def test_an_answer_run_refuses_is_refused_with_runs_error() -> None:
    """An answer to a step that is not waiting raises what run raises, word for word."""
    suspended = checkpoints_of(asking(Counted()))[-1]
    with pytest.raises(RunArgumentError) as planned:
        asking(Counted()).plan(resume_from=suspended, answers={"a": 1})
    with pytest.raises(RunArgumentError) as ran:
        asking(Counted()).run_sync(resume_from=suspended, answers={"a": 1})
    assert str(planned.value) == str(ran.value)


def mapping(counted: Counted, over: str = "numbers") -> Workflow:
    return Workflow(
        [
            Step("numbers", lambda ctx: [1, 2, 3, 4]),
            Step.map("doubled", counted.item("doubled"), over=over),
            Step("total", counted.step("total"), depends_on=("doubled",)),
        ]
    )


def test_an_unfinished_map_lists_its_recorded_items_and_the_keys_left() -> None:
    """Items 0, 1 and 3 are recorded; item 2 (the one that failed) would run."""
    last = checkpoints_of(mapping(Counted(3)), on_error="continue")[-1]
    assert set(last.items["doubled"]["outputs"]) == {"0", "1", "3"}
    counted = Counted()
    plan = mapping(counted).plan(resume_from=last)
    assert plan == ResumePlan(
        would_run=("doubled", "total"), restored=("numbers",), items={"doubled": (3, ("2",))}
    )
    assert counted.calls == Counter()


def test_the_items_of_a_map_over_the_initial_context_are_known_too() -> None:
    """over names a key of initial_context: its keys are known without running."""
    workflow = Workflow([Step.map("doubled", Counted(3).item("doubled"), over="numbers")])
    last = checkpoints_of(workflow, initial_context={"numbers": [1, 3, 5]}, on_error="continue")[
        -1
    ]
    plan = workflow.plan({"numbers": [1, 3, 5, 7]}, resume_from=last)
    assert plan.items == {"doubled": (2, ("1", "3"))}


def branching(counted: Counted) -> Workflow:
    return Workflow(
        [
            Step("a", counted.step("a")),
            Step("d", counted.step("d"), depends_on=("a",), when=counted.when("d", verdict=False)),
            Step("e", counted.step("e"), depends_on=("d",)),
            Step("f", counted.step("f"), depends_on=("a",)),
        ]
    )


def test_steps_a_condition_decides_are_marked_and_no_condition_is_called() -> None:
    """d has a condition and e follows it: both may be skipped; the plan asks neither."""
    counted = Counted()
    assert branching(counted).plan() == ResumePlan(
        would_run=("a", "d", "e", "f"), may_skip=("d", "e")
    )
    final = checkpoints_of(branching(Counted()))[-1]
    plan = branching(counted).plan(resume_from=final, rerun=["a"])
    assert plan.would_run == ("a", "d", "e", "f")
    assert plan.may_skip == ("d", "e")
    assert plan.invalidated == {
        "a": "rerun requested",
        "d": "recorded skip dropped: depends on invalidated step 'a'",
        "e": "recorded skip dropped: depends on invalidated step 'd'",
        "f": "depends on invalidated step 'a'",
    }
    kept = branching(counted).plan(resume_from=final)
    assert kept.skipped == {
        "d": "condition condition returned False",
        "e": "dependency 'd' was skipped",
    }
    assert kept.restored == ("a", "f")
    assert counted.calls == Counter()


@pytest.mark.parametrize(
    "arguments",
    [
        {"rerun": ["nope"]},
        {"rerun": "a"},
        {"run_id": "another"},
        {"answers": ["a"]},
        {"unknown_steps": "keep"},
        {"initial_context": {"a": 1}},
        {"resume_from": {"seq": 1}},
    ],
    ids=repr,
)
def test_bad_arguments_raise_what_run_raises(arguments: dict[str, Any]) -> None:
    """Each bad argument fails the plan with run's error type and message."""
    final = checkpoints_of(chain(Counted()), run_id="first")[-1]
    options = {"resume_from": final, **arguments}
    with pytest.raises(RunArgumentError) as planned:
        chain(Counted()).plan(**options)
    with pytest.raises(RunArgumentError) as ran:
        chain(Counted()).run_sync(**options)
    assert (type(planned.value), str(planned.value)) == (type(ran.value), str(ran.value))


def test_rerun_without_resume_from_is_refused_as_run_does() -> None:
    """rerun needs resume_from, for the plan as for run."""
    with pytest.raises(RunArgumentError, match="rerun needs resume_from"):
        chain(Counted()).plan(rerun=["a"])


# --- The property: the plan says what the resume does -------------------------------------


@pytest.mark.parametrize("seed", PROPERTY_SEEDS)
async def test_the_plan_agrees_with_the_resume_step_for_step(seed: int) -> None:
    """From a random checkpoint, with a random rerun or version bump: the resume does the plan."""
    rng = random.Random(seed)
    dag = random_dag(rng)
    if rng.random() < 0.3:
        dag = dataclasses.replace(dag, verdict=dict.fromkeys(dag.names))
    first = Harness(dag)
    await first.run({})
    checkpoint = round_trip(rng.choice(first.checkpoints))
    recorded = [n for n in dag.names if n in checkpoint.outputs or n in checkpoint.skipped]
    rerun = rng.sample(recorded, rng.randint(0, min(2, len(recorded)))) or None
    bumped = rng.choice(dag.names) if rng.random() < 0.3 else None
    planner = Harness(dag, bumped=bumped)
    plan = planner.workflow().plan({"seed": 1}, resume_from=checkpoint, rerun=rerun)
    assert planner.calls == Counter()
    assert planner.asked == Counter()
    resumed = Harness(dag, bumped=bumped)
    result = await resumed.run({"rerun": rerun}, resume_from=checkpoint)
    ran = tuple(name for name in dag.names if resumed.calls[name])
    assert ran == tuple(name for name in plan.would_run if name not in result.skipped)
    assert set(plan.would_run) - set(ran) <= set(plan.may_skip)
    if all(verdict is None for verdict in dag.verdict.values()):
        assert ran == plan.would_run
        assert plan.may_skip == ()
    assert plan.restored == result.restored
    assert dict(plan.invalidated) == dict(result.invalidated)
    kept = {name: reason for name, reason in result.skipped.items() if name not in plan.would_run}
    assert dict(plan.skipped) == kept
    assert (plan.questions, plan.waiting, plan.items) == ((), (), {})


# --- executionkit run --dry-run ------------------------------------------------------------

WORKFLOW_MODULE = """\
from pathlib import Path

from executionkit import Step, Workflow


def _step(name):
    def run(ctx):
        with Path("calls.txt").open("a", encoding="utf-8") as calls:
            calls.write(name + "\\n")
        if name == "c" and ctx["mode"] == "fail":
            raise ValueError("c failed")
        return name

    return run


workflow = Workflow(
    [
        Step("a", _step("a")),
        Step("b", _step("b"), depends_on=("a",)),
        Step("c", _step("c"), depends_on=("b",)),
        Step("d", _step("d"), depends_on=("c",), when=lambda ctx: True),
    ]
)
"""


def test_dry_run_prints_the_plan_runs_nothing_and_writes_nothing(tmp_path: Path) -> None:
    """Exit 0 with the plan on stdout; the checkpoint file keeps its bytes; no step ran."""
    (tmp_path / "planned.py").write_text(WORKFLOW_MODULE, encoding="utf-8")
    args = ("run", "planned:workflow", "--checkpoint", "run.json")
    failed = run_subprocess(tmp_path, *args, "--input", "mode=fail")
    assert failed.code == 1, failed.err
    calls = tmp_path / "calls.txt"
    assert calls.read_text(encoding="utf-8").split() == ["a", "b", "c"]
    calls.unlink()
    before = files(tmp_path)
    assert "run.json" in before

    planned = run_subprocess(tmp_path, *args, "--input", "mode=ok", "--rerun", "b", "--dry-run")
    assert planned.code == 0, planned.err
    assert planned.out.splitlines() == [
        "would run: b, c, d",
        "a condition may skip: d",
        "restored: a",
        "invalidated: b (rerun requested)",
    ]
    assert planned.err == ""
    assert files(tmp_path) == before
    assert not calls.exists()


def files(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` but the workflow's own, with its bytes."""
    return {
        path.name: path.read_bytes()
        for path in folder.iterdir()
        if path.is_file() and path.suffix != ".py"
    }


def test_dry_run_without_a_checkpoint_would_run_everything(tmp_path: Path) -> None:
    """Nothing saved: every step would run, and no file is created."""
    (tmp_path / "planned.py").write_text(WORKFLOW_MODULE, encoding="utf-8")
    planned = run_subprocess(
        tmp_path, "run", "planned:workflow", "--checkpoint", "new.json", "--dry-run"
    )
    assert (planned.code, planned.err) == (0, "")
    assert planned.out.splitlines() == ["would run: a, b, c, d", "a condition may skip: d"]
    assert files(tmp_path) == {}


def test_dry_run_refuses_what_run_refuses_in_flag_terms(tmp_path: Path) -> None:
    """A checkpoint of steps the workflow lacks is exit 2, with the flag that drops them."""
    (tmp_path / "planned.py").write_text(WORKFLOW_MODULE, encoding="utf-8")
    checkpoint = tmp_path / "run.json"
    final = checkpoints_of(chain(Counted(), extra=True))[-1]
    checkpoint.write_text(json.dumps(final.to_dict()), encoding="utf-8")
    planned = run_subprocess(
        tmp_path, "run", "planned:workflow", "--checkpoint", "run.json", "--dry-run"
    )
    assert planned.code == 2
    assert "does not have" in planned.err
    assert "--discard-unknown-steps" in planned.err
