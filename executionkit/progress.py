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

import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from executionkit._progress_parts import PREFIX as _PREFIX
from executionkit._progress_parts import SHOWN_NAMES as _SHOWN_NAMES
from executionkit._progress_parts import TENTHS as _TENTHS
from executionkit._progress_parts import Line as _Line
from executionkit._progress_parts import MapState as _Map
from executionkit._progress_parts import count as _count
from executionkit._progress_parts import duration
from executionkit._progress_parts import ending_text as _ending_text
from executionkit._progress_parts import error_text as _error_text
from executionkit._progress_parts import escaped as _escaped
from executionkit._progress_parts import is_terminal as _is_terminal
from executionkit._progress_parts import total_cost as _total_cost
from executionkit._questions import join_path
from executionkit._terminal import one_line
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
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["ConsoleProgress"]

_duration = duration  # as the status shows seconds; tests read it here
_SHOWN_ITEM_FAILURES = 3  # per map: the first failures get a line each, then one line says more
_LIVE_EVERY = 0.1  # seconds: item events redraw the live line at most this often


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
        self._total = 0
        self._done: set[str] = set()
        self._running: dict[str, float] = {}  # name -> when its first attempt started
        self._failed: set[str] = set()
        self._skipped: set[str] = set()
        self._cost = TokenUsage()
        self._started: float | None = None
        self._maps: dict[str, _Map] = {}  # running map steps, in the order they found items
        self._items: dict[tuple[str, str], float] = {}  # running items -> first attempt began
        self._waiting: dict[str, None] = {}  # questions waiting for an answer (by path), as asked

    # --- the callback ---------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        """Take one event of the run into account and show the result."""
        event = _escaped(event)
        now = self._clock()
        if self._started is None or isinstance(event, RunStarted):
            self._reset()
            self._started = now
            self._run_id = event.run_id
        if isinstance(event, (MapStarted, ItemStarted, ItemFinished, ItemFailed)):
            line = self._apply_item(event, now)
        elif isinstance(event, (QuestionAsked, QuestionAnswered, RunSuspended)):
            line = self._apply_question(event)
        else:
            line = self._apply(event, now)
        if self._live:
            # A restored step or a started item changes nothing the live line shows yet.
            quiet = isinstance(event, (StepRestored, ItemStarted))
            if not quiet and not self._too_soon(event, line, now):
                self._show_live(line, now)
                self._drawn_at = now
        elif line is not None:
            if not line.text:
                text = f"{_PREFIX}: {self._status(now)}"
            else:
                text = f"{line.text}; {self._status(now)}" if line.status else line.text
            self._write(f"{text}\n")

    def _too_soon(self, event: Event, line: _Line | None, now: float) -> bool:
        """Whether to leave the live line as it is: an item's event, just after a redraw.

        Only events that change nothing but counts are held back (an item finishing,
        the checkpoint that follows it while a map runs); a later event redraws.
        """
        if line is not None or self._drawn_at is None or now - self._drawn_at >= _LIVE_EVERY:
            return False
        if isinstance(event, CheckpointTaken):
            return bool(self._maps)
        return isinstance(event, ItemFinished)

    def _apply(self, event: Event, now: float) -> _Line | None:
        """Update the counts; return what to say about ``event``, if anything."""
        line: _Line | None = None
        match event:
            case RunStarted():
                line = _Line(self._started_run(event))
            case StepRestored():
                self._done.add(event.step)
            case StepInvalidated():
                line = _Line(f"{_PREFIX}: {event.step} invalidated: {event.reason}")
            case StepStarted():
                self._running.setdefault(event.step, now)
            case StepRetried():
                what = event.step if event.item is None else f"{event.step} item {event.item}"
                line = _Line(
                    f"{_PREFIX}: {what} attempt {event.attempt} failed "
                    f"({_error_text(event.error)}); retrying in {_duration(event.delay)}"
                )
            case StepFinished():
                line = self._step_finished(event, now)
            case StepSkipped() | StepFailed():
                line = self._step_not_done(event, now)
            case RunFinished():
                self._running.clear()
                self._maps.clear()
                self._cost = event.cost
                text = f"{_PREFIX}: run {self._run_id} finished"
                line = _Line(text, status=True, final=True)
            case RunFailed():
                self._running.clear()
                self._maps.clear()
                self._cost = _total_cost(event.error, self._cost)
                ending = _ending_text(event.error)
                text = f"{_PREFIX}: run {self._run_id} {ending}"
                line = _Line(text, status=True, final=True)
        return line  # CheckpointTaken and any later kinds: the status only

    def _apply_question(self, event: QuestionAsked | QuestionAnswered | RunSuspended) -> _Line:
        """An ask step waiting for an answer, then answered; or the run suspended for some."""
        if isinstance(event, QuestionAsked):
            self._running.pop(event.step, None)
            self._waiting[join_path(event.step)] = None  # named as RunSuspended names it
            until = "" if event.expires_at is None else f" until {event.expires_at}"
            return _Line(f"{_PREFIX}: {event.step} is waiting for an answer{until}", status=True)
        if isinstance(event, QuestionAnswered):
            self._waiting.pop(join_path(event.step), None)
            self._done.add(event.step)
            return _Line(f"{_PREFIX}: {event.step} answered", status=True, notable=False)
        self._running.clear()
        self._maps.clear()
        self._waiting = dict.fromkeys(event.pending)
        self._cost = event.cost
        text = f"{_PREFIX}: run {self._run_id} suspended"
        return _Line(text, status=True, final=True)

    def _step_not_done(self, event: StepSkipped | StepFailed, now: float) -> _Line:
        """A step that ended without an output: skipped by a condition, or failed."""
        if isinstance(event, StepSkipped):
            self._done.add(event.step)
            self._skipped.add(event.step)
            text = f"{_PREFIX}: {event.step} skipped: {event.reason}"
            return _Line(text, status=True, notable=False)
        self._maps.pop(event.step, None)
        took = self._step_ended(event.step, now, event.duration)
        self._failed.add(event.step)
        error = _error_text(event.error)
        return _Line(f"{_PREFIX}: {event.step} failed after {took}: {error}", status=True)

    def _step_finished(self, event: StepFinished, now: float) -> _Line:
        took = self._step_ended(event.step, now, event.duration)
        self._done.add(event.step)
        text = f"{_PREFIX}: {event.step} finished in {took}"
        mapped = self._maps.pop(event.step, None)
        if mapped is None:
            self._cost += event.cost
        else:  # its items' usage was counted as each one finished
            text += f" ({_count(mapped.items, 'item')})"
        return _Line(text, status=True, notable=False)

    def _apply_item(
        self, event: MapStarted | ItemStarted | ItemFinished | ItemFailed, now: float
    ) -> _Line | None:
        """Count a map's items; say when it found them, when they fail, how far it got."""
        line: _Line | None = None
        match event:
            case MapStarted():
                line = self._map_started(event, now)
            case ItemStarted():
                self._items.setdefault((event.step, event.item), now)
            case ItemFinished():
                line = self._item_finished(event, now)
            case ItemFailed():
                line = self._item_failed(event, now)
        return line

    def _map_started(self, event: MapStarted, now: float) -> _Line:
        said = event.recorded * _TENTHS // event.items if event.items else 0
        self._maps[event.step] = _Map(event.items, event.recorded, said=said, said_at=now)
        text = f"{_PREFIX}: {event.step}: {_count(event.items, 'item')}"
        if event.recorded:
            text += f", {event.recorded:,} recorded before"
        return _Line(text, notable=False)

    def _item_finished(self, event: ItemFinished, now: float) -> _Line | None:
        self._items.pop((event.step, event.item), None)
        self._cost += event.cost
        state = self._maps.get(event.step)
        if state is None:
            return None
        state.recorded = max(state.recorded, event.recorded)
        return None if self._live else state.progress_line(now)

    def _item_failed(self, event: ItemFailed, now: float) -> _Line | None:
        """A line for each of the first few failed items of a map, then one saying more did."""
        began = self._items.pop((event.step, event.item), None)
        state = self._maps.get(event.step)
        if state is None:
            return None
        state.failed += 1
        if state.failed > _SHOWN_ITEM_FAILURES:
            more = f"{_PREFIX}: {event.step}: more items failed"
            return _Line(more, status=True) if state.failed == _SHOWN_ITEM_FAILURES + 1 else None
        took = _duration(event.duration if began is None else now - began)
        error = _error_text(event.error)
        text = f"{_PREFIX}: {event.step} item {event.item} failed after {took}: {error}"
        return _Line(text, status=True)

    def _started_run(self, event: RunStarted) -> str:
        self._total = event.steps
        self._done.update(event.recorded)
        restored: object = getattr(event, "cost", None)  # restored usage, where events carry it
        if isinstance(restored, TokenUsage):
            self._cost = restored
        if event.resumed:
            return (
                f"{_PREFIX}: run {event.run_id} resumed: {len(event.recorded)}/{event.steps} "
                f"steps recorded"
            )
        return f"{_PREFIX}: run {event.run_id} started: {_count(event.steps, 'step')}"

    def _step_ended(self, step: str, now: float, reported: float) -> str:
        began = self._running.pop(step, None)
        return _duration(reported if began is None else now - began)

    # --- text -----------------------------------------------------------------------------

    def _status(self, now: float) -> str:
        """``12/40 done, 2 running (a, b), 1 failed, 1m02s, 12,345 tokens in 8 calls``."""
        parts = [f"{len(self._done)}/{self._total} done"]
        if self._skipped:
            parts[0] += f" ({len(self._skipped)} skipped)"
        if self._running:
            parts.append(f"{len(self._running)} running ({_names(self._running)})")
        parts.extend(
            f"{name}: {state.items_text()}"
            for name, state in list(self._maps.items())[:_SHOWN_NAMES]
        )
        if self._waiting:
            parts.append(f"waiting for: {_names(self._waiting)}")
        if self._failed:
            parts.append(f"{len(self._failed)} failed")
        parts.append(_duration(0.0 if self._started is None else now - self._started))
        cost = self._cost
        if cost.total_tokens or cost.llm_calls:
            parts.append(
                f"{_count(cost.total_tokens, 'token')} in {_count(cost.llm_calls, 'call')}"
            )
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


def _names(names: Iterable[str]) -> str:
    """``a, b, c, +2 more``: the first few names, in order, and how many more there are."""
    shown = list(names)
    text = ", ".join(shown[:_SHOWN_NAMES])
    if len(shown) > _SHOWN_NAMES:
        text += f", +{len(shown) - _SHOWN_NAMES} more"
    return text
