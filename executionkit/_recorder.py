"""Recording what a run did, and handing it over as checkpoints.

`Recorder` is the half of a run that owns its record: the outputs that landed,
token usage, failures and saved progress, the checkpoints taken from them (one
at a time, each O(1) to take), and the progress saver that steps use through
`StepContext`. `executionkit._runner.Run` adds the half that runs steps.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint import SharedFields, WorkflowCheckpoint, trusted_checkpoint
from executionkit._errors import BudgetExceeded, WorkflowFailed
from executionkit._plain import plain_copy
from executionkit._resume import Restored, restore
from executionkit._snapshot import OutputLog
from executionkit._types import PatternResult, TokenUsage
from executionkit.events import CheckpointTaken, Event, StepFailed, StepFinished, StepStarted

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._graph import Graph
    from executionkit._options import CheckpointFn, RunOptions

EMPTY: MappingProxyType[str, Any] = MappingProxyType({})
LOG = logging.getLogger("executionkit")
_ZERO = TokenUsage()


async def wait_through(future: asyncio.Future[Any]) -> bool:
    """Wait until ``future`` is done even if this task is cancelled meanwhile.

    Returns whether a cancellation arrived while waiting; the caller decides when
    to let it out. ``future``'s own outcome is left for the caller to read.
    """
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


def reached(usage: TokenUsage, budget: TokenUsage | None) -> bool:
    """Whether ``usage`` reached any non-zero limit of ``budget``."""
    if budget is None:
        return False
    return any(
        limit and used >= limit
        for used, limit in (
            (usage.input_tokens, budget.input_tokens),
            (usage.output_tokens, budget.output_tokens),
            (usage.llm_calls, budget.llm_calls),
        )
    )


def _retrieve(future: asyncio.Future[None]) -> None:
    # A sync step may never await its save_progress future; reading the outcome here
    # keeps asyncio from logging "exception was never retrieved" for it.
    if not future.cancelled():
        future.exception()


class Recorder:
    """The record of one run: what landed, what it cost, and its checkpoints."""

    def __init__(self, graph: Graph, options: RunOptions) -> None:
        """Restore ``options.resume_from`` (checked against ``graph``)."""
        self._graph = graph
        self._budget = options.budget
        self._on_error = options.on_error
        self._validate_json = options.validate_json
        self._checkpoint_fn = options.checkpoint_fn
        context = options.context
        if options.resume_from is None:
            state = Restored(
                {}, {}, {}, TokenUsage(), 0, options.run_id, options.metadata or EMPTY
            )
        else:
            state = restore(
                graph,
                options.resume_from,
                context,
                run_id=options.run_id,
                metadata=options.metadata,
                rerun=options.rerun,
                unknown_steps=options.unknown_steps,
            )
        # Live outputs feed ctx and the result; stored forms (after Step.encode) feed
        # checkpoints. Without codecs both hold the same objects.
        self._outputs = state.outputs
        self._log = OutputLog(state.stored)
        self._snapshot_length = len(self._log)
        self._reported: set[str] = set()
        self._progress = state.progress
        self._cost = state.cost
        self._seq = state.seq
        self._metadata = state.metadata
        self._invalidated = MappingProxyType(state.invalidated)
        self._discarded = state.discarded
        self._context = context
        self._context_keys = tuple(sorted(context))
        self._run_id = state.run_id if state.run_id is not None else _new_run_id()
        self._shared = SharedFields(
            self._log, graph.step_info, self._run_id, self._context_keys, self._metadata
        )
        self._skipped = tuple(name for name in graph.names if name in self._outputs)
        self._executed: list[str] = []
        self._last: WorkflowCheckpoint | None = options.resume_from
        # Failures of this run, by position; they stay in every later checkpoint's `errors`.
        self._failures: dict[int, Exception] = {}
        self._interrupt: BaseException | None = None
        # Outputs that landed since the last merge, merged in declaration order:
        # position -> (live output, stored form).
        self._landed: dict[int, tuple[Any, Any]] = {}
        # Checkpoint bookkeeping: every recorded change bumps `_changes`; a checkpoint
        # covers everything up to the `_changes` it saw.
        self._changes = 0
        self._saved = 0
        self._writing = False
        self._turns: list[asyncio.Future[None]] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._saver: asyncio.Task[None] | None = None
        self._storage_error: Exception | None = None
        self._caller_context = contextvars.copy_context()
        # Events: only looked at when someone listens (a callback, or debug logging).
        self._on_event = options.on_event
        self._observed = options.on_event is not None or LOG.isEnabledFor(logging.DEBUG)
        self._began: dict[int, float] = {}
        self._pending_events: list[Event | _Pending] = []
        self._announcer: asyncio.Task[None] | None = None
        self._event_failures = 0

    def _cancel_running(self) -> None:
        """Stop the steps still running (the runner's half)."""
        raise NotImplementedError

    # --- landing outputs ------------------------------------------------------------------

    def _landed_error(self, position: int, error: Exception) -> None:
        self._failures[position] = error
        self._changes += 1
        if self._observed:
            name = self._graph.names[position]
            self._emit(StepFailed(self._run_id, name, self._duration(position), error))
        if self._on_error == "cancel":
            self._cancel_running()

    def _landed_interrupt(self, error: BaseException) -> None:
        self._interrupt = self._interrupt or error
        self._cancel_running()

    def _landed_result(self, position: int, result: Any) -> None:
        cost = _ZERO
        if isinstance(result, PatternResult):
            cost = result.cost
            self._cost += cost  # spent, whether or not the output can be recorded
            result = result.value
        if self._validate_json or position in self._graph.encoded:
            try:
                stored = self._storable(position, result)
            except Exception as exc:  # noqa: BLE001 - an unrecordable output fails its step
                self._landed_error(position, exc)
                return
        else:
            stored = result
        self._landed[position] = (result, stored)
        if self._progress:
            self._progress.pop(self._graph.names[position], None)
        self._changes += 1
        if self._observed:
            name = self._graph.names[position]
            self._emit(StepFinished(self._run_id, name, self._duration(position), cost))

    # --- events ---------------------------------------------------------------------------

    def _began_step(self, position: int, attempt: int = 1) -> None:
        """Note that a step (attempt) started; only called when observed."""
        if attempt == 1:
            self._began[position] = time.perf_counter()
        self._emit(StepStarted(self._run_id, self._graph.names[position], attempt))

    def _duration(self, position: int) -> float:
        began = self._began.get(position)
        return 0.0 if began is None else time.perf_counter() - began

    def _emit(self, event: Event) -> None:
        """Log ``event`` at debug level and hand it to the on_event callback.

        A plain callback is called right away. A callback returning an awaitable
        (a coroutine function) is served by one task of the run, in order; run()
        waits for it before returning. Whatever the callback raises is logged and
        never reaches the run.
        """
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("%s", event)
        callback = self._on_event
        if callback is None:
            return
        if self._pending_events or self._announcer is not None:
            self._queue_event(event)
            return
        try:
            outcome = callback(event)
        except Exception as exc:  # noqa: BLE001 - a listener never breaks the run
            self._callback_failed(event, exc)
            return
        if inspect.isawaitable(outcome):
            self._queue_event(_Pending(event, outcome))

    def _callback_failed(self, event: object, error: Exception) -> None:
        """Report a failing on_event callback: the first time in full, then briefly."""
        self._event_failures += 1
        what = type(event).__name__
        if self._event_failures == 1:
            LOG.warning(
                "executionkit: the on_event callback raised on %s; the run goes on "
                "(later failures of this callback are logged at debug level)",
                what,
                exc_info=error,
            )
        else:
            LOG.debug("executionkit: the on_event callback raised on %s", what, exc_info=error)

    def _queue_event(self, item: Event | _Pending) -> None:
        self._pending_events.append(item)
        if self._announcer is None or self._announcer.done():
            self._announcer = asyncio.get_running_loop().create_task(
                self._announce(), context=self._caller_context
            )

    async def _announce(self) -> None:
        callback = self._on_event
        assert callback is not None  # noqa: S101 - only queued when there is one
        while self._pending_events:
            item = self._pending_events.pop(0)
            try:
                if isinstance(item, _Pending):
                    await item.awaitable
                    continue
                outcome = callback(item)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:  # noqa: BLE001 - a listener never breaks the run
                self._callback_failed(item.event if isinstance(item, _Pending) else item, exc)

    def _storable(self, position: int, output: Any) -> Any:
        """The form of ``output`` that goes into checkpoints, checked if asked to."""
        step = self._graph.steps[position]
        stored = output
        if step.encode is not None:
            try:
                stored = step.encode(output)
            except Exception as exc:
                exc.add_note(f"executionkit: encode of step {step.name!r} failed")
                raise
        if self._validate_json:
            # The checked copy is what gets recorded: later changes to the live object
            # (a dependent step mutating its ctx value) cannot reach a checkpoint.
            stored = plain_copy(stored, f"output of step {step.name!r}")
        return stored

    def _merge_landed(self) -> list[int]:
        """Move what landed into the record, in declaration order; return those positions."""
        landed = self._landed
        completed = sorted(landed)
        names = self._graph.names
        outputs = self._outputs
        record = self._log.append
        executed = self._executed.append
        for position in completed:
            name = names[position]
            live, stored = landed[position]
            outputs[name] = live
            record(name, stored)
            executed(name)
        landed.clear()
        return completed

    # --- checkpoints ----------------------------------------------------------------------

    async def _checkpoint_after_batch(self) -> None:
        if self._interrupt is None:
            try:
                await self._checkpoint()
            except asyncio.CancelledError as exc:
                self._interrupt = exc  # cancelled while checkpointing; finished below
            else:
                return
        # Interrupted: whatever is not checkpointed yet is checkpointed, awaited despite
        # further cancellations, and then the interrupt propagates unchanged.
        interrupt = self._interrupt
        saving = asyncio.ensure_future(self._checkpoint())
        await wait_through(saving)
        error = None if saving.cancelled() else saving.exception()
        if error is not None and error is not interrupt:
            interrupt.add_note(
                f"executionkit: the checkpoint taken on interruption failed: "
                f"{type(error).__name__}: {error}"
            )
        raise interrupt

    async def _checkpoint(self) -> None:
        """Take a checkpoint if anything changed since the last one; calls never overlap.

        A cancellation that arrives while an async ``checkpoint_fn`` is writing lets
        the write finish first, so a checkpoint is never half taken; it then
        propagates.
        """
        if self._checkpoint_fn is None:
            return  # nothing to hand over; _latest() builds one if the run ends early
        # A mutex without an await on the free path: checkpoints are taken after every
        # batch, and asyncio.Lock would cost a coroutine each time.
        while self._writing:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._turns.append(turn)
            await turn
        self._writing = True
        try:
            write = self._hand_over(self._checkpoint_fn)
            if write is not None:
                await self._finish_write(*write)
        finally:
            self._writing = False
            if self._turns:
                turn = self._turns.pop(0)
                if not turn.done():
                    turn.set_result(None)

    def _hand_over(
        self, checkpoint_fn: CheckpointFn
    ) -> tuple[asyncio.Future[Any], WorkflowCheckpoint, int] | None:
        """Take a checkpoint and call ``checkpoint_fn``; return the write still to await."""
        if self._storage_error is not None:
            raise self._storage_error
        if self._changes == self._saved:
            return None
        covered = self._changes
        checkpoint = self._snapshot()
        try:
            pending = checkpoint_fn(checkpoint)
        except Exception as exc:
            self._storage_failed(exc, checkpoint)
            raise
        if pending is not None and inspect.isawaitable(pending):
            return asyncio.ensure_future(pending), checkpoint, covered
        self._saved = covered
        if self._waiters:
            self._resolve_waiters(None)
        if self._observed:
            self._taken(checkpoint)
        return None

    def _taken(self, checkpoint: WorkflowCheckpoint) -> None:
        self._emit(
            CheckpointTaken(
                self._run_id, checkpoint.seq, checkpoint.step_index, checkpoint.new_outputs
            )
        )

    async def _finish_write(
        self, write: asyncio.Future[Any], checkpoint: WorkflowCheckpoint, covered: int
    ) -> None:
        """Await an async checkpoint_fn; a cancellation meanwhile lets it finish first."""
        cancelled = await wait_through(write)
        try:
            write.result()
        except Exception as exc:
            self._storage_failed(exc, checkpoint)
            if cancelled:
                raise asyncio.CancelledError from exc
            raise
        self._saved = covered
        self._resolve_waiters(None)
        if self._observed:
            self._taken(checkpoint)
        if cancelled:
            raise asyncio.CancelledError

    def _storage_failed(self, exc: Exception, checkpoint: WorkflowCheckpoint) -> None:
        self._annotate_storage_error(exc, checkpoint)
        self._storage_error = exc
        self._resolve_waiters(exc)

    def _annotate_storage_error(self, exc: Exception, checkpoint: WorkflowCheckpoint) -> None:
        exc.add_note(
            f"executionkit: checkpoint_fn raised while saving checkpoint seq={checkpoint.seq} "
            f"(step_index={checkpoint.step_index}); no further step was started"
        )
        if self._failures:
            failed = "; ".join(
                f"{self._graph.names[p]!r}: {type(e).__name__}: {e}"
                for p, e in sorted(self._failures.items())
            )
            exc.add_note(f"executionkit: the checkpoint recorded these step failures: {failed}")

    def _snapshot(self) -> WorkflowCheckpoint:
        self._seq += 1
        log = self._log
        since = self._snapshot_length
        length = self._snapshot_length = len(log.names)
        # Every other field is computed from these when first read (see
        # executionkit._checkpoint._Deferred): most checkpoints are stored or
        # dropped without anyone reading their views or timestamp.
        fields: dict[str, Any] = {
            "step_index": length,
            "cost": self._cost,
            "seq": self._seq,
            "_shared": self._shared,
            "_since": since,
            "_ns": time.time_ns(),
        }
        if self._failures:
            fields["errors"] = self._error_texts()
        if self._landed or self._progress or self._reported:
            self._describe_exactly(fields, since)
        checkpoint = trusted_checkpoint(fields)
        self._last = checkpoint
        return checkpoint

    def _describe_exactly(self, fields: dict[str, Any], since: int) -> None:
        """Fill in the fields a rare checkpoint cannot derive from the log alone.

        Mid-batch (a step saved progress), outputs that landed in this batch are
        not in the log yet, so the checkpoint gets a copy; steps holding progress
        are described in ``step_info`` too; and names a mid-batch checkpoint
        already announced as new are not announced again.
        """
        log = self._log
        info = self._graph.step_info
        outputs: Mapping[str, Any] = log.outputs(len(log.names))
        new = log.names_between(since, len(log.names))
        if self._landed:
            names = self._graph.names
            landed = sorted(self._landed)
            copied = dict(outputs)
            copied.update((names[p], self._landed[p][1]) for p in landed)
            outputs = MappingProxyType(copied)
            new += tuple(names[p] for p in landed)
        if self._reported:
            new = tuple(name for name in new if name not in self._reported)
        if self._landed:
            self._reported.update(new)
        else:
            self._reported.clear()
        described = {**outputs, **self._progress}
        fields["step_index"] = len(outputs)
        fields["outputs"] = outputs
        fields["step_info"] = MappingProxyType({name: info[name] for name in described})
        fields["new_outputs"] = new
        if self._progress:
            fields["progress"] = MappingProxyType(dict(self._progress))

    def _error_texts(self) -> Mapping[str, str]:
        names = self._graph.names
        return MappingProxyType(
            {names[p]: f"{type(e).__name__}: {e}" for p, e in sorted(self._failures.items())}
        )

    def _latest(self) -> WorkflowCheckpoint:
        """The checkpoint of everything recorded, taking one in memory if none is current."""
        if self._last is None or self._changes != self._saved:
            self._snapshot()
            self._saved = self._changes
        assert self._last is not None  # noqa: S101 - _snapshot sets it
        return self._last

    # --- in-step progress (the host side of StepContext) ----------------------------------

    def progress_of(self, name: str) -> Any:
        """Return the progress value ``name`` saved last, or None."""
        return self._progress.get(name)

    def save_progress(self, name: str, value: object) -> asyncio.Future[None]:
        """Record ``value`` for step ``name``; the future resolves once it is checkpointed."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            msg = (
                f"step {name!r}: save_progress() must be called on the event loop's thread "
                f"(in the step itself), not from a worker thread"
            )
            raise RuntimeError(msg) from None
        self._progress[name] = plain_copy(value, f"progress of step {name!r}")
        self._changes += 1
        future: asyncio.Future[None] = loop.create_future()
        future.add_done_callback(_retrieve)
        if self._checkpoint_fn is None:
            future.set_result(None)
            return future
        self._waiters.append((self._changes, future))
        if self._saver is None or self._saver.done():
            # Run the saver in the run's own context, not the saving step's, so that
            # checkpoint_fn never finds itself "inside" a step.
            self._saver = loop.create_task(
                self._save_progress_checkpoints(), context=self._caller_context
            )
        return future

    async def _save_progress_checkpoints(self) -> None:
        # Keep checkpointing while some step waits for its progress to be saved; values
        # saved while a checkpoint_fn call is running are folded into the next one.
        while self._waiters and self._storage_error is None:
            try:
                await self._checkpoint()
            except Exception:  # noqa: BLE001 - waiters got it; the batch end raises it
                return

    def _resolve_waiters(self, error: Exception | None) -> None:
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for target, future in self._waiters:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            elif target <= self._saved:
                future.set_result(None)
            else:
                keep.append((target, future))
        self._waiters = keep

    async def _settle(self) -> bool:
        """Leave nothing behind: the progress saver finishes, unresolved waiters are cancelled.

        Returns whether this task was cancelled while waiting for the saver.
        """
        cancelled = False
        if self._saver is not None:
            cancelled = await wait_through(self._saver)
        while self._announcer is not None and not self._announcer.done():
            cancelled = await wait_through(self._announcer) or cancelled
        for _, future in self._waiters:
            future.cancel()
        self._waiters.clear()
        return cancelled

    # --- how a run ends early -------------------------------------------------------------

    def _failure(self) -> WorkflowFailed:
        names = self._graph.names
        errors = {names[p]: exc for p, exc in sorted(self._failures.items())}
        error = WorkflowFailed(errors, self._latest())
        error.__cause__ = next(iter(errors.values()))
        return error

    def _over_budget(self) -> BudgetExceeded:
        assert self._budget is not None  # noqa: S101 - only called once _reached said so
        return BudgetExceeded(self._latest(), self._cost, self._budget)


class _Pending:
    """An awaitable a plain on_event callback returned, awaited in event order."""

    __slots__ = ("awaitable", "event")

    def __init__(self, event: Event, awaitable: Any) -> None:
        self.event = event
        self.awaitable = awaitable


def _new_run_id() -> str:
    import os  # noqa: PLC0415 - tiny, and only fresh runs need it

    return os.urandom(16).hex()
