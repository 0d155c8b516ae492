"""Running one step: its function called inline, in a task, or in an executor.

`Attempts` knows how to call a step and get its output: with ``current_step()``
set, each attempt under its timeout, retries with backoff, plain functions in
the run's executor; a map's items (through `executionkit._run._map.drive`), an ask
step's question and a sub-workflow (through `ChildRuns`) too. It sorts how the
step ended (`caught`) and hands that to the run's `Landing.ended`; what happens
then (recording, failure policy) is the run's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._ledger import ZERO
from executionkit._define._context import ContextView
from executionkit._define._step import retry_wait
from executionkit._define._step_kinds import MapStep
from executionkit._run._aio import wait_through
from executionkit._run._carry import Carried, identity_now, unwrap
from executionkit._run._map import drive
from executionkit._run._outcome import UNFINISHED, VALUE, Unfinished, caught
from executionkit._run._step_context import CURRENT_STEP, StepContext
from executionkit.events import ItemStarted, StepRetried, StepStarted

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator, Mapping
    from concurrent.futures import Executor

    from executionkit._define._graph import Graph
    from executionkit._define._step import Step
    from executionkit._record._ledger import Ledger
    from executionkit._record._record import Record
    from executionkit._run._announcer import Announcer
    from executionkit._run._carry import Identity
    from executionkit._run._checkpointer import Checkpointer
    from executionkit._run._children import ChildRuns
    from executionkit._run._map import MapRun
    from executionkit._run._outcome import Ending, Landing
    from executionkit._run._step_host import StepHost


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


async def _finish_elsewhere(
    work: asyncio.Future[Any], carried: tuple[Ledger, Identity] | None = None
) -> Any:
    """Await work running in an executor, which a cancellation cannot stop.

    A thread or a worker process cannot be interrupted, so run() must not return
    while it still runs: wait for it even if cancelled. If it completed, its output
    is returned (and so recorded and checkpointed: it was paid for); otherwise the
    cancellation goes on. Work in another process (``carried``) brings back the
    usage it reported, booked in the ledger first, whatever the outcome.
    """
    cancelled = await wait_through(work)
    if carried is not None and not work.cancelled():
        if cancelled and work.exception() is not None:
            with contextlib.suppress(Exception):
                unwrap(work, *carried)  # books what it spent
            raise asyncio.CancelledError
        return unwrap(work, *carried)
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


class Attempts:
    """Runs the steps of one run and tells the run how each ended."""

    __slots__ = (
        "_announcer",
        "_caller_context",
        "_checkpointer",
        "_children",
        "_context",
        "_executor",
        "_graph",
        "_host",
        "_landing",
        "_ledger",
        "_maps",
        "_outputs",
        "_pending",
        "_record",
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
        host: StepHost,
        checkpointer: Checkpointer,
        executor: Executor | None,
        announcer: Announcer,
        caller_context: contextvars.Context,
        landing: Landing,
        maps: MapRun,
        children: ChildRuns,
        pending: Mapping[str, object],
        record: Record,
    ) -> None:
        """Run steps of ``graph`` reading ``context`` and the recorded ``outputs``.

        ``pending`` holds the questions asked and not answered yet (an ask step
        with one there does not ask again).
        """
        self._graph = graph
        self._context = context
        self._outputs = outputs
        self._run_id = run_id
        self._host = host
        self._checkpointer = checkpointer
        self._executor = executor
        self._announcer = announcer
        self._caller_context = caller_context
        self._landing = landing
        self._maps = maps
        self._children = children
        self._pending = pending
        # Every attempt opens a spend in the ledger; the record counts what it cost.
        self._record = record
        self._ledger: Ledger = record.ledger
        # Steps that are not called as they are: maps (per item), asks (a question) and
        # sub-workflows (a child run).
        self._special = graph.maps | graph.asks | graph.workflows

    async def task(self, position: int, returned: Any = None) -> None:
        """The body of a step's task (or of a lone step): run it, then land how it ended.

        ``returned``, when given, is the awaitable a plain step returned when it
        was called inline: it is awaited instead of calling the step again.
        """
        landing = self._landing
        step = self._graph.steps[position]
        run: Any = step.run  # a function here, but for sub-workflows (in _special)
        view = ContextView(self._graph, position, self._context, self._outputs)
        ending: Ending = VALUE
        result: Any
        try:
            if position in self._special:
                result = await self._special_kind(position, step, view)
                if type(result) is Unfinished:
                    ending = UNFINISHED
            elif returned is not None:
                result = await returned
            elif step.retries or step.timeout is not None:
                result = await self._attempts(
                    step, partial(self._call, position, step, view), StepContext, ()
                )
                if type(result) is Unfinished:
                    ending = UNFINISHED  # the budget stopped its retries
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
        except BaseException as exc:  # noqa: BLE001 - sorted by caught(), the one ladder
            try:
                ending, result = caught(exc, f"step {step.name!r}", cancelling=landing.cancelling)
            except BaseException:
                self._record.charge(step.name, None, "cancelled")  # spent all the same
                landing.finished(position)
                raise
        if ending == VALUE and position not in self._special:
            landing.returned(position, result)  # the common ending, in one call
            return
        try:
            landing.ended(position, ending, result)
        finally:
            landing.finished(position)

    async def _special_kind(self, position: int, step: Step, view: ContextView) -> Any:
        """An ask step's question, a map's `MapDone`, a child's outputs, or `Unfinished`."""
        graph = self._graph
        run: Any = step.run
        if position in graph.asks:
            if step.name in self._pending:
                return Unfinished(f"step {step.name!r} waits for an answer")
            return run(view)
        if position in graph.maps:
            return await self._map(position, step, view)
        return await self._children.run(step.name, run, view)

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
        ending: Ending = VALUE
        try:
            result = self._caller_context.copy().run(_call_as, current, step.run, view)
        except BaseException as exc:  # noqa: BLE001 - sorted by caught(), the one ladder
            ending, result = caught(exc, f"step {step.name!r}")
        else:
            if inspect.isawaitable(result):
                return asyncio.get_running_loop().create_task(self.task(position, result))
        landing.ended(position, ending, result)
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
            # leading arguments and a plain dict of its ctx; what it spends comes back.
            identity = identity_now()
            if identity is not None:
                run = Carried(run, identity)
            work = loop.run_in_executor(executor, partial(run, *leading, dict(view)))
            if identity is not None:
                return _finish_elsewhere(work, (self._ledger, identity))
        return _finish_elsewhere(work)

    async def _map(self, position: int, step: Step, view: ContextView) -> Any:
        """Run the items of the map step at ``position`` (see `executionkit._run._map.drive`)."""
        assert isinstance(step, MapStep)  # noqa: S101 - Graph.maps holds only those
        item = partial(self._item, position, step, view)
        graph = self._graph
        children = position in graph.workflows
        plain = self._executor is None and position in graph.plain_items
        return await drive(
            position, step, view, item, self._maps, takes_slots=not children, plain=plain
        )

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
            return await self._children.run(step.name, step.run, context, key)  # type: ignore[arg-type]
        if (
            step.retries
            or step.timeout is not None
            or (self._executor is not None and position in self._graph.plain_items)
        ):
            return await self._attempts(
                step, partial(self._call_item, position, step, view, item), StepContext, (key,)
            )
        # The common case, kept lean (no coroutine of its own): one attempt, nothing to time.
        run: Any = step.run
        token = CURRENT_STEP.set((self._host, step.name, self._run_id, 1, 1, key))
        try:
            result = run(item, view)
            if type(result) is CoroutineType or inspect.isawaitable(result):
                result = await result
        finally:
            CURRENT_STEP.reset(token)
        return result

    async def _attempts(  # noqa: C901, PLR0912 - every ending of an attempt, in one loop
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
        name = step.name
        key = item[0] if item else None
        what = f"step {name!r}" + (f", item {key!r}," if item else "")
        ledger = self._ledger
        record = self._record
        ledger.begin(name, key, attempt)
        while True:
            token = CURRENT_STEP.set(
                make(self._host, name, self._run_id, attempt, step.retries + 1, *item)
            )
            try:
                result = call()
                if inspect.isawaitable(result):
                    if step.timeout is None:
                        result = await result
                    else:
                        result = await _with_timeout(result, what, attempt, step.timeout)
            except Exception as exc:
                # The attempt's usage counts now, in every ending but success (counted
                # with its output): the last failure's as the retried ones'.
                timed_out = (
                    step.timeout is not None
                    and type(exc) is TimeoutError
                    and str(exc) == f"{what} attempt {attempt} timed out after {step.timeout:g} s"
                )
                wasted = record.charge(name, key, "timeout" if timed_out else "failed")
                if attempt > step.retries or not isinstance(exc, step.retry_on):
                    raise
                failure = exc
            except BaseException:
                record.charge(name, key, "cancelled")
                raise
            else:
                return result
            finally:
                CURRENT_STEP.reset(token)
            if record.over_budget():
                # The budget stops the next attempt, not only the next step.
                return Unfinished(f"{what} the budget was reached before attempt {attempt + 1}")
            # Open before the backoff: a checkpoint meanwhile lists it as in flight.
            ledger.begin(name, key, attempt + 1)
            delay = retry_wait(step, attempt, _jitter_draw())
            announcer = self._announcer
            if announcer.observed:
                announcer.emit(
                    StepRetried(
                        self._run_id, name, attempt, failure, delay, item=key, usage=wasted
                    )
                )
            if wasted != ZERO:
                # What the failed attempt spent is saved before the next one starts.
                self._checkpointer.save_later()
            await asyncio.sleep(delay)
            attempt += 1
            if announcer.observed:
                announcer.emit(
                    ItemStarted(self._run_id, name, item[0], attempt)
                    if item
                    else StepStarted(self._run_id, name, attempt)
                )
