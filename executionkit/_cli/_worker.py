"""``executionkit worker``: carry the runs of a location on, for ever, each under its claim.

A worker looks at its location every ``--poll`` seconds (and whenever one of its
runs ends) and runs, through `Workflow.run` as ``executionkit run`` does, each run
that can go on and that nobody runs:

- a submitted run (`Workflow.submit`) that has not started: with its stored inputs;
- a run whose owner died: unclaimed, not every step recorded, nothing failed, no
  question or timer waiting;
- a run waiting for a timer that is due now;
- a run with a question answered in its inbox (`executionkit answer`, the page, or
  ``store.inbox.save_answer``), or a question whose deadline passed (the ask
  takes its default, or fails closed).

Every run it resumes is given its submission's inputs (a run started otherwise
stores none: one that needs inputs is left alone). Claims make sure no run is run
by two processes: a run another worker took first is refused before anything runs
(`RunClaimedError`, or `StaleCheckpointError` when it moved on since it was read),
and the worker goes on with the next. A run it cannot resume (inputs needed and not
stored, a checkpoint this workflow refuses, a saved answer its check refuses, a
budget spent) is left alone with the reason in the inbox (`RunInbox.leave_alone`),
where ``inspect`` and the page show it; each worker process tries such a run once
more when it first sees it, so a worker started with new code takes it back.

Runs of another workflow in the same database (no recorded step of them is a step
of this one) are not this worker's and are never touched. The text its runs'
steps stream is kept in the location's inbox while they run (`StreamPublisher`),
for a page in another process to show. SIGTERM and Ctrl-C stop
the worker as they stop a run: every run it carries saves what completed, then it
exits (143 or 130).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import EXIT_INTERRUPTED, EXIT_TERMINATED, CliError
from executionkit._cli._load import load_workflow
from executionkit._cli._location import (
    FileLocation,
    close_store,
    open_store,
    parse_location,
    stream_publisher,
)
from executionkit._cli._maps import recorded_steps
from executionkit._cli._run_options import RunFlags
from executionkit._cli._text import error_text, say
from executionkit._define._questions import waiting_in
from executionkit._define._waits import now, waits_in
from executionkit._terminal import show

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable  # noqa: TC004 - dataclass annotations stay strings

    from executionkit._checkpoint._value import WorkflowCheckpoint  # noqa: TC004 - likewise
    from executionkit._cli._location import Location  # noqa: TC004 - likewise
    from executionkit._workflow import Workflow  # noqa: TC004 - likewise
    from executionkit.stores import RunInbox


@dataclass(frozen=True, slots=True)
class Job:
    """A run a worker can carry on now, and what to give it."""

    run_id: str
    checkpoint: WorkflowCheckpoint | None  # None: a submitted run, started fresh
    inputs: dict[str, Any]
    metadata: dict[str, Any] | None
    answers: dict[str, Any]
    why: str  # "submitted", "its owner ended", "timer due", "answered", "deadline passed"


@dataclass
class Worker:
    """Carries the runs of ``location`` on with ``workflow``; `Worker.serve` runs it."""

    location: Location
    workflow: Workflow
    flags: RunFlags = field(default_factory=RunFlags)
    concurrency: int = 4
    poll: float = 2.0
    on_code_change: str = "keep"
    log: Callable[[str], None] = say
    _running: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _ended: set[str] = field(default_factory=set)  # finished or failed: never looked at again
    _retried: set[str] = field(default_factory=set)  # left alone, and tried once by this worker
    _seen: dict[str, int | None] = field(default_factory=dict)  # each run's seq at the last look
    _views: dict[str, tuple[int, WorkflowCheckpoint]] = field(default_factory=dict)
    _wake: asyncio.Event | None = None
    _names: frozenset[str] = frozenset()
    _reader: Any = None
    _looking: threading.Lock = field(default_factory=threading.Lock)  # held by a look
    _writer: Any = None  # the store its runs save to: one connection, shared by them
    _streams: Any = None  # keeps its runs' streamed text in the location, for pages elsewhere

    def __post_init__(self) -> None:
        """Open the store it looks at the location through."""
        self._names = frozenset(step.name for step in self.workflow.steps)
        self._reader = self._open()
        self._streams = stream_publisher(self.location, "worker")

    async def serve(self) -> None:
        """Carry runs on until cancelled; then every run it carries saves what completed."""
        self._wake = asyncio.Event()
        try:
            while True:
                await self.step()
                await self._nap()
        finally:
            await self.stop()

    async def _nap(self) -> None:
        """Wait until one of its runs ends, or ``poll`` seconds, whichever comes first.

        Not `asyncio.wait_for`: in Python 3.11 it returns the inner result when a
        cancellation arrives as the inner wait ends, and the cancellation is lost;
        a worker told to stop (SIGTERM) then looked again, for ever.
        `asyncio.wait` never swallows the cancellation of the task that waits.
        """
        assert self._wake is not None  # noqa: S101 - serve made it
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait((woken,), timeout=self.poll)
        finally:
            woken.cancel()
        self._wake.clear()

    async def settle(self) -> None:
        """Wait until every run it carries now has returned or raised."""
        while self._running:
            await asyncio.wait(list(self._running.values()))

    async def stop(self) -> None:
        """Cancel the runs it carries, wait for each to save what completed, close the store."""
        try:
            tasks = list(self._running.values())
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        finally:
            # A look cancelled with its task goes on in its thread: the store it reads
            # is closed only once it is done (closing it under the thread crashed).
            await asyncio.to_thread(self._looking.acquire)
            try:
                close_store(self._reader)
                close_store(self._writer)
            finally:
                self._looking.release()
            # Its runs deleted their streamed text as they ended: this only stops a thread
            # that a run stopped too early to say so left behind.
            await asyncio.to_thread(self._streams.close)

    async def step(self) -> list[str]:
        """Look at the location once and start every run that can go on; return their ids."""
        free = self.concurrency - len(self._running)
        if free <= 0:
            return []
        jobs = await asyncio.to_thread(self._scan, free)
        for job in jobs:
            self._running[job.run_id] = asyncio.create_task(
                self._carry(job), name=f"executionkit worker: {job.run_id}"
            )
        return [job.run_id for job in jobs]

    # --- what can go on --------------------------------------------------------------------

    def _scan(self, free: int) -> list[Job]:
        """Up to ``free`` runs that can go on now, the oldest submissions first.

        One look reads the runs' latest seqs, the submissions, the answers saved
        and the runs left alone (a query each in a database), and loads only the
        checkpoints that changed since the last look. A run whose seq moved since
        then is being run: it is looked at again next time. In a thread, holding
        ``_looking`` (`Worker.stop` closes the store only once the look is done).
        """
        with self._looking:
            return self._look(free)

    def _look(self, free: int) -> list[Job]:
        inbox: RunInbox = self._reader.inbox
        submitted = {s.run_id: s for s in inbox.submissions()}
        left = inbox.left_alone()
        answers = inbox.all_answers()
        jobs: list[Job] = []
        for run_id, seq in self._seqs(submitted).items():
            if len(jobs) >= free:
                break
            if run_id in self._running or run_id in self._ended:
                continue
            if run_id in left and run_id in self._retried:
                continue
            moved = self._seen.get(run_id, seq) != seq
            self._seen[run_id] = seq
            if moved:
                continue
            job = self._job(run_id, seq, submitted.get(run_id), answers.get(run_id, {}), inbox)
            if job is not None and self._owner(run_id) is None:
                jobs.append(job)
        return jobs

    def _seqs(self, submitted: dict[str, Any]) -> dict[str, int | None]:
        """The runs to look at and their latest seqs (None: submitted, not started)."""
        if isinstance(self.location, FileLocation):
            checkpoint = self.location.load(missing_ok=True)
            if checkpoint is None:
                return dict.fromkeys(list(submitted)[:1])
            self._views[checkpoint.run_id or ""] = (checkpoint.seq, checkpoint)
            return {checkpoint.run_id or "": checkpoint.seq}
        seqs: dict[str, int] = self._reader.run_seqs()
        found: dict[str, int | None] = {run_id: None for run_id in submitted if run_id not in seqs}
        found.update(reversed(seqs.items()))  # the least recently saved first
        only = self.location.run_id
        return found if only is None else {only: found[only]} if only in found else {}

    def _job(  # noqa: PLR0911 - one return per reason a run cannot go on
        self,
        run_id: str,
        seq: int | None,
        submission: Any,
        saved: dict[str, Any],
        inbox: RunInbox,
    ) -> Job | None:
        """The job of ``run_id`` if it can go on now; None if not (noting runs that ended)."""
        checkpoint = self._checkpoint(run_id, seq)
        inputs = {} if submission is None else dict(submission.inputs)
        if checkpoint is None:
            if submission is None or not self._mine(submission.steps):
                return None
            return Job(run_id, None, inputs, dict(submission.metadata), {}, "submitted")
        if not self._mine(checkpoint.step_info) or checkpoint.errors:
            self._ended.add(run_id)  # another workflow's run, or a failed one
            return None
        if submission is None and checkpoint.context_keys:
            self._leave_alone(
                inbox,
                run_id,
                f"it needs the inputs {', '.join(map(repr, checkpoint.context_keys))}, which "
                f"only a submitted run stores (Workflow.submit, executionkit submit); resume "
                f"it with executionkit run --checkpoint ... --input KEY=VALUE",
            )
            return None
        pending = waiting_in(checkpoint)
        waits = waits_in(checkpoint)
        if pending or waits:
            why, answers = self._ready(run_id, pending, waits, saved, inbox)
            if why is None:
                return None
            return Job(run_id, checkpoint, inputs, None, answers, why)
        if recorded_steps(checkpoint, self.workflow) >= len(self.workflow.steps):
            self._ended.add(run_id)
            return None
        return Job(run_id, checkpoint, inputs, None, {}, "its owner ended")

    def _checkpoint(self, run_id: str, seq: int | None) -> WorkflowCheckpoint | None:
        """The latest checkpoint of ``run_id``: loaded again only if its seq changed."""
        if seq is None:
            return None
        cached = self._views.get(run_id)
        if cached is not None and cached[0] == seq:
            return cached[1]
        checkpoint = self._load(run_id)
        if checkpoint is not None:
            self._views[run_id] = (checkpoint.seq, checkpoint)
        return checkpoint

    def _ready(
        self,
        run_id: str,
        pending: dict[str, Any],
        waits: dict[str, datetime],
        saved: dict[str, Any],
        inbox: RunInbox,
    ) -> tuple[str | None, dict[str, Any]]:
        """Why a waiting run can go on now (None: it cannot), and the answers to give it."""
        answers = {path: value for path, value in saved.items() if path in pending}
        stale = [path for path in saved if path not in pending]
        if stale:
            inbox.forget_answers(run_id, stale)  # answered already: recorded in the checkpoint
        if answers:
            return "answered", answers
        at = now()
        if any(due <= at for due in waits.values()):
            return "timer due", {}
        for entry in pending.values():
            expires = entry.get("expires_at")
            if isinstance(expires, str) and datetime.fromisoformat(expires) < at:  # as `overdue`
                return "deadline passed", {}
        return None, {}

    def _mine(self, names: Any) -> bool:
        """Whether a run that recorded the steps ``names`` is one of this workflow's runs."""
        recorded = set(names)
        return not recorded or bool(recorded & self._names)

    # --- carrying one run on ---------------------------------------------------------------

    async def _carry(self, job: Job) -> None:
        if self._writer is None:
            self._writer = self._open()
        store = self._writer
        inbox: RunInbox = store.inbox
        try:
            await self._run(job, store, inbox)
        finally:
            self._seen.pop(job.run_id, None)  # it moved, by this worker: not a sign of another
            self._running.pop(job.run_id, None)
            if self._wake is not None:
                self._wake.set()

    async def _run(self, job: Job, store: Any, inbox: RunInbox) -> None:
        options: dict[str, Any] = dict(self.flags.options)
        if job.metadata:
            options["metadata"] = job.metadata
        try:
            result = await self.workflow.run(
                job.inputs,
                checkpoint_fn=store,
                resume_from=job.checkpoint,
                answers=job.answers or None,
                run_id=job.run_id,
                validate_json=True,
                checkpoint_every="step",
                sleep_up_to=self.poll,  # a longer wait frees its place: resumed when due
                on_code_change=self.on_code_change,  # type: ignore[arg-type]
                on_event=[*self.flags.listeners, self._streams],
                **options,
            )
        except asyncio.CancelledError:
            self.log(f"run {show(job.run_id)}: stopped with the worker; what completed is saved")
            raise
        except Exception as exc:  # noqa: BLE001 - each ending is reported or acted on
            self._failed(job, inbox, exc)
            return
        if job.answers:
            inbox.forget_answers(job.run_id, list(job.answers))
        if job.run_id in self._retried:
            inbox.take_back(job.run_id)
        self._report(job, result)

    def _failed(self, job: Job, inbox: RunInbox, error: Exception) -> None:
        """Act on a run that raised: refused (someone else has it), failed, or left alone."""
        from executionkit import (  # noqa: PLC0415
            BudgetExceeded,
            RunArgumentError,
            RunClaimedError,
            StaleCheckpointError,
            WorkflowFailed,
        )

        if isinstance(error, (RunClaimedError, StaleCheckpointError)):
            return  # another process took it first: nothing ran here
        if isinstance(error, WorkflowFailed):
            self._ended.add(job.run_id)
            self.log(f"run {show(job.run_id)} failed: {error_text(error)}")
        elif isinstance(error, BudgetExceeded):
            self._leave_alone(inbox, job.run_id, f"its budget is spent: {error_text(error)}")
        elif any("refused the answer" in note for note in getattr(error, "__notes__", ())):
            inbox.forget_answers(job.run_id, list(job.answers))
            self._leave_alone(
                inbox, job.run_id, f"a saved answer was refused: {error_text(error)}"
            )
        elif isinstance(error, RunArgumentError):
            self._leave_alone(inbox, job.run_id, error_text(error))
        else:  # the store failed, say: tried again at the next look
            self.log(f"run {show(job.run_id)} stopped: {error_text(error)}")

    def _report(self, job: Job, result: Any) -> None:
        name = show(job.run_id)
        done = f"run {name} ({job.why}):"
        if result.pending or result.waits:
            waiting = [*(show(path) for path in result.pending)]
            waiting += [
                f"{show(path)} until {due.isoformat()}" for path, due in result.waits.items()
            ]
            self.log(f"{done} waiting for {', '.join(waiting)}")
        else:
            self._ended.add(job.run_id)
            self.log(f"{done} finished; steps run now: {len(result.executed)}")

    # --- the location ----------------------------------------------------------------------

    def _leave_alone(self, inbox: RunInbox, run_id: str, reason: str) -> None:
        self._retried.add(run_id)
        inbox.leave_alone(run_id, reason)
        self.log(f"left run {show(run_id)} alone: {reason}")

    def _open(self) -> Any:
        return open_store(self.location, "worker", history=self.flags.history)

    def _owner(self, run_id: str) -> Any:
        owner = getattr(self._reader, "owner", None)
        if owner is None:
            return None
        if isinstance(self.location, FileLocation):
            return owner()
        return owner(run_id)

    def _load(self, run_id: str) -> WorkflowCheckpoint | None:
        if isinstance(self.location, FileLocation):
            checkpoint = self.location.load(missing_ok=True)
            return checkpoint if checkpoint is not None and checkpoint.run_id == run_id else None
        loaded: WorkflowCheckpoint | None = self._reader.load(run_id)
        return loaded


def worker_command(args: argparse.Namespace) -> int:
    """Run ``executionkit worker`` until SIGTERM or Ctrl-C."""
    location = parse_location(args.location)
    if args.concurrency < 1:
        msg = f"--concurrency must be 1 or more, got {args.concurrency}"
        raise CliError(msg)
    if not args.poll > 0:
        msg = f"--poll must be a number of seconds above 0, got {args.poll}"
        raise CliError(msg)
    workflow = load_workflow(args.workflow)
    flags = RunFlags.of(args)
    flags.check_limits(workflow)
    worker = Worker(
        location,
        workflow,
        flags,
        concurrency=args.concurrency,
        poll=args.poll,
        on_code_change=args.on_code_change,
    )
    say(
        f"worker: carrying on the runs of {location.label} with {args.workflow} "
        f"({args.concurrency} at a time, looking every {args.poll:g} s); stop with Ctrl-C "
        f"or SIGTERM"
    )
    return asyncio.run(_serve(worker))


async def _serve(worker: Worker) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # noqa: S101 - asyncio.run runs this in a task
    received: list[int] = []

    def stop(signum: int) -> None:
        received.append(signum)
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    try:
        await worker.serve()
    except asyncio.CancelledError:
        if not received:
            raise
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    say("worker: stopped; what every run completed is saved")
    return EXIT_TERMINATED if received and received[0] == signal.SIGTERM else EXIT_INTERRUPTED
