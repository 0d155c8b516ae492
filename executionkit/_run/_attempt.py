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
import math
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
from executionkit._run._threads import PlainThreads
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


class Abandoned(asyncio.CancelledError):
    """A cancellation that left a plain function running in its thread past the grace.

    Its attempt may still be spending: the run's last checkpoint lists it as in
    flight (a resume books its usage as unknown and runs it again).
    """


class Expired(Exception):  # noqa: N818 - internal, turned into the attempt's TimeoutError
    """A plain function in a thread ran past its step's timeout and was abandoned."""


async def _expiring(awaitable: Any, what: str, attempt: int, seconds: float) -> Any:
    """Await work elsewhere that times itself out (`Expired`) as `_with_timeout` would."""
    try:
        return await awaitable
    except Expired:
        msg = f"{what} attempt {attempt} timed out after {seconds:g} s"
        raise TimeoutError(msg) from None


def _nobodys(work: asyncio.Future[Any]) -> None:
    """The outcome of abandoned work: read, so that asyncio does not report it, and dropped."""
    if not work.cancelled():
        work.exception()


async def _wait_for(work: asyncio.Future[Any], grace: float, limit: float | None) -> bool:
    """Wait for ``work`` up to ``limit`` seconds, and up to ``grace`` after a cancellation.

    Returns whether a cancellation arrived; ``work`` may still run when this returns.
    """
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit
    cancelled = False
    while not work.done():
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            break
        try:
            await asyncio.wait((work,), timeout=left)
        except asyncio.CancelledError:
            if not cancelled:
                cancelled = True
                end = loop.time() + grace
                deadline = end if deadline is None else min(deadline, end)
    return cancelled


async def _shielded(work: asyncio.Future[Any]) -> bool:
    """Wait for ``work`` to end, or for a cancellation: whether one arrived.

    ``work`` itself is never cancelled here; what it raised is left in it.
    """
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        # True but for work cancelled itself, which the caller reads as such.
        return not (work.done() and work.cancelled())
    except BaseException:  # noqa: BLE001 - the function's own error, read from work
        return False
    return False


async def _finish_elsewhere(
    work: asyncio.Future[Any],
    grace: float,
    limit: float | None = None,
    carried: tuple[Ledger, Identity] | None = None,
) -> Any:
    """Await work running in an executor, which a cancellation cannot stop.

    A thread or a worker process cannot be interrupted: once cancelled, wait up
    to ``grace`` seconds for it. If it completed, its output is returned (and
    so recorded and checkpointed: it was paid for); if it did not, it is
    abandoned (`Abandoned`); otherwise the cancellation goes on. Past
    ``limit`` seconds (the step's timeout), it is abandoned too (`Expired`).
    Work in another process (``carried``) brings back the usage it reported,
    booked in the ledger first, whatever the outcome.
    """
    began = 0.0 if limit is None else asyncio.get_running_loop().time()
    if limit is None and grace == math.inf:
        cancelled = await wait_through(work)
    else:
        if limit is None:
            cancelled = await _shielded(work)  # the common case, lean
            if cancelled and not work.done():
                await _wait_for(work, grace, grace)
        else:
            cancelled = await _wait_for(work, grace, limit)
        if not work.done():
            work.add_done_callback(_nobodys)
            if cancelled:
                raise Abandoned
            raise Expired
    if carried is not None and not work.cancelled():
        if cancelled and work.exception() is not None:
            with contextlib.suppress(Exception):
                unwrap(work, *carried)  # books what it spent
            raise asyncio.CancelledError
        return unwrap(work, *carried)
    if cancelled and (work.cancelled() or work.exception() is not None):
        raise asyncio.CancelledError
    result = work.result()
    if type(result) is CoroutineType or inspect.isawaitable(result):
        # A plain function that returned an awaitable (a lambda calling an async
        # client): the thread only made it; it is awaited here, on the loop.
        return await _awaited(result, None if limit is None else began + limit)
    return result


async def _awaited(awaitable: Any, deadline: float | None) -> Any:
    """Await what a plain function returned, until ``deadline`` (loop time) if given."""
    if deadline is None:
        return await awaitable
    try:
        async with asyncio.timeout_at(deadline) as scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise Expired from None
        raise


def _stopped(record: Record, name: str, key: str | None, attempt: int, exc: BaseException) -> None:
    """An attempt was stopped (``exc``): count what it spent; keep one abandoned listed."""
    record.charge(name, key, "cancelled")
    if type(exc) is Abandoned:
        record.abandon(name, key, attempt)


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
        "_away",
        "_caller_context",
        "_checkpointer",
        "_children",
        "_context",
        "_executor",
        "_grace",
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
        executor: Executor,
        grace: float,
        announcer: Announcer,
        caller_context: contextvars.Context,
        landing: Landing,
        maps: MapRun,
        children: ChildRuns,
        pending: Mapping[str, object],
        record: Record,
    ) -> None:
        """Run steps of ``graph`` reading ``context`` and the recorded ``outputs``.

        Plain functions run in ``executor`` (but those marked inline); once the
        run stops, it waits ``grace`` seconds for them before abandoning them.
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
        self._grace = grace
        # Steps and maps whose plain functions run in the executor.
        self._away = (graph.plain | graph.plain_items) - graph.on_loop
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
                    step,
                    partial(self._call, position, step, view),
                    StepContext,
                    (),
                    away=position in self._away,
                )
                if type(result) is Unfinished:
                    ending = UNFINISHED  # the budget stopped its retries
            else:
                # The common case, kept lean (no coroutine of its own): one attempt,
                # nothing to time.
                token = CURRENT_STEP.set((self._host, step.name, self._run_id, 1, 1))
                try:
                    result = (
                        self._elsewhere(run, (), view, None)
                        if position in self._away
                        else run(view)
                    )
                    if type(result) is CoroutineType or inspect.isawaitable(result):
                        result = await result
                finally:
                    CURRENT_STEP.reset(token)
        except BaseException as exc:  # noqa: BLE001 - sorted by caught(), the one ladder
            try:
                ending, result = caught(exc, f"step {step.name!r}", cancelling=landing.cancelling)
            except BaseException:
                _stopped(self._record, step.name, None, 1, exc)  # spent all the same
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
        """Call the step's function; a plain one goes to the executor (not if inline)."""
        run: Any = step.run  # a function: sub-workflows never get here
        if position not in self._away:
            return run(view)
        return self._elsewhere(run, (), view, step.timeout)

    def _elsewhere(
        self, run: Any, leading: tuple[Any, ...], view: ContextView, timeout: float | None
    ) -> Any:
        """Call ``run(*leading, ctx)`` in the run's executor; await it with `_finish_elsewhere`."""
        executor = self._executor
        loop = asyncio.get_running_loop()
        if type(executor) is PlainThreads:
            # A thread can run in a copy of this context: current_step() works there.
            context = contextvars.copy_context()
            work = executor.run_soon(loop, context.run, run, *leading, view)
        elif isinstance(executor, ThreadPoolExecutor):
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
                return _finish_elsewhere(work, self._grace, timeout, (self._ledger, identity))
        return _finish_elsewhere(work, self._grace, timeout)

    async def _map(self, position: int, step: Step, view: ContextView) -> Any:
        """Run the items of the map step at ``position`` (see `executionkit._run._map.drive`)."""
        assert isinstance(step, MapStep)  # noqa: S101 - Graph.maps holds only those
        item = partial(self._item, position, step, view)
        graph = self._graph
        children = position in graph.workflows
        plain = position in graph.on_loop
        return await drive(
            position, step, view, item, self._maps, takes_slots=not children, plain=plain
        )

    def _call_item(self, position: int, step: Step, view: ContextView, item: Any) -> Any:
        """Call a map's function on one item; a plain one goes to the executor (not if inline)."""
        run: Any = step.run
        if position not in self._away:
            return run(item, view)
        return self._elsewhere(run, (item,), view, step.timeout)

    async def _item(
        self, position: int, step: Step, view: ContextView, key: str, item: Any
    ) -> Any:
        """Run one item of a map: its attempts, each with its `StepContext`."""
        if position in self._graph.workflows:
            context = {**view, "item": item, "item_key": key}
            return await self._children.run(step.name, step.run, context, key)  # type: ignore[arg-type]
        away = position in self._away
        if step.retries or step.timeout is not None or away:
            return await self._attempts(
                step,
                partial(self._call_item, position, step, view, item),
                StepContext,
                (key,),
                away=away,
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
        *,
        away: bool,
    ) -> Any:
        """The general case: a timeout per attempt, and retries with backoff.

        ``call()`` makes one attempt; ``item`` is ``(key,)`` in a map item.
        ``away``: the attempt runs in the executor, and times itself out.
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
                    elif away:
                        result = await _expiring(result, what, attempt, step.timeout)
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
            except BaseException as exc:
                _stopped(record, name, key, attempt, exc)
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
            # What the failed attempt spent is saved (with the next one listed in flight)
            # before the next one starts, the backoff running meanwhile.
            saved = (
                self._checkpointer.save_soon(asyncio.get_running_loop())
                if wasted != ZERO
                else None
            )
            await asyncio.sleep(delay)
            if saved is not None:
                with contextlib.suppress(Exception):  # checkpoint_fn failed: the run stops
                    await saved
            if self._maps.policies.stopping:
                # checkpoint_fn failed, or the run was interrupted: nothing starts any
                # more, this attempt neither (it spent nothing: no row).
                record.charge(name, key, "cancelled")
                return Unfinished(f"{what} the run stopped before attempt {attempt + 1}")
            attempt += 1
            if announcer.observed:
                announcer.emit(
                    ItemStarted(self._run_id, name, item[0], attempt)
                    if item
                    else StepStarted(self._run_id, name, attempt)
                )
