"""Handing checkpoints to the caller's `checkpoint_fn`, one write at a time.

The `Checkpointer` is the only caller of ``checkpoint_fn``. Calls never
overlap; changes made while one is running are folded into the next. An async
write that is under way when the run is cancelled is awaited to its end, so a
checkpoint is never half taken. A failing ``checkpoint_fn`` is annotated with
what it was saving, and every later save raises the same error.

What cannot wait for the next batch is saved soon (`Checkpointer.save_soon`,
`Checkpointer.save_later`): a step's in-step progress (through `StepHost`), map
items, a child's checkpoints, the usage of a failed attempt. A saver task takes
checkpoints until everything waiting for one has been served.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

from executionkit._run._aio import wait_through
from executionkit.events import CheckpointTaken

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Callable

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._options import CheckpointFn
    from executionkit._record._snapshots import Snapshots
    from executionkit._run._announcer import Announcer


def retrieve(future: asyncio.Future[None]) -> None:
    """Read a future's outcome, so that asyncio never logs it as never retrieved."""
    # A sync step may never await its save_progress future; reading the outcome here
    # keeps asyncio from logging "exception was never retrieved" for it.
    if not future.cancelled():
        future.exception()


class Checkpointer:
    """Takes checkpoints of a `Record` (`Snapshots.take`) and hands them to ``checkpoint_fn``."""

    def __init__(
        self,
        snapshots: Snapshots,
        checkpoint_fn: CheckpointFn | None,
        announcer: Announcer,
        caller_context: contextvars.Context,
        on_failure: Callable[[], None],
    ) -> None:
        """Serve ``checkpoint_fn`` (None: checkpoints are only taken in memory).

        ``on_failure`` is called once ``checkpoint_fn`` has raised: nothing the
        run does from then on can be saved, so the run stops its steps.
        """
        self._record = snapshots.record
        self._snapshots = snapshots
        self._fn = checkpoint_fn
        self._announcer = announcer
        self._caller_context = caller_context
        self._on_failure = on_failure
        self.storage_error: Exception | None = None
        # The turn to call checkpoint_fn: `_writing` while someone holds it, and the
        # futures of those waiting for it, in order.
        self._writing = False
        self._turns: list[asyncio.Future[None]] = []
        # Steps waiting for their progress to be saved: (change count, future).
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._saver: asyncio.Task[None] | None = None
        # The change count the saver checkpoints up to for those that wait on no future.
        self._wanted = 0
        # Whether the run has ended: nothing is saved any more (a thread it abandoned
        # may still ask for a save).
        self.closed = False

    @property
    def active(self) -> bool:
        """Whether checkpoints are handed to a ``checkpoint_fn`` at all."""
        return self._fn is not None

    async def save(self) -> None:
        """Take a checkpoint if anything changed since the last one was handed over.

        Raises what ``checkpoint_fn`` raised (now or at an earlier save). A
        cancellation that arrives while an async ``checkpoint_fn`` is writing
        lets the write finish first, then propagates.
        """
        fn = self._fn
        if fn is None:
            return  # nothing to hand over; Snapshots.latest() builds one if the run ends early
        if self._writing:
            await self._take_turn()
        else:
            # A mutex without an await on the free path: checkpoints follow every
            # batch, and asyncio.Lock would cost a coroutine each time.
            self._writing = True
        try:
            write = self._hand_over(fn)
            if write is not None:
                await self._finish_write(*write)
        finally:
            self._writing = False
            if self._turns:
                self._pass_turn()

    @property
    def saves(self) -> bool:
        """Whether `save_through` would save (else it returns ``(False, None)`` at once)."""
        return self._fn is not None and self.storage_error is None

    @property
    def behind(self) -> bool:
        """Whether something changed since the last checkpoint, or a write is under way.

        Without either, `save_through` would take no checkpoint, only await a task.
        """
        record = self._record
        return self._writing or record.changes != record.saved

    @property
    def unsettled(self) -> bool:
        """Whether `settle` has anything to wait for or cancel (else it returns False)."""
        return self._saver is not None or bool(self._waiters)

    async def save_through(self) -> tuple[bool, Exception | None]:
        """`save`, awaited to its end whatever cancellations arrive meanwhile.

        Returns whether this task was cancelled while saving, and what the save
        raised (other than that cancellation).
        """
        if self._fn is None or self.storage_error is not None:
            return False, None
        saving = asyncio.ensure_future(self.save())
        cancelled = await wait_through(saving)
        if saving.cancelled():
            return True, None
        error = saving.exception()
        if isinstance(error, asyncio.CancelledError):
            return True, None
        if error is not None and not isinstance(error, Exception):
            raise error  # KeyboardInterrupt or SystemExit from checkpoint_fn itself
        return cancelled, error

    async def _take_turn(self) -> None:
        """Wait until nobody else is calling checkpoint_fn, then hold the turn."""
        loop = asyncio.get_running_loop()
        while self._writing:
            turn: asyncio.Future[None] = loop.create_future()
            self._turns.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._pass_turn()  # handed the turn, but cancelled before taking it
                elif turn in self._turns:
                    self._turns.remove(turn)
                raise
        self._writing = True

    def _pass_turn(self) -> None:
        """Wake the first waiter still waiting for the turn."""
        while self._turns:
            turn = self._turns.pop(0)
            if not turn.done():
                turn.set_result(None)
                return

    def _hand_over(
        self, fn: CheckpointFn
    ) -> tuple[asyncio.Future[Any], WorkflowCheckpoint, int] | None:
        """Take a checkpoint and call ``fn``; return the write still to await."""
        if self.storage_error is not None:
            raise self.storage_error
        record = self._record
        if record.changes == record.saved:
            return None
        covered = record.changes
        checkpoint = self._snapshots.take()
        try:
            pending = fn(checkpoint)
        except Exception as exc:
            self._failed(exc, checkpoint)
            raise
        if pending is not None and inspect.isawaitable(pending):
            return asyncio.ensure_future(pending), checkpoint, covered
        self._saved(covered, checkpoint)
        return None

    async def _finish_write(
        self, write: asyncio.Future[Any], checkpoint: WorkflowCheckpoint, covered: int
    ) -> None:
        """Await an async checkpoint_fn; a cancellation meanwhile lets it finish first."""
        cancelled = await wait_through(write)
        try:
            write.result()
        except Exception as exc:
            self._failed(exc, checkpoint)
            if cancelled:
                raise asyncio.CancelledError from exc
            raise
        self._saved(covered, checkpoint)
        if cancelled:
            raise asyncio.CancelledError

    def _saved(self, covered: int, checkpoint: WorkflowCheckpoint) -> None:
        self._record.saved = covered
        if self._waiters:
            self._resolve_waiters(None)
        if self._announcer.observed:
            self._announcer.emit(
                CheckpointTaken(
                    self._record.run_id,
                    checkpoint.seq,
                    checkpoint.step_index,
                    checkpoint.new_outputs,
                    self._record.priced(),
                )
            )

    def _failed(self, exc: Exception, checkpoint: WorkflowCheckpoint) -> None:
        unsaved = ", ".join(repr(name) for name in checkpoint.new_outputs)
        what = f"; the outputs of {unsaved} it newly records are not saved" if unsaved else ""
        exc.add_note(
            f"executionkit: checkpoint_fn raised while saving checkpoint seq={checkpoint.seq} "
            f"(step_index={checkpoint.step_index}){what}; no further step was started"
        )
        failures = self._record.failures
        if failures:
            names = self._record.graph.names
            failed = "; ".join(
                f"{names[p]!r}: {type(e).__name__}: {e}" for p, e in sorted(failures.items())
            )
            exc.add_note(f"executionkit: the checkpoint recorded these step failures: {failed}")
        self.storage_error = exc
        self._resolve_waiters(exc)
        self._on_failure()

    def save_soon(
        self, loop: asyncio.AbstractEventLoop, target: int | None = None
    ) -> asyncio.Future[None]:
        """Have the record checkpointed up to change ``target`` (default: now), soon.

        Returns a future that resolves once it is. Changes made while a
        checkpoint is being written are folded into the next one. Once
        ``checkpoint_fn`` has failed, nothing more can be saved: the future
        holds that error at once (a sub-workflow waiting on it stops, rather
        than waiting for a save that will never come).
        """
        if target is None:
            target = self._record.changes
        future: asyncio.Future[None] = loop.create_future()
        future.add_done_callback(retrieve)
        if self.closed:
            future.cancel()  # the run has ended: its last checkpoint was taken
            return future
        if self._fn is None:
            future.set_result(None)
            return future
        if self.storage_error is not None:
            future.set_exception(self.storage_error)
            return future
        self._waiters.append((target, future))
        if self._saver is None or self._saver.done():
            # Run the saver in the run's own context, not the saving step's, so that
            # checkpoint_fn never finds itself "inside" a step.
            self._saver = loop.create_task(self._serve_waiters(), context=self._caller_context)
        return future

    def save_later(self) -> None:
        """Have the record checkpointed up to now, soon; with no future to wait on.

        `save_soon` for those that do not wait (a map's items, one call each):
        no future per call. Changes made meanwhile are folded into one checkpoint.
        """
        if self._fn is None or self.closed:
            return
        self._wanted = self._record.changes
        if self._saver is None or self._saver.done():
            self._saver = asyncio.get_running_loop().create_task(
                self._serve_waiters(), context=self._caller_context
            )

    async def _serve_waiters(self) -> None:
        # Keep checkpointing while some step waits for its progress to be saved (or
        # items are not saved yet); values saved while a checkpoint_fn call is
        # running are folded into the next one.
        record = self._record
        while (self._waiters or self._wanted > record.saved) and self.storage_error is None:
            try:
                await self.save()
            except Exception:  # noqa: BLE001 - waiters got it; the run's next save raises it
                break
        if self.storage_error is not None and self._waiters:
            self._resolve_waiters(self.storage_error)  # none of them can be saved now

    def _resolve_waiters(self, error: Exception | None) -> None:
        keep: list[tuple[int, asyncio.Future[None]]] = []
        saved = self._record.saved
        for target, future in self._waiters:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            elif target <= saved:
                future.set_result(None)
            else:
                keep.append((target, future))
        self._waiters = keep

    def close(self) -> None:
        """The run has ended: from now on nothing is saved, and nothing asks to be."""
        self.closed = True

    async def settle(self) -> bool:
        """Leave nothing behind: the saver finishes, unresolved waiters are cancelled.

        Returns whether this task was cancelled while waiting for the saver.
        """
        cancelled = False
        if self._saver is not None:
            cancelled = await wait_through(self._saver)
        for _, future in self._waiters:
            future.cancel()
        self._waiters.clear()
        return cancelled
