"""Checkpoints that contradict themselves, or the workflow, are refused before anything runs.

Each contradiction below was accepted once and resumed silently wrong. Those a
checkpoint shows by itself are refused by `WorkflowCheckpoint.from_dict` with a
`CheckpointFormatError` naming the field; those only the workflow shows are
refused by the resume with a `CheckpointMismatchError` naming the field, before
any step runs. A property test puts random single-field contradictions into
the real checkpoints of a workflow with a map, a condition, a question, a
sub-workflow and a map of sub-workflows: each is refused, or resumes exactly.
A count of a map's items in flight (format 5's ``in_flight_items``) that the
rest of the checkpoint contradicts is always refused by ``from_dict``.
"""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from executionkit import (
    CheckpointFormatError,
    CheckpointMismatchError,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

ANSWER = "yes"


def paid(value: object) -> PatternResult[object]:
    return PatternResult(value, cost=TokenUsage(3, 2, 1))


class Calls(list[str]):
    """The steps, items and children's steps a workflow ran, in call order."""

    def run(self, name: str, make: Callable[..., object]) -> Callable[..., object]:
        """``make``, recording ``name`` each time it is called."""

        def run(*args: Any) -> object:
            self.append(name)
            return make(*args)

        return run


def child(calls: Calls) -> Workflow:
    """A sub-workflow of two paid steps."""
    return Workflow(
        [
            Step("search", calls.run("search", lambda ctx: paid(f"found {ctx.get('item')}"))),
            Step(
                "notes",
                calls.run("notes", lambda ctx: paid(f"notes on {ctx['search']}")),
                depends_on=("search",),
            ),
        ]
    )


def workflow(calls: Calls | None = None, *, expires_after: float | None = 86400) -> Workflow:
    """A map, a condition (and a step skipped by its join), a question, and sub-workflows."""
    calls = Calls() if calls is None else calls
    return Workflow(
        [
            Step("docs", calls.run("docs", lambda ctx: paid(["a", "b", "c"]))),
            Step.map(
                "summaries",
                calls.run("summaries", lambda item, ctx: paid(f"sum {item}")),
                over="docs",
            ),
            Step(
                "short",
                calls.run("short", lambda ctx: "s"),
                depends_on=("docs",),
                when=lambda c: False,
            ),
            Step("after_short", calls.run("after_short", lambda ctx: "a"), depends_on=("short",)),
            Step("research", child(calls), depends_on=("docs",)),
            Step.map("per_doc", child(calls), over="docs"),
            Step.ask(
                "approve",
                lambda ctx: {"plan": ctx["summaries"]},
                depends_on=("summaries",),
                expires_after=expires_after,
            ),
            Step(
                "publish",
                calls.run("publish", lambda ctx: paid(f"published {ctx['approve']}")),
                depends_on=("approve", "research", "per_doc"),
            ),
        ]
    )


def finish(checkpoint: WorkflowCheckpoint | None, calls: Calls | None = None) -> Any:
    """Resume until nothing is pending, answering the question each time it waits."""
    calls = Calls() if calls is None else calls
    answers: dict[str, str] = {}
    for _ in range(5):
        saved: list[WorkflowCheckpoint] = []
        result = workflow(calls).run_sync(
            resume_from=checkpoint, answers=answers, checkpoint_fn=saved.append
        )
        if not result.pending:
            return result
        checkpoint = saved[-1] if saved else checkpoint
        answers = {"approve": ANSWER}
    raise AssertionError("the question is still pending")  # pragma: no cover


@cache
def real() -> tuple[dict[str, Any], ...]:
    """Every checkpoint of a run up to its question, as dicts after a JSON round trip."""
    saved: list[WorkflowCheckpoint] = []
    result = workflow().run_sync(checkpoint_fn=saved.append)
    assert dict(result.pending) == {"approve": {"plan": ["sum a", "sum b", "sum c"]}}
    return tuple(json.loads(json.dumps(checkpoint.to_dict())) for checkpoint in saved)


@cache
def reference() -> tuple[dict[str, Any], TokenUsage]:
    """The outputs and cost of an uninterrupted run (answered as soon as it asks)."""
    result = finish(None)
    return dict(result.outputs), result.cost


@cache
def step_info() -> dict[str, Any]:
    """The ``step_info`` entry of every step, as a run records it."""
    saved: list[WorkflowCheckpoint] = []
    result = workflow().run_sync(
        resume_from=WorkflowCheckpoint.from_dict(real()[-1]),
        answers={"approve": ANSWER},
        checkpoint_fn=saved.append,
    )
    assert not result.pending
    info: dict[str, Any] = json.loads(json.dumps(saved[-1].to_dict()))["step_info"]
    return info


def with_(field: str, name: str) -> dict[str, Any]:
    """A copy of the first real checkpoint whose ``field`` has an entry for step ``name``."""
    return copy.deepcopy(next(data for data in real() if name in data[field]))


def refused(data: dict[str, Any]) -> CheckpointFormatError:
    snapshot = copy.deepcopy(data)
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(data)
    assert data == snapshot, "from_dict must not modify its input"
    return caught.value


def refused_on_resume(data: dict[str, Any], **options: Any) -> str:
    """The resume's refusal of ``data``, which ``from_dict`` accepts; nothing ran."""
    checkpoint = WorkflowCheckpoint.from_dict(data)
    calls = Calls()
    with pytest.raises(CheckpointMismatchError) as caught:
        workflow(calls, **options).run_sync(resume_from=checkpoint, answers={"approve": ANSWER})
    assert calls == []
    return str(caught.value)


def test_the_real_checkpoints_hold_every_kind_of_entry() -> None:
    """The checkpoints the tests start from are real, and resume exactly as they are."""
    for field in ("skipped", "items", "pending", "children", "in_flight_items"):
        assert any(data[field] for data in real()), field
    kinds = {key for data in real() for entry in data["children"].values() for key in entry}
    assert kinds == {"checkpoint", "items"}
    outputs, cost = reference()
    assert outputs["publish"] == f"published {ANSWER}"
    for data in real():
        result = finish(WorkflowCheckpoint.from_dict(data))
        assert (dict(result.outputs), result.cost) == (outputs, cost)


# --- refused by from_dict ------------------------------------------------------------------


def test_a_skipped_map_with_items() -> None:
    """A map cannot be skipped and have finished items (the items were thrown away)."""
    data = with_("items", "summaries")
    data["skipped"]["summaries"] = "condition never returned False"
    error = refused(data)
    assert str(error) == (
        "checkpoint field 'skipped.summaries' contradicts 'items.summaries': a skipped step "
        "never runs, so it has no finished items"
    )
    assert error.path == "skipped.summaries"


def test_a_skipped_step_whose_question_is_pending() -> None:
    data = with_("pending", "approve")
    data["skipped"]["approve"] = "dependency 'summaries' was skipped"
    error = refused(data)
    assert str(error) == (
        "checkpoint field 'skipped.approve' contradicts 'pending.approve': a skipped step "
        "never runs, so it asks no question"
    )
    assert error.path == "skipped.approve"


def test_a_skipped_step_with_a_sub_workflow_in_progress() -> None:
    data = with_("children", "research")
    data["skipped"]["research"] = "condition never returned False"
    error = refused(data)
    assert str(error) == (
        "checkpoint field 'skipped.research' contradicts 'children.research': a skipped step "
        "never runs, so it has no sub-workflow in progress"
    )
    assert error.path == "skipped.research"


def _with_offset(moment: str, hours: int) -> str:
    """The same moment, written with another UTC offset."""
    return datetime.fromisoformat(moment).astimezone(timezone(timedelta(hours=hours))).isoformat()


@pytest.mark.parametrize("field", ["asked_at", "expires_at"])
def test_a_question_time_with_an_offset_other_than_utc(field: str) -> None:
    """The same moment written with +02:00 is refused: the format's times are UTC."""
    data = with_("pending", "approve")
    moment = _with_offset(data["pending"]["approve"][field], 2)
    data["pending"]["approve"][field] = moment
    error = refused(data)
    optional = " or None" if field == "expires_at" else ""
    assert str(error) == (
        f"checkpoint field 'pending.approve.{field}' must be a UTC ISO-8601 timestamp "
        f"str{optional}, got str {moment!r}"
    )
    assert error.path == f"pending.approve.{field}"


@pytest.mark.parametrize("moment", ["2026-12-01T10:00:00Z", "2026-12-01T10:00:00-00:00"])
def test_utc_written_another_way_is_utc(moment: str) -> None:
    data = with_("pending", "approve")
    data["pending"]["approve"]["asked_at"] = moment
    checkpoint = WorkflowCheckpoint.from_dict(data)
    assert checkpoint.pending["approve"]["asked_at"] == moment


# --- refused by the resume, before any step runs --------------------------------------------


def test_a_skip_that_nothing_in_the_workflow_can_make() -> None:
    """A step without ``when``, none of whose dependencies was skipped, is never skipped."""
    data = next(
        copy.deepcopy(data)
        for data in real()
        if "summaries" in data["outputs"] and "approve" not in data["pending"]
    )
    data["skipped"]["approve"] = "condition is_ready returned False"
    data["step_info"]["approve"] = step_info()["approve"]
    assert refused_on_resume(data) == (
        "checkpoint field 'skipped.approve' says step 'approve' was skipped, but nothing in "
        "this workflow skips it: it has no when condition, and its join='all' rule skips it "
        "for none of its dependencies recorded as skipped (none); a resume would never run "
        "it: pass rerun=['approve'] to run it"
    )


def test_a_skip_under_join_any_needs_every_dependency_skipped() -> None:
    def flow(*, when: bool) -> Workflow:
        return Workflow(
            [
                Step("a", lambda ctx: 1, when=lambda ctx: when),
                Step("b", lambda ctx: 2),
                Step("c", lambda ctx: 3, depends_on=("a", "b"), join="any"),
            ]
        )

    saved: list[WorkflowCheckpoint] = []
    flow(when=False).run_sync(checkpoint_fn=saved.append)
    data = saved[-1].to_dict()
    assert data["outputs"] == {"b": 2, "c": 3}
    del data["outputs"]["c"]
    data["step_index"] = 1
    data["skipped"]["c"] = "every dependency was skipped ('a', 'b')"
    checkpoint = WorkflowCheckpoint.from_dict(data)
    with pytest.raises(CheckpointMismatchError) as caught:
        flow(when=False).run_sync(resume_from=checkpoint)
    assert str(caught.value) == (
        "checkpoint field 'skipped.c' says step 'c' was skipped, but nothing in this workflow "
        "skips it: it has no when condition, and its join='any' rule skips it for none of "
        "its dependencies recorded as skipped ('a'); a resume would never run it: pass "
        "rerun=['c'] to run it"
    )
    assert flow(when=False).run_sync(resume_from=checkpoint, rerun=["c"]).executed == ("c",)


def test_skips_the_join_rule_or_a_condition_makes_are_kept() -> None:
    """A recorded skip by the join rule, or of a step with ``when``, resumes as it is."""
    data = with_("skipped", "short")
    assert list(data["skipped"]) == ["short"]
    data["skipped"]["after_short"] = "dependency 'short' was skipped"
    data["step_info"]["after_short"] = step_info()["after_short"]
    result = finish(WorkflowCheckpoint.from_dict(data))
    assert (dict(result.outputs), result.cost) == reference()
    assert "after_short" not in result.executed


def test_a_skip_whose_condition_was_removed_runs_with_rerun() -> None:
    """Removing ``when`` makes a recorded skip of that step a contradiction: rerun decides."""
    saved: list[WorkflowCheckpoint] = []
    Workflow([Step("a", lambda ctx: 1, when=lambda ctx: False)]).run_sync(
        checkpoint_fn=saved.append
    )
    without = Workflow([Step("a", lambda ctx: 1)])
    with pytest.raises(CheckpointMismatchError, match=r"^checkpoint field 'skipped.a' says"):
        without.run_sync(resume_from=saved[-1])
    assert dict(without.run_sync(resume_from=saved[-1], rerun=["a"]).outputs) == {"a": 1}


def test_items_of_children_for_a_sub_workflow_step() -> None:
    """``items`` under a plain sub-workflow step (its recorded child step ran again)."""
    data = with_("children", "research")
    entry = data["children"]["research"]
    data["children"]["research"] = {"items": {"0": entry["checkpoint"]}}
    assert refused_on_resume(data) == (
        "checkpoint field 'children.research.items' holds a sub-workflow per item, but step "
        "'research' runs one sub-workflow, recorded under 'checkpoint'; pass "
        "rerun=['research'] to start it over"
    )


def test_one_checkpoint_of_children_for_a_map_of_sub_workflows() -> None:
    """A ``checkpoint`` under a map of sub-workflows (it was ignored)."""
    data = with_("children", "per_doc")
    items = data["children"]["per_doc"]["items"]
    data["children"]["per_doc"] = {"checkpoint": next(iter(items.values()))}
    assert refused_on_resume(data) == (
        "checkpoint field 'children.per_doc.checkpoint' holds one sub-workflow, but step "
        "'per_doc' is a map of sub-workflows, recorded under 'items' by item key; pass "
        "rerun=['per_doc'] to start it over"
    )


# --- the deadline comes from expires_after --------------------------------------------------


def _later(moment: str, **delta: float) -> str:
    return (datetime.fromisoformat(moment) + timedelta(**delta)).isoformat()


def test_an_extended_deadline_is_refused() -> None:
    data = with_("pending", "approve")
    entry = data["pending"]["approve"]
    asked, deadline = entry["asked_at"], entry["expires_at"]
    assert deadline == _later(asked, days=1)
    entry["expires_at"] = _later(deadline, days=365)
    assert refused_on_resume(data) == (
        f"checkpoint field 'pending.approve.expires_at' is {entry['expires_at']!r}, but step "
        f"'approve' asked at {asked} expires at {deadline} (expires_after); a deadline comes "
        f"from the step's expires_after, never from the checkpoint: pass rerun=['approve'] "
        f"to ask again"
    )


def test_a_removed_deadline_is_refused() -> None:
    data = with_("pending", "approve")
    entry = data["pending"]["approve"]
    entry["expires_at"] = None
    assert refused_on_resume(data).startswith(
        "checkpoint field 'pending.approve.expires_at' is None, but step 'approve' asked at "
    )


def test_a_deadline_for_a_step_without_expires_after_is_refused() -> None:
    data = with_("pending", "approve")
    deadline = data["pending"]["approve"]["expires_at"]
    assert refused_on_resume(data, expires_after=None) == (
        f"checkpoint field 'pending.approve.expires_at' is {deadline!r}, but step 'approve' "
        f"has no expires_after, so its question never expires; a deadline comes from the "
        f"step's expires_after, never from the checkpoint: pass rerun=['approve'] to ask again"
    )


def test_a_deadline_is_asked_at_plus_expires_after_as_declared() -> None:
    """A matching deadline resumes; rerun asks again with a fresh one."""
    data = with_("pending", "approve")
    result = finish(WorkflowCheckpoint.from_dict(data))
    assert (dict(result.outputs), result.cost) == reference()
    data["pending"]["approve"]["expires_at"] = None
    saved: list[WorkflowCheckpoint] = []
    again = workflow().run_sync(
        resume_from=WorkflowCheckpoint.from_dict(data),
        rerun=["approve"],
        checkpoint_fn=saved.append,
    )
    assert list(again.pending) == ["approve"]
    entry = saved[-1].pending["approve"]
    assert entry["expires_at"] == _later(entry["asked_at"], days=1)
    assert datetime.fromisoformat(entry["asked_at"]) > datetime.fromisoformat(
        data["pending"]["approve"]["asked_at"]
    )


# --- the run never writes a contradiction ---------------------------------------------------


def _maps_and_children(*, skip: bool) -> Workflow:
    """A map and a sub-workflow that fail part way, with a condition skipping both if ``skip``."""

    def item(value: str, ctx: Any) -> str:
        if value == "c":
            raise RuntimeError("down")
        return value.upper()

    def down(ctx: Any) -> str:
        raise RuntimeError("down")

    nested = Workflow([Step("x", lambda ctx: 1), Step("y", down, depends_on=("x",))])
    return Workflow(
        [
            Step("docs", lambda ctx: ["a", "b", "c"]),
            Step.map("m", item, over="docs", when=lambda ctx: not skip),
            Step("sub", nested, depends_on=("docs",), when=lambda ctx: not skip),
        ]
    )


def _store(kind: str, tmp_path: Path) -> Any:
    if kind == "json-file":
        return JsonFileStore(tmp_path / "run.json")
    if kind == "json-lines":
        return JsonLinesStore(tmp_path / "run.jsonl")
    return SQLiteStore(tmp_path / "runs.db")


@pytest.mark.parametrize("kind", ["json-file", "json-lines", "sqlite"])
def test_a_restored_map_or_child_that_a_condition_now_skips_drops_its_work(
    kind: str, tmp_path: Path
) -> None:
    """Work restored for a step its condition then skips is dropped: the skip is stored alone."""
    store = _store(kind, tmp_path)
    saved: list[WorkflowCheckpoint] = []

    def keep(checkpoint: WorkflowCheckpoint) -> None:
        saved.append(checkpoint)
        store(checkpoint)

    with pytest.raises(WorkflowFailed):
        _maps_and_children(skip=False).run_sync(checkpoint_fn=keep, run_id="r")
    assert list(saved[-1].items) == ["m"]
    assert list(saved[-1].children) == ["sub"]
    result = _maps_and_children(skip=True).run_sync(resume_from=saved[-1], checkpoint_fn=store)
    assert set(result.skipped) == {"m", "sub"}
    loaded = store.load("r") if kind == "sqlite" else store.load()
    assert set(loaded.skipped) == {"m", "sub"}
    assert (dict(loaded.items), dict(loaded.children)) == ({}, {})
    again = WorkflowCheckpoint.from_dict(json.loads(json.dumps(loaded.to_dict())))
    assert set(again.skipped) == {"m", "sub"}


# --- the property -----------------------------------------------------------------------------

NAMES = ("docs", "summaries", "short", "after_short", "research", "per_doc", "approve", "publish")
MAPS = ("summaries", "per_doc")


def _describe(data: dict[str, Any], name: str) -> None:
    """Give ``name`` its real ``step_info`` entry, as a field naming it needs."""
    data["step_info"].setdefault(name, step_info()[name])


def _a_child(draw: st.DrawFn) -> dict[str, Any]:
    children = [
        child
        for data in real()
        for entry in data["children"].values()
        for child in ([entry["checkpoint"]] if "checkpoint" in entry else entry["items"].values())
    ]
    return copy.deepcopy(draw(st.sampled_from(children)))


def _contradict_skipped(draw: st.DrawFn, data: dict[str, Any]) -> None:
    name = draw(st.sampled_from([n for n in NAMES if n not in data["outputs"]]))
    data["skipped"][name] = draw(st.sampled_from(["condition f returned False", "?"]))
    _describe(data, name)


def _contradict_items(draw: st.DrawFn, data: dict[str, Any]) -> None:
    # Items of a step that is not a map, or is skipped: never a map's real items.
    choices = [n for n in NAMES if n not in data["outputs"]]
    choices = [n for n in choices if n not in MAPS or n in data["skipped"]]
    name = draw(st.sampled_from(choices))
    outputs = draw(st.dictionaries(st.sampled_from(["0", "1", "x"]), st.integers(), max_size=2))
    cost = {"input_tokens": 1, "output_tokens": 0, "llm_calls": 0}
    data["items"][name] = {"outputs": outputs, "cost": cost}
    _describe(data, name)


def _contradict_pending(draw: st.DrawFn, data: dict[str, Any]) -> None:
    # A question of a step that asks none, or is skipped.
    choices = [n for n in NAMES if n not in data["outputs"] and n != "approve"]
    name = draw(st.sampled_from(choices))
    now = datetime.now(UTC)
    data["pending"][name] = {
        "question": "?",
        "asked_at": now.isoformat(),
        "expires_at": draw(st.sampled_from([None, (now + timedelta(days=1)).isoformat()])),
    }
    _describe(data, name)


def _contradict_children(draw: st.DrawFn, data: dict[str, Any]) -> None:
    present = list(data["children"])
    swap = draw(st.booleans()) and bool(present)
    if swap:
        name = draw(st.sampled_from(present))
        entry = data["children"][name]
        if "checkpoint" in entry:
            data["children"][name] = {"items": {"0": entry["checkpoint"]}}
        else:
            data["children"][name] = {"checkpoint": next(iter(entry["items"].values()))}
        return
    # Children of a step that runs no sub-workflow, or is skipped.
    choices = [n for n in NAMES if n not in data["outputs"]]
    choices = [n for n in choices if n not in ("research", "per_doc") or n in data["skipped"]]
    name = draw(st.sampled_from(choices))
    kind = draw(st.sampled_from(["checkpoint", "items"]))
    nested = _a_child(draw)
    data["children"][name] = {kind: nested if kind == "checkpoint" else {"0": nested}}
    _describe(data, name)


def _contradict_in_flight_items(draw: st.DrawFn, data: dict[str, Any]) -> None:
    """A count of items in flight (format 5) that the rest of the checkpoint contradicts.

    For a step recorded or skipped (an ended map runs no item), for a step that
    ``step_info`` describes (for what else the checkpoint holds of it) as another
    kind than a map, or for a map that ``in_flight`` also lists by name (its items
    are counted once). ``step_info`` describes no step for its count alone, so a
    step it does not describe is not given an entry here.
    """
    ended = [n for n in NAMES if n in data["outputs"] or n in data["skipped"]]
    running = [n for n in NAMES if n not in ended]
    other_kinds = [n for n in running if n not in MAPS and n in data["step_info"]]
    maps = [n for n in running if n in MAPS]
    hows = [
        how
        for how, names in (("ended", ended), ("kind", other_kinds), ("listed", maps))
        if names  # "docs" is recorded in every real checkpoint: "ended" always is
    ]
    how = draw(st.sampled_from(hows))
    if how == "ended":
        name = draw(st.sampled_from(ended))
    elif how == "kind":
        name = draw(st.sampled_from(other_kinds))
    else:
        name = draw(st.sampled_from(maps))
        if [name, None, 1] not in data["in_flight"]:
            data["in_flight"].append([name, None, 1])
    data["in_flight_items"][name] = draw(st.integers(1, 5))


def _contradict_time(draw: st.DrawFn, data: dict[str, Any], field: str) -> None:
    entry = data["pending"]["approve"]
    hows = ["offset", "shift", "none"] if field == "expires_at" else ["offset", "shift"]
    how = draw(st.sampled_from(hows))
    if how == "none":
        entry[field] = None
    elif how == "offset":
        hours = draw(st.integers(-12, 12).filter(bool))
        entry[field] = _with_offset(entry[field], hours)
    else:
        entry[field] = _later(entry[field], seconds=draw(st.integers(-(10**7), 10**7)))


@st.composite
def contradictions(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A real checkpoint dict with one field made to contradict the rest, or the workflow."""
    field = draw(
        st.sampled_from(
            [
                "skipped",
                "items",
                "pending",
                "children",
                "in_flight_items",
                "asked_at",
                "expires_at",
            ]
        )
    )
    if field in ("asked_at", "expires_at"):
        data = with_("pending", "approve")
        _contradict_time(draw, data, field)
        return field, data
    data = copy.deepcopy(draw(st.sampled_from(real())))
    {
        "skipped": _contradict_skipped,
        "items": _contradict_items,
        "pending": _contradict_pending,
        "children": _contradict_children,
        "in_flight_items": _contradict_in_flight_items,
    }[field](draw, data)
    return field, data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contradictions())
def test_a_contradiction_is_refused_or_resumes_exactly(case: tuple[str, dict[str, Any]]) -> None:
    """Refused by ``from_dict`` or by the resume before anything runs, or the exact result."""
    field, data = case
    refusal: CheckpointFormatError | None = None
    try:
        checkpoint = WorkflowCheckpoint.from_dict(data)
    except CheckpointFormatError as exc:
        refusal = exc
    if refusal is not None:
        event(f"{field}: refused by from_dict")
        named = re.match(r"[a-z_]+", refusal.path)
        assert named is not None
        # A count of items in flight is refused as its own entry, or as the entry of
        # in_flight that lists its map too.
        assert named.group() in ("skipped", "items", "pending", "children", "in_flight_items") or (
            field == "in_flight_items" and named.group() == "in_flight"
        )
        return
    # A count of items in flight contradicting the checkpoint is seen by the checkpoint.
    assert field != "in_flight_items", "from_dict accepted a contradictory in_flight_items"
    calls = Calls()
    try:
        result = finish(checkpoint, calls)
    except CheckpointMismatchError:
        event(f"{field}: refused by the resume")
        assert calls == []
        return
    event(f"{field}: resumed")
    assert (dict(result.outputs), result.cost) == reference()


def _base() -> dict[str, Any]:
    """A small valid format-4 checkpoint, as `to_dict` writes it."""
    from executionkit import Step, Workflow  # noqa: PLC0415 - kept beside these tests

    saved: list[WorkflowCheckpoint] = []
    Workflow([Step("a", run=lambda ctx: 1), Step("b", run=lambda ctx: 2)]).run_sync(
        checkpoint_fn=saved.append
    )
    return copy.deepcopy(saved[-1].to_dict())


def test_a_step_both_recorded_and_failed_is_refused() -> None:
    """A step in both outputs and errors: from_dict names it (issue 31)."""
    data = _base()
    data["errors"] = {"a": "ValueError: bad"}
    with pytest.raises(CheckpointFormatError, match=r"'errors\.a' names a step that 'outputs'"):
        WorkflowCheckpoint.from_dict(data)


@pytest.mark.parametrize(
    ("in_flight", "what"),
    [([["a", None, 1]], "step 'a'"), ([["b", None, 2], ["c", None, 1]], "step 'b'")],
)
def test_an_attempt_in_flight_of_a_recorded_step_is_refused(
    in_flight: list[list[Any]], what: str
) -> None:
    """A recorded step has ended: listed in flight, a resume would book money nobody spent.

    From_dict refuses it naming the entry (issue 31); a step not recorded, or a path into a
    sub-workflow (the child's to check), is fine.
    """
    data = _base()
    data["in_flight"] = in_flight
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(data)
    assert caught.value.path == "in_flight[0]"
    assert str(caught.value).startswith(f"checkpoint field 'in_flight[0]' names {what}, which")
    data["in_flight"] = [["c", None, 1], ["sub/a", None, 1]]
    assert WorkflowCheckpoint.from_dict(data).in_flight == (("c", None, 1), ("sub/a", None, 1))


@pytest.mark.parametrize("field", ["seq", "cost.input_tokens", "cost.llm_calls"])
def test_a_count_past_a_bigint_is_refused_and_the_message_prints(field: str) -> None:
    """A 5,000-digit count is refused naming the field; the message never raises itself."""
    data = _base()
    huge = 10**5000
    if field == "seq":
        data["seq"] = huge
    else:
        data["cost"][field.split(".")[1]] = huge
    with pytest.raises(CheckpointFormatError, match=r"must be an int below 2\*\*63") as caught:
        WorkflowCheckpoint.from_dict(data)
    assert caught.value.path == field
    assert "an int of 16610 bits" in str(caught.value)
    data_ok = _base()
    data_ok["seq"] = 2**63 - 1
    assert repr(WorkflowCheckpoint.from_dict(data_ok)).startswith("WorkflowCheckpoint(")


def test_seq_0_with_outputs_is_what_a_checkpoint_built_by_hand_is() -> None:
    """Seq 0 with a run_id and outputs is accepted on purpose (decision in issue 31's note).

    The constructor's seq defaults to 0, and checkpoints built by hand with a
    run_id are common; seq only orders the writes of one run, and the run resumed
    from it numbers its next checkpoint 1, which every store takes.
    """
    data = _base()
    data["seq"] = 0
    checkpoint = WorkflowCheckpoint.from_dict(data)
    saved: list[WorkflowCheckpoint] = []
    Workflow([Step("a", run=lambda ctx: 1), Step("b", run=lambda ctx: 2)]).run_sync(
        resume_from=checkpoint, checkpoint_fn=saved.append
    )
    assert [cp.seq for cp in saved] == []  # nothing left to run: nothing to save
    for field in ("outputs", "step_info"):
        data[field].pop("b")
    data["step_index"] = 1
    Workflow([Step("a", run=lambda ctx: 1), Step("b", run=lambda ctx: 2)]).run_sync(
        resume_from=WorkflowCheckpoint.from_dict(data), checkpoint_fn=saved.append
    )
    assert [cp.seq for cp in saved] == [1]


@pytest.mark.parametrize(
    ("child_id", "shown"),
    [(None, "has none"), ("parent", "has 'parent'"), ("elsewhere", "has 'elsewhere'")],
)
def test_a_sub_workflow_without_a_run_id_of_its_own_is_refused(
    child_id: str | None, shown: str
) -> None:
    """A child's run_id is '<run_id>/<step>': missing, the parent's own or another form is refused.

    The path names the child, in a sub-workflow step and in a map of them alike.
    """
    data = with_("children", "research")
    data["run_id"] = "parent"
    entry = data["children"]["research"]
    entry["checkpoint"]["run_id"] = child_id
    error = refused(data)
    assert error.path == "children.research.checkpoint.run_id"
    assert str(error).endswith(f"(such as 'parent/research'), but it {shown}")
    entry["checkpoint"]["run_id"] = "an older parent/research"  # a fork keeps its children's
    assert WorkflowCheckpoint.from_dict(data).children["research"]["checkpoint"].run_id == (
        "an older parent/research"
    )
    mapped = with_("children", "per_doc")
    mapped["run_id"] = "parent"
    key, item = next(iter(mapped["children"]["per_doc"]["items"].items()))
    item["run_id"] = None
    assert refused(mapped).path == f"children.per_doc.items.{key}.run_id"
