"""``executionkit inspect``: what a checkpoint file holds, as text or JSON, and who claims it.

``--history`` lists the checkpoints a store keeps of the run (`CheckpointInfo`),
``--seq N`` shows one of them as the latest is shown. What the store's inbox
(`RunInbox`) holds is shown too, when it holds something: a run submitted (when,
its input names: never values), left alone by a worker (why), the questions
with answers saved for a worker; the listing of a database adds the runs
submitted and not started yet, and the runs left alone.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import TYPE_CHECKING, Any, TypeVar

from executionkit._checkpoint._lineage import lineage_dict
from executionkit._cli._exits import EXIT_OK, CliError
from executionkit._cli._load import load_workflow
from executionkit._cli._location import (
    PASSWORD,
    DatabaseLocation,
    FileLocation,
    cli_errors,
    close_store,
    open_store,
    parse_location,
)
from executionkit._cli._maps import failed_items, items_text, recorded_steps, unfinished_maps
from executionkit._cli._prices import dollars, dollars_lines, load_prices
from executionkit._cli._questions import expired, now, question_block
from executionkit._cli._step_times import duration_text, step_times
from executionkit._cli._text import invocation, json_document, out, preview
from executionkit._define._questions import waiting_in
from executionkit._define._waits import waits_in
from executionkit._terminal import json_text, one_line, show

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._location import Location
    from executionkit._types import TokenUsage
    from executionkit._workflow import Workflow
    from executionkit.stores import CheckpointInfo, RunInbox, Submission


def inspect_command(args: argparse.Namespace) -> int:
    """Print what ``args.file`` holds; import ``args.workflow`` only if given."""
    location = parse_location(args.file)
    if args.history:
        if args.prices is not None:
            msg = "--history lists what the store keeps: leave out --prices, or give --seq N"
            raise CliError(msg)
        if args.workflow is not None:
            msg = "--history lists what the store keeps and imports nothing: leave out --workflow"
            raise CliError(msg)
        return _list_checkpoints(location, as_json=args.json)
    if isinstance(location, DatabaseLocation) and location.run_id is None and args.seq is None:
        return _list_runs(location, as_json=args.json)
    path = location.label
    prices = None if args.prices is None else load_prices(args.prices)
    checkpoint = _checkpoint_of(location, args.seq, as_json=args.json)
    if checkpoint is None:  # a run submitted and not started: printed
        return EXIT_OK
    workflow = None if args.workflow is None else load_workflow(args.workflow)
    summary = describe(checkpoint, workflow, file=path)
    summary.update(_inbox_fields(location, checkpoint))
    if prices is not None:
        summary["dollars"] = dollars(checkpoint.spending.priced(prices))
    if location.reports_owners():  # else no line at all: "nobody" would be a guess
        summary.update(_claim_fields(location, checkpoint, latest=args.seq is None))
    if not args.json:
        out(describe_text(summary))
        return EXIT_OK
    try:
        text = json_document(summary)
    except RecursionError:  # metadata is printed whole, and json nests less deeply than it reads
        msg = f"{path}: metadata nested too deeply to print as JSON"
        raise CliError(msg) from None
    out(text)
    return EXIT_OK


def _checkpoint_of(
    location: Location, seq: int | None, *, as_json: bool = False
) -> WorkflowCheckpoint | None:
    """The latest checkpoint of the run ``location`` names, or the one of ``seq``.

    None when there is none but the run was submitted: what its submission says
    is printed then (`_submitted_only`).
    """
    if seq is None:
        checkpoint = location.load(missing_ok=True)
        if checkpoint is None and _submitted_only(location, as_json=as_json):
            return None
        checkpoint = checkpoint or location.load(missing_ok=False)
        assert checkpoint is not None  # noqa: S101 - missing_ok=False never returns None
        return checkpoint
    if isinstance(location, DatabaseLocation):
        return location.load_seq(seq, "inspect --seq")
    return location.load_seq(seq)


_SHOWN_NEW = 5


def _list_checkpoints(location: Location, *, as_json: bool) -> int:
    """Print the checkpoints kept of the run ``location`` names, oldest first."""
    from executionkit.stores._history import seq_ranges  # noqa: PLC0415 - keep start-up light

    if isinstance(location, DatabaseLocation):
        infos = location.checkpoints("inspect --history")
    else:
        infos = location.checkpoints()
    run_id = infos[-1].run_id
    only_latest = isinstance(location, FileLocation) and not location.lines
    if as_json:
        listed = [dataclasses.asdict(info) for info in infos]
        out(json_document({"file": location.label, "run_id": run_id, "checkpoints": listed}))
        return EXIT_OK
    width = len(str(max(info.seq for info in infos)))
    counted = f"{len(infos)} checkpoint{'' if len(infos) == 1 else 's'}"
    lines = [
        f"{'file':<12}{one_line(location.label)}",
        f"{'run_id':<12}{one_line(run_id or '-')}",
        f"{'kept':<12}{counted}, {seq_ranges(info.seq for info in infos)}",
    ]
    lines.extend(
        f"  seq {info.seq:<{width}}  {one_line(info.created_at or '-')}  {_info_text(info)}"
        for info in infos
    )
    if only_latest:
        lines.append("(a JSON file keeps only its latest checkpoint, not what it newly recorded)")
    else:
        lines.append(f"show one with: {_inspect_seq(location, run_id)}")
    out("\n".join(lines))
    return EXIT_OK


def _info_text(info: CheckpointInfo) -> str:
    """``4 outputs; new: summarize; failed: fetch; 1 waiting for an answer; 3 map items``."""
    parts = [f"{info.step_index} output{'' if info.step_index == 1 else 's'}"]
    if info.new_outputs:
        names = ", ".join(map(show, info.new_outputs[:_SHOWN_NEW]))
        more = len(info.new_outputs) - _SHOWN_NEW
        parts.append(f"new: {names}" + (f" and {more} more" if more > 0 else ""))
    if info.errors:
        parts.append(f"failed: {', '.join(map(show, info.errors))}")
    if info.pending:
        parts.append(f"{info.pending} waiting for an answer")
    if info.items:
        parts.append(f"{info.items} map item{'' if info.items == 1 else 's'} recorded")
    return "; ".join(parts)


def _inspect_seq(location: Location, run_id: str | None) -> str:
    """The command that shows one of the checkpoints listed, as it works when pasted."""
    if isinstance(location, DatabaseLocation) and run_id is not None:
        given, _ = location.run_url(run_id)
    else:
        given = location.label
    return f"{invocation()} inspect {one_line(shlex.quote(given))} --seq N"


def _list_runs(location: DatabaseLocation, *, as_json: bool) -> int:
    """Print the runs a database holds, the most recently written first."""
    runs: list[dict[str, Any]] = []
    owners = location.reports_owners()
    for run_id in location.run_ids():
        latest = DatabaseLocation(location.label, location.scheme, location.target, run_id)
        checkpoint = latest.load(missing_ok=False)
        assert checkpoint is not None  # noqa: S101 - missing_ok=False never returns None
        runs.append(
            {
                "run_id": run_id,
                "seq": checkpoint.seq,
                "recorded": recorded_steps(checkpoint, None),
                "failed": len(checkpoint.errors),
                "waiting": len(waiting_in(checkpoint)),
                "created_at": checkpoint.created_at,
            }
        )
        if owners:
            owner = location.owner(run_id)
            runs[-1]["claimed_by"] = None if owner is None else owner.to_dict()
    stored = {run["run_id"] for run in runs}
    submissions, left = _read_inbox(
        location, lambda inbox: (inbox.submissions(), inbox.left_alone())
    )
    submitted = [_submission(s) for s in submissions if s.run_id not in stored]
    if as_json:
        listing = {"database": location.label, "runs": runs}
        out(json_document({**listing, "submitted": submitted, "left_alone": left}))
        return EXIT_OK
    lines = [f"database: {one_line(location.label)}", f"runs: {len(runs)}"]
    lines.extend(
        f"  {show(run['run_id'])}: seq {run['seq']}, {run['recorded']} recorded, "
        f"{run['failed']} failed, "
        + (f"{run['waiting']} waiting for an answer, " if run["waiting"] else "")
        + f"saved {run['created_at'] or 'at an unknown time'}"
        + ("" if run.get("claimed_by") is None else f", claimed by {_owner_text(run)}")
        for run in runs
    )
    if submitted:
        lines.append(f"submitted, not started yet: {len(submitted)}")
        lines.extend(
            f"  {show(entry['run_id'])}: submitted {_submitted_text(entry)}" for entry in submitted
        )
    if left:
        lines.append(f"left alone by a worker: {len(left)}")
        lines.extend(f"  {show(run_id)}: {one_line(reason)}" for run_id, reason in left.items())
    first = runs[0]["run_id"] if runs else submitted[0]["run_id"] if submitted else None
    if first is not None:
        lines.extend(_inspect_one(location, first))
    out("\n".join(lines))
    return EXIT_OK


_T = TypeVar("_T")


def _read_inbox(location: Location, read: Callable[[RunInbox], _T]) -> _T:
    """``read(inbox)`` of the store's inbox at ``location``; its errors as a `CliError`."""
    store: Any = open_store(location, "inspect")
    try:
        with cli_errors(location.label):
            return read(store.inbox)
    finally:
        close_store(store)


def _submission(submission: Submission) -> dict[str, Any]:
    """A submission as ``inspect --json`` prints it: its input names, never their values."""
    return {
        "run_id": submission.run_id,
        "submitted_at": submission.submitted_at,
        "input_keys": sorted(submission.inputs),
    }


def _submitted_text(entry: Mapping[str, Any]) -> str:
    """``2026-...; inputs: a, b (key names only, never values)``: when, and the input names."""
    text = one_line(entry["submitted_at"])
    if entry["input_keys"]:
        keys = ", ".join(map(show, entry["input_keys"]))
        text += f"; inputs: {keys} (key names only, never values)"
    return text


def _shown_run(location: Location, checkpoint: WorkflowCheckpoint) -> str:
    """The run shown: the one a database location names, else the checkpoint's."""
    run_id = location.run_id if isinstance(location, DatabaseLocation) else None
    return run_id if run_id is not None else checkpoint.run_id or ""


def _inbox_fields(location: Location, checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    """What the inbox holds of the run shown: ``submitted``, ``left_alone``, ``answers_saved``."""
    run_id = _shown_run(location, checkpoint)

    def read(inbox: RunInbox) -> tuple[Submission | None, str | None, list[str]]:
        return (
            inbox.submission(run_id),
            inbox.left_alone().get(run_id),
            list(inbox.answers(run_id)),
        )

    submission, left, answered = _read_inbox(location, read)
    fields: dict[str, Any] = {}
    if submission is not None:
        fields["submitted"] = {k: v for k, v in _submission(submission).items() if k != "run_id"}
    if left is not None:
        fields["left_alone"] = left
    if answered:
        fields["answers_saved"] = answered
    return fields


def _claim_fields(
    location: Location, checkpoint: WorkflowCheckpoint, *, latest: bool
) -> dict[str, Any]:
    """``claimed_by``; ``streaming`` while the owner's steps stream (``latest``: the run now)."""
    fields: dict[str, Any] = {"claimed_by": _claimed_by(location)}
    if fields["claimed_by"] is not None and latest:
        streaming = _streaming(location, checkpoint, fields["claimed_by"])
        if streaming:
            fields["streaming"] = streaming
    return fields


def _streaming(
    location: Location, checkpoint: WorkflowCheckpoint, owner: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The text the owner's running steps streamed so far (`StreamPublisher` keeps it).

    Only what it wrote since it claimed the run (what a process killed
    mid-step left is not its), by step path and item, each with its attempt.
    """
    from executionkit._owner import RunOwner  # noqa: PLC0415 - imports socket

    claim = RunOwner.from_dict(owner)
    run_id = _shown_run(location, checkpoint)
    since = None if claim is None else claim.since
    found = _read_inbox(location, lambda inbox: inbox.streams(run_id, since=since))
    return [
        {"step": path, "item": item, "attempt": attempt, "text": text}
        for (path, item), (attempt, text) in sorted(
            found.items(), key=lambda entry: (entry[0][0], entry[0][1] or "")
        )
    ]


def _streaming_lines(streaming: list[Mapping[str, Any]]) -> list[str]:
    """``talk, attempt 2: "...the last 100 characters"``, a line each."""
    lines = []
    for entry in streaming:
        where = show(entry["step"]) + ("" if entry["item"] is None else f"[{show(entry['item'])}]")
        text = entry["text"]
        tail = text if len(text) <= _STREAM_TAIL else "..." + text[-_STREAM_TAIL:]
        lines.append(f"{where}, attempt {entry['attempt']}: {one_line(json_text(tail))}")
    return lines


_STREAM_TAIL = 100  # characters of a streamed text shown


def _submitted_only(location: Location, *, as_json: bool) -> bool:
    """Print a run submitted and not started (no checkpoint); whether there is one."""
    if isinstance(location, FileLocation) and not location.path.parent.is_dir():
        return False  # nothing there: the file's own error says so
    run_id = location.run_id if isinstance(location, DatabaseLocation) else None

    def read(inbox: RunInbox) -> tuple[Submission | None, dict[str, str]]:
        if run_id is not None:
            return inbox.submission(run_id), inbox.left_alone()
        found = inbox.submissions()  # a file holds one run
        return (found[0] if found else None), inbox.left_alone()

    submission, left = _read_inbox(location, read)
    if submission is None:
        return False
    entry = _submission(submission)
    summary: dict[str, Any] = {"file": location.label, "run_id": submission.run_id}
    summary["submitted"] = {k: v for k, v in entry.items() if k != "run_id"}
    if submission.run_id in left:
        summary["left_alone"] = left[submission.run_id]
    if as_json:
        out(json_document(summary))
        return True
    lines = [
        f"{'file':<12}{one_line(location.label)}",
        f"{'run_id':<12}{one_line(submission.run_id)}",
        f"{'submitted':<12}{_submitted_text(entry)}",
        f"{'':<12}not started yet (no checkpoint): a worker starts it",
    ]
    if "left_alone" in summary:
        lines.append(f"{'left alone':<12}{one_line(summary['left_alone'])}")
    out("\n".join(lines))
    return True


def _inspect_one(location: DatabaseLocation, run_id: str) -> list[str]:
    """The command that inspects ``run_id``, as it works when pasted into a shell.

    The URL is the one given, with ``run_id`` added to its query; a password is
    never printed, so a line after the command says where it goes.
    """
    url, hidden = location.run_url(run_id)
    lines = [f"inspect one with: {invocation()} inspect {one_line(shlex.quote(url))}"]
    if hidden:
        lines.append(f"(put the password in place of {PASSWORD}: it is never printed)")
    return lines


def _claimed_by(location: Location) -> dict[str, Any] | None:
    """Who claims the run ``location`` names, as `RunOwner.to_dict` writes it; None: no one."""
    if isinstance(location, DatabaseLocation):
        owner = location.owner(location.named_run("inspect"))
    else:
        owner = location.owner()
    return None if owner is None else owner.to_dict()


def _owner_text(summary: Mapping[str, Any]) -> str:
    """``process 1234 on host 'worker-1' since ...``, naming its run if not the one shown."""
    from executionkit._owner import RunOwner  # noqa: PLC0415 - imports socket

    owner = RunOwner.from_dict(summary["claimed_by"])
    if owner is None:  # never: inspect wrote it with to_dict
        return "someone"
    text = owner.describe()
    if owner.run_id != summary["run_id"]:
        text += f", for run {owner.run_id!r}"
    return one_line(text)


def describe(
    checkpoint: WorkflowCheckpoint, workflow: Workflow | None, *, file: str
) -> dict[str, Any]:
    """What ``inspect --json`` prints: plain data about ``checkpoint``.

    Outputs and progress values appear as previews of at most `PREVIEW_CHARS`
    characters. ``total``, ``pending`` and ``unknown`` are None without a workflow.
    ``done`` counts the steps recorded, skipped ones included (`recorded_steps`).
    ``skipped`` maps each step a condition skipped to the reason.
    ``items`` counts the recorded items of each unfinished map step, with their
    keys and token usage (None for a map of sub-workflows: their usage is only in
    the total); its ``total`` is known only with the workflow, for a map over a
    recorded step. ``failed_items`` holds the failed steps of each failed item of a
    map of sub-workflows. ``waiting`` holds each question an ask step waits for an
    answer to, whole, with when it was asked, its deadline and whether that has passed.
    ``step_times`` holds, for each step with attempts in the checkpoint's ``attempts``
    (format 5; a sub-workflow's steps count for their step, a map's items for their
    map), in the workflow's order: ``started_ms`` and ``ended_ms`` (its first
    attempt's start and last attempt's end, milliseconds since the epoch),
    ``duration_ms``, ``attempts`` (the most attempts the step or one of its items
    took), ``ended`` (how many attempts ended), ``outcomes`` (how many ended each
    way) and ``items`` (how many of a map's items ran; None for other steps).
    """
    outputs = checkpoint.outputs
    names = list(outputs)
    total = pending = unknown = None
    if workflow is not None:
        declared = [step.name for step in workflow.steps]
        known = set(declared)
        names = [name for name in declared if name in outputs]
        unknown = [name for name in outputs if name not in known]
        names += unknown
        total = len(declared)
        pending = [
            name for name in declared if name not in outputs and name not in checkpoint.skipped
        ]
    cost = checkpoint.cost
    moment = now()
    return {
        "file": file,
        "version": checkpoint.version,
        "run_id": checkpoint.run_id,
        "seq": checkpoint.seq,
        "created_at": checkpoint.created_at,
        "metadata": dict(checkpoint.metadata),
        "context_keys": list(checkpoint.context_keys),
        "cost": _usage(cost),
        "recorded": names,
        "done": recorded_steps(checkpoint, workflow),
        "total": total,
        "pending": pending,
        "unknown": unknown,
        "failed": dict(checkpoint.errors),
        "failed_items": failed_items(checkpoint),
        "skipped": dict(checkpoint.skipped),
        "progress": {name: preview(value) for name, value in checkpoint.progress.items()},
        "items": {
            name: {
                "recorded": items.recorded,
                "total": items.total,
                "cost": _usage(items.cost),
                "keys": list(items.keys),
            }
            for name, items in unfinished_maps(checkpoint, workflow).items()
        },
        "waiting": {
            name: {**entry, "expired": expired(entry, moment)}
            for name, entry in waiting_in(checkpoint).items()
        },
        "timers": {
            name: {"due": due.isoformat(), "due_now": due <= moment}
            for name, due in waits_in(checkpoint).items()
        },
        "code_changed": code_changed(checkpoint, workflow),
        "outputs": {name: preview(outputs[name]) for name in names},
        "spending": _spending(checkpoint),
        "in_flight": [list(attempt) for attempt in checkpoint.in_flight],
        "in_flight_items": dict(checkpoint.in_flight_items),
        "lineage": lineage_dict(checkpoint.lineage),
        "step_times": _step_times(checkpoint, workflow),
    }


def _step_times(checkpoint: WorkflowCheckpoint, workflow: Workflow | None) -> dict[str, Any]:
    """``describe``'s ``step_times``: each step's times from ``attempts``, in the run's order."""
    if workflow is not None:
        order = [step.name for step in workflow.steps]
    else:
        order = [*checkpoint.outputs, *checkpoint.errors, *checkpoint.skipped]
    position = {name: number for number, name in enumerate(dict.fromkeys(order))}
    found = step_times(checkpoint, position)
    # Steps the order lacks (ran, and recorded nothing yet) come last, in the order they ran.
    ranked = sorted(found, key=lambda name: position.get(name, len(position)))
    return {
        name: {
            "started_ms": found[name].started,
            "ended_ms": found[name].ended,
            "duration_ms": found[name].duration,
            "attempts": found[name].attempts,
            "ended": len(found[name].entries),
            "outcomes": dict(found[name].outcomes),
            "items": len(found[name].items) if found[name].items else None,
        }
        for name in ranked
    }


def code_changed(
    checkpoint: WorkflowCheckpoint, workflow: Workflow | None
) -> dict[str, dict[str, str]] | None:
    """The recorded steps whose code changed since (with the workflow; None without)."""
    if workflow is None:
        return None
    from executionkit._define._code import changed_code  # noqa: PLC0415

    own = workflow._graph.step_info  # noqa: SLF001 - the workflow's own description of its steps
    recorded = {n: i for n, i in checkpoint.step_info.items() if n in checkpoint.outputs}
    return {
        name: {"recorded": old, "current": new}
        for name, (old, new) in changed_code(own, recorded).items()
    }


def _spending(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    """The ledger summed: in all, and per step path that has rows."""
    spending = checkpoint.spending
    return {
        "spent": _usage(spending.spent),
        "wasted": _usage(spending.wasted),
        "unknown": spending.unknown,
        "steps": {
            path: {
                "spent": _usage(step.spent),
                "wasted": _usage(step.wasted),
                "wasted_attempts": len(
                    {(row.item, row.attempt) for row in step.entries if row.wasted}
                ),
                "unknown": step.unknown,
            }
            for path, step in spending.by_step().items()
        },
    }


def describe_text(summary: Mapping[str, Any]) -> str:
    """The text ``inspect`` prints for ``summary`` (what `describe` returned)."""
    lines: list[str] = []

    def field(label: str, *values: str) -> None:
        width = max(12, len(label) + 1)
        for number, value in enumerate(values or ("(none)",)):
            lines.append(f"{label if number == 0 else '':<{width}}{value}")

    for label, value in _heading(summary):
        field(label, value)
    field("tokens", _usage_text(summary["cost"]))
    for label, values in _ledger_fields(summary):
        field(label, *values)
    if summary["total"] is None:
        field("steps", _steps_text(summary))
    else:
        field("steps", _steps_text(summary))
        field("pending", ", ".join(map(show, summary["pending"])) or "(none)")
        if summary["unknown"]:
            names = ", ".join(map(show, summary["unknown"]))
            field("unknown", f"{names} (recorded, but not a step of the workflow)")
    for label, values in _timed_fields(summary):
        field(label, *values)
    field("failed", *_failed_lines(summary))
    if summary["skipped"]:
        skips = summary["skipped"].items()
        field("skipped", *(f"{show(name)}: {one_line(reason)}" for name, reason in skips))
    field("progress", *(f"{show(name)}: {p}" for name, p in summary["progress"].items()))
    for label, values in _unfinished_fields(summary):
        field(label, *values)
    outputs = summary["outputs"]
    lines.append("outputs" if outputs else "outputs     (none)")
    width = min(max((len(show(name)) for name in outputs), default=0), 24)
    lines.extend(f"  {show(name):<{width}}  {text}" for name, text in outputs.items())
    return "\n".join(lines)


def _timed_fields(summary: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """The ``durations`` and ``streaming`` fields, those with something to say."""
    fields = []
    if summary.get("step_times"):
        fields.append(("durations", _duration_lines(summary["step_times"])))
    if summary.get("streaming"):
        fields.append(("streaming", _streaming_lines(summary["streaming"])))
    return fields


def _unfinished_fields(summary: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """The ``items``, ``waiting`` and ``timers`` fields, those with something to say."""
    fields = []
    if summary["items"]:
        items = summary["items"].items()
        fields.append(("items", [_items_text(name, entry) for name, entry in items]))
    if summary["waiting"]:
        fields.append(("waiting", _waiting_lines(summary["waiting"])))
    if summary["timers"]:
        fields.append(("timers", _timer_lines(summary["timers"])))
    if summary["code_changed"]:
        changed = summary["code_changed"].items()
        fields.append(
            (
                "code",
                [
                    f"{show(n)}: recorded by {c['recorded']}, now {c['current']}"
                    for n, c in changed
                ],
            )
        )
    return fields


def _duration_lines(times: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``fetch: 1.2 s, 2 attempts (1 failed, 1 ok)``: each step's time, from its attempts.

    A map says how many items ran (``10,000 items, 10,003 attempts``); a
    sub-workflow, the attempts of its steps.
    """
    lines = []
    for name, entry in times.items():
        ended = entry["ended"]
        outcomes = ", ".join(f"{n:,} {outcome}" for outcome, n in entry["outcomes"].items())
        counted = f"{ended:,} attempt{'' if ended == 1 else 's'}"
        if entry["items"] is not None:
            counted = f"{_items(entry['items'])}, {counted}"
        elif not entry["attempts"]:
            counted += " of its steps"
        took = duration_text(entry["duration_ms"])
        lines.append(f"{show(name)}: {took}, {counted} ({outcomes})")
    return lines


def _timer_lines(timers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``w: due 2026-12-02T16:19:20+00:00``, and ``(due now)`` once the time has passed."""
    return [
        f"{show(name)}: due {timer['due']}{' (due now)' if timer['due_now'] else ''}"
        for name, timer in timers.items()
    ]


def _ledger_fields(summary: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """The ``spending``, ``dollars`` and ``in flight`` fields, when there is something to say."""
    fields = []
    if summary["spending"]["steps"]:
        fields.append(("spending", _spending_lines(summary["spending"])))
    if "dollars" in summary:
        fields.append(("dollars", dollars_lines(summary["dollars"])))
    counted = summary.get("in_flight_items") or {}
    if summary["in_flight"] or counted:
        lines = [_attempt_text(*a) for a in summary["in_flight"]]
        lines += [f"{show(step)}: {_items(count)}" for step, count in counted.items()]
        fields.append(("in flight", lines))
    return fields


def _spending_lines(spending: Mapping[str, Any]) -> list[str]:
    """``spent 11 tokens, wasted 24 tokens``, then one line per step that has ledger rows."""
    lines = [f"spent {_tokens(spending['spent'])}, wasted {_tokens(spending['wasted'])}"]
    if spending["unknown"]:
        lines[0] += f", {spending['unknown']} attempt(s) of unknown usage (in flight at a stop)"
    for path, step in spending["steps"].items():
        text = f"  {show(path)}: spent {_tokens(step['spent'])}"
        if step["wasted_attempts"]:
            text += (
                f", wasted {_tokens(step['wasted'])} in {step['wasted_attempts']} "
                f"attempt(s) that did not succeed"
            )
        if step["unknown"]:
            text += f", {step['unknown']} of unknown usage"
        lines.append(text)
    return lines


def _tokens(usage: Mapping[str, int]) -> str:
    total = usage["input_tokens"] + usage["output_tokens"]
    calls = usage["llm_calls"]
    return f"{total:,} tokens ({calls:,} call{'s' if calls != 1 else ''})"


def _items(count: int) -> str:
    return f"{count} item" if count == 1 else f"{count:,} items"


def _attempt_text(step: str, item: str | None, attempt: int) -> str:
    where = show(step) if item is None else f"{show(step)} item {show(item)}"
    return f"{where}, attempt {attempt}"


def _heading(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The first fields: which run, which checkpoint of it, who claims it, what it keeps."""
    version = summary["version"]
    fields = [
        ("file", one_line(summary["file"])),
        ("format", f"version {version}" + (" (ExecutionKit 0.4)" if version == 0 else "")),
        ("run_id", one_line(summary["run_id"] or "-")),
        ("seq", str(summary["seq"])),
        ("created_at", one_line(summary["created_at"] or "-")),
    ]
    if "claimed_by" in summary:  # only when the store can tell
        owned = summary["claimed_by"] is not None
        fields.append(("claimed_by", _owner_text(summary) if owned else "nobody"))
    if summary["metadata"]:
        fields.append(("metadata", preview(summary["metadata"])))
    keys = summary["context_keys"]
    if keys:
        fields.append(("context", f"{', '.join(map(show, keys))} (key names only, never values)"))
    if summary["lineage"]:  # only a fork's (Workflow.fork)
        fields.append(("lineage", _lineage_text(summary["lineage"])))
    if "submitted" in summary:  # the inbox's: only when it holds something of the run
        fields.append(("submitted", _submitted_text(summary["submitted"])))
    if "left_alone" in summary:
        fields.append(("left alone", one_line(summary["left_alone"])))
    if "answers_saved" in summary:
        paths = ", ".join(map(show, summary["answers_saved"]))
        fields.append(("answers saved", f"{paths} (a worker resumes the run with them)"))
    return fields


def _lineage_text(lineage: Mapping[str, Any]) -> str:
    """``forked from run 'p' seq 4; overridden: count; re-run: translate; note: ...``."""
    parts = [f"forked from run {show(lineage['parent_run_id'])} seq {lineage['parent_seq']}"]
    if lineage["overridden"]:
        parts.append(f"overridden: {', '.join(map(show, lineage['overridden']))}")
    if lineage["rerun"]:
        parts.append(f"re-run: {', '.join(map(show, lineage['rerun']))}")
    if lineage["note"] is not None:
        parts.append(f"note: {one_line(lineage['note'])}")
    return "; ".join(parts)


def _steps_text(summary: Mapping[str, Any]) -> str:
    """``3 of 4 recorded (1 skipped), 1 waiting for an answer``: skipped steps are recorded.

    Without the workflow, ``3 recorded (1 skipped; --workflow MODULE:ATTR shows the total)``.
    """
    skipped = len(summary["skipped"])
    if summary["total"] is None:
        notes = [f"{skipped} skipped"] if skipped else []
        notes.append("--workflow MODULE:ATTR shows the total")
        return f"{summary['done']} recorded ({'; '.join(notes)})"
    text = f"{summary['done']} of {summary['total']} recorded"
    if skipped:
        text += f" ({skipped} skipped)"
    if summary["waiting"]:
        text += f", {len(summary['waiting'])} waiting for an answer"
    return text


_SHOWN_FAILED_ITEMS = 3


def _failed_lines(summary: Mapping[str, Any]) -> list[str]:
    """Each failed step and its error, then the first failed items of a map, with why."""
    lines: list[str] = []
    for name, error in summary["failed"].items():
        lines.append(f"{show(name)}: {one_line(error)}")
        items = list(summary["failed_items"].get(name, {}).items())
        for key, steps in items[:_SHOWN_FAILED_ITEMS]:
            why = "; ".join(f"{show(step)}: {one_line(text)}" for step, text in steps.items())
            lines.append(f"  item {show(key)}: {why}")
        if len(items) > _SHOWN_FAILED_ITEMS:
            lines.append(f"  and {len(items) - _SHOWN_FAILED_ITEMS} more items failed")
    return lines


def _waiting_lines(waiting: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each question: ``approve (asked ..., expires ...)``, then the question, indented."""
    lines: list[str] = []
    for name, entry in waiting.items():
        lines.extend(question_block(name, entry, past_deadline=entry["expired"]))
    return lines


def _usage(cost: TokenUsage) -> dict[str, int]:
    return {
        "input_tokens": cost.input_tokens,
        "output_tokens": cost.output_tokens,
        "llm_calls": cost.llm_calls,
    }


def _items_text(name: str, items: Mapping[str, Any]) -> str:
    """``summaries: 3 of 4 items recorded (300 in + 30 out = 330 tokens, 3 LLM calls)``."""
    counted = items_text(items["recorded"], items["total"])
    return f"{show(name)}: {counted} ({_usage_text(items['cost'])})"


def _usage_text(cost: Mapping[str, int]) -> str:
    calls = cost["llm_calls"]
    total = cost["input_tokens"] + cost["output_tokens"]
    return (
        f"{cost['input_tokens']} in + {cost['output_tokens']} out = {total} tokens, "
        f"{calls} LLM call{'' if calls == 1 else 's'}"
    )
