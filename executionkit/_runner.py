"""The run loop: one `Run` per call of `Workflow.run`.

`Run` reads like the execution model. In batch mode: take the ready batch, run
it concurrently, record what completed, checkpoint, repeat. In eager mode:
start each step as soon as its own dependencies are done, and checkpoint after
every completion. It owns the running steps and has one way out, `_exit`: every
end of a run (success, failure, budget, cancellation, an interrupt, a failing
``checkpoint_fn``) stops and awaits every running step, records what landed,
takes the last checkpoint, and only then returns or raises.

The parts it composes, each with one job: `Record` (what landed, and the
checkpoints of it), `Checkpointer` (the only caller of ``checkpoint_fn``),
`Attempts` (calling one step), `Announcer` (events), `Frontier` (what is ready).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from executionkit._aio import wait_through
from executionkit._announcer import Announcer
from executionkit._attempt import Attempts, InContext
from executionkit._checkpointer import Checkpointer
from executionkit._conditions import Conditions
from executionkit._kinds import Kinds
from executionkit._ownership import check_latest, take_claim
from executionkit._record import Record
from executionkit.events import (
    RunFailed,
    RunFinished,
    RunSuspended,
    StepFailed,
    StepFinished,
    StepStarted,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from executionkit._graph import Graph
    from executionkit._options import RunOptions
    from executionkit._result import WorkflowResult


class Run:
    """One call of `Workflow.run`: the loop, the running steps, and the one way out."""

    def __init__(self, graph: Graph, options: RunOptions) -> None:
        """Restore ``options.resume_from`` and get ready to start steps."""
        from executionkit._graph import Frontier  # noqa: PLC0415 - avoids an import cycle

        self._graph = graph
        self._options = options
        self._record = record = Record(graph, options)
        caller_context = contextvars.copy_context()
        self._caller_context = caller_context
        self._announcer = announcer = Announcer(options.on_event, caller_context)
        self._observed = announcer.observed
        self._checkpointer = Checkpointer(
            record, options.checkpoint_fn, announcer, caller_context, self._cancel_running
        )
        # Steps a condition may skip are decided just before they would start.
        self._conditions = Conditions(graph, options.context, record.outputs, record.skipped)
        self._deciding = self._conditions.deciding
        self._kinds = Kinds(record, options, announcer, self._checkpointer, self, self._conditions)
        self._attempts = Attempts(
            graph,
            context=options.context,
            outputs=record.outputs,
            run_id=record.run_id,
            host=self._checkpointer,
            executor=options.executor,
            announcer=announcer,
            caller_context=caller_context,
            landing=self,
            kinds=self._kinds,
        )
        self._run_id = record.run_id
        self._on_error = options.on_error
        # Whether a map stopped with items left (the budget, or the run stopping).
        self._unfinished = False
        self._budget = options.budget
        self._resumed = options.resume_from is not None
        self._eager = options.schedule == "eager"
        # In batch mode, "step" records and checkpoints each completion as it lands.
        self._per_step = (
            not self._eager
            and options.checkpoint_every == "step"
            and options.checkpoint_fn is not None
        )
        done = {graph.index[name] for name in (*record.outputs, *record.skipped)}
        # Batch mode follows the graph's precomputed levels while every step completes.
        self._frontier = Frontier(graph, done, planned=not self._eager)
        self._limit = options.max_concurrency
        # Wake the loop after every completion only when it may do something then.
        self._wake_each = self._eager or self._per_step or self._limit is not None
        # With an executor, plain steps go there instead of running inline.
        self._inline = graph.inline if options.executor is None else frozenset()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._running = 0
        self._wake: asyncio.Future[None] | None = None
        self.cancelling = False
        self._task: asyncio.Task[Any] | None = None
        # How the run is stopping, if it is: an interrupt (a cancellation, Ctrl-C, a
        # step raising KeyboardInterrupt) or an error of the run itself (checkpoint_fn).
        self._interrupt: BaseException | None = None
        self._error: Exception | None = None
        # Whether steps were left that the loop could not start (for the budget).
        self._more = False
        # Batch mode with per-step checkpoints: positions recorded before the batch ended.
        self._recorded: list[int] = []

    async def execute(self) -> WorkflowResult:
        """Run every step not yet recorded; checkpoint as the schedule says.

        A ``checkpoint_fn`` that grants claims (`_ownership`) is claimed for the
        run first, and its latest checkpoint of the run checked, before anything
        starts; the claim is given up once the run has returned or raised.
        """
        fn = self._options.checkpoint_fn
        if getattr(fn, "claim", None) is None:
            return await self._execute()
        async with contextlib.AsyncExitStack() as stack:
            stored = await take_claim(stack, fn, self._run_id)
            resumed = self._options.resume_from
            check_latest(fn, self._run_id, None if resumed is None else resumed.seq, stored)
            return await self._execute()

    async def _execute(self) -> WorkflowResult:
        began = time.perf_counter()
        self._task = asyncio.current_task()
        if self._observed:
            self._announcer.run_started(self._record, len(self._graph), resumed=self._resumed)
        try:
            if self._record.answered:
                # Answers are saved before anything acts on them: of two processes
                # answering one question, the later is refused by the store here.
                await self._checkpointer.save()
            await (self._run_eager() if self._eager else self._run_batches())
        except BaseException as exc:  # noqa: BLE001 - every way out goes through _exit
            self._stop(exc)
        return await self._exit(began)

    # --- the two schedules ----------------------------------------------------------------

    async def _run_batches(self) -> None:
        frontier = self._frontier
        record = self._record
        save = self._checkpointer.save
        ready = frontier.initial()
        left: list[int] = []
        while ready and self._may_begin_batch():
            if len(ready) == 1 and ready[0] not in self._inline and self._may_start():
                await self._run_lone(ready[0])  # a chain's every batch: kept lean
                left = []
            else:
                left = await self._run_all(ready)
            if self._recorded:
                recorded = self._recorded + record.merge()
                self._recorded = []
            else:
                recorded = record.merge()
            ready = frontier.complete(recorded)
            await save()
        self._more = bool(ready or left)

    async def _run_eager(self) -> None:
        frontier = self._frontier
        record = self._record
        save = self._checkpointer.save
        ready = frontier.initial()
        if ready and record.over_budget():
            self._more = True
            return
        while True:
            if (
                len(ready) == 1
                and not self._running
                and ready[0] not in self._inline
                and self._may_start()
            ):
                # Nothing runs and nothing else is ready, so nothing can start before
                # this step finishes: run it as a batch of one is run, without a task.
                await self._run_lone(ready.pop())
            else:
                self._start_from_heap(ready)
                # Plain steps and skips land inline, and steps may land while
                # checkpoint_fn is awaited: record and checkpoint those before waiting
                # for anything else.
                if not record.landed and not record.skips and not self._unsaved():
                    if not self._running:
                        break
                    await self._wait()
            for position in frontier.complete(record.merge()):
                heapq.heappush(ready, position)
            # Steps that finish while checkpoint_fn runs are folded into the next one.
            await save()
        self._more = bool(ready)

    def _unsaved(self) -> bool:
        return self._checkpointer.active and self._record.unsaved()

    def _may_begin_batch(self) -> bool:
        if self._interrupt is not None:
            return False
        if self._record.failures and self._on_error != "continue":
            return False
        return not self._record.over_budget()

    def _may_start(self) -> bool:
        if self._interrupt is not None or self._checkpointer.storage_error is not None:
            return False
        if self._record.failures and self._on_error == "cancel":
            return False
        if self._limit is None:
            # A batch starts as a whole: a failure or the budget stops the batches
            # after it. Eager steps start one by one, so those stop them at once.
            return not self._eager or self._may_start_more()
        return self._running < self._limit and self._may_start_more()

    def _may_start_more(self) -> bool:
        if self._record.failures and self._on_error != "continue":
            return False
        return not self._record.over_budget()

    async def _run_all(self, batch: list[int]) -> list[int]:
        """Start ``batch`` in declaration order (within the limit) and wait for all of it.

        Returns the steps it could not start (a failure, an interrupt or the budget
        stopped it first).
        """
        queue = list(reversed(batch))
        while True:
            self._start(queue, queue.pop)
            if self._per_step and self._record.unsaved():
                self._recorded += self._record.merge()
                await self._checkpointer.save()
                continue
            if not self._running:
                return queue
            await self._wait()

    def _start_from_heap(self, heap: list[int]) -> None:
        """Start steps popped from ``heap`` (lowest position first) while the run allows it."""
        self._start(heap, partial(heapq.heappop, heap))

    def _start(self, pending: list[int], take: Callable[[], int]) -> None:
        """Start steps, each got from ``take()``, while ``pending`` has some and the run allows it.

        Plain steps run inline only before the first task of the sweep, so steps keep
        beginning to run in the order they were started. From the first task on,
        nothing can land until the loop runs again, so what `_may_start` said holds
        for the rest of the sweep, apart from the concurrency limit, counted here.
        """
        if self._deciding:
            self._start_deciding(pending, take)
            return
        inline = self._inline
        while pending and self._may_start():
            position = take()
            if position in inline:
                self._run_inline(position)
                continue
            more = len(pending)
            if self._limit is not None:
                more = min(more, self._limit - self._running - 1)
            self._spawn(position, take, more)
            return

    def _start_deciding(self, pending: list[int], take: Callable[[], int]) -> None:
        """`_start` in a run where conditions may skip steps: each step is decided as taken.

        Tasks are created one at a time, so that what `_may_start` says is asked
        again after each decision (a condition that raises fails its step).
        """
        deciding = self._deciding
        inline = self._inline
        tasked = False
        while pending and self._may_start():
            position = take()
            if position in deciding and not self._kinds.decide(position):
                continue
            if position in inline and not tasked:
                self._run_inline(position)
                continue
            self._spawn(position, take, 0)
            tasked = True

    # --- starting steps and landing what they give ----------------------------------------

    def _spawn(self, position: int, take: Callable[[], int], more: int) -> None:
        """Start a task for ``position``, then for ``more`` steps got from ``take()``."""
        create_task = asyncio.get_running_loop().create_task
        body = self._attempts.task
        tasks = self._tasks
        observed = self._observed
        started = 0
        try:
            for left in range(more, -1, -1):
                if observed:
                    self._began(position)
                tasks[position] = create_task(body(position))
                started += 1
                if left:
                    position = take()
        finally:
            self._running += started  # even if a listener raised KeyboardInterrupt

    def _began(self, position: int) -> None:
        self._announcer.began(position)
        if position not in self._graph.asks:  # an ask step says QuestionAsked instead
            self._announcer.emit(StepStarted(self._run_id, self._graph.names[position], 1))

    def _run_inline(self, position: int) -> None:
        """Call a plain-function step right here: no task, same outcome as one."""
        if self._observed:
            self._began(position)
        task = self._attempts.inline(position)
        if task is not None:
            # A plain function that returned an awaitable: awaited in a task after all.
            self._tasks[position] = task
            self._running += 1

    async def _run_lone(self, position: int) -> None:
        """A batch of one async step: run it right here, in a context of its own.

        Nothing runs beside it, so a task would only add its cost (several loop
        iterations per step on a chain). `InContext` gives the step what a task
        would: a copy of the run's context, so context variables it sets stay its
        own. Only `asyncio.current_task()` differs: it is the run's task. A
        cancellation of the run goes on to `_exit` once the step has landed.
        """
        if position in self._deciding and not self._kinds.decide(position):
            return
        self._running += 1
        if self._observed:
            self._began(position)
        this = self._task
        before = 0 if this is None else this.cancelling()
        await InContext(self._attempts.task(position), self._caller_context.copy())
        if this is not None and this.cancelling() > before and self._interrupt is None:
            # Cancelled while a step that cannot be interrupted (one in an executor)
            # finished anyway: its output is recorded, then the cancellation goes on.
            self._interrupt = asyncio.CancelledError()

    def landed_result(self, position: int, result: Any) -> None:
        """The step at ``position`` returned ``result``: hold it for the next merge."""
        cost = self._record.land(position, result)
        if cost is None:
            self._after_failure(position)
        elif self._observed:
            name = self._graph.names[position]
            duration = self._announcer.duration(position)
            self._announcer.emit(StepFinished(self._run_id, name, duration, cost))

    def landed_error(self, position: int, error: Exception) -> None:
        """The step at ``position`` failed with ``error`` (after its retries)."""
        self._record.fail(position, error)
        self._after_failure(position)

    def _after_failure(self, position: int) -> None:
        if self._observed:
            name = self._graph.names[position]
            error = self._record.failures[position]
            duration = self._announcer.duration(position)
            self._announcer.emit(StepFailed(self._run_id, name, duration, error))
        if self._on_error == "cancel":
            self._cancel_running()

    def may_start_item(self) -> bool:
        """Whether a map may start another item (the run is not stopping, nor over budget)."""
        return self._may_start_more() and (
            self._interrupt is None and self._checkpointer.storage_error is None
        )

    def landed_unfinished(self, position: int) -> None:
        """The map at ``position`` stopped with items left: the run has work left."""
        del position
        self._unfinished = True

    def landed_interrupt(self, error: BaseException) -> None:
        """A step raised an interrupt: stop every step; the run then raises it."""
        self._interrupt = self._interrupt or error
        self._cancel_running()

    def finished(self, position: int) -> None:
        """The step at ``position`` is no longer running; wake the loop if it waits for that."""
        self._tasks.pop(position, None)
        self._running -= 1
        wake = self._wake
        if wake is not None and (self._wake_each or not self._running) and not wake.done():
            wake.set_result(None)

    async def _wait(self) -> None:
        """Wait until a step finishes (or, in plain batch mode, all of them)."""
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await self._wake
        finally:
            self._wake = None

    # --- the one way out ------------------------------------------------------------------

    def _stop(self, exc: BaseException) -> None:
        """Note why the loop stopped early, and stop every running step."""
        if isinstance(exc, Exception):
            self._error = self._error or exc  # checkpoint_fn raised
        else:
            self._interrupt = self._interrupt or exc
        self._cancel_running()

    def _cancel_running(self) -> None:
        self.cancelling = True
        for position, task in list(self._tasks.items()):
            if task.done():
                continue
            task.cancel()
            task.add_done_callback(partial(self._finished_unstarted, position))

    def _finished_unstarted(self, position: int, task: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never runs its body, which would have
        # said it finished (and taken it out of _tasks).
        if self._tasks.get(position) is task:
            self.finished(position)

    async def _exit(self, began: float) -> WorkflowResult:
        """End the run: the only place it returns or raises once steps may have started.

        Every running step is stopped and awaited (cancellations meanwhile are
        noted, not obeyed), what landed is recorded, the last checkpoint is taken
        and awaited, listeners are served; then the run returns its result or
        raises, in this order of precedence: an interrupt, a ``checkpoint_fn``
        error, `WorkflowFailed`, `BudgetExceeded`.
        """
        record = self._record
        cancelled = await self._stop_running()
        record.merge()
        saved, error = await self._checkpointer.save_through()
        cancelled = cancelled or saved
        if cancelled and self._interrupt is None:
            self._interrupt = asyncio.CancelledError()
        outcome = _outcome(
            self._interrupt,
            self._error or error or self._checkpointer.storage_error,
            record,
            more=self._more or self._unfinished,
        )
        if self._observed:
            duration = time.perf_counter() - began
            waiting = record.waiting() if outcome is None else None
            if waiting:
                names = tuple(waiting)
                self._announcer.emit(RunSuspended(self._run_id, duration, record.cost, names))
            elif outcome is None:
                self._announcer.emit(
                    RunFinished(self._run_id, duration, record.cost, len(record.executed))
                )
            else:
                self._announcer.emit(
                    RunFailed(self._run_id, duration, outcome, record.invalidated)
                )
        settled = await self._checkpointer.settle()
        settled = await self._announcer.settle() or settled
        if outcome is None and settled:
            outcome = asyncio.CancelledError()
        if outcome is not None:
            raise outcome
        return record.result()

    async def _stop_running(self) -> bool:
        """Wait until no step runs; return whether this task was cancelled meanwhile."""
        cancelled = False
        if self._running and (self._interrupt is not None or self._error is not None):
            self._cancel_running()
        while self._running:
            self._wake = asyncio.get_running_loop().create_future()
            try:
                if await wait_through(self._wake):
                    cancelled = True
                    self._interrupt = self._interrupt or asyncio.CancelledError()
                    self._cancel_running()
            finally:
                self._wake = None
        self.cancelling = False
        return cancelled


def _outcome(
    interrupt: BaseException | None, error: Exception | None, record: Record, *, more: bool
) -> BaseException | None:
    """What a run raises, or None when it completed.

    In this order: an interrupt (noting a checkpoint that failed meanwhile), a
    ``checkpoint_fn`` error, `WorkflowFailed`, `BudgetExceeded` (with steps left).
    """
    if interrupt is not None:
        if error is not None:
            interrupt.add_note(
                f"executionkit: the checkpoint taken on interruption failed: "
                f"{type(error).__name__}: {error}"
            )
        return interrupt
    if error is not None:
        return error
    if record.failures:
        return record.failure()
    if more and record.over_budget():
        return record.budget_exceeded()
    return None
