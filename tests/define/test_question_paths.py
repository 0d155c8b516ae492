"""Question paths are unambiguous, whatever step names and item keys hold (issue 18).

Every segment of a question path is escaped (``%`` as ``%25``, ``/`` as ``%2F``)
and the segments are joined with ``/``: a top-level ask step ``a/b`` is answered
as ``a%2Fb``, the question ``b`` of a sub-workflow step ``a`` as ``a/b``. No two
pending questions share a path, and each one is listed and answerable.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from cli_runner import run_subprocess
from hypothesis import given
from hypothesis import strategies as st

from executionkit import RunArgumentError, Step, Workflow, WorkflowCheckpoint
from executionkit import events as ev
from executionkit._cli import step_statuses
from executionkit._paths import join_path, split_path

if TYPE_CHECKING:
    from pathlib import Path


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


# --- the helpers -----------------------------------------------------------------------------

segment = st.text(alphabet=st.sampled_from("ab/%2F5"), min_size=1) | st.text(min_size=1)
segments = st.lists(segment, min_size=1, max_size=4)


@given(segments)
def test_a_path_splits_back_into_its_segments(parts: list[str]) -> None:
    assert split_path(join_path(*parts)) == parts


@given(segments, segments)
def test_different_segments_never_share_a_path(one: list[str], other: list[str]) -> None:
    if one != other:
        assert join_path(*one) != join_path(*other)


@given(st.text(alphabet=st.characters(blacklist_characters="%/"), min_size=1))
def test_a_name_without_slash_or_percent_is_its_own_path(name: str) -> None:
    assert join_path(name) == name
    assert split_path(name) == [name]


def test_escaping_examples() -> None:
    assert join_path("a/b") == "a%2Fb"
    assert join_path("a", "b") == "a/b"
    assert join_path("50%", "docs/a.md", "q") == "50%25/docs%2Fa.md/q"
    assert join_path("%2F") == "%252F"  # escaped in order: % first
    assert split_path("%252F") == ["%2F"]  # decoded in one pass: not "/"
    assert split_path("m/a%2Fx/q") == ["m", "a/x", "q"]


@pytest.mark.parametrize("path", ["50%", "a%2fb", "a%2", "%", "x/%41"])
def test_a_percent_that_is_no_escape_is_not_a_path(path: str) -> None:
    with pytest.raises(ValueError, match="is not a question path"):
        split_path(path)


# --- a top-level ask step "a/b" beside a sub-workflow "a" asking "b" (the case) ---------


def ambiguous(calls: Counter[str]) -> Workflow:
    def both(ctx: Any) -> dict[str, Any]:
        calls["both"] += 1
        return {"parent": ctx["a/b"], "child": ctx["a"]["b"]}

    child = Workflow([Step.ask("b", lambda ctx: "the child's question")])
    return Workflow(
        [
            Step.ask("a/b", lambda ctx: "the parent's question"),
            Step("a", child),
            Step("both", both, depends_on=("a/b", "a")),
        ]
    )


PENDING = {"a%2Fb": "the parent's question", "a/b": "the child's question"}
OUTPUTS = {
    "a/b": "parent answer",
    "a": {"b": "child answer"},
    "both": {"parent": "parent answer", "child": "child answer"},
}


def suspended(workflow: Workflow) -> tuple[dict[str, Any], WorkflowCheckpoint]:
    saved: list[WorkflowCheckpoint] = []
    first = workflow.run_sync(checkpoint_fn=saved.append, run_id="p")
    return dict(first.pending), round_trip(saved[-1])


def test_both_questions_are_pending_and_one_resume_answers_both() -> None:
    calls: Counter[str] = Counter()
    workflow = ambiguous(calls)
    pending, checkpoint = suspended(workflow)
    assert pending == PENDING
    assert list(checkpoint.pending) == ["a/b"]  # checkpoints keep step names, unescaped
    result = workflow.run_sync(
        resume_from=checkpoint, answers={"a%2Fb": "parent answer", "a/b": "child answer"}
    )
    assert dict(result.pending) == {}
    assert dict(result.outputs) == OUTPUTS
    assert calls == Counter({"both": 1})


@pytest.mark.parametrize("order", [("a%2Fb", "a/b"), ("a/b", "a%2Fb")])
def test_each_question_is_answered_by_its_own_path(order: tuple[str, str]) -> None:
    answer = {"a%2Fb": "parent answer", "a/b": "child answer"}
    workflow = ambiguous(Counter())
    _, checkpoint = suspended(workflow)
    saved: list[WorkflowCheckpoint] = []
    first, second = order
    middle = workflow.run_sync(
        resume_from=checkpoint, answers={first: answer[first]}, checkpoint_fn=saved.append
    )
    assert dict(middle.pending) == {second: PENDING[second]}
    if first == "a%2Fb":
        assert middle.outputs["a/b"] == "parent answer"
    else:
        assert "a/b" not in middle.outputs  # the child's answer did not answer the parent
    result = workflow.run_sync(resume_from=round_trip(saved[-1]), answers={second: answer[second]})
    assert dict(result.pending) == {}
    assert dict(result.outputs) == OUTPUTS


def test_events_and_the_graph_name_both_questions() -> None:
    seen: list[ev.Event] = []
    workflow = ambiguous(Counter())
    saved: list[WorkflowCheckpoint] = []
    workflow.run_sync(checkpoint_fn=saved.append, on_event=seen.append, run_id="p")
    suspensions = [e for e in seen if isinstance(e, ev.RunSuspended) and e.run_id == "p"]
    assert [e.pending for e in suspensions] == [("a%2Fb", "a/b")]
    assert step_statuses(workflow, saved[-1]) == {
        "a/b": "waiting",
        "a": "waiting",
        "both": "pending",
    }


def test_a_wrong_path_lists_every_waiting_question_escaped() -> None:
    workflow = ambiguous(Counter())
    _, checkpoint = suspended(workflow)
    listed = "the questions pending in resume_from: 'a%2Fb', 'a/b'"
    with pytest.raises(RunArgumentError, match="not waiting for one: 'x%2Fy' \\(no such step"):
        workflow.run_sync(resume_from=checkpoint, answers={"x%2Fy": 1})
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync(resume_from=checkpoint, answers={"a/c": 1})
    assert str(caught.value) == (
        f"answers given for questions no sub-workflow is waiting on: 'a/c'; {listed}"
    )
    with pytest.raises(RunArgumentError, match="'a%b' \\(not a question path"):
        workflow.run_sync(resume_from=checkpoint, answers={"a%b": 1})
    # Unescaped, a top-level ask step's name is a path into a sub-workflow: refused, with advice.
    lone = Workflow([Step.ask("a/b", lambda ctx: "?")])
    _, alone = suspended(lone)
    with pytest.raises(RunArgumentError) as refused:
        lone.run_sync(resume_from=alone, answers={"a/b": "yes"})
    assert str(refused.value) == (
        "answers given for questions no sub-workflow is waiting on: 'a/b' (the step 'a/b' is "
        "answered as 'a%2Fb'); the questions pending in resume_from: 'a%2Fb'"
    )
    assert lone.run_sync(resume_from=alone, answers={"a%2Fb": "yes"}).outputs["a/b"] == "yes"


# --- a map of sub-workflows whose item keys hold "/" and "%" ------------------------------------

KEYS = ["a", "a/x", "50%"]
PATHS = {"a": "m/a/q", "a/x": "m/a%2Fx/q", "50%": "m/50%25/q"}


def keyed_map() -> Workflow:
    child = Workflow(
        [
            Step.ask("q", lambda ctx: f"about {ctx['item_key']}"),
            Step("echo", lambda ctx: f"{ctx['item_key']} got {ctx['q']}", depends_on=("q",)),
        ]
    )
    return Workflow([Step.map("m", child, over="keys", key=str)])


def test_each_item_gets_exactly_its_own_answer() -> None:
    workflow = keyed_map()
    context = {"keys": KEYS}
    saved: list[WorkflowCheckpoint] = []
    first = workflow.run_sync(context, checkpoint_fn=saved.append, run_id="p")
    assert dict(first.pending) == {PATHS[key]: f"about {key}" for key in KEYS}
    for done, key in enumerate(["a/x", "50%", "a"], start=1):
        answer = f"answer for {key}"
        result = workflow.run_sync(
            context,
            resume_from=round_trip(saved[-1]),
            answers={PATHS[key]: answer},
            checkpoint_fn=saved.append,
        )
        assert PATHS[key] not in result.pending
        assert len(result.pending) == len(KEYS) - done
        if result.pending:
            recorded = round_trip(saved[-1]).items["m"]["outputs"]
            assert recorded[key] == {"q": answer, "echo": f"{key} got {answer}"}
            assert len(recorded) == done
    assert result.outputs["m"] == [
        {"q": f"answer for {k}", "echo": f"{k} got answer for {k}"} for k in KEYS
    ]


def test_children_get_distinct_escaped_run_ids() -> None:
    seen: list[ev.Event] = []
    keyed_map().run_sync({"keys": KEYS}, on_event=seen.append, run_id="p")
    asked = {e.run_id for e in seen if isinstance(e, ev.QuestionAsked)}
    assert asked == {"p/m/a", "p/m/a%2Fx", "p/m/50%25"}


def test_a_child_recorded_with_an_unescaped_run_id_still_resumes() -> None:
    workflow = keyed_map()
    context = {"keys": KEYS}
    saved: list[WorkflowCheckpoint] = []
    workflow.run_sync(context, checkpoint_fn=saved.append, run_id="p")
    data = saved[-1].to_dict()
    items = data["children"]["m"]["items"]
    assert items["a/x"]["run_id"] == "p/m/a%2Fx"
    items["a/x"]["run_id"] = "p/m/a/x"  # as derived before names were escaped in run_ids
    older = WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))
    result = workflow.run_sync(
        context, resume_from=older, answers=dict.fromkeys(PATHS.values(), "ok")
    )
    assert result.outputs["m"][1] == {"q": "ok", "echo": "a/x got ok"}


def test_deeper_nesting_escapes_every_segment() -> None:
    grandchild = Workflow([Step.ask("q%", lambda ctx: "deep?")])
    child = Workflow([Step("s/t", grandchild)])
    workflow = Workflow([Step.map("m", child, over="keys", key=str)])
    context = {"keys": ["k/1", "k"]}
    saved: list[WorkflowCheckpoint] = []
    first = workflow.run_sync(context, checkpoint_fn=saved.append)
    assert dict(first.pending) == {"m/k%2F1/s%2Ft/q%25": "deep?", "m/k/s%2Ft/q%25": "deep?"}
    second = workflow.run_sync(
        context,
        resume_from=round_trip(saved[-1]),
        answers={"m/k%2F1/s%2Ft/q%25": "first"},
        checkpoint_fn=saved.append,
    )
    assert list(second.pending) == ["m/k/s%2Ft/q%25"]
    third = workflow.run_sync(
        context, resume_from=round_trip(saved[-1]), answers={"m/k/s%2Ft/q%25": "second"}
    )
    assert third.outputs["m"] == [{"s/t": {"q%": "first"}}, {"s/t": {"q%": "second"}}]


# --- the command line -------------------------------------------------------------------------

AMBIGUOUS = """\
from executionkit import Step, Workflow

child = Workflow([Step.ask("b", lambda ctx: "the child's question")])
workflow = Workflow([
    Step.ask("a/b", lambda ctx: "the parent's question"),
    Step("a", child),
    Step("both", lambda ctx: [ctx["a/b"], ctx["a"]["b"]], depends_on=("a/b", "a")),
])
"""


def test_the_cli_lists_and_answers_escaped_paths(tmp_path: Path) -> None:
    (tmp_path / "ambiguous.py").write_text(AMBIGUOUS, encoding="utf-8")
    args = ("run", "ambiguous:workflow", "--checkpoint", "run.json")

    first = run_subprocess(tmp_path, *args)
    assert first.code == 3, first.err
    lines = first.out.splitlines()
    assert lines[0] == "waiting for 2 answers:"
    assert lines[1].startswith("  a%2Fb (asked 2")
    assert lines[2] == "    the parent's question"
    assert lines[3].startswith("  a/b (asked 2")  # the child's, with when it was asked
    assert lines[4] == "    the child's question"
    assert "waiting for answers to a%2Fb, a/b;" in first.err

    inspected = run_subprocess(tmp_path, "inspect", "run.json", "--json")
    assert list(json.loads(inspected.out)["waiting"]) == ["a%2Fb", "a/b"]
    graph = run_subprocess(tmp_path, "graph", "ambiguous:workflow", "--checkpoint", "run.json")
    assert graph.out.endswith("    class s2 pending\n    class s0,s1 waiting\n"), graph.out

    wrong = run_subprocess(tmp_path, *args, "--answer", "a/c=1")
    assert wrong.code == 2
    assert "the questions pending in the checkpoint: 'a%2Fb', 'a/b'" in wrong.err

    parent = run_subprocess(tmp_path, *args, "--answer", 'a%2Fb="yes"')
    assert parent.code == 3, parent.err
    answered = parent.out.splitlines()
    assert answered[0] == "waiting for an answer:"
    assert answered[1].startswith("  a/b (asked 2")
    assert "waiting for answers to a/b;" in parent.err

    (tmp_path / "answers.json").write_text(json.dumps({"a/b": "no"}), encoding="utf-8")
    done = run_subprocess(tmp_path, *args, "--answers-json", "answers.json")
    assert done.code == 0, done.err
    assert json.loads(done.out) == {"a/b": "yes", "a": {"b": "no"}, "both": ["yes", "no"]}
