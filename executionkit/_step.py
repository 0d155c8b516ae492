"""`Step`: one named unit of work in a workflow."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, ParamSpec, TypeAlias, TypeVar

from executionkit._errors import WorkflowDefinitionError

if TYPE_CHECKING:
    from datetime import timedelta

    from executionkit._workflow import Workflow  # noqa: TC004 - dataclass annotations stay strings

StepFn: TypeAlias = Callable[[Mapping[str, Any]], Any]
"""A step's ``run``: takes the read-only ``ctx``, returns the output or an awaitable of it."""

Condition: TypeAlias = Callable[[Mapping[str, Any]], object]
"""A step's ``when``: a plain function of the read-only ``ctx``; a falsy result skips the step."""

Join: TypeAlias = Literal["all", "any"]
"""How a step treats skipped dependencies: skipped if any was (``"all"``), or only if all were."""

JOINS = ("all", "any")


def _empty_metadata() -> MappingProxyType[str, Any]:
    return MappingProxyType({})


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _keywords_checked(builder: str, takes: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Refuse keywords the builder does not take with `WorkflowDefinitionError`, not TypeError.

    The signature stays the builder's own (for type checkers and `help`); only a
    call with an unknown keyword, which Python would refuse with `TypeError`, is
    refused instead naming the step, with a suggestion.
    """

    def decorate(method: Callable[_P, _R]) -> Callable[_P, _R]:
        code = method.__code__
        allowed = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]

        @functools.wraps(method)
        def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            unknown = sorted(set(kwargs) - set(allowed))
            if unknown:
                name = args[1] if len(args) > 1 else kwargs.get("name")
                raise _unknown_options(name, builder, unknown, allowed[2:], takes)
            return method(*args, **kwargs)

        return checked

    return decorate


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
            attempt raises `TimeoutError` inside the step and counts as a failed
            attempt, retried if `TimeoutError` matches ``retry_on``. Needs an
            async ``run``: a plain function called inline cannot be interrupted,
            so that combination is refused (hand blocking work to a thread with
            ``await asyncio.to_thread(...)`` inside an async step instead).
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
    run: StepFn | Workflow
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

    def __post_init__(self) -> None:
        """Validate and normalise the fields, naming the step in every error."""
        name: object = self.name
        if not isinstance(name, str) or not name:
            msg = f"step name must be a non-empty str, got {type(name).__name__} {name!r}"
            raise WorkflowDefinitionError(msg)
        run: object = self.run
        if not callable(run) and not is_workflow(run):
            msg = (
                f"step {name!r}: run must be callable (a function or coroutine function "
                f"taking ctx) or a Workflow, got {type(run).__name__} {run!r}"
            )
            raise WorkflowDefinitionError(msg)
        if not is_workflow(run):
            check_call(name, run, *self._called_as)
        object.__setattr__(self, "depends_on", _normalise_depends_on(name, self.depends_on))
        metadata: object = self.metadata
        if not isinstance(metadata, Mapping):
            msg = (
                f"step {name!r}: metadata must be a mapping, "
                f"got {type(metadata).__name__} {metadata!r}"
            )
            raise WorkflowDefinitionError(msg)
        if not isinstance(metadata, MappingProxyType):
            object.__setattr__(self, "metadata", MappingProxyType(dict(metadata)))
        _check_retry_settings(self)
        _check_resume_settings(self)
        _check_condition(self)

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
        run: Callable[[Any, Mapping[str, Any]], Any] | Workflow,
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
        from executionkit._step_kinds import MAP_OPTIONS, MapStep  # noqa: PLC0415 - a cycle

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
    @_keywords_checked("Step.ask", "depends_on, check, expires_after, version and metadata")
    def ask(
        cls,
        name: str,
        question: Callable[[Mapping[str, Any]], Any],
        *,
        depends_on: Iterable[str] = (),
        check: Callable[[Any], Any] | None = None,
        expires_after: float | timedelta | None = None,
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
                stays open once asked; a later answer fails this step.
            version: As for `Step`: a changed version asks again.
            metadata: As for `Step`.

        Raises:
            WorkflowDefinitionError: For an invalid setting or an unknown
                keyword, naming the step; for a ``question`` or ``check`` that
                cannot be called with one argument.
        """
        from executionkit._step_kinds import AskStep  # noqa: PLC0415 - a cycle

        return AskStep(
            name,
            question,
            tuple(depends_on) if not isinstance(depends_on, str) else depends_on,  # type: ignore[arg-type]
            _empty_metadata() if metadata is None else metadata,
            version=version,
            check=check,
            expires_after=expires_after,
        )


# Keywords written for an option, and the option meant: did_you_mean would offer
# retry_on for retry, closer in spelling and further in meaning.
_MEANT = {"retry": "retries", "max_retries": "retries", "num_retries": "retries"}

# Keywords that Step takes and a builder does not, and what to do instead.
_INSTEAD = {
    "Step.ask": {
        "when": (
            "an ask step has no condition of its own: give the when to a step it depends "
            "on, whose skip skips the question too"
        ),
    },
}


def _unknown_options(
    name: object, builder: str, unknown: list[str], allowed: Iterable[str], takes: str
) -> WorkflowDefinitionError:
    """The error for keywords ``builder`` does not take, each with a suggestion if one fits."""
    from executionkit._errors import did_you_mean  # noqa: PLC0415 - errors only

    allowed = tuple(allowed)
    instead = _INSTEAD.get(builder, {})
    hints = "".join(
        f"; {instead[option]}"
        if option in instead
        else f"; did you mean {_MEANT[option]!r}?"
        if _MEANT.get(option) in allowed
        else did_you_mean(option, allowed)
        for option in unknown
    )
    return WorkflowDefinitionError(
        f"step {name!r}: {builder} got unknown option(s) {', '.join(map(repr, unknown))} "
        f"(it takes {takes}){hints}"
    )


def check_call(name: str, fn: object, role: str, call: str, count: int) -> None:
    """Refuse ``fn`` if it cannot be called with ``count`` positional arguments.

    The wrapper a decorator returns is what gets called, so its own signature is
    checked (not the wrapped function's). A callable `inspect.signature` cannot
    describe (some builtins) is accepted: only its call can tell.

    Raises:
        WorkflowDefinitionError: Naming the step, the role (``when``), the call
            it will get (``when(ctx)``) and the signature ``fn`` has.
    """
    try:
        signature = inspect.signature(fn, follow_wrapped=False)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(count))
    except TypeError:
        bare = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        what = getattr(fn, "__qualname__", None) or f"a {type(fn).__name__} object"
        msg = (
            f"step {name!r}: {role} is called as {call}, but {what} takes {bare} and cannot "
            f"be called with {count} argument{'' if count == 1 else 's'}"
        )
        raise WorkflowDefinitionError(msg) from None


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
)


def _check_retry_settings(step: Step) -> None:
    name = step.name
    retries: object = step.retries
    if type(retries) is not int or retries < 0:
        msg = f"step {name!r}: retries must be a non-negative int, got {retries!r}"
        raise WorkflowDefinitionError(msg)
    object.__setattr__(step, "retry_on", _normalise_retry_on(name, step.retry_on))
    for setting, low in (("retry_delay", 0.0), ("retry_max_delay", 0.0), ("retry_backoff", 1.0)):
        _check_number(name, setting, getattr(step, setting), low)
    jitter = _check_number(name, "retry_jitter", step.retry_jitter, 0.0)
    if jitter > 1:
        msg = f"step {name!r}: retry_jitter must be between 0 and 1, got {step.retry_jitter!r}"
        raise WorkflowDefinitionError(msg)
    timeout: object = step.timeout
    if timeout is None:
        return
    if _check_number(name, "timeout", timeout, 0.0) == 0:
        msg = f"step {name!r}: timeout must be a positive number of seconds or None, got 0"
        raise WorkflowDefinitionError(msg)
    if not is_async_callable(step.run):
        msg = (
            f"step {name!r}: timeout needs an async run function; a plain function runs "
            f"inline and cannot be interrupted. Make it 'async def' and hand blocking work "
            f"to a thread with 'await asyncio.to_thread(...)'"
        )
        raise WorkflowDefinitionError(msg)


def _check_resume_settings(step: Step) -> None:
    name = step.name
    version: object = step.version
    if version is not None and (not isinstance(version, str) or not version):
        msg = f"step {name!r}: version must be a non-empty str or None, got {version!r}"
        raise WorkflowDefinitionError(msg)
    encode: object = step.encode
    decode: object = step.decode
    for setting, value in (("encode", encode), ("decode", decode)):
        if value is not None and not callable(value):
            msg = f"step {name!r}: {setting} must be callable or None, got {value!r}"
            raise WorkflowDefinitionError(msg)
    if (encode is None) != (decode is None):
        given, missing = ("encode", "decode") if decode is None else ("decode", "encode")
        msg = (
            f"step {name!r}: {given} needs a matching {missing}, so that recorded outputs "
            f"can be turned back into what the step returned"
        )
        raise WorkflowDefinitionError(msg)
    if encode is not None:
        check_call(name, encode, "encode", "encode(output)", 1)
        check_call(name, decode, "decode", "decode(data)", 1)


def _check_condition(step: Step) -> None:
    name = step.name
    when: object = step.when
    if when is not None and not callable(when):
        msg = (
            f"step {name!r}: when must be a function taking ctx and returning a truth value, "
            f"or None, got {type(when).__name__} {when!r}"
        )
        raise WorkflowDefinitionError(msg)
    if when is not None and is_async_callable(when):
        msg = (
            f"step {name!r}: when must be a plain function, not a coroutine function: it is "
            f"evaluated once, inline, as soon as the step's dependencies are done. Decide "
            f"from what ctx holds, or compute the decision in a step it depends on"
        )
        raise WorkflowDefinitionError(msg)
    if when is not None:
        check_call(name, when, "when", "when(ctx)", 1)
    join: object = step.join
    if not isinstance(join, str) or join not in JOINS:
        msg = f"step {name!r}: join must be 'all' or 'any', got {join!r}"
        raise WorkflowDefinitionError(msg)


def _check_number(name: str, setting: str, value: object, low: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.inf
        if math.isfinite(number) and number >= low:
            return number
    msg = f"step {name!r}: {setting} must be a finite number >= {low:g}, got {value!r}"
    raise WorkflowDefinitionError(msg)


def _normalise_retry_on(name: str, retry_on: object) -> tuple[type[Exception], ...]:
    types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
    for kind in types:
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            msg = (
                f"step {name!r}: retry_on must be an Exception subclass or a tuple of them "
                f"(interrupts such as CancelledError are never retried), got {kind!r}"
            )
            raise WorkflowDefinitionError(msg)
    return types


def is_workflow(run: object) -> bool:
    """Whether ``run`` is a `Workflow` (a step running it is a sub-workflow)."""
    from executionkit._workflow import Workflow  # noqa: PLC0415 - a cycle; loaded by then

    return isinstance(run, Workflow)


def is_async_callable(run: object) -> bool:
    # inspect looks through functools.partial; objects need their __call__ checked.
    return inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(
        getattr(run, "__call__", None)  # noqa: B004 - we want the method, not callable()
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


def _normalise_depends_on(name: str, depends_on: object) -> tuple[str, ...]:
    if isinstance(depends_on, str):
        msg = (
            f"step {name!r}: depends_on must be a collection of step names, not a single "
            f"str; write depends_on=({depends_on!r},)"
        )
        raise WorkflowDefinitionError(msg)
    if not isinstance(depends_on, Iterable):
        msg = (
            f"step {name!r}: depends_on must be a collection of step names, "
            f"got {type(depends_on).__name__} {depends_on!r}"
        )
        raise WorkflowDefinitionError(msg)
    seen: dict[str, None] = {}
    for dep in depends_on:
        if not isinstance(dep, str) or not dep:
            msg = (
                f"step {name!r}: every dependency must be a non-empty str step name, "
                f"got {type(dep).__name__} {dep!r}"
            )
            raise WorkflowDefinitionError(msg)
        if dep == name:
            msg = f"step {name!r} depends on itself"
            raise WorkflowDefinitionError(msg)
        seen[dep] = None
    return tuple(seen)
