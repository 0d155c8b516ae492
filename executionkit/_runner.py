"""The async runner: one `Run` per call of `Workflow.run`.

The loop in `Run.execute` is the whole execution model: take the ready batch,
run it concurrently, record what completed, checkpoint, repeat. Everything else
here is validation before the first step and bookkeeping around the loop.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TypeAlias

from executionkit._checkpoint import (
    FORMAT_VERSION,
    LEGACY_VERSION,
    WorkflowCheckpoint,
    trusted_checkpoint,
)
from executionkit._context import StepContext
from executionkit._errors import CheckpointMismatchError, RunArgumentError, WorkflowFailed
from executionkit._graph import Frontier, Graph
from executionkit._result import WorkflowResult
from executionkit._types import PatternResult, TokenUsage

CheckpointFn: TypeAlias = Callable[[WorkflowCheckpoint], object]
"""Receives each checkpoint; may return an awaitable, which is awaited before anything else."""


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
        self._checkpoint_fn = checkpoint_fn
        self._outputs: dict[str, Any] = {}
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
        done = {graph.index[name] for name in self._outputs}
        self._frontier = Frontier(graph, done)
        self._last: WorkflowCheckpoint | None = resume_from

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
        self._cost = checkpoint.cost
        self._seq = checkpoint.seq
        if not has_metadata:
            self._metadata = checkpoint.metadata
        return run_id if run_id is not None else checkpoint.run_id

    async def execute(self) -> WorkflowResult:
        """Run batch after batch until nothing is ready; checkpoint after each."""
        ready = self._frontier.initial()
        while ready:
            completed, failures, interrupt = await self._run_batch(ready)
            ready = self._frontier.complete(completed)
            if completed or failures:
                await self._take_checkpoint(completed, failures)
            if interrupt is not None:
                raise interrupt
            if failures:
                raise self._failure(failures)
        return WorkflowResult(
            outputs=MappingProxyType({name: self._outputs[name] for name in self._graph.names}),
            cost=self._cost,
            run_id=self._run_id,
            executed=tuple(self._executed),
            skipped=self._skipped,
        )

    async def _run_batch(
        self, batch: list[int]
    ) -> tuple[list[int], dict[int, Exception], BaseException | None]:
        """Run ``batch`` concurrently; record every step that completed.

        Returns the positions recorded, the ordinary failures by position, and
        an interrupt (cancellation, KeyboardInterrupt, SystemExit) to re-raise
        once the completed outputs are checkpointed.
        """
        if len(batch) == 1:
            # No task for a lone step: same outcome, less overhead on chains.
            position = batch[0]
            try:
                result = await self._call(position)
            except Exception as exc:  # noqa: BLE001 - a step's failure is data here
                return [], {position: exc}, None
            self._record(position, result)
            return batch, {}, None
        tasks = [asyncio.ensure_future(self._call(position)) for position in batch]
        interrupt: BaseException | None = None
        try:
            await asyncio.wait(tasks)
        except BaseException as exc:  # noqa: BLE001 - re-raised after the checkpoint
            # run() itself was cancelled or interrupted: stop the batch, keep what finished.
            interrupt = exc
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        completed: list[int] = []
        failures: dict[int, Exception] = {}
        for position, task in zip(batch, tasks, strict=True):
            if task.cancelled():
                interrupt = interrupt or asyncio.CancelledError()
                continue
            error = task.exception()
            if error is None:
                self._record(position, task.result())
                completed.append(position)
            elif isinstance(error, Exception):
                failures[position] = error
            else:
                interrupt = interrupt or error
        return completed, failures, interrupt

    async def _call(self, position: int) -> Any:
        step = self._graph.steps[position]
        result = step.run(StepContext(self._graph, position, self._context, self._outputs))
        if inspect.isawaitable(result):
            result = await result
        return result

    def _record(self, position: int, result: Any) -> None:
        name = self._graph.names[position]
        if isinstance(result, PatternResult):
            self._cost += result.cost
            result = result.value
        self._outputs[name] = result
        self._executed.append(name)

    def _snapshot(self, failures: Mapping[int, Exception]) -> WorkflowCheckpoint:
        self._seq += 1
        names = self._graph.names
        errors = {names[p]: f"{type(exc).__name__}: {exc}" for p, exc in sorted(failures.items())}
        checkpoint = trusted_checkpoint(
            step_index=len(self._outputs),
            outputs=MappingProxyType(dict(self._outputs)),
            cost=self._cost,
            version=FORMAT_VERSION,
            run_id=self._run_id,
            seq=self._seq,
            context_keys=self._context_keys,
            errors=MappingProxyType(errors),
            created_at=datetime.now(UTC).isoformat(),
            metadata=self._metadata,
        )
        self._last = checkpoint
        return checkpoint

    async def _take_checkpoint(
        self, completed: list[int], failures: Mapping[int, Exception]
    ) -> None:
        if self._checkpoint_fn is None:
            if failures:
                self._snapshot(failures)  # WorkflowFailed still hands it to the caller
            return
        checkpoint = self._snapshot(failures)
        try:
            pending = self._checkpoint_fn(checkpoint)
            if inspect.isawaitable(pending):
                await pending
        except Exception as exc:
            steps = _names([self._graph.names[p] for p in completed]) or "none"
            exc.add_note(
                f"executionkit: checkpoint_fn raised while saving checkpoint seq={checkpoint.seq} "
                f"(step_index={checkpoint.step_index}, recording steps {steps}); no further "
                f"step was started"
            )
            if failures:
                failed = "; ".join(
                    f"{self._graph.names[p]!r}: {type(e).__name__}: {e}"
                    for p, e in sorted(failures.items())
                )
                exc.add_note(
                    f"executionkit: the checkpoint recorded these step failures: {failed}"
                )
            raise

    def _failure(self, failures: Mapping[int, Exception]) -> WorkflowFailed:
        assert self._last is not None  # noqa: S101 - _take_checkpoint always snapshots on failure
        names = self._graph.names
        errors = {names[p]: exc for p, exc in sorted(failures.items())}
        error = WorkflowFailed(errors, self._last)
        error.__cause__ = next(iter(errors.values()))
        return error
