"""The run page's timeline and durations (issue 35), from checkpoints written out by hand.

`timeline` draws a row per step from format 5's ``attempts``; these tests build
the checkpoints with `WorkflowCheckpoint.from_dict` and read the HTML it returns
(parsed into a small tree, so that a row is checked as the element it is). The
steps table's durations are read from the page `App.run_page` builds over a JSON
file. A real run's timeline, in a browser, is `test_serve_browser_timeline`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, TokenUsage, Workflow, WorkflowCheckpoint, _clock, events
from executionkit._cli._location import parse_location
from executionkit._cli._serve import App
from executionkit._cli._serve._answers import RunEvents, Tracker
from executionkit._cli._serve._html import RunPage, run_main
from executionkit._cli._serve._runs import Source, step_views
from executionkit._cli._serve._timeline import SHOWN_SUBROWS, WIDTH, nice_span, timeline
from executionkit._cli._step_times import duration_text, moment_text, step_times

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

T = 1_796_000_000_000  # 2026-11-30 00:53:20 UTC, in milliseconds since the epoch
HOSTILE = "<img src=x onerror=alert('step')>\"&"
USAGE = {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0}


def _checkpoint(
    attempts: list[list[Any]],
    *,
    outputs: dict[str, Any] | None = None,
    ledger: list[list[Any]] | None = None,
    pending: dict[str, Any] | None = None,
    waits: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    step_info: dict[str, Any] | None = None,
) -> WorkflowCheckpoint:
    """A format 5 checkpoint of run ``r`` holding ``attempts`` and the rest as given."""
    data = WorkflowCheckpoint(0, {}, TokenUsage(), version=5, run_id="r", seq=1).to_dict()
    outputs = {} if outputs is None else outputs
    data.update(
        step_index=len(outputs),
        outputs=outputs,
        attempts=attempts,
        ledger=ledger or [],
        pending=pending or {},
        waits=waits or {},
        errors=errors or {},
        step_info=step_info or {},
        created_at="2026-11-30T00:53:30+00:00",
    )
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(data)))


@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    children: list[_Element] = field(default_factory=list)
    text: str = ""

    def all(self) -> Iterator[_Element]:
        """This element and every element inside it, in document order."""
        yield self
        for child in self.children:
            yield from child.all()

    def find(self, tag: str, cls: str | None = None) -> list[_Element]:
        """Every element inside (this one too) of ``tag`` with the class ``cls``."""
        return [
            element
            for element in self.all()
            if element.tag == tag
            and (cls is None or cls in element.attrs.get("class", "").split())
        ]

    def texts(self) -> str:
        """The text of this element and of everything inside it."""
        return self.text + "".join(child.texts() for child in self.children)


class _Tree(HTMLParser):
    """The HTML as a tree of `_Element` (SVG's ``<rect/>`` closes itself)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Element("root", {})
        self._open = [self.root]
        self.feed(text)
        self.close()
        assert self._open == [self.root], "the HTML leaves elements open"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = _Element(tag, {name: value or "" for name, value in attrs})
        self._open[-1].children.append(element)
        self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open[-1].children.append(_Element(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self._open[-1].tag == tag, f"</{tag}> closes <{self._open[-1].tag}>"
        self._open.pop()

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(_Element("#text", {}, text=data))


def _rows(markup: str) -> dict[str, _Element]:
    """The timeline's rows by step: each a direct child of the timeline, with no part inside."""
    (box,) = _Tree(markup).root.find("div", "timeline")
    rows = {}
    for child in box.children:
        part = child.attrs["data-part"]
        inner = [e for e in child.all() if e is not child and "data-part" in e.attrs]
        assert inner == [], f"{part} holds another part"
        if part.startswith("timeline:"):
            rows[part.removeprefix("timeline:")] = child
    return rows


def _bars(row: _Element, *, folded: bool = False) -> list[_Element]:
    """The bars a row draws itself (its summary's, for a folded row)."""
    where = row.find("summary")[0] if folded else row
    return where.find("rect", "tl-bar")


def _title(element: _Element) -> str:
    return next(child for child in element.children if child.tag == "title").texts()


@pytest.mark.parametrize(
    ("milliseconds", "text"),
    [
        (-5, "0 ms"),
        (0, "0 ms"),
        (850, "850 ms"),
        (999, "999 ms"),
        (1000, "1.0 s"),
        (12_400, "12.4 s"),
        (12_449, "12.4 s"),
        (12_450, "12.5 s"),
        (59_949, "59.9 s"),
        (59_950, "1 min 00 s"),
        (185_000, "3 min 05 s"),
        (3_599_499, "59 min 59 s"),
        (3_599_500, "1 h 00 min"),
        (7_380_000, "2 h 03 min"),
        (86_370_000, "1 d 00 h"),
        (200_000_000, "2 d 08 h"),
    ],
)
def test_durations_read_as_people_read_them(milliseconds: int, text: str) -> None:
    assert duration_text(milliseconds) == text


def test_moments_are_shown_in_utc_to_the_millisecond() -> None:
    assert moment_text(T + 1250) == "2026-11-30 00:53:21.250 UTC"


@pytest.mark.parametrize(
    ("span", "nice"),
    [
        (0, 1),
        (1, 1),
        (3, 5),
        (5, 5),
        (6, 10),
        (999, 1000),
        (1001, 2000),
        (2001, 5000),
        (5001, 10_000),
        (86_400_000, 100_000_000),
    ],
)
def test_the_span_is_rounded_up_to_one_two_or_five_times_a_power_of_ten(
    span: int, nice: int
) -> None:
    assert nice_span(span) == nice


def test_a_row_per_step_in_the_runs_order_each_an_element_of_its_own() -> None:
    """Rows follow the steps' order, not the order attempts ended; each is one part."""
    checkpoint = _checkpoint(
        [["b", None, 1, "ok", T + 100, T + 900], ["a", None, 1, "ok", T, T + 2000]],
        outputs={"a": 1, "b": 2},
    )
    markup = timeline(checkpoint, now_ms=T + 3000)
    rows = _rows(markup)
    assert list(rows) == ["a", "b"]
    assert [row.attrs["class"] for row in rows.values()] == ["tl-row", "tl-row"]
    (a,) = _bars(rows["a"])
    assert (a.attrs["x"], a.attrs["width"]) == ("0", str(WIDTH * 2000 // 2000))
    assert rows["b"].find("span", "tl-name")[0].texts() == "b"
    assert timeline(checkpoint, now_ms=T + 3000) == markup  # deterministic


@pytest.mark.parametrize("outcome", ["ok", "failed", "timeout", "cancelled", "rate_limited"])
def test_each_bar_is_coloured_by_its_outcome_and_titled_in_words(outcome: str) -> None:
    checkpoint = _checkpoint(
        [["fetch", None, 1, outcome, T + 250, T + 1100]], errors={"fetch": "ValueError: x"}
    )
    (bar,) = _bars(_rows(timeline(checkpoint, now_ms=T))["fetch"])
    assert bar.attrs["class"] == f"tl-bar tl-{outcome}"
    said = {"timeout": "timed out", "rate_limited": "rate limited"}.get(outcome, outcome)
    assert _title(bar) == (
        f"fetch · attempt 1 · {said} · started 2026-11-30 00:53:20.250 UTC · 850 ms"
    )


def test_the_legend_names_every_outcome_and_the_marks() -> None:
    checkpoint = _checkpoint([["fetch", None, 1, "ok", T, T + 10]], outputs={"fetch": 1})
    (legend,) = _Tree(timeline(checkpoint, now_ms=T)).root.find("div", "tl-legend")
    text = legend.texts()
    for word in ("ok", "failed", "timed out", "cancelled", "rate limited", "unknown"):
        assert word in text
    assert "waiting for an answer" in text
    assert "waiting for a timer" in text
    assert {rect.attrs["class"] for rect in legend.find("rect", "tl-bar")} == {
        f"tl-bar tl-{outcome}" for outcome in ("ok", "failed", "timeout", "cancelled")
    } | {"tl-bar tl-rate_limited"}


@pytest.mark.parametrize(
    ("first", "reason"),
    [("rate_limited", "rate limit"), ("failed", "retry backoff"), ("timeout", "retry backoff")],
)
def test_a_gap_between_attempts_says_why_and_is_labelled_where_wide(
    first: str, reason: str
) -> None:
    checkpoint = _checkpoint(
        [["fetch", None, 1, first, T, T + 200], ["fetch", None, 2, "ok", T + 2200, T + 2500]],
        outputs={"fetch": 1},
    )
    row = _rows(timeline(checkpoint, now_ms=T))["fetch"]
    (gap,) = row.find("g", "tl-gap")
    said = {"timeout": "timed out", "rate_limited": "rate limited"}.get(first, first)
    assert _title(gap) == f"fetch · {reason} · 2.0 s between attempt 1 ({said}) and attempt 2"
    (label,) = gap.find("text", "tl-gap-label")
    assert label.texts() == reason
    (line,) = gap.find("line", "tl-gap-line")
    span = 5000  # 2.5 s rounded up
    assert (line.attrs["x1"], line.attrs["x2"]) == (
        str(200 * WIDTH // span),
        str(2200 * WIDTH // span),
    )
    assert [bar.attrs["class"] for bar in _bars(row)] == [f"tl-bar tl-{first}", "tl-bar tl-ok"]


def test_a_narrow_gap_keeps_its_title_and_drops_its_label() -> None:
    checkpoint = _checkpoint(
        [["fetch", None, 1, "failed", T, T + 100], ["fetch", None, 2, "ok", T + 150, T + 9000]],
        outputs={"fetch": 1},
    )
    (gap,) = _rows(timeline(checkpoint, now_ms=T))["fetch"].find("g", "tl-gap")
    assert "retry backoff" in _title(gap)
    assert gap.find("text") == []


def test_attempts_of_unknown_times_are_marked_never_drawn() -> None:
    """An ``"unknown"`` ledger row has no times: a mark names it; no bar is made up for it."""
    checkpoint = _checkpoint(
        [["fetch", None, 1, "failed", T, T + 100], ["fetch", None, 3, "ok", T + 4000, T + 4200]],
        outputs={"fetch": 1},
        ledger=[
            ["fetch", None, 2, "unknown", None, 0, 0, 0],
            ["fetch", None, 2, "unknown", "other-model", 0, 0, 0],  # a row per model: one attempt
        ],
    )
    row = _rows(timeline(checkpoint, now_ms=T))["fetch"]
    assert len(_bars(row)) == 2
    (mark,) = row.find("span", "tl-unknown")
    assert mark.texts() == "? 1 unknown"
    assert mark.attrs["title"] == (
        "running when a process stopped, outcome and times unknown: fetch attempt 2"
    )
    (gap,) = row.find("g", "tl-gap")
    assert "attempts in between ran when a process stopped (times unknown)" in _title(gap)


def test_a_step_with_only_unknown_attempts_has_its_mark_and_no_bar() -> None:
    checkpoint = _checkpoint(
        [["fetch", None, 1, "ok", T, T + 100]],
        outputs={"fetch": 1},
        ledger=[["parse", None, 1, "unknown", None, 0, 0, 0]],
    )
    rows = _rows(timeline(checkpoint, now_ms=T))
    assert _bars(rows["parse"]) == []
    assert rows["parse"].find("span", "tl-unknown")[0].texts() == "? 1 unknown"


def test_rows_stay_the_same_html_while_the_span_stays_within_its_nice_value() -> None:
    """A step ending later changes its own row only, until the span passes 5 s; then all move."""
    early = [["a", None, 1, "ok", T, T + 1000], ["b", None, 1, "ok", T + 1000, T + 3100]]
    first = _rows(timeline(_checkpoint(early, outputs={"a": 1, "b": 2}), now_ms=T + 3100))
    later = [*early, ["c", None, 1, "ok", T + 3100, T + 4900]]
    outputs = {"a": 1, "b": 2, "c": 3}
    grown = _rows(timeline(_checkpoint(later, outputs=outputs), now_ms=T + 4900))
    assert _html(grown["a"]) == _html(first["a"])
    assert _html(grown["b"]) == _html(first["b"])
    beyond = [*early, ["c", None, 1, "ok", T + 3100, T + 5200]]
    moved = _rows(timeline(_checkpoint(beyond, outputs=outputs), now_ms=T + 5200))
    assert _html(moved["a"]) != _html(first["a"])
    (bar,) = _bars(moved["a"])
    assert bar.attrs["width"] == str(1000 * WIDTH // 10_000)


def test_a_live_run_redraws_nothing_while_now_stays_within_the_nice_span() -> None:
    checkpoint = _checkpoint([["a", None, 1, "ok", T, T + 1000]], outputs={"a": 1})
    assert timeline(checkpoint, now_ms=T + 2100, live=True) == timeline(
        checkpoint, now_ms=T + 4999, live=True
    )
    assert timeline(checkpoint, now_ms=T + 2100, live=True) != timeline(
        checkpoint, now_ms=T + 5001, live=True
    )


def _info(names: list[str]) -> dict[str, Any]:
    return {name: {"version": None, "depends_on": []} for name in names}


def _html(element: _Element) -> str:
    """An element written back (enough to compare two rows)."""
    if element.tag == "#text":
        return element.text
    attrs = "".join(f' {name}="{value}"' for name, value in sorted(element.attrs.items()))
    inner = "".join(_html(child) for child in element.children)
    return f"<{element.tag}{attrs}>{inner}</{element.tag}>"


def test_a_maps_items_fold_into_one_row_with_the_first_items_listed() -> None:
    """250 items: one row saying so, its bars merged; the retried items listed first."""
    attempts: list[list[Any]] = [["items", None, 1, "ok", T, T + 10]]
    for number in range(250):
        start = T + 10 + number * 20
        if number in {7, 130}:
            attempts.append(["double", str(number), 1, "failed", start, start + 5])
            attempts.append(["double", str(number), 2, "ok", start + 3000, start + 3010])
        else:
            attempts.append(["double", str(number), 1, "ok", start, start + 20])
    checkpoint = _checkpoint(attempts, outputs={"items": list(range(250)), "double": [0] * 250})
    rows = _rows(timeline(checkpoint, now_ms=T))
    double = rows["double"]
    assert list(rows) == ["items", "double"]
    (summary,) = double.find("summary")
    assert summary.find("span", "tl-note")[0].texts() == "250 items"
    merged = _bars(double, folded=True)
    assert len(merged) < 10
    ok = [bar for bar in merged if "tl-ok" in bar.attrs["class"]]
    counted = [re.search(r"· ([\d,]+) attempts? ok", _title(bar)) for bar in ok]
    assert sum(int(found[1]) for found in counted if found is not None) == 250
    assert [bar.attrs["class"] for bar in merged].count("tl-bar tl-failed") == 2
    sub = double.find("div", "tl-subline")
    assert len(sub) == SHOWN_SUBROWS
    assert [line.find("span", "tl-name")[0].texts() for line in sub[:3]] == [
        "item 7",
        "item 130",
        "item 0",
    ]
    assert len(sub[0].find("rect", "tl-bar")) == 2
    assert "retry backoff" in _title(sub[0].find("g", "tl-gap")[0])
    assert double.find("p", "tl-more")[0].texts() == "and 150 more not listed"


def test_a_sub_workflows_steps_fold_into_its_row() -> None:
    """``research/search`` and ``research/summarize`` are the row ``research``, two steps."""
    checkpoint = _checkpoint(
        [
            ["plan", None, 1, "ok", T, T + 100],
            ["research/search", None, 1, "timeout", T + 100, T + 600],
            ["research/search", None, 2, "ok", T + 900, T + 1200],
            ["research/summarize", None, 1, "ok", T + 1200, T + 1900],
        ],
        outputs={"plan": 1, "research": 2},
    )
    rows = _rows(timeline(checkpoint, now_ms=T))
    assert list(rows) == ["plan", "research"]
    research = rows["research"]
    assert research.find("summary")[0].find("span", "tl-note")[0].texts() == "2 steps"
    names = [
        line.find("span", "tl-name")[0].texts() for line in research.find("div", "tl-subline")
    ]
    assert names == ["search", "summarize"]
    first = research.find("div", "tl-subline")[0].find("rect", "tl-bar")[0]
    assert _title(first).startswith("research/search · attempt 1 · timed out · ")


def test_questions_and_timers_are_drawn_as_waits_with_their_reason() -> None:
    checkpoint = _checkpoint(
        [["draft", None, 1, "ok", T, T + 1000]],
        outputs={"draft": 1},
        pending={
            "approve": {
                "question": "ok?",
                "asked_at": "2026-11-30T00:53:21+00:00",
                "expires_at": None,
            }
        },
        waits={
            "pause": {"since": "2026-11-30T00:53:21+00:00", "due": "2026-11-30T00:53:23+00:00"}
        },
    )
    rows = _rows(timeline(checkpoint, now_ms=T + 4000))
    (question,) = rows["approve"].find("rect", "tl-wait")
    assert question.attrs["class"] == "tl-wait tl-question"
    assert (question.attrs["x"], question.attrs["width"]) == (
        str(1000 * WIDTH // 5000),
        str(3000 * WIDTH // 5000),
    )
    assert _title(question) == "approve: waiting for an answer since 2026-11-30 00:53:21.000 UTC"
    (timer,) = rows["pause"].find("rect", "tl-wait")
    assert timer.attrs["class"] == "tl-wait tl-timer"
    assert timer.attrs["width"] == str(2000 * WIDTH // 5000)
    assert _title(timer) == (
        "pause: timer, waiting since 2026-11-30 00:53:21.000 UTC, due 2026-11-30 00:53:23.000 UTC"
    )


def test_hostile_step_names_are_escaped_everywhere() -> None:
    checkpoint = _checkpoint(
        [[HOSTILE, None, 1, "failed", T, T + 100], [HOSTILE, None, 2, "ok", T + 2000, T + 2100]],
        outputs={HOSTILE: 1},
    )
    markup = timeline(checkpoint, now_ms=T)
    assert "<img" not in markup
    assert "&lt;img src=x onerror=alert(&#x27;step&#x27;)&gt;&quot;&amp;" in markup
    row = _rows(markup)[HOSTILE]  # the data-part attribute reads back as the name itself
    assert row.find("span", "tl-name")[0].attrs["title"] == HOSTILE
    assert _title(_bars(row)[0]).startswith(f"{HOSTILE} · attempt 1")


def test_a_checkpoint_without_attempt_times_says_so() -> None:
    checkpoint = _checkpoint([], outputs={"fetch": 1})
    markup = timeline(checkpoint, now_ms=T)
    assert "No attempt has times recorded yet" in markup
    assert "data-part" not in markup


def test_step_times_sum_items_and_sub_workflow_steps_into_their_step() -> None:
    checkpoint = _checkpoint(
        [
            ["m", "a", 1, "failed", T, T + 10],
            ["m", "a", 2, "ok", T + 50, T + 60],
            ["m", "b", 1, "ok", T + 5, T + 70],
            ["sub/x", None, 3, "ok", T + 100, T + 200],
        ],
        outputs={"m": [1, 2], "sub": 3},
    )
    times = step_times(checkpoint, {"m", "sub"})
    assert (times["m"].started, times["m"].ended, times["m"].duration) == (T, T + 70, 70)
    assert (times["m"].attempts, list(times["m"].items)) == (2, ["a", "b"])
    assert times["m"].outcomes == {"failed": 1, "ok": 2}
    assert (times["sub"].attempts, times["sub"].duration) == (0, 100)  # its steps' attempts


def _page(
    tmp_path: Path,
    checkpoint: WorkflowCheckpoint,
    tracker: Tracker | None = None,
    workflow: Workflow | None = None,
) -> str:
    """The steps table and timeline of run ``r``'s page, served from a JSON file."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(checkpoint.to_dict()), encoding="utf-8")
    app = App(Source(parse_location(str(path)), workflow), None, None, tracker or Tracker())
    return app.run_page("r", None).main


def _cell(main: str, step: str, column: int) -> str:
    (row,) = [
        element
        for element in _Tree(main).root.find("tr", "step-row")
        if element.attrs["data-step"] == step
    ]
    return row.find("td")[column].texts()


ATTEMPTS_COLUMN = 3
DURATION_COLUMN = 4


def test_the_steps_table_shows_durations_and_attempts_from_the_checkpoint(tmp_path: Path) -> None:
    checkpoint = _checkpoint(
        [
            ["fetch", None, 1, "failed", T, T + 400],
            ["fetch", None, 2, "ok", T + 2400, T + 12_400],
            ["double", "0", 1, "ok", T + 12_400, T + 12_500],
            ["double", "1", 1, "ok", T + 12_450, T + 197_400],
            ["quick", None, 1, "ok", T + 1, T + 851],
        ],
        outputs={"fetch": 1, "double": [1, 2], "quick": 3, "old": 4},
        step_info={
            "double": {"version": None, "depends_on": ["fetch"], "kind": "map"},
            **_info(["fetch", "quick", "old"]),
        },
    )
    main = _page(tmp_path, checkpoint)
    assert _cell(main, "fetch", DURATION_COLUMN) == "12.4 s"
    assert _cell(main, "fetch", ATTEMPTS_COLUMN) == "2"  # no ledger row: from its times
    assert _cell(main, "double", DURATION_COLUMN) == "3 min 05 s"
    assert _cell(main, "quick", DURATION_COLUMN) == "850 ms"
    assert _cell(main, "old", DURATION_COLUMN) == "-"  # no times: nothing made up
    assert _cell(main, "old", ATTEMPTS_COLUMN) == "-"
    assert "known for the runs this server resumed" not in main
    assert "Durations and attempts come from when each attempt ran" in main
    assert 'data-part="timeline:double"' in main


def test_a_step_running_shows_its_time_so_far_only_when_the_server_saw_it_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = _checkpoint(
        [["fetch", None, 1, "ok", T, T + 100]], outputs={"fetch": 1}, step_info=_info(["fetch"])
    )
    tracker = Tracker()
    seen = tracker.listener("r", "r")
    monkeypatch.setattr(_clock, "wall", lambda: (T + 1000) / 1000)
    seen(events.StepStarted("r", "slow", 1))
    seen(events.StepRetried("r", "slow", 1, ValueError("x"), 0.5))
    seen(events.StepStarted("r", "slow", 2))  # a retry: still from the first start
    monkeypatch.setattr(_clock, "wall", lambda: (T + 13_400) / 1000)
    workflow = Workflow([Step("fetch", lambda ctx: 1), Step("slow", lambda ctx: 2)])
    main = _page(tmp_path, checkpoint, tracker, workflow)
    assert _cell(main, "slow", DURATION_COLUMN) == "12.4 s so far"
    assert _cell(main, "slow", ATTEMPTS_COLUMN) == "2"
    assert _cell(_page(tmp_path, checkpoint, None, workflow), "slow", DURATION_COLUMN) == "-"
    seen(events.StepFinished("r", "slow", 2.5, TokenUsage()))  # ended, not yet checkpointed
    main = _page(tmp_path, checkpoint, tracker, workflow)
    assert _cell(main, "slow", DURATION_COLUMN) == "2.5 s"


def test_a_map_running_elsewhere_shows_no_duration_though_its_items_have_times() -> None:
    """Its items that ended have times, but how long the map has run is not known here."""
    checkpoint = _checkpoint(
        [["double", "0", 1, "ok", T, T + 100]],
        outputs={},
        step_info={},
    )
    checkpoint = WorkflowCheckpoint.from_dict(
        {**checkpoint.to_dict(), "items": {"double": {"outputs": {"0": 0}, "cost": USAGE}}}
    )
    steps = step_views(checkpoint, None, {}, {}, run_running=True)
    assert [(step.name, step.status) for step in steps] == [("double", "running")]
    page = RunPage(
        "r",
        None,
        checkpoint,
        "running",
        "process 1 on host 'elsewhere'",
        steps,
        RunEvents(),
        {},
        "token",
        "executionkit run ...",
        times=step_times(checkpoint, {"double"}),
        now_ms=T + 5000,
    )
    main = run_main(page)
    assert _cell(main, "double", DURATION_COLUMN) == "-"
    assert _cell(main, "double", ATTEMPTS_COLUMN) == "1"
    assert "running" in _rows(main)["double"].find("span", "tl-note")[0].texts()
