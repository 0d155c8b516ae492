"""What a run starts from: a checkpoint checked against the workflow, with stale outputs dropped.

Plain synchronous code: given the graph, the checkpoint and the caller's
options, decide which recorded outputs can be trusted, and why the others
cannot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from executionkit._checkpoint._ledger import LedgerEntry
from executionkit._checkpoint._value import LEGACY_VERSION
from executionkit._define._conditions import Conditions
from executionkit._define._graph import kind_of
from executionkit._define._options import names_text
from executionkit._define._questions import check_deadline
from executionkit._errors import CheckpointMismatchError
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._graph import Graph
    from executionkit._define._options import UnknownSteps
    from executionkit._define._step import Step
    from executionkit._define._step_kinds import AskStep


@dataclass
class Restored:
    """The state a resumed run starts from."""

    outputs: dict[str, Any]
    stored: dict[str, Any]
    progress: dict[str, Any]
    cost: TokenUsage
    seq: int
    run_id: str | None
    metadata: Mapping[str, Any]
    # Map step -> (stored item outputs, live item outputs, their usage).
    items: dict[str, tuple[dict[str, Any], dict[str, Any], TokenUsage]]
    # Ask step -> its pending question, as recorded.
    pending: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    # Kept outputs described by their recorded step_info entry, not the workflow's.
    described: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    # Recorded steps whose code changed, their outputs kept (on_code_change="keep"):
    # step -> (recorded fingerprint, current fingerprint).
    code_changed: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Wait step -> its entry ({"due": ..., "since": ...}), as recorded.
    waits: dict[str, Mapping[str, str]] = field(default_factory=dict)
    # Sub-workflow step -> its child's checkpoint (a map's: item key -> checkpoint).
    children: dict[str, Any] = field(default_factory=dict)
    invalidated: dict[str, str] = field(default_factory=dict)
    discarded: tuple[str, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)
    # The cost ledger, with an "unknown" row for each attempt the checkpoint found running.
    ledger: tuple[LedgerEntry, ...] = ()
    trace: str | None = None
    lineage: Mapping[str, Any] = field(default_factory=dict)


def restore(
    graph: Graph,
    checkpoint: WorkflowCheckpoint,
    context: dict[str, Any],
    *,
    run_id: str | None,
    metadata: Mapping[str, Any] | None,
    rerun: frozenset[str],
    unknown_steps: UnknownSteps,
    on_code_change: str = "keep",
) -> Restored:
    """Check ``checkpoint`` against the workflow and the run's arguments.

    Fills ``context`` with ExecutionKit 0.4 context values the caller did not
    pass again. Raises `CheckpointMismatchError` before anything runs when the
    checkpoint does not fit.
    """
    index = graph.index
    unknown = [name for name in checkpoint.outputs if name not in index]
    unknown += [name for name in checkpoint.items if name not in index]
    unknown += [name for name in checkpoint.pending if name not in index]
    unknown += [name for name in checkpoint.waits if name not in index]
    unknown += [name for name in checkpoint.children if name not in index]
    recorded_skips = checkpoint.skipped
    unknown_skips = [name for name in recorded_skips if name not in index]
    discarded: tuple[str, ...] = ()
    if checkpoint.version == LEGACY_VERSION:
        # ExecutionKit 0.4 kept the initial context inside `outputs`. Those values are
        # what 0.4 would have resumed with, so they fill in any key not passed again.
        for key in unknown:
            context.setdefault(key, checkpoint.outputs[key])
    elif (unknown or unknown_skips) and unknown_steps == "discard":
        discarded = (*unknown, *unknown_skips)
    elif unknown or unknown_skips:
        what = "outputs" if not unknown_skips else "skips" if not unknown else "outputs and skips"
        msg = (
            f"checkpoint records {what} of steps this workflow does not have: "
            f"{names_text([*unknown, *unknown_skips])} (a checkpoint of another workflow, "
            f"or renamed steps); pass unknown_steps='discard' to drop them"
        )
        raise CheckpointMismatchError(msg)
    missing = [key for key in checkpoint.context_keys if key not in context]
    if missing:
        msg = (
            f"initial_context lacks keys the checkpoint was run with: {names_text(missing)}; "
            f"checkpoints never store context values, so pass them again"
        )
        raise CheckpointMismatchError(msg)
    if run_id is not None and checkpoint.run_id is not None and run_id != checkpoint.run_id:
        msg = (
            f"run_id {run_id!r} does not match the checkpoint's run_id "
            f"{checkpoint.run_id!r}; omit run_id to continue the checkpoint's run"
        )
        raise CheckpointMismatchError(msg)
    # A recorded skip is trusted, and counts as recorded for the steps after it,
    # exactly as a recorded output does.
    recorded = [
        name for name in graph.names if name in checkpoint.outputs or name in recorded_skips
    ]
    code = CodeChanges(on_code_change)
    invalidated = _invalidated(graph, checkpoint, recorded, rerun, code)
    code.refuse()
    stored = (
        {
            name: checkpoint.outputs[name]
            for name in checkpoint.outputs
            if name in index and name not in invalidated
        }
        if unknown or invalidated
        else dict(checkpoint.outputs)  # every output kept: one copy at C speed
    )
    skipped: dict[str, str] = {}
    for name in recorded_skips:
        if name not in index:
            continue
        if name in invalidated:
            invalidated[name] = f"recorded skip dropped: {invalidated[name]}"
        else:
            skipped[name] = recorded_skips[name]
    _refuse_unexplained_skips(graph, skipped)
    fit = _Fit(graph, checkpoint, {*stored, *skipped}, rerun, invalidated)
    progress = fit.progress()
    items = fit.items()
    pending = fit.questions()
    children = fit.children()
    return Restored(
        items=items,
        pending=pending,
        waits=fit.waits(),
        code_changed={n: pair for n, pair in code.changed.items() if n not in invalidated},
        described={n: e for n, e in code.described.items() if n not in invalidated},
        children=children,
        outputs=_decoded(graph, stored),
        stored=stored,
        progress=progress,
        cost=checkpoint.cost,
        seq=checkpoint.seq,
        run_id=run_id if run_id is not None else checkpoint.run_id,
        metadata=checkpoint.metadata if metadata is None else metadata,
        invalidated=invalidated,
        discarded=discarded,
        skipped=skipped,
        ledger=_ledger(checkpoint),
        trace=checkpoint.trace,
        lineage=checkpoint.lineage,
    )


def _ledger(checkpoint: WorkflowCheckpoint) -> tuple[LedgerEntry, ...]:
    """The ledger resumed with: attempts running at the checkpoint count as unknown.

    Their usage was never reported back (the process stopped, or the resume is
    from a checkpoint taken while they ran): recorded as one attempt each, of
    unknown usage, never as zero. A map's items counted in ``in_flight_items``
    are as many attempts of the map, with no item key.
    """
    counts = checkpoint.in_flight_items
    if not checkpoint.in_flight and not counts:
        return checkpoint.ledger
    nothing = TokenUsage()
    unknown = [
        LedgerEntry(step, key, attempt, "unknown", None, nothing)
        for step, key, attempt in checkpoint.in_flight
    ]
    for name, count in counts.items():
        unknown += [LedgerEntry(name, None, 1, "unknown", None, nothing)] * count
    return (*checkpoint.ledger, *unknown)


def _refuse_unexplained_skips(graph: Graph, skipped: dict[str, str]) -> None:
    """Refuse a kept skip of a step that nothing in this workflow skips.

    Only a step's ``when`` or its ``join`` rule over skipped dependencies skips
    it (`Conditions`). A step with no ``when`` whose join rule does not skip it
    would never run on resume: the checkpoint was edited, or the ``when`` that
    skipped it was removed since, and ``rerun`` lets it run.
    """
    join_only = Conditions(graph, {}, {}, skipped)
    for name in skipped:
        position = graph.index[name]
        step = graph.steps[position]
        if step.when is not None or join_only.reason_to_skip(position) is not None:
            continue
        deps = [dep for dep in step.depends_on if dep in skipped]
        msg = (
            f"checkpoint field {f'skipped.{name}'!r} says step {name!r} was skipped, but "
            f"nothing in this workflow skips it: it has no when condition, and its "
            f"join={step.join!r} rule skips it for none of its dependencies recorded as "
            f"skipped ({names_text(deps) or 'none'}); a resume would never run it: pass "
            f"rerun=[{name!r}] to run it"
        )
        raise CheckpointMismatchError(msg)


def _describe_version(version: str | None) -> str:
    return "no version" if version is None else repr(version)


def _invalidated(
    graph: Graph,
    checkpoint: WorkflowCheckpoint,
    recorded: list[str],
    rerun: frozenset[str],
    code: CodeChanges | None = None,
) -> dict[str, str]:
    """Name each recorded step that cannot be trusted, with the reason, in declaration order.

    ``code`` collects the steps whose code changed since their output was
    recorded; under ``on_code_change="rerun"`` they are not trusted either.
    """
    have = set(recorded)
    reasons: dict[int, str] = {}
    ours, theirs = graph.step_info, checkpoint.step_info
    for name in recorded:
        info = theirs.get(name)
        # The common case first: recorded exactly as the step is now (the same kind,
        # version and dependencies, in order), and every dependency recorded too.
        if (
            info is not None
            and info == ours[name]
            and name not in rerun
            and have.issuperset(info["depends_on"])
        ):
            continue
        reason = _distrust(graph, checkpoint, name, have, rerun)
        if reason is None and code is not None and info is not None:
            reason = code.compare(name, info.get("code"), ours[name].get("code"))
            if reason is None:
                code.keep_entry(name, info, ours[name])
        if reason is not None:
            reasons[graph.index[name]] = reason
    # Everything downstream of an untrusted output was computed from it; each such
    # step names its first-declared dependency that is untrusted.
    stack = list(reasons)
    untrusted = set(reasons)
    while stack:
        for child in graph.dependents[stack.pop()]:
            if child not in untrusted and graph.names[child] in have:
                untrusted.add(child)
                stack.append(child)
    for position in sorted(untrusted - set(reasons)):
        parent = min(dep for dep in graph.dependencies[position] if dep in untrusted)
        reasons[position] = f"depends on invalidated step {graph.names[parent]!r}"
    return {graph.names[position]: reasons[position] for position in sorted(reasons)}


class CodeChanges:
    """The recorded steps whose code changed, as `on_code_change` treats them."""

    def __init__(self, policy: str) -> None:
        """Collect them under ``policy``: ``"keep"``, ``"rerun"`` or ``"refuse"``."""
        self.policy = policy
        self.changed: dict[str, tuple[str, str]] = {}  # step -> (recorded, current)
        # Kept outputs whose entry says more than the workflow's own (the code that made
        # them, who answered): they stay described by it (see `Record`).
        self.described: dict[str, Mapping[str, Any]] = {}

    def keep_entry(self, name: str, recorded: Mapping[str, Any], own: Mapping[str, Any]) -> None:
        """Note ``recorded`` for a trusted output if it says more than ``own``, the workflow's."""
        more = getattr(recorded, "more", ())
        if more and more != getattr(own, "more", ()):
            self.described[name] = recorded

    def compare(self, name: str, recorded: str | None, current: str | None) -> str | None:
        """Why step ``name`` is not trusted, under ``rerun``; None if kept (or unchanged).

        A fingerprint the checkpoint lacks is unknown, never a change.
        """
        if recorded is None or current is None or recorded == current:
            return None
        self.changed[name] = (recorded, current)
        if self.policy == "rerun":
            return f"code changed (fingerprint {recorded} to {current})"
        return None

    def refuse(self) -> None:
        """Under ``"refuse"``: raise if any step's code changed, naming each."""
        if self.policy != "refuse" or not self.changed:
            return
        steps = ", ".join(
            f"{name!r} ({recorded} to {current})"
            for name, (recorded, current) in self.changed.items()
        )
        msg = (
            f"the code of {steps} changed since their outputs were recorded "
            f"(on_code_change='refuse'); pass on_code_change='keep' to keep those outputs, "
            f"'rerun' to run them again with what depends on them, or rerun=[...] for some"
        )
        raise CheckpointMismatchError(msg)


def _distrust(
    graph: Graph,
    checkpoint: WorkflowCheckpoint,
    name: str,
    have: set[str],
    rerun: frozenset[str],
) -> str | None:
    """Why the recorded work of step ``name`` cannot be trusted, or None if it can."""
    step = graph.steps[graph.index[name]]
    info = checkpoint.step_info.get(name)
    lacking = [dep for dep in step.depends_on if dep not in have] if step.depends_on else ()
    if name in rerun:
        return "rerun requested"
    kind = kind_of(step)
    if info is not None and info.get("kind", "step") != kind:
        return f"kind changed from {info.get('kind', 'step')!r} to {kind!r}"
    if info is not None and info["version"] != step.version:
        return (
            f"version changed from {_describe_version(info['version'])} to "
            f"{_describe_version(step.version)}"
        )
    if (
        info is not None
        and info["depends_on"] != step.depends_on
        and set(info["depends_on"]) != set(step.depends_on)
    ):
        return (
            f"dependencies changed from {sorted(info['depends_on'])!r} to "
            f"{sorted(step.depends_on)!r}"
        )
    if lacking:
        return (
            f"depends on {lacking[0]!r}, which the checkpoint does not record, so its "
            f"output was computed without it"
        )
    return None


class _Fit:
    """Decides which recorded work of unfinished steps still fits the workflow.

    Saved progress, a map's finished items, a pending question, a wait and a
    sub-workflow's checkpoint are each kept only while their step is trusted
    (the same version and dependencies, not ``rerun``, no invalidated
    dependency) and still of the kind that recorded them; anything else is
    dropped and reported in ``invalidated``.
    """

    def __init__(
        self,
        graph: Graph,
        checkpoint: WorkflowCheckpoint,
        trusted: set[str],
        rerun: frozenset[str],
        invalidated: dict[str, str],
    ) -> None:
        self.graph = graph
        self.checkpoint = checkpoint
        self.trusted = trusted
        self.rerun = rerun
        self.invalidated = invalidated

    def kept(
        self,
        entries: Mapping[str, Any],
        dropped: str,
        kind: frozenset[int] | None = None,
        unlike: str = "",
    ) -> dict[str, Any]:
        """The entries whose step still fits them; the others reported as ``dropped: why``."""
        graph = self.graph
        kept: dict[str, Any] = {}
        for name, entry in entries.items():
            position = graph.index.get(name)
            if position is None:
                continue  # unknown_steps="discard" dropped it
            stale = [d for d in graph.steps[position].depends_on if d in self.invalidated]
            reason = (
                f"depends on invalidated step {stale[0]!r}"
                if stale
                else _distrust(graph, self.checkpoint, name, self.trusted, self.rerun)
            )
            if reason is None and kind is not None and position not in kind:
                reason = unlike
            if reason is None:
                kept[name] = entry
            else:
                self.invalidated[name] = f"{dropped}: {reason}"
        return kept

    def progress(self) -> dict[str, Any]:
        """Saved progress that still fits its step."""
        return self.kept(self.checkpoint.progress, "saved progress dropped")

    def items(self) -> dict[str, tuple[dict[str, Any], dict[str, Any], TokenUsage]]:
        """The finished items of unfinished maps that still fit the map, decoded."""
        graph = self.graph
        entries = self.kept(
            self.checkpoint.items,
            "recorded items dropped",
            graph.maps,
            "it is not a map step any more",
        )
        kept: dict[str, tuple[dict[str, Any], dict[str, Any], TokenUsage]] = {}
        for name, entry in entries.items():
            step = graph.steps[graph.index[name]]
            stored = dict(entry["outputs"])
            live = {
                key: _decode(step, f"{name!r}, item {key!r}", name, v) for key, v in stored.items()
            }
            kept[name] = (stored, live, entry["cost"])
        return kept

    def questions(self) -> dict[str, Mapping[str, Any]]:
        """Pending questions that still fit their ask step; the others are asked again.

        Raises `CheckpointMismatchError` for a kept question whose recorded
        deadline is not the step's (`check_deadline`).
        """
        graph = self.graph
        kept = self.kept(
            self.checkpoint.pending,
            "pending question dropped",
            graph.asks,
            "it is not an ask step any more",
        )
        for name, entry in kept.items():
            check_deadline(cast("AskStep", graph.steps[graph.index[name]]), entry)
        return kept

    def waits(self) -> dict[str, Mapping[str, str]]:
        """Waits that still fit their wait step, due when first reached; the others wait again."""
        return self.kept(
            self.checkpoint.waits,
            "wait dropped",
            self.graph.waits,
            "it is not a wait step any more",
        )

    def children(self) -> dict[str, Any]:
        """The progress of sub-workflows that still fit their step; the rest start over.

        Raises `CheckpointMismatchError` for kept progress of the other shape
        than the step's: one checkpoint for a map of sub-workflows, or one per
        item for a step that runs one sub-workflow.
        """
        graph = self.graph
        entries = self.kept(
            self.checkpoint.children,
            "sub-workflow progress dropped",
            graph.workflows,
            "it does not run a workflow any more",
        )
        for name, entry in entries.items():
            is_map = graph.index[name] in graph.maps
            if is_map == ("checkpoint" in entry):
                raise CheckpointMismatchError(_unfit_children(name, is_map=is_map))
        return {
            name: entry["checkpoint"] if "checkpoint" in entry else dict(entry["items"])
            for name, entry in entries.items()
        }


def _unfit_children(name: str, *, is_map: bool) -> str:
    field, holds, runs = (
        (
            "checkpoint",
            "one sub-workflow",
            "is a map of sub-workflows, recorded under 'items' by item key",
        )
        if is_map
        else (
            "items",
            "a sub-workflow per item",
            "runs one sub-workflow, recorded under 'checkpoint'",
        )
    )
    return (
        f"checkpoint field {f'children.{name}.{field}'!r} holds {holds}, but step {name!r} "
        f"{runs}; pass rerun=[{name!r}] to start it over"
    )


def _decode(step: Step, what: str, name: str, value: Any) -> Any:
    decode = step.decode
    if decode is None:
        return value
    try:
        return decode(value)
    except Exception as exc:
        msg = (
            f"step {what}: decode failed on the recorded output "
            f"({type(exc).__name__}: {exc}); fix decode, or pass rerun=[{name!r}]"
        )
        raise CheckpointMismatchError(msg) from exc


def _decoded(graph: Graph, stored: dict[str, Any]) -> dict[str, Any]:
    if not graph.encoded:  # no step has a decode (encode and decode come together)
        return dict(stored)
    outputs: dict[str, Any] = {}
    for name, value in stored.items():
        position = graph.index[name]
        step = graph.steps[position]
        if position in graph.maps and step.decode is not None:
            if isinstance(value, list):
                outputs[name] = [
                    _decode(step, f"{name!r}, item '{i}'", name, v) for i, v in enumerate(value)
                ]
            elif isinstance(value, dict):
                outputs[name] = {
                    k: _decode(step, f"{name!r}, item {k!r}", name, v) for k, v in value.items()
                }
            else:
                msg = (
                    f"step {name!r}: the recorded output of a map must be a list or a dict, "
                    f"got {type(value).__name__}; pass rerun=[{name!r}]"
                )
                raise CheckpointMismatchError(msg)
            continue
        decode = step.decode
        if decode is None:
            outputs[name] = value
            continue
        try:
            outputs[name] = decode(value)
        except Exception as exc:
            msg = (
                f"step {name!r}: decode failed on the recorded output "
                f"({type(exc).__name__}: {exc}); fix decode, or pass rerun=[{name!r}]"
            )
            raise CheckpointMismatchError(msg) from exc
    return outputs
