"""``executionkit run``: run a workflow, checkpointing to a file and resuming from it."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from typing import TYPE_CHECKING, Any, cast

from executionkit._cli._dry_run import dry_run
from executionkit._cli._exits import (
    EXIT_CLAIMED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SUSPENDED,
    EXIT_TERMINATED,
    CliError,
)
from executionkit._cli._load import load_workflow, read_inputs
from executionkit._cli._location import DatabaseLocation, parse_location, stream_publisher
from executionkit._cli._maps import recorded_steps, unfinished_maps
from executionkit._cli._questions import GivenAnswers, now, pending_lines
from executionkit._cli._run_options import RunFlags
from executionkit._cli._text import error_text, json_document, out, say
from executionkit._define._questions import waiting_in
from executionkit._terminal import show

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._errors import RunClaimedError, StaleCheckpointError
    from executionkit._record._result import WorkflowResult
    from executionkit._workflow import Workflow
    from executionkit.events import Event

_SHOWN_FAILED_ITEMS = 3  # of each map: their keys and errors, whole; then how many more


class _Events:
    """The run's ``on_event``: progress on stderr, and the failed items of the run's maps.

    Only the run's own maps: a failed map in a sub-workflow is one failed step of
    the sub-workflow, named in its error.
    """

    def __init__(self) -> None:
        from executionkit.progress import ConsoleProgress  # noqa: PLC0415

        self._progress = ConsoleProgress(sys.stderr)  # escapes names and messages itself
        self._run_id: str | None = None
        self.failed_items: dict[str, list[tuple[str, BaseException]]] = {}

    def __call__(self, event: Event) -> None:
        from executionkit.events import ItemFailed, RunStarted  # noqa: PLC0415

        self._progress(event)
        if isinstance(event, RunStarted) and self._run_id is None:
            self._run_id = event.run_id
        elif isinstance(event, ItemFailed) and event.run_id == self._run_id:
            self.failed_items.setdefault(event.step, []).append((event.item, event.error))

    def item_lines(self, step: str) -> list[str]:
        """``  item 3: ValueError: ...`` for the first failed items of map ``step``."""
        failed = self.failed_items.get(step, [])
        lines = [f"  item {show(key)}: {error_text(error)}" for key, error in failed]
        if len(failed) > _SHOWN_FAILED_ITEMS:
            more = len(failed) - _SHOWN_FAILED_ITEMS
            lines[_SHOWN_FAILED_ITEMS:] = [f"  and {more} more items failed"]
        return lines


class _Saver:
    """The run's ``checkpoint_fn``: the store, remembering what it saved or why it failed.

    ``last`` is the latest checkpoint of the run this command knows of: the one it
    loaded, then each one it saved (whose pending questions say when they were
    asked); ``saved`` is only what this command saved itself, so that it never
    reports a checkpoint it did not write. Without a store (no ``--checkpoint``)
    it only remembers them.

    A store that grants claims lends its ``claim`` (and only such a store: the run
    claims a ``checkpoint_fn`` that has one), so that two commands never both run
    one run; ``claim_error`` is what taking the claim raised, if it failed.
    """

    claim: Callable[[str], object]

    def __init__(
        self, store: Callable[[WorkflowCheckpoint], object] | None, last: WorkflowCheckpoint | None
    ) -> None:
        self.store = store
        self.last = last
        self.saved: WorkflowCheckpoint | None = None
        self.error: Exception | None = None
        self.claim_error: Exception | None = None
        claim = getattr(store, "claim", None)
        if callable(claim):
            self._store_claim: Callable[[str], object] = claim
            self.claim = self._claim

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        if self.store is not None:
            try:
                self.store(checkpoint)
            except Exception as exc:
                self.error = exc
                raise
        self.last = self.saved = checkpoint

    def _claim(self, run_id: str) -> object:
        """The store's claim of ``run_id``, remembering why taking it failed, if it did."""
        try:
            manager = self._store_claim(run_id)
        except Exception as exc:
            self.claim_error = exc
            raise
        if hasattr(manager, "__aenter__") or not hasattr(manager, "__enter__"):
            return manager  # none of the command's stores: the runner takes it as it is
        return self._entering(cast("AbstractContextManager[object]", manager))

    @contextlib.contextmanager
    def _entering(self, manager: AbstractContextManager[object]) -> Iterator[object]:
        with contextlib.ExitStack() as stack:
            try:
                stored = stack.enter_context(manager)
            except Exception as exc:
                self.claim_error = exc
                raise
            yield stored


def run_command(args: argparse.Namespace) -> int:
    """Run ``args.workflow``; print its outputs as JSON, or say what failed and what was saved."""
    context = read_inputs(args)
    answers = GivenAnswers(args)
    if answers and args.checkpoint is None:
        msg = (
            "--answer and --answers-json need --checkpoint: they answer the questions a run "
            "saved there is waiting for"
        )
        raise CliError(msg)
    location = None if args.checkpoint is None else parse_location(args.checkpoint)
    run_id = None
    if isinstance(location, DatabaseLocation):
        run_id = location.named_run("--checkpoint")
    resume = None if location is None else location.load(missing_ok=True)
    if answers and resume is not None:
        answers.resolve(waiting_in(resume))  # a question's name may hold "="
    workflow = load_workflow(args.workflow)
    if args.dry_run:  # before the store is opened for writing: nothing is written
        return dry_run(args, workflow, context, answers, resume=resume, run_id=run_id)
    flags = RunFlags.of(args)
    # The text its steps stream, kept in the store for a page in another process.
    streams = None if location is None else stream_publisher(location, "--checkpoint")
    if streams is not None:
        flags.listeners.append(streams)
    try:
        saver = _Saver(
            None if location is None else location.writer("--checkpoint", history=flags.history),
            resume,
        )
        label = None if location is None else location.label
        if args.discard_unknown_steps and resume is not None:
            _say_discarded(workflow, resume, label)
        return _run(
            args,
            workflow,
            context,
            answers,
            label=label,
            resume=resume,
            saver=saver,
            run_id=run_id,
            flags=flags,
        )
    finally:
        if streams is not None:
            streams.close()
        flags.close()


def _run(
    args: argparse.Namespace,
    workflow: Workflow,
    context: dict[str, Any],
    answers: GivenAnswers,
    *,
    label: str | None,
    resume: WorkflowCheckpoint | None,
    saver: _Saver,
    run_id: str | None,
    flags: RunFlags,
) -> int:
    """Run ``workflow``; report how it ended and return the exit code."""
    from executionkit._errors import RunArgumentError  # noqa: PLC0415
    from executionkit._record._result import WorkflowFailed  # noqa: PLC0415

    events = _Events()
    try:
        result = workflow.run_sync(
            context,
            checkpoint_fn=saver,
            resume_from=resume,
            answers=answers.values or None,
            run_id=run_id,
            # A fresh run names its workflow; a resumed one keeps the checkpoint's metadata.
            metadata={"workflow": args.workflow} if resume is None else None,
            # Outputs that could not be written to the file, or printed as the JSON the
            # command prints, fail their step at once.
            validate_json=True,
            on_event=[events, *flags.listeners] if flags.listeners else events,
            rerun=args.rerun or None,
            unknown_steps="discard" if args.discard_unknown_steps else "error",
            on_code_change=args.on_code_change,
            # Steps are expensive: each one is saved as it completes, not with its batch.
            checkpoint_every="step",
            **flags.options,
        )
    except RunArgumentError as exc:  # before any step ran, CheckpointMismatchError included
        raise CliError(in_cli_terms(str(exc), workflow)) from None
    except WorkflowFailed as failure:
        _missing_inputs(failure, workflow)
        for name, error in failure.errors.items():
            say(f"step {show(name)} failed: {in_cli_terms(error_text(error), workflow)}")
            for line in events.item_lines(name):
                say(line)
        say(_saved(label, saver, workflow))
        return EXIT_FAILED
    except KeyboardInterrupt:
        say(f"interrupted; {_saved(label, saver, workflow)}")
        return EXIT_INTERRUPTED
    except SystemExit as exc:
        # run_sync raises SystemExit(143) for SIGTERM once it has checkpointed what
        # completed, as it raises KeyboardInterrupt for Ctrl-C; any other exit passes.
        if exc.code != EXIT_TERMINATED:
            raise
        say(f"terminated; {_saved(label, saver, workflow)}")
        return EXIT_TERMINATED
    except Exception as exc:
        code = _stopped(exc, answers, label=label, resume=resume, saver=saver, workflow=workflow)
        if code is None:
            raise
        return code
    return _ended(result, label, saver, workflow)


def _missing_inputs(failure: Exception, workflow: Workflow) -> None:
    """Raise `CliError` (exit 2) when every failed step read an input nobody gave.

    A workflow that declares its inputs has them checked before anything runs;
    one that does not learns it when a step reads ``ctx`` for a key that is no
    step: bad input, said as such, naming the key and the flag that gives it.
    """
    from executionkit._errors import ContextKeyError  # noqa: PLC0415

    errors = getattr(failure, "errors", {})
    steps = {step.name for step in workflow.steps}
    missing: dict[str, str] = {
        error.key: name
        for name, error in errors.items()
        if isinstance(error, ContextKeyError)
        and isinstance(error.key, str)
        and error.key not in steps
    }
    if not errors or len(missing) != len(errors):
        return
    key, step = next(iter(missing.items()))
    others = "".join(f" --input {other}=VALUE" for other in list(missing)[1:])
    msg = (
        f"step {show(step)} reads input {show(key)}, which was not given: pass --input "
        f"{key}=VALUE{others} (or --inputs-json FILE); declare Workflow(..., inputs=[...]) "
        f"to have inputs checked before any step runs"
    )
    raise CliError(msg)


def _stopped(
    error: Exception,
    answers: GivenAnswers,
    *,
    label: str | None,
    resume: WorkflowCheckpoint | None,
    saver: _Saver,
    workflow: Workflow,
) -> int | None:
    """Report ``error`` that stopped the run and return the exit code; None if not ours.

    Ours: an answer a check refused or a claim that could not be taken (bad
    input), a run another process owns or saved since this command loaded it
    (nothing ran, exit 4), the store failing to save and the budget reached
    (exit 1).
    """
    from executionkit._errors import RunClaimedError, StaleCheckpointError  # noqa: PLC0415
    from executionkit._record._result import BudgetExceeded  # noqa: PLC0415

    if isinstance(error, BudgetExceeded):
        say(str(error).partition(". ")[0])  # what was reached; the rest is for Python callers
        say(f"{_saved(label, saver, workflow)} with a larger --budget")
        return EXIT_FAILED

    source = answers.refused(error)
    if source is not None:  # raised before anything ran, as RunArgumentError is
        msg = f"{source}: the step's check refused the answer: {error_text(error)}"
        raise CliError(msg) from None
    if isinstance(error, RunClaimedError):  # raised before any step started
        say(_owned(error, label))
        return EXIT_CLAIMED
    if error is saver.claim_error:  # a lock file that is not one, a folder not writable
        msg = f"{label}: could not claim the run: {error_text(error)}"
        raise CliError(msg) from None
    if isinstance(error, StaleCheckpointError) and error.before_start:
        say(_moved_on(error, label, resume))
        return EXIT_CLAIMED
    if error is not saver.error:
        return None
    if isinstance(error, StaleCheckpointError):
        say(
            f"could not save checkpoint seq {error.seq} to {label}: another process saved "
            f"seq {error.stored_seq} of this run meanwhile; run the same command again to "
            f"resume from it"
        )
    else:
        say(f"could not save the checkpoint to {label}: {error_text(error)}")
        say(_saved(label, saver, workflow))
    return EXIT_FAILED


def _ended(result: WorkflowResult, label: str | None, saver: _Saver, workflow: Workflow) -> int:
    """Print the outputs of a run that finished (exit 0), or the questions and waits left."""
    if not result.pending and not result.waits:
        out(json_document(dict(result.outputs)))
        return EXIT_OK
    return _suspended(result, label, saver, workflow)


def _suspended(
    result: WorkflowResult, label: str | None, saver: _Saver, workflow: Workflow
) -> int:
    """Print the questions and waits the run waits for, say what was saved, and return 3."""
    if not result.pending:
        return _timed(result, label, saver, workflow)
    last = saver.last
    asked = {} if last is None else waiting_in(last)  # by question path, as result.pending
    pending = {
        name: asked.get(name) or {"question": question, "asked_at": "-", "expires_at": None}
        for name, question in result.pending.items()
    }
    count = len(pending)
    lines = [f"waiting for {'an answer' if count == 1 else f'{count} answers'}:"]
    lines.extend(f"  {line}" for line in pending_lines(pending, now()))
    lines.extend(_wait_lines(result))
    out("\n".join(lines))
    names = ", ".join(map(show, pending))
    if label is None:
        say(
            f"waiting for answers to {names}; nothing was saved, so they cannot be given: "
            f"pass --checkpoint FILE to answer in a later run"
        )
    else:
        say(f"waiting for answers to {names}; {_saved(label, saver, workflow, answer=True)}")
    return EXIT_SUSPENDED


def _timed(result: WorkflowResult, label: str | None, saver: _Saver, workflow: Workflow) -> int:
    """Print the waits (`Step.wait`) not due yet, say what was saved, and return exit code 3."""
    out("\n".join(_wait_lines(result)))
    first = min(result.waits.values()).isoformat()
    names = ", ".join(map(show, result.waits))
    if label is None:
        say(
            f"waiting for {names} (due from {first}); nothing was saved, so a later run "
            f"waits again from its start: pass --checkpoint FILE to keep the time"
        )
    else:
        say(
            f"waiting for {names} (due from {first}); {_saved(label, saver, workflow)} "
            f"once due (earlier, nothing that depends on it runs)"
        )
    return EXIT_SUSPENDED


def _wait_lines(result: WorkflowResult) -> list[str]:
    """``waiting for 1 timer:`` and a line per wait with its due time; nothing without waits."""
    waits = result.waits
    if not waits:
        return []
    count = len(waits)
    lines = [f"waiting for {'a timer' if count == 1 else f'{count} timers'}:"]
    lines.extend(f"  {show(name)} due {due.isoformat()}" for name, due in waits.items())
    return lines


def _say_discarded(workflow: Workflow, resume: WorkflowCheckpoint, label: str | None) -> None:
    """Say which recorded steps ``--discard-unknown-steps`` drops, if any."""
    from executionkit._checkpoint._value import LEGACY_VERSION  # noqa: PLC0415

    if resume.version == LEGACY_VERSION:  # 0.4 kept the inputs there: they are not steps
        return
    known = {step.name for step in workflow.steps}
    unknown = [name for name in resume.outputs if name not in known]
    if unknown:
        say(
            f"dropping what {label} records for steps this workflow does not have: "
            f"{', '.join(map(show, unknown))}"
        )


# The library's advice names run()'s arguments; on the command line it names flags.
_IN_CLI_TERMS = (
    ("pass unknown_steps='discard' to drop them", "pass --discard-unknown-steps to drop them"),
    (
        "initial_context lacks keys the checkpoint was run with",
        "inputs the checkpoint was run with are missing",
    ),
    (
        "checkpoints never store context values, so pass them again",
        "checkpoints never store input values, so pass them again with --input or --inputs-json",
    ),
    ("initial_context keys collide with step names", "inputs collide with step names"),
    ("a context value cannot share a ctx key", "an input cannot share a ctx key"),
    ("rerun names steps", "--rerun names steps"),
    ("but run(limits=...) has none", "but no --limit was given"),
    ("but run(limits=...) has ", "but --limit gives only "),
    ("answers given for steps", "answers given (--answer, --answers-json) for steps"),
    ("the questions pending in resume_from", "the questions pending in the checkpoint"),
    (
        "rerun needs resume_from: without a checkpoint every step runs anyway",
        (
            "--rerun needs a checkpoint to resume from: without --checkpoint FILE holding "
            "one, every step runs anyway"
        ),
    ),
)


def in_cli_terms(message: str, workflow: Workflow) -> str:
    """``message`` of a `RunArgumentError`, its advice given in flags, not in arguments."""
    for python, cli in _IN_CLI_TERMS:
        message = message.replace(python, cli)
    message = _limit_advice(message)
    for step in workflow.steps:  # "...; fix decode, or pass rerun=['name']"
        advice = f"pass rerun=[{step.name!r}]"
        if message.endswith(advice):
            message = f"{message.removesuffix(advice)}pass --rerun {shlex.quote(step.name)}"
        asks = f"; rerun=[{step.name!r}] asks it again"  # an answer after the deadline
        if message.endswith(asks):
            flag = f"--rerun {shlex.quote(step.name)}"
            message = f"{message.removesuffix(asks)}; {flag} asks it again"
    return message


_LIMIT_ADVICE = ": pass an executionkit.Limit with that key"
# The key, as repr() writes a str, in "step 'x' draws on limit 'api' (limit='api'), ...".
_DRAWN_KEY = re.compile(r"draws on limit ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\") \(limit=\1\)")


def _limit_advice(message: str) -> str:
    """The advice of a step drawing on a limit key none was given for: the ``--limit`` to add."""
    found = _DRAWN_KEY.search(message)
    if found is None or not message.endswith(_LIMIT_ADVICE):
        return message
    import ast  # noqa: PLC0415 - only this error needs it

    key = ast.literal_eval(found.group(1))
    flag = f"--limit {shlex.quote(key)}:FIELD=N,..."
    return (
        f"{message.removesuffix(_LIMIT_ADVICE)}: pass {flag} for it (FIELD requests, tokens, "
        f"concurrency or per)"
    )


def _owned(error: RunClaimedError, label: str | None) -> str:
    """One line for a run another process owns: who, since when, and what to do."""
    owner = "another process" if error.owner is None else error.owner.describe()
    return (
        f"run {error.run_id!r} in {label} is owned by {owner}; nothing ran. Run again once "
        f"it has ended to resume."
    )


def _moved_on(
    error: StaleCheckpointError, label: str | None, resume: WorkflowCheckpoint | None
) -> str:
    """One line for a run the store holds a later checkpoint of than the one loaded."""
    stored = error.stored_seq
    loaded = "found none" if resume is None else f"loaded seq {resume.seq}"
    return (
        f"the checkpoint of run {error.run_id!r} in {label} moved on since this command "
        f"loaded it (it {loaded}; another process has saved seq {stored} since); nothing "
        f"ran. Run the same command again to resume from seq {stored}."
    )


def _saved(label: str | None, saver: _Saver, workflow: Workflow, *, answer: bool = False) -> str:
    """What this command saved to ``label``, if anything, and how to go on from there."""
    if label is None:
        return "nothing was saved; pass --checkpoint FILE to keep the steps that completed"
    again = "and --answer NAME=VALUE to answer" if answer else "to resume"
    if saver.saved is not None:
        return (
            f"checkpoint saved to {label} ({_holding(saver.saved, workflow)}); run again with "
            f"the same --checkpoint {again}"
        )
    if saver.last is None:
        return f"nothing was saved to {label}"
    return (
        f"nothing new was saved to {label} (it holds {_holding(saver.last, workflow)}); run "
        f"again with the same --checkpoint {again}"
    )


def _holding(checkpoint: WorkflowCheckpoint, workflow: Workflow) -> str:
    """``seq 4, 1 of 3 steps, 2 items of summaries recorded`` (skipped steps are recorded)."""
    items = "".join(
        f", {entry.recorded:,} item{'' if entry.recorded == 1 else 's'} of {show(name)}"
        for name, entry in unfinished_maps(checkpoint, None).items()
    )
    recorded = recorded_steps(checkpoint, workflow)
    total = len(workflow.steps)
    return f"seq {checkpoint.seq}, {recorded} of {total} steps{items} recorded"
