"""Running one step: its function called inline, in a task, or in an executor.

`Attempts` knows how to call a step and get its output: with ``current_step()``
set, each attempt under its timeout, retries with backoff, plain functions in
the run's executor. It returns the output or raises what the step raised; what
happens to either (recording, failure policy) is the run's business.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Protocol

from executionkit._aio import wait_through
from executionkit._children import ChildLanding, run_child
from executionkit._context import ContextView
from executionkit._map import ItemLanding, MapDone, Unfinished, drive
from executionkit._step import retry_wait
from executionkit._step_context import CURRENT_STEP, StepContext
from executionkit._step_kinds import MapStep
from executionkit.events import ItemStarted, StepRetried, StepStarted

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator
    from concurrent.futures import Executor

    from executionkit._announcer import Announcer
    from executionkit._checkpointer import Checkpointer
    from executionkit._graph import Graph
    from executionkit._step import Step


def _call_as(current: StepContext, run: Any, view: ContextView) -> Any:
    CURRENT_STEP.set(current)  # inside a copied context: undone when the copy is dropped
    return run(view)


async def _with_timeout(awaitable: Any, what: str, attempt: int, seconds: float) -> Any:
    try:
        async with asyncio.timeout(seconds) as scope:
            return await awaitable
    except TimeoutError:
        if not scope.expired():
            raise  # the step's own TimeoutError, not ours
        msg = f"{what} attempt {attempt} timed out after {seconds:g} s"
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


def _jitter_draw() -> float:
    import random  # noqa: PLC0415 - only retrying steps pay for the import

    return random.random()  # noqa: S311 - jitter, not cryptography


class InContext:
    """Await a coroutine inside a given `contextvars.Context`, without a task.

    Each resumption of the coroutine runs through ``context.run``, exactly as a
    task created with that context would drive it; whatever it yields (the
    futures it waits on) passes through to the task awaiting this object.
    """

    __slots__ = ("_context", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        """Drive ``coro`` inside ``context``."""
        self._coro = coro
        self._context = context

    def __await__(self) -> Generator[Any, Any, Any]:
        """Run the coroutine to its end, one resumption at a time, inside the context."""
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


class KindLanding(ItemLanding, ChildLanding, Protocol):
    """Where map items, child checkpoints and questions go (`executionkit._kinds.Kinds`)."""

    def asking(self, position: int) -> bool:
        """Whether the ask step at ``position`` must ask (it has no pending question)."""
        ...

    def landed_question(self, position: int, question: object) -> None: ...


class Landing(Protocol):
    """What a run is told about each step: how it ended, and that it is over."""

    cancelling: bool
    """Whether the run is cancelling its steps (a CancelledError is then its own)."""

    def landed_result(self, position: int, result: Any) -> None: ...

    def landed_error(self, position: int, error: Exception) -> None: ...

    def landed_interrupt(self, error: BaseException) -> None: ...

    def landed_unfinished(self, position: int) -> None: ...

    def finished(self, position: int) -> None: ...


class Attempts:
    """Runs the steps of one run and tells the run how each ended."""

    __slots__ = (
        "_announcer",
        "_caller_context",
        "_context",
        "_executor",
        "_graph",
        "_host",
        "_kinds",
        "_landing",
        "_outputs",
        "_run_id",
        "_special",
    )

    def __init__(
        self,
        graph: Graph,
        *,
        context: dict[str, Any],
        outputs: dict[str, Any],
        run_id: str,
        host: Checkpointer,
        executor: Executor | None,
        announcer: Announcer,
        caller_context: contextvars.Context,
        landing: Landing,
        kinds: KindLanding,
    ) -> None:
        """Run steps of ``graph`` reading ``context`` and the recorded ``outputs``."""
        self._graph = graph
        self._context = context
        self._outputs = outputs
        self._run_id = run_id
        self._host = host
        self._executor = executor
        self._announcer = announcer
        self._caller_context = caller_context
        self._landing = landing
        self._kinds = kinds
        # Steps that are not called as they are: maps (per item) and asks (a question).
        self._special = graph.maps | graph.asks | graph.workflows

    async def task(self, position: int, returned: Any = None) -> None:  # noqa: C901, PLR0912
        """The body of a step's task (or of a lone step): run it, then land how it ended.

        ``returned``, when given, is the awaitable a plain step returned when it
        was called inline: it is awaited instead of calling the step again.
        """
        landing = self._landing
        step = self._graph.steps[position]
        run: Any = step.run  # a function here, but for sub-workflows (in _special)
        view = ContextView(self._graph, position, self._context, self._outputs)
        result: Any
        try:
            if position in self._special:
                graph = self._graph
                if position in graph.asks:
                    if self._kinds.asking(position):
                        self._kinds.landed_question(position, run(view))
                    return
                if position in graph.maps:
                    result = await self._map(position, step, view)
                else:
                    result = await run_child(self._kinds, position, run, view)
            elif returned is not None:
                result = await returned
            elif step.retries or step.timeout is not None:
                result = await self._attempts(
                    step, partial(self._call, position, step, view), StepContext, ()
                )
            else:
                # The common case, kept lean (no coroutine of its own): one attempt,
                # nothing to time.
                token = CURRENT_STEP.set((self._host, step.name, self._run_id, 1, 1))
                try:
                    executor = self._executor
                    result = run(view) if executor is None else self._call(position, step, view)
                    if type(result) is CoroutineType or inspect.isawaitable(result):
                        result = await result
                finally:
                    CURRENT_STEP.reset(token)
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if not landing.cancelling and (this is None or not this.cancelling()):
                # The step raised CancelledError itself: an interrupt, not a failure.
                name = step.name
                landing.landed_interrupt(asyncio.CancelledError(f"step {name!r} was cancelled"))
            raise
        except Exception as exc:  # noqa: BLE001 - a step's failure is data here
            if isinstance(exc, Unfinished):
                landing.landed_unfinished(position)
            else:
                landing.landed_error(position, exc)
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, ...
            # Raised inside a task they would tear through the event loop before the
            # completed outputs could be checkpointed; carried out as an interrupt instead.
            landing.landed_interrupt(exc)
        else:
            landing.landed_result(position, result)
        finally:
            landing.finished(position)

    def inline(self, position: int) -> asyncio.Task[None] | None:
        """Run a plain-function step right here, and land how it ended.

        A plain function runs on the loop thread whether or not it has a task of
        its own, so a task would only add overhead. It runs in a copy of the run's
        context, so the context variables it sets stay its own. One that returns
        an awaitable is awaited in a task after all, which is returned.
        """
        landing = self._landing
        step = self._graph.steps[position]
        view = ContextView(self._graph, position, self._context, self._outputs)
        current = StepContext(self._host, step.name, self._run_id, 1, 1)
        try:
            result = self._caller_context.copy().run(_call_as, current, step.run, view)
        except Exception as exc:  # noqa: BLE001 - a step's failure is data here
            landing.landed_error(position, exc)
            return None
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, ...
            landing.landed_interrupt(exc)
            return None
        if inspect.isawaitable(result):
            return asyncio.get_running_loop().create_task(self.task(position, result))
        landing.landed_result(position, result)
        return None

    def _call(self, position: int, step: Step, view: ContextView) -> Any:
        """Call the step's function; a plain one goes to the executor if the run has one."""
        run: Any = step.run  # a function: sub-workflows never get here
        if self._executor is None or position not in self._graph.plain:
            return run(view)
        return self._elsewhere(run, (), view)

    def _elsewhere(self, run: Any, leading: tuple[Any, ...], view: ContextView) -> Any:
        """Call ``run(*leading, ctx)`` in the run's executor; await it with `_finish_elsewhere`."""
        executor = self._executor
        loop = asyncio.get_running_loop()
        if isinstance(executor, ThreadPoolExecutor):
            # A thread can run in a copy of this context: current_step() works there.
            context = contextvars.copy_context()
            work = loop.run_in_executor(executor, context.run, run, *leading, view)
        else:
            # Processes and cluster workers get what can be pickled: the function, its
            # leading arguments and a plain dict of its ctx.
            work = loop.run_in_executor(executor, partial(run, *leading, dict(view)))
        return _finish_elsewhere(work)

    async def _map(self, position: int, step: Step, view: ContextView) -> MapDone:
        """Run the items of the map step at ``position`` (see `executionkit._map.drive`)."""
        assert isinstance(step, MapStep)  # noqa: S101 - Graph.maps holds only those
        item = partial(self._item, position, step, view)
        return await drive(position, step, view, item, self._kinds)

    def _call_item(self, position: int, step: Step, view: ContextView, item: Any) -> Any:
        """Call a map's function on one item; a plain one goes to the run's executor."""
        run: Any = step.run
        if self._executor is None or position not in self._graph.plain_items:
            return run(item, view)
        return self._elsewhere(run, (item,), view)

    async def _item(
        self, position: int, step: Step, view: ContextView, key: str, item: Any
    ) -> Any:
        """Run one item of a map: its attempts, each with its `StepContext`."""
        if position in self._graph.workflows:
            context = {**view, "item": item, "item_key": key}
            return await run_child(self._kinds, position, step.run, context, key)  # type: ignore[arg-type]
        return await self._attempts(
            step, partial(self._call_item, position, step, view, item), StepContext, (key,)
        )

    async def _attempts(
        self,
        step: Step,
        call: Callable[[], Any],
        make: Callable[..., StepContext],
        item: tuple[str, ...],
    ) -> Any:
        """The general case: a timeout per attempt, and retries with backoff.

        ``call()`` makes one attempt; ``item`` is ``(key,)`` in a map item.
        """
        attempt = 1
        what = f"step {step.name!r}" + (f", item {item[0]!r}," if item else "")
        while True:
            token = CURRENT_STEP.set(
                make(self._host, step.name, self._run_id, attempt, step.retries + 1, *item)
            )
            try:
                result = call()
                if inspect.isawaitable(result):
                    if step.timeout is None:
                        result = await result
                    else:
                        result = await _with_timeout(result, what, attempt, step.timeout)
            except Exception as exc:
                if attempt > step.retries or not isinstance(exc, step.retry_on):
                    raise
                failure = exc
            else:
                return result
            finally:
                CURRENT_STEP.reset(token)
            delay = retry_wait(step, attempt, _jitter_draw())
            announcer = self._announcer
            if announcer.observed:
                key = item[0] if item else None
                announcer.emit(
                    StepRetried(self._run_id, step.name, attempt, failure, delay, item=key)
                )
            await asyncio.sleep(delay)
            attempt += 1
            if announcer.observed:
                announcer.emit(
                    ItemStarted(self._run_id, step.name, item[0], attempt)
                    if item
                    else StepStarted(self._run_id, step.name, attempt)
                )
