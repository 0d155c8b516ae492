"""Resuming after the workflow changed: exactly which recorded steps run again, and why.

A base workflow ``fetch -> (summarize, keywords) -> score(summarize) ->
report(summarize, keywords, score)`` is run with a list-appending checkpoint_fn;
its checkpoints (after a JSON round trip) are resumed by a modified workflow.
Every case pins the steps that run (each exactly once), ``result.invalidated``
with its reasons, ``result.restored``, the outputs (those of a fresh run of the
modified workflow) and the cost (checkpoint cost plus everything that ran).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointMismatchError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    WorkflowResult,
    current_step,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

Spec = dict[str, tuple[tuple[str, ...], str | None]]
"""Step name -> (depends_on, version), in declaration order."""

BASE: Spec = {
    "fetch": ((), None),
    "summarize": (("fetch",), "1"),
    "keywords": (("fetch",), None),
    "score": (("summarize",), None),
    "report": (("summarize", "keywords", "score"), None),
}
NAMES = tuple(BASE)

# Powers of two: any sum of distinct steps' costs tells which steps were paid for.
COSTS: dict[str, TokenUsage] = {
    name: TokenUsage(2**i, 1000 * 2**i, 1)
    for i, name in enumerate([*NAMES, "translate", "clean", "tags", "digest"])
}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class Harness:
    """Builds workflows from specs and counts how often each step runs."""

    costs: Mapping[str, TokenUsage] = field(default_factory=lambda: COSTS)
    calls: Counter[str] = field(default_factory=Counter)

    def workflow(self, spec: Spec) -> Workflow:
        return Workflow(
            Step(name, self._run(name, deps, version), deps, version=version)
            for name, (deps, version) in spec.items()
        )

    def _run(
        self, name: str, deps: tuple[str, ...], version: str | None
    ) -> Callable[[Mapping[str, Any]], Any]:
        # The output depends on the step's name, version and inputs, never on the
        # order its dependencies are listed in.
        async def run(ctx: Mapping[str, Any]) -> PatternResult[str]:
            self.calls[name] += 1
            inputs = ",".join(f"{dep}={ctx[dep]}" for dep in sorted(set(deps)))
            return PatternResult(digest(f"{name}|{version}|{inputs}"), cost=self.costs[name])

        return run


def total(names: Iterable[str], costs: Mapping[str, TokenUsage] = COSTS) -> TokenUsage:
    usage = TokenUsage()
    for name in names:
        usage += costs[name]
    return usage


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


async def base_checkpoints(spec: Spec = BASE) -> list[WorkflowCheckpoint]:
    saved: list[WorkflowCheckpoint] = []
    await Harness().workflow(spec).run(checkpoint_fn=saved.append)
    return [round_trip(checkpoint) for checkpoint in saved]


async def fresh_outputs(spec: Spec) -> dict[str, Any]:
    return dict((await Harness().workflow(spec).run()).outputs)


def changed(spec: Spec, name: str, *, deps: Iterable[str] | None = None, **version: Any) -> Spec:
    """``spec`` with step ``name`` given new ``deps`` and/or a new ``version=``."""
    old_deps, old_version = spec[name]
    new = dict(spec)
    new[name] = (
        old_deps if deps is None else tuple(deps),
        version.get("version", old_version),
    )
    return new


def added(spec: Spec, name: str, deps: tuple[str, ...], *, after: str) -> Spec:
    """``spec`` with a new step ``name`` declared right after ``after``."""
    new: Spec = {}
    for existing, entry in spec.items():
        new[existing] = entry
        if existing == after:
            new[name] = (deps, None)
    return new


def renamed(spec: Spec, old: str, new: str) -> Spec:
    """``spec`` with step ``old`` renamed to ``new`` everywhere."""
    return {
        (new if name == old else name): (
            tuple(new if dep == old else dep for dep in deps),
            version,
        )
        for name, (deps, version) in spec.items()
    }


def step_info_of(spec: Spec) -> dict[str, dict[str, Any]]:
    return {
        name: {"version": v, "depends_on": list(dict.fromkeys(deps))}
        for name, (deps, v) in spec.items()
    }


def described(step_info: Any) -> dict[str, dict[str, Any]]:
    """``step_info`` as a dict, without the code fingerprints (tested in test_code_change.py)."""
    return {
        name: {key: value for key, value in entry.items() if key != "code"}
        for name, entry in step_info.items()
    }


def invalid(name: str) -> str:
    return f"depends on invalidated step {name!r}"


def unrecorded(name: str) -> str:
    return (
        f"depends on {name!r}, which the checkpoint does not record, "
        f"so its output was computed without it"
    )


@dataclass
class Resumed:
    result: WorkflowResult
    calls: Counter[str]
    saved: list[WorkflowCheckpoint]


async def resume(
    spec: Spec,
    checkpoint: WorkflowCheckpoint,
    *,
    rerun: list[str] | None = None,
    unknown_steps: Any = "error",
) -> Resumed:
    harness = Harness()
    saved: list[WorkflowCheckpoint] = []
    result = await harness.workflow(spec).run(
        resume_from=checkpoint,
        rerun=rerun,
        unknown_steps=unknown_steps,
        checkpoint_fn=saved.append,
    )
    return Resumed(result, harness.calls, saved)


async def check_resume(
    spec: Spec,
    checkpoint: WorkflowCheckpoint,
    *,
    ran: set[str],
    invalidated: dict[str, str],
    rerun: list[str] | None = None,
    unknown_steps: Any = "error",
    discarded: tuple[str, ...] = (),
) -> Resumed:
    """Resume and check everything the module docstring promises."""
    resumed = await resume(spec, checkpoint, rerun=rerun, unknown_steps=unknown_steps)
    result = resumed.result
    assert resumed.calls == Counter(dict.fromkeys(ran, 1))
    assert sorted(result.executed) == sorted(ran)
    assert dict(result.invalidated) == invalidated
    assert list(result.invalidated) == [name for name in spec if name in invalidated]
    assert result.restored == tuple(
        name for name in spec if name in checkpoint.outputs and name not in invalidated
    )
    assert result.discarded == discarded
    assert dict(result.outputs) == await fresh_outputs(spec)
    # Tokens of invalidated steps were spent: they stay in the checkpoint's cost.
    assert result.cost == checkpoint.cost + total(ran)
    if ran:
        last = resumed.saved[-1].to_dict()
        assert last["outputs"] == dict(result.outputs)
        assert described(last["step_info"]) == step_info_of(spec)
    else:
        assert resumed.saved == []
    return resumed


# --- the table ---------------------------------------------------------------------------

V12 = "version changed from '1' to '2'"

TABLE = [
    pytest.param(
        changed(BASE, "summarize", version="2"),
        None,
        {"summarize", "score", "report"},
        {"summarize": V12, "score": invalid("summarize"), "report": invalid("summarize")},
        id="version-bump-of-a-middle-step",
    ),
    pytest.param(
        changed(BASE, "keywords", version="1"),
        None,
        {"keywords", "report"},
        {
            "keywords": "version changed from no version to '1'",
            "report": invalid("keywords"),
        },
        id="version-added",
    ),
    pytest.param(
        changed(BASE, "summarize", version=None),
        None,
        {"summarize", "score", "report"},
        {
            "summarize": "version changed from '1' to no version",
            "score": invalid("summarize"),
            "report": invalid("summarize"),
        },
        id="version-removed",
    ),
    pytest.param(
        changed(BASE, "report", version="1"),
        None,
        {"report"},
        {"report": "version changed from no version to '1'"},
        id="version-bump-of-a-leaf",
    ),
    pytest.param(
        changed(BASE, "fetch", version="2"),
        None,
        set(NAMES),
        {
            "fetch": "version changed from no version to '2'",
            "summarize": invalid("fetch"),
            "keywords": invalid("fetch"),
            "score": invalid("summarize"),
            # A descendant names its first-declared invalidated dependency.
            "report": invalid("summarize"),
        },
        id="version-bump-of-the-root",
    ),
    pytest.param(
        changed(BASE, "score", deps=("summarize", "keywords")),
        None,
        {"score", "report"},
        {
            "score": "dependencies changed from ['summarize'] to ['keywords', 'summarize']",
            "report": invalid("score"),
        },
        id="dependency-added",
    ),
    pytest.param(
        changed(BASE, "report", deps=("summarize", "score")),
        None,
        {"report"},
        {
            "report": (
                "dependencies changed from ['keywords', 'score', 'summarize'] "
                "to ['score', 'summarize']"
            )
        },
        id="dependency-removed",
    ),
    pytest.param(
        changed(BASE, "report", deps=("score", "keywords", "summarize")),
        None,
        set(),
        {},
        id="dependency-order-changed-only",
    ),
    pytest.param(
        changed(BASE, "keywords", deps=("fetch", "fetch")),
        None,
        set(),
        {},
        id="duplicate-dependency-is-the-same-set",
    ),
    pytest.param(
        added(BASE, "translate", ("summarize",), after="report"),
        None,
        {"translate"},
        {},
        id="new-leaf-step-runs-alone",
    ),
    pytest.param(
        added(BASE, "clean", (), after="fetch"),
        None,
        {"clean"},
        {},
        id="new-independent-step-runs-alone",
    ),
    pytest.param(
        changed(
            added(BASE, "clean", ("fetch",), after="fetch"), "summarize", deps=("fetch", "clean")
        ),
        None,
        {"clean", "summarize", "score", "report"},
        {
            # The recorded deps differ, and that reason comes before "does not record".
            "summarize": "dependencies changed from ['fetch'] to ['clean', 'fetch']",
            "score": invalid("summarize"),
            "report": invalid("summarize"),
        },
        id="recorded-step-gains-a-new-step-as-dependency",
    ),
    pytest.param(
        changed(changed(BASE, "summarize", version="2"), "summarize", deps=()),
        None,
        {"summarize", "score", "report"},
        {"summarize": V12, "score": invalid("summarize"), "report": invalid("summarize")},
        id="version-reason-beats-dependency-reason",
    ),
    pytest.param(
        BASE,
        ["summarize"],
        {"summarize", "score", "report"},
        {
            "summarize": "rerun requested",
            "score": invalid("summarize"),
            "report": invalid("summarize"),
        },
        id="rerun-of-a-middle-step",
    ),
    pytest.param(
        BASE,
        ["report"],
        {"report"},
        {"report": "rerun requested"},
        id="rerun-of-a-leaf",
    ),
    pytest.param(
        BASE,
        ("keywords", "score"),
        {"keywords", "score", "report"},
        {
            "keywords": "rerun requested",
            "score": "rerun requested",
            "report": invalid("keywords"),
        },
        id="rerun-of-two-steps",
    ),
    pytest.param(
        BASE,
        [],
        set(),
        {},
        id="empty-rerun-runs-nothing",
    ),
    pytest.param(
        changed(changed(BASE, "summarize", version="2"), "summarize", deps=()),
        {"summarize"},
        {"summarize", "score", "report"},
        {
            "summarize": "rerun requested",
            "score": invalid("summarize"),
            "report": invalid("summarize"),
        },
        id="rerun-reason-beats-version-and-dependency-reasons",
    ),
    pytest.param(
        changed(BASE, "score", version="7"),
        ["summarize"],
        {"summarize", "score", "report"},
        {
            "summarize": "rerun requested",
            # A step's own reason is reported rather than the inherited one.
            "score": "version changed from no version to '7'",
            "report": invalid("summarize"),
        },
        id="descendant-with-its-own-reason-keeps-it",
    ),
]


@pytest.mark.parametrize(("spec", "rerun", "ran", "invalidated"), TABLE)
async def test_resume_from_the_last_checkpoint_runs_exactly(
    spec: Spec, rerun: list[str] | None, ran: set[str], invalidated: dict[str, str]
) -> None:
    """Each change reruns exactly the expected steps, once, with the pinned reasons."""
    checkpoints = await base_checkpoints()
    assert len(checkpoints) == 4
    assert set(checkpoints[-1].outputs) == set(NAMES)
    await check_resume(spec, checkpoints[-1], rerun=rerun, ran=ran, invalidated=invalidated)


# --- from every checkpoint of the run -----------------------------------------------------

EVERY_CHECKPOINT = [
    # (checkpoint index, rerun, version of summarize, steps that run, invalidated)
    pytest.param(
        0,
        None,
        "2",
        {"summarize", "keywords", "score", "report"},
        {},
        id="bump-after-batch-1",
    ),
    pytest.param(
        1,
        None,
        "2",
        {"summarize", "score", "report"},
        {"summarize": V12},
        id="bump-after-batch-2",
    ),
    pytest.param(
        2,
        None,
        "2",
        {"summarize", "score", "report"},
        {"summarize": V12, "score": invalid("summarize")},
        id="bump-after-batch-3",
    ),
    pytest.param(
        3,
        None,
        "2",
        {"summarize", "score", "report"},
        {"summarize": V12, "score": invalid("summarize"), "report": invalid("summarize")},
        id="bump-after-batch-4",
    ),
    pytest.param(
        0,
        ["summarize"],
        "1",
        {"summarize", "keywords", "score", "report"},
        {},
        id="rerun-of-an-unrecorded-step-after-batch-1",
    ),
    pytest.param(
        1,
        ["score"],
        "1",
        {"score", "report"},
        {},
        id="rerun-of-an-unrecorded-step-after-batch-2",
    ),
    pytest.param(
        1,
        ["summarize"],
        "1",
        {"summarize", "score", "report"},
        {"summarize": "rerun requested"},
        id="rerun-after-batch-2",
    ),
    pytest.param(
        2,
        ["summarize"],
        "1",
        {"summarize", "score", "report"},
        {"summarize": "rerun requested", "score": invalid("summarize")},
        id="rerun-after-batch-3",
    ),
]


@pytest.mark.parametrize(("index", "rerun", "version", "ran", "invalidated"), EVERY_CHECKPOINT)
async def test_resume_from_every_checkpoint_of_the_run(
    index: int,
    rerun: list[str] | None,
    version: str,
    ran: set[str],
    invalidated: dict[str, str],
) -> None:
    """Only recorded steps are invalidated; the rest just run as on any resume."""
    checkpoint = (await base_checkpoints())[index]
    await check_resume(
        changed(BASE, "summarize", version=version),
        checkpoint,
        rerun=rerun,
        ran=ran,
        invalidated=invalidated,
    )


# --- what the resumed run records ---------------------------------------------------------


async def test_checkpoints_record_each_steps_version_and_dependencies() -> None:
    checkpoints = await base_checkpoints()
    first = described(checkpoints[0].to_dict()["step_info"])
    assert first == {"fetch": {"version": None, "depends_on": []}}
    assert described(checkpoints[-1].to_dict()["step_info"]) == step_info_of(BASE)


async def test_invalidated_outputs_are_dropped_until_they_run_again() -> None:
    """The resumed run's checkpoints never carry the stale outputs, only the new ones."""
    checkpoints = await base_checkpoints()
    spec = changed(BASE, "summarize", version="2")
    resumed = await resume(spec, checkpoints[-1])
    assert [list(cp.outputs) for cp in resumed.saved] == [
        ["fetch", "keywords", "summarize"],
        ["fetch", "keywords", "summarize", "score"],
        ["fetch", "keywords", "summarize", "score", "report"],
    ]
    assert [cp.step_index for cp in resumed.saved] == [3, 4, 5]
    first = resumed.saved[0]
    assert first.step_info["summarize"]["version"] == "2"
    assert first.outputs["fetch"] == checkpoints[-1].outputs["fetch"]
    assert first.outputs["summarize"] != checkpoints[-1].outputs["summarize"]
    assert first.cost == checkpoints[-1].cost + COSTS["summarize"]
    assert [cp.seq for cp in resumed.saved] == [5, 6, 7]


async def test_tokens_of_invalidated_steps_stay_counted() -> None:
    """The final cost pays for the first run of every step and the rerun ones again."""
    checkpoints = await base_checkpoints()
    assert checkpoints[-1].cost == total(NAMES)
    spec = changed(BASE, "summarize", version="2")
    resumed = await resume(spec, checkpoints[-1])
    fresh = await Harness().workflow(spec).run()
    assert fresh.cost == total(NAMES)
    assert resumed.result.cost == total(NAMES) + total(["summarize", "score", "report"])


async def test_resuming_the_resumed_runs_checkpoints_invalidates_nothing_more() -> None:
    """Once rerun, the new versions are recorded: a further resume trusts them."""
    spec = changed(BASE, "summarize", version="2")
    first = await resume(spec, (await base_checkpoints())[-1])
    for checkpoint in first.saved:
        recorded = set(checkpoint.outputs)
        await check_resume(spec, round_trip(checkpoint), ran=set(NAMES) - recorded, invalidated={})


# --- renamed and removed steps ------------------------------------------------------------

RENAMED_MESSAGE = (
    "checkpoint records outputs of steps this workflow does not have: {names} "
    "(a checkpoint of another workflow, or renamed steps); "
    "pass unknown_steps='discard' to drop them"
)


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        pytest.param(renamed(BASE, "keywords", "tags"), "'keywords'", id="renamed-step"),
        pytest.param(
            renamed(renamed(BASE, "keywords", "tags"), "summarize", "digest"),
            "'summarize', 'keywords'",
            id="two-renamed-steps",
        ),
        pytest.param(
            {name: entry for name, entry in BASE.items() if name != "report"},
            "'report'",
            id="removed-step",
        ),
    ],
)
async def test_unknown_recorded_steps_are_an_error_by_default(spec: Spec, names: str) -> None:
    checkpoint = (await base_checkpoints())[-1]
    harness = Harness()
    saved: list[WorkflowCheckpoint] = []
    with pytest.raises(
        CheckpointMismatchError, match=re.escape(RENAMED_MESSAGE.format(names=names))
    ):
        await harness.workflow(spec).run(resume_from=checkpoint, checkpoint_fn=saved.append)
    assert harness.calls == Counter()
    assert saved == []


async def test_renamed_leaf_side_step_with_discard() -> None:
    """The renamed step runs; its dependent, whose dependencies changed, runs again."""
    checkpoint = (await base_checkpoints())[-1]
    resumed = await check_resume(
        renamed(BASE, "keywords", "tags"),
        checkpoint,
        unknown_steps="discard",
        ran={"tags", "report"},
        invalidated={
            "report": (
                "dependencies changed from ['keywords', 'score', 'summarize'] "
                "to ['score', 'summarize', 'tags']"
            )
        },
        discarded=("keywords",),
    )
    assert all("keywords" not in cp.outputs for cp in resumed.saved)
    assert all("keywords" not in cp.step_info for cp in resumed.saved)


async def test_renamed_middle_step_with_discard() -> None:
    """Every direct dependent of the renamed step has changed dependencies."""
    checkpoint = (await base_checkpoints())[-1]
    await check_resume(
        renamed(BASE, "summarize", "digest"),
        checkpoint,
        unknown_steps="discard",
        ran={"digest", "score", "report"},
        invalidated={
            "score": "dependencies changed from ['summarize'] to ['digest']",
            "report": (
                "dependencies changed from ['keywords', 'score', 'summarize'] "
                "to ['digest', 'keywords', 'score']"
            ),
        },
        discarded=("summarize",),
    )


async def test_removed_step_with_discard_runs_nothing() -> None:
    checkpoint = (await base_checkpoints())[-1]
    spec = {name: entry for name, entry in BASE.items() if name != "report"}
    await check_resume(
        spec,
        checkpoint,
        unknown_steps="discard",
        ran=set(),
        invalidated={},
        discarded=("report",),
    )


async def test_discard_with_nothing_unknown_discards_nothing() -> None:
    checkpoint = (await base_checkpoints())[1]
    await check_resume(
        BASE,
        checkpoint,
        unknown_steps="discard",
        ran={"score", "report"},
        invalidated={},
        discarded=(),
    )


# --- progress -----------------------------------------------------------------------------


def progress_workflow(seen: list[Any], *, fetch: str, work: str, fail: bool) -> Workflow:
    """``work`` saves progress, then fails if ``fail``; ``seen`` gets the progress it found."""

    async def run(ctx: Mapping[str, Any]) -> str:
        step = current_step()
        seen.append(step.progress)
        await step.save_progress({"done": 3})
        if fail:
            raise RuntimeError("boom")
        return f"work of {ctx['fetch']}"

    return Workflow(
        [
            Step("fetch", lambda ctx: f"doc@{fetch}", version=fetch),
            Step("work", run, ("fetch",), version=work),
        ]
    )


@pytest.mark.parametrize(
    ("fetch", "work", "progress", "invalidated"),
    [
        pytest.param("1", "1", {"done": 3}, {}, id="unchanged-keeps-progress"),
        pytest.param(
            "1",
            "2",
            None,
            {"work": "saved progress dropped: version changed from '1' to '2'"},
            id="version-bump-drops-progress",
        ),
        pytest.param(
            "2",
            "1",
            None,
            {"fetch": V12, "work": "saved progress dropped: depends on invalidated step 'fetch'"},
            id="invalidated-dependency-drops-progress",
        ),
    ],
)
async def test_progress_of_an_invalidated_step_is_dropped(
    fetch: str, work: str, progress: Any, invalidated: dict[str, str]
) -> None:
    """Progress saved by the old version, or from a stale input, is not handed to the step."""
    seen: list[Any] = []
    with pytest.raises(WorkflowFailed) as failed:
        await progress_workflow(seen, fetch="1", work="1", fail=True).run()
    checkpoint = round_trip(failed.value.checkpoint)
    assert dict(checkpoint.progress) == {"work": {"done": 3}}
    assert list(checkpoint.outputs) == ["fetch"]
    seen.clear()
    result = await progress_workflow(seen, fetch=fetch, work=work, fail=False).run(
        resume_from=checkpoint
    )
    assert seen == [progress]
    assert dict(result.invalidated) == invalidated
    assert result.outputs["work"] == f"work of doc@{fetch}"


# --- old formats --------------------------------------------------------------------------


def old_format(checkpoint: WorkflowCheckpoint, version: int) -> WorkflowCheckpoint:
    """``checkpoint`` as a format-0 (ExecutionKit 0.4) or format-1 dict, read back."""
    data = checkpoint.to_dict()
    if version == 0:
        data = {key: data[key] for key in ("step_index", "outputs", "cost")}
    else:
        for key in (
            "progress",
            "step_info",
            "skipped",
            "items",
            "pending",
            "children",
            "ledger",
            "in_flight",
            "trace",
            "lineage",
            "attempts",
            "waits",
            "in_flight_items",
        ):
            del data[key]
        data["version"] = 1
    loaded = WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))
    assert loaded.version == version
    assert dict(loaded.step_info) == {}
    return loaded


@pytest.mark.parametrize("version", [0, 1])
async def test_old_formats_trust_version_bumps(version: int) -> None:
    """Without step_info a version bump cannot be seen: the old output is kept."""
    base = await Harness().workflow(BASE).run()
    checkpoint = old_format((await base_checkpoints())[-1], version)
    spec = changed(BASE, "summarize", version="2")
    resumed = await resume(spec, checkpoint)
    assert resumed.calls == Counter()
    assert dict(resumed.result.invalidated) == {}
    assert resumed.result.restored == NAMES
    assert dict(resumed.result.outputs) == dict(base.outputs)
    assert resumed.result.outputs["summarize"] != (await fresh_outputs(spec))["summarize"]


@pytest.mark.parametrize("version", [0, 1])
async def test_old_formats_trust_dependency_changes_between_recorded_steps(
    version: int,
) -> None:
    checkpoint = old_format((await base_checkpoints())[-1], version)
    resumed = await resume(changed(BASE, "score", deps=("summarize", "keywords")), checkpoint)
    assert resumed.calls == Counter()
    assert dict(resumed.result.invalidated) == {}


@pytest.mark.parametrize("version", [0, 1])
async def test_old_formats_still_invalidate_a_dependency_they_do_not_record(
    version: int,
) -> None:
    """A recorded step that now depends on an unrecorded step was computed without it."""
    checkpoint = old_format((await base_checkpoints())[-1], version)
    spec = changed(
        added(BASE, "clean", ("fetch",), after="fetch"), "summarize", deps=("fetch", "clean")
    )
    await check_resume(
        spec,
        checkpoint,
        ran={"clean", "summarize", "score", "report"},
        invalidated={
            "summarize": unrecorded("clean"),
            "score": invalid("summarize"),
            "report": invalid("summarize"),
        },
    )


async def test_old_format_renamed_step_with_discard_names_the_unrecorded_dependency() -> None:
    checkpoint = old_format((await base_checkpoints())[-1], 1)
    await check_resume(
        renamed(BASE, "keywords", "tags"),
        checkpoint,
        unknown_steps="discard",
        ran={"tags", "report"},
        invalidated={"report": unrecorded("tags")},
        discarded=("keywords",),
    )


@pytest.mark.parametrize("version", [0, 1])
async def test_old_formats_honour_rerun(version: int) -> None:
    checkpoint = old_format((await base_checkpoints())[-1], version)
    await check_resume(
        BASE,
        checkpoint,
        rerun=["score"],
        ran={"score", "report"},
        invalidated={"score": "rerun requested", "report": invalid("score")},
    )


async def test_lacking_rule_applies_to_a_hand_built_format_2_checkpoint() -> None:
    """step_info that matches the workflow does not excuse a dependency that is not recorded."""
    checkpoint = WorkflowCheckpoint(
        step_index=1,
        outputs={"score": "s"},
        cost=TokenUsage(5, 5, 1),
        step_info={"score": {"version": None, "depends_on": ["summarize"]}},
    )
    spec: Spec = {"summarize": ((), None), "score": (("summarize",), None)}
    await check_resume(
        spec,
        checkpoint,
        ran={"summarize", "score"},
        invalidated={"score": unrecorded("summarize")},
    )


# --- run argument errors ------------------------------------------------------------------

RERUN_TYPE = "rerun must be a collection of step names such as a list, got {}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param(
            {"rerun": ["nope"]},
            "rerun names steps this workflow does not have: 'nope'",
            id="unknown-name",
        ),
        pytest.param(
            {"rerun": ["nope", "score", "other"]},
            "rerun names steps this workflow does not have: 'nope', 'other'",
            id="unknown-names",
        ),
        pytest.param({"rerun": "score"}, RERUN_TYPE.format("str 'score'"), id="str"),
        pytest.param({"rerun": b"score"}, RERUN_TYPE.format("bytes b'score'"), id="bytes"),
        pytest.param(
            {"rerun": {"score": True}}, RERUN_TYPE.format("dict {'score': True}"), id="dict"
        ),
        pytest.param({"rerun": 3}, RERUN_TYPE.format("int 3"), id="int"),
        pytest.param(
            {"unknown_steps": "drop"},
            "unknown_steps must be one of 'error', 'discard', got 'drop'",
            id="unknown-steps-value",
        ),
        pytest.param(
            {"unknown_steps": None},
            "unknown_steps must be one of 'error', 'discard', got None",
            id="unknown-steps-none",
        ),
    ],
)
async def test_bad_rerun_and_unknown_steps_fail_before_any_step(
    kwargs: dict[str, Any], message: str
) -> None:
    checkpoint = (await base_checkpoints())[1]
    harness = Harness()
    with pytest.raises(RunArgumentError, match=f"^{re.escape(message)}$"):
        await harness.workflow(BASE).run(resume_from=checkpoint, **kwargs)
    assert harness.calls == Counter()


async def test_rerun_needs_resume_from() -> None:
    harness = Harness()
    with pytest.raises(
        RunArgumentError,
        match=re.escape("rerun needs resume_from: without a checkpoint every step runs anyway"),
    ):
        await harness.workflow(BASE).run(rerun=["score"])
    assert harness.calls == Counter()


async def test_empty_rerun_without_resume_from_is_fine() -> None:
    harness = Harness()
    result = await harness.workflow(BASE).run(rerun=[])
    assert harness.calls == Counter(dict.fromkeys(NAMES, 1))
    assert dict(result.invalidated) == {}


@pytest.mark.parametrize(
    "rerun", [("score",), {"score"}, frozenset({"score"})], ids=["tuple", "set", "frozenset"]
)
async def test_rerun_accepts_tuples_and_sets(rerun: Any) -> None:
    await check_resume(
        BASE,
        (await base_checkpoints())[-1],
        rerun=rerun,
        ran={"score", "report"},
        invalidated={"score": "rerun requested", "report": invalid("score")},
    )


# --- property: random DAGs, random bumps and reruns ---------------------------------------


def random_spec(rng: random.Random) -> Spec:
    count = rng.randint(2, 12)
    order = [f"s{i}" for i in range(count)]
    deps = {
        name: tuple(rng.sample(order[:i], rng.randint(0, min(i, 3))))
        for i, name in enumerate(order)
    }
    declared = list(order)
    rng.shuffle(declared)  # declaration order is free; dependencies decide
    return {name: (deps[name], rng.choice([None, "1", "v7"])) for name in declared}


def descendants(spec: Spec, roots: Iterable[str]) -> set[str]:
    children: dict[str, list[str]] = {name: [] for name in spec}
    for name, (deps, _) in spec.items():
        for dep in deps:
            children[dep].append(name)
    found: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(children[name])
    return found


def bump(version: str | None) -> str:
    return "new" if version is None else version + "+"


def describe(version: str | None) -> str:
    return "no version" if version is None else repr(version)


@pytest.mark.parametrize("seed", range(25))
async def test_random_version_bumps_and_reruns(seed: int) -> None:
    rng = random.Random(seed)
    spec = random_spec(rng)
    costs = {
        name: TokenUsage(rng.randint(0, 50), rng.randint(0, 500), rng.randint(0, 2))
        for name in spec
    }
    saved: list[WorkflowCheckpoint] = []
    await Harness(costs).workflow(spec).run(checkpoint_fn=saved.append)
    checkpoint = round_trip(rng.choice(saved))
    recorded = set(checkpoint.outputs)

    bumped = set(rng.sample(sorted(spec), rng.randint(0, min(3, len(spec)))))
    rerun = sorted(rng.sample(sorted(spec), rng.randint(0, 2)))
    modified: Spec = {
        name: (deps, bump(version) if name in bumped else version)
        for name, (deps, version) in spec.items()
    }

    expected = recorded & descendants(spec, (bumped | set(rerun)) & recorded)
    ran = (set(spec) - recorded) | expected

    harness = Harness(costs)
    result = await harness.workflow(modified).run(resume_from=checkpoint, rerun=rerun)
    assert harness.calls == Counter(dict.fromkeys(ran, 1))
    assert set(result.invalidated) == expected
    for name, reason in result.invalidated.items():
        if name in rerun:
            assert reason == "rerun requested"
        elif name in bumped:
            old, new = spec[name][1], modified[name][1]
            assert reason == f"version changed from {describe(old)} to {describe(new)}"
        else:
            parents = [dep for dep in spec[name][0] if dep in expected]
            assert reason in [invalid(parent) for parent in parents]
    assert set(result.restored) == recorded - expected
    fresh = await Harness(costs).workflow(modified).run()
    assert dict(result.outputs) == dict(fresh.outputs)
    assert result.cost == checkpoint.cost + total(ran, costs)
