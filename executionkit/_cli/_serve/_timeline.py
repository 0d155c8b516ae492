"""A run's timeline drawn on the server as SVG: one row per step, a bar per attempt.

Drawn from the checkpoint alone: format 5's ``attempts`` (when each attempt ran
and how it ended), the ledger's ``"unknown"`` rows (attempts running when a
process stopped, whose times nobody knows: a mark, never a bar), the questions
pending (``asked_at`` to now) and the timers (``waits``: since to due). Each row
is one top-level element carrying ``data-part="timeline:<step>"`` and holding
its own small ``<svg>``, so that one step's change changes only its row's HTML:
the horizontal scale is quantised for that. The rows span the run's elapsed time
rounded up to a nice value (`nice_span`: 1, 2 or 5 times 10^n milliseconds), from
the run's first known moment, in whole pixels; a row's HTML is the same while
the span stays within its nice value. A map's items (and a sub-workflow's
steps) fold into their step's row, with a ``<details>`` listing the first
`SHOWN_SUBROWS` of them. Colours come from the stylesheet by class; every bar
has a ``<title>`` saying what it is, so colour is never the only sign. Built of
`Markup` alone, as `_html` builds the rest: every value goes in through a hole.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from executionkit._cli._serve._markup import Markup, html, join
from executionkit._cli._step_times import duration_text, moment_text, step_times, top_step
from executionkit._define._questions import child_checkpoints, waiting_in

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from executionkit._checkpoint._times import Attempt
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._serve._runs import StepView
    from executionkit._cli._step_times import StepTimes  # noqa: TC004 - dataclass annotations stay strings

__all__ = ["OUTCOME_NAMES", "SHOWN_SUBROWS", "WIDTH", "nice_span", "timeline"]

WIDTH = 720  # pixels of a row's drawing
HEIGHT = 18  # pixels of a row
SHOWN_SUBROWS = 100  # rows of items (or sub-workflow steps) a folded row lists
_BAR_Y = 3
_MIN_WIDTH = 2  # pixels: an attempt of a few milliseconds stays visible
_BAR_HEIGHT = 12
_MIDDLE = HEIGHT // 2
_LABEL_PX_PER_CHAR = 6.5  # 11 px text: a label is drawn only where it fits
_SHOWN_UNKNOWN = 5  # attempts of unknown times named in a mark's title
_AXIS_HEIGHT = 20
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

OUTCOME_NAMES = {
    "ok": "ok",
    "failed": "failed",
    "timeout": "timed out",
    "cancelled": "cancelled",
    "rate_limited": "rate limited",
}
"""Each outcome of ``attempts`` as the legend and the titles say it."""

# Drawn in this order, so that the attempts that went wrong lie on top of a fold.
_DRAW_ORDER = ("ok", "cancelled", "rate_limited", "timeout", "failed")
_GAP_REASONS = {
    "rate_limited": "rate limit",
    "failed": "retry backoff",
    "timeout": "retry backoff",
    "cancelled": "stopped, resumed later",
    "ok": "run again",
}


def nice_span(milliseconds: int) -> int:
    """The smallest of 1, 2 and 5 times 10^n ms (n >= 0) that is at least ``milliseconds``."""
    scale = 1
    while True:
        for factor in (1, 2, 5):
            if factor * scale >= milliseconds:
                return factor * scale
        scale *= 10


@dataclass(frozen=True, slots=True)
class _Scale:
    """Where moments go: ``origin`` at x 0, ``span`` milliseconds over `WIDTH` pixels."""

    origin: int
    span: int

    def x(self, moment: int) -> int:
        """The pixel of ``moment``, clipped to the drawing."""
        return min(WIDTH, max(0, (moment - self.origin) * WIDTH // self.span))

    def extent(self, start: int, end: int) -> tuple[int, int]:
        """The pixels from ``start`` to ``end``: at least `_MIN_WIDTH` wide, inside the drawing."""
        x0 = min(self.x(start), WIDTH - _MIN_WIDTH)
        return x0, max(_MIN_WIDTH, self.x(end) - x0)


@dataclass(frozen=True, slots=True)
class _Wait:
    """A span a step waited for something that is not an attempt: a person, a timer."""

    kind: str  # "question" or "timer"
    path: str
    since: int
    until: int  # now for a question; the due time for a timer
    text: str


@dataclass(slots=True)
class _Row:
    """Everything one step's row draws."""

    name: str
    status: str
    kind: str
    times: StepTimes | None = None
    unknown: list[tuple[str, str | None, int]] = field(default_factory=list)
    waits: list[_Wait] = field(default_factory=list)


def timeline(
    checkpoint: WorkflowCheckpoint,
    steps: Sequence[StepView] | None = None,
    *,
    now_ms: int,
    times: Mapping[str, StepTimes] | None = None,
    live: bool = False,
) -> Markup:
    """The "Timeline" section of a run's page: a legend, an axis, a row per step.

    Args:
        checkpoint: The run's checkpoint (or a sub-workflow's, for its view).
        steps: The run's steps in its order, as the page shows them
            (`step_views`); None: the steps the checkpoint names. Steps that
            ``attempts`` names and ``steps`` lacks follow, in the order they ran.
        now_ms: Now, in milliseconds since the epoch: where the questions
            pending end, and the run's span when it is ``live`` or waits.
        times: ``step_times(checkpoint, names)``, if the caller has it already.
        live: Whether the run runs now (its span reaches now).

    Returns:
        The section as `Markup`: the same input always gives the same HTML,
        and a row's HTML changes only when that row's step changes, or when
        the run's span passes its nice value (`nice_span`).
    """
    if steps is None:
        from executionkit._cli._serve._runs import step_views  # noqa: PLC0415

        steps = step_views(checkpoint, None, {}, {})
    names = {step.name: None for step in steps}
    if times is None:
        times = step_times(checkpoint, names)
    rows = {step.name: _Row(step.name, step.status, step.kind) for step in steps}
    for name, found in times.items():
        row = rows.get(name)
        if row is None:
            row = rows[name] = _Row(name, "-", "map" if found.items else "step")
        row.times = found
    for row_step, item, attempt in _unknown(checkpoint):
        name = top_step(row_step, names)
        rows.setdefault(name, _Row(name, "-", "step")).unknown.append((row_step, item, attempt))
    for wait in _waits(checkpoint, now_ms):
        name = top_step(wait.path, names)
        rows.setdefault(name, _Row(name, "-", "step")).waits.append(wait)
    scale = _scale(rows.values(), now_ms, live=live)
    heading = html('<h2 id="timeline">Timeline</h2>')
    if scale is None:
        return html(
            '{}<p class="note tl-none">No attempt has times recorded yet: a checkpoint of '
            "format 5 records when each attempt ran, once it ends (an older version records "
            "none).</p>",
            heading,
        )
    ticks = 4 if str(scale.span)[0] == "2" else 5
    return html(
        '{}<div class="timeline tl-ticks-{}" data-list="timeline">{}{}{}</div>',
        heading,
        ticks,
        _legend(),
        _axis(scale, ticks),
        join(_row(row, scale) for row in rows.values()),
    )


def _unknown(checkpoint: WorkflowCheckpoint) -> Iterable[tuple[str, str | None, int]]:
    """The ledger's attempts of unknown outcome (once each: a row per model is possible)."""
    seen: set[tuple[str, str | None, int]] = set()
    for row in checkpoint.ledger:
        if row.outcome == "unknown" and (row.step, row.item, row.attempt) not in seen:
            seen.add((row.step, row.item, row.attempt))
            yield row.step, row.item, row.attempt


def _ms(text: str) -> int:
    """A UTC ISO 8601 time of a checkpoint in whole milliseconds since the epoch (exactly)."""
    return (datetime.fromisoformat(text) - _EPOCH) // timedelta(milliseconds=1)


def _waits(checkpoint: WorkflowCheckpoint, now_ms: int) -> list[_Wait]:
    """The questions pending (asked to now) and the timers (since to due), nested ones too."""
    found = []
    for path, entry in waiting_in(checkpoint).items():
        asked = entry.get("asked_at")
        if not isinstance(asked, str):
            continue
        since = _ms(asked)
        found.append(
            _Wait(
                "question",
                path,
                since,
                max(since, now_ms),
                f"{path}: waiting for an answer since {moment_text(since)}",
            )
        )
    for path, entry in _timers(checkpoint, ""):
        since, due = _ms(entry["since"]), _ms(entry["due"])
        found.append(
            _Wait(
                "timer",
                path,
                since,
                due,
                f"{path}: timer, waiting since {moment_text(since)}, due {moment_text(due)}",
            )
        )
    return found


def _timers(checkpoint: WorkflowCheckpoint, prefix: str) -> list[tuple[str, Mapping[str, str]]]:
    """Every ``waits`` entry by path, those of sub-workflows in progress after."""
    from executionkit._paths import join_path  # noqa: PLC0415

    found = [(f"{prefix}{join_path(name)}", entry) for name, entry in checkpoint.waits.items()]
    for name, entry in checkpoint.children.items():
        for path, child in child_checkpoints(name, entry):
            found += _timers(child, f"{prefix}{path}/")
    return found


def _scale(rows: Iterable[_Row], now_ms: int, *, live: bool) -> _Scale | None:
    """The run's scale: from its first known moment, over its span made nice; None: no times."""
    starts: list[int] = []
    ends: list[int] = []
    waiting = False
    for row in rows:
        if row.times is not None:
            starts.append(row.times.started)
            ends.append(row.times.ended)
        for wait in row.waits:
            starts.append(wait.since)
            ends.append(wait.since)
            waiting = True
    if not starts:
        return None
    origin = min(starts)
    end = max(ends)
    if live or waiting:
        end = max(end, now_ms)
    return _Scale(origin, nice_span(max(1, end - origin)))


def _legend() -> Markup:
    """What each colour and mark means; the hatching the waits' spans are filled with."""
    swatches = [
        html(
            '<span class="tl-key"><svg width="14" height="12" aria-hidden="true">'
            '<rect class="tl-bar tl-{}" x="0" y="0" width="14" height="12"/></svg>{}</span>',
            outcome,
            OUTCOME_NAMES[outcome],
        )
        for outcome in OUTCOME_NAMES
    ]
    swatches += [
        html(
            '<span class="tl-key"><span class="tl-unknown">?</span>'
            "unknown (running when a process stopped: no times)</span>"
        ),
        html(
            '<span class="tl-key"><svg width="22" height="12" aria-hidden="true">'
            '<line class="tl-gap-line" x1="0" y1="6" x2="22" y2="6"/></svg>'
            "between attempts (retry backoff, rate limit)</span>"
        ),
        html(
            '<span class="tl-key"><svg width="22" height="12" aria-hidden="true">'
            '<rect class="tl-wait tl-question" fill="url(#tl-hatch)" x="1" y="1" width="20" '
            'height="10"/></svg>'
            "waiting for an answer</span>"
        ),
        html(
            '<span class="tl-key"><svg width="22" height="12" aria-hidden="true">'
            '<rect class="tl-wait tl-timer" fill="url(#tl-hatch)" x="1" y="1" width="20" '
            'height="10"/></svg>'
            "waiting for a timer</span>"
        ),
    ]
    return html(
        '<div class="tl-legend" data-part="timeline-legend">'
        '<svg class="tl-defs" width="0" height="0" aria-hidden="true"><defs>'
        '<pattern id="tl-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><line class="tl-hatch-line" x1="0" y1="0" x2="0" y2="6"/>'
        "</pattern></defs></svg>{}</div>",
        join(swatches),
    )


def _axis(scale: _Scale, ticks: int) -> Markup:
    """The time axis: a labelled tick at each fifth (or quarter) of the span."""
    parts = []
    for number in range(ticks + 1):
        x = number * WIDTH // ticks
        anchor = "start" if number == 0 else "end" if number == ticks else "middle"
        label = "0" if number == 0 else _tick_text(scale.span * number // ticks)
        parts.append(
            html(
                '<line class="tl-tick" x1="{}" y1="14" x2="{}" y2="{}"/>'
                '<text x="{}" y="11" text-anchor="{}">{}</text>',
                x,
                x,
                _AXIS_HEIGHT,
                x,
                anchor,
                label,
            )
        )
    return html(
        '<div class="tl-axis tl-line" data-part="timeline-axis">'
        '<span class="tl-name" title="the run\'s first attempt started {}">from {}</span>'
        '<svg class="tl-bars" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="time since the run\'s first attempt, up to {}">{}</svg>'
        '<span class="tl-note"></span></div>',
        moment_text(scale.origin),
        moment_text(scale.origin)[11:19] + " UTC",
        WIDTH,
        _AXIS_HEIGHT,
        WIDTH,
        _AXIS_HEIGHT,
        duration_text(scale.span),
        join(parts),
    )


def _tick_text(milliseconds: int) -> str:
    """A tick's label: `duration_text` without a needless ``.0`` (``2 s``, not ``2.0 s``)."""
    text = duration_text(milliseconds)
    return text.replace(".0 s", " s") if text.endswith(".0 s") else text


def _row(row: _Row, scale: _Scale) -> Markup:
    """One step's row: its name, its drawing, a note; a map's items folded under it."""
    entries = [] if row.times is None else row.times.entries
    nested = any(path != row.name or item is not None for path, item, *_ in entries)
    nested = nested or any(path != row.name or item is not None for path, item, _ in row.unknown)
    if not nested:
        drawing = [_bars(None, entries, scale, label=row.name)]
        note = _note(row, {})
        return html(
            '<div class="tl-row" data-part="timeline:{}"><div class="tl-line">{}{}{}</div></div>',
            row.name,
            _name(row.name),
            _svg(drawing, row.waits, scale),
            note,
        )
    series, unknown = _series(row)
    drawing = [_folded(row.name, entries, scale)]
    keys = dict.fromkeys([*series, *unknown])
    note = _note(row, keys)
    shown = _shown(series, unknown)
    more = len(keys) - len(shown)
    sub = [
        html(
            '<div class="tl-line tl-subline">{}{}{}</div>',
            _name(_sub_label(row.name, path, item), sub=True),
            _svg([_bars(item, series.get((path, item), []), scale, label=path)], [], scale),
            _unknown_mark(unknown.get((path, item), [])),
        )
        for path, item in shown
    ]
    if more > 0:
        sub.append(
            html('<p class="tl-more">and {} more not listed</p>', f"{more:,}"),
        )
    return html(
        '<div class="tl-row" data-part="timeline:{}"><details class="tl-fold">'
        '<summary class="tl-line">{}{}{}</summary><div class="tl-sub">{}</div></details></div>',
        row.name,
        _name(row.name),
        _svg(drawing, row.waits, scale),
        note,
        join(sub),
    )


_Key = tuple[str, "str | None"]  # a series: (step path, item key)
_Unknown = tuple[str, "str | None", int]  # an attempt of unknown times: (path, item, attempt)


def _series(row: _Row) -> tuple[dict[_Key, list[Attempt]], dict[_Key, list[_Unknown]]]:
    """A folded row's series (each item, or sub-workflow step): their entries, their unknowns."""
    series: dict[_Key, list[Attempt]] = {}
    for entry in [] if row.times is None else row.times.entries:
        key = (entry[0], entry[1])
        found = series.get(key)
        if found is None:
            series[key] = [entry]
        else:
            found.append(entry)
    unknown: dict[_Key, list[_Unknown]] = {}
    for mark in row.unknown:
        unknown.setdefault((mark[0], mark[1]), []).append(mark)
    return series, unknown


def _shown(series: Mapping[_Key, list[Attempt]], unknown: Mapping[_Key, object]) -> list[_Key]:
    """The first `SHOWN_SUBROWS` series to list: those that went wrong, then the earliest.

    Gone wrong: a retry, an attempt that did not end ``"ok"``, an attempt of
    unknown times. Each part in order of its first start, ties by path and item.
    """
    wrong: list[_Key] = list(unknown)
    right: list[_Key] = []
    for key, entries in series.items():
        if key in unknown:
            continue
        if len(entries) > 1 or entries[0][3] != "ok":
            wrong.append(key)
        else:
            right.append(key)

    def start(key: _Key) -> tuple[int, str, str]:
        entries = series.get(key)
        first = min(entry[4] for entry in entries) if entries else 0
        return first, key[0], key[1] or ""

    listed = heapq.nsmallest(SHOWN_SUBROWS, wrong, key=start)
    return listed + heapq.nsmallest(SHOWN_SUBROWS - len(listed), right, key=start)


def _sub_label(name: str, path: str, item: str | None) -> str:
    """A folded series' label: ``item 7``, or the sub-workflow's step path below ``name``."""
    own = path.split("/", 1)[1] if path != name and "/" in path else path
    if item is None:
        return own
    return f"item {item}" if path == name else f"{own}, item {item}"


def _name(name: str, *, sub: bool = False) -> Markup:
    """The name column: cut by the stylesheet where it overflows, whole in its title."""
    return html(
        '<span class="tl-name{}" title="{}">{}</span>', " tl-subname" if sub else "", name, name
    )


def _svg(drawing: Sequence[Markup], waits: Sequence[_Wait], scale: _Scale) -> Markup:
    """A row's drawing: its waits' spans under its attempts' bars."""
    spans = []
    for wait in waits:
        x, width = scale.extent(wait.since, wait.until)
        spans.append(
            html(
                '<rect class="tl-wait tl-{}" fill="url(#tl-hatch)" x="{}" y="{}" width="{}" '
                'height="{}"><title>{}</title></rect>',
                wait.kind,
                x,
                _BAR_Y - 1,
                width,
                _BAR_HEIGHT + 2,
                wait.text,
            )
        )
    # No role or label of its own: its name is beside it, and each bar's title says all
    # (a label naming the step would also be found as a label of the step's answer field).
    return html(
        '<svg class="tl-bars" width="{}" height="{}" viewBox="0 0 {} {}">{}{}</svg>',
        WIDTH,
        HEIGHT,
        WIDTH,
        HEIGHT,
        join(spans),
        join(drawing),
    )


def _bars(item: str | None, entries: Sequence[Attempt], scale: _Scale, *, label: str) -> Markup:
    """A bar per attempt of one series, and the gaps between them with their reasons."""
    parts = []
    ordered = sorted(entries, key=lambda entry: (entry[2], entry[4]))
    where = label if item is None else f"{label}, item {item}"
    for number, (_, _, attempt, outcome, started, ended) in enumerate(ordered):
        if number:
            parts.append(_gap(where, ordered[number - 1], ordered[number], scale))
        x, width = scale.extent(started, ended)
        parts.append(
            html(
                '<rect class="tl-bar tl-{}" x="{}" y="{}" width="{}" height="{}">'
                "<title>{}</title></rect>",
                outcome,
                x,
                _BAR_Y,
                width,
                _BAR_HEIGHT,
                f"{where} · attempt {attempt} · {OUTCOME_NAMES.get(outcome, outcome)} · "
                f"started {moment_text(started)} · {duration_text(ended - started)}",
            )
        )
    return join(parts)


def _gap(where: str, before: Attempt, after: Attempt, scale: _Scale) -> Markup:
    """The time between two attempts of a series, with why (and a label where it fits)."""
    x0 = scale.x(before[5])
    x1 = scale.x(after[4])
    if x1 - x0 < 1:
        return html("")
    reason = _GAP_REASONS.get(before[3], "waiting")
    if after[2] > before[2] + 1:  # attempts between with no entry: the ledger's unknown ones
        reason = f"{reason}; attempts in between ran when a process stopped (times unknown)"
    text = (
        f"{where} · {reason} · {duration_text(after[4] - before[5])} between attempt "
        f"{before[2]} ({OUTCOME_NAMES.get(before[3], before[3])}) and attempt {after[2]}"
    )
    short = _GAP_REASONS.get(before[3], "waiting")
    label = html("")
    if len(short) * _LABEL_PX_PER_CHAR + 8 <= x1 - x0:
        label = html(
            '<text class="tl-gap-label" x="{}" y="{}" text-anchor="middle">{}</text>',
            (x0 + x1) // 2,
            HEIGHT - 5,
            short,
        )
    return html(
        '<g class="tl-gap"><title>{}</title><rect class="tl-gap-hit" x="{}" y="{}" width="{}" '
        'height="{}"/><line class="tl-gap-line" x1="{}" y1="{}" x2="{}" y2="{}"/>{}</g>',
        text,
        x0,
        _BAR_Y,
        x1 - x0,
        _BAR_HEIGHT,
        x0,
        _MIDDLE,
        x1,
        _MIDDLE,
        label,
    )


def _folded(name: str, entries: Sequence[Attempt], scale: _Scale) -> Markup:
    """A folded row: the attempts of each outcome merged where their pixels touch.

    Bounded by the drawing's width, however many items the map has.
    """
    by_outcome: dict[str, list[tuple[int, int, int, int]]] = {}
    origin, whole, last_x = scale.origin, scale.span, WIDTH - _MIN_WIDTH
    for _, _, _, outcome, started, ended in entries:  # `_Scale.extent`, inlined: 10,000 items
        x = min(last_x, max(0, (started - origin) * WIDTH // whole))
        end = max(x + _MIN_WIDTH, min(WIDTH, (ended - origin) * WIDTH // whole))
        spans = by_outcome.get(outcome)
        if spans is None:
            spans = by_outcome[outcome] = []
        spans.append((x, end, started, ended))
    parts = []
    for outcome in sorted(by_outcome, key=_order):
        spans = sorted(by_outcome[outcome])
        x0, x1, first, last = spans[0]
        count = 0
        for span in [*spans, (WIDTH + 2, WIDTH + 2, 0, 0)]:
            if span[0] > x1:
                parts.append(_merged(name, outcome, count, (x0, x1, first, last)))
                x0, x1, first, last = span
                count = 1
            else:
                x1, first, last = max(x1, span[1]), min(first, span[2]), max(last, span[3])
                count += 1
    return join(parts)


def _order(outcome: str) -> int:
    return _DRAW_ORDER.index(outcome) if outcome in _DRAW_ORDER else len(_DRAW_ORDER)


def _merged(name: str, outcome: str, count: int, span: tuple[int, int, int, int]) -> Markup:
    """One bar of a folded row: ``count`` attempts of one outcome, with their extent."""
    x0, x1, first, last = span
    return html(
        '<rect class="tl-bar tl-{}" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
        outcome,
        x0,
        _BAR_Y,
        x1 - x0,
        _BAR_HEIGHT,
        f"{name} · {count:,} attempt{'' if count == 1 else 's'} "
        f"{OUTCOME_NAMES.get(outcome, outcome)} · from {moment_text(first)} · "
        f"{duration_text(last - first)}",
    )


def _note(row: _Row, groups: Mapping[_Key, object]) -> Markup:
    """The note after a row's drawing: its items or steps, attempts of unknown times."""
    parts = []
    if groups:
        items = {item for _, item in groups if item is not None}
        if not items and row.kind == "map":  # a map of sub-workflows: paths name/key/step
            items = {path.split("/")[1] for path, _ in groups if path.count("/") > 1}
        if items:
            counted = len(items)
            parts.append(html("{}", f"{counted:,} item{'' if counted == 1 else 's'}"))
        else:
            paths = {path for path, _ in groups}
            parts.append(html("{}", f"{len(paths):,} step{'' if len(paths) == 1 else 's'}"))
    if row.unknown:
        parts.append(_unknown_mark(row.unknown))
    if row.status in {"running", "waiting"}:
        parts.append(html('<span class="tl-status">{}</span>', row.status))
    return html('<span class="tl-note">{}</span>', join(parts, " "))


def _unknown_mark(unknown: Sequence[tuple[str, str | None, int]]) -> Markup:
    """The mark of attempts whose times nobody knows, each named in its title."""
    if not unknown:
        return html("")
    named = [
        f"{path}{'' if item is None else f' item {item}'} attempt {attempt}"
        for path, item, attempt in unknown[:_SHOWN_UNKNOWN]
    ]
    more = len(unknown) - len(named)
    text = "; ".join(named) + (f"; and {more:,} more" if more > 0 else "")
    count = len(unknown)
    return html(
        '<span class="tl-unknown" title="{}">? {}</span>',
        f"running when a process stopped, outcome and times unknown: {text}",
        f"{count:,} unknown",
    )
