"""The steps of one run that are running: started here, stopped here, awaited here.

`Running` starts steps the run's loop hands it (inline, in the run's own task,
or in a task of their own) while `Policies` allows, each holding one of the
run's concurrency slots unless it only holds other work (a map, a
sub-workflow); it counts them, wakes the loop when one finishes or a slot is
released, cancels them, and waits until none runs. It never raises: every way
out of a run is `Run._exit`.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from executionkit._run._aio import task_maker, wait_through
from executionkit._run._attempt import InContext

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Callable

    from executionkit._define._graph import Graph
    from executionkit._run._announcer import Announcer
    from executionkit._run._attempt import Attempts
    from executionkit._run._policies import Policies


class Running:
    """Starts, counts, cancels and awaits the running steps of one run."""

    def __init__(  # noqa: PLR0917 - the parts of one run, built once by it
        self,
        graph: Graph,
        attempts: Attempts,
        announcer: Announcer,
        policies: Policies,
        caller_context: contextvars.Context,
        inline: frozenset[int],
        plain_tasks: frozenset[int],
        *,
        wake_each: bool,
        save_each: bool,
    ) -> None:
        """Run steps of ``graph`` with ``attempts``; ``inline``: plain steps called here.

        ``plain_tasks``: the plain steps run on the loop's thread in a task.
        ``save_each``: every completion is checkpointed before the next step starts
        (eager, or ``checkpoint_every="step"``, with a ``checkpoint_fn``).
        """
        self._graph = graph
        self._attempts = attempts
        self._announcer = announcer
        self._policies = policies
        self._slots = policies.slots
        self._caller_context = caller_context
        self._inline = inline
        self._save_each = save_each
        # Plain steps that run in a task (they retry, or time out): with save_each, one
        # at a time too, since each blocks the loop from its start to its end.
        self._plain_tasks = plain_tasks if save_each else frozenset()
        # Steps that take no slot: those that only hold other work (their items, or their
        # child's steps, take slots), and waits sleeping till they are due.
        self._holders = graph.maps | graph.workflows | graph.waits
        # Slots are counted only under a limit (nothing reads them otherwise).
        self._counted = self._slots.limit is not None
        # Wake the loop after every completion only when it may do something then.
        self._wake_each = wake_each or self._counted
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.count = 0
        self.cancelling = False
        self._wake: asyncio.Future[None] | None = None
        if self._counted:
            self._slots.listen(self._wake_up)

    def close(self) -> None:
        """Stop listening to the slots (a sub-workflow's run shares its parent's)."""
        if self._counted:
            self._slots.forget(self._wake_up)

    def start(
        self,
        pending: list[int],
        take: Callable[[], int],
        decide: Callable[[int], bool] | None = None,
    ) -> None:
        """Start steps, each got from ``take()``, while ``pending`` has some and the run allows.

        Plain steps run inline only before the first task of the sweep, so steps
        keep beginning to run in the order they were started. From the first task
        on, nothing can land until the loop runs again, so what `Policies` said
        holds for the rest of the sweep but for the free slots, counted here.
        ``decide`` (steps a condition may skip) asks again after each decision.
        With ``save_each``, a plain function (which blocks the loop) ends the
        sweep, for the loop to record and checkpoint it before the next starts.
        """
        inline = self._inline
        plain = self._plain_tasks
        may_start = self._policies.may_start
        one_by_one = decide is not None or bool(plain)
        tasked = False
        while pending and may_start():
            position = take()
            if decide is not None and not decide(position):
                continue
            if position in inline and not tasked:
                self._run_inline(position)
                if self._save_each:
                    return
                continue
            if one_by_one:
                self._spawn(position, take, 0)
                tasked = True
                if position in plain:
                    return
                continue
            free = self._slots.free()
            more = len(pending) if free is None else min(len(pending), free - 1)
            self._spawn(position, take, more)
            tasked = True

    def _spawn(self, position: int, take: Callable[[], int], more: int) -> None:
        """Start a task for ``position``, then for ``more`` steps got from ``take()``."""
        create_task = task_maker()
        body = self._attempts.task
        tasks = self.tasks
        holders = self._holders
        counted = self._counted
        slots = self._slots
        observed = self._announcer.observed
        started = 0
        try:
            for left in range(more, -1, -1):
                if counted and position not in holders:
                    slots.take()
                if observed:
                    self._began(position)
                tasks[position] = create_task(body(position))
                started += 1
                if left:
                    position = take()
        finally:
            self.count += started  # even if a listener raised KeyboardInterrupt

    def _began(self, position: int) -> None:
        self._announcer.began(position, asks=position in self._graph.asks)

    def _run_inline(self, position: int) -> None:
        """Call a plain-function step right here: no task, same outcome as one."""
        counted = self._counted
        if counted:
            self._slots.take()
        if self._announcer.observed:
            self._began(position)
        task = self._attempts.inline(position)
        if task is None:
            if counted:
                self._slots.release()
            return
        # A plain function that returned an awaitable: awaited in a task after all.
        self.tasks[position] = task
        self.count += 1

    def lone(self, position: int) -> InContext:
        """A batch of one async step, to await right here, in a context of its own.

        Nothing runs beside it, so a task would only add its cost (several loop
        iterations per step on a chain). `InContext` gives the step what a task
        would: a copy of the run's context, so context variables it sets stay its
        own. Only `asyncio.current_task()` differs: it is the run's task.
        """
        if self._counted and position not in self._holders:
            self._slots.take()
        self.count += 1
        if self._announcer.observed:
            self._began(position)
        return InContext(self._attempts.task(position), self._caller_context.copy())

    def finished(self, position: int) -> None:
        """The step at ``position`` is no longer running: its slot is free, the loop wakes."""
        self.tasks.pop(position, None)
        self.count -= 1
        if self._counted and position not in self._holders:
            self._slots.release()  # wakes the loop too, through _wake_up
        if self._wake_each or not self.count:
            self._wake_up()

    def _wake_up(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def wait(self) -> None:
        """Wait until a step finishes or a slot is free (or, in plain batch mode, all end)."""
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await self._wake
        finally:
            self._wake = None

    def cancel(self) -> None:
        """Cancel every running task."""
        self.cancelling = True
        for position, task in list(self.tasks.items()):
            if task.done():
                continue
            task.cancel()
            task.add_done_callback(partial(self._finished_unstarted, position))

    def _finished_unstarted(self, position: int, task: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never runs its body, which would have
        # said it finished (and taken it out of tasks).
        if self.tasks.get(position) is task:
            self.finished(position)

    def calm(self) -> bool:
        """`stop` when no step runs, without awaiting anything: returns False."""
        self.cancelling = False
        return False

    async def stop(self, *, cancel: bool) -> bool:
        """Wait until no step runs (cancelling them first if ``cancel``).

        Cancellations of this task meanwhile are noted, not obeyed: returns
        whether there were any (the caller then cancels what still runs).
        """
        cancelled = False
        if self.count and cancel:
            self.cancel()
        while self.count:
            self._wake = asyncio.get_running_loop().create_future()
            try:
                if await wait_through(self._wake):
                    cancelled = True
                    self.cancel()
            finally:
                self._wake = None
        self.cancelling = False
        return cancelled
