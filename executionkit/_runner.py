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
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from executionkit._checkpoint import (
    FORMAT_VERSION,
    LEGACY_VERSION,
    WorkflowCheckpoint,
    trusted_checkpoint,
)
from executionkit._context import ContextView
from executionkit._errors import (
    BudgetExceeded,
    CheckpointMismatchError,
    RunArgumentError,
    WorkflowFailed,
)
from executionkit._graph import Frontier, Graph
from executionkit._plain import plain_copy
from executionkit._result import WorkflowResult
from executionkit._step import retry_wait
from executionkit._step_context import CURRENT_STEP, StepContext
from executionkit._types import PatternResult, TokenUsage

CheckpointFn: TypeAlias = Callable[[WorkflowCheckpoint], object]
"""Receives each checkpoint; may return an awaitable, which is awaited before anything else."""

OnError: TypeAlias = Literal["finish", "cancel", "continue"]
"""What a run does when a step fails; see `Workflow.run`."""

_ON_ERROR = ("finish", "cancel", "continue")


def _names(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(repr(name) for name in names)


def _check_str_keys(value: object, argument: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        msg = f"{argument} must be a mapping with str keys, got {type(value).__name__}"
        raise RunArgumentError(msg)
    result: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            msg = f"{argument} keys must be str, got {type(key).__name__} {key!r}"
            raise RunArgumentError(msg)
        result[key] = item
    return result


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

    def __init__(
        self,
        graph: Graph,
        initial_context: Mapping[str, Any] | None,
        *,
        checkpoint_fn: CheckpointFn | None,
        resume_from: WorkflowCheckpoint | None,
        run_id: str | None,
        metadata: Mapping[str, Any] | None,
        on_error: OnError,
        budget: TokenUsage | None,
    ) -> None:
        """Validate the arguments against ``graph`` and restore ``resume_from``."""
        self._graph = graph
        context = (
            {} if initial_context is None else _check_str_keys(initial_context, "initial_context")
        )
        colliding = [name for name in graph.names if name in context]
        if colliding:
            msg = (
                f"initial_context keys collide with step names: {_names(colliding)}; "
                f"a step's output and a context value cannot share a ctx key, so rename them"
            )
            raise RunArgumentError(msg)
        fn: object = checkpoint_fn
        if fn is not None and not callable(fn):
            msg = f"checkpoint_fn must be callable or None, got {type(checkpoint_fn).__name__}"
            raise RunArgumentError(msg)
        given_id: object = run_id
        if given_id is not None and (not isinstance(given_id, str) or not given_id):
            msg = f"run_id must be a non-empty str or None, got {type(run_id).__name__} {run_id!r}"
            raise RunArgumentError(msg)
        if on_error not in _ON_ERROR:
            msg = f"on_error must be one of 'finish', 'cancel', 'continue', got {on_error!r}"
            raise RunArgumentError(msg)
        self._budget = _check_budget(budget)
        self._on_error = on_error
        self._checkpoint_fn = checkpoint_fn
        self._outputs: dict[str, Any] = {}
        self._progress: dict[str, Any] = {}
        self._cost = TokenUsage()
        self._seq = 0
        self._executed: list[str] = []
        self._metadata: Mapping[str, Any] = MappingProxyType(
            {} if metadata is None else _check_str_keys(metadata, "metadata")
        )
        if resume_from is not None:
            run_id = self._restore(resume_from, context, run_id, has_metadata=metadata is not None)
        self._context = context
        self._context_keys = tuple(sorted(context))
        self._run_id = run_id if run_id is not None else os.urandom(16).hex()
        self._skipped = tuple(name for name in graph.names if name in self._outputs)
        self._frontier = Frontier(graph, {graph.index[name] for name in self._outputs})
        self._last: WorkflowCheckpoint | None = resume_from
        # Failures of this run, by position; they stay in every later checkpoint's `errors`.
        self._failures: dict[int, Exception] = {}
        self._interrupt: BaseException | None = None
        # Outputs of the running batch that landed, merged in declaration order at its end.
        self._landed: dict[int, Any] = {}
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._cancelling = False
        # Checkpoint bookkeeping: every recorded change bumps `_changes`; a checkpoint
        # covers everything up to the `_changes` it saw.
        self._changes = 0
        self._saved = 0
        self._lock = asyncio.Lock()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._saver: asyncio.Task[None] | None = None
        self._storage_error: Exception | None = None
        self._caller_context = contextvars.copy_context()

    def _restore(
        self,
        checkpoint: WorkflowCheckpoint,
        context: dict[str, Any],
        run_id: str | None,
        *,
        has_metadata: bool,
    ) -> str | None:
        given: object = checkpoint
        if not isinstance(given, WorkflowCheckpoint):
            msg = (
                f"resume_from must be a WorkflowCheckpoint, got {type(given).__name__}; "
                f"load saved data with WorkflowCheckpoint.from_dict(data)"
            )
            raise RunArgumentError(msg)
        index = self._graph.index
        unknown = [name for name in checkpoint.outputs if name not in index]
        if checkpoint.version == LEGACY_VERSION:
            # ExecutionKit 0.4 kept the initial context inside `outputs`. Those values
            # are what 0.4 would have resumed with, so they fill in any key the caller
            # did not pass again.
            for key in unknown:
                context.setdefault(key, checkpoint.outputs[key])
        elif unknown:
            msg = (
                f"checkpoint records outputs of steps this workflow does not have: "
                f"{_names(unknown)} (a checkpoint of another workflow, or renamed steps)"
            )
            raise CheckpointMismatchError(msg)
        missing = [key for key in checkpoint.context_keys if key not in context]
        if missing:
            msg = (
                f"initial_context lacks keys the checkpoint was run with: {_names(missing)}; "
                f"checkpoints never store context values, so pass them again"
            )
            raise CheckpointMismatchError(msg)
        if run_id is not None and checkpoint.run_id is not None and run_id != checkpoint.run_id:
            msg = (
                f"run_id {run_id!r} does not match the checkpoint's run_id "
                f"{checkpoint.run_id!r}; omit run_id to continue the checkpoint's run"
            )
            raise CheckpointMismatchError(msg)
        self._outputs = {
            name: checkpoint.outputs[name] for name in checkpoint.outputs if name in index
        }
        self._progress = {
            name: value for name, value in checkpoint.progress.items() if name in index
        }
        self._cost = checkpoint.cost
        self._seq = checkpoint.seq
        if not has_metadata:
            self._metadata = checkpoint.metadata
        return run_id if run_id is not None else checkpoint.run_id

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
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        remaining = len(batch)

        def on_done(position: int, task: asyncio.Task[Any]) -> None:
            nonlocal remaining
            self._land(position, task)
            remaining -= 1
            if remaining == 0:
                finished.set_result(None)

        for position in batch:
            task = loop.create_task(self._execute(position))
            task.add_done_callback(partial(on_done, position))
            self._tasks[position] = task
        try:
            await asyncio.shield(finished)
        except asyncio.CancelledError as exc:
            # run() itself was cancelled (or Ctrl-C reached run_sync): stop the batch,
            # keep everything that finished, and let the cancellation out afterwards.
            self._interrupt = self._interrupt or exc
            self._cancel_running()
            # Cancelled again while the steps wind down: the interrupt is already on record.
            await _wait_through(finished)
        self._tasks.clear()
        self._cancelling = False
        completed = sorted(self._landed)
        for position in completed:
            name = self._graph.names[position]
            self._outputs[name] = self._landed[position]
            self._executed.append(name)
        self._landed.clear()
        return completed

    def _land(self, position: int, task: asyncio.Task[Any]) -> None:
        """Record how one step's task ended (a done-callback, so it runs in completion order)."""
        name = self._graph.names[position]
        if task.cancelled():
            if not self._cancelling:  # the step cancelled itself: an interrupt, not a failure
                self._interrupt = self._interrupt or asyncio.CancelledError(
                    f"step {name!r} was cancelled"
                )
                self._cancel_running()
            return
        error = task.exception()
        if error is not None and not isinstance(error, Exception):
            self._interrupt = self._interrupt or error  # an exotic BaseException
            self._cancel_running()
            return
        if error is not None:
            self._failures[position] = error
            self._changes += 1
            if self._on_error == "cancel":
                self._cancel_running()
            return
        result = task.result()
        if isinstance(result, _Abort):
            self._interrupt = self._interrupt or result.error
            self._cancel_running()
            return
        if isinstance(result, PatternResult):
            self._cost += result.cost
            result = result.value
        self._landed[position] = result
        self._progress.pop(name, None)
        self._changes += 1

    def _cancel_running(self) -> None:
        self._cancelling = True
        for task in self._tasks.values():
            task.cancel()

    async def _execute(self, position: int) -> Any:
        """Run one step in its own task: attempts, timeout, retries and its StepContext."""
        step = self._graph.steps[position]
        view = ContextView(self._graph, position, self._context, self._outputs)
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
        if self._storage_error is not None:
            raise self._storage_error
        async with self._lock:
            if self._storage_error is not None:
                raise self._storage_error
            if self._changes == self._saved:
                return
            covered = self._changes
            checkpoint = self._snapshot()
            cancelled = False
            try:
                pending = self._checkpoint_fn(checkpoint)
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
        names = self._graph.names
        outputs = dict(self._outputs)
        for position in sorted(self._landed):  # a mid-batch checkpoint (progress)
            outputs[names[position]] = self._landed[position]
        errors = {
            names[p]: f"{type(exc).__name__}: {exc}" for p, exc in sorted(self._failures.items())
        }
        checkpoint = trusted_checkpoint(
            step_index=len(outputs),
            outputs=MappingProxyType(outputs),
            cost=self._cost,
            version=FORMAT_VERSION,
            run_id=self._run_id,
            seq=self._seq,
            context_keys=self._context_keys,
            errors=MappingProxyType(errors),
            created_at=datetime.now(UTC).isoformat(),
            metadata=self._metadata,
            progress=MappingProxyType(dict(self._progress)),
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


def _check_budget(budget: object) -> TokenUsage | None:
    if budget is None:
        return None
    if not isinstance(budget, TokenUsage):
        msg = f"budget must be a TokenUsage or None, got {type(budget).__name__} {budget!r}"
        raise RunArgumentError(msg)
    if min(budget.input_tokens, budget.output_tokens, budget.llm_calls) < 0:
        msg = f"budget fields must be non-negative (0 means no limit), got {budget!r}"
        raise RunArgumentError(msg)
    return budget


def _jitter_draw() -> float:
    import random  # noqa: PLC0415 - only retrying steps pay for the import

    return random.random()  # noqa: S311 - jitter, not cryptography
