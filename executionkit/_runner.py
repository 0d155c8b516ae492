"""The async runner: one `Run` per call of `Workflow.run`.

`Run.execute` is the whole execution model. In batch mode: take the ready
batch, run it concurrently, record what completed, checkpoint, repeat. In eager
mode: start each step as soon as its own dependencies are done, and checkpoint
after every completion. What landed, and the checkpoints taken from it, belong
to `executionkit._recorder.Recorder`; this module starts and stops steps.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import inspect
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import CoroutineType, MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._context import ContextView
from executionkit._recorder import Recorder, reached, wait_through
from executionkit._result import WorkflowResult
from executionkit._step import retry_wait
from executionkit._step_context import CURRENT_STEP, StepContext
from executionkit.events import (
    RunFailed,
    RunFinished,
    RunStarted,
    StepInvalidated,
    StepRetried,
    StepSkipped,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator

    from executionkit._graph import Graph
    from executionkit._options import RunOptions
    from executionkit._step import Step


def _call_as(current: StepContext, run: Any, view: ContextView) -> Any:
    CURRENT_STEP.set(current)  # inside a copied context: undone when the copy is dropped
    return run(view)


async def _with_timeout(awaitable: Any, name: str, attempt: int, seconds: float) -> Any:
    try:
        async with asyncio.timeout(seconds) as scope:
            return await awaitable
    except TimeoutError:
        if not scope.expired():
            raise  # the step's own TimeoutError, not ours
        msg = f"step {name!r} attempt {attempt} timed out after {seconds:g} s"
        raise TimeoutError(msg) from None


async def _finish_elsewhere(work: asyncio.Future[Any]) -> Any:
    """Await work running in an executor, which a cancellation cannot stop.

    A thread or a worker process cannot be interrupted, so run() must not return
    while it still runs: wait for it even if cancelled. If it completed, its output
    is returned (and so recorded and checkpointed: it was paid for); otherwise the
    cancellation goes on.
    """
    cancelled = await wait_through(work)
    if cancelled and (work.cancelled() or work.exception() is not None):
        raise asyncio.CancelledError
    return work.result()


class _InContext:
    """Await a coroutine inside a given `contextvars.Context`, without a task.

    Each resumption of the coroutine runs through ``context.run``, exactly as a
    task created with that context would drive it; whatever it yields (the
    futures it waits on) passes through to the task awaiting this object.
    """

    __slots__ = ("_context", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        self._coro = coro
        self._context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        run = self._context.run
        send = self._coro.send
        throw = self._coro.throw
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = run(send, value) if error is None else run(throw, error)
            except StopIteration as stop:
                return stop.value
            try:
                value = yield yielded
                error = None
            except GeneratorExit:
                self._coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed on to the coroutine
                value = None
                error = exc


def _jitter_draw() -> float:
    import random  # noqa: PLC0415 - only retrying steps pay for the import

    return random.random()  # noqa: S311 - jitter, not cryptography


class Run(Recorder):
    """One call of `Workflow.run`: the record (from `Recorder`) plus running steps."""

    def __init__(self, graph: Graph, options: RunOptions) -> None:
        """Restore ``options.resume_from`` and get ready to start steps."""
        super().__init__(graph, options)
        from executionkit._graph import Frontier  # noqa: PLC0415 - avoids an import cycle

        self._eager = options.schedule == "eager"
        done = {graph.index[name] for name in self._outputs}
        # Batch mode follows the graph's precomputed levels while every step completes.
        self._frontier = Frontier(graph, done, planned=not self._eager)
        self._limit = options.max_concurrency
        # Wake the loop after every completion only when it may start something then.
        self._wake_each = self._eager or self._limit is not None
        self._executor = options.executor
        # With an executor, plain steps go there instead of running inline.
        self._inline = graph.inline if self._executor is None else frozenset()
        self._resumed = options.resume_from is not None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._running = 0
        self._wake: asyncio.Future[None] | None = None
        self._cancelling = False
        self._task: asyncio.Task[Any] | None = None

    async def execute(self) -> WorkflowResult:
        """Run every step not yet recorded; checkpoint as the schedule says."""
        began = time.perf_counter()
        self._task = asyncio.current_task()
        if self._observed:
            self._announce_start()
        try:
            await (self._run_eager() if self._eager else self._run_batches())
        except BaseException as exc:
            if self._observed:
                duration = time.perf_counter() - began
                self._emit(RunFailed(self._run_id, duration, exc, self._invalidated))
            await self._settle()  # a cancellation meanwhile: the exception in flight wins
            raise
        if self._observed:
            duration = time.perf_counter() - began
            self._emit(RunFinished(self._run_id, duration, self._cost, len(self._executed)))
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

    def _announce_start(self) -> None:
        self._emit(
            RunStarted(self._run_id, len(self._graph), self._skipped, self._resumed, self._cost)
        )
        for name, reason in self._invalidated.items():
            self._emit(StepInvalidated(self._run_id, name, reason))
        for name in self._skipped:
            self._emit(StepSkipped(self._run_id, name))

    # --- the two schedules ----------------------------------------------------------------

    async def _run_batches(self) -> None:
        ready = self._frontier.initial()
        if ready and reached(self._cost, self._budget):
            raise self._over_budget()
        while ready:
            if len(ready) == 1 and ready[0] not in self._inline and self._may_start():
                await self._run_lone(ready[0])  # a chain's every batch: kept lean
                left: list[int] = []
            else:
                left = await self._run_all(ready)
            ready = self._frontier.complete(self._merge_landed())
            await self._checkpoint_after_batch()
            self._raise_if_stopped(more=bool(ready or left))
        if self._failures:
            raise self._failure()

    async def _run_eager(self) -> None:
        ready = self._frontier.initial()
        if ready and reached(self._cost, self._budget):
            raise self._over_budget()
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
                # Plain steps land inline, and steps may land while checkpoint_fn is
                # awaited: record and checkpoint those before waiting for anything else.
                if not self._landed and not self._unsaved():
                    if not self._running:
                        break
                    await self._wait()
            for position in self._frontier.complete(self._merge_landed()):
                heapq.heappush(ready, position)
            # Steps that finish while checkpoint_fn runs are folded into the next one.
            await self._checkpoint_after_batch()
        self._raise_if_stopped(more=bool(ready))
        if self._failures:
            raise self._failure()

    def _unsaved(self) -> bool:
        return self._checkpoint_fn is not None and self._changes != self._saved

    def _raise_if_stopped(self, *, more: bool) -> None:
        if self._failures and self._on_error != "continue":
            raise self._failure()
        if more and reached(self._cost, self._budget):
            raise self._failure() if self._failures else self._over_budget()

    def _may_start(self) -> bool:
        if self._interrupt is not None or self._storage_error is not None:
            return False
        if self._failures and self._on_error == "cancel":
            return False
        if self._limit is None:
            # A batch starts as a whole: a failure or the budget stops the batches
            # after it. Eager steps start one by one, so those stop them at once.
            return not self._eager or self._may_start_more()
        return self._running < self._limit and self._may_start_more()

    def _may_start_more(self) -> bool:
        if self._failures and self._on_error != "continue":
            return False
        return self._budget is None or not reached(self._cost, self._budget)

    async def _run_all(self, batch: list[int]) -> list[int]:
        """Start ``batch`` in declaration order (within the limit) and wait for all of it.

        Returns the steps it could not start (a failure, an interrupt or the budget
        stopped it first).
        """
        queue = list(reversed(batch))
        while True:
            self._start_from(queue)
            if not self._running:
                return queue
            await self._wait()

    def _start_from(self, queue: list[int]) -> None:
        """Start steps popped from the end of ``queue`` while the run allows it."""
        self._start(queue, queue.pop)

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

    # --- starting and finishing steps -----------------------------------------------------

    def _spawn(self, position: int, take: Callable[[], int], more: int) -> None:
        """Start a task for ``position``, then for ``more`` steps got from ``take()``."""
        create_task = asyncio.get_running_loop().create_task
        body = self._step_task
        tasks = self._tasks
        observed = self._observed
        started = 0
        try:
            for left in range(more, -1, -1):
                if observed:
                    self._began_step(position)
                tasks[position] = create_task(body(position))
                started += 1
                if left:
                    position = take()
        finally:
            self._running += started  # even if a listener raised KeyboardInterrupt

    async def _step_task(self, position: int) -> None:
        """The body of a step's task: run it, then record how it ended."""
        step = self._graph.steps[position]
        view = ContextView(self._graph, position, self._context, self._outputs)
        try:
            if step.retries == 0 and step.timeout is None:
                # The common case, kept lean: one attempt, nothing to time.
                token = CURRENT_STEP.set((self, step.name, self._run_id, 1, 1))
                try:
                    if self._executor is None:
                        result = step.run(view)
                    else:
                        result = self._call(position, step, view)
                    if type(result) is CoroutineType or inspect.isawaitable(result):
                        result = await result
                finally:
                    CURRENT_STEP.reset(token)
            else:
                result = await self._attempts(position, step, view)
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if not self._cancelling and (this is None or not this.cancelling()):
                # The step raised CancelledError itself: an interrupt, not a failure.
                self._landed_interrupt(asyncio.CancelledError(f"step {step.name!r} was cancelled"))
            raise
        except Exception as exc:  # noqa: BLE001 - a step's failure is data here
            self._landed_error(position, exc)
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, ...
            # Raised inside a task they would tear through the event loop before the
            # completed outputs could be checkpointed; carried out as an interrupt instead.
            self._landed_interrupt(exc)
        else:
            self._landed_result(position, result)
        finally:
            self._finished(position)

    def _call(self, position: int, step: Step, view: ContextView) -> Any:
        """Call the step's function; a plain one goes to the executor if the run has one."""
        executor = self._executor
        if executor is None or position not in self._graph.plain:
            return step.run(view)
        loop = asyncio.get_running_loop()
        if isinstance(executor, ThreadPoolExecutor):
            # A thread can run in a copy of this context: current_step() works there.
            work = loop.run_in_executor(executor, contextvars.copy_context().run, step.run, view)
        else:
            # Processes and cluster workers get what can be pickled: the function and a
            # plain dict of its ctx.
            work = loop.run_in_executor(executor, step.run, dict(view))
        return _finish_elsewhere(work)

    async def _attempts(self, position: int, step: Step, view: ContextView) -> Any:
        """The general case: a timeout per attempt, and retries with backoff."""
        attempt = 1
        while True:
            token = CURRENT_STEP.set(
                StepContext(self, step.name, self._run_id, attempt, step.retries + 1)
            )
            try:
                result = self._call(position, step, view)
                if inspect.isawaitable(result):
                    if step.timeout is None:
                        result = await result
                    else:
                        result = await _with_timeout(result, step.name, attempt, step.timeout)
            except Exception as exc:
                if attempt > step.retries or not isinstance(exc, step.retry_on):
                    raise
                failure = exc
            else:
                return result
            finally:
                CURRENT_STEP.reset(token)
            delay = retry_wait(step, attempt, _jitter_draw())
            if self._observed:
                self._emit(StepRetried(self._run_id, step.name, attempt, failure, delay))
            await asyncio.sleep(delay)
            attempt += 1
            if self._observed:
                self._began_step(position, attempt)

    def _finished(self, position: int) -> None:
        self._tasks.pop(position, None)
        self._running -= 1
        wake = self._wake
        if wake is not None and (self._wake_each or not self._running) and not wake.done():
            wake.set_result(None)

    def _run_inline(self, position: int) -> None:
        """Call a plain-function step right here: no task, same outcome as one.

        A plain function runs inline on the loop thread whether or not it has a
        task of its own, so a task would only add overhead. It runs in a copy of
        the run's context, so context variables it sets stay its own.
        """
        step = self._graph.steps[position]
        if self._observed:
            self._began_step(position)
        view = ContextView(self._graph, position, self._context, self._outputs)
        current = StepContext(self, step.name, self._run_id, 1, 1)
        try:
            result = self._caller_context.copy().run(_call_as, current, step.run, view)
        except Exception as exc:  # noqa: BLE001 - a step's failure is data here
            self._landed_error(position, exc)
            return
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, ...
            self._landed_interrupt(exc)
            return
        if inspect.isawaitable(result):
            # A plain function that returned an awaitable: await it in a task after all.
            task = asyncio.get_running_loop().create_task(self._await_returned(position, result))
            self._tasks[position] = task
            self._running += 1
            return
        self._landed_result(position, result)

    async def _await_returned(self, position: int, awaitable: Any) -> None:
        try:
            result = await awaitable
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a step's failure is data here
            self._landed_error(position, exc)
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, ...
            self._landed_interrupt(exc)
        else:
            self._landed_result(position, result)
        finally:
            self._finished(position)

    def _cancel_running(self) -> None:
        self._cancelling = True
        for position, task in list(self._tasks.items()):
            if task.done():
                continue
            task.cancel()
            task.add_done_callback(partial(self._finished_unstarted, position))

    def _finished_unstarted(self, position: int, task: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never runs its body, which would have
        # said it finished (and taken it out of _tasks).
        if self._tasks.get(position) is task:
            self._finished(position)

    # --- waiting --------------------------------------------------------------------------

    async def _run_lone(self, position: int) -> None:
        """A batch of one async step: run it right here, in a context of its own.

        Nothing runs beside it, so a task would only add its cost (several loop
        iterations per step on a chain). `_InContext` gives the step what a task
        would: a copy of the run's context, so context variables it sets stay its
        own. Only `asyncio.current_task()` differs: it is the run's task.
        """
        self._running += 1
        if self._observed:
            self._began_step(position)
        this = self._task
        before = 0 if this is None else this.cancelling()
        try:
            await _InContext(self._step_task(position), self._caller_context.copy())
        except asyncio.CancelledError as exc:
            if this is not None and this.cancelling():  # run() itself was cancelled
                self._interrupt = self._interrupt or exc
        else:
            if this is not None and this.cancelling() > before and self._interrupt is None:
                # Cancelled while a step that cannot be interrupted (one in an executor)
                # finished anyway: its output is recorded, then the cancellation goes on.
                self._interrupt = asyncio.CancelledError()

    async def _wait(self) -> None:
        """Wait until a step finishes (or, in plain batch mode, all of them)."""
        loop = asyncio.get_running_loop()
        self._wake = loop.create_future()
        try:
            await self._wake
        except asyncio.CancelledError as exc:
            # run() itself was cancelled (or Ctrl-C reached run_sync): stop every step,
            # keep everything that finished, and let the cancellation out afterwards.
            self._interrupt = self._interrupt or exc
            self._cancel_running()
            self._wake_each = False
            while self._running:
                self._wake = loop.create_future()
                await wait_through(self._wake)  # cancelled again meanwhile: on record
        finally:
            self._wake = None
        if not self._running:
            self._cancelling = False
