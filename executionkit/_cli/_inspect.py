"""``executionkit inspect``: what a checkpoint file holds, as text or JSON, and who claims it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import EXIT_OK, CliError
from executionkit._cli._load import load_workflow
from executionkit._cli._location import DatabaseLocation, parse_location
from executionkit._cli._maps import items_text, unfinished_maps
from executionkit._cli._questions import expired, now, question_block
from executionkit._cli._text import json_document, out, preview
from executionkit._questions import waiting_in
from executionkit._terminal import one_line, show

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from executionkit._checkpoint import WorkflowCheckpoint
    from executionkit._cli._location import Location
    from executionkit._types import TokenUsage
    from executionkit._workflow import Workflow


def inspect_command(args: argparse.Namespace) -> int:
    """Print what ``args.file`` holds; import ``args.workflow`` only if given."""
    location = parse_location(args.file)
    if isinstance(location, DatabaseLocation) and location.run_id is None:
        return _list_runs(location, as_json=args.json)
    path = location.label
    checkpoint = location.load(missing_ok=False)
    assert checkpoint is not None  # noqa: S101 - missing_ok=False never returns None
    workflow = None if args.workflow is None else load_workflow(args.workflow)
    summary = describe(checkpoint, workflow, file=path)
    if location.reports_owners():  # else no line at all: "nobody" would be a guess
        summary["claimed_by"] = _claimed_by(location)
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
                "recorded": len(checkpoint.outputs),
                "failed": len(checkpoint.errors),
                "waiting": len(waiting_in(checkpoint)),
                "created_at": checkpoint.created_at,
            }
        )
        if owners:
            owner = location.owner(run_id)
            runs[-1]["claimed_by"] = None if owner is None else owner.to_dict()
    if as_json:
        out(json_document({"database": location.label, "runs": runs}))
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
    if runs:
        lines.append(f"inspect one with: executionkit inspect '{location.label}?run_id=RUN_ID'")
    out("\n".join(lines) + "\n")
    return EXIT_OK


def _claimed_by(location: Location) -> dict[str, Any] | None:
    """Who claims the run ``location`` names, as `RunOwner.to_dict` writes it; None: no one."""
    if isinstance(location, DatabaseLocation):
        owner = location.owner(location.named_run("inspect"))
    else:
        owner = location.owner()
    return None if owner is None else owner.to_dict()


def _owner_text(summary: Mapping[str, Any]) -> str:
    """``process 1234 on host 'worker-1' since ...``, naming its run if not the one shown."""
    from executionkit._ownership import RunOwner  # noqa: PLC0415 - imports socket

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
    ``skipped`` maps each step a condition skipped to the reason.
    ``items`` counts the recorded items of each unfinished map step, with their
    token usage; its ``total`` is known only with the workflow, for a map over a
    recorded step. ``waiting`` holds each question an ask step waits for an answer
    to, whole, with when it was asked, its deadline and whether that has passed.
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
        "total": total,
        "pending": pending,
        "unknown": unknown,
        "failed": dict(checkpoint.errors),
        "skipped": dict(checkpoint.skipped),
        "progress": {name: preview(value) for name, value in checkpoint.progress.items()},
        "items": {
            name: {"recorded": items.recorded, "total": items.total, "cost": _usage(items.cost)}
            for name, items in unfinished_maps(checkpoint, workflow).items()
        },
        "waiting": {
            name: {**entry, "expired": expired(entry, moment)}
            for name, entry in waiting_in(checkpoint).items()
        },
        "outputs": {name: preview(outputs[name]) for name in names},
    }


def describe_text(summary: Mapping[str, Any]) -> str:
    """The text ``inspect`` prints for ``summary`` (what `describe` returned)."""
    lines: list[str] = []

    def field(label: str, *values: str) -> None:
        for number, value in enumerate(values or ("(none)",)):
            lines.append(f"{label if number == 0 else '':<12}{value}")

    for label, value in _heading(summary):
        field(label, value)
    field("tokens", _usage_text(summary["cost"]))
    recorded = len(summary["recorded"])
    if summary["total"] is None:
        field("steps", f"{recorded} recorded (--workflow MODULE:ATTR shows the total)")
    else:
        field("steps", _steps_text(summary))
        field("pending", ", ".join(map(show, summary["pending"])) or "(none)")
        if summary["unknown"]:
            names = ", ".join(map(show, summary["unknown"]))
            field("unknown", f"{names} (recorded, but not a step of the workflow)")
    field("failed", *(f"{show(name)}: {one_line(e)}" for name, e in summary["failed"].items()))
    if summary["skipped"]:
        skips = summary["skipped"].items()
        field("skipped", *(f"{show(name)}: {one_line(reason)}" for name, reason in skips))
    field("progress", *(f"{show(name)}: {p}" for name, p in summary["progress"].items()))
    if summary["items"]:
        field("items", *(_items_text(name, items) for name, items in summary["items"].items()))
    if summary["waiting"]:
        field("waiting", *_waiting_lines(summary["waiting"]))
    outputs = summary["outputs"]
    lines.append("outputs" if outputs else "outputs     (none)")
    width = min(max((len(show(name)) for name in outputs), default=0), 24)
    lines.extend(f"  {show(name):<{width}}  {text}" for name, text in outputs.items())
    return "\n".join(lines)


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
    return fields


def _steps_text(summary: Mapping[str, Any]) -> str:
    """``2 of 4 recorded, 1 skipped, 1 waiting for an answer``, knowing the workflow."""
    recorded = len(summary["recorded"]) - len(summary["unknown"])
    text = f"{recorded} of {summary['total']} recorded"
    if summary["skipped"]:
        text += f", {len(summary['skipped'])} skipped"
    if summary["waiting"]:
        text += f", {len(summary['waiting'])} waiting for an answer"
    return text


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
