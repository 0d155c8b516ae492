"""Answering a question from the page: the run resumed in this process, under its claim.

A `Resumer` runs each resume in a thread of its own, with its own event loop,
through `Workflow.run` with the arguments ``executionkit run`` passes when it
resumes (the same store, ``validate_json``, ``checkpoint_every="step"``). The
request that answered waits until the run has either saved its first checkpoint
(the one recording the answer, which the run hands over before any step starts)
or raised before that: a check that refused the answer, a run another process
owns (`RunClaimedError`), a checkpoint that moved on since. Those are answered
with a message, and nothing ran. Within this process a run being resumed is
refused a second answer before anything is loaded.

A `Tracker` keeps what the events of those runs say that a checkpoint does not:
each step's attempts, duration and tokens, the steps running, failed map items.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._cli._location import DatabaseLocation, close_store, stream_publisher
from executionkit._cli._run_options import RunFlags
from executionkit._cli._text import error_text, say

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._serve._runs import Source
    from executionkit._workflow import Workflow
    from executionkit.events import Event

_FAILED_KEYS_KEPT = 1000
_STARTED_WITHIN = 60.0  # seconds a request waits for the run to start or refuse


_STREAM_KEPT = 65536  # characters of a running attempt's streamed text kept (the latest)
_STREAMING_ITEMS_KEPT = 64  # items of a map whose streamed text is kept (the latest to stream)


@dataclass(slots=True)
class StepEvents:
    """What this server saw of one step: attempts, duration, tokens; whether it runs now.

    ``started_ms``: when this server saw it start (milliseconds since the epoch,
    by `executionkit._clock.wall`), for the time it has been running so far.
    ``streamed``: the text its running attempt streamed so far (`StepStreamed`),
    of attempt ``streamed_attempt``; a later attempt starts a new text, and the
    text goes once the step has ended (its output is what it returned).
    ``items_streamed``: for a map, the same of each item running, by key, until
    the item ends (the 64 that streamed last).
    """

    attempts: int = 0
    duration: float | None = None
    tokens: int | None = None
    running: bool = False
    streamed: str = ""
    streamed_attempt: int = 0
    started_ms: int | None = None
    items_streamed: dict[str, tuple[int, str]] = field(default_factory=dict)


@dataclass(slots=True)
class RunEvents:
    """What this server saw of one run it resumed."""

    steps: dict[str, StepEvents] = field(default_factory=dict)
    failed_items: dict[str, list[str]] = field(default_factory=dict)

    def stream_from(self, steps: Mapping[str, Mapping[str, Any]]) -> None:
        """Take the text another process keeps of its running steps (`Reader.streams`).

        Each step there runs now, with the text of its running attempt (and of
        its map's running items) as that process last wrote it.
        """
        for name, entry in steps.items():
            seen = self.steps.setdefault(name, StepEvents())
            seen.running = True
            if "text" in entry:
                seen.streamed, seen.streamed_attempt = entry["text"], entry["attempt"]
                seen.attempts = max(seen.attempts, entry["attempt"])
            items = entry.get("items", {})
            seen.items_streamed = {key: (it["attempt"], it["text"]) for key, it in items.items()}


class Tracker:
    """The events of the runs this server resumes, by the page's run id."""

    def __init__(self) -> None:
        """Start with no run seen."""
        self._lock = threading.Lock()
        self._runs: dict[str, RunEvents] = {}

    def listener(self, page_id: str, run_id: str | None) -> Any:
        """An ``on_event`` for the run ``page_id`` (``run_id`` names it in its events)."""

        def seen(event: Event) -> None:
            if run_id is not None and event.run_id != run_id:
                return  # a sub-workflow's own events: its view reads its checkpoint
            with self._lock:
                self._note(self._runs.setdefault(page_id, RunEvents()), event)

        return seen

    def of(self, page_id: str) -> RunEvents:
        """A copy of what was seen of ``page_id`` (empty if it never ran here)."""
        with self._lock:
            seen = self._runs.get(page_id, RunEvents())
            return RunEvents(
                {
                    name: StepEvents(
                        s.attempts,
                        s.duration,
                        s.tokens,
                        s.running,
                        s.streamed,
                        s.streamed_attempt,
                        s.started_ms,
                        dict(s.items_streamed),
                    )
                    for name, s in seen.steps.items()
                },
                {name: list(keys) for name, keys in seen.failed_items.items()},
            )

    def streams(self, page_id: str) -> dict[str, dict[str, Any]]:
        """The text each running step (and map item) of ``page_id`` streamed so far.

        ``{step: {"attempt": n, "text": str}}``, and for a map whose items stream,
        ``"items": {key: {"attempt": n, "text": str}}`` (without ``"text"`` when
        the step itself streamed nothing): what ``/stream`` answers.
        """
        with self._lock:
            seen = self._runs.get(page_id)
            if seen is None:
                return {}
            found: dict[str, dict[str, Any]] = {}
            for name, step in seen.steps.items():
                entry: dict[str, Any] = {}
                if step.streamed:
                    entry = {"attempt": step.streamed_attempt, "text": step.streamed}
                if step.items_streamed:
                    entry["items"] = {
                        key: {"attempt": attempt, "text": text}
                        for key, (attempt, text) in step.items_streamed.items()
                    }
                if entry:
                    found[name] = entry
            return found

    @staticmethod
    def _note(run: RunEvents, event: Event) -> None:
        from executionkit import events  # noqa: PLC0415

        step = getattr(event, "step", None)
        if step is None:
            return
        seen = run.steps.setdefault(step, StepEvents())
        if isinstance(
            event,
            (
                events.StepStreamed,
                events.StepFinished,
                events.StepFailed,
                events.ItemFinished,
                events.ItemFailed,
            ),
        ):
            _stream(seen, event)
            if isinstance(event, events.StepStreamed):
                return
        _started(seen, event)
        if isinstance(event, events.StepStarted):
            _stream(seen, event)
            seen.attempts, seen.running = event.attempt, True
        elif isinstance(event, events.MapStarted):
            seen.attempts, seen.running = max(seen.attempts, 1), True
        elif isinstance(event, events.StepFinished):
            cost = event.cost
            seen.running, seen.duration = False, event.duration
            seen.tokens = cost.input_tokens + cost.output_tokens
        elif isinstance(event, events.StepFailed):
            seen.running, seen.duration = False, event.duration
        elif isinstance(event, events.ItemFailed):
            keys = run.failed_items.setdefault(step, [])
            if len(keys) < _FAILED_KEYS_KEPT:
                keys.append(event.item)


def _started(seen: StepEvents, event: Event) -> None:
    """Note when a step that was not running starts (a retry goes on from its first start)."""
    from executionkit import events  # noqa: PLC0415

    if isinstance(event, (events.StepStarted, events.MapStarted)) and not seen.running:
        seen.started_ms = _clock.wall_ms()


def _stream(seen: StepEvents, event: Any) -> None:
    """Keep the text a step's running attempt streams: a new attempt, a new text.

    A map's items stream each a text of their own, kept until the item ends.
    Once the step ended, its texts go: its output is what it returned.
    """
    from executionkit import events  # noqa: PLC0415

    if isinstance(event, (events.StepFinished, events.StepFailed)):
        seen.streamed, seen.streamed_attempt = "", 0
        seen.items_streamed.clear()
        return
    if isinstance(event, (events.ItemFinished, events.ItemFailed)):
        seen.items_streamed.pop(event.item, None)
        return
    if isinstance(event, events.StepStreamed) and event.item is not None:
        items = seen.items_streamed
        attempt, text = items.pop(event.item, (0, ""))
        if attempt != event.attempt:
            text = ""  # a retry of the item: a new text
        items[event.item] = (event.attempt, (text + event.text)[-_STREAM_KEPT:])
        while len(items) > _STREAMING_ITEMS_KEPT:
            del items[next(iter(items))]
        return
    if event.attempt != seen.streamed_attempt:
        seen.streamed, seen.streamed_attempt = "", event.attempt
    if isinstance(event, events.StepStreamed):
        seen.streamed = (seen.streamed + event.text)[-_STREAM_KEPT:]


class _Saver:
    """The run's ``checkpoint_fn``: the store, telling when the first checkpoint is saved."""

    def __init__(self, store: Any, started: threading.Event) -> None:
        self.store = store
        self.started = started
        claim = getattr(store, "claim", None)
        if callable(claim):
            self.claim = claim  # the runner claims a checkpoint_fn that has one

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.store(checkpoint)
        self.started.set()


@dataclass(slots=True)
class _Resume:
    """One resume: its thread, the loop and task to cancel, why it was refused."""

    page_id: str
    started: threading.Event = field(default_factory=threading.Event)
    refusal: str | None = None
    loop: asyncio.AbstractEventLoop | None = None
    task: asyncio.Task[Any] | None = None
    thread: threading.Thread | None = None


class Resumer:
    """Resumes runs with the answers given on the page, one resume per run at a time."""

    def __init__(
        self,
        source: Source,
        workflow: Workflow,
        context: dict[str, Any],
        tracker: Tracker,
        flags: RunFlags | None = None,
    ) -> None:
        """Resume runs of ``source`` with ``workflow``, the initial ``context`` and ``flags``."""
        self._source = source
        self._workflow = workflow
        self._context = context
        self._tracker = tracker
        self._flags = RunFlags() if flags is None else flags
        self._lock = threading.Lock()
        self._active: dict[str, _Resume] = {}
        # The text its runs stream, kept in the location for pages of other servers and
        # for this one's pages of sub-workflows (its events say the run's own steps).
        self._streams = stream_publisher(source.location, "serve")

    def busy(self, page_id: str) -> bool:
        """Whether this server is resuming ``page_id`` now."""
        with self._lock:
            return page_id in self._active

    def answer(self, page_id: str, path: str, value: object) -> str | None:
        """Resume ``page_id`` answering ``path`` with ``value``.

        Returns None once the run has saved the answer and goes on in its thread,
        or the message saying why nothing ran.
        """
        resume = _Resume(page_id)
        with self._lock:
            if page_id in self._active:
                return (
                    "this run is being resumed already, with an answer given from another "
                    "tab: nothing ran for this one"
                )
            self._active[page_id] = resume
        resume.thread = threading.Thread(
            target=self._run, args=(resume, path, value), name=f"resume {page_id}", daemon=True
        )
        resume.thread.start()
        if not resume.started.wait(_STARTED_WITHIN):
            return None  # still checking the answer: the page follows what happens
        return resume.refusal

    def stop(self) -> None:
        """Cancel every resume in progress and wait for each to save what completed."""
        with self._lock:
            resumes = list(self._active.values())
        for resume in resumes:
            loop, task = resume.loop, resume.task
            if loop is not None and task is not None:
                with contextlib.suppress(RuntimeError):  # its loop has just closed
                    loop.call_soon_threadsafe(task.cancel)
        for resume in resumes:
            if resume.thread is not None:
                resume.thread.join()
        self._streams.close()  # its runs deleted their text as they ended: stops a thread left

    def _run(self, resume: _Resume, path: str, value: object) -> None:
        try:
            asyncio.run(self._resume(resume, path, value))
        except asyncio.CancelledError:
            say(f"run {resume.page_id!r}: stopped with the server; what completed is saved")
        except Exception as exc:  # noqa: BLE001 - reported on the page, or on stderr once started
            if resume.started.is_set():
                say(f"run {resume.page_id!r} stopped: {error_text(exc)}")
            else:
                resume.refusal = _refusal(exc, path)
        finally:
            with self._lock:
                self._active.pop(resume.page_id, None)
            resume.started.set()

    async def _resume(self, resume: _Resume, path: str, value: object) -> None:
        resume.loop = asyncio.get_running_loop()
        resume.task = asyncio.current_task()
        flags = self._flags
        store = self._source.open_store(history=flags.history)
        try:
            with self._source.reading() as reader:
                checkpoint = reader.load(resume.page_id)
            if checkpoint is None:
                resume.refusal = "the location holds no checkpoint of this run any more"
                return
            location = self._source.location
            run_id = resume.page_id if isinstance(location, DatabaseLocation) else None
            await self._workflow.run(
                self._context,
                checkpoint_fn=_Saver(store, resume.started),
                resume_from=checkpoint,
                answers={path: value},
                run_id=run_id,
                validate_json=True,
                on_event=[
                    self._tracker.listener(resume.page_id, checkpoint.run_id),
                    *flags.listeners,
                    self._streams,
                ],
                checkpoint_every="step",
                **flags.options,
            )
        finally:
            close_store(store)


def _refusal(error: Exception, path: str) -> str:
    """Why a resume ended before it saved anything: the page's message."""
    from executionkit._errors import RunClaimedError, StaleCheckpointError  # noqa: PLC0415

    if isinstance(error, RunClaimedError):
        owner = "another process" if error.owner is None else error.owner.describe()
        return (
            f"the run is owned by {owner}, which is running it now (answered from another "
            f"tab or process): nothing ran for this answer"
        )
    if isinstance(error, StaleCheckpointError):
        return (
            "the run moved on since this page loaded it (another process saved it): nothing "
            "ran; reload the page"
        )
    notes = getattr(error, "__notes__", ())
    if any("refused the answer" in note for note in notes):
        return f"the check of {path} refused the answer: {error_text(error)}; nothing was saved"
    return f"{error_text(error)}; nothing ran"
