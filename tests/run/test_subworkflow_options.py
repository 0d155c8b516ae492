"""Sub-workflows behave like workflows (issue 19).

``unknown_steps`` and ``rerun`` (by path, ``step/child step``) reach children;
a child step named like a key of its initial context is refused before
anything is paid for; a child's invalidated steps appear in the parent's
``invalidated`` by path; a bare-name answer to a child's question lists the
questions by path.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from executionkit import (
    CheckpointMismatchError,
    RunArgumentError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
)
from executionkit import events as ev


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


class Calls:
    """Step functions that count their calls and fail while their name is in ``broken``."""

    def __init__(self, *broken: str) -> None:
        self.count: Counter[str] = Counter()
        self.broken = set(broken)

    def __call__(self, name: str) -> Any:
        def run(ctx: Any) -> str:
            self.count[name] += 1
            if name in self.broken:
                msg = f"{name} is down"
                raise RuntimeError(msg)
            return f"{name}{self.count[name]}"

        return run

    def item(self, name: str) -> Any:
        def run(ctx: Any) -> str:
            self.count[f"{ctx['item_key']}:{name}"] += 1
            if f"{ctx['item_key']}:{name}" in self.broken:
                msg = f"{name} is down"
                raise RuntimeError(msg)
            return f"{name}({ctx['item']})"

        return run


def failed(workflow: Workflow, context: dict[str, Any] | None = None) -> WorkflowCheckpoint:
    with pytest.raises(WorkflowFailed) as caught:
        workflow.run_sync(context, run_id="p", on_error="continue")
    return round_trip(caught.value.checkpoint)


# --- unknown_steps reaches children ------------------------------------------------------


def test_unknown_steps_discard_reaches_a_child_whose_step_was_removed() -> None:
    """The advice of the child's mismatch error works: unknown_steps='discard' reaches it."""
    calls = Calls("b")
    before = Workflow([Step("sub", Workflow([Step("a", calls("a")), Step("b", calls("b"))]))])
    checkpoint = failed(before)
    assert list(checkpoint.children["sub"]["checkpoint"].outputs) == ["a"]
    calls.broken.clear()
    after = Workflow([Step("sub", Workflow([Step("b", calls("b"))]))])
    with pytest.raises(WorkflowFailed, match="pass unknown_steps='discard'"):
        after.run_sync(resume_from=checkpoint)
    result = after.run_sync(resume_from=checkpoint, unknown_steps="discard")
    assert result.outputs["sub"] == {"b": "b2"}
    assert result.discarded == ("sub/a",)
    assert calls.count == Counter({"a": 1, "b": 2})


def test_unknown_steps_discard_reaches_each_child_of_a_map() -> None:
    """A map of sub-workflows passes unknown_steps to each item's child."""
    calls = Calls("x:b")
    before = Workflow(
        [
            Step.map(
                "m", Workflow([Step("a", calls.item("a")), Step("b", calls.item("b"))]), over="xs"
            )
        ]
    )
    checkpoint = failed(before, {"xs": {"x": 1, "y": 2}})
    calls.broken.clear()
    after = Workflow([Step.map("m", Workflow([Step("b", calls.item("b"))]), over="xs")])
    result = after.run_sync(
        {"xs": {"x": 1, "y": 2}}, resume_from=checkpoint, unknown_steps="discard"
    )
    assert result.outputs["m"] == {"x": {"b": "b(1)"}, "y": {"a": "a(2)", "b": "b(2)"}}
    assert result.discarded == ("m/x/a",)


# --- rerun by path -----------------------------------------------------------------------


def research(calls: Calls) -> Workflow:
    """A parent ``sub -> after`` whose child is ``x -> y``, and a step ``z`` apart."""
    child = Workflow(
        [Step("x", calls("x")), Step("y", calls("y"), depends_on=("x",)), Step("z", calls("z"))]
    )
    return Workflow(
        [
            Step("first", calls("first")),
            Step("sub", child, depends_on=("first",)),
            Step("after", calls("after"), depends_on=("sub",)),
        ]
    )


def test_rerun_by_path_reruns_the_child_step_and_its_dependants_inside_the_child() -> None:
    """rerun=['sub/x'] runs x and y again in the child; z and the parent's steps stay recorded."""
    calls = Calls("y")
    workflow = research(calls)
    checkpoint = failed(workflow)
    # x and z run at once, in threads: either may be recorded first.
    assert sorted(checkpoint.children["sub"]["checkpoint"].outputs) == ["x", "z"]
    calls.broken.clear()
    calls.count.clear()
    result = workflow.run_sync(resume_from=checkpoint, rerun=["sub/x"])
    assert calls.count == Counter({"x": 1, "y": 1, "after": 1})
    assert result.outputs["sub"] == {"x": "x1", "y": "y1", "z": "z1"}
    assert dict(result.invalidated) == {"sub/x": "rerun requested"}


def test_rerun_of_a_step_inside_a_finished_sub_workflow_is_refused_with_the_way_out() -> None:
    """A finished sub-workflow keeps no checkpoint of its own: rerun it whole instead."""
    calls = Calls("after")
    workflow = research(calls)
    checkpoint = failed(workflow)
    assert "sub" in checkpoint.outputs
    assert "sub" not in checkpoint.children
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync(resume_from=checkpoint, rerun=["sub/x"])
    assert str(caught.value) == (
        "rerun names 'sub/x', but the sub-workflow of step 'sub' is recorded as finished "
        "in resume_from, and a finished sub-workflow keeps no checkpoint of its own to "
        "rerun a step in; pass rerun=['sub'] to run it again whole"
    )
    assert calls.count == Counter({"first": 1, "x": 1, "y": 1, "z": 1, "after": 1})
    calls.broken.clear()
    result = workflow.run_sync(resume_from=checkpoint, rerun=["sub", "sub/x"])
    assert result.outputs["after"] == "after2"


@pytest.mark.parametrize(
    ("rerun", "message"),
    [
        (
            ["sub/xx"],
            (
                "rerun names 'sub/xx': the sub-workflow of step 'sub' has no step 'xx'; "
                "did you mean 'x'?"
            ),
        ),
        (
            ["after/x"],
            (
                "rerun names 'after/x': step 'after' does not run a sub-workflow, so it has no "
                "steps of its own to rerun"
            ),
        ),
        (
            ["nope/x"],
            "rerun names 'nope/x': this workflow has no step 'nope'",
        ),
        (
            ["sub/x/deeper"],
            (
                "rerun names 'sub/x/deeper': step 'x' of the sub-workflow of step 'sub' does not "
                "run a sub-workflow, so it has no steps of its own to rerun"
            ),
        ),
        (
            ["sub/100%"],
            (
                "rerun names 'sub/100%', which is not a path of step names: write '%' as '%25' "
                "and '/' as '%2F' in a name"
            ),
        ),
    ],
)
def test_rerun_paths_are_checked_against_the_child_workflows(
    rerun: list[str], message: str
) -> None:
    """Each wrong rerun path is refused before anything runs, naming what is wrong."""
    calls = Calls("y")
    workflow = research(calls)
    checkpoint = failed(workflow)
    calls.count.clear()
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync(resume_from=checkpoint, rerun=rerun)
    assert str(caught.value) == message
    assert not calls.count


def test_rerun_by_path_reaches_one_item_of_a_map_of_sub_workflows() -> None:
    """rerun=['m/k/a'] reruns a of item k's child only; items are named by key."""
    calls = Calls("k:b")
    per_item = Workflow(
        [Step("a", calls.item("a")), Step("b", calls.item("b"), depends_on=("a",))]
    )
    workflow = Workflow([Step.map("m", per_item, over="xs")])
    context = {"xs": {"j": 1, "k": 2}}
    checkpoint = failed(workflow, context)
    calls.broken.clear()
    calls.count.clear()
    result = workflow.run_sync(context, resume_from=checkpoint, rerun=["m/k/a"])
    assert calls.count == Counter({"k:a": 1, "k:b": 1})
    assert dict(result.invalidated) == {"m/k/a": "rerun requested"}
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync(context, resume_from=checkpoint, rerun=["m/j/a"])
    assert str(caught.value) == (
        "rerun names 'm/j/a', but item 'j' of the map of sub-workflows 'm' is recorded "
        "as finished in resume_from, and a finished sub-workflow keeps no checkpoint of "
        "its own to rerun a step in; pass rerun=['m'] to run the map again"
    )
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync(context, resume_from=checkpoint, rerun=["m/k"])
    assert str(caught.value) == (
        "rerun names 'm/k': one item of a map cannot be rerun alone; pass rerun=['m'] to "
        "run the map again, or name a step of the item's sub-workflow, as 'm/k/a'"
    )


def test_rerun_by_path_reaches_through_nested_sub_workflows() -> None:
    """A path of three segments reruns a step of the child of a child."""
    calls = Calls("y")
    workflow = Workflow([Step("outer", research(calls))])
    checkpoint = failed(workflow)
    calls.broken.clear()
    calls.count.clear()
    result = workflow.run_sync(resume_from=checkpoint, rerun=["outer/sub/x"])
    assert calls.count == Counter({"x": 1, "y": 1, "after": 1})
    assert dict(result.invalidated) == {"outer/sub/x": "rerun requested"}


def test_rerun_of_a_child_step_whose_sub_workflow_never_started_changes_nothing() -> None:
    """Nothing of the child is recorded: it runs whole anyway, and the rerun is accepted."""
    calls = Calls("first")
    workflow = research(calls)
    checkpoint = failed(workflow)
    calls.broken.clear()
    result = workflow.run_sync(resume_from=checkpoint, rerun=["sub/x"])
    assert result.outputs["sub"] == {"x": "x1", "y": "y1", "z": "z1"}
    assert dict(result.invalidated) == {}


def test_a_step_whose_name_holds_a_slash_is_still_rerun_by_its_name() -> None:
    """A name of this workflow is taken as it is before it is read as a path."""
    calls = Calls()
    workflow = Workflow([Step("a/b", calls("a/b")), Step("c%", calls("c%"))])
    saved: list[WorkflowCheckpoint] = []
    workflow.run_sync(checkpoint_fn=saved.append)
    for rerun in (["a/b", "c%"], ["a%2Fb", "c%25"]):
        result = workflow.run_sync(resume_from=saved[-1], rerun=rerun)
        assert dict(result.invalidated) == {"a/b": "rerun requested", "c%": "rerun requested"}


# --- child step names that its initial context already holds ----------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda child: Workflow(
                [Step("fetch", len), Step("sub", child, depends_on=("fetch",))]
            ),
            (
                "step 'sub' runs a sub-workflow whose step 'fetch' has the name of the output "
                "of step 'fetch', an ancestor of 'sub', which the sub-workflow's initial "
                "context holds; rename one of them"
            ),
        ),
        (
            lambda child: Workflow([Step("sub", child)], inputs=("fetch",)),
            (
                "step 'sub' runs a sub-workflow whose step 'fetch' has the name of the declared "
                "input 'fetch', which the sub-workflow's initial context holds; rename one of them"
            ),
        ),
        (
            lambda child: Workflow(
                [Step("outer", Workflow([Step("sub", child)]))], inputs=("fetch",)
            ),
            (
                "step 'sub' of the sub-workflow of step 'outer' runs a sub-workflow whose step "
                "'fetch' has the name of the declared input 'fetch', which the sub-workflow's "
                "initial context holds; rename one of them"
            ),
        ),
    ],
)
def test_a_child_step_named_like_a_key_of_its_context_is_refused_at_construction(
    build: Any, message: str
) -> None:
    """Named like an ancestor of the sub-workflow step, or a declared input: refused at once."""
    child = Workflow([Step("fetch", lambda ctx: 1)])
    with pytest.raises(WorkflowDefinitionError) as caught:
        build(child)
    assert str(caught.value) == message


@pytest.mark.parametrize("name", ["item", "item_key"])
def test_a_child_step_named_item_is_refused_in_a_map_of_sub_workflows(name: str) -> None:
    """A map of sub-workflows adds item and item_key to each child's context."""
    child = Workflow([Step(name, lambda ctx: 1)])
    with pytest.raises(WorkflowDefinitionError) as caught:
        Workflow([Step.map("m", child, over="xs")])
    assert str(caught.value) == (
        f"step 'm' runs a sub-workflow whose step {name!r} has the name of the key "
        f"{name!r} a map of sub-workflows adds to each item's context, which the "
        f"sub-workflow's initial context holds; rename one of them"
    )
    Workflow([Step("plain", child)])  # a single sub-workflow gets no item


def test_a_child_step_named_like_a_step_that_is_not_an_ancestor_is_allowed() -> None:
    """Only what the child's ctx holds can collide: a later parent step cannot."""
    child = Workflow([Step("after", lambda ctx: "inner")])
    workflow = Workflow(
        [Step("sub", child), Step("after", lambda ctx: "outer", depends_on=("sub",))]
    )
    assert workflow.run_sync().outputs == {"sub": {"after": "inner"}, "after": "outer"}


def test_a_child_step_named_like_an_undeclared_context_key_is_refused_before_paying() -> None:
    """Keys of initial_context are checked against every child before any step runs."""
    calls = Calls()
    child = Workflow([Step("client", lambda ctx: 1)])
    workflow = Workflow(
        [
            Step("first", calls("first")),
            Step("sub", Workflow([Step("inner", child)]), depends_on=("first",)),
        ]
    )
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync({"client": object()})
    assert str(caught.value) == (
        "step 'inner' of the sub-workflow of step 'sub' runs a sub-workflow whose step "
        "'client' has the name of the initial_context key 'client', which the "
        "sub-workflow's initial context holds; rename one of them"
    )
    assert not calls.count


# --- a child's invalidated steps, by path ------------------------------------------------


def test_a_childs_invalidated_steps_appear_in_the_parents_result_by_path() -> None:
    """A changed version inside a child is reported as sub/step, map/key/step."""
    calls = Calls("y", "k:b")

    def child(version: str | None) -> Workflow:
        return Workflow(
            [
                Step("x", calls("x"), version=version),
                Step("y", calls("y"), depends_on=("x",)),
            ]
        )

    def per_item(version: str | None) -> Workflow:
        return Workflow(
            [
                Step("a", calls.item("a"), version=version),
                Step("b", calls.item("b"), depends_on=("a",)),
            ]
        )

    def workflow(version: str | None) -> Workflow:
        return Workflow([Step("sub", child(version)), Step.map("m", per_item(version), over="xs")])

    context = {"xs": {"j": 1, "k": 2}}
    checkpoint = failed(workflow(None), context)
    calls.broken.clear()
    result = workflow("2").run_sync(context, resume_from=checkpoint)
    assert dict(result.invalidated) == {
        "sub/x": "version changed from no version to '2'",
        "m/k/a": "version changed from no version to '2'",
    }


def test_a_childs_invalidated_steps_reach_the_parents_run_failed_when_it_fails() -> None:
    """The child raises, so no result: the parent's RunFailed event lists them by path."""
    calls = Calls("y")
    checkpoint = failed(
        Workflow([Step("sub", Workflow([Step("x", calls("x")), Step("y", calls("y"))]))])
    )
    changed = Workflow(
        [Step("sub", Workflow([Step("x", calls("x"), version="2"), Step("y", calls("y"))]))]
    )
    seen: list[ev.Event] = []
    with pytest.raises(WorkflowFailed):
        changed.run_sync(resume_from=checkpoint, on_event=seen.append)
    failures = {e.run_id: dict(e.invalidated) for e in seen if isinstance(e, ev.RunFailed)}
    assert failures == {
        "p/sub": {"x": "version changed from no version to '2'"},
        "p": {"sub/x": "version changed from no version to '2'"},
    }


# --- answers -----------------------------------------------------------------------------


def test_a_bare_name_answer_to_a_childs_question_lists_the_questions_by_path() -> None:
    """The refusal lists sub/b, not 'none'."""
    child = Workflow(
        [Step("a", lambda ctx: 1), Step.ask("b", lambda ctx: "ok?", depends_on=("a",))]
    )
    workflow = Workflow([Step("sub", child), Step.map("m", child, over="xs")])
    saved: list[WorkflowCheckpoint] = []
    first = workflow.run_sync({"xs": ["q"]}, checkpoint_fn=saved.append)
    assert dict(first.pending) == {"sub/b": "ok?", "m/0/b": "ok?"}
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync({"xs": ["q"]}, resume_from=saved[-1], answers={"b": "yes"})
    assert str(caught.value) == (
        "answers given for steps that are not waiting for one: 'b' (no such step); "
        "the questions pending in resume_from: 'sub/b', 'm/0/b'"
    )


def test_the_childs_mismatch_error_is_still_a_checkpoint_mismatch() -> None:
    """Without unknown_steps, the child's refusal is the step's error, as before."""
    calls = Calls("b")
    checkpoint = failed(
        Workflow([Step("sub", Workflow([Step("a", calls("a")), Step("b", calls("b"))]))])
    )
    with pytest.raises(WorkflowFailed) as caught:
        Workflow([Step("sub", Workflow([Step("b", calls("b"))]))]).run_sync(resume_from=checkpoint)
    assert isinstance(caught.value.errors["sub"], CheckpointMismatchError)
