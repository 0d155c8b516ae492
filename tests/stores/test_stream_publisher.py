"""`StreamBuffer` and `StreamPublisher`: streamed text kept in a store, a write per interval.

The buffer is driven with explicit times (no clock, no thread): which text is
written when, a retry's fresh text, entries deleted as attempts end, sub-workflow
steps by path. The publisher is driven by real runs writing to a store that
records each write, with an interval long enough that only the writes due at once
(the first piece, a run's end) can happen: counts, never timings.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow, current_step
from executionkit.events import (
    Event,
    ItemFailed,
    ItemFinished,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuspended,
    StepFailed,
    StepFinished,
    StepRetried,
    StepStreamed,
)
from executionkit.stores import JsonFileStore, RunInbox, SQLiteStore, StreamPublisher
from executionkit.stores._inbox import STREAM_KEPT
from executionkit.stores._streams import StreamBuffer, StreamWrite

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from executionkit.stores._inbox import StreamKey

NO_COST: Any = None  # the fields the buffer never reads


def started(run_id: str, parent: tuple[str, str, str | None] | None = None) -> RunStarted:
    return RunStarted(run_id, 1, (), resumed=False, parent=parent)


def piece(run_id: str, step: str, attempt: int, text: str, item: str | None = None) -> Event:
    return StepStreamed(run_id, step, attempt, text, item)


def retried(run_id: str, step: str, attempt: int, item: str | None = None) -> Event:
    return StepRetried(run_id, step, attempt, ValueError("boom"), 0.0, item)


def finished(run_id: str) -> Event:
    return RunFinished(run_id, 1.0, NO_COST, 1)


def buffer_with(*events: Event, every: float = 0.1) -> StreamBuffer:
    buffer = StreamBuffer(every)
    for event in events:
        buffer.note(event)
    return buffer


def texts_of(writes: list[StreamWrite]) -> dict[str, dict[StreamKey, tuple[int, str]]]:
    return {write.run_id: write.texts for write in writes}


# --- the buffer: when a write is due --------------------------------------------------------


@pytest.mark.parametrize(
    ("pieces_at", "expected_writes"),
    [
        # A hundred pieces a second for a second: the first at once, then one per 100 ms
        # (ten within the second), and the last ones once the interval is over.
        ([index / 100 for index in range(100)], 11),
        # Pieces further apart than the interval: each is written as it comes.
        ([0.0, 0.25, 0.5, 0.75], 4),
        # A burst: written once at its start, once with the rest.
        ([0.0, 0.001, 0.002, 0.003], 2),
    ],
)
def test_writes_are_at_most_one_per_interval(pieces_at: list[float], expected_writes: int) -> None:
    """However fast pieces come, a write is taken at most every ``every`` seconds."""
    buffer = buffer_with(started("r"))
    writes: list[float] = []
    for index, at in enumerate(pieces_at):
        buffer.note(piece("r", "talk", 1, f"<{index}>"))
        if buffer.due(at) == 0.0:
            buffer.take(at)
            writes.append(at)
    later = pieces_at[-1] + 1.0
    if buffer.due(later) == 0.0:
        buffer.take(later)
        writes.append(later)
    assert buffer.due(later + 1.0) is None
    assert len(writes) == expected_writes
    assert all(later - earlier >= 0.1 - 1e-9 for earlier, later in itertools.pairwise(writes))


def test_due_says_how_long_until_the_next_write() -> None:
    """Nothing waiting: None; a piece after a write: the rest of the interval."""
    buffer = buffer_with(started("r"))
    assert buffer.due(5.0) is None
    buffer.note(piece("r", "talk", 1, "a"))
    assert buffer.due(5.0) == 0.0
    buffer.take(5.0)
    assert buffer.due(5.04) is None
    buffer.note(piece("r", "talk", 1, "b"))
    assert buffer.due(5.04) == pytest.approx(0.06)
    assert buffer.due(5.2) == 0.0


def test_a_write_holds_the_whole_text_so_far() -> None:
    """Each write replaces the entry with every piece of the attempt so far, joined."""
    buffer = buffer_with(started("r"), piece("r", "talk", 1, "The "))
    assert texts_of(buffer.take(0.0)) == {"r": {("talk", None): (1, "The ")}}
    buffer.note(piece("r", "talk", 1, "cat "))
    buffer.note(piece("r", "talk", 1, "sat."))
    assert texts_of(buffer.take(1.0)) == {"r": {("talk", None): (1, "The cat sat.")}}


def test_only_the_latest_characters_are_kept() -> None:
    """A long text keeps its latest 65,536 characters, however it was pieced."""
    buffer = buffer_with(started("r"))
    for index in range(300):
        buffer.note(piece("r", "talk", 1, f"{index:04d}" * 256))  # 1,024 characters each
    (write,) = buffer.take(0.0)
    attempt, text = write.texts["talk", None]
    assert attempt == 1
    assert len(text) == STREAM_KEPT
    assert text.endswith("0299" * 256)


def test_the_first_write_of_a_run_replaces_what_the_store_held() -> None:
    """What an earlier process left is deleted by a run's first write, not by later ones."""
    buffer = buffer_with(started("r"), piece("r", "talk", 1, "a"))
    (first,) = buffer.take(0.0)
    buffer.note(piece("r", "talk", 1, "b"))
    (second,) = buffer.take(1.0)
    assert (first.replace_all, second.replace_all) == (True, False)


# --- the buffer: attempts and endings -------------------------------------------------------


def test_a_retry_starts_a_fresh_text() -> None:
    """A higher attempt's pieces never continue the failed attempt's text."""
    buffer = buffer_with(
        started("r"),
        piece("r", "talk", 1, "first try"),
        piece("r", "talk", 2, "second"),
        piece("r", "talk", 2, " try"),
    )
    assert texts_of(buffer.take(0.0)) == {"r": {("talk", None): (2, "second try")}}


def test_a_late_piece_of_an_ended_attempt_is_ignored() -> None:
    """A thread left running by a timed-out attempt streams on: its pieces are not kept."""
    buffer = buffer_with(started("r"), piece("r", "talk", 1, "a"))
    buffer.take(0.0)
    buffer.note(retried("r", "talk", 1))
    buffer.note(piece("r", "talk", 1, "late"))
    (write,) = buffer.take(1.0)
    assert write.texts == {}
    assert write.ended == (("talk", None),)
    buffer.note(piece("r", "talk", 2, "b"))
    buffer.note(piece("r", "talk", 1, "later"))
    assert texts_of(buffer.take(2.0)) == {"r": {("talk", None): (2, "b")}}


@pytest.mark.parametrize(
    "ending",
    [
        retried("r", "talk", 1),
        StepFinished("r", "talk", 1.0, NO_COST),
        StepFailed("r", "talk", 1.0, ValueError("boom")),
    ],
    ids=["StepRetried", "StepFinished", "StepFailed"],
)
def test_an_attempt_that_ended_has_its_entry_deleted(ending: Event) -> None:
    """The next write deletes the entry of a step whose attempt ended."""
    buffer = buffer_with(started("r"), piece("r", "talk", 1, "a"), piece("r", "other", 1, "b"))
    buffer.take(0.0)
    buffer.note(ending)
    (write,) = buffer.take(1.0)
    assert (write.texts, write.ended, write.replace_all) == ({}, (("talk", None),), False)


@pytest.mark.parametrize(
    "ending",
    [
        ItemFinished("r", "drafts", "k1", 1.0, NO_COST, 1),
        ItemFailed("r", "drafts", "k1", 1.0, ValueError("boom")),
        retried("r", "drafts", 1, item="k1"),
    ],
    ids=["ItemFinished", "ItemFailed", "StepRetried"],
)
def test_an_item_that_ended_has_its_entry_deleted_and_no_other(ending: Event) -> None:
    """Items of a map are kept apart; one item's end deletes that item's entry only."""
    buffer = buffer_with(
        started("r"),
        piece("r", "drafts", 1, "one", item="k1"),
        piece("r", "drafts", 1, "two", item="k2"),
    )
    assert texts_of(buffer.take(0.0)) == {
        "r": {("drafts", "k1"): (1, "one"), ("drafts", "k2"): (1, "two")}
    }
    buffer.note(ending)
    (write,) = buffer.take(1.0)
    assert write.ended == (("drafts", "k1"),)


def test_a_map_step_that_ended_deletes_every_item() -> None:
    """`StepFinished` of a map deletes the entries of all its items."""
    buffer = buffer_with(
        started("r"),
        piece("r", "drafts", 1, "one", item="k1"),
        piece("r", "drafts", 1, "two", item="k2"),
    )
    buffer.take(0.0)
    buffer.note(StepFinished("r", "drafts", 1.0, NO_COST))
    (write,) = buffer.take(1.0)
    assert sorted(write.ended, key=str) == [("drafts", "k1"), ("drafts", "k2")]


def test_a_text_ended_before_it_was_written_is_never_written() -> None:
    """A step that streams and ends between two writes costs no write at all."""
    buffer = buffer_with(started("r"), piece("r", "a", 1, "x"))
    buffer.take(0.0)
    buffer.note(piece("r", "b", 1, "quick"))
    buffer.note(StepFinished("r", "b", 1.0, NO_COST))
    assert buffer.due(1.0) is None


@pytest.mark.parametrize(
    "ending",
    [
        finished("r"),
        RunFailed("r", 1.0, ValueError("boom"), {}),
        RunSuspended("r", 1.0, NO_COST, ("approve",)),
    ],
    ids=["RunFinished", "RunFailed", "RunSuspended"],
)
def test_a_run_that_ended_has_every_entry_deleted_at_once(ending: Event) -> None:
    """The end of a run is due at once, deletes all its entries, then the run is forgotten."""
    buffer = buffer_with(started("r"), piece("r", "talk", 1, "a"))
    buffer.take(0.0)
    buffer.note(piece("r", "talk", 1, "b"))
    assert buffer.note(ending) is True
    assert buffer.due(0.01) == 0.0
    assert buffer.take(0.01) == [StreamWrite("r", {}, (), replace_all=True, last=True)]
    assert buffer.idle


def test_a_piece_after_its_run_ended_is_ignored_until_it_starts_again() -> None:
    """A thread a timed-out attempt left streams on after the run: nothing is kept for it."""
    buffer = buffer_with(started("r"), piece("r", "talk", 1, "a"))
    buffer.take(0.0)
    buffer.note(finished("r"))
    buffer.take(0.01)
    buffer.note(piece("r", "talk", 1, "late"))
    assert buffer.due(1.0) is None
    assert buffer.idle
    buffer.note(started("r"))  # resumed later, in this process
    buffer.note(piece("r", "talk", 1, "again"))
    assert texts_of(buffer.take(2.0)) == {"r": {("talk", None): (1, "again")}}


def test_a_piece_of_a_sub_workflow_that_ended_is_ignored() -> None:
    """A late piece of a child run is not taken for a run of its own (``p/review``)."""
    buffer = buffer_with(
        started("p"),
        started("p/review", ("p", "review", None)),
        piece("p", "talk", 1, "own"),
        finished("p/review"),
        piece("p/review", "draft", 1, "late"),
    )
    assert texts_of(buffer.take(0.0)) == {"p": {("talk", None): (1, "own")}}


def test_a_run_that_never_streamed_costs_nothing() -> None:
    """No piece, no write: its end is not one to wait for."""
    buffer = buffer_with(started("r"), StepFinished("r", "talk", 1.0, NO_COST))
    assert buffer.note(finished("r")) is False
    assert buffer.due(0.0) is None
    assert buffer.idle


def test_runs_are_kept_apart() -> None:
    """One write per run; the end of one leaves the other's text alone."""
    buffer = buffer_with(
        started("a"), started("b"), piece("a", "talk", 1, "A"), piece("b", "talk", 1, "B")
    )
    assert texts_of(buffer.take(0.0)) == {
        "a": {("talk", None): (1, "A")},
        "b": {("talk", None): (1, "B")},
    }
    buffer.note(finished("a"))
    buffer.note(piece("b", "talk", 1, "C"))
    assert texts_of(buffer.take(1.0)) == {"a": {}, "b": {("talk", None): (1, "BC")}}
    assert not buffer.idle


# --- the buffer: sub-workflows ---------------------------------------------------------------


def test_a_sub_workflow_streams_under_its_parent_run_by_path() -> None:
    """``parent/review`` streams into run ``parent``, step ``review/draft``; a map item's too."""
    buffer = buffer_with(
        started("parent"),
        started("parent/review", ("parent", "review", None)),
        started("parent/review/inner", ("parent/review", "inner", None)),
        started("parent/per%2Fdoc/k%2F1", ("parent", "per/doc", "k/1")),
        piece("parent/review", "draft", 1, "d"),
        piece("parent/review/inner", "deep", 1, "e", item="i"),
        piece("parent/per%2Fdoc/k%2F1", "say", 1, "f"),
    )
    assert texts_of(buffer.take(0.0)) == {
        "parent": {
            ("review/draft", None): (1, "d"),
            ("review/inner/deep", "i"): (1, "e"),
            ("per%2Fdoc/k%2F1/say", None): (1, "f"),
        }
    }


def test_a_sub_workflow_that_ended_deletes_its_steps_entries_only() -> None:
    """The child's end deletes what it streamed; the parent's own steps stay."""
    buffer = buffer_with(
        started("p"),
        started("p/review", ("p", "review", None)),
        piece("p", "talk", 1, "own"),
        piece("p/review", "draft", 1, "d"),
    )
    buffer.take(0.0)
    assert buffer.note(finished("p/review")) is False
    (write,) = buffer.take(1.0)
    assert write.ended == (("review/draft", None),)
    assert not write.last


def test_a_retried_sub_workflow_streams_again() -> None:
    """A sub-workflow run again (its step retried) streams anew under the same paths."""
    buffer = buffer_with(
        started("p"),
        started("p/review", ("p", "review", None)),
        piece("p/review", "draft", 1, "first"),
        StepFailed("p/review", "draft", 1.0, ValueError("boom")),
        RunFailed("p/review", 1.0, ValueError("boom"), {}),
        started("p/review", ("p", "review", None)),
        piece("p/review", "draft", 1, "again"),
    )
    assert texts_of(buffer.take(0.0)) == {"p": {("review/draft", None): (1, "again")}}


def test_a_failed_write_is_redone_whole_replacing_what_the_store_held() -> None:
    """After a failure, the run's next write holds all its texts and replaces every entry."""
    buffer = buffer_with(started("r"), piece("r", "a", 1, "x"), piece("r", "b", 1, "y"))
    buffer.take(0.0)
    buffer.note(piece("r", "a", 1, "z"))
    (failed,) = buffer.take(1.0)
    buffer.failed(failed)
    assert buffer.due(1.05) == pytest.approx(0.05)
    (again,) = buffer.take(1.1)
    assert again.replace_all
    assert again.texts == {("a", None): (1, "xz"), ("b", None): (1, "y")}


# --- the publisher: real runs, a store that records its writes -------------------------------


class Recording:
    """A store whose inbox records each write (and can be made to fail); counts its opens."""

    def __init__(self, folder: Path) -> None:
        self.store = SQLiteStore(folder / "streams.db")
        self.inbox = self.store.inbox
        self.writes: list[dict[StreamKey, tuple[int, str]]] = []
        self.threads: set[str] = set()
        self.opened = 0
        self.closed = 0
        self.fail = 0  # how many of the next writes raise
        self.every = 0.0  # the publisher's, for the steps to know what to wait for
        self.threads_seen: list[int] = []  # threads of ours a step saw before returning

    def open(self) -> Recording:
        self.opened += 1
        return self

    def close(self) -> None:
        self.closed += 1
        self.store.close()


@pytest.fixture
def recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recording:
    made = Recording(tmp_path)
    real = RunInbox.put_streams

    def put(inbox: RunInbox, run_id: str, texts: Any, **options: Any) -> None:
        made.threads.add(threading.current_thread().name)
        if made.fail:
            made.fail -= 1
            raise OSError("disk on fire")
        real(inbox, run_id, texts, **options)
        made.writes.append(inbox.streams(run_id))

    monkeypatch.setattr(RunInbox, "put_streams", put)
    return made


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "executionkit streams"]


@pytest.fixture(autouse=True)
def no_thread_left() -> Iterator[None]:
    yield
    assert our_threads() == []


def polled(check: Callable[[], object]) -> None:
    """Poll ``check`` (in a thread: a plain step's, or one of the loop's) until true, or fail."""
    waiting = threading.Event()
    for _ in range(3000):
        if check():
            return
        waiting.wait(0.01)
    pytest.fail("timed out")


def talker(recording: Recording, pieces: int, *, fail_first: bool = False) -> Workflow:
    """One step streaming ``pieces`` pieces; it ends once a write held its attempt's text.

    The whole text with ``every=0``; any of it otherwise (a later write may wait).
    """

    async def talk(_ctx: Any) -> str:
        step = current_step()
        whole = "".join(f"<{step.attempt}.{index}>" for index in range(pieces))
        for index in range(pieces):
            step.stream(f"<{step.attempt}.{index}>")
            await asyncio.sleep(0)
        key = ("talk", None)
        await asyncio.to_thread(
            polled,
            lambda: any(
                write.get(key, (0, ""))[0] == step.attempt
                and (recording.every > 0 or write[key][1] == whole)
                for write in recording.writes
            ),
        )
        recording.threads_seen.append(len(our_threads()))
        if fail_first and step.attempt == 1:
            raise ValueError("first attempt fails")
        return "done"

    return Workflow([Step("talk", talk, retries=1, retry_delay=0)])


def test_a_fast_stream_costs_one_write_per_interval(recording: Recording) -> None:
    """A hundred pieces within one interval: one write of the first text, one deletion."""
    recording.every = 3600
    publisher = StreamPublisher(recording.open, every=recording.every)
    talker(recording, 100).run_sync(run_id="r", on_event=publisher)
    assert len(recording.writes) == 2
    first, last = recording.writes
    ((attempt, text),) = first.values()
    assert attempt == 1
    assert text.startswith("<1.0>")
    assert last == {}
    assert recording.threads_seen == [1]  # the thread ran while the step streamed
    assert our_threads() == []  # and was gone when run() returned
    assert recording.threads == {"executionkit streams"}
    assert (recording.opened, recording.closed) == (1, 1)


def test_the_text_is_readable_while_the_step_runs(recording: Recording) -> None:
    """Another store object reads the running attempt's text; it is gone after the run."""
    publisher = StreamPublisher(recording.open, every=0)
    reader = SQLiteStore(recording.store.path)
    read: list[Any] = []

    async def talk(_ctx: Any) -> str:
        current_step().stream("hello ")
        current_step().stream("world")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not read and loop.time() < deadline:
            found = await asyncio.to_thread(reader.inbox.streams, "r")
            if found.get(("talk", None), (0, ""))[1] == "hello world":
                read.append(found)
            await asyncio.sleep(0.005)
        return "done"

    Workflow([Step("talk", talk)]).run_sync(run_id="r", on_event=publisher)
    assert read == [{("talk", None): (1, "hello world")}]
    assert reader.inbox.streams("r") == {}
    reader.close()


def test_a_retry_is_stored_as_a_fresh_text(recording: Recording) -> None:
    """The retry's text replaces the failed attempt's, never continues it."""
    publisher = StreamPublisher(recording.open, every=0)
    talker(recording, 3, fail_first=True).run_sync(run_id="r", on_event=publisher)
    texts = [text for write in recording.writes for text in write.values()]
    assert (1, "<1.0><1.1><1.2>") in texts
    assert (2, "<2.0><2.1><2.2>") in texts
    assert all(not (attempt == 2 and "<1." in text) for attempt, text in texts)
    assert recording.writes[-1] == {}


async def test_runs_at_once_share_one_thread_gone_with_the_last(recording: Recording) -> None:
    """Two runs streaming at once: one thread and one store; it ends with the last run."""
    publisher = StreamPublisher(recording.open, every=0)
    gate = asyncio.Event()
    threads: list[int] = []

    async def talk(_ctx: Any) -> str:
        current_step().stream("x")
        await gate.wait()
        threads.append(len(our_threads()))
        return "done"

    flow = Workflow([Step("talk", talk)])
    first = asyncio.create_task(flow.run(run_id="a", on_event=publisher))
    second = asyncio.create_task(flow.run(run_id="b", on_event=publisher))
    await asyncio.to_thread(
        polled, lambda: all(recording.inbox.streams(run) for run in ("a", "b"))
    )
    gate.set()
    await asyncio.gather(first, second)
    assert threads == [1, 1]
    assert recording.opened == 1
    assert recording.inbox.streams("a") == recording.inbox.streams("b") == {}
    assert our_threads() == []


def test_a_failing_store_is_logged_and_never_fails_the_run(
    recording: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that raises is logged once in full; the store is opened again; the run succeeds."""
    recording.fail = 2
    publisher = StreamPublisher(recording.open, every=0)
    with caplog.at_level(logging.DEBUG, logger="executionkit"):
        result = talker(recording, 3).run_sync(run_id="r", on_event=publisher)
    assert result.outputs == {"talk": "done"}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "could not keep the streamed text of run 'r'" in warnings[0].getMessage()
    assert "disk on fire" in caplog.text
    assert recording.opened >= 2  # the store was opened again after the failure
    assert recording.opened == recording.closed
    assert recording.inbox.streams("r") == {}


def test_a_store_without_an_inbox_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """``open_store`` returning something else is a logged failure naming it, not a crash."""
    publisher = StreamPublisher(lambda: "not a store", every=0)

    def talk(_ctx: Any) -> str:
        current_step().stream("x")
        polled(lambda: "has no inbox" in caplog.text)
        return "done"

    with caplog.at_level(logging.WARNING, logger="executionkit"):
        result = Workflow([Step("talk", talk)]).run_sync(run_id="r", on_event=publisher)
    assert result.outputs == {"talk": "done"}
    assert "'not a store' has no inbox (a RunInbox)" in caplog.text


def test_close_deletes_the_text_of_runs_still_going_and_stops(recording: Recording) -> None:
    """`close` from another thread: the entries go and the thread ends before it returns."""
    publisher = StreamPublisher(recording.open, every=0)
    closed: list[Any] = []

    def talk(_ctx: Any) -> str:
        current_step().stream("hello")
        polled(lambda: recording.inbox.streams("r"))
        publisher.close()
        closed.append((recording.inbox.streams("r"), list(our_threads())))
        return "done"

    Workflow([Step("talk", talk)]).run_sync(run_id="r", on_event=publisher)
    assert closed == [({}, [])]


def test_a_sub_workflow_streams_into_its_parent_run(tmp_path: Path) -> None:
    """A real sub-workflow's step is read from the parent run, by path."""
    store = JsonFileStore(tmp_path / "run.json")
    publisher = StreamPublisher(lambda: JsonFileStore(tmp_path / "run.json"), every=0)
    read: list[Any] = []

    def draft(_ctx: Any) -> str:
        current_step().stream("drafting")
        polled(lambda: store.inbox.streams("p"))
        read.append(store.inbox.streams("p"))
        return "d"

    child = Workflow([Step("draft", draft)])
    Workflow([Step("review", child)]).run_sync(run_id="p", checkpoint_fn=store, on_event=publisher)
    assert read == [{("review/draft", None): (1, "drafting")}]
    assert store.inbox.streams("p") == {}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"open_store": "runs.db"}, TypeError, "open_store must be callable, got str"),
        ({"every": "0.1"}, TypeError, "every must be a number of seconds, got str"),
        ({"every": True}, TypeError, "every must be a number of seconds, got bool"),
        ({"every": -1}, ValueError, "finite number of seconds, 0 or more, got -1"),
        ({"every": float("inf")}, ValueError, "0 or more, got inf"),
    ],
)
def test_bad_arguments_are_refused_naming_them(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """The constructor names the argument at fault and what it takes."""
    arguments: dict[str, Any] = {"open_store": lambda: None, **kwargs}
    with pytest.raises(error, match=message):
        StreamPublisher(**arguments)
