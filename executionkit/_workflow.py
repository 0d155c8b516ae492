"""`Workflow`: validated steps, run in dependency order with checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from executionkit._define._graph import Graph
from executionkit._define._options import (
    CheckpointEvery,
    CheckpointFn,
    OnCodeChange,
    OnError,
    RunOptions,
    Schedule,
    UnknownSteps,
)
from executionkit._run._plan import ResumePlan, plan_resume

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
    from concurrent.futures import Executor

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._step import Step
    from executionkit._limits import Limit
    from executionkit._prices import Budget, Prices
    from executionkit._record._result import WorkflowResult
    from executionkit._run._runner import Run
    from executionkit._types import TokenUsage
    from executionkit.events import EventCallback

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


def _same_arguments_as(
    run: Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]],
) -> Callable[[Callable[..., _R]], Callable[Concatenate[_S, _P], _R]]:
    """Give a blocking twin of ``run`` exactly ``run``'s parameters (for type checkers, help())."""

    def twin(method: Callable[..., _R]) -> Callable[Concatenate[_S, _P], _R]:
        method.__wrapped__ = run  # type: ignore[attr-defined]  # inspect.signature follows it
        return method

    return twin


# `Run` and `claimed`, imported by the first run (asyncio loads with them).
_LOADED: list[tuple[type[Run], Callable[..., Coroutine[Any, Any, WorkflowResult]]]] = []


class Workflow:
    """A dependency graph of named steps, run batch by batch with checkpoints.

    The graph is validated once, here; a `Workflow` can then be run any number
    of times, concurrently too, since each run keeps its own state.

    Args:
        steps: The steps, in declaration order. Declaration order decides the
            order within a batch and never anything else.
        inputs: Initial-context keys the workflow needs, such as
            ``("document",)``. Every run then checks, before any step runs,
            that ``initial_context`` has each of them, instead of a step
            failing later when it reads a missing key. Optional.

    Raises:
        WorkflowDefinitionError: If an item is not a `Step`, two steps share a
            name, a step depends on an unknown step, the dependencies form a
            cycle (the message names it in order: ``a -> b -> c -> a``), or
            ``inputs`` is not a collection of distinct non-empty str that are
            not step names.
    """

    __slots__ = ("_graph",)

    def __init__(self, steps: Iterable[Step], *, inputs: Collection[str] = ()) -> None:
        """Validate ``steps`` and ``inputs``, and build the dependency graph."""
        self._graph = Graph(steps, inputs)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps, in declaration order."""
        return self._graph.steps

    @property
    def inputs(self) -> tuple[str, ...]:
        """The initial-context keys every run must be given (declared with ``inputs=``)."""
        return self._graph.inputs

    def __repr__(self) -> str:
        """Show the step names."""
        return f"Workflow({list(self._graph.names)!r})"

    async def run(
        self,
        initial_context: Mapping[str, Any] | None = None,
        *,
        checkpoint_fn: CheckpointFn | None = None,
        resume_from: WorkflowCheckpoint | None = None,
        answers: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_error: OnError = "finish",
        budget: TokenUsage | Budget | None = None,
        rerun: Collection[str] | None = None,
        unknown_steps: UnknownSteps = "error",
        validate_json: bool = False,
        schedule: Schedule = "batch",
        max_concurrency: int | None = None,
        on_event: EventCallback | Sequence[EventCallback] | None = None,
        executor: Executor | None = None,
        checkpoint_every: CheckpointEvery = "batch",
        stop_grace: float = 5.0,
        prices: Prices | None = None,
        limits: Sequence[Limit] | None = None,
        sleep_up_to: float = 60.0,
        on_code_change: OnCodeChange = "keep",
    ) -> WorkflowResult:
        """Run every step not yet recorded, checkpointing after each batch.

        Each batch is every step whose dependencies are complete; its steps run
        concurrently, and the next batch starts only after the whole batch has
        finished and its checkpoint was taken.

        Args:
            initial_context: Values every step can read from ``ctx``. Keys must
                not be step names. Values are never written to checkpoints (only
                the key names are), so they may hold clients or secrets.
            checkpoint_fn: Called after each batch with a `WorkflowCheckpoint`
                of everything recorded so far. If it returns an awaitable, that
                is awaited before anything else starts. Calls never overlap.
            resume_from: A checkpoint of an earlier run of this workflow. Steps
                it records are not run; their outputs and its token usage are
                restored verbatim, and ``run_id``, ``seq`` and (unless passed
                again) ``metadata`` continue from it.
            answers: Answers to the questions pending in ``resume_from``
                (`Step.ask`), by ask step name. Each is checked (and converted)
                by the step's ``check`` and becomes its output; all are checked
                before anything runs.
            run_id: Identifier of the run; random for a fresh run when omitted.
            metadata: A dict with str keys stored verbatim in every checkpoint,
                for labels such as a job id.
            on_error: What to do when a step fails. ``"finish"`` (default):
                start nothing new, let the steps already running finish and
                record them, then raise. ``"cancel"``: cancel the running steps
                at once. ``"continue"``: keep running every step that does not
                depend on a failed step, then raise. All three checkpoint
                everything that completed before raising `WorkflowFailed`.
            budget: Token limits for the whole run, restored usage included:
                each non-zero field of the `TokenUsage` is a limit. Once the
                total reaches one, no new step starts; running steps finish and
                are recorded, a checkpoint is taken and `BudgetExceeded` is
                raised. Resume with a larger budget to continue. A `Budget`
                sets tokens, dollars or both (dollars need ``prices``).
            rerun: Step names to run again although ``resume_from`` records
                them (after a prompt change without a version bump, or a bad
                output), together with everything that depends on them.
            unknown_steps: What to do when ``resume_from`` records steps this
                workflow does not have (renamed or removed steps): ``"error"``
                (default) raises `CheckpointMismatchError`; ``"discard"`` drops
                them and lists them in `WorkflowResult.discarded`.
            validate_json: Check each output as it is recorded (after
                `Step.encode`): it must survive a JSON round trip equal. A
                violation fails its step with `CheckpointValueError` naming the
                step and the path inside the output; everything recorded before
                is checkpointed as with any failure.
            schedule: ``"batch"`` (default): a batch is every step whose
                dependencies are complete, and the next batch starts once the
                whole batch has finished and its checkpoint was taken.
                ``"eager"``: each step starts as soon as its own dependencies
                are done, and a checkpoint follows each completion (completions
                that land while ``checkpoint_fn`` runs are folded into the next
                one). Resume, failures and ``ctx`` behave the same.
            max_concurrency: At most this many units of work at once in the
                whole run (for rate limits), in either schedule: its steps, map
                items and sub-workflows' steps share one pool; a map or
                sub-workflow step takes no place itself. Steps start in
                declaration order.
            on_event: Called with each `executionkit.events.Event` as the run
                goes: run started or resumed, step started, finished, failed,
                retried, skipped, restored or invalidated, checkpoint taken, run finished
                or failed. A plain function or a coroutine function (awaited in
                order; ``run`` waits for it before returning), or a list of
                them, each getting every event in turn (``[Tracing(),
                ConsoleProgress()]``). What one raises is logged on the
                ``executionkit`` logger and never affects the run or the others.
            executor: Where plain-function (``def``) steps and map items run.
                Default: a worker thread each (threads the runs of the process
                share, one per call running, never queued: bound them with
                ``max_concurrency``), so they run side by side and the event
                loop stays free; steps marked ``inline=True`` run on the loop.
                Give a `concurrent.futures.Executor` for processes (CPU-bound
                work), a thread pool of your own, or a Dask client's
                ``get_executor()`` to spread steps over a cluster. Async steps
                stay on the event loop, and checkpoints are taken in this
                process. In a thread, ``current_step()`` works;
                in other executors the step receives ``ctx`` as a plain dict,
                and it and its values must be picklable; there
                ``current_step()`` gives its name, attempt and
                ``add_usage``, whose usage travels back with the result or
                the exception.
            checkpoint_every: In batch mode, ``"batch"`` (default) checkpoints
                after each batch; ``"step"`` records each step's output and
                checkpoints as soon as it completes (completions that land
                while ``checkpoint_fn`` runs are folded into the next call), so
                a hard crash (kill -9, out of memory) loses at most the steps
                still running, not their finished siblings. Batch order is the
                same either way. Choose ``"step"`` when steps are expensive.
                Eager mode always checkpoints after each completion.
            stop_grace: Seconds a stopping run (cancelled, Ctrl-C, SIGTERM, a
                step failing with ``on_error="cancel"``) waits for plain
                functions already running in threads, which cannot be
                interrupted (default 5.0). One that finishes in time is
                recorded; one that does not is abandoned: the last checkpoint
                lists its attempt in ``in_flight``, so a resume counts its
                usage as unknown and runs it again. ``0`` abandons at once;
                ``math.inf`` waits for ever. Async steps are cancelled at once
                whatever this says.
            prices: A `Prices` table that turns the ledger's tokens into
                dollars, for a dollar ``budget`` (`Budget`); sub-workflows use
                it too.
            limits: The named `Limit` objects steps draw on (``Step(...,
                limit=key)``), one per key; sub-workflows' steps draw on them
                too. Every run of the process shares each key's window: two
                runs calling one provider stay under its limits together.
            sleep_up_to: Seconds a `Step.wait` may have left for the run to
                sleep through it (default 60.0); a wait due later ends the
                run with it in `WorkflowResult.waits`, to resume once due.
                ``0`` sleeps through none; ``math.inf`` sleeps through all.
            on_code_change: What a resume does with recorded outputs whose
                step's code changed since they were recorded (their
                fingerprints differ, `Workflow.plan` lists them): ``"keep"``
                (default) keeps them and says so (event `CodeChanged`);
                ``"rerun"`` runs them again with what depends on them;
                ``"refuse"`` raises `CheckpointMismatchError` naming them
                before anything runs.

        Returns:
            The outputs of every step and the total token usage. When questions
            are pending (`Step.ask`) and nothing else can run, the run is
            suspended: it returns what completed, with ``pending`` naming the
            questions to answer; likewise with ``waits`` naming the waits
            (`Step.wait`) not due yet.

        Raises:
            RunArgumentError: Before any step runs, if ``initial_context`` keys
                collide with step names, lack one of the workflow's declared
                ``inputs``, an answer names a step that is not waiting for one,
                a step draws on a limit key ``limits`` lacks, or an argument
                has the wrong type.
            CheckpointMismatchError: Before any step runs, if ``resume_from``
                records steps this workflow lacks (unless discarded), needs
                ``initial_context`` keys that are missing, has a different
                ``run_id``, or a recorded output fails its step's ``decode``.
            WorkflowFailed: If steps raised (after their retries). Everything
                that completed was checkpointed first, with ``errors``.
            BudgetExceeded: If ``budget`` was reached with steps left to run.
            asyncio.CancelledError: If the task awaiting ``run`` is cancelled:
                running steps are cancelled, outputs not yet checkpointed are
                checkpointed, then the cancellation propagates unchanged. A step
                raising `KeyboardInterrupt` or `SystemExit` is handled the same
                way, and that exception propagates.
            Exception: Whatever ``checkpoint_fn`` raised, with a note naming
                the checkpoint; no further step was started.
        """
        # Every parameter above, by name: this signature is the one definition of the
        # run options (run_sync takes the same), and RunOptions.check the one check.
        options = RunOptions.check(self._graph, locals())
        # asyncio (and with it ssl, subprocess, concurrent.futures) loads on the first
        # run, so that importing executionkit to read or write checkpoints stays cheap.
        # Imported once, then kept here: an import statement costs on every run.
        if not _LOADED:
            from executionkit._run._ownership import claimed  # noqa: PLC0415
            from executionkit._run._runner import Run  # noqa: PLC0415

            _LOADED.append((Run, claimed))
        run_class, claimed = _LOADED[0]
        run = run_class(self._graph, options)
        if getattr(options.checkpoint_fn, "claim", None) is None:
            return await run.execute()
        return await claimed(run.execute, options.checkpoint_fn, run.run_id, options.resume_from)

    def plan(
        self,
        initial_context: Mapping[str, Any] | None = None,
        *,
        resume_from: WorkflowCheckpoint | None = None,
        answers: Mapping[str, Any] | None = None,
        rerun: Collection[str] | None = None,
        unknown_steps: UnknownSteps = "error",
        run_id: str | None = None,
        on_code_change: OnCodeChange = "keep",
    ) -> ResumePlan:
        """Say what ``run`` with these arguments would do, without running anything.

        Takes the arguments of `run` that decide what a resume does, checks them
        and ``resume_from`` as `run` does before its first step, and returns the
        steps that would run, be restored or be invalidated (and why), the
        questions that would be asked or are still waiting, and the items of
        unfinished maps. No step function, condition or map ``key`` of a step
        left to run is called (only the ask steps' ``check``, on ``answers``),
        and nothing is written. Without ``resume_from``, every step would run.

        Args:
            initial_context: As for `run`.
            resume_from: The checkpoint a resume would start from.
            answers: As for `run`: checked here exactly as `run` checks them.
            rerun: As for `run`.
            unknown_steps: As for `run`.
            run_id: As for `run`.
            on_code_change: As for `run`: ``"keep"`` lists the steps whose
                code changed in ``code_changed``, ``"rerun"`` in ``would_run``,
                and ``"refuse"`` raises as `run` would.

        Returns:
            A `ResumePlan`.

        Raises:
            RunArgumentError: For what `run` refuses before any step runs: a bad
                argument, or an answer to a step that is not waiting for one.
            CheckpointMismatchError: For a ``resume_from`` that `run` refuses.
            Exception: Whatever an ask step's ``check`` raised for its answer.
        """
        return plan_resume(self._graph, locals())

    def submit(
        self,
        store: object,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Hand a run that has not started to ``store``, for a worker to run; return its run_id.

        Nothing runs here: ``executionkit worker`` (or any process that runs the
        store's submitted runs) starts it, and passes ``inputs`` as the
        ``initial_context`` of the run and of every resume of it. The inputs
        are checked as `run` checks ``initial_context`` and stored, as plain
        JSON data, in the store's inbox (`RunInbox`), where anyone who can
        read the store can read them: **put secrets in the environment, not in
        inputs.** A run started any other way stores no inputs.

        Args:
            store: A store with an ``inbox`` (`SQLiteStore`, `PostgresStore`,
                or, for one run, `JsonFileStore` or `JsonLinesStore`).
            inputs: The run's ``initial_context``, plain JSON data.
            run_id: The run's id; a new random one if None.
            metadata: The ``metadata`` its checkpoints carry, plain JSON data.

        Returns:
            The run's id.

        Raises:
            RunArgumentError: For inputs `run` would refuse (a declared input
                missing, a key that is a step's name), or a bad ``run_id``.
            TypeError: If ``store`` has no inbox.
            ValueError: If the store holds the run already (submitted or started).
            CheckpointValueError: If ``inputs`` or ``metadata`` is not plain JSON
                data; the message names the key.
        """
        from executionkit._define._options import checked_submission  # noqa: PLC0415

        context, chosen, extra = checked_submission(self._graph, inputs, run_id, metadata)
        inbox = getattr(store, "inbox", None)
        if not callable(getattr(inbox, "submit", None)):
            msg = (
                f"submit needs a store with an inbox (SQLiteStore, PostgresStore, "
                f"JsonFileStore, JsonLinesStore), got {type(store).__name__}"
            )
            raise TypeError(msg)
        steps = self._graph.names
        inbox.submit(chosen, context, extra, steps=steps)  # type: ignore[union-attr]
        return chosen

    def fork(
        self,
        checkpoint: WorkflowCheckpoint,
        *,
        override: Mapping[str, Any] | None = None,
        rerun: Collection[str] = (),
        run_id: str | None = None,
        note: str | None = None,
    ) -> WorkflowCheckpoint:
        """Make a new run from any checkpoint of another, with outputs put in place by hand.

        Nothing is written and ``checkpoint`` is not changed: store the returned
        checkpoint where you like and pass it as ``resume_from`` to run the fork.
        It has a new ``run_id`` and records where it came from in ``lineage``
        (the parent's run id and seq, the overridden and re-run steps, the
        note), kept by every later checkpoint of the fork.

        Args:
            checkpoint: Any checkpoint of the parent run (format 1 or newer).
            override: Step name to the output to put in place, as if the step
                had produced it (in its recorded form: checked against the JSON
                rules and the step's ``decode``; for an ask step, its answer,
                checked by its ``check``; for a map step, its whole output). It
                is recorded with zero usage, as an ``"override"`` ledger row. A
                path ``"sub/step"`` reaches into sub-workflow step ``sub``.
            rerun: Steps to run again (paths reach into sub-workflows).
            run_id: The fork's run id; a new random one if None.
            note: Why the fork was made, kept in its lineage.

        Returns:
            The fork's first checkpoint (``seq`` 1): every output of
            ``checkpoint`` except the re-run steps and every step that depends
            on an overridden or re-run step, which the fork's resume runs.

        Raises:
            RunArgumentError: Before anything, naming the step: a step the
                workflow does not have, an override its ``decode`` or ``check``
                refuses or that is not a map's list, a step both overridden and
                re-run or overridden below a re-run step.
            CheckpointValueError: If an override is not plain JSON data.
        """
        from executionkit._resume._fork import fork  # noqa: PLC0415 - only forks pay for it

        return fork(
            self._graph, checkpoint, override=override, rerun=rerun, run_id=run_id, note=note
        )

    @_same_arguments_as(run)
    def run_sync(self, *args: Any, **kwargs: Any) -> WorkflowResult:
        """Run the workflow from synchronous code; takes the same arguments as `run`.

        Starts an event loop with `asyncio.run` and closes it afterwards. Ctrl-C
        cancels the run like a cancelled task: running steps are cancelled, what
        completed is checkpointed, then `KeyboardInterrupt` propagates. SIGTERM
        (what process managers, containers and deploys send) is treated the
        same way, then `SystemExit` with status 143 (128 + SIGTERM) propagates.
        The handler is installed only in the main thread and only over
        SIGTERM's default action (a program's own handler, or SIG_IGN, is
        kept), for the duration of the call; a second SIGTERM meanwhile gets
        the default action.

        Raises:
            RuntimeError: If called while an event loop is running in this
                thread (use ``await workflow.run(...)`` there instead).
            SystemExit: With code 143, after SIGTERM, once what completed was
                checkpointed.
            Exception: Everything `run` raises.
        """
        import asyncio  # noqa: PLC0415 - see run()

        from executionkit._run._signals import (  # noqa: PLC0415
            TERMINATED_STATUS,
            Terminated,
            terminate_on_sigterm,
        )

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            msg = (
                "Workflow.run_sync() cannot be called while an event loop is running in "
                "this thread; use 'await workflow.run(...)' instead"
            )
            raise RuntimeError(msg)
        # The result is handed out through `kept`, never as the main task's own: when
        # asyncio.run ends it looks up the SIGINT handler, a partial holding that task,
        # and Python formats its repr, result included, on the way (36 ms for a
        # 2,000-step result: benchmarks/add_usage.py).
        kept: list[WorkflowResult] = []

        async def main() -> None:
            kept.append(await terminate_on_sigterm(self.run(*args, **kwargs)))

        from executionkit import _clock  # noqa: PLC0415 - a test's clock may give the loop

        try:
            if _clock.new_loop is None:
                asyncio.run(main())
            else:
                with asyncio.Runner(loop_factory=_clock.new_loop) as runner:
                    runner.run(main())
        except Terminated:
            raise SystemExit(TERMINATED_STATUS) from None
        return kept[0]
