"""`Step`: one named unit of work in a workflow."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

from executionkit._define._step_checks import (
    _check_condition,
    _check_inline,
    _check_limit,
    _check_resume_settings,
    _check_retry_settings,
    _keywords_checked,
    _normalise_depends_on,
    _unknown_options,
    check_call,
    is_workflow,
)
from executionkit._errors import WorkflowDefinitionError

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from executionkit._define._step_checks import SubWorkflow  # noqa: TC004 - dataclass annotations stay strings


StepFn: TypeAlias = Callable[[Mapping[str, Any]], Any]
"""A step's ``run``: takes the read-only ``ctx``, returns the output or an awaitable of it."""

Condition: TypeAlias = Callable[[Mapping[str, Any]], object]
"""A step's ``when``: a plain function of the read-only ``ctx``; a falsy result skips the step."""

Join: TypeAlias = Literal["all", "any"]
"""How a step treats skipped dependencies: skipped if any was (``"all"``), or only if all were."""


# Read-only, so one empty mapping serves every step given no metadata.
_EMPTY_METADATA: MappingProxyType[str, Any] = MappingProxyType({})


def _empty_metadata() -> MappingProxyType[str, Any]:
    return _EMPTY_METADATA


@dataclass(frozen=True, repr=False)
class Step:
    """A named unit of work and the steps it depends on.

    Args:
        name: Unique, non-empty name; the key of the step's output in ``ctx``,
            in results and in checkpoints.
        run: Called as ``run(ctx)``; a plain function or a coroutine function.
            Or a `Workflow`: the step then runs it as a sub-workflow, with its
            ``ctx`` as the initial context, and its output is the dict of the
            sub-workflow's outputs.
            ``ctx`` is a read-only mapping of the run's initial context plus the
            outputs of this step's ancestors. Return the output, or a
            `PatternResult` whose ``value`` is the output and whose ``cost`` is
            added to the run's token usage.
        depends_on: Names of the steps whose outputs this step needs. Any
            iterable of names (not a single string); stored as a tuple with
            duplicates removed.
        metadata: Free-form labels for your own use; stored read-only and never
            written to checkpoints.
        retries: How many times to run the step again after a failed attempt
            (keyword-only; default 0). Only the last attempt's failure fails
            the step.
        retry_on: The exception types that count as a failed attempt worth
            retrying; anything else fails the step at once. An `Exception`
            subclass or a tuple of them; default ``(Exception,)``.
        retry_delay: Seconds to wait after the first failed attempt (default 1.0).
        retry_backoff: Factor the wait grows by after each further failed
            attempt (default 2.0, at least 1).
        retry_max_delay: Cap on any single wait, in seconds (default 60.0).
        retry_jitter: Fraction of each wait that is randomised, from 0 (exact
            waits) to 1 (anywhere between zero and the full wait); default 0.5.
            Jitter keeps many retrying steps from hitting a rate-limited API in
            lockstep.
        timeout: Seconds one attempt may take (default: no limit). A timed-out
            attempt counts as a failed attempt (`TimeoutError`), retried if
            `TimeoutError` matches ``retry_on``. An async step gets the
            `TimeoutError` raised inside it; a plain function's thread cannot
            be interrupted, so it is abandoned: what it returns later is
            discarded and usage it reports later is booked as ``"late"``.
            Refused with ``inline=True`` (nothing can stop a function running
            on the loop).
        version: An optional label of the step's behaviour (a prompt revision,
            a model name). Checkpoints record it; on resume a recorded output
            whose version differs is not trusted: the step and everything that
            depends on it run again.
        encode: Turns the step's output into plain data for the checkpoint
            (for dataclasses, pydantic models, datetimes). Within the run,
            ``ctx`` and the result keep the original object.
        decode: Turns the recorded form back into the output on resume. Give
            both or neither.
        when: A condition: a plain function (not a coroutine function) called
            as ``when(ctx)`` with the ``ctx`` the step would get, once its
            dependencies are done. A falsy result *skips* the step: it never
            runs and has no output, and the checkpoint records the skip with a
            reason, so resuming never calls ``when`` again. One that raises
            fails the step. Default: no condition.
        join: What skipped dependencies do to the step. ``"all"`` (default):
            the step is skipped if any dependency was. ``"any"``: the step runs
            if at least one dependency ran (the skipped ones are absent from its
            ``ctx``), and is skipped only if every one was skipped. ``when`` is
            called only if the join rule lets the step run.
        inline: For a plain (``def``) function only: call it on the event
            loop's thread instead of a worker thread (default False). Saves
            the thread hand-off (microseconds) for cheap glue such as
            reshaping a dict; while it runs, nothing else of the run moves
            (no other step, event, checkpoint or signal handling), so never
            use it for a call that waits on the network. An explicit
            ``executor=`` of the run does not apply to inline steps.
        limit: The key of the `Limit` (given to ``run(..., limits=[...])``)
            this step's attempts draw on, such as ``"openai"``; each attempt
            (each item of a map, each retry) starts only when the key has room.
            Default: none.
        tokens_estimate: Tokens one attempt is expected to spend, reserved in
            its limit's token window when it starts and corrected to what it
            reports when it ends (default: the mean of the key's attempts so
            far). Only with ``limit``.

    Raises:
        WorkflowDefinitionError: If ``name`` is not a non-empty string, ``run``
            is not callable, ``depends_on`` is a string or holds something other
            than non-empty strings, the step depends on itself, ``metadata`` is
            not a mapping, a retry or timeout setting is out of range, ``when``
            is not a plain function, ``join`` is not ``"all"`` or ``"any"``, or
            ``run``, ``when``, ``encode`` or ``decode`` cannot be called with
            the one argument it will be given (checked with
            `inspect.signature`; a callable without one, such as some
            builtins, is not refused).
    """

    # How the run calls ``run``: what to call it in a message, the call, the argument count.
    _called_as: ClassVar[tuple[str, str, int]] = ("run", "run(ctx)", 1)

    name: str
    run: StepFn | SubWorkflow
    depends_on: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=_empty_metadata)
    _: KW_ONLY
    retries: int = 0
    retry_on: type[Exception] | tuple[type[Exception], ...] = (Exception,)
    retry_delay: float = 1.0
    retry_backoff: float = 2.0
    retry_max_delay: float = 60.0
    retry_jitter: float = 0.5
    timeout: float | None = None
    version: str | None = None
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any], Any] | None = None
    when: Condition | None = None
    join: Join = "all"
    inline: bool = False
    limit: str | None = None
    tokens_estimate: int | None = None

    def __post_init__(self) -> None:
        """Validate and normalise the fields, naming the step in every error."""
        name: object = self.name
        if not isinstance(name, str) or not name:
            msg = f"step name must be a non-empty str, got {type(name).__name__} {name!r}"
            raise WorkflowDefinitionError(msg)
        run: object = self.run
        if is_workflow(run):
            pass
        elif not callable(run):
            msg = (
                f"step {name!r}: run must be callable (a function or coroutine function "
                f"taking ctx) or a Workflow, got {type(run).__name__} {run!r}"
            )
            raise WorkflowDefinitionError(msg)
        else:
            check_call(name, run, *self._called_as)
        depends_on: object = self.depends_on
        if type(depends_on) is not tuple or depends_on:
            object.__setattr__(self, "depends_on", _normalise_depends_on(name, depends_on))
        metadata: object = self.metadata
        if type(metadata) is not MappingProxyType:
            if not isinstance(metadata, Mapping):
                msg = (
                    f"step {name!r}: metadata must be a mapping, "
                    f"got {type(metadata).__name__} {metadata!r}"
                )
                raise WorkflowDefinitionError(msg)
            if not isinstance(metadata, MappingProxyType):
                object.__setattr__(self, "metadata", MappingProxyType(dict(metadata)))
        self._check_settings()

    def _check_settings(self) -> None:
        """Check the retry, resume and condition settings that are not the defaults."""
        # Most steps keep every default, and the defaults (those very objects) are valid.
        defaults = _DEFAULTS
        if (
            self.retries is not defaults["retries"]
            or self.retry_on is not defaults["retry_on"]
            or self.retry_delay is not defaults["retry_delay"]
            or self.retry_backoff is not defaults["retry_backoff"]
            or self.retry_max_delay is not defaults["retry_max_delay"]
            or self.retry_jitter is not defaults["retry_jitter"]
            or self.timeout is not None
        ):
            _check_retry_settings(self)
        if self.version is not None or self.encode is not None or self.decode is not None:
            _check_resume_settings(self)
        if self.when is not None or self.join is not defaults["join"]:
            _check_condition(self)
        if self.inline is not False:
            _check_inline(self)
        if self.limit is not None or self.tokens_estimate is not None:
            _check_limit(self)

    def __repr__(self) -> str:
        """Show the name, callable, dependencies, metadata and any non-default setting."""
        parts = [f"name={self.name!r}", f"run={self.run!r}", f"depends_on={self.depends_on!r}"]
        parts.append(f"metadata={self.metadata!r}")
        parts.extend(
            f"{name}={getattr(self, name)!r}"
            for name, default in _SETTING_DEFAULTS
            if getattr(self, name) != default
        )
        return f"Step({', '.join(parts)})"

    def __hash__(self) -> int:
        """Hash by name, callable and dependencies (metadata is not hashable)."""
        return hash((self.name, self.run, self.depends_on))

    @classmethod
    def map(
        cls,
        name: str,
        run: Callable[[Any, Mapping[str, Any]], Any] | SubWorkflow,
        *,
        over: str,
        key: Callable[[Any], str] | None = None,
        depends_on: Iterable[str] = (),
        max_concurrency: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> Step:
        """Build a step that runs ``run(item, ctx)`` once per item of a list or mapping.

        The items are the value of ``over`` in ``ctx``: the output of the step
        it names (added to ``depends_on``) or an initial-context key. A list or
        tuple gives its items in order, keyed ``"0"``, ``"1"``, ...; a mapping
        gives its values, keyed by its keys. The step's output is the list of
        item outputs in item order (a dict by key for a mapping). Each item is
        recorded in the checkpoint as soon as it completes, so resuming runs
        only the items not recorded, matched by key.

        Args:
            name: The step's name.
            run: Called as ``run(item, ctx)``, plain or async; returns the item's
                output or a `PatternResult`.
            over: The step or initial-context key holding the items.
            key: ``key(item) -> str`` names each item; keys must be unique,
                non-empty strings. Default: the mapping key, or the position.
            depends_on: Other steps the map needs.
            max_concurrency: At most this many items run at once (the run's
                ``max_concurrency`` bounds them too).
            metadata: As for `Step`.
            **options: Any other `Step` keyword (``retries``, ``timeout``,
                ``version``, ``encode``/``decode``, ...), applied to each item;
                ``when`` and ``join`` decide whether the map runs at all.

        Raises:
            WorkflowDefinitionError: For an invalid setting or an unknown
                keyword, naming the step; for a ``run`` that cannot be called
                as ``run(item, ctx)`` or a ``key`` that cannot be called as
                ``key(item)``.
        """
        from executionkit._define._step_kinds import MAP_OPTIONS, MapStep  # noqa: PLC0415 - a cycle

        unknown = sorted(set(options) - MAP_OPTIONS)
        if unknown:
            raise _unknown_options(name, "Step.map", unknown, MAP_OPTIONS, "the keywords of Step")
        return MapStep(
            name,
            run,  # type: ignore[arg-type]  # called with (item, ctx)
            tuple(depends_on) if not isinstance(depends_on, str) else depends_on,  # type: ignore[arg-type]
            _empty_metadata() if metadata is None else metadata,
            over=over,
            key=key,
            max_concurrency=max_concurrency,
            **options,
        )

    @classmethod
    @_keywords_checked(
        "Step.ask", "depends_on, check, expires_after, default, version and metadata"
    )
    def ask(
        cls,
        name: str,
        question: Callable[[Mapping[str, Any]], Any],
        *,
        depends_on: Iterable[str] = (),
        check: Callable[[Any], Any] | None = None,
        expires_after: float | timedelta | None = None,
        default: Any = ...,
        version: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Step:
        """Build a step that asks a person a question and waits for the answer.

        When its dependencies are done, ``question(ctx)`` computes the
        question (any JSON data: a string, or a dict with the plan to approve).
        It is recorded in the checkpoint as pending, nothing that depends on
        this step starts, and once nothing else can run the run returns a
        `WorkflowResult` whose ``pending`` maps this step to its question.
        Resume with ``run(resume_from=..., answers={name: answer})``: the
        answer becomes this step's output (with no token usage) and its
        dependants run. Nothing runs twice to ask again.

        Args:
            name: The step's name; answers are given by it.
            question: ``question(ctx)``, a plain function returning JSON data.
            depends_on: The steps the question needs.
            check: ``check(answer)`` validates an answer before anything runs
                and returns what is recorded (raise to refuse it).
            expires_after: Seconds (or a `datetime.timedelta`) the question
                stays open once asked. Once it has passed, a resume takes
                ``default`` as the answer, or without one fails this step (as
                does an answer given late).
            default: The answer a resume after the deadline takes (plain
                data, passed through ``check``), recorded as given by the
                deadline (``answered_by`` in the checkpoint's ``step_info``),
                not by a person. Needs ``expires_after``. ``...`` (the
                default): none.
            version: As for `Step`: a changed version asks again.
            metadata: As for `Step`.

        Raises:
            WorkflowDefinitionError: For an invalid setting or an unknown
                keyword, naming the step; for a ``question`` or ``check`` that
                cannot be called with one argument.
        """
        from executionkit._define._step_kinds import AskStep  # noqa: PLC0415 - a cycle

        return AskStep(
            name,
            question,
            tuple(depends_on) if not isinstance(depends_on, str) else depends_on,  # type: ignore[arg-type]
            _empty_metadata() if metadata is None else metadata,
            version=version,
            check=check,
            expires_after=expires_after,
            default=default,
        )

    @classmethod
    @_keywords_checked("Step.wait", "seconds, until, depends_on, version and metadata")
    def wait(
        cls,
        name: str,
        *,
        seconds: float | timedelta | None = None,
        until: Callable[[Mapping[str, Any]], datetime] | None = None,
        depends_on: Iterable[str] = (),
        version: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Step:
        """Build a step that waits until a time: a durable timer, recorded in checkpoints.

        When its dependencies are done, the step fixes its wake-up time (now
        plus ``seconds``, or ``until(ctx)``) and records it in the checkpoint
        (``waits``). Nothing that depends on it starts before then. A wait due
        within the run's ``sleep_up_to`` seconds is slept through; a longer one
        ends the run with the wait in `WorkflowResult.waits`, and a resume
        before the time runs nothing that depends on it. The time never moves:
        every resume, in any process, after any crash, waits for the same one.
        Its output is None.

        Args:
            name: The step's name.
            seconds: How long to wait once reached (a number or a
                `datetime.timedelta`, zero or more).
            until: ``until(ctx)``, a plain function returning the aware
                `datetime.datetime` to wait for (a time in the past is due
                at once). Give ``seconds`` or ``until``, not both.
            depends_on: The steps the wait follows.
            version: As for `Step`: a changed version waits again, from now.
            metadata: As for `Step`.

        Raises:
            WorkflowDefinitionError: For an invalid setting or an unknown
                keyword, naming the step.
        """
        from executionkit._define._step_kinds import WaitStep  # noqa: PLC0415 - a cycle

        return WaitStep.built(
            name,
            seconds,
            until,
            tuple(depends_on) if not isinstance(depends_on, str) else depends_on,  # type: ignore[arg-type]
            version,
            _empty_metadata() if metadata is None else metadata,
        )


# Each field's default value: the very objects a step built without the field holds.
_DEFAULTS: dict[str, Any] = {
    item.name: item.default for item in fields(Step) if item.default is not MISSING
}

_SETTING_DEFAULTS = (
    ("retries", 0),
    ("retry_on", (Exception,)),
    ("retry_delay", 1.0),
    ("retry_backoff", 2.0),
    ("retry_max_delay", 60.0),
    ("retry_jitter", 0.5),
    ("timeout", None),
    ("version", None),
    ("encode", None),
    ("decode", None),
    ("when", None),
    ("join", "all"),
    ("inline", False),
    ("limit", None),
    ("tokens_estimate", None),
)


def retry_wait(step: Step, attempt: int, draw: float) -> float:
    """Seconds to wait after failed ``attempt`` (1-based), given a uniform ``draw`` in [0, 1)."""
    if step.retry_delay == 0 or step.retry_max_delay == 0:
        return 0.0
    try:
        wait = step.retry_delay * step.retry_backoff ** (attempt - 1)
    except OverflowError:
        wait = math.inf
    return min(wait, step.retry_max_delay) * (1.0 - step.retry_jitter * draw)
