"""The async runner: one `Run` per call of `Workflow.run`.

`Run.execute` is the whole execution model: take the ready batch, run it
concurrently, record what completed, checkpoint, repeat. Everything else here is
validation before the first step and bookkeeping around that loop: per-step
tasks with retries and timeouts, failure modes, interrupts, budgets and in-step
progress.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
from datetime import UTC, datetime
from functools import partial
from types import CoroutineType, MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint import (
    FORMAT_VERSION,
    WorkflowCheckpoint,
    trusted_checkpoint,
)
from executionkit._context import ContextView
from executionkit._errors import (
    BudgetExceeded,
    WorkflowFailed,
)
from executionkit._graph import Frontier, Graph
from executionkit._plain import plain_copy
from executionkit._result import WorkflowResult
from executionkit._resume import Restored, restore
from executionkit._snapshot import OutputLog
from executionkit._step import is_async_callable, retry_wait
from executionkit._step_context import CURRENT_STEP, StepContext
from executionkit._types import PatternResult, TokenUsage

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._options import CheckpointFn, RunOptions
    from executionkit._step import Step

_EMPTY: MappingProxyType[str, Any] = MappingProxyType({})


def _reached(usage: TokenUsage, budget: TokenUsage | None) -> bool:
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


def _call_as(current: StepContext, run: Any, view: ContextView) -> Any:
    CURRENT_STEP.set(current)  # inside a copied context: undone when the copy is dropped
    return run(view)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class _Abort:
    """A step raised KeyboardInterrupt or SystemExit; carried out of its task as a value.

    Raising those inside a task would tear through the event loop before the
    completed outputs could be checkpointed.
    """

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


async def _wait_through(future: asyncio.Future[Any]) -> bool:
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


class Run:
    """The state of one call of `Workflow.run`, validated before any step starts."""

    def __init__(self, graph: Graph, options: RunOptions) -> None:
        """Restore ``options.resume_from`` (checked against ``graph``) and get ready."""
        self._graph = graph
        self._budget = options.budget
        self._on_error = options.on_error
        self._validate_json = options.validate_json
        self._checkpoint_fn = options.checkpoint_fn
        context = options.context
        if options.resume_from is None:
            state = Restored(
                {}, {}, {}, TokenUsage(), 0, options.run_id, options.metadata or _EMPTY
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
        run_id = state.run_id
        self._executed: list[str] = []
        self._context = context
        self._context_keys = tuple(sorted(context))
        self._run_id = run_id if run_id is not None else os.urandom(16).hex()
        self._skipped = tuple(name for name in graph.names if name in self._outputs)
        self._frontier = Frontier(graph, {graph.index[name] for name in self._outputs})
        self._last: WorkflowCheckpoint | None = options.resume_from
        # Failures of this run, by position; they stay in every later checkpoint's `errors`.
        self._failures: dict[int, Exception] = {}
        self._interrupt: BaseException | None = None
        # Outputs of the running batch that landed, merged in declaration order at its end:
        # position -> (live output, stored form).
        self._landed: dict[int, tuple[Any, Any]] = {}
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._pending = 0
        self._batch_done: asyncio.Future[None] | None = None
        self._cancelling = False
        # Plain-function steps without retries run inline, without a task of their own.
        self._inline = frozenset(
            position
            for position, step in enumerate(graph.steps)
            if step.retries == 0 and not is_async_callable(step.run)
        )
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

    # --- the loop -------------------------------------------------------------------------

    async def execute(self) -> WorkflowResult:
        """Run batch after batch until nothing is ready; checkpoint after each."""
        try:
            await self._run_batches()
        except BaseException:
            await self._settle()  # a cancellation meanwhile: the exception in flight wins
            raise
        if await self._settle():
            raise asyncio.CancelledError
        return WorkflowResult(
            outputs=MappingProxyType({name: self._outputs[name] for name in self._graph.names}),
            cost=self._cost,
            run_id=self._run_id,
            executed=tuple(self._executed),
            skipped=self._skipped,
            invalidated=self._invalidated,
            discarded=self._discarded,
        )

    async def _run_batches(self) -> None:
        ready = self._frontier.initial()
        if ready and _reached(self._cost, self._budget):
            raise self._over_budget()
        while ready:
            completed = await self._run_batch(ready)
            ready = self._frontier.complete(completed)
            await self._checkpoint_after_batch()
            if self._failures and self._on_error != "continue":
                raise self._failure()
            if ready and _reached(self._cost, self._budget):
                raise self._failure() if self._failures else self._over_budget()
        if self._failures:
            raise self._failure()

    async def _run_batch(self, batch: list[int]) -> list[int]:
        """Run ``batch`` concurrently until every step has finished; return what completed."""
        self._pending = 0
        self._batch_done = None
        loop = asyncio.get_running_loop()
        if len(batch) == 1 and batch[0] not in self._inline:
            await self._run_lone(batch[0], loop)
            return self._merge_landed()
        for position in batch:
            if self._interrupt is not None or (self._cancelling and self._on_error == "cancel"):
                break  # a plain step before this one stopped the batch
            # Only while no task was created: steps keep starting in declaration order.
            if not self._pending and position in self._inline:
                self._run_inline(position)
                continue
            task = loop.create_task(self._execute(position))
            task.add_done_callback(partial(self._on_task_done, position))
            self._tasks[position] = task
            self._pending += 1
        if self._pending:
            self._batch_done = loop.create_future()
            try:
                await self._batch_done
            except asyncio.CancelledError as exc:
                # run() itself was cancelled (or Ctrl-C reached run_sync): stop the batch,
                # keep everything that finished, and let the cancellation out afterwards.
                self._interrupt = self._interrupt or exc
                self._cancel_running()
                if self._pending:
                    self._batch_done = loop.create_future()
                    # Cancelled again while the steps wind down: already on record.
                    await _wait_through(self._batch_done)
        self._tasks.clear()
        self._cancelling = False
        return self._merge_landed()

    async def _run_lone(self, position: int, loop: asyncio.AbstractEventLoop) -> None:
        """Run a batch of one async step by awaiting its task directly.

        Awaiting the task wakes this one in the same loop iteration that the step
        finishes in; a done-callback setting a future would cost one more.
        """
        task = loop.create_task(self._execute(position))
        self._tasks[position] = task
        try:
            await task
        except asyncio.CancelledError as exc:
            this = asyncio.current_task()
            if this is not None and this.cancelling():  # run() itself was cancelled
                self._interrupt = self._interrupt or exc
                self._cancel_running()
                await _wait_through(task)
        except BaseException:  # noqa: BLE001, S110 - the step's outcome is read from the task
            pass
        self._tasks.clear()
        self._land(position, task)
        self._cancelling = False

    def _merge_landed(self) -> list[int]:
        completed = sorted(self._landed)
        names = self._graph.names
        for position in completed:
            name = names[position]
            live, stored = self._landed[position]
            self._outputs[name] = live
            self._log.append(name, stored)
            self._executed.append(name)
        self._landed.clear()
        return completed

    def _on_task_done(self, position: int, task: asyncio.Task[Any]) -> None:
        self._land(position, task)
        self._pending -= 1
        done = self._batch_done
        if self._pending == 0 and done is not None and not done.done():
            done.set_result(None)

    def _run_inline(self, position: int) -> None:
        """Call a plain-function step right here: no task, same outcome as one.

        A plain function runs inline on the loop thread whether or not it has a
        task of its own, so a task would only add overhead. It runs in a copy of
        the run's context, so context variables it sets stay its own.
        """
        step = self._graph.steps[position]
        view = ContextView(self._graph, position, self._context, self._outputs)
        current = StepContext(self, step.name, self._run_id, 1, 1)
        try:
            result = self._caller_context.copy().run(_call_as, current, step.run, view)
        except (KeyboardInterrupt, SystemExit) as exc:
            self._landed_result(position, _Abort(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a step's failure is data here
            self._landed_error(position, exc)
            return
        if inspect.isawaitable(result):
            # A plain function that returned an awaitable: await it in a task after all.
            task = asyncio.get_running_loop().create_task(_awaited(result))
            task.add_done_callback(partial(self._on_task_done, position))
            self._tasks[position] = task
            self._pending += 1
            return
        self._landed_result(position, result)

    def _land(self, position: int, task: asyncio.Task[Any]) -> None:
        """Record how one step's task ended (a done-callback, so it runs in completion order)."""
        if task.cancelled():
            if not self._cancelling:  # the step cancelled itself: an interrupt, not a failure
                name = self._graph.names[position]
                self._interrupt = self._interrupt or asyncio.CancelledError(
                    f"step {name!r} was cancelled"
                )
                self._cancel_running()
            return
        error = task.exception()
        if error is None:
            self._landed_result(position, task.result())
        elif isinstance(error, Exception):
            self._landed_error(position, error)
        else:
            self._interrupt = self._interrupt or error  # an exotic BaseException
            self._cancel_running()

    def _landed_error(self, position: int, error: Exception) -> None:
        self._failures[position] = error
        self._changes += 1
        if self._on_error == "cancel":
            self._cancel_running()

    def _landed_result(self, position: int, result: Any) -> None:
        if isinstance(result, _Abort):
            self._interrupt = self._interrupt or result.error
            self._cancel_running()
            return
        if isinstance(result, PatternResult):
            self._cost += result.cost  # spent, whether or not the output can be recorded
            result = result.value
        try:
            stored = self._storable(position, result)
        except Exception as exc:  # noqa: BLE001 - an unrecordable output fails its step
            self._landed_error(position, exc)
            return
        self._landed[position] = (result, stored)
        if self._progress:
            self._progress.pop(self._graph.names[position], None)
        self._changes += 1

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

    def _cancel_running(self) -> None:
        self._cancelling = True
        for task in self._tasks.values():
            if not task.done():
                task.cancel()

    async def _execute(self, position: int) -> Any:
        """Run one step in its own task: attempts, timeout, retries and its StepContext."""
        step = self._graph.steps[position]
        view = ContextView(self._graph, position, self._context, self._outputs)
        if step.retries == 0 and step.timeout is None:
            # The common case, kept lean: one attempt, nothing to time.
            token = CURRENT_STEP.set(StepContext(self, step.name, self._run_id, 1, 1))
            try:
                result = step.run(view)
                if type(result) is CoroutineType or inspect.isawaitable(result):
                    result = await result
            except (KeyboardInterrupt, SystemExit) as exc:
                return _Abort(exc)
            finally:
                CURRENT_STEP.reset(token)
            return result
        return await self._execute_attempts(step, view)

    async def _execute_attempts(self, step: Step, view: ContextView) -> Any:
        """The general case: a timeout per attempt, and retries with backoff."""
        attempt = 1
        while True:
            token = CURRENT_STEP.set(
                StepContext(self, step.name, self._run_id, attempt, step.retries + 1)
            )
            try:
                result = step.run(view)
                if inspect.isawaitable(result):
                    if step.timeout is None:
                        result = await result
                    else:
                        result = await _with_timeout(result, step.name, attempt, step.timeout)
            except (KeyboardInterrupt, SystemExit) as exc:
                return _Abort(exc)
            except Exception as exc:
                if attempt > step.retries or not isinstance(exc, step.retry_on):
                    raise
            else:
                return result
            finally:
                CURRENT_STEP.reset(token)
            await asyncio.sleep(retry_wait(step, attempt, _jitter_draw()))
            attempt += 1

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
        await _wait_through(saving)
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
            await self._checkpoint_now(self._checkpoint_fn)
        finally:
            self._writing = False
            if self._turns:
                turn = self._turns.pop(0)
                if not turn.done():
                    turn.set_result(None)

    async def _checkpoint_now(self, checkpoint_fn: CheckpointFn) -> None:
        if self._storage_error is not None:
            raise self._storage_error
        if self._changes == self._saved:
            return
        covered = self._changes
        checkpoint = self._snapshot()
        cancelled = False
        try:
            pending = checkpoint_fn(checkpoint)
            if inspect.isawaitable(pending):
                write = asyncio.ensure_future(pending)
                cancelled = await _wait_through(write)
                write.result()
        except Exception as exc:
            self._annotate_storage_error(exc, checkpoint)
            self._storage_error = exc
            self._resolve_waiters(exc)
            if cancelled:
                raise asyncio.CancelledError from exc
            raise
        self._saved = covered
        self._resolve_waiters(None)
        if cancelled:
            raise asyncio.CancelledError

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
        if self._landed:
            # Mid-batch (a step saved progress): outputs that landed in this batch are
            # not in the log yet, so this rare checkpoint gets a copy.
            names = self._graph.names
            landed = sorted(self._landed)
            copied = dict(log.outputs(len(log)))
            copied.update((names[p], self._landed[p][1]) for p in landed)
            info = self._graph.step_info
            outputs: Mapping[str, Any] = MappingProxyType(copied)
            described = {**copied, **self._progress}
            step_info: Mapping[str, Any] = MappingProxyType({n: info[n] for n in described})
            new = tuple(names[p] for p in landed if names[p] not in self._reported)
            self._reported.update(new)
        else:
            length = len(log)
            outputs = log.outputs(length)
            step_info = log.info(length, self._graph.step_info)
            if self._progress:  # rare: steps holding progress are described too
                info = self._graph.step_info
                step_info = MappingProxyType(
                    {**step_info, **{name: info[name] for name in self._progress}}
                )
            new = tuple(log.names[self._snapshot_length : length])
            if self._reported:  # already announced by a mid-batch checkpoint
                new = tuple(name for name in new if name not in self._reported)
                self._reported.clear()
        self._snapshot_length = len(log)
        errors: Mapping[str, str] = _EMPTY
        if self._failures:
            names = self._graph.names
            errors = MappingProxyType(
                {names[p]: f"{type(e).__name__}: {e}" for p, e in sorted(self._failures.items())}
            )
        checkpoint = trusted_checkpoint(
            step_index=len(outputs),
            outputs=outputs,
            cost=self._cost,
            version=FORMAT_VERSION,
            run_id=self._run_id,
            seq=self._seq,
            context_keys=self._context_keys,
            errors=errors,
            created_at=datetime.now(UTC).isoformat(),
            metadata=self._metadata,
            progress=MappingProxyType(dict(self._progress)) if self._progress else _EMPTY,
            step_info=step_info,
            new_outputs=new,
        )
        self._last = checkpoint
        return checkpoint

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
            cancelled = await _wait_through(self._saver)
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


async def _with_timeout(awaitable: Any, name: str, attempt: int, seconds: float) -> Any:
    try:
        async with asyncio.timeout(seconds) as scope:
            return await awaitable
    except TimeoutError:
        if not scope.expired():
            raise  # the step's own TimeoutError, not ours
        msg = f"step {name!r} attempt {attempt} timed out after {seconds:g} s"
        raise TimeoutError(msg) from None


def _jitter_draw() -> float:
    import random  # noqa: PLC0415 - only retrying steps pay for the import

    return random.random()  # noqa: S311 - jitter, not cryptography
