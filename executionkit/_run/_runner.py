"""The run loop: one `Run` per call of `Workflow.run`.

`Run` reads like the execution model. In batch mode: take the ready batch, run
it concurrently, record what completed, checkpoint, repeat. In eager mode:
start each step as soon as its own dependencies are done, and checkpoint after
every completion. Every ending of an attempt lands in `Run.ended`. It has one
way out, `_exit`: every end of a run (success, failure, budget, cancellation,
an interrupt, a failing ``checkpoint_fn``) stops and awaits every running step,
records what landed, takes the last checkpoint, and only then returns or raises.

The parts it composes, each with one job: `Record` (what landed, and the
checkpoints of it), `Checkpointer` (the only caller of ``checkpoint_fn``),
`Running` (the running steps), `Attempts` (calling one step, with `MapRun` and
`ChildRuns` for maps and sub-workflows), `Policies` (what may start),
`Conditions` (what is skipped), `Announcer` (events), `Frontier` (what is ready).
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
from functools import partial
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._checkpoint._fields import FORMAT_VERSION
from executionkit._checkpoint._lineage import read_trace
from executionkit._checkpoint._times import busy_seconds
from executionkit._define._conditions import Conditions
from executionkit._define._frontier import Frontier
from executionkit._define._listeners import tracers
from executionkit._errors import CheckpointFormatError
from executionkit._record._record import Record
from executionkit._record._snapshots import Snapshots
from executionkit._run._announcer import LOG, Announcer
from executionkit._run._attempt import Attempts
from executionkit._run._checkpointer import Checkpointer
from executionkit._run._children import ChildRuns
from executionkit._run._map import MapRun
from executionkit._run._outcome import FAILED, INTERRUPTED, VALUE, Ending, Landing, caught
from executionkit._run._policies import PARENT_STEP, SHARED_SLOTS, Policies, Slots
from executionkit._run._running import Running
from executionkit._run._step_host import StepHost
from executionkit._run._threads import plain_threads
from executionkit.events import RunStarted

if TYPE_CHECKING:
    from executionkit._define._graph import Graph
    from executionkit._define._options import RunOptions
    from executionkit._record._result import WorkflowResult


class Run(Landing):
    """One call of `Workflow.run`: the loop, where every ending lands, and the one way out."""

    def __init__(self, graph: Graph, options: RunOptions) -> None:
        """Restore ``options.resume_from`` and get ready to start steps."""
        self._graph = graph
        self._options = options
        self._record = record = Record(graph, options)
        self._snapshots = snapshots = Snapshots(record, options.resume_from)
        self._run_id = record.run_id
        # A sub-workflow's run takes its parent's slots: one pool for the whole run. Its
        # steps do not: a run a step starts by hand is a run of its own (sharing them,
        # a step holding a slot would wait for its own inner run, which waits for one).
        slots = SHARED_SLOTS.get()
        self._parent = PARENT_STEP.get()
        self._child = slots is not None  # a sub-workflow's run
        if slots is None:
            slots = Slots(options.max_concurrency)
        else:
            SHARED_SLOTS.set(None)  # in this child's task only: its steps start from here
        if self._parent is not None:
            PARENT_STEP.set(None)
        caller_context = contextvars.copy_context()
        self._announcer = announcer = Announcer(
            options.on_event, caller_context, record.run_id, graph.names
        )
        self._observed = announcer.observed
        self._checkpointer = checkpointer = Checkpointer(
            snapshots, options.checkpoint_fn, announcer, caller_context, self._storage_failed
        )
        self._eager = options.schedule == "eager"
        self._resumed = options.resume_from is not None
        self._policies = policies = Policies(
            options.on_error,
            slots,
            eager=self._eager,
            failures=record.failures,
            over_budget=None
            if options.budget is None and options.dollars is None
            else record.over_budget,
        )
        # Steps a condition may skip are decided just before they would start.
        self._conditions = Conditions(graph, options.context, record.outputs, record.skips.skipped)
        self._deciding = self._conditions.deciding
        self._decider = self._decide if self._deciding else None
        self._asks = graph.asks
        if options.prices is not None:
            announcer.bill = record.priced
        limiter = None
        if options.limits:
            from executionkit._run._limiter import Limiter, shared_store  # noqa: PLC0415

            limiter = Limiter(options.limits, shared_store(options.checkpoint_fn))
        self._limiter = limiter
        self._maps_run = MapRun(self, policies, record, announcer, checkpointer, limiter)
        attempts = Attempts(
            graph,
            context=options.context,
            outputs=record.outputs,
            run_id=record.run_id,
            host=StepHost(record, checkpointer, announcer),
            checkpointer=checkpointer,
            executor=options.executor or plain_threads(),
            grace=options.stop_grace,
            announcer=announcer,
            caller_context=caller_context,
            landing=self,
            maps=self._maps_run,
            children=ChildRuns(record, options, checkpointer, slots),
            pending=record.questions.pending,
            record=record,
            limiter=limiter,
            sleep_up_to=options.sleep_up_to,
        )
        # In batch mode, "step" records and checkpoints each completion as it lands.
        self._per_step = (
            not self._eager
            and options.checkpoint_every == "step"
            and options.checkpoint_fn is not None
        )
        # Plain steps run in the run's executor (threads by default) but those marked
        # inline=True: on the loop's thread, without a task when they have no retries.
        self._inline_steps = graph.inline
        self._running = Running(
            graph,
            attempts,
            announcer,
            policies,
            caller_context,
            self._inline_steps,
            (graph.on_loop & graph.plain) - graph.inline,
            wake_each=self._eager or self._per_step,
            save_each=(self._eager or self._per_step) and options.checkpoint_fn is not None,
        )
        done = (
            {graph.index[name] for name in (*record.outputs, *record.skips.skipped)}
            if record.outputs or record.skips.skipped
            else set()
        )
        # Batch mode follows the graph's precomputed levels while every step completes.
        self._frontier = Frontier(graph, done, planned=not self._eager)
        self._task: asyncio.Task[Any] | None = None
        # How the run is stopping, if it is: an interrupt (a cancellation, Ctrl-C, a
        # step raising KeyboardInterrupt) or an error of the run itself (checkpoint_fn).
        self._interrupt: BaseException | None = None
        self._error: Exception | None = None
        # Whether work was left that the run could not start (for the budget): steps
        # the loop could not start, or a map or child that stopped with work left.
        self._more = False
        # Batch mode with per-step checkpoints: positions recorded before the batch ended.
        self._recorded: list[int] = []

    @property
    def cancelling(self) -> bool:  # type: ignore[override]
        """Whether the run is cancelling its steps (a CancelledError is then its own)."""
        return self._running.cancelling

    @property
    def run_id(self) -> str:
        """The run's id (given, restored, or new)."""
        return self._run_id

    async def execute(self) -> WorkflowResult:
        """Run every step not yet recorded; checkpoint as the schedule says."""
        began = _clock.elapsed()
        self._task = asyncio.current_task()
        if self._observed:
            self._start_announced()
        try:
            if self._record.questions.answered:
                # Answers are saved before anything acts on them: of two processes
                # answering one question, the later is refused by the store here.
                await self._checkpointer.save()
            await (self._run_eager() if self._eager else self._run_batches())
        except BaseException as exc:  # noqa: BLE001 - every way out goes through _exit
            self._stop(exc)
        return await self._exit(began)

    def _start_announced(self) -> None:
        """Say the run starts; first ask the listeners that trace for the run's trace."""
        record = self._record
        shared = record.shared
        started = RunStarted(
            record.run_id,
            len(self._graph),
            (),
            self._resumed,
            record.cost,
            shared.trace,
            self._parent,
            busy_seconds(shared.attempts) if self._resumed and shared.attempts else 0.0,
        )
        for tracer in tracers(self._options.on_event):
            try:
                trace = tracer.trace_run(started)
            except Exception:  # noqa: BLE001 - a listener never breaks the run
                LOG.warning(
                    "executionkit: %r.trace_run raised; the run goes on", tracer, exc_info=True
                )
                continue
            if shared.trace is None and trace is not None:
                try:
                    shared.trace = read_trace(trace, FORMAT_VERSION)
                except CheckpointFormatError:
                    LOG.warning(
                        "executionkit: %r.trace_run returned %r, not a traceparent", tracer, trace
                    )
        self._announcer.run_started(record, started)

    # --- the two schedules ----------------------------------------------------------------

    async def _run_batches(self) -> None:
        frontier = self._frontier
        record = self._record
        save = self._checkpointer.save
        policies = self._policies
        in_flight = record.in_flight
        ready = frontier.initial()
        in_flight.coming(ready)
        left: list[int] = []
        while ready and policies.may_begin_batch():
            if len(ready) == 1 and ready[0] not in self._inline_steps and policies.may_start():
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
            # In the checkpoint's in_flight: they start next (if anything does). The
            # batch's list is never changed after this.
            in_flight.next_up = ready if policies.may_begin_batch() else []
            if self._per_step and ready and record.changes == record.saved:
                # Each completion was merged and saved as it landed, and the batch's last
                # ending was saved too (a sub-workflow's checkpoint): no checkpoint lists
                # the next batch yet, and one must before it starts.
                record.changes += 1
            in_flight.listed_at = record.changes
            await save()
        self._more = self._more or bool(ready or left)

    async def _run_eager(self) -> None:
        frontier = self._frontier
        record = self._record
        save = self._checkpointer.save
        running = self._running
        ready = frontier.initial()
        record.in_flight.coming(ready)
        if ready and record.over_budget():
            self._more = True
            return
        while True:
            if (
                len(ready) == 1
                and not running.count
                and ready[0] not in self._inline_steps
                and self._policies.may_start()
            ):
                # Nothing runs and nothing else is ready, so nothing can start before
                # this step finishes: run it as a batch of one is run, without a task.
                await self._run_lone(ready.pop())
            else:
                self._start(ready, partial(heapq.heappop, ready))
                # Plain steps and skips land inline, and steps may land while
                # checkpoint_fn is awaited: record and checkpoint those before waiting
                # for anything else.
                if not record.landed and not record.skips.decided and not self._unsaved():
                    if not running.count and not (ready and self._policies.waits_for_slot()):
                        break
                    await running.wait()
            fresh = frontier.complete(record.merge())
            for position in fresh:
                heapq.heappush(ready, position)
            # In the checkpoint's in_flight: they start next (if anything does). When
            # nothing starts any more (a step failed), the steps still running may still
            # spend: they stay listed.
            if self._policies.may_start_ready():
                record.in_flight.coming(ready, fresh)
            else:
                record.in_flight.coming(sorted(running.tasks))
            # Steps that finish while checkpoint_fn runs are folded into the next one.
            await save()
        self._more = self._more or bool(ready)

    def _unsaved(self) -> bool:
        return self._checkpointer.active and self._record.unsaved()

    async def _run_all(self, batch: list[int]) -> list[int]:
        """Start ``batch`` in order, within the limits; wait for it; return what never started."""
        queue = list(reversed(batch))
        running = self._running
        per_step = self._per_step
        while True:
            if per_step and self._record.unsaved() and (running.count or queue):
                # Each completion is saved before anything else starts. The batch's last
                # is saved by the batch loop instead, in the checkpoint that lists the
                # next batch as in flight: a kill while that batch runs must find it
                # listed, and a checkpoint of this one alone would list nothing.
                self._recorded += self._record.merge()
                await self._checkpointer.save()
            self._start(queue, queue.pop)
            if per_step and self._record.unsaved() and (running.count or queue):
                continue  # a plain step ran inline
            if not running.count and not (queue and self._policies.waits_for_slot()):
                return queue
            await running.wait()

    def _start(self, pending: list[int], take: Any) -> None:
        self._running.start(pending, take, self._decider)

    async def _run_lone(self, position: int) -> None:
        """A batch of one async step, in the run's own task (`Running.lone`).

        A cancellation meanwhile (a plain step in a thread or an executor finished
        anyway) stops the run: no batch begins after it, and `_exit` raises it.
        """
        if position in self._deciding and not self._decide(position):
            return
        this = self._task
        before = 0 if this is None else this.cancelling()
        await self._running.lone(position)
        if this is not None and this.cancelling() > before:
            # The step finished anyway (recorded: it was paid for); nothing starts after it.
            self._stop(self._interrupt or asyncio.CancelledError())

    # --- where every ending lands -----------------------------------------------------------

    def ended(
        self,
        position: int,
        ending: Ending,
        value: Any,
        key: str | None = None,
        began: float = 0.0,
    ) -> Exception | None:
        """Record how an attempt ended, have it checkpointed, and say so.

        A step's output waits in the record for the loop's next merge and
        checkpoint; an item's is recorded and checkpointed soon; an ask step's
        value is its question, recorded as pending. A failure follows
        ``on_error``; an interrupt stops every step.
        """
        if ending == VALUE and key is None and position not in self._asks:
            cost = self._record.land(position, value)
            if cost is None:
                self._failed(position)
            elif self._observed:
                self._announcer.finished(position, cost)
            return None
        if key is not None:
            return self._item_ended(position, key, ending, value, began)
        if ending == VALUE:
            self._asked(position, value)
        elif ending == FAILED:
            self._record.fail(position, value)
            self._failed(position)
        elif ending == INTERRUPTED:
            self._record.charge(self._graph.names[position], None, "cancelled")
            self._stop(value)
        elif position not in self._asks:  # UNFINISHED; an ask just waits
            self._more = True
        return None

    def returned(self, position: int, value: Any) -> None:
        """A step (not a map, an ask or a sub-workflow) returned ``value``; it no longer runs.

        `ended` with `VALUE`, then `finished`, without their dispatch: the path
        of almost every step.
        """
        try:
            cost = self._record.land(position, value)
            if cost is None:
                self._failed(position)
            elif self._observed:
                self._announcer.finished(position, cost)
        finally:
            self._running.finished(position)

    def _item_ended(
        self, position: int, key: str, ending: Ending, value: Any, began: float
    ) -> Exception | None:
        if ending == VALUE:
            record = self._record
            cost, error = record.land_item(position, key, value)
            if error is None:
                if position not in self._maps_run.in_turn:  # those the map saves itself
                    self._checkpointer.save_later()
                if self._observed:
                    done = len(record.recorded_items(self._graph.names[position]))
                    self._announcer.item_finished(position, key, began, cost, done)
                return None
            usage = record.waste_of(self._graph.names[position], key)
            if self._observed:
                self._announcer.item_failed(position, key, began, error, usage)
            return error
        if ending == FAILED:
            name = self._graph.names[position]
            record = self._record
            record.charge(name, key, "failed")
            usage = record.waste_of(name, key)
            if self._observed:
                self._announcer.item_failed(position, key, began, value, usage)
        elif ending == INTERRUPTED:
            self._record.charge(self._graph.names[position], key, "cancelled")
            self._stop(value)
        return None

    def _asked(self, position: int, question: object) -> None:
        try:
            entry = self._record.ask(position, question)
        except Exception as exc:  # noqa: BLE001 - a question that cannot be recorded fails
            self._record.fail(position, exc)
            self._failed(position)
            return
        if self._observed:
            self._announcer.asked(position, entry)

    def _failed(self, position: int) -> None:
        record = self._record
        usage = record.waste_of(self._graph.names[position], None)
        if self._observed:
            self._announcer.failed(position, record.failures[position], usage)
        if self._policies.after_failure() == "cancel":
            self._running.cancel()

    def _storage_failed(self) -> None:
        """``checkpoint_fn`` raised: nothing from now on could be saved, so stop."""
        self._policies.stopping = True
        self._running.cancel()

    def finished(self, position: int) -> None:
        """The step at ``position`` is no longer running."""
        self._running.finished(position)

    def _decide(self, position: int) -> bool:
        """Whether the step at ``position`` runs; if not, its skip (or failure) landed.

        A skip lands like an output, merged and checkpointed with the outputs.
        """
        if position not in self._deciding:
            return True
        try:
            reason = self._conditions.reason_to_skip(position)
        except BaseException as exc:  # noqa: BLE001 - sorted by caught(), the one ladder
            what = f"the condition of step {self._graph.names[position]!r}"
            self.ended(position, *caught(exc, what))
            return False
        if reason is None:
            return True
        self._record.skip(position, reason)
        if self._observed:
            self._announcer.skipped(position, reason)
        return False

    # --- the one way out ------------------------------------------------------------------

    def _stop(self, exc: BaseException) -> None:
        """Stop every step: the run raises ``exc`` (an interrupt, or checkpoint_fn's error)."""
        if isinstance(exc, Exception):
            self._error = self._error or exc
        else:
            self._interrupt = self._interrupt or exc
        self._storage_failed()

    async def _exit(self, began: float) -> WorkflowResult:
        """End the run: the only place it returns or raises once steps may have started.

        Every running step is stopped and awaited (cancellations meanwhile are
        noted, not obeyed), what landed is recorded, the last checkpoint is taken
        and awaited, listeners are served; then the run returns its result or
        raises, in this order of precedence: an interrupt, a ``checkpoint_fn``
        error, `WorkflowFailed`, `BudgetExceeded`.
        """
        record = self._record
        stopping = self._interrupt is not None or self._error is not None
        running = self._running
        # Awaiting a coroutine costs even when it has nothing to wait for: only when needed.
        cancelled = await running.stop(cancel=stopping) if running.count else running.calm()
        if cancelled:
            self._interrupt = self._interrupt or asyncio.CancelledError()
        running.close()
        record.merge()
        record.book_late(closing=True)
        record.in_flight.coming(None)  # nothing starts after this: the last checkpoint lists none
        checkpointer = self._checkpointer
        # With nothing left to save, a run of its own skips the task save_through awaits. A
        # sub-workflow's run does not: its parent's other work (the sibling items of a map
        # of sub-workflows) keeps running there before the parent hears it ended.
        saves = checkpointer.saves and (self._child or checkpointer.behind)
        saved, error = await checkpointer.save_through() if saves else (False, None)
        cancelled = cancelled or saved
        if cancelled and self._interrupt is None:
            self._interrupt = asyncio.CancelledError()
        outcome = _outcome(
            self._interrupt,
            self._error or error or checkpointer.storage_error,
            self._snapshots,
            more=self._more,
        )
        if self._observed:
            self._announcer.run_ended(record, outcome, _clock.elapsed() - began)
        settled = await checkpointer.settle() if checkpointer.unsettled else False
        checkpointer.close()
        if self._limiter is not None:
            self._limiter.close()
        if self._announcer.serving:
            settled = await self._announcer.settle() or settled
        if outcome is None and settled:
            outcome = asyncio.CancelledError()
        if outcome is not None:
            raise outcome
        return self._snapshots.result()


def _outcome(
    interrupt: BaseException | None, error: Exception | None, snapshots: Snapshots, *, more: bool
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
    record = snapshots.record
    if record.failures:
        return snapshots.failure()
    if more and record.over_budget():
        return snapshots.budget_exceeded()
    return None
