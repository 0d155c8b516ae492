"""Sub-workflows: a step (or each item of a map) whose ``run`` is a `Workflow`.

The child runs as a run of its own, with the parent step's ``ctx`` (plus
``item`` and ``item_key`` in a map) as its initial context. Its checkpoints are
not stored by themselves: each one is handed to the parent's record, which
keeps it under the step in ``children`` (`Children`), and the parent is
checkpointed soon; the child goes on once that is done, so a crash inside a
child loses at most the child's steps in flight. Its token usage is counted
once, in the parent's total, as the child spends it.

The parent's ``unknown_steps`` reaches the child, and so does ``rerun`` by
path (``step/child step``; checked by `RunOptions.check`): a child resumed from
its checkpoint reruns what the parent's ``rerun`` routes to it. What the child
invalidates is noted in the parent's record by path (``step/child step``, for
a map ``step/item key/child step``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from executionkit._define._listeners import Forwarded
from executionkit._paths import child_run_id, join_path
from executionkit._record._result import BudgetExceeded
from executionkit._run._outcome import Unfinished
from executionkit._run._policies import PARENT_STEP, SHARED_SLOTS
from executionkit._types import TokenUsage
from executionkit.events import StepInvalidated

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Coroutine, Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._options import RunOptions
    from executionkit._define._step import Step
    from executionkit._record._record import Record
    from executionkit._record._result import WorkflowResult
    from executionkit._run._checkpointer import Checkpointer
    from executionkit._run._policies import Slots


class Child(Protocol):
    """A sub-workflow as its parent runs it: `Workflow` is one.

    A protocol, so that the runner never imports the façade: the child is run
    through its own ``run``, the one entry every run takes (options checked,
    the store's claim taken), with the parent's checkpointing in place.
    """

    @property
    def steps(self) -> tuple[Step, ...]: ...

    @property
    def run(self) -> Callable[..., Coroutine[Any, Any, WorkflowResult]]: ...


class ChildRuns:
    """The parent's side of its sub-workflows: what each starts from, where its checkpoints go."""

    __slots__ = ("_checkpointer", "_options", "_record", "_rerun", "_slots")

    def __init__(
        self, record: Record, options: RunOptions, checkpointer: Checkpointer, slots: Slots
    ) -> None:
        """Serve the children of the run of ``record``, sharing its concurrency ``slots``."""
        self._record = record
        self._options = options
        self._checkpointer = checkpointer
        self._slots = slots
        # What the run's rerun routes to each child, taken by the child's first start.
        self._rerun = dict(options.rerun_within)

    def start(
        self, name: str, key: str | None
    ) -> tuple[WorkflowCheckpoint | None, dict[str, Any]]:
        """The child's checkpoint to resume from, and the options it runs with."""
        record = self._record
        options = self._options
        budget = options.budget
        if budget is not None:
            # What the rest of the run has not spent of each limit (0 stays "no limit").
            elsewhere = record.cost - record.children.spent(name, key)
            budget = TokenUsage(
                *(
                    0 if limit == 0 else max(1, limit - used)
                    for limit, used in (
                        (budget.input_tokens, elsewhere.input_tokens),
                        (budget.output_tokens, elsewhere.output_tokens),
                        (budget.llm_calls, elsewhere.llm_calls),
                    )
                )
            )
        resume = record.children.checkpoint(name, key)
        limit: Any = budget
        if options.dollars is not None:
            limit = self._dollars_left(budget, resume)
        inherited = {
            # A resumed child keeps its run_id, even one derived before names were escaped.
            "run_id": child_run_id(record.run_id, name, key)
            if resume is None or resume.run_id is None
            else resume.run_id,
            "on_error": options.on_error,
            "budget": limit,
            "prices": options.prices,
            "limits": options.limits or None,
            "validate_json": options.validate_json,
            "schedule": options.schedule,
            "max_concurrency": options.max_concurrency,
            "on_event": options.on_event,
            "executor": options.executor,
            "stop_grace": options.stop_grace,
            "sleep_up_to": options.sleep_up_to,
            "on_code_change": options.on_code_change,
            "checkpoint_every": "step",
            "answers": record.children.take_answers(name, key),
            "unknown_steps": options.unknown_steps,
            # A child with nothing recorded runs whole: a rerun in it has nothing to do.
            "rerun": self._rerun.pop((name, key), None) if resume is not None else None,
        }
        return resume, inherited

    def _dollars_left(self, tokens: TokenUsage | None, resume: WorkflowCheckpoint | None) -> Any:
        """A child's `Budget`: the token limits left, and the dollars the rest of the run left.

        What the child spent before (its checkpoint's ledger, in the parent's
        too) counts against it once, as the child's own restored usage.
        """
        from executionkit._prices import Budget  # noqa: PLC0415 - loaded: the run has prices

        record = self._record
        options = self._options
        record.over_budget()  # prices the rows written since it last looked
        prices, spent, limit = options.prices, record.spent_dollars, options.dollars
        if prices is None or spent is None or limit is None:  # pragma: no cover - RunOptions
            return tokens
        own = resume.spending.priced(prices).total if resume is not None else spent * 0
        return Budget(tokens=tokens, dollars=max(limit - (spent - own), limit * 0))

    def saved(
        self, name: str, key: str | None, checkpoint: WorkflowCheckpoint
    ) -> asyncio.Future[None]:
        """A checkpoint of a child: into the record; resolves once the parent is checkpointed."""
        import asyncio  # noqa: PLC0415 - loaded already: this runs inside a run

        self._record.child_saved(name, key, checkpoint)
        return self._checkpointer.save_soon(asyncio.get_running_loop())

    async def run(
        self, name: str, workflow: Child, context: Mapping[str, Any], key: str | None = None
    ) -> dict[str, Any] | Unfinished:
        """Run (or resume) the child of step ``name`` (item ``key``); return its outputs.

        Returns `Unfinished` when the child stopped with work left: the parent's
        budget (passed down) was reached, or it waits for answers (its checkpoint,
        with its questions, is in the parent's record; the parent's result lists
        them by path, ``step/question``, and a resume answers them).
        """
        resume, options = self.start(name, key)
        prefix = join_path(name) if key is None else join_path(name, key)
        if options["on_event"] is not None:
            options["on_event"] = self._noting(prefix, options["run_id"], options["on_event"])

        def saved(checkpoint: WorkflowCheckpoint) -> asyncio.Future[None]:
            # Awaited by the child: it goes on once its progress is in the parent's store.
            return self.saved(name, key, checkpoint)

        # The child's steps take the parent's concurrency slots: one pool for the run.
        token = SHARED_SLOTS.set(self._slots)
        parent = PARENT_STEP.set((self._record.run_id, name, key))
        try:
            result = await workflow.run(
                dict(context), checkpoint_fn=saved, resume_from=resume, **options
            )
        except BudgetExceeded as exc:
            return Unfinished(str(exc))  # the parent stops too, and says so
        finally:
            SHARED_SLOTS.reset(token)
            PARENT_STEP.reset(parent)
        if result.invalidated or result.discarded:
            self._report(prefix, workflow, result)
        if result.pending:
            names = ", ".join(map(repr, result.pending))
            return Unfinished(f"the sub-workflow waits for answers to {names}")
        if result.waits:
            names = ", ".join(map(repr, result.waits))
            return Unfinished(f"the sub-workflow waits for {names} to be due")
        self._record.child_finished(name, key, result.cost)
        if key is not None:
            # A map's item: what it spent is its item's usage too (already in the total).
            self._record.items.spent(name, result.cost)
        return dict(result.outputs)

    def _report(self, prefix: str, workflow: Child, result: WorkflowResult) -> None:
        """Note what the child invalidated and discarded in the parent's record, by path."""
        record = self._record
        own = {step.name for step in workflow.steps}

        def path(inner: str) -> str:
            # The child's own steps by name, its children's already by path.
            return f"{prefix}/{join_path(inner) if inner in own else inner}"

        for inner, reason in result.invalidated.items():
            record.note_invalidated(path(inner), reason)
        if result.discarded:
            record.discarded = (*record.discarded, *map(path, result.discarded))

    def _noting(
        self, prefix: str, run_id: str, on_event: Callable[[Any], object]
    ) -> Callable[[Any], object]:
        """``on_event`` for a child: notes its invalidated steps in the parent's record too.

        A child that raises returns no result to read them from, and the parent
        raises then too: this way its `RunFailed` lists them all the same. A
        grandchild's run_id extends the child's by its path.
        """
        note = self._record.note_invalidated
        below = f"{run_id}/"

        def forward(event: object) -> object:  # noqa: RUF100
            if type(event) is StepInvalidated:
                step = join_path(event.step)
                if event.run_id == run_id:
                    note(f"{prefix}/{step}", event.reason)
                elif event.run_id.startswith(below):
                    note(f"{prefix}/{event.run_id.removeprefix(below)}/{step}", event.reason)
            return on_event(event)

        return Forwarded(forward, on_event)
