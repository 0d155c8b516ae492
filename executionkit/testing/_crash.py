"""`crash_test`: the crash right after every checkpoint, each resumed, checked against a clean run.

A workflow's own test calls ``crash_test(workflow, inputs, answers=...)``. It runs
the workflow to its end once, keeping every checkpoint handed over (after each
batch or step, and each progress save inside a step), answering its questions
from ``answers`` and passing its timers and deadlines on a `VirtualClock`. Then,
for each of those checkpoints, it does what a process killed right after saving
it would leave behind: a fresh run resumed from the checkpoint (as storage gives
it back: through JSON by default, or ``roundtrip``), driven to its end the same
way. Each must:

- end with the outputs of the uninterrupted run;
- never start a step or a map item the checkpoint recorded (nor anything inside
  a sub-workflow step it recorded);
- count in its ledger the uninterrupted run's rows, plus exactly one
  ``"unknown"`` row per attempt in flight at the crash.

What re-ran at each crash point, and the idempotency keys those attempts were
given (the same as the first time: a side effect keyed by them happens once),
are in the `CrashReport`. Step functions must give the same result when called
again with the same inputs: a fake model, a `Cassette`, a seeded generator.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from executionkit import _clock
from executionkit._define._questions import child_checkpoints
from executionkit._paths import join_path, split_path

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping  # noqa: TC004 - dataclass annotations stay strings

    from executionkit import Workflow, WorkflowCheckpoint, WorkflowResult  # noqa: TC004 - likewise
    from executionkit.events import Event  # noqa: TC004 - likewise
    from executionkit.testing._clock import VirtualClock

_MAX_RESUMES = 1000  # resumes of one drive: past this, a run that never ends is reported
_SHOWN = 20  # problems listed in the error, at most
_REFUSED = ("checkpoint_fn", "resume_from", "answers", "run_id")


@dataclass(frozen=True, slots=True)
class CrashPoint:
    """One crash tried: right after the checkpoint at ``index`` (1-based) was handed over.

    Attributes:
        index: Which checkpoint, in the order the uninterrupted run handed them over.
        seq: That checkpoint's ``seq``.
        recorded: The steps it recorded (outputs and skips), in their order.
        reran: What ran again after the crash, because it was in flight: step
            paths, with ``[key]`` for a map item.
        idempotency_keys: The idempotency keys of what ran again: the same as
            in the uninterrupted run, so a side effect keyed by them happens once.
    """

    index: int
    seq: int
    recorded: tuple[str, ...]
    reran: tuple[str, ...]
    idempotency_keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CrashReport:
    """What `crash_test` tried: a `CrashPoint` per checkpoint, and the clean run's outputs.

    Attributes:
        points: Each crash point tried, in order.
        outputs: The outputs of the uninterrupted run.
    """

    points: tuple[CrashPoint, ...]
    outputs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tried(self) -> int:
        """How many crash points were tried."""
        return len(self.points)

    def __str__(self) -> str:
        """A line per crash point: what it recorded and what ran again."""
        lines = [f"{self.tried} crash points, each resumed to the end:"]
        for point in self.points:
            again = ", ".join(point.reran) or "nothing"
            lines.append(
                f"  {point.index}. after seq {point.seq} ({len(point.recorded)} recorded): "
                f"ran again: {again}"
            )
        return "\n".join(lines)


def crash_test(
    workflow: Workflow,
    inputs: Mapping[str, Any] | None = None,
    *,
    answers: Mapping[str, Any] | None = None,
    roundtrip: Callable[[WorkflowCheckpoint], WorkflowCheckpoint] | None = None,
    **run_options: Any,
) -> CrashReport:
    """Crash ``workflow`` right after each checkpoint; resume each; compare with a clean run.

    Args:
        workflow: The workflow to test.
        inputs: Its ``initial_context``.
        answers: Question path to answer, for every question it asks. A question
            left unanswered with a deadline passes it (its ``default``, or the
            step fails closed); one without a deadline fails the test.
        roundtrip: What storage gives back of a saved checkpoint (say
            ``lambda c: my_load(my_save(c))``); through JSON by default.
        **run_options: Other arguments of `Workflow.run` (``schedule``,
            ``checkpoint_every``, ``max_concurrency``, ``limits``, ...), the
            same for every run. ``sleep_up_to`` is `math.inf` unless given.

    Returns:
        The `CrashReport`.

    Raises:
        AssertionError: Naming each crash point (its index and ``seq``) and
            the step where a resumed run differed: other outputs, a recorded
            step or item started again, a ledger that counts otherwise.
        TypeError: For a run option the kit sets itself (``checkpoint_fn``,
            ``resume_from``, ``answers``, ``run_id``).
    """
    refused = [name for name in _REFUSED if name in run_options]
    if refused:
        msg = (
            f"crash_test sets {', '.join(refused)} itself; pass how storage keeps a "
            f"checkpoint as roundtrip=, and the answers as answers="
        )
        raise TypeError(msg)
    run_options.setdefault("sleep_up_to", math.inf)
    driver = _Driver(workflow, inputs, dict(answers or {}), run_options)
    keep = _through_json if roundtrip is None else roundtrip
    clock = _clock_in_use()
    if clock is None:
        from executionkit.testing._clock import VirtualClock  # noqa: PLC0415

        with VirtualClock() as clock:
            return _test(driver, keep, clock)
    return _test(driver, keep, clock)


def _test(
    driver: _Driver,
    keep: Callable[[WorkflowCheckpoint], WorkflowCheckpoint],
    clock: VirtualClock,
) -> CrashReport:
    clean = driver.drive(None, clock)
    if clean.failure is not None:
        msg = f"crash_test: the uninterrupted run failed, nothing to compare with: {clean.failure}"
        raise AssertionError(msg)
    points: list[CrashPoint] = []
    problems: list[str] = []
    for index, saved in enumerate(clean.saved, start=1):
        try:
            stored = keep(saved)
        except Exception as exc:  # noqa: BLE001 - storage's failure is the finding
            problems.append(
                f"crash point {index} (right after seq {saved.seq}): storage could not give the "
                f"checkpoint back: {type(exc).__name__}: {exc}"
            )
            points.append(CrashPoint(index, saved.seq, _recorded_names(saved), (), ()))
            continue
        crashed = driver.drive(stored, clock)
        point, found = _compare(index, saved, clean, crashed)
        points.append(point)
        problems += found
    if problems:
        shown = problems[:_SHOWN]
        more = len(problems) - len(shown)
        tail = [f"... and {more} more"] if more else []
        msg = "\n".join(
            [f"crash_test: {len(problems)} broken promise(s) over {len(points)} crash points:"]
            + [f"  {problem}" for problem in shown]
            + tail
        )
        raise AssertionError(msg)
    return CrashReport(tuple(points), clean.outputs)


# --- driving a run to its end ------------------------------------------------------------


@dataclass
class _Drive:
    """One run driven to its end: its checkpoints, events, last result, or why it failed."""

    start: WorkflowCheckpoint | None = None
    saved: list[WorkflowCheckpoint] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    result: WorkflowResult | None = None
    failure: str | None = None

    @property
    def last(self) -> WorkflowCheckpoint | None:
        """The latest checkpoint of the run: the last one handed over, or the one it began at."""
        return self.saved[-1] if self.saved else self.start

    @property
    def outputs(self) -> dict[str, Any]:
        last = self.last
        return {} if last is None else _plain(dict(last.outputs))

    @property
    def ledger(self) -> list[Any]:
        last = self.last
        return [] if last is None else list(last.ledger)


class _Driver:
    """Runs the workflow from a checkpoint to its end: answers, due timers, passed deadlines."""

    def __init__(
        self,
        workflow: Workflow,
        inputs: Mapping[str, Any] | None,
        answers: dict[str, Any],
        options: dict[str, Any],
    ) -> None:
        self.workflow = workflow
        self.inputs = inputs
        self.answers = answers
        self.listeners = _listeners(options.pop("on_event", None))
        self.options = options

    def drive(self, start: WorkflowCheckpoint | None, clock: VirtualClock) -> _Drive:
        from executionkit import ExecutionKitError  # noqa: PLC0415

        drive = _Drive(start)
        checkpoint = start
        given: dict[str, Any] = {}
        for _ in range(_MAX_RESUMES):
            try:
                result = self.workflow.run_sync(
                    self.inputs,
                    resume_from=checkpoint,
                    checkpoint_fn=drive.saved.append,
                    answers=given or None,
                    on_event=[drive.events.append, *self.listeners],
                    **self.options,
                )
            except ExecutionKitError as exc:
                drive.failure = f"{type(exc).__name__}: {exc}"
                return drive
            drive.result = result
            if not result.pending and not result.waits:
                return drive
            checkpoint = drive.last
            assert checkpoint is not None  # noqa: S101 - a suspended run took a checkpoint
            given = {path: self.answers[path] for path in result.pending if path in self.answers}
            if not given:
                self._pass_time(result, clock, checkpoint)
        drive.failure = f"the run did not end after {_MAX_RESUMES} resumes"
        return drive

    def _pass_time(
        self, result: WorkflowResult, clock: VirtualClock, checkpoint: WorkflowCheckpoint
    ) -> None:
        """Move the clock to the next due timer, or past the next deadline; else fail."""
        times = list(result.waits.values())
        asked = _pending_of(checkpoint)
        for path in result.pending:
            expires = asked.get(path, {}).get("expires_at")
            if isinstance(expires, str):
                times.append(datetime.fromisoformat(expires))
        if not times:
            waiting = ", ".join(map(repr, result.pending))
            msg = (
                f"crash_test: the run waits for an answer to {waiting}, which has no deadline: "
                f"pass it in answers="
            )
            raise AssertionError(msg)
        target = min(times)
        lag = (target - clock.now()).total_seconds()
        clock.advance(max(lag, 0.0) + 1e-3)


def _pending_of(checkpoint: WorkflowCheckpoint) -> dict[str, Mapping[str, Any]]:
    from executionkit._define._questions import waiting_in  # noqa: PLC0415

    return dict(waiting_in(checkpoint))


# --- comparing a crashed run with the clean one ----------------------------------------------


def _compare(
    index: int, saved: WorkflowCheckpoint, clean: _Drive, crashed: _Drive
) -> tuple[CrashPoint, list[str]]:
    where = f"crash point {index} (right after seq {saved.seq})"
    problems: list[str] = []
    if crashed.failure is not None:
        problems.append(f"{where}: the resumed run failed: {crashed.failure}")
    else:
        problems += _outputs_differ(where, clean.outputs, crashed.outputs)
    recorded = _Recorded.of(saved)  # what was handed over, whatever storage kept of it
    started = _starts(crashed.events)
    root = saved.run_id or ""
    problems += [
        f"{where}: {what.label(root)} started again although the checkpoint recorded it"
        for what in dict.fromkeys(started)
        if recorded.holds(what)
    ]
    in_flight = _in_flight_at(clean.events, root, saved.seq)
    again = list(dict.fromkeys(what for what in started if what in in_flight))
    reran = tuple(what.label(root) for what in again)
    keys = tuple(what.key for what in again)
    if crashed.failure is None:
        problems += _ledger_differs(where, clean.ledger, crashed.ledger, _unknowns(saved))
    point = CrashPoint(index, saved.seq, _recorded_names(saved), reran, keys)
    return point, problems


def _outputs_differ(where: str, expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    found = []
    for name in [*expected, *(name for name in got if name not in expected)]:
        if name not in got:
            found.append(
                f"{where}: step {name!r} has no output (the clean run: {_show(expected[name])})"
            )
        elif name not in expected:
            found.append(f"{where}: step {name!r} has an output the clean run has not")
        elif got[name] != expected[name]:
            found.append(
                f"{where}: step {name!r} ended with {_show(got[name])}, the clean run with "
                f"{_show(expected[name])}"
            )
    return found


def _ledger_differs(where: str, clean: list[Any], crashed: list[Any], unknown: int) -> list[str]:
    def rows(ledger: list[Any], *, known: bool) -> Counter[tuple[Any, ...]]:
        return Counter(
            (row.step, row.item, row.outcome, row.model, row.usage)
            for row in ledger
            if (row.outcome != "unknown") is known
        )

    found = []
    more = rows(crashed, known=True) - rows(clean, known=True)
    less = rows(clean, known=True) - rows(crashed, known=True)
    found += [
        f"{where}: the ledger counts an attempt of step {row[0]!r}"
        f"{'' if row[1] is None else f' item {row[1]!r}'} ({row[2]}, {_usage(row[4])}) "
        f"{count} more time(s) than the clean run"
        for row, count in more.items()
    ]
    found += [
        f"{where}: the ledger lacks an attempt of step {row[0]!r}"
        f"{'' if row[1] is None else f' item {row[1]!r}'} ({row[2]}, {_usage(row[4])}) "
        f"the clean run counted"
        for row, count in less.items()
    ]
    added = sum(rows(crashed, known=False).values()) - sum(rows(clean, known=False).values())
    if added != unknown:
        found.append(
            f"{where}: the ledger has {added} attempt(s) of unknown usage more than the clean "
            f"run; {unknown} attempt(s) were in flight at the crash"
        )
    return found


def _unknowns(checkpoint: WorkflowCheckpoint) -> int:
    """The attempts in flight at ``checkpoint``, its sub-workflows' included."""
    count = len(checkpoint.in_flight) + sum(checkpoint.in_flight_items.values())
    for name, entry in checkpoint.children.items():
        for _, child in child_checkpoints(name, entry):
            count += _unknowns(child)
    return count


@dataclass(frozen=True, slots=True)
class _Start:
    """A step or map item started in some run."""

    run_id: str
    step: str
    item: str | None

    def label(self, root: str) -> str:
        """The step's path below the run ``root``, with ``[key]`` for a map item."""
        below = self.run_id[len(root) + 1 :] if self.run_id != root else ""
        path = f"{below}/{join_path(self.step)}" if below else self.step
        return path if self.item is None else f"{path}[{self.item}]"

    @property
    def key(self) -> str:
        from executionkit import StepContext  # noqa: PLC0415

        return StepContext(None, self.step, self.run_id, 1, 1, self.item).idempotency_key  # type: ignore[arg-type]


def _starts(events: list[Event]) -> list[_Start]:
    from executionkit import events as ev  # noqa: PLC0415

    found: list[_Start] = []
    for event in events:
        if isinstance(event, ev.StepStarted) and event.attempt == 1:
            found.append(_Start(event.run_id, event.step, None))
        elif isinstance(event, ev.ItemStarted) and event.attempt == 1:
            found.append(_Start(event.run_id, event.step, event.item))
    return found


def _in_flight_at(events: list[Event], root: str, seq: int) -> set[_Start]:
    """What the clean run had started and not ended when it took its checkpoint ``seq``."""
    from executionkit import events as ev  # noqa: PLC0415

    running: set[_Start] = set()
    for event in events:
        if isinstance(event, ev.CheckpointTaken) and event.seq == seq and event.run_id == root:
            return running
        if isinstance(event, (ev.StepStarted, ev.ItemStarted)):
            running.add(_start_of(event))
        elif isinstance(event, (ev.StepFinished, ev.StepFailed, ev.ItemFinished, ev.ItemFailed)):
            running.discard(_start_of(event))
    return running


def _start_of(event: Any) -> _Start:
    return _Start(event.run_id, event.step, getattr(event, "item", None))


@dataclass
class _Recorded:
    """What a checkpoint recorded, by run id: steps, map items, and whole sub-workflows."""

    steps: dict[str, set[str]] = field(default_factory=dict)
    items: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, checkpoint: WorkflowCheckpoint) -> _Recorded:
        recorded = cls()
        recorded.add(checkpoint.run_id or "", checkpoint)
        return recorded

    def add(self, run_id: str, checkpoint: WorkflowCheckpoint) -> None:
        self.steps[run_id] = {*checkpoint.outputs, *checkpoint.skipped}
        for step, entry in checkpoint.items.items():
            self.items[run_id, step] = set(entry["outputs"])
        for name, entry in checkpoint.children.items():
            for prefix, child in child_checkpoints(name, entry):
                self.add(f"{run_id}/{prefix}", child)

    def holds(self, start: _Start) -> bool:
        """Whether the checkpoint recorded ``start``'s step or item, or a step holding it."""
        for run_id, steps in self.steps.items():
            if start.run_id.startswith(f"{run_id}/"):
                first = split_path(start.run_id[len(run_id) + 1 :])[0]
                if first in steps:
                    return True
        if start.step in self.steps.get(start.run_id, set()):
            return True
        return start.item is not None and start.item in self.items.get(
            (start.run_id, start.step), set()
        )


def _recorded_names(checkpoint: WorkflowCheckpoint) -> tuple[str, ...]:
    return (*checkpoint.outputs, *(name for name in checkpoint.skipped))


# --- small helpers -----------------------------------------------------------------------------


def _clock_in_use() -> VirtualClock | None:
    clock: VirtualClock | None = getattr(_clock.new_loop, "clock", None)
    return clock


def _through_json(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    from executionkit import WorkflowCheckpoint  # noqa: PLC0415

    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def _listeners(on_event: Any) -> list[Any]:
    if on_event is None:
        return []
    if callable(on_event):
        return [on_event]
    return list(on_event)


def _show(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 80 else f"{text[:77]}..."  # noqa: PLR2004 - a preview


def _usage(usage: Any) -> str:
    return f"{usage.input_tokens} in + {usage.output_tokens} out"
