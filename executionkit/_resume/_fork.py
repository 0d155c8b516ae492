"""`Workflow.fork`: a new run made from any checkpoint, with outputs put in place by hand.

A fork is pure: it reads the parent checkpoint and returns the fork's first
checkpoint, with a new run id and its lineage; nothing is written and the
parent is never changed. An overridden output is checked like a real one (the
JSON rules, the step's ``decode``, an ask step's ``check``) and recorded with
a zero-usage ``"override"`` ledger row. Every step that depends on an
overridden or re-run step is dropped, with the re-run steps themselves, so
that resuming the fork runs exactly those. A path ``sub/step`` reaches into a
sub-workflow: its child checkpoint is forked the same way and the parent's
sub-workflow step runs again from it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import FORMAT_VERSION
from executionkit._checkpoint._ledger import LedgerEntry
from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit._define._graph import graph_of
from executionkit._define._step_kinds import AskStep, MapStep
from executionkit._errors import RunArgumentError, did_you_mean
from executionkit._paths import child_run_id, join_path, new_run_id, split_path
from executionkit._plain import plain_copy
from executionkit._resume._restore import _invalidated
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping

    from executionkit._define._graph import Graph

_OVERRIDE_ROW_USAGE = TokenUsage()


def fork(
    graph: Graph,
    checkpoint: WorkflowCheckpoint,
    *,
    override: Mapping[str, Any] | None,
    rerun: Iterable[str],
    run_id: str | None,
    note: str | None,
) -> WorkflowCheckpoint:
    """The first checkpoint of a fork of ``checkpoint`` (see `Workflow.fork`)."""
    given: object = checkpoint
    if not isinstance(given, WorkflowCheckpoint):
        msg = f"fork() takes a WorkflowCheckpoint, got {type(given).__name__}"
        raise RunArgumentError(msg)
    if override is not None and not hasattr(override, "items"):
        msg = f"override must be a dict of step name to output, got {type(override).__name__}"
        raise RunArgumentError(msg)
    if note is not None and (type(note) is not str or not note):
        msg = f"note must be a non-empty str or None, got {note!r}"
        raise RunArgumentError(msg)
    if run_id is not None and (type(run_id) is not str or not run_id):
        msg = f"run_id must be a non-empty str or None, got {run_id!r}"
        raise RunArgumentError(msg)
    if isinstance(rerun, str):
        msg = f"rerun must be a collection of step names, not a str ({rerun!r})"
        raise RunArgumentError(msg)
    if checkpoint.run_id is None:
        msg = "fork() needs a checkpoint with a run_id (format 1 or newer) to record its parent"
        raise RunArgumentError(msg)
    new_id = run_id if run_id is not None else new_run_id()
    if new_id == checkpoint.run_id:
        msg = f"run_id {new_id!r} is the parent's: a fork is a new run and needs its own"
        raise RunArgumentError(msg)
    overrides = dict(override or {})
    reruns = tuple(rerun)
    forked = _fork_run(graph, checkpoint, overrides, reruns, new_id)
    lineage = {
        "parent_run_id": checkpoint.run_id,
        "parent_seq": checkpoint.seq,
        "overridden": tuple(overrides),
        "rerun": reruns,
        "note": note,
    }
    return _replace(forked, lineage=lineage)


def _fork_run(  # noqa: PLR0917 - one run's part of the fork, recursing into children
    graph: Graph,
    checkpoint: WorkflowCheckpoint,
    overrides: dict[str, Any],
    reruns: tuple[str, ...],
    run_id: str,
    prefix: str = "",
) -> WorkflowCheckpoint:
    """Fork one run (the top one, or a sub-workflow's child by its path ``prefix``)."""
    own_overrides, inner_overrides = _split(graph, overrides, prefix, "override")
    own_reruns, inner_reruns = _split(graph, dict.fromkeys(reruns), prefix, "rerun")
    index = graph.index
    for name in own_overrides:
        if name in own_reruns:
            msg = f"step {prefix + name!r} is both overridden and re-run: choose one"
            raise RunArgumentError(msg)
    rerun_below = _below(graph, [index[name] for name in own_reruns])
    for name in own_overrides:
        if index[name] in rerun_below and name not in own_reruns:
            ancestors = [r for r in own_reruns if index[name] in _below(graph, [index[r]])]
            msg = (
                f"step {prefix + name!r} is overridden but depends on re-run step "
                f"{prefix + ancestors[0]!r}, which would drop its override; override or "
                f"re-run, not both"
            )
            raise RunArgumentError(msg)
    if own_overrides:
        _refuse_overrides_below_changes(graph, checkpoint, own_overrides, prefix)
    stored = {name: _checked(graph, name, value, prefix) for name, value in own_overrides.items()}
    children = dict(checkpoint.children)
    for name, (inner_o, inner_r) in _inner(inner_overrides, inner_reruns).items():
        child = _child_checkpoint(graph, checkpoint, name, run_id, prefix)
        child_graph = graph_of(graph.steps[index[name]].run)
        children[name] = MappingProxyType(
            {
                "checkpoint": _fork_run(
                    child_graph,
                    child,
                    inner_o,
                    inner_r,
                    child_run_id(run_id, name, None),
                    f"{prefix}{join_path(name)}/",
                )
            }
        )
    forked = set(children) - set(checkpoint.children) | {
        name for name in _inner(inner_overrides, inner_reruns) if name in checkpoint.children
    }
    dropped = _below(graph, [index[name] for name in own_overrides], include=False)
    dropped |= _below(graph, [index[name] for name in own_reruns])
    for name in sorted(forked):
        if index[name] in dropped:
            msg = (
                f"step {prefix + name!r} is reached into, but it depends on an overridden or "
                f"re-run step and runs again whole: override or re-run inside it, or above it"
            )
            raise RunArgumentError(msg)
    # A sub-workflow reached into runs again from its forked checkpoint; what depends
    # on it, too.
    dropped |= _below(graph, sorted(index[name] for name in forked))
    children = {**checkpoint.children, **{n: children[n] for n in forked}}
    return _assemble(graph, checkpoint, stored, children, dropped, run_id, forked)


def _assemble(  # noqa: PLR0917 - the parts of one forked checkpoint
    graph: Graph,
    checkpoint: WorkflowCheckpoint,
    stored: dict[str, Any],
    children: dict[str, Any],
    dropped: set[int],
    run_id: str,
    forked: set[str],
) -> WorkflowCheckpoint:
    names = graph.names
    gone = {names[position] for position in dropped} | set(stored)
    outputs = {n: v for n, v in checkpoint.outputs.items() if n not in gone}
    outputs.update(stored)
    ordered = {n: outputs[n] for n in names if n in outputs}
    ordered.update((n, v) for n, v in outputs.items() if n not in ordered)  # unknown steps

    def kept(entries: Mapping[str, Any]) -> dict[str, Any]:
        return {n: e for n, e in entries.items() if n not in gone}

    skipped, items, pending = (
        kept(checkpoint.skipped),
        kept(checkpoint.items),
        kept(checkpoint.pending),
    )
    progress = kept(checkpoint.progress)
    kept_children = {n: c for n, c in children.items() if n not in gone or n in forked}
    described = [*ordered, *progress, *skipped, *items, *pending, *kept_children]
    info = graph.step_info
    step_info: dict[str, Any] = {}
    if checkpoint.step_info or stored or forked:  # (a forked child needs its step's info)
        for name in dict.fromkeys(described):
            entry = info.get(name) if name in stored else checkpoint.step_info.get(name)
            entry = entry if entry is not None else info.get(name)
            if entry is None:  # a step neither recorded with its info nor in the workflow
                step_info = {}
                break
            step_info[name] = entry
    ledger, cost = _ledger(checkpoint, gone | forked, stored, kept_children, forked)
    return WorkflowCheckpoint(
        step_index=len(ordered),
        outputs=ordered,
        cost=cost,
        version=FORMAT_VERSION,
        run_id=run_id,
        seq=1,
        context_keys=checkpoint.context_keys,
        created_at=checkpoint.created_at,
        metadata=checkpoint.metadata,
        progress=progress,
        step_info=step_info,
        skipped=skipped,
        items=items,
        pending=pending,
        children=kept_children,
        ledger=ledger,
    )


def _ledger(
    checkpoint: WorkflowCheckpoint,
    gone: set[str],
    stored: Mapping[str, Any],
    children: Mapping[str, Any],
    forked: set[str],
) -> tuple[tuple[LedgerEntry, ...], TokenUsage]:
    """The fork's ledger and cost: what its kept outputs cost, and a row per override.

    Rows of dropped and overridden steps stay with the parent; a sub-workflow
    reached into brings its forked checkpoint's rows, under its path. Usage the
    parent counted without rows (restored from a format before 4) stays counted.
    """
    rows = [row for row in checkpoint.ledger if _top(row.step) not in gone]
    for name in sorted(forked):
        prefix = join_path(name)
        child: WorkflowCheckpoint = children[name]["checkpoint"]
        rows += [_under(prefix, row) for row in child.ledger]
    rows += [_override_row(name) for name in stored]
    cost = checkpoint.cost - _total(checkpoint.ledger) + _total(rows)
    return tuple(rows), cost


def _top(path: str) -> str:
    return split_path(path)[0] if "/" in path else path


def _under(prefix: str, row: LedgerEntry) -> LedgerEntry:
    return LedgerEntry(
        f"{prefix}/{row.step}", row.item, row.attempt, row.outcome, row.model, row.usage
    )


def _total(rows: Iterable[LedgerEntry]) -> TokenUsage:
    total = TokenUsage()
    for row in rows:
        total += row.usage
    return total


def _override_row(path: str) -> LedgerEntry:
    return LedgerEntry(path, None, 1, "override", None, _OVERRIDE_ROW_USAGE)


def _split(
    graph: Graph, entries: Mapping[str, Any], prefix: str, what: str
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Entries naming this run's steps, and those reaching into its sub-workflows."""
    own: dict[str, Any] = {}
    inner: dict[str, dict[str, Any]] = {}
    for path, value in entries.items():
        if type(path) is not str or not path:
            msg = f"{what}: step names must be non-empty str, got {path!r}"
            raise RunArgumentError(msg)
        segments = split_path(path)
        head = segments[0]
        if head not in graph.index:
            hint = did_you_mean(head, graph.names)
            msg = f"{what}: {prefix + path!r} is not a step of the workflow{hint}"
            raise RunArgumentError(msg)
        if len(segments) == 1:
            own[head] = value
            continue
        position = graph.index[head]
        if position not in graph.workflows or isinstance(graph.steps[position], MapStep):
            msg = (
                f"{what}: {prefix + path!r} reaches into step {prefix + head!r}, which is not a "
                f"sub-workflow step (a map of sub-workflows cannot be reached into)"
            )
            raise RunArgumentError(msg)
        inner.setdefault(head, {})[join_path(*segments[1:])] = value
    return own, inner


def _inner(
    overrides: dict[str, dict[str, Any]], reruns: dict[str, dict[str, Any]]
) -> dict[str, tuple[dict[str, Any], tuple[str, ...]]]:
    return {
        name: (overrides.get(name, {}), tuple(reruns.get(name, {})))
        for name in {**overrides, **reruns}
    }


def _child_checkpoint(
    graph: Graph, checkpoint: WorkflowCheckpoint, name: str, run_id: str, prefix: str
) -> WorkflowCheckpoint:
    """The child checkpoint of sub-workflow step ``name``: in progress, or rebuilt if done."""
    entry = checkpoint.children.get(name)
    if entry is not None and "checkpoint" in entry:
        child: WorkflowCheckpoint = entry["checkpoint"]
        return child
    if name not in checkpoint.outputs:
        msg = (
            f"step {prefix + name!r} has not run in this checkpoint: nothing in it to "
            f"override or re-run"
        )
        raise RunArgumentError(msg)
    output = checkpoint.outputs[name]
    if not isinstance(output, dict):
        msg = f"step {prefix + name!r}: its recorded output is not the dict of its steps' outputs"
        raise RunArgumentError(msg)
    child_graph = graph_of(graph.steps[graph.index[name]].run)
    recorded = {n: output[n] for n in child_graph.names if n in output}
    # The parent's rows of this child (its own path dropped), as the child had them.
    below = f"{join_path(name)}/"
    rows = tuple(
        LedgerEntry(r.step[len(below) :], r.item, r.attempt, r.outcome, r.model, r.usage)
        for r in checkpoint.ledger
        if r.step.startswith(below)
    )
    return WorkflowCheckpoint(
        step_index=len(recorded),
        outputs=recorded,
        cost=_total(rows),
        ledger=rows,
        version=FORMAT_VERSION,
        run_id=child_run_id(run_id, name, None),
        seq=1,
        context_keys=checkpoint.context_keys,
        step_info={n: child_graph.step_info[n] for n in recorded},
    )


def _checked(graph: Graph, name: str, value: Any, prefix: str) -> Any:
    """An override as its step's recorded form: JSON rules, then ``decode`` and ``check``."""
    step = graph.steps[graph.index[name]]
    where = f"override of step {prefix + name!r}"
    stored = plain_copy(value, where)
    if isinstance(step, MapStep) and not isinstance(stored, (list, dict)):
        got = type(value).__name__
        msg = f"{where}: a map step's output is a list (or a dict by key), got {got}"
        raise RunArgumentError(msg)
    if graph.index[name] in graph.workflows:
        msg = f"{where}: override its steps by path instead (such as '{prefix + name}/step')"
        raise RunArgumentError(msg)
    live = stored
    if step.decode is not None:
        try:
            live = step.decode(stored)
        except Exception as exc:
            msg = f"{where}: its decode refused the value: {type(exc).__name__}: {exc}"
            raise RunArgumentError(msg) from exc
    if isinstance(step, AskStep) and step.check is not None:
        try:
            step.check(live)
        except Exception as exc:
            msg = f"{where}: its check refused the answer: {type(exc).__name__}: {exc}"
            raise RunArgumentError(msg) from exc
    return stored


def _refuse_overrides_below_changes(
    graph: Graph, checkpoint: WorkflowCheckpoint, overrides: Mapping[str, Any], prefix: str
) -> None:
    """Refuse an override that a resume would drop: a step above it changed since the checkpoint.

    The step whose version or dependencies changed runs again on resume, and so
    does everything below it, the overridden step included: its override would be
    thrown away without a word.
    """
    index = graph.index
    recorded = [name for name in checkpoint.outputs if name in index]
    untrusted = _invalidated(graph, checkpoint, recorded, frozenset())
    causes = [
        (name, reason)
        for name, reason in untrusted.items()
        if not reason.startswith("depends on invalidated step")
    ]
    for name in overrides:
        for cause, reason in causes:
            if cause != name and index[name] in _below(graph, [index[cause]], include=False):
                msg = (
                    f"override of step {prefix + name!r}: step {prefix + cause!r} above it "
                    f"changed since the checkpoint ({reason}), so a resume would run both "
                    f"again and drop the override; fork from a checkpoint of the current "
                    f"workflow, or re-run {prefix + cause!r} instead"
                )
                raise RunArgumentError(msg)


def _below(graph: Graph, starts: Collection[int], *, include: bool = True) -> set[int]:
    """``starts`` (if ``include``) and every step that depends on one, transitively."""
    seen: set[int] = set(starts) if include else set()
    stack = list(starts)
    while stack:
        for child in graph.dependents[stack.pop()]:
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _replace(checkpoint: WorkflowCheckpoint, **changes: Any) -> WorkflowCheckpoint:
    from dataclasses import replace  # noqa: PLC0415 - only forks pay for the import

    return replace(checkpoint, **changes)
