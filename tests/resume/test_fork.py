"""`Workflow.fork` (issue 22): a new run from any checkpoint, with outputs put in place.

Oracle cases fork every checkpoint of reference runs (plain, map, condition,
ask and sub-workflow steps), with and without an override, through the bundled
stores; a property test checks that a resumed fork equals a fresh run whose
overridden step is a stub returning the override, that ``plan`` says exactly
what the resume runs, and that the parent's stored bytes never change.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executionkit import (
    CheckpointValueError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path


def plain(name: str) -> Any:
    def run(ctx: Any) -> Any:
        deps = sorted(k for k in ctx if k.startswith("s") and k != name)
        return f"{name}(" + ",".join(str(ctx[d]) for d in deps) + ")"

    return run


def roundtrip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def chain() -> Workflow:
    return Workflow(
        [
            Step("fetch", lambda ctx: PatternResult("doc", cost=TokenUsage(5, 5, 1))),
            Step("summarize", lambda ctx: f"summary of {ctx['fetch']}", ("fetch",)),
            Step("translate", lambda ctx: f"T({ctx['summarize']})", ("summarize",)),
            Step("keywords", lambda ctx: ["k"], ("fetch",)),
        ]
    )


def test_an_override_replaces_one_output_and_drops_only_what_depends_on_it() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    chain().run_sync(run_id="parent", checkpoint_fn=checkpoints.append)
    parent = checkpoints[-1]
    before = json.dumps(parent.to_dict())
    fork = chain().fork(parent, override={"summarize": "better"}, note="fixed by hand")
    assert json.dumps(parent.to_dict()) == before
    assert fork.run_id not in {None, "parent"}
    assert fork.seq == 1
    assert dict(fork.outputs) == {"fetch": "doc", "summarize": "better", "keywords": ["k"]}
    assert dict(fork.lineage) == {
        "parent_run_id": "parent",
        "parent_seq": parent.seq,
        "overridden": ("summarize",),
        "rerun": (),
        "note": "fixed by hand",
    }
    assert fork.ledger[-1].outcome == "override"
    assert fork.cost == parent.cost
    plan = chain().plan(resume_from=roundtrip(fork))
    assert plan.would_run == ("translate",)
    later: list[WorkflowCheckpoint] = []
    result = chain().run_sync(resume_from=roundtrip(fork), checkpoint_fn=later.append)
    assert result.executed == ("translate",)
    assert result.outputs["translate"] == "T(better)"
    assert result.run_id == fork.run_id
    assert all(dict(cp.lineage) == dict(fork.lineage) for cp in later)
    assert all(roundtrip(cp).lineage == fork.lineage for cp in later)


def test_a_fork_counts_what_its_kept_outputs_cost_and_the_rest_stays_with_the_parent() -> None:
    def paid(usage: TokenUsage, value: str) -> Any:
        def run(ctx: Any) -> Any:
            return PatternResult(value, cost=usage)

        return run

    workflow = Workflow(
        [
            Step("a", paid(TokenUsage(10, 1, 1), "a")),
            Step("b", paid(TokenUsage(20, 2, 1), "b"), ("a",)),
            Step("c", paid(TokenUsage(40, 4, 1), "c"), ("b",)),
            Step("d", paid(TokenUsage(80, 8, 1), "d"), ("a",)),
        ]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    workflow.run_sync(checkpoint_fn=checkpoints.append)
    parent = checkpoints[-1]
    fork = workflow.fork(parent, override={"b": "better b"})
    # b is overridden and c depends on it: their usage stays with the parent.
    assert fork.cost == TokenUsage(90, 9, 2)
    assert sorted({row.step for row in fork.ledger if row.outcome != "override"}) == ["a", "d"]
    result = workflow.run_sync(resume_from=roundtrip(fork))
    assert result.spending.restored == TokenUsage(90, 9, 2)
    assert result.spending.this_call == TokenUsage(40, 4, 1)
    # Parent and fork together: every call counted once, the re-run c twice (it ran twice).
    assert parent.cost + result.spending.this_call == TokenUsage(190, 19, 5)


def test_rerun_drops_the_step_and_everything_below_it() -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    chain().run_sync(checkpoint_fn=checkpoints.append)
    fork = chain().fork(checkpoints[-1], rerun=["summarize"], run_id="again")
    assert fork.run_id == "again"
    assert dict(fork.outputs) == {"fetch": "doc", "keywords": ["k"]}
    assert fork.lineage["rerun"] == ("summarize",)
    result = chain().run_sync(resume_from=fork)
    assert result.executed == ("summarize", "translate")


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"override": {"nope": 1}}, RunArgumentError, "override: 'nope' is not a step"),
        ({"rerun": ["nope"]}, RunArgumentError, "rerun: 'nope' is not a step"),
        (
            {"override": {"summarize": "x"}, "rerun": ["summarize"]},
            RunArgumentError,
            "step 'summarize' is both overridden and re-run",
        ),
        (
            {"override": {"translate": "x"}, "rerun": ["fetch"]},
            RunArgumentError,
            "step 'translate' is overridden but depends on re-run step 'fetch'",
        ),
        ({"override": {"summarize": {1, 2}}}, CheckpointValueError, "override of step"),
        ({"rerun": "fetch"}, RunArgumentError, "rerun must be a collection of step names"),
        ({"run_id": ""}, RunArgumentError, "run_id must be a non-empty str"),
        ({"note": 3}, RunArgumentError, "note must be a non-empty str or None"),
    ],
)
def test_bad_forks_are_refused_before_anything_naming_the_step(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    checkpoints: list[WorkflowCheckpoint] = []
    chain().run_sync(run_id="p", checkpoint_fn=checkpoints.append)
    before = json.dumps(checkpoints[-1].to_dict())
    with pytest.raises(error, match=message):
        chain().fork(checkpoints[-1], **arguments)
    assert json.dumps(checkpoints[-1].to_dict()) == before


def test_an_override_is_checked_by_the_steps_decode_and_an_asks_check() -> None:
    def decode(value: Any) -> Any:
        if not isinstance(value, int):
            msg = "expected an int"
            raise TypeError(msg)
        return value

    def approve(answer: Any) -> Any:
        if answer not in {"yes", "no"}:
            msg = "answer yes or no"
            raise ValueError(msg)
        return answer

    workflow = Workflow(
        [
            Step("count", lambda ctx: 3, encode=lambda v: v, decode=decode),
            Step.ask("approve", lambda ctx: "ship it?", check=approve),
            Step("ship", lambda ctx: f"shipped {ctx['approve']}", ("approve", "count")),
        ]
    )
    first = workflow.run_sync(run_id="p")
    assert first.pending
    checkpoints: list[WorkflowCheckpoint] = []
    workflow.run_sync(run_id="p", checkpoint_fn=checkpoints.append)
    parent = checkpoints[-1]
    with pytest.raises(RunArgumentError, match="step 'count': its decode refused the value"):
        workflow.fork(parent, override={"count": "three"})
    with pytest.raises(RunArgumentError, match="step 'approve': its check refused the answer"):
        workflow.fork(parent, override={"approve": "maybe"})
    fork = workflow.fork(parent, override={"approve": "yes"})
    assert not fork.pending
    result = workflow.run_sync(resume_from=roundtrip(fork))
    assert result.outputs["ship"] == "shipped yes"
    assert result.executed == ("ship",)


def test_a_map_override_replaces_its_whole_output() -> None:
    workflow = Workflow(
        [
            Step.map("each", lambda item, ctx: item * 2, over="xs"),
            Step("total", lambda ctx: sum(ctx["each"]), ("each",)),
        ]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    workflow.run_sync({"xs": [1, 2, 3]}, checkpoint_fn=checkpoints.append)
    with pytest.raises(RunArgumentError, match="a map step's output is a list"):
        workflow.fork(checkpoints[-1], override={"each": 5})
    fork = workflow.fork(checkpoints[-1], override={"each": [10, 20, 30]})
    result = workflow.run_sync({"xs": [1, 2, 3]}, resume_from=roundtrip(fork))
    assert result.outputs["total"] == 60
    assert result.executed == ("total",)


def test_a_path_reaches_into_a_finished_sub_workflow() -> None:
    inner = Workflow(
        [
            Step("draft", lambda ctx: "draft"),
            Step("polish", lambda ctx: f"P({ctx['draft']})", ("draft",)),
        ]
    )
    outer = Workflow(
        [
            Step("research", inner),
            Step("report", lambda ctx: f"R:{ctx['research']['polish']}", ("research",)),
            Step("other", lambda ctx: "other"),
        ]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    outer.run_sync(checkpoint_fn=checkpoints.append)
    with pytest.raises(RunArgumentError, match="override its steps by path instead"):
        outer.fork(checkpoints[-1], override={"research": {}})
    with pytest.raises(RunArgumentError, match="'other/x' reaches into step 'other'"):
        outer.fork(checkpoints[-1], override={"other/x": 1})
    fork = outer.fork(checkpoints[-1], override={"research/draft": "better draft"})
    assert [row.step for row in fork.ledger if row.outcome == "override"] == ["research/draft"]
    child = fork.children["research"]["checkpoint"]
    assert dict(child.outputs) == {"draft": "better draft"}
    assert [row.step for row in child.ledger] == ["draft"]
    result = outer.run_sync(resume_from=roundtrip(fork))
    assert result.outputs["report"] == "R:P(better draft)"
    assert result.outputs["other"] == "other"
    assert "other" in result.restored


def test_a_condition_below_an_override_is_decided_again() -> None:
    workflow = Workflow(
        [
            Step("score", lambda ctx: 1),
            Step("high", lambda ctx: "high", ("score",), when=lambda ctx: ctx["score"] > 5),
        ]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    workflow.run_sync(checkpoint_fn=checkpoints.append)
    assert "high" in checkpoints[-1].skipped
    fork = workflow.fork(checkpoints[-1], override={"score": 9})
    assert "high" not in fork.skipped
    result = workflow.run_sync(resume_from=roundtrip(fork))
    assert result.outputs["high"] == "high"


# --- oracle: every checkpoint of reference runs, through every store -----------------------


def reference(inner_a: str = "a") -> tuple[Workflow, dict[str, Any]]:
    """Plain, map, condition, sub-workflow steps; ``inner_a``: what the child's first step says."""
    inner = Workflow(
        [Step("a", _returning(inner_a)), Step("b", lambda ctx: ctx["a"] + "b", ("a",))]
    )
    steps = [
        Step("s0", lambda ctx: "zero"),
        Step.map("m", lambda item, ctx: f"{ctx['s0']}-{item}", over="xs", depends_on=("s0",)),
        Step("cond", lambda ctx: "ran", ("m",), when=lambda ctx: len(ctx["m"]) > 1),
        Step("sub", inner, ("s0",)),
        Step("last", lambda ctx: f"{ctx['m'][0]}|{ctx['sub']['b']}", ("m", "sub")),
    ]
    return Workflow(steps), {"xs": [1, 2]}


# Each variant: what to fork with, the recorded step it needs, and the fresh run it must equal.
VARIANTS: dict[str, tuple[dict[str, Any], str | None]] = {
    "as-is": ({}, None),
    "override s0": ({"override": {"s0": "ZERO"}}, "s0"),
    "override m": ({"override": {"m": ["x", "y"]}}, "m"),
    "override sub/a": ({"override": {"sub/a": "A"}}, "sub"),
    "rerun s0": ({"rerun": ["s0"]}, "s0"),
    "rerun sub/b": ({"rerun": ["sub/b"]}, "sub"),
}


def oracle_run(variant: str, context: dict[str, Any], schedule: Any) -> Any:
    """The fresh run a resumed fork must equal: overridden steps replaced by stubs."""
    workflow, _ = reference(inner_a="A" if variant == "override sub/a" else "a")
    stubs = VARIANTS[variant][0].get("override", {})
    return fresh_with_stubs(
        workflow, context, {k: v for k, v in stubs.items() if "/" not in k}, schedule
    )


STORES = ["json", "jsonl", "sqlite", "postgres"]


def store_of(kind: str, path: Path, name: str, pg: str | None = None) -> Any:
    """A file store per run (they hold one run each); one database for them all."""
    if kind == "json":
        return JsonFileStore(path / f"{name}.json")
    if kind == "jsonl":
        return JsonLinesStore(path / f"{name}.jsonl")
    if kind == "postgres":
        assert pg is not None
        return PostgresStore(pg)
    return SQLiteStore(path / "runs.db")


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("schedule", ["batch", "eager"])
def test_oracle_forks_of_every_checkpoint_resume_to_the_reference(
    kind: str, schedule: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("pg_uri") if kind == "postgres" else None
    workflow, context = reference()
    checkpoints: list[WorkflowCheckpoint] = []
    expected = workflow.run_sync(context, checkpoint_fn=checkpoints.append, schedule=schedule)
    assert dict(expected.outputs)["last"] == "zero-1|ab"
    cases = 0
    opened: list[Any] = []
    try:
        for number, parent in enumerate(checkpoints):
            for variant, (arguments, needs) in VARIANTS.items():
                if needs is not None and needs not in parent.outputs:
                    continue
                before = json.dumps(parent.to_dict())
                fork = workflow.fork(parent, run_id=f"fork-{number}-{variant}", **arguments)
                assert json.dumps(parent.to_dict()) == before
                assert fork.run_id is not None
                store = store_of(kind, tmp_path, f"fork-{cases}", pg)
                opened.append(store)
                store(fork)
                loaded = (
                    store.load(run_id=fork.run_id)
                    if kind in {"sqlite", "postgres"}
                    else store.load()
                )
                assert loaded is not None
                assert loaded.to_dict() == fork.to_dict()
                plan = workflow.plan(context, resume_from=loaded)
                saved: list[WorkflowCheckpoint] = []
                result = workflow.run_sync(
                    context, resume_from=loaded, checkpoint_fn=saved.append, schedule=schedule
                )
                for checkpoint in saved:
                    store(checkpoint)
                reloaded = (
                    store.load(run_id=fork.run_id)
                    if kind in {"sqlite", "postgres"}
                    else store.load()
                )
                assert reloaded is not None
                assert reloaded.lineage == fork.lineage
                oracle = oracle_run(variant, context, schedule)
                assert dict(result.outputs) == dict(oracle.outputs), (number, variant)
                assert set(plan.would_run) == set(result.executed), (number, variant)
                assert all(cp.lineage == fork.lineage for cp in saved)
                cases += 1
    finally:
        for store in opened:
            close = getattr(store, "close", None)
            if close is not None:
                close()
    assert cases >= len(checkpoints) * 2


def workflow_names(workflow: Workflow) -> list[str]:
    return [step.name for step in workflow.steps]


def fresh_with_stubs(
    workflow: Workflow, context: dict[str, Any], stubs: dict[str, Any], schedule: Any = "batch"
) -> Any:
    steps: list[Step] = []
    for step in workflow.steps:
        if step.name in stubs:
            steps.append(Step(step.name, _returning(stubs[step.name]), step.depends_on))
        else:
            steps.append(step)
    return Workflow(steps).run_sync(context, schedule=schedule)


def _returning(value: Any) -> Any:
    def stub(ctx: Any) -> Any:
        return value

    return stub


# --- property: a resumed fork equals a fresh run with the overridden step stubbed ----------


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[str, tuple[str, ...]]]:
    size = draw(st.integers(1, 8))
    shape = []
    for index in range(size):
        mask = draw(st.integers(0, 2**index - 1)) if index else 0
        shape.append((f"s{index}", tuple(f"s{d}" for d in range(index) if mask >> d & 1)))
    return shape


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_a_resumed_fork_equals_a_fresh_run_with_the_override_as_a_stub(
    shape: list[tuple[str, tuple[str, ...]]], data: st.DataObject
) -> None:
    # inline: the checkpoints drawn from must be the same each time hypothesis replays
    workflow = Workflow([Step(name, plain(name), deps, inline=True) for name, deps in shape])
    checkpoints: list[WorkflowCheckpoint] = []
    schedule: Any = data.draw(st.sampled_from(["batch", "eager"]))
    workflow.run_sync(checkpoint_fn=checkpoints.append, schedule=schedule)
    parent = data.draw(st.sampled_from(checkpoints))
    before = json.dumps(parent.to_dict())
    recorded = sorted(parent.outputs)
    override: dict[str, Any] = {}
    rerun: list[str] = []
    if recorded:
        chosen = data.draw(st.sampled_from(recorded))
        if data.draw(st.booleans()):
            override = {chosen: f"override-{chosen}"}
        else:
            rerun = [chosen]
    fork = workflow.fork(parent, override=override, rerun=rerun)
    assert json.dumps(parent.to_dict()) == before
    plan = workflow.plan(resume_from=roundtrip(fork))
    result = asyncio.run(workflow.run(resume_from=roundtrip(fork), schedule=schedule))
    assert set(plan.would_run) == set(result.executed)
    assert set(result.executed) == {name for name, _ in shape} - set(fork.outputs)
    oracle = fresh_with_stubs(workflow, {}, override, schedule)
    assert dict(result.outputs) == dict(oracle.outputs)
    assert result.spending.restored == parent.cost


def test_a_question_below_an_override_is_asked_again() -> None:
    workflow = Workflow(
        [
            Step("draft", lambda ctx: "draft"),
            Step.ask("approve", lambda ctx: f"publish {ctx['draft']}?", depends_on=("draft",)),
            Step("publish", lambda ctx: f"published {ctx['draft']}", ("approve",)),
        ]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    workflow.run_sync(run_id="p", checkpoint_fn=checkpoints.append)
    workflow.run_sync(
        run_id="p",
        resume_from=checkpoints[-1],
        answers={"approve": "yes"},
        checkpoint_fn=checkpoints.append,
    )
    assert checkpoints[-1].outputs["publish"] == "published draft"
    fork = workflow.fork(checkpoints[-1], override={"draft": "better"})
    assert "approve" not in fork.outputs
    assert workflow.plan(resume_from=fork).questions == ("approve",)
    suspended = workflow.run_sync(resume_from=roundtrip(fork))
    assert dict(suspended.pending) == {"approve": "publish better?"}


def test_an_override_below_a_step_whose_version_changed_is_refused() -> None:
    """A resume would run the changed step and all below it, dropping the override (issue 31).

    ``plan()`` said so; ``fork`` accepted it. Now it refuses, naming the changed step; the
    overridden step's own version changing is fine (the fork records the new one).
    """

    def chain(a_version: str, b_version: str | None = None) -> Workflow:
        return Workflow(
            [
                Step("a", lambda ctx: "a", version=a_version),
                Step("b", lambda ctx: ctx["a"] + "b", ("a",), version=b_version),
                Step("c", lambda ctx: ctx["b"] + "c", ("b",)),
            ]
        )

    saved: list[WorkflowCheckpoint] = []
    chain("1").run_sync(checkpoint_fn=saved.append)
    changed = chain("2")
    assert changed.plan(resume_from=saved[-1]).invalidated["b"] == (
        "depends on invalidated step 'a'"
    )
    with pytest.raises(RunArgumentError) as refused:
        changed.fork(saved[-1], override={"b": "fixed"})
    assert str(refused.value) == (
        "override of step 'b': step 'a' above it changed since the checkpoint (version "
        "changed from '1' to '2'), so a resume would run both again and drop the override; "
        "fork from a checkpoint of the current workflow, or re-run 'a' instead"
    )
    own = chain("1", b_version="2")
    fork = own.fork(saved[-1], override={"b": "fixed"})
    assert dict(own.run_sync(resume_from=fork).outputs) == {"a": "a", "b": "fixed", "c": "fixedc"}
