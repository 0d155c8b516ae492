"""What one run knows, and the checkpoints taken of it.

`Record` is plain state, with no asyncio in it: the outputs that landed and
were recorded (the append-only log), token usage, failures and in-step
progress. It builds checkpoints (`snapshot`) and knows what is new since the
last one. It is the one place to read to learn what a checkpoint holds.

An output *lands* when its step returns, and is *recorded* when the run merges
what landed into the log (in declaration order within a merge); checkpoints
describe recorded outputs. A counter of changes tells whether anything
changed since the last checkpoint was handed over.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._checkpoint._ledger import ZERO
from executionkit._checkpoint._output_log import OutputLog
from executionkit._checkpoint._step_info import Overlaid, StepInfo
from executionkit._checkpoint._value import SharedFields, WorkflowCheckpoint
from executionkit._define._waits import due_of, nested_waits
from executionkit._paths import join_path, new_run_id
from executionkit._plain import plain_copy
from executionkit._record._children import Children
from executionkit._record._in_flight import InFlight
from executionkit._record._items import Items
from executionkit._record._ledger import Ledger
from executionkit._record._questions import Questions
from executionkit._record._skips import Skips
from executionkit._record._waits import Waits
from executionkit._resume._restore import Restored, restore
from executionkit._types import PatternResult, TokenUsage

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from datetime import datetime
    from decimal import Decimal

    from executionkit._define._graph import Graph
    from executionkit._define._options import RunOptions

EMPTY: MappingProxyType[str, Any] = MappingProxyType({})
_ZERO = ZERO  # the ledger returns this very object when nothing was spent


def dollars_zero() -> Decimal:
    """$0, as a `Decimal` (loaded with the prices: a run without them never loads it)."""
    from decimal import Decimal  # noqa: PLC0415 - loaded already by the prices given

    return Decimal(0)


def reached(usage: TokenUsage, budget: TokenUsage | None) -> bool:
    """Whether ``usage`` reached any non-zero limit of ``budget``."""
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


class Record:
    """The record of one run: what landed, what it cost, and the checkpoints of it."""

    def __init__(self, graph: Graph, options: RunOptions) -> None:
        """Restore ``options.resume_from`` (checked against ``graph``)."""
        self.graph = graph
        self._encoded = graph.encoded
        self.budget = options.budget
        # With prices: the ledger's rows priced as they are written (`_priced` of them so
        # far), for a dollar budget and the events; the first model found that the prices
        # cannot price.
        self.dollars = options.dollars
        self.prices = options.prices
        self.spent_dollars = None if options.prices is None else dollars_zero()
        self.unpriced: tuple[str | None] | None = None
        self._priced = 0
        self._validate_json = options.validate_json
        # Outputs are stored as returned: no step encodes, nothing is checked.
        self._kept_as_is = not options.validate_json and not graph.encoded
        context = options.context
        if options.resume_from is None:
            state = Restored(
                {}, {}, {}, TokenUsage(), 0, options.run_id, options.metadata or EMPTY, {}
            )
        else:
            state = restore(
                graph,
                options.resume_from,
                context,
                run_id=options.run_id,
                metadata=options.metadata,
                rerun=options.rerun,
                unknown_steps=options.unknown_steps,
                on_code_change=options.on_code_change,
            )
        # Live outputs feed ctx and the result; stored forms (after Step.encode) feed
        # checkpoints. Without codecs both hold the same objects.
        self.outputs = state.outputs
        self.log = OutputLog(state.stored)
        self.progress = state.progress
        self._cost = state.cost
        # Usage counted since `cost` was last read: summed when it is (a sum per step
        # that reports usage would cost more than the rest of its bookkeeping).
        self._spent: list[TokenUsage] = []
        self.seq = state.seq
        self._invalidated = state.invalidated
        self.invalidated = MappingProxyType(self._invalidated)
        # Recorded steps whose code changed, kept (on_code_change="keep"): old and new code.
        self.code_changed = state.code_changed
        self.discarded = state.discarded
        self.run_id = state.run_id if state.run_id is not None else new_run_id()
        outputs = self.outputs
        self.restored = tuple(name for name in graph.names if name in outputs) if outputs else ()
        # Failures of this run, by position; they stay in every later checkpoint's `errors`.
        self.failures: dict[int, Exception] = {}
        # Outputs that landed since the last merge: position -> (live output, stored form).
        self.landed: dict[int, tuple[Any, Any]] = {}
        # Every change bumps `changes`; a checkpoint handed over covers the `changes`
        # it saw, and `saved` is the last count that was handed over.
        self.changes = 0
        self.saved = 0
        self._start_ledger(graph, options, state, tuple(sorted(context)))
        # Outputs the checkpoint resumed from holds: those after it are new in the next one.
        self.resumed_length = len(self.log)
        # Names a mid-batch checkpoint announced as new before they were merged.
        self.reported: set[str] = set()
        self._start_rooms(graph, options, state)
        # Every output the log gets from here on is of a step this run executed (merge).
        self._first_executed = len(self.log.names)

    def _start_rooms(self, graph: Graph, options: RunOptions, state: Restored) -> None:
        """The rooms of the kinds of step that record more than an output; the answers."""
        # The rooms of the kinds of step that record more than an output, each its own
        # state: skips, the items of unfinished maps, questions, sub-workflows.
        self.skips = Skips(graph.names, state.skipped)
        skipped = state.skipped
        self.restored_skips = (
            tuple(name for name in graph.names if name in skipped) if skipped else ()
        )
        self.items = Items(state.items)
        self.questions = Questions(graph, state.pending)
        # The waits reached and not yet due (`Step.wait`): step name -> its entry.
        self.waits = Waits(state.waits)
        self.children = Children(state.children)
        self.rooms = (self.items, self.questions, self.children, self.waits)
        self._maps = graph.maps
        # Only graphs with such steps can have anything in those rooms.
        self.has_rooms = bool(graph.maps or graph.asks or graph.workflows or graph.waits)
        # Recorded outputs whose step_info says more than their workflow's entry: an
        # answer the deadline gave, the code that made an output in an earlier run.
        self._described = state.described
        if options.answers or state.pending:
            self._answer(options.answers)
        # What checkpoints say of each step: the workflow's entries, but those.
        self.step_info = (
            Overlaid(graph.step_info, self._described) if self._described else graph.step_info
        )
        self.shared.step_info = self.step_info

    def _start_ledger(
        self,
        graph: Graph,
        options: RunOptions,
        state: Restored,
        context_keys: tuple[str, ...],
    ) -> None:
        """The cost ledger (restored rows first), what is in flight, the shared fields."""
        self.ledger = Ledger(state.ledger)
        self.ledger.ended = self._attempt_ended
        self._open = self.ledger.open
        # What a checkpoint lists as in flight: attempts running, steps about to start.
        self.in_flight = InFlight(self)
        # What the last failed attempt of a step (or item) spent, for its failure's event.
        self.last_waste: dict[tuple[str, str | None], TokenUsage] = {}
        shared = self.shared = SharedFields(
            self.log,
            graph.step_info,
            self.run_id,
            context_keys,
            state.metadata,
            self.ledger.entries,
            state.lineage,
        )
        shared.trace = state.trace
        if options.resume_from is not None and options.resume_from.attempts:
            # Format 5's attempts log is append-only across resumes, as the ledger is.
            shared.attempts.extend(options.resume_from.attempts)
        self._timed: list[Any] = shared.attempts  # entries in seconds until read (in_ms)
        # When the attempt running now started (`_clock.wall`), noted by the runner as it
        # calls the function; its end writes the entry and forgets it. The first attempt
        # of a step (the lean paths) by position, the others (attempt, when) by (step, item).
        self.first_began: list[float | None] = [None] * len(graph.names)
        self.began: dict[tuple[str, str | None], tuple[int, float]] = {}
        shared.names = graph.names
        # Steps that spend nothing themselves; a map's items are counted apart.
        shared.quiet = graph.asks | graph.workflows | graph.maps
        # Ledger rows the checkpoint resumed from holds: the next checkpoint's new rows
        # start after them (rows of attempts it found running come first).
        resumed = options.resume_from
        if len(self.ledger.entries) != (0 if resumed is None else len(resumed.ledger)):
            self.changes += 1  # the unknown attempts: saved by the first checkpoint

    def _attempt_ended(self, name: str, key: str | None) -> bool:
        """Whether step ``name`` (item ``key``) has ended: usage reported now is late."""
        if key is not None:
            return key in self.items.recorded(name)
        position = self.graph.index.get(name)
        return (  # InFlight.ended, inlined: asked on the first report of every attempt
            position is None
            or name in self.outputs
            or position in self.landed
            or position in self.failures
            or name in self.skips.skipped
        )

    def _answer(self, answers: Mapping[str, Any]) -> None:
        """Apply the run's answers, each the output of its ask step (checked first).

        Then the deadlines act: a question still pending whose deadline passed
        takes its default (described as ``answered_by: "deadline"``), or fails.
        """
        questions = self.questions
        checked = questions.answer(answers, self.outputs, self.children)
        taken, overdue = questions.overdue(checked.expired)
        stored = {**checked.stored, **taken}
        index = self.graph.index
        for name in sorted(stored, key=index.__getitem__):
            self.outputs[name] = stored[name]
            self.log.append(name, stored[name])
            self.changes += 1
        for name, error in (*checked.expired.items(), *overdue.items()):
            self.fail(index[name], error)
        info = self.graph.step_info
        for name in taken:
            entry = info[name]
            self._described[name] = StepInfo(
                entry["version"], entry["depends_on"], "ask", (("answered_by", "deadline"),)
            )

    def ask(self, position: int, question: object) -> Mapping[str, Any]:
        """Record the question the ask step at ``position`` asks; return its pending entry."""
        entry = self.questions.ask(position, question)
        self.changes += 1
        return entry

    def timers(self) -> dict[str, datetime]:
        """Every wait not due yet by path (`join_path`), with when it is due; nested ones after."""
        waits = self.waits
        found = (
            {join_path(name): due_of(waits[name]) for name in self.graph.names if name in waits}
            if waits
            else {}
        )
        if self.children:
            found.update(nested_waits(self.graph, self.children.latest))
        return found

    def wait_reached(self, name: str, entry: Mapping[str, str]) -> None:
        """Record that wait step ``name`` was reached: ``entry`` says when it is due."""
        self.waits[name] = entry
        self.changes += 1

    def wait_over(self, name: str) -> None:
        """Wait step ``name`` is due: its entry goes as its output (None) lands."""
        if self.waits.pop(name, None) is not None:
            self.changes += 1

    @property
    def cost(self) -> TokenUsage:
        """What the run has spent so far, restored usage included."""
        spent = self._spent
        if spent:
            spent.append(self._cost)
            self._cost = TokenUsage(
                sum(usage.input_tokens for usage in spent),
                sum(usage.output_tokens for usage in spent),
                sum(usage.llm_calls for usage in spent),
            )
            spent.clear()
        return self._cost

    def child_saved(self, name: str, key: str | None, checkpoint: WorkflowCheckpoint) -> None:
        """Keep the child's latest checkpoint and count what it spent since the last one."""
        self._spent.append(self.children.keep(name, key, checkpoint))
        if checkpoint.new_ledger or checkpoint.new_attempts:
            prefix = join_path(name) if key is None else join_path(name, key)
            self.ledger.extend(prefix, checkpoint.new_ledger)
            self._timed += [
                (f"{prefix}/{step}", item, attempt, outcome, started, ended)
                for step, item, attempt, outcome, started, ended in checkpoint.new_attempts
            ]
        self.changes += 1

    def child_finished(self, name: str, key: str | None, cost: TokenUsage) -> None:
        """The child completed: count the rest of what it spent; its output lands next."""
        self._spent.append(self.children.drop(name, key, cost))

    def note_invalidated(self, name: str, reason: str) -> None:
        """Report that recorded work of step ``name`` is not used, and why."""
        self._invalidated[name] = reason

    def waiting(self) -> dict[str, Any]:
        """Every question waiting for an answer by path (`join_path`), nested ones after."""
        return self.questions.waiting(self.children)

    # --- what lands -----------------------------------------------------------------------

    def land(self, position: int, result: Any) -> TokenUsage | None:  # noqa: C901, PLR0912 - the common case inlined
        """Hold the output a step returned until the next merge; return its cost.

        Returns None when the output cannot be recorded (its ``encode`` raised, or
        ``validate_json`` refused it): the step is then recorded as failed, though
        its cost counts, since it was spent.
        """
        if position in self._maps:
            self.landed[position] = self.items.finish(self.graph.names[position], result)
            self.changes += 1
            return _ZERO
        if self._kept_as_is and not self._open and not isinstance(result, PatternResult):
            # The common case: stored as returned, nothing reported, so no ledger row.
            self.landed[position] = (result, result)
            began = self.first_began[position]
            if began is not None:  # attempt_ended, inlined: the path of almost every step
                self.first_began[position] = None
                name = self.graph.names[position]
                self._timed.append((name, None, 1, "ok", began, _clock.wall()))
            elif self.began:
                self.attempt_ended(self.graph.names[position], None, "ok")
            if self.progress:
                self.progress.pop(self.graph.names[position], None)
            self.changes += 1
            return _ZERO
        name = self.graph.names[position]
        reported = None
        if isinstance(result, PatternResult):
            reported = result.cost
            result = result.value
        if self._validate_json or position in self._encoded:
            try:
                stored = self._storable(position, result)
            except Exception as exc:  # noqa: BLE001 - an unrecordable output fails its step
                self._spent.append(self.ledger.close(name, None, "failed", reported))
                self.fail(position, exc)
                return None
        else:
            stored = result
        self.attempt_ended(name, None, "ok")
        if reported is None and not self._open:
            cost = _ZERO  # the common case: nothing reported, so no ledger row
        else:
            cost = self.ledger.close(name, None, "ok", reported)
            if cost is not _ZERO:
                self._spent.append(cost)
        self.landed[position] = (result, stored)
        if self.progress:
            self.progress.pop(name, None)
        self.changes += 1
        return cost

    @property
    def executed(self) -> list[str]:
        """The steps this run executed and recorded, in recording order (a new list)."""
        return self.log.names[self._first_executed :]

    def recorded_items(self, name: str) -> Collection[str]:
        """The keys of the items of map step ``name`` recorded so far."""
        return self.items.recorded(name)

    def land_item(
        self, position: int, key: str, result: Any
    ) -> tuple[TokenUsage, Exception | None]:
        """Record the output an item of a map returned; return its cost, and why not if not.

        An item whose output cannot be recorded (its ``encode`` raised, or
        ``validate_json`` refused it) is not recorded, though its cost counts.
        """
        name = self.graph.names[position]
        reported = None
        if isinstance(result, PatternResult):
            reported = result.cost
            result = result.value
        stored = result
        self.changes += 1
        if self._validate_json or position in self._encoded:
            try:
                stored = self._storable(position, result, key)
            except Exception as exc:  # noqa: BLE001 - an unrecordable output fails its item
                self.attempt_ended(name, key, "failed")
                cost = self.ledger.close(name, key, "failed", reported)
                self._spent.append(cost)
                return cost, exc
        self.attempt_ended(name, key, "ok")
        if reported is None and not self._open:
            cost = _ZERO  # the common case: nothing reported, so no ledger row
        else:
            cost = self.ledger.close(name, key, "ok", reported)
            if cost is not _ZERO:
                self._spent.append(cost)
                self.items.spent(name, cost)
        self.items.add(name, key, stored, result)
        return cost, None

    def fail(self, position: int, error: Exception) -> None:
        """Record that the step at ``position`` failed with ``error``."""
        self.charge(self.graph.names[position], None, "failed")
        self.failures[position] = error
        self.changes += 1

    def charge(self, name: str, key: str | None, outcome: str) -> TokenUsage:
        """An attempt of step ``name`` (item ``key``) ended without an output: count its usage."""
        self.attempt_ended(name, key, outcome)
        cost = self.ledger.close(name, key, outcome)
        if cost is not _ZERO:
            self._spent.append(cost)
            self.changes += 1
            self.last_waste[name, key] = cost
        return cost

    def attempt_ended(self, name: str, key: str | None, outcome: str) -> None:
        """The attempt of ``name`` (item ``key``) running now ended so: note when (``attempts``).

        Only an attempt whose start the runner noted (`began`) gets an entry:
        a step that never called its function (a map, an ask, a wait, a
        sub-workflow) has none, nor one whose failure was noted already.
        """
        if key is None:
            position = self.graph.index.get(name)
            first = None if position is None else self.first_began[position]
            if first is not None:
                self.first_began[position] = None  # type: ignore[index]  # found at it
                self._timed.append((name, None, 1, outcome, first, _clock.wall()))
                return
        began = self.began.pop((name, key), None) if self.began else None
        if began is not None:
            attempt, started = began
            ended = _clock.wall()
            # No change of its own: the entry rides with the next checkpoint taken (an
            # attempt cancelled as the run stops adds no write to the stopping).
            self._timed.append((name, key, attempt, outcome, started, ended))

    def abandon(self, name: str, key: str | None, attempt: int) -> None:
        """A stopping run left this attempt running in its thread: it stays listed in flight.

        It has not ended: like an attempt running when a process dies, it gets no
        ``attempts`` entry (a resume books it ``"unknown"`` in the ledger).
        """
        if key is None and name in self.graph.index:
            self.first_began[self.graph.index[name]] = None
        self.began.pop((name, key), None)
        self.in_flight.abandoned.append((name, key, attempt))
        self.changes += 1

    def waste_of(self, name: str, key: str | None) -> TokenUsage:
        """What the last attempt of ``name`` (item ``key``) that failed spent; forget it."""
        return self.last_waste.pop((name, key), _ZERO) if self.last_waste else _ZERO

    def book_late(self, *, closing: bool = False) -> None:
        """Count usage reported after its attempt ended (by a thread left running).

        ``closing``: every attempt of the run has stopped (see `Ledger.book_late`).
        """
        late = self.ledger.book_late(closing=closing)
        if late is not _ZERO:
            self._spent.append(late)
            self.changes += 1

    def skip(self, position: int, reason: str) -> None:
        """Hold the skip of the step at ``position`` until the next merge, like an output.

        Items or a sub-workflow restored for it are dropped: a skipped step never
        ran, and a checkpoint saying both is refused (``skipped.<step>``).
        """
        name = self.graph.names[position]
        self.items.maps.pop(name, None)
        self.children.latest.pop(name, None)
        self.skips.decide(position, reason)
        self.changes += 1

    def save_progress(self, name: str, value: object) -> int:
        """Record ``value`` as the progress of step ``name``; return the change count."""
        self.progress[name] = plain_copy(value, f"progress of step {name!r}")
        self.changes += 1
        return self.changes

    def _storable(self, position: int, output: Any, key: str | None = None) -> Any:
        """The form of ``output`` that goes into checkpoints, checked if asked to."""
        step = self.graph.steps[position]
        what = f"step {step.name!r}" if key is None else f"step {step.name!r}, item {key!r}"
        stored = output
        if step.encode is not None:
            try:
                stored = step.encode(output)
            except Exception as exc:
                exc.add_note(f"executionkit: encode of {what} failed")
                raise
        if self._validate_json:
            # The checked copy is what gets recorded: later changes to the live object
            # (a dependent step mutating its ctx value) cannot reach a checkpoint.
            stored = plain_copy(stored, f"output of {what}")
        return stored

    def merge(self) -> list[int]:
        """Record what landed, in declaration order; return those positions."""
        landed = self.landed
        if len(landed) == 1 and not self.skips.decided:
            # A chain's every batch: one output, nothing to sort.
            position, (live, stored) = landed.popitem()
            name = self.graph.names[position]
            self.outputs[name] = live
            log = self.log  # OutputLog.append, unrolled
            log.index[name] = len(log.names)
            log.names.append(name)
            log.values.append(stored)
            return [position]
        completed = sorted(landed)
        names = self.graph.names
        outputs = self.outputs
        # OutputLog.append, unrolled: this runs once per step.
        log = self.log
        index = log.index
        log_names = log.names
        log_values = log.values
        for position in completed:
            name = names[position]
            live, stored = landed[position]
            outputs[name] = live
            index[name] = len(log_names)
            log_names.append(name)
            log_values.append(stored)
        landed.clear()
        if self.skips.decided:
            return self.skips.merge(completed)
        return completed

    def over_budget(self) -> bool:
        """Whether the token usage, or its price, reached the run's budget."""
        if self.budget is not None and reached(self.cost, self.budget):
            return True
        return self.dollars is not None and self._dollars_reached()

    def _dollars_reached(self) -> bool:
        """Price the ledger rows written since the last call; whether the dollars are reached.

        A row of a model the prices cannot price reaches it: the run cannot
        prove it is under its limit. Rows of unknown usage are not priced.
        """
        spent, limit = self.priced(), self.dollars
        if spent is None or limit is None:  # pragma: no cover - RunOptions
            return False
        return self.unpriced is not None or spent >= limit

    def priced(self) -> Decimal | None:
        """The dollars of the ledger's priced rows so far (None without prices).

        Restored rows included; rows of unknown usage and of models the prices
        cannot price are not in it (`unpriced` names the first such model).
        """
        entries = self.ledger.entries
        prices, spent = self.prices, self.spent_dollars
        if prices is None or spent is None:
            return None
        if self._priced < len(entries):
            for row in entries[self._priced :]:
                if row.outcome == "unknown" or row.usage == ZERO:
                    continue
                price = prices.price_of(row.model)
                if price is None:
                    self.unpriced = self.unpriced or (row.model,)
                else:
                    spent += price.of(row.usage)
            self.spent_dollars = spent
            self._priced = len(entries)
        return spent

    # --- checkpoints ----------------------------------------------------------------------

    def unsaved(self) -> bool:
        """Whether anything changed since the last checkpoint handed over."""
        return self.changes != self.saved
