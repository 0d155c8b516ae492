"""Streamed text kept in a store, for a page in another process: `StreamPublisher`.

What a running step streams (`StepContext.stream`, the `StepStreamed` events)
reaches the listeners of its own process only. `StreamPublisher` is an
``on_event`` listener that keeps the latest text of each running attempt in a
store's inbox (`RunInbox.put_streams`), so that ``executionkit serve`` or any
reader of the store elsewhere can show it while the step runs. It only reads
events; it never touches the runner.

It writes from a daemon thread of its own, through a store it opens itself
(SQLite and psycopg connections are not shared across threads), at most
every ``every`` seconds: a model streaming a hundred tokens a second costs
ten writes a second, not a hundred. The thread starts with the first piece
streamed and ends once no run that streamed is running; a run's end waits
(on the loop, never blocking it) until its entries are deleted and, when it
was the last, until the thread is gone. A write that fails is logged and
tried again; the run never notices.

`StreamBuffer` is what it keeps between writes: plain code, with no thread
and no clock of its own, driven by explicit times in its tests.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from executionkit._paths import join_path
from executionkit.events import (
    Event,
    ItemFailed,
    ItemFinished,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuspended,
    StepFailed,
    StepFinished,
    StepRetried,
    StepStreamed,
)
from executionkit.stores._inbox import STREAM_KEPT, RunInbox, StreamKey

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Coroutine

LOG = logging.getLogger("executionkit")

_END_WAIT = 5.0  # seconds a run's end waits for its streamed text to be deleted
_ENDED_KEPT = 4096  # ended runs remembered, to ignore their late pieces
_CLOSE_WAIT = 10.0  # seconds `StreamPublisher.close` waits for its thread


@dataclass(slots=True)
class _Text:
    """The text one attempt streamed so far, as pieces joined when written."""

    attempt: int
    pieces: list[str] = field(default_factory=list)
    size: int = 0

    def add(self, piece: str) -> None:
        """Append ``piece``; past twice what is kept, fold the pieces into the kept tail."""
        self.pieces.append(piece)
        self.size += len(piece)
        if self.size > 2 * STREAM_KEPT:
            self.value()

    def value(self) -> str:
        """The latest `STREAM_KEPT` characters, kept as the one piece from now on."""
        text = "".join(self.pieces)[-STREAM_KEPT:]
        self.pieces, self.size = [text], len(text)
        return text


@dataclass(slots=True)
class _RunStreams:
    """What is kept of one run's streams between writes (its sub-workflows' included)."""

    texts: dict[StreamKey, _Text] = field(default_factory=dict)
    dirty: set[StreamKey] = field(default_factory=set)  # changed since the last write
    stored: set[StreamKey] = field(default_factory=set)  # entries the store holds, by us
    gone: set[StreamKey] = field(default_factory=set)  # entries to delete at the next write
    # The highest attempt of each key that ended (inf: the step or item ended for good):
    # a piece of it arriving late, from a thread its step left running, is ignored.
    closed: dict[StreamKey, float] = field(default_factory=dict)
    done_steps: set[str] = field(default_factory=set)  # step paths that ended for good
    fresh: bool = True  # never written: the first write replaces what the store holds
    ended: bool = False  # the run ended: its next write deletes every entry of it

    @property
    def pending(self) -> bool:
        """Whether the next write has anything to do for this run."""
        return bool(self.dirty or self.gone or self.ended)

    def piece(self, key: StreamKey, attempt: int, text: str) -> bool:
        """Add a streamed piece; whether it was taken (a late one of an ended attempt is not)."""
        if key[0] in self.done_steps or attempt <= self.closed.get(key, 0):
            return False
        kept = self.texts.get(key)
        if kept is None or attempt > kept.attempt:
            kept = self.texts[key] = _Text(attempt)  # a retry starts a fresh text
        elif attempt < kept.attempt:
            return False
        kept.add(text)
        self.dirty.add(key)
        self.gone.discard(key)
        return True

    def end(self, key: StreamKey, attempt: float) -> None:
        """The attempt ``attempt`` of ``key`` ended (inf: the step or item ended for good)."""
        if attempt == math.inf and key not in self.texts and key not in self.closed:
            return  # never streamed: nothing to remember for an item that will not run again
        self.closed[key] = max(attempt, self.closed.get(key, 0))
        self._forget(key)

    def end_step(self, path: str) -> None:
        """The step at ``path`` ended for good: every item of it too."""
        self.done_steps.add(path)
        for key in [*self.texts, *self.stored, *self.closed]:
            if key[0] == path:
                self.closed.pop(key, None)  # done_steps covers it from now on
                self._forget(key)

    def end_below(self, prefix: str) -> None:
        """The sub-workflow whose steps' paths start with ``prefix`` ended."""
        for key in [*self.texts, *self.stored]:
            if key[0].startswith(prefix):
                self._forget(key)

    def start_below(self, prefix: str) -> None:
        """The sub-workflow at ``prefix`` starts (again: a retry of its step): forget its ends."""
        self.done_steps = {path for path in self.done_steps if not path.startswith(prefix)}
        self.closed = {key: n for key, n in self.closed.items() if not key[0].startswith(prefix)}

    def _forget(self, key: StreamKey) -> None:
        """Drop the text of ``key``; its entry is deleted at the next write if it was written."""
        self.texts.pop(key, None)
        self.dirty.discard(key)
        if key in self.stored:
            self.gone.add(key)


@dataclass(frozen=True, slots=True)
class StreamWrite:
    """One write of a run's streamed text: what `RunInbox.put_streams` is given."""

    run_id: str
    texts: dict[StreamKey, tuple[int, str]]
    ended: tuple[StreamKey, ...]
    replace_all: bool
    last: bool  # the run ended: this write deletes its entries, and it is forgotten


_ENDS_ATTEMPT = (StepRetried, ItemFinished, ItemFailed, StepFinished, StepFailed)


class StreamBuffer:
    """The streamed text of runs between writes, by run; decides when the next write is due.

    Plain code: no thread, no clock (every call that needs the time is given
    it). Keyed by the run a store holds: a sub-workflow's pieces (run id
    ``parent/step``) are its parent run's, under the step's path
    (``step/inner``), as question paths are written.
    """

    def __init__(self, every: float) -> None:
        """Allow one write every ``every`` seconds (a run's end is written at once)."""
        self.every = every
        self._runs: dict[str, _RunStreams] = {}  # by the run a store holds
        self._where: dict[str, tuple[str, str]] = {}  # run id -> (stored run, path prefix)
        self._last = -math.inf  # when the last write was taken
        self._urgent = False  # a run ended: write at once
        # Runs that ended, the latest last: a piece of theirs arriving later (from a thread
        # a timed-out attempt left running, on a loop that goes on, as a worker's) is
        # ignored until the run starts again.
        self._ended: dict[str, None] = {}

    @property
    def idle(self) -> bool:
        """Whether no run that streamed is going on, and nothing waits to be written."""
        return not self._runs

    def note(self, event: Event) -> bool:
        """Take ``event`` in; whether it ended a run whose entries are to be deleted."""
        if isinstance(event, StepStreamed):
            self._piece(event)
        elif isinstance(event, RunStarted):
            self._started(event)
        elif isinstance(event, (RunFinished, RunFailed, RunSuspended)):
            return self._run_ended(event.run_id)
        elif isinstance(event, _ENDS_ATTEMPT):
            self._attempt_ended(event)
        return False

    def due(self, now: float) -> float | None:
        """Seconds until the next write may be taken (0.0: now); None if nothing waits."""
        if not any(streams.pending for streams in self._runs.values()):
            return None
        if self._urgent:
            return 0.0
        return max(0.0, self._last + self.every - now)

    def end_all(self) -> None:
        """End every run: their next writes delete their entries (the publisher is closing)."""
        for run_id in [*self._where, *self._runs]:
            self._note_ended(run_id)
        for streams in self._runs.values():
            streams.ended = True
        self._where.clear()
        self._urgent = True

    def take(self, now: float) -> list[StreamWrite]:
        """What to write now, one `StreamWrite` per run with changes; ended runs are forgotten."""
        writes: list[StreamWrite] = []
        for run_id, streams in list(self._runs.items()):
            if not streams.pending:
                continue
            if streams.ended:
                writes.append(StreamWrite(run_id, {}, (), replace_all=True, last=True))
                del self._runs[run_id]
                continue
            texts = {
                key: (streams.texts[key].attempt, streams.texts[key].value())
                for key in streams.dirty
            }
            ended = tuple(streams.gone)
            writes.append(StreamWrite(run_id, texts, ended, replace_all=streams.fresh, last=False))
            streams.stored = (set() if streams.fresh else streams.stored - streams.gone) | set(
                texts
            )
            streams.dirty.clear()
            streams.gone.clear()
            streams.fresh = False
        self._last, self._urgent = now, False
        return writes

    def failed(self, write: StreamWrite) -> None:
        """``write`` failed: the run's next write rewrites all it holds, replacing the store's."""
        streams = self._runs.get(write.run_id)
        if streams is None or write.last:
            return  # an ended run: what it left stays until the run runs again, or is deleted
        streams.fresh = True
        streams.dirty = set(streams.texts)
        streams.gone = streams.stored - streams.dirty  # pending, even with no text left

    def _piece(self, event: StepStreamed) -> None:
        """Add a streamed piece to its run's text (not one of a run that ended)."""
        if event.run_id in self._ended:
            return
        run_id, prefix = self._place(event.run_id)
        streams = self._runs.get(run_id)
        if streams is None:
            streams = self._runs[run_id] = _RunStreams()
        streams.piece((prefix + join_path(event.step), event.item), event.attempt, event.text)

    def _attempt_ended(
        self, event: StepRetried | ItemFinished | ItemFailed | StepFinished | StepFailed
    ) -> None:
        """An attempt, an item or a step ended: its text goes."""
        run_id, prefix = self._place(event.run_id)
        streams = self._runs.get(run_id)
        if streams is None:
            return  # a run that never streamed: nothing to do
        path = prefix + join_path(event.step)
        if isinstance(event, StepRetried):
            streams.end((path, event.item), event.attempt)
        elif isinstance(event, (ItemFinished, ItemFailed)):
            streams.end((path, event.item), math.inf)
        else:
            streams.end_step(path)

    def _place(self, run_id: str) -> tuple[str, str]:
        """The run a store holds for ``run_id``, and the path prefix of its steps there."""
        return self._where.get(run_id, (run_id, ""))

    def _started(self, event: RunStarted) -> None:
        """Place the run: a top run is its own; a sub-workflow's is its parent's, by path."""
        self._ended.pop(event.run_id, None)
        if event.parent is None:
            self._where[event.run_id] = (event.run_id, "")
            return
        parent, step, key = event.parent
        run_id, prefix = self._place(parent)
        own = join_path(step) if key is None else join_path(step, key)
        self._where[event.run_id] = (run_id, f"{prefix}{own}/")
        streams = self._runs.get(run_id)
        if streams is not None:
            streams.start_below(f"{prefix}{own}/")

    def _run_ended(self, ended: str) -> bool:
        """Delete what the run ``ended`` streamed; whether it was a top run that streamed."""
        self._note_ended(ended)
        run_id, prefix = self._where.pop(ended, (ended, ""))
        streams = self._runs.get(run_id)
        if prefix:  # a sub-workflow's run: its steps are its parent's, by path
            if streams is not None:
                streams.end_below(prefix)
            return False
        for other in [name for name, (held, _) in self._where.items() if held == run_id]:
            del self._where[other]
            self._note_ended(other)
        if streams is None:
            return False
        streams.ended = self._urgent = True
        return True

    def _note_ended(self, run_id: str) -> None:
        """Remember that ``run_id`` ended (the latest `_ENDED_KEPT` runs are remembered)."""
        self._ended.pop(run_id, None)
        self._ended[run_id] = None
        if len(self._ended) > _ENDED_KEPT:
            del self._ended[next(iter(self._ended))]


class _Writer:
    """One thread writing for a `StreamPublisher`, and the run ends waiting for its writes."""

    def __init__(self) -> None:
        """No thread yet (`StreamPublisher._start` makes it), nothing taken, nobody waiting."""
        self.thread: threading.Thread | None = None
        self.taken = 0  # writes taken from the buffer so far
        self.waiting: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[bool]]] = []

    def release(self, written: int, *, ended: bool) -> None:
        """Wake the run ends waiting for write ``written`` or earlier (all, if ``ended``)."""
        kept = []
        for waited, loop, future in self.waiting:
            if ended or waited <= written:
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    loop.call_soon_threadsafe(_settle, future, ended)
            else:
                kept.append((waited, loop, future))
        self.waiting = kept


def _settle(future: asyncio.Future[bool], ended: bool) -> None:
    """Resolve ``future`` (on its loop) with whether the thread ended, unless it is done."""
    if not future.done():
        future.set_result(ended)


class StreamPublisher:
    """An ``on_event`` listener keeping the text running steps stream in a store, for pages.

    Each running attempt's text so far (its latest 65,536 characters) is
    kept in the store's inbox by ``(step path, item)``, where
    ``store.inbox.streams(run_id)`` reads it in any process; its entry goes
    when the attempt ends, and a retry starts a fresh text. A sub-workflow's
    steps are kept under the run the store holds, by path (``sub/inner``).
    ``executionkit run --checkpoint`` and ``executionkit worker`` attach one
    for their location; attach one to your own runs with
    ``run(on_event=StreamPublisher(lambda: SQLiteStore("runs.db")))``.

    Writes come from a daemon thread of its own, through a store it opens
    with ``open_store`` there (and closes when it stops), at most one batch
    every ``every`` seconds. A failing write is logged on the
    ``executionkit`` logger and tried again; it never reaches the run. One
    publisher may serve any number of runs at once.

    Args:
        open_store: Opens a new store to write to: called in the thread,
            whose calls its connection then serves alone.
        every: Seconds at least between two writes (0: as fast as the store
            takes them).

    Raises:
        TypeError: If ``open_store`` is not callable or ``every`` not a number.
        ValueError: If ``every`` is negative or not finite.
    """

    def __init__(self, open_store: Callable[[], object], *, every: float = 0.1) -> None:
        """Keep streamed text in the stores ``open_store`` opens, a write every ``every`` s."""
        opener: object = open_store
        if not callable(opener):
            msg = f"StreamPublisher: open_store must be callable, got {type(opener).__name__}"
            raise TypeError(msg)
        given: object = every
        if isinstance(given, bool) or not isinstance(given, (int, float)):
            msg = f"StreamPublisher: every must be a number of seconds, got {type(every).__name__}"
            raise TypeError(msg)
        if not 0 <= every < math.inf:
            msg = (
                f"StreamPublisher: every must be a finite number of seconds, 0 or more, "
                f"got {every!r}"
            )
            raise ValueError(msg)
        self._open = open_store
        self._buffer = StreamBuffer(float(every))
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._writer: _Writer | None = None
        self._failing = False  # the last write failed: later failures are logged briefly

    def __repr__(self) -> str:
        """Name the store opener."""
        return f"StreamPublisher({self._open!r}, every={self._buffer.every!r})"

    def __call__(self, event: Event) -> Coroutine[None, None, None] | None:
        """Take ``event`` in; at the end of a run that streamed, a wait until its text is gone."""
        with self._lock:
            ended = self._buffer.note(event)
            writer = self._writer
            if writer is None:
                if self._buffer.due(0.0) is None:
                    return None  # nothing to write: no thread needed
                writer = self._writer = self._start()
            self._wake.notify()
            if not ended:
                return None
            import asyncio  # noqa: PLC0415 - loaded by the run; `executionkit.stores` stays light

            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return None  # called outside a run's loop: nobody to wait
            future: asyncio.Future[bool] = loop.create_future()
            writer.waiting.append((writer.taken + 1, loop, future))
        return self._until_written(writer, future)

    def close(self) -> None:
        """End every run it holds (their entries deleted), write, and stop its thread.

        Runs end by themselves; this is for a program that stops watching runs
        still going on. It waits for the thread (10 s at most): call it from a
        thread, never on a running event loop. A piece streamed later starts
        it again.
        """
        with self._lock:
            writer = self._writer
            self._buffer.end_all()
            self._wake.notify()
        if writer is not None and writer.thread is not None:
            writer.thread.join(_CLOSE_WAIT)

    # --- the thread ------------------------------------------------------------------------

    def _start(self) -> _Writer:
        """A new writer and its thread, started (holding the lock)."""
        writer = _Writer()
        writer.thread = threading.Thread(
            target=self._serve, args=(writer,), name="executionkit streams", daemon=True
        )
        writer.thread.start()
        return writer

    def _serve(self, writer: _Writer) -> None:
        """Write what is due, batch after batch, until no run that streamed goes on."""
        store: object = None
        try:
            while True:
                with self._lock:
                    writes = self._next()
                    if writes is None:
                        break
                    writer.taken += 1
                store = self._write(store, writes)
                with self._lock:
                    if self._buffer.idle:
                        self._writer = None  # a piece streamed from now on starts a new thread
                        break  # the run ends waiting are released once the store is closed
                    writer.release(writer.taken, ended=False)
        finally:
            self._close(store)
            with self._lock:
                if self._writer is writer:
                    self._writer = None
                writer.release(writer.taken, ended=True)

    def _next(self) -> list[StreamWrite] | None:
        """Wait (holding the lock) until a write is due; None once no run is left."""
        buffer = self._buffer
        while True:
            if buffer.idle:
                self._writer = None  # a piece streamed from now on starts a new thread
                return None
            delay = buffer.due(time.monotonic())
            if delay == 0.0:
                return buffer.take(time.monotonic())
            self._wake.wait(delay)  # None: until an event arrives

    def _write(self, store: object, writes: list[StreamWrite]) -> object:
        """Write each run's text; a failure is logged and its run rewritten next time."""
        for write in writes:
            try:
                if store is None:
                    store = self._open()
                inbox = getattr(store, "inbox", None)
                if not isinstance(inbox, RunInbox):
                    msg = f"{store!r} has no inbox (a RunInbox) to keep streamed text in"
                    raise TypeError(msg)  # noqa: TRY301 - logged with the store's own failures
                inbox.put_streams(
                    write.run_id, write.texts, ended=write.ended, replace_all=write.replace_all
                )
            except Exception as exc:  # noqa: BLE001 - a stream write never fails a run
                self._failed(store, write, exc)
                self._close(store)
                store = None  # opened anew at the next write: a broken connection heals
            else:
                self._failing = False
        return store

    def _failed(self, store: object, write: StreamWrite, error: Exception) -> None:
        """Log a failed write (the first of a streak in full) and have it rewritten."""
        with self._lock:
            self._buffer.failed(write)
        where = self._open if store is None else store
        if self._failing:
            LOG.debug("executionkit: could not keep streamed text in %r", where, exc_info=error)
            return
        self._failing = True
        LOG.warning(
            "executionkit: could not keep the streamed text of run %r in %r; the run goes on, "
            "and the text is written again at the next write (later failures are logged at "
            "debug level)",
            write.run_id,
            where,
            exc_info=error,
        )

    @staticmethod
    def _close(store: object) -> None:
        """Close ``store`` if it holds anything open; a failure to close is logged only."""
        close = getattr(store, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # the thread goes on, or ends, either way
                LOG.debug("executionkit: closing %r failed", store, exc_info=True)

    async def _until_written(self, writer: _Writer, future: asyncio.Future[bool]) -> None:
        """Wait until the ended run's entries are deleted; then, if the thread ended, join it."""
        import asyncio  # noqa: PLC0415 - loaded by the run; `executionkit.stores` stays light

        done, _ = await asyncio.wait((future,), timeout=_END_WAIT)
        if not done:
            LOG.warning(
                "executionkit: the streamed text of a run was not deleted within %g s; the "
                "run ends anyway and the text goes at the next write",
                _END_WAIT,
            )
            return
        thread = writer.thread
        if future.result() and thread is not None:
            # The thread released this wait as its last act: joining returns at once.
            thread.join(_END_WAIT)
