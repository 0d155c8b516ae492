"""`Cassette`: each step's output and usage recorded once into a JSON Lines file, then replayed.

``Cassette(path, mode).wrap(workflow)`` returns the same workflow (steps, names,
dependencies and every option) with each step's function, each map's item
function and, recursively, the functions of sub-workflows wrapped:

- ``"record"``: the function is called; its output and the usage its attempt
  reported are appended to ``path`` as one line;
- ``"replay"``: the function is not called; the line recorded for the step (and
  map item) gives the output and the usage, reported again exactly as
  recorded, provided that what the step read is what it read when recorded;
  anything else raises `CassetteMiss`;
- ``"auto"``: replayed when a matching line exists, recorded otherwise.

How a call is found again. A record is keyed by the step's *path* and its map
item key. The path is the step's name, inside sub-workflows preceded by the
step running each sub-workflow (and, for a map over a sub-workflow, that item's
key), joined with ``/`` and each part escaped as in question paths
(`executionkit._paths.join_path`): ``"review/score"``, ``"each/3/score"``. It is
not derived from the run id (a resumed child keeps the run id it had, and a
run id may hold ``/``): each wrapped sub-workflow, when it runs, extends a
context variable with its step's name (and its item key, which a map gives its
children as ``ctx["item_key"]``), and the steps inside read it; the runner hands
the context on to the tasks and threads that run them, as it does for
`executionkit.current_step`.

Whether a record still applies. While recording, the function gets a ``ctx``
that notes every key read (``ctx[key]``, ``ctx.get(key)``, ``key in ctx``)
with a digest of its value then (or its absence), whether the keys were listed
(iterating ``ctx``, ``len(ctx)``), and, in a map, a digest of the item. Replay
compares those digests with the values now; the first that differs names the
miss. A digest is SHA-256 over canonical JSON (sorted keys) of plain data;
dataclasses and pydantic models count by their fields, sets by their members,
and anything else (a client object in the initial context) only by its type.
The step's ``version`` is compared too.

Usage. What the function returns as ``PatternResult(value, cost=...)`` and
what it reports through ``current_step().add_usage(usage, model=...)`` during
the call, summed by model. The reports are seen by wrapping the public
`StepContext.add_usage` while a recorded call runs (put back when none does),
noting only the reports of that very attempt (step, item and run, told apart by
a context variable). Replay calls ``add_usage`` once per model with the
recorded sums and returns the recorded ``cost`` the same way, so the run's
ledger, ``cost`` and ``spending`` are those of the recorded attempts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from executionkit import (
    ExecutionKitError,
    PatternResult,
    Step,
    StepContext,
    TokenUsage,
    Workflow,
    current_step,
)
from executionkit._define._step_checks import is_async_callable, is_workflow
from executionkit._define._step_kinds import AskStep, MapStep, WaitStep
from executionkit._paths import join_path
from executionkit._plain import plain_copy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Generator

    from executionkit import WorkflowResult

__all__ = ["Cassette", "CassetteMiss", "Mode"]

Mode = Literal["replay", "record", "auto"]
"""What a `Cassette` does with a step: replay it, record it, or replay what it can."""

FORMAT = 1
"""The ``cassette`` field of every line this version writes and reads."""

_MODES: tuple[str, ...] = get_args(Mode)


class CassetteMiss(ExecutionKitError, LookupError):  # noqa: N818 - reads as an event, like WorkflowFailed
    """A replayed step has no matching recording, so it cannot run without its real call.

    Raised inside the step (which then fails: `WorkflowFailed` lists it under
    the step's name), never after calling the step's function. A wrapped step
    with ``retries`` does not retry a miss: in replay mode its ``retry_on``
    matches what it matched before except `CassetteMiss`.

    Attributes:
        step: The step's path, ``"sub/step"`` inside a sub-workflow.
        item_key: The map item's key, or None.
        changed: What differs: ``"ctx key 'topic'"``, ``"the item"``, ``"the
            set of ctx keys"`` (a step that listed them), ``"the step's
            version"``, or ``"no recording of this step"``.
        file: The cassette's file.
    """

    def __init__(self, step: str, item_key: str | None, changed: str, file: str) -> None:
        """Create the error for the step at path ``step`` (item ``item_key``)."""
        self.step = step
        self.item_key = item_key
        self.changed = changed
        self.file = file
        item = "" if item_key is None else f" (item {item_key!r})"
        if changed == _UNRECORDED:
            why = f"{file} holds no recording of it"
            if not os.path.exists(file):  # noqa: PTH110 - a str path
                why += " (the file does not exist)"
        else:
            why = f"{changed} differs from what it read when {file} recorded it"
        super().__init__(
            f"cassette miss, step {step!r}{item} not replayed: {why}. Its function was not "
            f"called (replay mode never calls it); record again with Cassette(..., "
            f"mode='auto') (records what is missing or changed) or mode='record'"
        )


_UNRECORDED = "no recording of this step"
_ABSENT: Any = object()

# The place of the sub-workflow running now: the name of the step running it (and, for
# a map over a sub-workflow, the item's key), outermost first. Set by `_Placed.run`.
_PLACE: ContextVar[tuple[str, ...]] = ContextVar("executionkit_cassette_place", default=())

# The attempt being recorded in this context, whose usage reports are noted.
_NOTING: ContextVar[_Spent | None] = ContextVar("executionkit_cassette_spent", default=None)


class Cassette:
    """Model calls recorded once into a JSON Lines file, then replayed without calling.

    Wrap a workflow and run what `wrap` returns as you would run the workflow.
    In ``"record"`` mode every step calls its function and appends its output
    and usage to ``path``; in ``"replay"`` mode no step function is called: each
    step returns its recorded output and reports its recorded usage, so the
    result's outputs, ``cost`` and ``spending`` are the recorded run's, and a
    step whose inputs changed raises `CassetteMiss`; ``"auto"`` replays what
    matches and records the rest.

    The file is one JSON object per line (``{"cassette": 1, "step": ...,
    "item_key": ..., "output": ..., ...}``), appended with one ``os.write`` of
    a whole line (``O_APPEND``); a later line for the same step and item wins.
    It is read when `wrap` is called (replay and auto modes); the wrapped
    workflow then adds what it records. To record afresh, delete the file.

    What is recorded: only attempts that returned (a function that raised
    is not recorded, and its exception propagates as usual), whose output
    (after the step's ``encode``, if any) is plain JSON data, else the step
    fails with `executionkit.CheckpointValueError` naming it. The wasted usage
    of failed attempts is not replayed. Steps must run in threads (the
    default executor) or on the event loop: process and cluster executors are
    not supported. Ask and wait steps are kept as they are.

    Args:
        path: The cassette file (a ``str`` or ``os.PathLike``); its folder must
            exist. Missing: nothing is recorded yet.
        mode: ``"replay"`` (default), ``"record"`` or ``"auto"``.

    Raises:
        ValueError: For another ``mode``.
    """

    __slots__ = ("_index", "_lock", "_mode", "_path")

    def __init__(self, path: str | os.PathLike[str], mode: Mode = "replay") -> None:
        """Remember the file and the mode; the file is not touched until `wrap`."""
        if mode not in _MODES:
            msg = f"Cassette mode must be 'replay', 'record' or 'auto', got {mode!r}"
            raise ValueError(msg)
        self._path = os.fspath(path)
        self._mode: Mode = mode
        self._lock = threading.Lock()
        self._index: dict[tuple[str, str | None], _Recording] = {}

    @property
    def path(self) -> str:
        """The cassette file."""
        return self._path

    @property
    def mode(self) -> Mode:
        """``"replay"``, ``"record"`` or ``"auto"``."""
        return self._mode

    def __repr__(self) -> str:
        """Show the file and the mode."""
        return f"Cassette({self._path!r}, mode={self._mode!r})"

    def wrap(self, workflow: Workflow) -> Workflow:
        """A new `Workflow` of the same steps, each step's function recorded or replayed.

        Names, dependencies, ``inputs`` and every step option are kept; code
        fingerprints too (each wrapper's ``__wrapped__`` is the function), so
        checkpoints of the wrapped and the plain workflow agree. A plain
        (``def``) function stays plain, a coroutine function async. In replay
        and auto modes the file is read now.

        Raises:
            TypeError: If ``workflow`` is not a `Workflow`.
            ValueError: If a line of the file is damaged, naming the file and
                the line.
        """
        given: object = workflow
        if not isinstance(given, Workflow):
            msg = f"Cassette.wrap takes a Workflow, got {type(given).__name__}"
            raise TypeError(msg)
        if self._mode != "record":
            index = _read(self._path)
            with self._lock:
                self._index = index
        return Workflow([self._step(step) for step in workflow.steps], inputs=workflow.inputs)

    def _step(self, step: Step) -> Step:
        """``step`` with its function (or its sub-workflow's) wrapped; asks and waits kept."""
        if isinstance(step, (AskStep, WaitStep)):
            return step
        run: Any = step.run
        if is_workflow(run):
            inner = _Placed(
                [self._step(own) for own in run.steps],
                inputs=run.inputs,
                name=step.name,
                per_item=isinstance(step, MapStep),
            )
            return dataclasses.replace(step, run=inner)
        changes: dict[str, Any] = {"run": _wrapper(_Tape(self, step), run)}
        if self._mode == "replay" and step.retries:
            changes["retry_on"] = (_retry_on_but_misses(step.retry_on),)
        return dataclasses.replace(step, **changes)

    def _found(self, place: tuple[str, str | None]) -> _Recording | None:
        return self._index.get(place)

    def _append(self, recording: _Recording) -> None:
        """Append ``recording`` as one line, in one write; it wins over earlier ones."""
        line = json.dumps(
            recording.as_json(), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        ).encode("utf-8")
        line += b"\n"
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        with self._lock:
            fd = os.open(self._path, flags, 0o666)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    # A line cut short (a write the system never finished): start a new one,
                    # so the record is never glued onto it.
                    line = b"\n" + line
                written = os.write(fd, line)
            finally:
                os.close(fd)
            if written != len(line):
                msg = (
                    f"cassette {self._path}: only {written} of {len(line)} bytes of the "
                    f"record of step {recording.step!r} were written"
                )
                raise OSError(msg)
            self._index[recording.step, recording.item_key] = recording


class _Placed(Workflow):
    """A wrapped sub-workflow: while it runs, its steps know the path it runs at."""

    __slots__ = ("_name", "_per_item")

    def __init__(
        self, steps: list[Step], *, inputs: tuple[str, ...], name: str, per_item: bool
    ) -> None:
        """The wrapped ``steps`` of the sub-workflow of step ``name`` (a map if ``per_item``)."""
        super().__init__(steps, inputs=inputs)
        self._name = name
        self._per_item = per_item

    async def run(  # the runner passes all but the context by keyword
        self, initial_context: Mapping[str, Any] | None = None, **options: Any
    ) -> WorkflowResult:
        """Run as `Workflow.run` does, with the step's path (and item key) set for its steps."""
        place: tuple[str, ...] = (self._name,)
        if self._per_item:
            # A map gives each item's sub-workflow its key as ctx["item_key"].
            place += (str((initial_context or {}).get("item_key")),)
        token = _PLACE.set(_PLACE.get() + place)
        try:
            return await super().run(initial_context, **options)
        finally:
            _PLACE.reset(token)


def _wrapper(tape: _Tape, fn: Any) -> Callable[..., Any]:
    """A function of ``fn``'s kind (plain or async, ``(ctx)`` or ``(item, ctx)``) that tapes it."""
    wrapper: Callable[..., Any]
    if is_async_callable(fn):
        if tape.mapped:

            async def wrapper(item: Any, ctx: Mapping[str, Any]) -> Any:
                return await tape.call_async(fn, (item,), ctx)

        else:

            async def wrapper(ctx: Mapping[str, Any]) -> Any:
                return await tape.call_async(fn, (), ctx)

    elif tape.mapped:

        def wrapper(item: Any, ctx: Mapping[str, Any]) -> Any:
            return tape.call(fn, (item,), ctx)

    else:

        def wrapper(ctx: Mapping[str, Any]) -> Any:
            return tape.call(fn, (), ctx)

    # __wrapped__ (and the name): code fingerprints and signatures follow it to fn.
    return functools.update_wrapper(wrapper, fn)


class _Tape:
    """One wrapped step: where a call of it is found, recorded and replayed."""

    __slots__ = ("cassette", "mapped", "step")

    def __init__(self, cassette: Cassette, step: Step) -> None:
        self.cassette = cassette
        self.step = step
        self.mapped = isinstance(step, MapStep)

    def call(self, fn: Any, leading: tuple[Any, ...], ctx: Mapping[str, Any]) -> Any:
        """A plain function's call: replayed, or called and recorded."""
        replayed, got = self._begin(leading, ctx)
        if replayed:
            return got
        call: _Call = got
        with call.noting():
            result = fn(*leading, call.reads)
        if inspect.isawaitable(result):
            return call.finish_later(result)
        return call.finish(result)

    async def call_async(self, fn: Any, leading: tuple[Any, ...], ctx: Mapping[str, Any]) -> Any:
        """A coroutine function's call: replayed, or awaited and recorded."""
        replayed, got = self._begin(leading, ctx)
        if replayed:
            return got
        call: _Call = got
        with call.noting():
            result = await fn(*leading, call.reads)
        return call.finish(result)

    def _begin(self, leading: tuple[Any, ...], ctx: Mapping[str, Any]) -> tuple[bool, Any]:
        """``(True, the result)`` replayed, or ``(False, a _Call)`` to call the function."""
        here = current_step()
        path = join_path(*_PLACE.get(), self.step.name)
        key = here.item_key
        cassette = self.cassette
        mode = cassette.mode
        if mode != "record":
            found = cassette._found((path, key))  # noqa: SLF001 - the cassette's own tape
            changed = _UNRECORDED if found is None else self._changed(found, leading, ctx)
            if found is not None and changed is None:
                return True, self._replayed(found, here)
            if mode == "replay":
                raise CassetteMiss(path, key, changed or _UNRECORDED, cassette.path)
        return False, _Call(self, path, here, leading, ctx)

    def _changed(
        self, found: _Recording, leading: tuple[Any, ...], ctx: Mapping[str, Any]
    ) -> str | None:
        """What differs between the recording and the step's inputs now; None if nothing."""
        if found.version != self.step.version:
            return "the step's version"
        if leading and found.item != _digest(leading[0]):
            return "the item"
        for name, recorded in found.reads.items():
            now = _digest(ctx[name]) if name in ctx else None
            if now != recorded:
                return f"ctx key {name!r}"
        if found.keys is not None and found.keys != _keys_digest(ctx):
            return "the set of ctx keys"
        return None

    def _replayed(self, found: _Recording, here: StepContext) -> Any:
        """The recorded output, its usage reported again as it was reported."""
        for model, usage in found.usage:
            here.add_usage(usage, model=model)
        output = plain_copy(found.output, f"cassette: recorded output of step {found.step!r}")
        decode = self.step.decode
        if decode is not None:
            output = decode(output)
        return output if found.cost is None else PatternResult(output, cost=found.cost)


class _Call:
    """One call of a step's function being recorded: what it reads and reports."""

    __slots__ = ("here", "leading", "path", "reads", "spent", "tape")

    def __init__(
        self,
        tape: _Tape,
        path: str,
        here: StepContext,
        leading: tuple[Any, ...],
        ctx: Mapping[str, Any],
    ) -> None:
        self.tape = tape
        self.path = path
        self.here = here
        self.leading = leading
        self.reads = _Reads(ctx)
        self.spent = _Spent(here)

    @contextlib.contextmanager
    def noting(self) -> Generator[None, None, None]:
        """Note the attempt's ``add_usage`` reports while the function runs."""
        _PATCH.enter()
        token = _NOTING.set(self.spent)
        try:
            yield
        finally:
            _NOTING.reset(token)
            _PATCH.leave()

    async def finish_later(self, awaitable: Awaitable[Any]) -> Any:
        """`finish` the awaitable a plain function returned, once it is done."""
        with self.noting():
            result = await awaitable
        return self.finish(result)

    def finish(self, result: Any) -> Any:
        """Record what the call returned and reported; return ``result`` as it is."""
        tape = self.tape
        step = tape.step
        value, cost = (
            (result.value, result.cost)
            if isinstance(result, PatternResult)
            else (
                result,
                None,
            )
        )
        key = self.here.item_key
        item = "" if key is None else f", item {key!r}"
        data = value if step.encode is None else step.encode(value)
        output = plain_copy(
            data, f"cassette: the output of step {self.path!r}{item} (not recorded)"
        )
        reads = self.reads
        recording = _Recording(
            step=self.path,
            item_key=key,
            version=step.version,
            reads=dict(reads.read),
            item=_digest(self.leading[0]) if self.leading else None,
            keys=_keys_digest(reads.ctx) if reads.listed else None,
            output=output,
            cost=cost,
            usage=self.spent.by_model(),
        )
        tape.cassette._append(recording)  # noqa: SLF001 - the cassette's own tape
        return result


class _Reads(Mapping[str, Any]):
    """The step's ``ctx``, noting each key read and a digest of its value then."""

    __slots__ = ("ctx", "listed", "read")

    def __init__(self, ctx: Mapping[str, Any]) -> None:
        self.ctx = ctx
        # Key -> digest of its value when first read, or None for a key that was absent.
        self.read: dict[str, str | None] = {}
        self.listed = False

    def _note(self, key: object, value: object = _ABSENT) -> None:
        if type(key) is str and key not in self.read:
            self.read[key] = None if value is _ABSENT else _digest(value)

    def __getitem__(self, key: str) -> Any:
        """``ctx[key]``, noted."""
        try:
            value = self.ctx[key]
        except KeyError:
            self._note(key)
            raise
        self._note(key, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """``ctx.get(key, default)``, noted."""
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        """``key in ctx``, noted (with the value, if present)."""
        present = key in self.ctx
        if type(key) is str and key not in self.read:
            self._note(key, self.ctx[key] if present else _ABSENT)
        return present

    def __iter__(self) -> Iterator[str]:
        """The keys of ``ctx``; noted: the set of keys is compared on replay."""
        self.listed = True
        return iter(self.ctx)

    def __len__(self) -> int:
        """How many keys ``ctx`` has; noted as `__iter__` is."""
        self.listed = True
        return len(self.ctx)

    def __setitem__(self, key: str, value: object) -> None:
        """Refused as the step's own ``ctx`` refuses it."""
        self.ctx[key] = value  # type: ignore[index]  # raises TypeError: ctx is read-only

    def __repr__(self) -> str:
        """The ``ctx``'s own repr."""
        return repr(self.ctx)


class _Spent:
    """The usage one recorded attempt reports through ``add_usage``, as reported."""

    __slots__ = ("identity", "reports")

    def __init__(self, here: StepContext) -> None:
        self.identity = (here.name, here.item_key, here.run_id, here.attempt)
        self.reports: list[tuple[str | None, TokenUsage]] = []

    def noted(self, context: StepContext, usage: TokenUsage, model: str | None) -> None:
        """Note a report of ``context``'s attempt, if it is this attempt's."""
        if (context.name, context.item_key, context.run_id, context.attempt) == self.identity:
            self.reports.append((model, usage))

    def by_model(self) -> tuple[tuple[str | None, TokenUsage], ...]:
        """The reports summed by model, in the order each model first reported."""
        totals: dict[str | None, TokenUsage] = {}
        for model, usage in list(self.reports):
            totals[model] = totals.get(model, TokenUsage()) + usage
        return tuple(totals.items())


class _Patch:
    """`StepContext.add_usage` wrapped while any recorded call runs, put back after the last.

    The wrapper reports as the method always does, then hands the report to
    the attempt recorded in the caller's context (`_NOTING`), if any.
    """

    __slots__ = ("count", "lock", "original", "patched")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.original: Any = None
        self.patched: Any = None

    def enter(self) -> None:
        with self.lock:
            if self.count == 0:
                original = StepContext.add_usage

                @functools.wraps(original)
                def add_usage(
                    context: StepContext, usage: TokenUsage, *, model: str | None = None
                ) -> None:
                    original(context, usage, model=model)  # checks the arguments first
                    spent = _NOTING.get()
                    if spent is not None:
                        spent.noted(context, usage, model)

                self.original, self.patched = original, add_usage
                setattr(StepContext, _ADD_USAGE, add_usage)
            self.count += 1

    def leave(self) -> None:
        with self.lock:
            self.count -= 1
            if self.count == 0:
                if StepContext.__dict__.get(_ADD_USAGE) is self.patched:
                    setattr(StepContext, _ADD_USAGE, self.original)
                self.original = self.patched = None


_ADD_USAGE = "add_usage"
_PATCH = _Patch()


@dataclasses.dataclass(frozen=True)
class _Recording:
    """One line of a cassette: a step's (or item's) inputs, output and usage."""

    step: str
    item_key: str | None
    version: str | None
    reads: dict[str, str | None]
    item: str | None
    keys: str | None
    output: Any
    cost: TokenUsage | None
    usage: tuple[tuple[str | None, TokenUsage], ...]

    def as_json(self) -> dict[str, Any]:
        """The line's JSON object."""
        line: dict[str, Any] = {
            "cassette": FORMAT,
            "step": self.step,
            "item_key": self.item_key,
            "version": self.version,
            "reads": self.reads,
        }
        if self.item is not None:
            line["item"] = self.item
        if self.keys is not None:
            line["keys"] = self.keys
        line["output"] = self.output
        line["cost"] = None if self.cost is None else _usage_json(self.cost)
        line["usage"] = [{"model": model, **_usage_json(usage)} for model, usage in self.usage]
        return line


def _usage_json(usage: TokenUsage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "llm_calls": usage.llm_calls,
    }


def _read(path: str) -> dict[tuple[str, str | None], _Recording]:
    """The recordings of the file at ``path`` by (step path, item key), the last of each.

    A last line without its newline is a write cut short, ignored unless it
    reads whole.
    """
    try:
        with open(path, "rb") as file:  # noqa: PTH123 - a str path, read at once
            data = file.read()
    except FileNotFoundError:
        return {}
    index: dict[tuple[str, str | None], _Recording] = {}
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        last = number == len(lines)
        try:
            recording = _parsed(raw, path, number)
        except ValueError:
            if last:
                continue
            raise
        index[recording.step, recording.item_key] = recording
    return index


class _Damaged(Exception):  # noqa: N818 - internal: what is wrong with a line
    """What is wrong with a line, raised by the readers below; `_parsed` names the line."""


def _parsed(raw: bytes, path: str, number: int) -> _Recording:
    """The recording on line ``number``; `ValueError` naming the file and line if damaged."""
    try:
        return _recording_of(_json_object(raw))
    except _Damaged as exc:
        msg = (
            f"cassette {path}, line {number}: {exc}; delete the line (its step is then "
            f"recorded again in mode 'auto' or 'record')"
        )
        raise ValueError(msg) from None


def _json_object(raw: bytes) -> dict[str, Any]:
    """The line's JSON object, of a format this version reads."""
    try:
        line = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        msg = f"not a line of JSON ({exc})"
        raise _Damaged(msg) from None
    if type(line) is not dict:
        msg = f"not a JSON object but {type(line).__name__}"
        raise _Damaged(msg)
    version = line.get("cassette")
    if type(version) is not int or version < 1:
        msg = f"no cassette format version ('cassette': 1), got {version!r}"
        raise _Damaged(msg)
    if version > FORMAT:
        msg = f"format {version} is newer than this version of executionkit reads ({FORMAT})"
        raise _Damaged(msg)
    return line


def _recording_of(line: dict[str, Any]) -> _Recording:
    """The recording a line's JSON object holds, each field checked."""
    if "output" not in line:
        msg = "no 'output'"
        raise _Damaged(msg)
    reads = line.get("reads")
    if type(reads) is not dict or not all(
        digest is None or type(digest) is str for digest in reads.values()
    ):
        msg = f"'reads' must map ctx keys to digests (str) or null, got {reads!r}"
        raise _Damaged(msg)
    usage = line.get("usage")
    if type(usage) is not list:
        msg = f"'usage' must be a list, got {usage!r}"
        raise _Damaged(msg)
    step = _text(line, "step")
    if step is None:
        msg = "'step' must be a non-empty str, got null"
        raise _Damaged(msg)
    return _Recording(
        step=step,
        item_key=_text(line, "item_key"),
        version=_text(line, "version"),
        reads=reads,
        item=_text(line, "item"),
        keys=_text(line, "keys"),
        output=line["output"],
        cost=None if line.get("cost") is None else _usage_of(line["cost"]),
        usage=tuple(_model_usage(entry) for entry in usage),
    )


def _text(line: dict[str, Any], name: str) -> str | None:
    """The field ``name``: a non-empty str, or None when null or absent."""
    value = line.get(name)
    if value is not None and (type(value) is not str or not value):
        msg = f"{name!r} must be a non-empty str or null, got {value!r}"
        raise _Damaged(msg)
    return value


def _usage_of(entry: object) -> TokenUsage:
    """A `TokenUsage` from its JSON object of counts."""
    if type(entry) is not dict:
        msg = f"a usage must be an object of token counts, got {entry!r}"
        raise _Damaged(msg)
    try:
        return TokenUsage(
            entry.get("input_tokens", 0),
            entry.get("output_tokens", 0),
            entry.get("llm_calls", 0),
        )
    except TypeError as exc:
        raise _Damaged(str(exc)) from None


def _model_usage(entry: object) -> tuple[str | None, TokenUsage]:
    """A ``usage`` entry: the model (or None) and its `TokenUsage`."""
    if type(entry) is not dict:
        msg = f"each 'usage' entry must be an object, got {entry!r}"
        raise _Damaged(msg)
    model = entry.get("model")
    if model is not None and type(model) is not str:
        msg = f"a usage's 'model' must be a str or null, got {model!r}"
        raise _Damaged(msg)
    return model, _usage_of(entry)


def _digest(value: object) -> str:
    """32 hex digits of SHA-256 over `_canonical` of ``value``."""
    text = _canonical(value).encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).hexdigest()[:32]


def _keys_digest(ctx: Mapping[str, Any]) -> str:
    return _digest(sorted(map(str, ctx)))


def _canonical(value: object) -> str:
    """Canonical JSON of ``value`` (`_stand_in` for what JSON lacks); its type if none can be."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_stand_in
        )
    except (TypeError, ValueError, RecursionError):  # keys that do not sort, a cycle
        return json.dumps(f"<{type(value).__qualname__}>")


def _stand_in(value: object) -> object:
    """What stands for ``value`` in `_canonical`: its type with its fields, or its type alone."""
    kind = f"<{type(value).__qualname__}>"
    fields = None if isinstance(value, type) else _fields_of(value)
    return kind if fields is None else {kind: fields}


def _fields_of(value: object) -> object:
    """What ``value`` is made of, for `_stand_in`; None for an object that does not say."""
    if dataclasses.is_dataclass(value):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): item for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_canonical(member) for member in value)
    if isinstance(value, (bytes, bytearray)):
        return hashlib.sha256(value).hexdigest()
    for method in ("model_dump", "isoformat"):  # a pydantic model; a datetime, date or time
        made = getattr(value, method, None)
        if callable(made):
            with contextlib.suppress(Exception):
                return made()
    return None


class _NeverAMiss(type):
    """The metaclass of a ``retry_on`` that matches what a step's did, except `CassetteMiss`."""

    retry_on: tuple[type[Exception], ...]

    def __instancecheck__(cls, instance: object) -> bool:
        """An exception the step retried before, unless it is a cassette miss."""
        return isinstance(instance, cls.retry_on) and not isinstance(instance, CassetteMiss)

    def __subclasscheck__(cls, subclass: type) -> bool:
        """As `__instancecheck__`, for a class."""
        return issubclass(subclass, cls.retry_on) and not issubclass(subclass, CassetteMiss)

    def __repr__(cls) -> str:
        """The types matched, and the exception."""
        names = ", ".join(kind.__qualname__ for kind in cls.retry_on)
        return f"<retry_on ({names}) but not CassetteMiss>"


def _retry_on_but_misses(
    retry_on: type[Exception] | tuple[type[Exception], ...],
) -> type[Exception]:
    """An `Exception` type that ``isinstance`` finds for ``retry_on``'s, a miss excepted."""
    kinds = retry_on if isinstance(retry_on, tuple) else (retry_on,)
    made = _NeverAMiss(
        "RetryOnButNotCassetteMiss",
        (Exception,),
        {"retry_on": kinds, "__module__": __name__, "__doc__": _NeverAMiss.__doc__},
    )
    return cast("type[Exception]", made)
