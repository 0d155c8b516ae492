"""A console progress reporter for ``Workflow.run(..., on_event=...)``.

`ConsoleProgress` turns the run's events into what a person watching wants to
see: how many steps are done out of how many, which are running, how many
items of each running map step are recorded, how many failed, the time since the
run started and the tokens spent. On a terminal it keeps one line up to date in
place; anywhere else (a CI log, a file) it writes one plain line per step that
finishes, fails or is retried, and a summary line at the end. It writes to
standard error unless told otherwise.

Example:
    >>> from executionkit import Step, Workflow
    >>> from executionkit.progress import ConsoleProgress
    >>> workflow = Workflow([Step("hello", lambda ctx: "world")])
    >>> result = workflow.run_sync(on_event=ConsoleProgress())
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from executionkit._paths import join_path
from executionkit._terminal import one_line, show
from executionkit._types import TokenUsage
from executionkit.events import (
    CheckpointTaken,
    Event,
    ItemFailed,
    ItemFinished,
    ItemStarted,
    MapStarted,
    QuestionAnswered,
    QuestionAsked,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuspended,
    StepFailed,
    StepFinished,
    StepInvalidated,
    StepRestored,
    StepRetried,
    StepSkipped,
    StepStarted,
    WaitingForLimit,
)
from executionkit.progress._parts import PREFIX as _PREFIX
from executionkit.progress._parts import Line as _Line
from executionkit.progress._parts import RunState as _Run
from executionkit.progress._parts import count as _count
from executionkit.progress._parts import duration
from executionkit.progress._parts import ending_text as _ending_text
from executionkit.progress._parts import error_text as _error_text
from executionkit.progress._parts import escaped as _escaped
from executionkit.progress._parts import is_terminal as _is_terminal
from executionkit.progress._parts import names_text as _names
from executionkit.progress._parts import parent_of as _parent_of
from executionkit.progress._parts import total_cost as _total_cost

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ConsoleProgress"]

_duration = duration  # as the status shows seconds; tests read it here
_LIVE_EVERY = 0.1  # seconds: item events redraw the live line at most this often
# What the steps of a map item's sub-workflow still get a line for, as items do.
_SAID_OF_ITEMS = (
    StepRetried,
    StepInvalidated,
    QuestionAsked,
    QuestionAnswered,
    WaitingForLimit,
)


class ConsoleProgress:
    """Show a run's progress on a console; pass an instance as ``on_event``.

    It counts steps done (restored from the checkpoint or finished in this
    call) out of all steps, the steps running now (by name, in the order they
    started), the ask steps (`Step.ask`) waiting for an answer, the steps that
    failed, the time since the run started and the tokens spent, restored usage
    included. A step a condition skipped counts
    as done, and the status says how many were skipped in this call. A status
    reads like this:

        executionkit 12/40 done, 2 running (fetch, rank), 1 failed, 1m02s, 12,345 tokens in 8 calls

    A question asked gets a line of its own (``approve is waiting for an answer``,
    with its deadline if it has one), and the status then names the steps
    ``waiting for: approve``. An answer counts its step as done. A run that
    suspends, because nothing else can run until questions are answered, ends
    with ``run ... suspended`` and the status, not with a failure.

    While a map step (`Step.map`) runs, the status counts its items too,
    restored ones included: ``summaries: 412/1,000 items (2 failed)``. Items
    never get a line each: a map's item count is written in plain mode when
    another tenth of its items is recorded (or half a minute has passed), and
    the live line is redrawn for item events at most ten times a second (by
    ``clock``). The first three items of a map that fail get a line each, with
    their error, then one line says more failed; the status counts them all.

    A sub-workflow (a `Workflow` as a step's ``run``) is counted in a run of its
    own: its steps are named by their path from the run followed, as its
    questions are (``research/search finished``, ``research/approve is waiting
    for an answer``), its start gets a line (``research started: 3 steps``), and
    while it runs the status shows its count by its step's name: ``1 running
    (research: 1/3 done)``. The counts of the status are always those of the run
    followed, and its tokens the whole run's, sub-workflows' included. The
    sub-workflows of a map's items are quiet, as items are: only their retries,
    invalidated steps and questions get lines; the map's item count and its
    failed items say the rest.

    In live mode that status is one line rewritten in place (a carriage return,
    then spaces over what is left of the previous text); run started, step
    failed, retried and invalidated messages are written as lines of their own
    above it, and the run's last event replaces it with a summary line ending
    in a newline. In plain mode every message is a line of its own: the run
    starting, each step invalidated, finished, skipped, retried or failed (with the
    status after it), each question asked or answered, and a summary when the run
    finishes, fails or suspends.

    The line only changes when an event arrives: during a long step the
    elapsed time stands still. One instance follows one run at a time; a new
    run (its ``RunStarted``) starts the counts afresh.

    Args:
        stream: Where to write; `sys.stderr` when omitted.
        live: ``True`` for the single live line, ``False`` for plain lines,
            ``None`` (default) for live exactly when ``stream`` is a terminal.
        clock: Seconds as a float, for the elapsed time and step durations;
            `time.monotonic` by default (tests pass a fake one).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Write to ``stream`` (standard error by default), live or in plain lines."""
        self._stream: TextIO = sys.stderr if stream is None else stream
        self._tty = _is_terminal(self._stream)
        self._live = self._tty if live is None else live
        self._clock = clock
        self._drawn = 0  # length of the live line on screen, 0 when there is none
        self._drawn_at: float | None = None  # when the live line was last drawn
        self._reset()

    def _reset(self) -> None:
        self._run_id = ""
        self._root = _Run()  # the run followed; its sub-workflows have states of their own
        self._runs: dict[str, _Run] = {}  # by run_id: the run and its running sub-workflows
        self._active = False  # between the run's RunStarted and its last event
        self._cost = TokenUsage()  # the whole run's, its sub-workflows' usage included
        self._wasted = TokenUsage()  # of it, what failed attempts spent (this call's)
        self._dollars: Any = None  # the run's bill, when its events carry one (run(prices=))
        self._started: float | None = None
        self._ran_before = 0.0  # seconds the attempts before a resume ran (RunStarted)
        self._waiting: dict[str, None] = {}  # questions waiting for an answer (by path), as asked

    # --- the callback ---------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        """Take one event of the run into account and show the result."""
        now = self._clock()
        run = self._follow(event, now)
        event = _escaped(event, run.path)
        if run is self._root and getattr(event, "dollars", None) is not None:
            self._dollars = event.dollars  # type: ignore[attr-defined]
        if isinstance(event, (StepRetried, StepFailed, ItemFailed)) and (
            event.usage.total_tokens or event.usage.llm_calls
        ):
            self._wasted += event.usage
            self._cost += event.usage
        if isinstance(event, (MapStarted, ItemStarted, ItemFinished, ItemFailed)):
            line = self._apply_item(event, run, now)
        elif isinstance(event, (QuestionAsked, QuestionAnswered, RunSuspended)):
            line = self._apply_question(event, run)
        else:
            line = self._apply(event, run, now)
        if run.quiet and not isinstance(event, _SAID_OF_ITEMS):
            line = None  # the steps of a map's item get no line each, as items do not
        if self._live:
            # A restored step or a started item changes nothing the live line shows yet.
            quiet = isinstance(event, (StepRestored, ItemStarted))
            if not quiet and not self._too_soon(event, run, line, now):
                self._show_live(line, now)
                self._drawn_at = now
        elif line is not None:
            if not line.text:
                text = f"{_PREFIX}: {self._status(now)}"
            else:
                text = f"{line.text}; {self._status(now)}" if line.status else line.text
            self._write(f"{text}\n")

    def _follow(self, event: Event, now: float) -> _Run:
        """The run ``event`` is of: the run followed, or a sub-workflow running under it.

        A run starting while another is followed is its sub-workflow when its run_id
        extends the run_id of one running (``parent/step``, ``parent/step/key``);
        any other run starts the counts afresh.
        """
        parent = _parent_of(event.run_id, self._runs) if self._active else None
        if isinstance(event, RunStarted) and parent is not None:
            child = parent.child(event.run_id)
            self._runs[event.run_id] = child
            return child
        if self._started is None or isinstance(event, RunStarted):
            self._reset()
            self._started = now
            self._active = True
            self._run_id = one_line(event.run_id)
            self._root.run_id = event.run_id
            self._runs[event.run_id] = self._root
        return self._runs.get(event.run_id, self._root)

    def _too_soon(self, event: Event, run: _Run, line: _Line | None, now: float) -> bool:
        """Whether to leave the live line as it is: an item's event, just after a redraw.

        Only events that change nothing but counts are held back (an item finishing,
        a step of an item's sub-workflow, the checkpoint that follows them while a map
        runs); a later event redraws.
        """
        if line is not None or self._drawn_at is None or now - self._drawn_at >= _LIVE_EVERY:
            return False
        if isinstance(event, CheckpointTaken):
            return any(state.maps for state in self._runs.values())
        return run.quiet or isinstance(event, ItemFinished)

    def _apply(self, event: Event, run: _Run, now: float) -> _Line | None:
        """Update the counts; return what to say about ``event``, if anything."""
        line: _Line | None = None
        match event:
            case RunStarted():
                line = _Line(self._started_run(event, run))
            case StepRestored():
                run.done.add(event.step)
            case StepInvalidated():
                line = _Line(f"{_PREFIX}: {event.step} invalidated: {event.reason}")
            case StepStarted():
                run.running.setdefault(event.step, now)
            case StepRetried():
                what = event.step if event.item is None else f"{event.step} item {event.item}"
                line = _Line(
                    f"{_PREFIX}: {what} attempt {event.attempt} failed "
                    f"({_error_text(event.error)}); retrying in {_duration(event.delay)}"
                )
            case WaitingForLimit():
                what = event.step if event.item is None else f"{event.step} item {event.item}"
                until = "" if math.isinf(event.seconds) else f", {_duration(event.seconds)}"
                text = f"{_PREFIX}: {what} waiting for limit {event.key}{until}"
                line = _Line(text, status=True, notable=False)
            case StepFinished():
                line = self._step_finished(event, run, now)
            case StepSkipped() | StepFailed():
                line = self._step_not_done(event, run, now)
            case RunFinished() | RunFailed():
                line = self._run_ended(event, run)
        return line  # CheckpointTaken and any later kinds: the status only

    def _run_ended(self, event: RunFinished | RunFailed, run: _Run) -> _Line | None:
        if run is not self._root:
            self._child_ended(run)  # the parent's step says how it ended
            return None
        if isinstance(event, RunFinished):
            self._cost = event.cost
            return self._ended("finished")
        self._cost = _total_cost(event.error, self._cost)
        return self._ended(_ending_text(event.error))

    def _ended(self, how: str) -> _Line:
        """The run followed ended: its last line, ``run ID finished`` or how it stopped."""
        self._active = False
        self._root.running.clear()
        self._root.maps.clear()
        if self._ran_before:  # the status counts this call's time: say the earlier calls'
            how += f" (and {_duration(self._ran_before)} of attempts before the resume)"
        return _Line(f"{_PREFIX}: run {self._run_id} {how}", status=True, final=True)

    def _child_ended(self, run: _Run) -> None:
        del self._runs[run.run_id]
        if run.parent is not None and run.parent.children.get(run.step) is run:
            del run.parent.children[run.step]

    def _apply_question(
        self, event: QuestionAsked | QuestionAnswered | RunSuspended, run: _Run
    ) -> _Line | None:
        """An ask step waiting for an answer, then answered; or the run suspended for some."""
        if isinstance(event, QuestionAsked):
            run.running.pop(event.step, None)
            # Named as RunSuspended names it: a sub-workflow's step already is a path.
            self._waiting[event.step if run.path else join_path(event.step)] = None
            until = "" if event.expires_at is None else f" until {event.expires_at}"
            return _Line(f"{_PREFIX}: {event.step} is waiting for an answer{until}", status=True)
        if isinstance(event, QuestionAnswered):
            self._waiting.pop(event.step if run.path else join_path(event.step), None)
            run.done.add(event.step)
            by = " by its deadline (its default)" if event.answered_by == "deadline" else ""
            return _Line(f"{_PREFIX}: {event.step} answered{by}", status=True, notable=False)
        if run is not self._root:  # its questions wait on; the run followed suspends later
            self._child_ended(run)
            return None
        self._waiting = dict.fromkeys(event.pending)
        self._cost = event.cost
        return self._ended("suspended")

    def _step_not_done(self, event: StepSkipped | StepFailed, run: _Run, now: float) -> _Line:
        """A step that ended without an output: skipped by a condition, or failed."""
        if isinstance(event, StepSkipped):
            run.done.add(event.step)
            run.skipped.add(event.step)
            text = f"{_PREFIX}: {event.step} skipped: {event.reason}"
            return _Line(text, status=True, notable=False)
        run.maps.pop(event.step, None)
        took = run.step_ended(event.step, now, event.duration)
        run.failed.add(event.step)
        error = _error_text(event.error)
        return _Line(f"{_PREFIX}: {event.step} failed after {took}: {error}", status=True)

    def _step_finished(self, event: StepFinished, run: _Run, now: float) -> _Line:
        took = run.step_ended(event.step, now, event.duration)
        run.done.add(event.step)
        text = f"{_PREFIX}: {event.step} finished in {took}"
        mapped = run.maps.pop(event.step, None)
        if mapped is None:  # a sub-workflow's step reports none: its steps reported theirs
            self._cost += event.cost
        else:  # its items' usage was counted as each one finished
            text += f" ({_count(mapped.items, 'item')})"
        return _Line(text, status=True, notable=False)

    def _apply_item(
        self, event: MapStarted | ItemStarted | ItemFinished | ItemFailed, run: _Run, now: float
    ) -> _Line | None:
        """Count a map's items; say when it found them, when they fail, how far it got."""
        line: _Line | None = None
        match event:
            case MapStarted():
                line = run.map_started(event, now)
            case ItemStarted():
                run.items.setdefault((event.step, event.item), now)
            case ItemFinished():
                line = self._item_finished(event, run, now)
            case ItemFailed():
                line = run.item_failed(event, now)
        return line

    def _item_finished(self, event: ItemFinished, run: _Run, now: float) -> _Line | None:
        run.items.pop((event.step, event.item), None)
        self._cost += event.cost
        state = run.maps.get(event.step)
        if state is None:
            return None
        state.recorded = max(state.recorded, event.recorded)
        return None if self._live else state.progress_line(now)

    def _started_run(self, event: RunStarted, run: _Run) -> str:
        run.total = event.steps
        run.done.update(event.recorded)
        name = f"run {event.run_id}"
        if run is self._root:
            restored: object = getattr(event, "cost", None)  # where events carry it
            if isinstance(restored, TokenUsage):
                self._cost = restored
        else:  # its restored usage is part of the parent's, restored with it
            name = show(run.path)
        if event.resumed:
            before = getattr(event, "ran_before", 0.0)
            before = before if before >= 0.1 else 0.0  # noqa: PLR2004 - under what shows
            if run is self._root:
                self._ran_before = before
            ran = f" ({_duration(before)} of attempts before)" if before else ""
            recorded = f"{len(event.recorded)}/{event.steps} steps recorded{ran}"
            return f"{_PREFIX}: {name} resumed: {recorded}"
        return f"{_PREFIX}: {name} started: {_count(event.steps, 'step')}"

    # --- text -----------------------------------------------------------------------------

    def _status(self, now: float) -> str:
        """``12/40 done, 2 running (a, sub: 1/3 done), 1 failed, 1m02s, 12,345 tokens in 8 calls``.

        The counts are those of the run followed; a running sub-workflow step shows its
        child's count, and the tokens are the whole run's.
        """
        root = self._root
        parts = root.status_parts()
        if self._waiting:
            parts.append(f"waiting for: {_names(self._waiting)}")
        if root.failed:
            parts.append(f"{len(root.failed)} failed")
        parts.append(_duration(0.0 if self._started is None else now - self._started))
        cost = self._cost
        if cost.total_tokens or cost.llm_calls:
            spent = f"{_count(cost.total_tokens, 'token')} in {_count(cost.llm_calls, 'call')}"
            wasted = self._wasted
            if wasted.total_tokens or wasted.llm_calls:
                spent += f" ({wasted.total_tokens:,} wasted by failed attempts)"
            parts.append(spent)
        if self._dollars is not None:
            from executionkit._prices import dollars_text  # noqa: PLC0415 - with prices only

            parts.append(dollars_text(self._dollars))
        return ", ".join(parts)

    # --- writing --------------------------------------------------------------------------

    def _show_live(self, line: _Line | None, now: float) -> None:
        if line is not None and line.final:
            self._write(f"{self._over_live(f'{line.text}; {self._status(now)}')}\n")
            self._drawn = 0
            return
        text = ""
        if line is not None and line.notable:  # a line of its own, above the live line
            text = f"{self._over_live(line.text)}\n"
            self._drawn = 0
        status = self._fit(f"{_PREFIX} {self._status(now)}")
        self._write(f"{text}{self._over_live(status)}")
        self._drawn = len(status)

    def _over_live(self, text: str) -> str:
        """``text`` drawn over the live line: back to its start, blanks over the rest."""
        if not self._drawn:
            return text
        return f"\r{text}{' ' * max(0, self._drawn - len(text))}"

    def _fit(self, status: str) -> str:
        """Cut the live line to the terminal's width, so it never wraps."""
        if not self._tty:
            return status
        try:
            width = os.get_terminal_size(self._stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return status
        if width > 1 and len(status) >= width:
            return status[: width - 4] + "..."
        return status

    def _write(self, text: str) -> None:
        # Names were escaped with the event; what is left is an error's first line and
        # type name. The reporter's own line breaks and carriage returns stay.
        self._stream.write(one_line(text, keep="\r\n"))
        self._stream.flush()
