"""``executionkit fork``: a new run from any checkpoint of another, outputs fixed by hand.

The command loads the parent's checkpoint (the latest of its run, or ``--seq
N``), calls `Workflow.fork` with ``--override`` values read like ``--answer``
(JSON, else a string) and ``--rerun`` steps, and saves the fork's first
checkpoint: into the same database as a run of its own, or, since a JSON or
JSON Lines file holds one run, into a new file beside the parent's named after
the fork's run id (``run.json`` → ``run.<run_id>.json``). The parent is only
read. It prints what it made and the command that resumes the fork.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import EXIT_OK, CliError
from executionkit._cli._load import load_workflow
from executionkit._cli._location import PASSWORD, DatabaseLocation, FileLocation, parse_location
from executionkit._cli._questions import flag_value
from executionkit._cli._text import error_text, invocation, out
from executionkit._terminal import one_line, show

if TYPE_CHECKING:
    import argparse

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._location import Location

# The library's messages name fork()'s arguments; on the command line they name flags.
_IN_CLI_TERMS = (
    ("override: ", "--override "),
    ("rerun: ", "--rerun "),
    ("override of step ", "--override of step "),
)


def fork_command(args: argparse.Namespace) -> int:
    """Fork the run ``args.checkpoint`` holds, save the fork, print how to resume it."""
    overrides = _overrides(args.override)
    location = _parent_location(parse_location(args.checkpoint), args.run)
    parent = _parent_checkpoint(location, args.seq)
    if args.run is not None and parent.run_id != args.run:
        msg = (
            f"--run {args.run!r}: {location.label} holds run {parent.run_id!r} (a file holds "
            f"one run)"
        )
        raise CliError(msg)
    workflow = load_workflow(args.workflow)
    forked = _fork(workflow, parent, overrides, args)
    assert forked.run_id is not None  # noqa: S101 - fork() always names the new run
    target = _target(location, forked.run_id)
    _save(target, forked)
    out(_made_line(parent, forked, target, location))
    out(f"resume it with: {_resume_command(args.workflow, target, forked)}")
    notes = _notes(target, forked)
    if notes:
        out(notes)
    return EXIT_OK


def _overrides(items: list[str]) -> dict[str, Any]:
    """Each ``--override STEP=VALUE``, its value read as ``--answer`` reads one."""
    overrides: dict[str, Any] = {}
    for item in items:
        name, equals, text = item.partition("=")
        if not equals or not name:
            msg = f"--override {item!r} is not STEP=VALUE"
            raise CliError(msg)
        if name in overrides:
            msg = f"--override {name!r} is given twice"
            raise CliError(msg)
        overrides[name] = flag_value("--override", name, text)
    return overrides


def _parent_location(location: Location, run: str | None) -> Location:
    """``location`` naming the parent run: ``?run_id=``, ``--run``, or a database's only run."""
    if not isinstance(location, DatabaseLocation):
        return location
    named = location.run_id
    if named is not None and run is not None and named != run:
        msg = f"--run {run!r} and the run_id {named!r} of --checkpoint name different runs"
        raise CliError(msg)
    named = named if named is not None else run
    if named is None:
        runs = location.run_ids()
        if not runs:
            msg = f"{location.label}: holds no run to fork"
            raise CliError(msg)
        if len(runs) > 1:
            shown = ", ".join(map(show, runs[:5])) + (", ..." if len(runs) > 5 else "")  # noqa: PLR2004
            msg = f"{location.label}: holds {len(runs)} runs ({shown}); name one with --run RUN"
            raise CliError(msg)
        named = runs[0]
    return dataclasses.replace(location, run_id=named)


def _parent_checkpoint(location: Location, seq: int | None) -> WorkflowCheckpoint:
    """The latest checkpoint of the parent run, or its checkpoint ``seq``."""
    if seq is None:
        checkpoint = location.load(missing_ok=False)
        assert checkpoint is not None  # noqa: S101 - missing_ok=False never returns None
        return checkpoint
    if isinstance(location, DatabaseLocation):
        return location.load_seq(seq, "fork --seq")
    return location.load_seq(seq)


def _fork(
    workflow: Any, parent: WorkflowCheckpoint, overrides: dict[str, Any], args: argparse.Namespace
) -> WorkflowCheckpoint:
    """`Workflow.fork` of ``parent``; what it refuses as a `CliError` naming the flag."""
    from executionkit._errors import RunArgumentError  # noqa: PLC0415

    if args.run_id is not None and not args.run_id:
        msg = "--run-id is empty"
        raise CliError(msg)
    if args.note is not None and not args.note:
        msg = "--note is empty"
        raise CliError(msg)
    try:
        forked: WorkflowCheckpoint = workflow.fork(
            parent,
            override=overrides or None,
            rerun=tuple(args.rerun),
            run_id=args.run_id,
            note=args.note,
        )
    except RunArgumentError as exc:  # CheckpointValueError is one too
        raise CliError(_in_cli_terms(str(exc))) from None
    except ValueError as exc:  # CheckpointValueError: an override JSON cannot hold
        raise CliError(_in_cli_terms(error_text(exc))) from None
    return forked


def _in_cli_terms(message: str) -> str:
    for python, cli in _IN_CLI_TERMS:
        if message.startswith(python):
            return cli + message.removeprefix(python)
    if message.startswith("run_id "):  # "run_id 'x' is the parent's: ..."
        return f"--run-id {message.removeprefix('run_id ')}"
    return message


def _target(location: Location, run_id: str) -> Location:
    """Where the fork is saved: the same database, or a new file beside the parent's.

    A file holds one run, so the fork goes to ``run.<run_id>.json`` (``.jsonl``);
    one that exists already is never overwritten. A database must not hold the
    run already.
    """
    if isinstance(location, DatabaseLocation):
        target = dataclasses.replace(location, run_id=run_id)
        if target.load(missing_ok=True) is not None:
            msg = f"{location.label}: holds a run {run_id!r} already; choose another --run-id"
            raise CliError(msg)
        return target
    if "/" in run_id or "\\" in run_id or "\0" in run_id or run_id.startswith("."):
        msg = (
            f"--run-id {run_id!r}: the fork of a file is saved as a file named after it, so it "
            f"cannot hold a slash, a backslash or a NUL, nor start with a dot"
        )
        raise CliError(msg)
    path = location.path
    name = f"{path.stem}.{run_id}{path.suffix}" if path.suffix else f"{path.name}.{run_id}"
    new = path.with_name(name)
    if new.exists() or new.is_symlink():
        msg = f"{new}: exists already; the fork of {location.label} is saved there"
        raise CliError(msg)
    return FileLocation(new, str(new))


def _save(target: Location, forked: WorkflowCheckpoint) -> None:
    """Save the fork's first checkpoint; a store's refusal as a `CliError`."""
    from executionkit._errors import ExecutionKitError  # noqa: PLC0415

    store = target.writer("fork --checkpoint")
    try:
        store(forked)
    except (ExecutionKitError, OSError, ValueError) as exc:
        msg = f"could not save the fork to {target.label}: {error_text(exc)}"
        raise CliError(msg) from None


def _made_line(
    parent: WorkflowCheckpoint, forked: WorkflowCheckpoint, target: Location, given: Location
) -> str:
    """``forked run 'new' from run 'old' seq 5 into ...; overridden: ...; dropped ...``."""
    kept = {*forked.outputs, *forked.skipped}
    dropped = [name for name in (*parent.outputs, *parent.skipped) if name not in kept]
    lineage = forked.lineage
    where = (
        f"into {target.label} (a file holds one run: the parent's stays in {given.label})"
        if isinstance(target, FileLocation)
        else f"into {target.label}"
    )
    parts = [
        f"forked run {forked.run_id!r} from run {parent.run_id!r} seq {parent.seq} {where}",
    ]
    if lineage["overridden"]:
        parts.append(f"overridden: {', '.join(map(show, lineage['overridden']))}")
    if lineage["rerun"]:
        parts.append(f"re-run: {', '.join(map(show, lineage['rerun']))}")
    parts.append(f"dropped, so resuming runs them: {', '.join(map(show, dropped)) or 'nothing'}")
    return one_line("; ".join(parts))


def _resume_command(workflow: str, target: Location, forked: WorkflowCheckpoint) -> str:
    """The ``run`` command that resumes the fork, as it works when pasted into a shell."""
    if isinstance(target, DatabaseLocation):
        assert forked.run_id is not None  # noqa: S101 - fork() always names the new run
        given, _ = target.run_url(forked.run_id)
    else:
        given = target.label
    words = [
        "run",
        workflow,
        "--checkpoint",
        given,
    ]
    for key in forked.context_keys:
        words += ["--input", f"{key}=VALUE"]
    return one_line(f"{invocation()} {shlex.join(words)}")


def _notes(target: Location, forked: WorkflowCheckpoint) -> str:
    """What to put in the printed command: the inputs' values, a password."""
    notes = []
    if forked.context_keys:
        notes.append(
            "put each input's value in place of VALUE: checkpoints keep input names, never values"
        )
    if isinstance(target, DatabaseLocation) and forked.run_id is not None:
        _, hidden = target.run_url(forked.run_id)
        if hidden:
            notes.append(f"put the password in place of {PASSWORD}: it is never printed")
    return f"({'; '.join(notes)})" if notes else ""
