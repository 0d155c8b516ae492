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

from executionkit import _clock
from executionkit._checkpoint._ledger import ZERO
from executionkit._define._context import ContextView
from executionkit._define._step import retry_wait
from executionkit._define._step_kinds import MapStep
from executionkit._limits import BACKOFF_FIRST, BACKOFF_MAX, rate_limit_of
from executionkit._run._aio import wait_through
from executionkit._run._carry import Carried, identity_now, unwrap
from executionkit._run._map import drive
from executionkit._run._outcome import UNFINISHED, VALUE, Unfinished, caught
from executionkit._run._step_context import CURRENT_STEP, StepContext
from executionkit._run._threads import PlainThreads
from executionkit._run._timers import wait
from executionkit._types import PatternResult, TokenUsage
from executionkit.events import ItemStarted, StepRetried, StepStarted, WaitingForLimit

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator, Mapping
    from concurrent.futures import Executor

    from executionkit._define._graph import Graph
    from executionkit._define._step import Step
    from executionkit._limits import Ticket
    from executionkit._record._ledger import Ledger
    from executionkit._record._record import Record
    from executionkit._run._announcer import Announcer
    from executionkit._run._carry import Identity
    from executionkit._run._checkpointer import Checkpointer
    from executionkit._run._children import ChildRuns
    from executionkit._run._limiter import Limiter
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


def _stopped(
    record: Record, name: str, key: str | None, attempt: int, exc: BaseException
) -> TokenUsage:
    """An attempt was stopped (``exc``): count what it spent; keep one abandoned listed."""
    if type(exc) is Abandoned:
        record.abandon(name, key, attempt)  # first: it still runs, so it has not ended
    return record.charge(name, key, "cancelled")


_STARTING: contextvars.ContextVar[tuple[Limiter, Ticket] | None] = contextvars.ContextVar(
    "executionkit_starting", default=None
)
"""The admission of a plain function's attempt, started by the thread that calls it."""


def _started_here(run: Any, *arguments: Any) -> Any:
    """Call ``run`` in a worker thread, its attempt counted in its limit from now.

    A thread may start a while after the loop handed it the call: counted
    from the hand-off, a burst of calls could reach the provider later than
    the window says.
    """
    starting = _STARTING.get()
    if starting is not None:
        starting[0].start(starting[1])
    return run(*arguments)


def _tokens(usage: TokenUsage) -> int:
    return usage.input_tokens + usage.output_tokens


RATE_LIMITED_MAX = 10
"""How many attempts of one step (or map item) a 429 may end without spending a retry.

Past it, a 429 is an ordinary failure: ``retry_on`` and ``retries`` decide.
"""


def _attempt_tokens(ledger: Ledger, name: str, key: str | None, result: Any) -> int:
    """The tokens the attempt of ``name`` (item ``key``) now ending reported, ``result``'s too."""
    tokens = 0
    spend = ledger.open.get((name, key))
    if spend is not None and type(spend) is not int:
        for _model, usage in spend:  # type: ignore[union-attr]
            tokens += usage.input_tokens + usage.output_tokens
    if isinstance(result, PatternResult):
        tokens += result.cost.input_tokens + result.cost.output_tokens
    return tokens


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
        "_began",
        "_caller_context",
        "_checkpointer",
        "_children",
        "_context",
        "_executor",
        "_first_began",
        "_general_steps",
        "_grace",
        "_graph",
        "_host",
        "_landing",
        "_ledger",
        "_limiter",
        "_maps",
        "_outputs",
        "_pending",
        "_record",
        "_run_id",
        "_sleep_up_to",
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
        limiter: Limiter | None = None,
        sleep_up_to: float = 60.0,
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
        # When each attempt running now started (format 5's ``attempts``): noted as it is called.
        self._began = record.began
        self._first_began = record.first_began
        # Steps that are not called as they are: maps (per item), asks (a question),
        # waits (a time) and sub-workflows (a child run).
        self._special = graph.maps | graph.asks | graph.waits | graph.workflows
        # Waits due within this many seconds are slept through (`_timers.wait`).
        self._sleep_up_to = sleep_up_to
        # Steps whose attempts are timed, retried or limited (`_attempts`).
        self._general_steps = frozenset(
            p
            for p, step in enumerate(graph.steps)
            if step.retries or step.timeout is not None or step.limit is not None
        )
        # The limits steps draw on (`Step.limit`), or None when the run has none.
        self._limiter = limiter

    async def task(  # noqa: C901, PLR0912 - every way a step runs, in its one task
        self, position: int, returned: Any = None, limited: Exception | None = None
    ) -> None:
        """The body of a step's task (or of a lone step): run it, then land how it ended.

        ``returned``, when given, is the awaitable a plain step returned when it
        was called inline: it is awaited instead of calling the step again.
        ``limited``: the 429 its first attempt, called inline, raised.
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
            elif returned is not None:
                result = await returned
            elif position in self._general_steps or limited is not None:
                result = await self._general(position, step, view, limited)
            else:
                # The common case, kept lean (no coroutine of its own): one attempt,
                # nothing to time.
                token = CURRENT_STEP.set((self._host, step.name, self._run_id, 1, 1))
                self._first_began[position] = _clock.wall()
                try:
                    result = (
                        self._elsewhere(run, (), view, None)
                        if position in self._away
                        else run(view)
                    )
                    if type(result) is CoroutineType or inspect.isawaitable(result):
                        result = await result
                except Exception as exc:
                    if not rate_limit_of(exc)[0]:
                        raise
                    limited = exc  # a 429: tried again, without spending a retry
                finally:
                    CURRENT_STEP.reset(token)
                if limited is not None:
                    result = await self._general(position, step, view, limited)
            if type(result) is Unfinished:
                ending = UNFINISHED  # a map's items left, a question, the budget
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

    async def _general(
        self, position: int, step: Step, view: ContextView, limited: Exception | None
    ) -> Any:
        """A step's attempts under its timeout, retries and limit (`_attempts`)."""
        return await self._attempts(
            step,
            partial(self._call, position, step, view),
            StepContext,
            (),
            away=position in self._away,
            first=limited,
        )

    async def _special_kind(self, position: int, step: Step, view: ContextView) -> Any:
        """A question, a map's `MapDone`, a wait's None, a child's outputs, or `Unfinished`."""
        graph = self._graph
        run: Any = step.run
        if position in graph.asks:
            if step.name in self._pending:
                return Unfinished(f"step {step.name!r} waits for an answer")
            return run(view)
        if position in graph.maps:
            return await self._map(position, step, view)
        if position in graph.waits:
            return await wait(step, view, self._record, self._checkpointer, self._sleep_up_to)  # type: ignore[arg-type]
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
        self._first_began[position] = _clock.wall()
        try:
            result = self._caller_context.copy().run(_call_as, current, step.run, view)
        except BaseException as exc:  # noqa: BLE001 - sorted by caught(), the one ladder
            if isinstance(exc, Exception) and rate_limit_of(exc)[0]:
                # A 429: tried again in a task, without spending a retry.
                return asyncio.get_running_loop().create_task(self.task(position, None, exc))
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
            if _STARTING.get() is not None:
                leading = (run, *leading)
                run = _started_here
            work = executor.run_soon(loop, context.run, run, *leading, view)
        elif isinstance(executor, ThreadPoolExecutor):
            context = contextvars.copy_context()
            if _STARTING.get() is not None:
                leading = (run, *leading)
                run = _started_here
            work = loop.run_in_executor(executor, context.run, run, *leading, view)
        else:
            starting = _STARTING.get()
            if starting is not None:
                starting[0].start(starting[1])  # another process: counted from the hand-off
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
        self,
        position: int,
        step: Step,
        view: ContextView,
        key: str,
        item: Any,
        *,
        ticket: Ticket | None = None,
    ) -> Any:
        """Run one item of a map: its attempts, each with its `StepContext`.

        ``ticket``: the first attempt's admission by the item's limit, taken by
        the map's driver.
        """
        if position in self._graph.workflows:
            context = {**view, "item": item, "item_key": key}
            return await self._children.run(step.name, step.run, context, key)  # type: ignore[arg-type]
        away = position in self._away
        limiter = self._limiter if step.limit is not None else None
        if (
            step.retries
            or step.timeout is not None
            or away
            or (limiter is not None and ticket is None)
        ):
            call = partial(self._call_item, position, step, view, item)
            return await self._attempts(step, call, StepContext, (key,), away=away, ticket=ticket)
        # The common case, kept lean (no coroutine of its own): one attempt, nothing to
        # time, admitted by its limit (if any) already.
        run: Any = step.run
        token = CURRENT_STEP.set((self._host, step.name, self._run_id, 1, 1, key))
        if ticket is not None:
            limiter.start_soon(ticket)  # type: ignore[union-attr]  # a ticket comes from one
        self._began[step.name, key] = (1, _clock.wall())
        try:
            result = run(item, view)
            if type(result) is CoroutineType or inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            if not rate_limit_of(exc)[0]:
                if ticket is not None:
                    self._admitted_ended(ticket, step.name, key, None)
                raise
            limited = exc  # a 429: tried again, without spending a retry
        else:
            if ticket is not None:
                self._admitted_ended(ticket, step.name, key, result)
            return result
        finally:
            CURRENT_STEP.reset(token)
        call = partial(self._call_item, position, step, view, item)
        return await self._attempts(
            step, call, StepContext, (key,), away=away, ticket=ticket, first=limited
        )

    def _admitted_ended(self, ticket: Ticket, name: str, key: str | None, result: Any) -> None:
        """The attempt of ``ticket`` ended on the loop: what it reported counts in its limit."""
        counts = ticket.window.limit.tokens is not None
        spent = _attempt_tokens(self._ledger, name, key, result) if counts else 0
        self._limiter.end_soon(ticket, spent)  # type: ignore[union-attr]  # a ticket comes from one

    async def _attempts(  # noqa: C901, PLR0912, PLR0915 - every ending of an attempt, in one loop
        self,
        step: Step,
        call: Callable[[], Any],
        make: Callable[..., StepContext],
        item: tuple[str, ...],
        *,
        away: bool,
        ticket: Ticket | None = None,
        first: Exception | None = None,
    ) -> Any:
        """The general case: a timeout per attempt, retries with backoff, limits and 429s.

        ``call()`` makes one attempt; ``item`` is ``(key,)`` in a map item.
        ``away``: the attempt runs in the executor, and times itself out.
        ``ticket``: the first attempt's admission by the step's limit (a map's
        driver takes it); without one, each attempt waits for its own.
        ``first``: the 429 the first attempt raised, made on the lean path (its
        usage, if any, is open in the ledger as that attempt's).
        """
        attempt = 1
        name = step.name
        key = item[0] if item else None
        what = f"step {name!r}" + (f", item {key!r}," if item else "")
        ledger = self._ledger
        record = self._record
        began = self._began
        limiter = self._limiter if step.limit is not None else None
        failed = 0  # attempts that spent one of the retries
        limited = 0  # attempts answered 429, which spend none
        if first is None:
            ledger.begin(name, key, attempt)
        while True:
            if limiter is not None and ticket is None:
                ticket = await self._admitted(limiter, step, key)
            token = CURRENT_STEP.set(
                make(self._host, name, self._run_id, attempt, step.retries + 1, *item)
            )
            starting = None
            if limiter is not None and ticket is not None:
                if away:
                    starting = _STARTING.set((limiter, ticket))  # the thread starts it
                else:
                    limiter.start(ticket)
            try:
                if first is not None:
                    made, first = first, None
                    raise made  # noqa: TRY301 - the lean path's attempt, ended as it ended
                began[name, key] = (attempt, _clock.wall())
                result = call()
                if starting is not None:
                    _STARTING.reset(starting)
                    starting = None
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
                too_many, after = rate_limit_of(exc)
                too_many = too_many and limited < RATE_LIMITED_MAX
                if too_many:
                    wasted = record.charge(name, key, "rate_limited")
                    limited += 1
                    if limiter is not None and ticket is not None:
                        limiter.done(ticket, _tokens(wasted), limited=True)
                        delay = limiter.pause(step.limit, after)  # type: ignore[arg-type]
                    else:
                        delay = (
                            after
                            if after is not None
                            else min(BACKOFF_FIRST * 2 ** (limited - 1), BACKOFF_MAX)
                        )
                else:
                    timed_out = (
                        step.timeout is not None
                        and type(exc) is TimeoutError
                        and str(exc)
                        == f"{what} attempt {attempt} timed out after {step.timeout:g} s"
                    )
                    wasted = record.charge(name, key, "timeout" if timed_out else "failed")
                    if limiter is not None and ticket is not None:
                        limiter.done(ticket, _tokens(wasted))
                    if failed >= step.retries or not isinstance(exc, step.retry_on):
                        raise
                    failed += 1
                    delay = retry_wait(step, failed, _jitter_draw())
                ticket = None
                failure = exc
            except BaseException as exc:
                spent = _stopped(record, name, key, attempt, exc)
                if limiter is not None and ticket is not None:
                    limiter.done(ticket, _tokens(spent))
                raise
            else:
                if limiter is not None and ticket is not None:
                    limiter.done(ticket, _attempt_tokens(ledger, name, key, result))
                return result
            finally:
                CURRENT_STEP.reset(token)
                if starting is not None:
                    _STARTING.reset(starting)
            if record.over_budget():
                # The budget stops the next attempt, not only the next step.
                return Unfinished(f"{what} the budget was reached before attempt {attempt + 1}")
            # Open before the backoff: a checkpoint meanwhile lists it as in flight.
            ledger.begin(name, key, attempt + 1)
            announcer = self._announcer
            if announcer.observed:
                announcer.emit(
                    StepRetried(
                        self._run_id,
                        name,
                        attempt,
                        failure,
                        delay,
                        item=key,
                        usage=wasted,
                        dollars=record.priced(),
                    )
                )
            # What the failed attempt spent is saved (with the next one listed in flight)
            # before the next one starts, the backoff running meanwhile.
            saved = (
                self._checkpointer.save_soon(asyncio.get_running_loop())
                if wasted != ZERO
                else None
            )
            if limiter is None or not too_many:
                await asyncio.sleep(delay)  # a 429 on a limit: the key's pause is the wait
            if saved is not None:
                with contextlib.suppress(Exception):  # checkpoint_fn failed: the run stops
                    await saved
            if self._maps.policies.stopping:
                # checkpoint_fn failed, or the run was interrupted: nothing starts any
                # more, this attempt neither (it spent nothing: no row).
                record.charge(name, key, "cancelled")
                return Unfinished(f"{what} the run stopped before attempt {attempt + 1}")
            attempt += 1
            if limiter is not None:
                ticket = await self._admitted(limiter, step, key)
            if announcer.observed:
                announcer.emit(
                    ItemStarted(self._run_id, name, item[0], attempt)
                    if item
                    else StepStarted(self._run_id, name, attempt)
                )

    async def _admitted(self, limiter: Limiter, step: Step, key: str | None) -> Ticket:
        """Wait for room in the step's limit, giving back the run's slot meanwhile."""
        slots = self._maps.policies.slots
        announcer = self._announcer
        run_id = self._run_id

        def waiting(seconds: float) -> None:
            if announcer.observed:
                limit: Any = step.limit
                announcer.emit(WaitingForLimit(run_id, step.name, limit, seconds, item=key))

        return await limiter.admit(
            step.limit,  # type: ignore[arg-type]
            step.tokens_estimate,
            slots if slots.limit is not None else None,
            waiting,
        )
