"""Checking a `Step`'s definition: its options, its functions' signatures, its settings.

Everything here raises `WorkflowDefinitionError` naming the step and what was
expected, when the step is built: before any run could pay for a mistake.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ParamSpec, Protocol, TypeVar

from executionkit._errors import WorkflowDefinitionError, did_you_mean

if TYPE_CHECKING:
    from executionkit._define._graph import Graph
    from executionkit._define._step import Step

_P = ParamSpec("_P")
_R = TypeVar("_R")

JOINS = ("all", "any")

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


def _unknown_options(
    name: object, builder: str, unknown: list[str], allowed: Iterable[str], takes: str
) -> WorkflowDefinitionError:
    """The error for keywords ``builder`` does not take, each with a suggestion if one fits."""
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


# Functions already found to take ``count`` arguments: one function usually serves many
# steps (a workflow of 10,000 steps may have three), and inspect.signature is slow.
_FIT: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()


def _fits(fn: object, count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments (or cannot be told)."""
    last, last_count = _last_fit
    if last() is fn and last_count == count:
        return True
    try:
        if _FIT.get(fn) == count:
            _remember_last(fn, count)
            return True
    except TypeError:  # not weakly referable (or not hashable): checked each time
        pass
    try:
        signature = inspect.signature(fn, follow_wrapped=False)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    with contextlib.suppress(TypeError):
        _FIT[fn] = count
        _remember_last(fn, count)
    return True


def _nothing() -> None:
    return None


# The function found to fit last, weakly, and its count: consecutive steps mostly share one.
_last_fit: tuple[Callable[[], object], int] = (_nothing, -1)


def _remember_last(fn: object, count: int) -> None:
    global _last_fit  # noqa: PLW0603 - a one-entry cache
    _last_fit = (weakref.ref(fn), count)


def check_call(name: str, fn: object, role: str, call: str, count: int) -> None:
    """Refuse ``fn`` if it cannot be called with ``count`` positional arguments.

    The wrapper a decorator returns is what gets called, so its own signature is
    checked (not the wrapped function's). A callable `inspect.signature` cannot
    describe (some builtins) is accepted: only its call can tell.

    Raises:
        WorkflowDefinitionError: Naming the step, the role (``when``), the call
            it will get (``when(ctx)``) and the signature ``fn`` has.
    """
    if _fits(fn, count):
        return
    signature = inspect.signature(fn, follow_wrapped=False)  # type: ignore[arg-type]
    bare = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    what = getattr(fn, "__qualname__", None) or f"a {type(fn).__name__} object"
    msg = (
        f"step {name!r}: {role} is called as {call}, but {what} takes {bare} and cannot "
        f"be called with {count} argument{'' if count == 1 else 's'}"
    )
    raise WorkflowDefinitionError(msg)


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
    if step.inline is True:
        msg = (
            f"step {name!r}: timeout cannot apply with inline=True: a plain function "
            f"running on the event loop's thread cannot be interrupted. Drop inline=True "
            f"(it then runs in a worker thread, abandoned when it times out)"
        )
        raise WorkflowDefinitionError(msg)


def _check_inline(step: Step) -> None:
    name = step.name
    inline: object = step.inline
    if type(inline) is not bool:
        msg = f"step {name!r}: inline must be True or False, got {inline!r}"
        raise WorkflowDefinitionError(msg)
    run: object = step.run
    if is_workflow(run):
        msg = f"step {name!r}: inline=True applies to plain functions, not to a sub-workflow"
        raise WorkflowDefinitionError(msg)
    if is_async_callable(run):
        msg = (
            f"step {name!r}: inline=True applies to plain (def) functions; "
            f"an async function already runs on the event loop"
        )
        raise WorkflowDefinitionError(msg)
    if step.timeout is not None:
        _check_retry_settings(step)


def _check_limit(step: Step) -> None:
    name = step.name
    limit: object = step.limit
    if limit is not None and (type(limit) is not str or not limit):
        msg = f"step {name!r}: limit must be the key of a Limit (a non-empty str), got {limit!r}"
        raise WorkflowDefinitionError(msg)
    if limit is not None and is_workflow(step.run):
        msg = (
            f"step {name!r}: limit= applies to steps that call a provider; a sub-workflow's "
            f"own steps say which limits they draw on"
        )
        raise WorkflowDefinitionError(msg)
    estimate: object = step.tokens_estimate
    if estimate is None:
        return
    if type(estimate) is not int or estimate < 0:
        msg = f"step {name!r}: tokens_estimate must be an int >= 0 or None, got {estimate!r}"
        raise WorkflowDefinitionError(msg)
    if limit is None:
        msg = f"step {name!r}: tokens_estimate is only used with limit=, which this step has not"
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


class SubWorkflow(Protocol):
    """A workflow that a step runs, as the shape of its parent sees it: `Workflow` is one.

    A protocol, so that the shape of a workflow never imports the façade that
    runs one: the parent reads the child's validated graph (`graph_of`), and
    the runner calls its ``run``.
    """

    @property
    def _graph(self) -> Graph: ...


def is_workflow(run: object) -> bool:
    """Whether ``run`` is a workflow (a step running it is a sub-workflow).

    Known by structure, not by class: its class holds a validated graph in
    ``_graph``, as `Workflow` does (`SubWorkflow`).
    """
    return hasattr(type(run), "_graph")


def is_async_callable(run: object) -> bool:
    # inspect looks through functools.partial; objects need their __call__ checked.
    return inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(
        getattr(run, "__call__", None)  # noqa: B004 - we want the method, not callable()
    )


def _normalise_depends_on(name: str, depends_on: object) -> tuple[str, ...]:
    if type(depends_on) is tuple and len(depends_on) == 1:  # the commonest: one dependency
        dep = depends_on[0]
        if type(dep) is str and dep and dep != name:
            return depends_on
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
