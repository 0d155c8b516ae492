"""``executionkit submit`` and ``executionkit answer``: hand a worker a run, or an answer.

Neither runs anything. ``submit`` stores a run that has not started, with its
inputs (`Workflow.submit`); ``answer`` saves answers to the questions a run waits
for in the store's inbox (`RunInbox.save_answer`), checked against the questions
pending in its latest checkpoint and, with ``--workflow``, by the ask steps'
checks as a resume would check them. ``executionkit worker`` then carries the run on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import EXIT_OK, CliError
from executionkit._cli._load import load_workflow, read_inputs, read_json_object
from executionkit._cli._location import (
    DatabaseLocation,
    FileLocation,
    close_store,
    open_store,
    parse_location,
)
from executionkit._cli._questions import GivenAnswers
from executionkit._cli._text import error_text, out, say
from executionkit._define._questions import waiting_in
from executionkit._errors import did_you_mean
from executionkit._terminal import show

if TYPE_CHECKING:
    import argparse

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._location import Location


def submit_command(args: argparse.Namespace) -> int:
    """Store a run of ``args.workflow`` for a worker to start; print its run id."""
    location = parse_location(args.checkpoint)
    run_id = _run_id(location, args.run_id, "--run-id")
    workflow = load_workflow(args.workflow)
    inputs = read_inputs(args)
    metadata = (
        None
        if args.metadata_json is None
        else read_json_object("--metadata-json", args.metadata_json, "metadata keys to values")
    )
    store = open_store(location, "--checkpoint")
    try:
        chosen = workflow.submit(store, inputs, run_id=run_id, metadata=metadata)
    except (ValueError, TypeError) as exc:
        raise CliError(f"{location.label}: {error_text(exc)}") from None
    finally:
        close_store(store)
    out(chosen)
    say(
        f"submitted run {show(chosen)} to {location.label}; a worker starts it: "
        f"executionkit worker {location.label} --workflow {args.workflow}"
    )
    return EXIT_OK


def answer_command(args: argparse.Namespace) -> int:
    """Save the answers given to the questions a run waits for; run nothing."""
    location = parse_location(args.location)
    given = GivenAnswers(args)
    if not given:
        msg = "give at least one --answer NAME=VALUE (or --answers-json FILE)"
        raise CliError(msg)
    store = open_store(location, "LOCATION")
    try:
        run_id, checkpoint = _latest(location, store, args.run)
        waiting = waiting_in(checkpoint)
        given.resolve(waiting)
        for path, source in given.sources.items():
            if path not in waiting:
                listed = ", ".join(map(show, waiting)) or "none"
                msg = (
                    f"{source}: run {show(run_id)} has no question {show(path)} waiting for an "
                    f"answer{did_you_mean(path, list(waiting))} (waiting: {listed})"
                )
                raise CliError(msg)
        if args.workflow is not None:
            _check(args.workflow, store, checkpoint, given)
        for path, value in given.values.items():
            store.inbox.save_answer(run_id, path, value)
    except (ValueError, OSError) as exc:
        raise CliError(f"{location.label}: {error_text(exc)}") from None
    finally:
        close_store(store)
    names = ", ".join(map(show, given.values))
    say(
        f"saved the answer to {names} of run {show(run_id)}; nothing ran: a worker resumes "
        f"the run (executionkit worker {location.label} --workflow MODULE:ATTR)"
    )
    return EXIT_OK


def _check(spec: str, store: Any, checkpoint: WorkflowCheckpoint, given: GivenAnswers) -> None:
    """Check the answers as a resume would (`Workflow.plan`), with the run's inputs."""
    workflow = load_workflow(spec)
    submission = store.inbox.submission(checkpoint.run_id or "")
    context = (
        dict(submission.inputs)
        if submission is not None
        else dict.fromkeys(checkpoint.context_keys)  # what is checked is there; no step runs
    )
    try:
        workflow.plan(context, resume_from=checkpoint, answers=given.values)
    except Exception as exc:  # noqa: BLE001 - a check's own error refuses the answer
        source = given.refused(exc) or "--answer"
        msg = f"{source}: {error_text(exc)}; nothing was saved"
        raise CliError(msg) from None


def _latest(location: Location, store: Any, run: str | None) -> tuple[str, WorkflowCheckpoint]:
    """The run answered and its latest checkpoint; `CliError` if it has none."""
    if isinstance(location, FileLocation):
        checkpoint = location.load(missing_ok=True)
        if checkpoint is not None and run is not None and checkpoint.run_id != run:
            msg = f"{location.label} holds run {show(checkpoint.run_id or '')}, not {show(run)}"
            raise CliError(msg)
        run_id = (run or "") if checkpoint is None else checkpoint.run_id or ""
    else:
        named = _run_id(location, run, "--run")
        if named is None:
            msg = f"{location.label} holds many runs: name the run with --run RUN"
            raise CliError(msg)
        run_id, checkpoint = named, store.load(named)
    if checkpoint is None:
        msg = (
            f"{location.label}: run {show(run_id)} has no checkpoint yet, so no "
            f"question waits for an answer"
        )
        raise CliError(msg)
    return run_id, checkpoint


def _run_id(location: Location, flag_value: str | None, flag: str) -> str | None:
    """The run named by ``flag`` or by the location's ``?run_id=``; both must agree."""
    named = location.run_id if isinstance(location, DatabaseLocation) else None
    if named is not None and flag_value is not None and named != flag_value:
        msg = f"{flag} {show(flag_value)} and ?run_id={show(named)} name different runs"
        raise CliError(msg)
    return flag_value if flag_value is not None else named
