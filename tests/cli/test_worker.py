"""``executionkit worker`` in this process: what it picks up, what it leaves alone, and why.

Each test drives `Worker.step` (one look at the location) and `Worker.settle` (the
runs it started have ended) under a clock the test sets, so a one-hour timer or a
deadline is passed by moving the clock, and "within one poll" means: the very next
look after the due time starts the run.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint
from executionkit._cli._location import parse_location
from executionkit._cli._run_options import RunFlags
from executionkit._cli._worker import Worker
from executionkit._define import _questions as questions
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


class Clock:
    """The library's clock, set by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = START
        monkeypatch.setattr(questions, "utc_now", lambda: self.now)

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


class Calls:
    """Which step of which run ran, and how often."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str]] = Counter()

    def step(self, name: str, value: Any = None) -> Any:
        def run(ctx: Any) -> Any:
            self.seen[ctx.get("who", "?"), name] += 1
            return value if value is not None else f"{name} for {ctx.get('who', '?')}"

        return run


def reminder(calls: Calls) -> Workflow:
    """Ask, wait an hour, then remind; with a deadline that has a default."""
    return Workflow(
        [
            Step("invite", calls.step("invite")),
            Step.ask("approve", lambda ctx: f"invite {ctx['who']}?", depends_on=("invite",)),
            Step.wait("pause", seconds=3600, depends_on=("approve",)),
            Step.ask(
                "extra",
                lambda ctx: "anything else?",
                depends_on=("pause",),
                expires_after=600,
                default="nothing",
            ),
            Step("remind", calls.step("remind"), depends_on=("extra",)),
        ],
        inputs=("who",),
    )


def worker(location: str, workflow: Workflow, **options: Any) -> Worker:
    logged: list[str] = []
    made = Worker(parse_location(location), workflow, log=logged.append, **options)
    made.logged = logged  # type: ignore[attr-defined]
    return made


async def look(made: Worker) -> list[str]:
    """One look at the location, and the runs it started carried as far as they go."""
    started = await made.step()
    await made.settle()
    return started


async def test_a_submitted_run_goes_through_answer_timer_and_deadline(
    tmp_path: Path, clock: Clock
) -> None:
    calls = Calls()
    flow = reminder(calls)
    store = SQLiteStore(tmp_path / "runs.db")
    run_id = flow.submit(store, {"who": "ada"}, run_id="r1", metadata={"team": "a"})
    made = worker(f"sqlite:///{tmp_path}/runs.db", flow)
    try:
        assert await look(made) == ["r1"]
        first = store.load("r1")
        assert first is not None
        assert dict(first.pending) == {"approve": first.pending["approve"]}
        assert dict(first.metadata) == {"team": "a"}
        assert await look(made) == []  # nothing answered: nothing to do

        store.inbox.save_answer(run_id, "approve", value=True)
        assert await look(made) == ["r1"]
        waiting = store.load("r1")
        assert waiting is not None
        assert waiting.outputs["approve"] is True
        assert store.inbox.answers("r1") == {}  # used, then forgotten
        assert waiting.waits["pause"]["due"] == (START + timedelta(hours=1)).isoformat()

        clock.advance(minutes=59, seconds=59)
        assert await look(made) == []  # the timer is not due
        clock.advance(seconds=1)
        assert await look(made) == ["r1"]  # due: the very next look resumes it
        asked = store.load("r1")
        assert asked is not None
        assert list(asked.pending) == ["extra"]

        clock.advance(seconds=600)
        assert await look(made) == []  # at the deadline: not passed yet (as a run decides)
        clock.advance(seconds=1)
        assert await look(made) == ["r1"]  # the deadline passed: the default answers
        final = store.load("r1")
        assert final is not None
        assert final.outputs["extra"] == "nothing"
        assert final.outputs["remind"] == "remind for ada"
        assert await look(made) == []  # finished: never looked at again
    finally:
        await made.stop()
    assert calls.seen == Counter({("ada", "invite"): 1, ("ada", "remind"): 1})
    assert any("finished" in line for line in made.logged)  # type: ignore[attr-defined]


async def test_a_run_whose_owner_died_is_resumed_and_a_claimed_one_is_not(
    tmp_path: Path, clock: Clock
) -> None:
    calls = Calls()
    flow = Workflow(
        [
            Step("a", calls.step("a")),
            Step("b", calls.step("b"), depends_on=("a",)),
        ]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    saved: list[WorkflowCheckpoint] = []
    await flow.run(checkpoint_fn=saved.append, run_id="crashed")
    store(saved[0])  # what a process killed after its first checkpoint left behind
    made = worker(f"sqlite:///{tmp_path}/runs.db", flow)
    try:
        with store.claim("crashed"):  # a live owner: the worker keeps off
            assert await look(made) == []
        assert await look(made) == ["crashed"]
    finally:
        await made.stop()
    final = store.load("crashed")
    assert final is not None
    assert set(final.outputs) == {"a", "b"}
    assert calls.seen == Counter({("?", "a"): 1, ("?", "b"): 2})  # b: once here, once before


async def test_runs_it_cannot_resume_are_left_alone_with_the_reason(
    tmp_path: Path, clock: Clock
) -> None:
    calls = Calls()
    flow = reminder(calls)
    store = SQLiteStore(tmp_path / "runs.db")
    # Started by hand with inputs, which were not stored: the worker cannot resume it.
    await flow.run({"who": "bob"}, checkpoint_fn=store, run_id="by-hand")
    store.inbox.save_answer("by-hand", "approve", value=True)
    made = worker(f"sqlite:///{tmp_path}/runs.db", flow)
    try:
        assert await look(made) == []
        reason = store.inbox.left_alone()["by-hand"]
        assert "needs the inputs 'who'" in reason
        assert "executionkit submit" in reason
        assert await look(made) == []  # tried once by this worker: left alone
        assert store.inbox.answers("by-hand") == {"approve": True}  # nothing lost
    finally:
        await made.stop()
    assert calls.seen == Counter({("bob", "invite"): 1})


async def test_an_answer_its_check_refuses_is_forgotten_and_a_new_one_takes_the_run_back(
    tmp_path: Path, clock: Clock
) -> None:
    def strict(answer: object) -> object:
        if answer not in {"yes", "no"}:
            msg = f"say yes or no, not {answer!r}"
            raise ValueError(msg)
        return answer

    flow = Workflow([Step.ask("approve", lambda ctx: "ok?", check=strict)])
    store = SQLiteStore(tmp_path / "runs.db")
    flow.submit(store, run_id="r")
    made = worker(f"sqlite:///{tmp_path}/runs.db", flow)
    try:
        assert await look(made) == ["r"]
        store.inbox.save_answer("r", "approve", "maybe")
        assert await look(made) == ["r"]
        assert "say yes or no, not 'maybe'" in store.inbox.left_alone()["r"]
        assert store.inbox.answers("r") == {}
        still = store.load("r")
        assert still is not None
        assert list(still.pending) == ["approve"]
        assert await look(made) == []
        store.inbox.save_answer("r", "approve", "yes")  # takes the run back
        assert store.inbox.left_alone() == {}
        assert await look(made) == ["r"]
    finally:
        await made.stop()
    final = store.load("r")
    assert final is not None
    assert final.outputs["approve"] == "yes"


async def test_runs_of_another_workflow_are_not_touched(tmp_path: Path, clock: Clock) -> None:
    calls = Calls()
    ours = Workflow([Step("ours", calls.step("ours"))])
    theirs = Workflow([Step("theirs", calls.step("theirs")), Step.ask("q", lambda ctx: "?")])
    store = SQLiteStore(tmp_path / "runs.db")
    theirs.submit(store, run_id="their-submitted")
    await theirs.run(checkpoint_fn=store, run_id="their-started")
    ours.submit(store, run_id="our-submitted")
    made = worker(f"sqlite:///{tmp_path}/runs.db", ours)
    try:
        assert await look(made) == ["our-submitted"]
        assert await look(made) == []
    finally:
        await made.stop()
    assert store.inbox.left_alone() == {}
    assert store.load("their-submitted") is None
    assert calls.seen == Counter({("?", "ours"): 1, ("?", "theirs"): 1})


@pytest.mark.parametrize("policy", ["keep", "rerun", "refuse"])
async def test_the_worker_applies_its_code_change_policy(
    tmp_path: Path, clock: Clock, policy: str
) -> None:
    calls = Calls()
    before = Workflow(
        [Step("draft", lambda ctx: "draft one"), Step.ask("approve", lambda ctx: "ok?")]
    )
    after = Workflow(
        [Step("draft", lambda ctx: "draft two"), Step.ask("approve", lambda ctx: "ok?")]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    await before.run(checkpoint_fn=store, run_id="r")
    store.inbox.save_answer("r", "approve", value=True)
    made = worker(f"sqlite:///{tmp_path}/runs.db", after, on_code_change=policy)
    try:
        await look(made)
    finally:
        await made.stop()
    final = store.load("r")
    assert final is not None
    if policy == "refuse":
        assert "draft" in store.inbox.left_alone()["r"]
        assert final.outputs["draft"] == "draft one"
        assert "approve" not in final.outputs
    else:
        assert final.outputs["draft"] == ("draft two" if policy == "rerun" else "draft one")
        assert final.outputs["approve"] is True
    assert not calls.seen


@pytest.mark.parametrize("kind", ["json", "jsonl"])
async def test_a_worker_on_a_file_watches_its_one_run(
    tmp_path: Path, clock: Clock, kind: str
) -> None:
    calls = Calls()
    flow = reminder(calls)
    path = tmp_path / f"run.{kind}"
    store = JsonFileStore(path) if kind == "json" else JsonLinesStore(path)
    flow.submit(store, {"who": "cy"}, run_id="file-run")
    made = worker(str(path), flow)
    try:
        assert await look(made) == ["file-run"]
        store.inbox.save_answer("file-run", "approve", value=True)
        assert await look(made) == ["file-run"]
        clock.advance(hours=1)
        assert await look(made) == ["file-run"]  # the timer is due
        clock.advance(minutes=10, seconds=1)
        assert await look(made) == ["file-run"]  # the deadline passed
    finally:
        await made.stop()
    final = store.load()
    assert final is not None
    assert final.outputs["remind"] == "remind for cy"


async def test_stopping_the_worker_stops_its_runs_with_what_completed_saved(
    tmp_path: Path, clock: Clock
) -> None:
    started = asyncio.Event()

    async def slow(ctx: Any) -> str:
        started.set()
        await asyncio.Event().wait()  # until cancelled
        return "never"

    flow = Workflow([Step("quick", lambda ctx: "done"), Step("slow", slow, depends_on=("quick",))])
    store = SQLiteStore(tmp_path / "runs.db")
    flow.submit(store, run_id="r")
    made = worker(f"sqlite:///{tmp_path}/runs.db", flow)
    assert await made.step() == ["r"]
    await started.wait()
    await made.stop()
    saved = store.load("r")
    assert saved is not None
    assert dict(saved.outputs) == {"quick": "done"}
    assert store.owner("r") is None  # the claim was given up


async def test_postgres_worker_takes_submitted_runs(pg_uri: str, clock: Clock) -> None:
    calls = Calls()
    flow = Workflow([Step("a", calls.step("a"))], inputs=("who",))
    store = PostgresStore(pg_uri)
    for who in ("x", "y", "z"):
        flow.submit(store, {"who": who}, run_id=f"pg-{who}")
    made = worker(pg_uri, flow)
    try:
        assert sorted(await look(made)) == ["pg-x", "pg-y", "pg-z"]
        assert await look(made) == []
    finally:
        await made.stop()
    assert calls.seen == Counter({("x", "a"): 1, ("y", "a"): 1, ("z", "a"): 1})
    loaded = store.load("pg-y")
    assert loaded is not None
    assert loaded.outputs["a"] == "a for y"
    store.close()


async def test_a_question_and_a_timer_inside_a_sub_workflow_are_carried_on(
    tmp_path: Path, clock: Clock
) -> None:
    calls = Calls()
    review = Workflow(
        [
            Step.ask("approve", lambda ctx: "ok?"),
            Step.wait("settle", seconds=7200, depends_on=("approve",)),
            Step("note", calls.step("note"), depends_on=("settle",)),
        ]
    )
    flow = Workflow(
        [Step("review", review), Step("after", calls.step("after"), depends_on=("review",))]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    flow.submit(store, run_id="nested")
    made = worker(f"sqlite:///{tmp_path}/runs.db", flow)
    try:
        assert await look(made) == ["nested"]
        store.inbox.save_answer("nested", "review/approve", "yes")
        assert await look(made) == ["nested"]
        waiting = store.load("nested")
        assert waiting is not None
        assert "after" not in waiting.outputs
        clock.advance(hours=2)
        assert await look(made) == ["nested"]
    finally:
        await made.stop()
    final = store.load("nested")
    assert final is not None
    assert final.outputs["after"] == "after for ?"
    assert calls.seen == Counter({("?", "note"): 1, ("?", "after"): 1})


async def test_a_run_over_its_budget_is_left_alone_not_retried(
    tmp_path: Path, clock: Clock
) -> None:
    from executionkit import PatternResult, TokenUsage  # noqa: PLC0415

    calls = Calls()

    def costly(ctx: Any) -> PatternResult[str]:
        calls.seen["?", "costly"] += 1
        return PatternResult("spent", cost=TokenUsage(900, 100, 1))

    flow = Workflow(
        [Step("costly", costly), Step("next", calls.step("next"), depends_on=("costly",))]
    )
    store = SQLiteStore(tmp_path / "runs.db")
    flow.submit(store, run_id="spender")
    made = worker(
        f"sqlite:///{tmp_path}/runs.db",
        flow,
        flags=RunFlags(options={"budget": TokenUsage(500, 0, 0)}),
    )
    try:
        assert await look(made) == ["spender"]
        assert "budget" in store.inbox.left_alone()["spender"]
        assert await look(made) == []
    finally:
        await made.stop()
    assert calls.seen == Counter({("?", "costly"): 1})
    saved = store.load("spender")
    assert saved is not None
    assert saved.outputs["costly"] == "spent"  # what it paid for is kept


async def test_serve_carries_runs_until_cancelled(tmp_path: Path, clock: Clock) -> None:
    done: dict[str, asyncio.Event] = {"x": asyncio.Event(), "y": asyncio.Event()}

    async def finish(ctx: Any) -> str:  # on the loop: the test's events are the loop's
        done[ctx["who"]].set()
        return f"done {ctx['who']}"

    flow = Workflow([Step("finish", finish)], inputs=("who",))
    store = SQLiteStore(tmp_path / "runs.db")
    for who in done:
        flow.submit(store, {"who": who}, run_id=who)
    made = worker(f"sqlite:///{tmp_path}/runs.db", flow, poll=0.05)
    serving = asyncio.create_task(made.serve())
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in done.values())), 30)
    await asyncio.wait_for(made.settle(), 30)
    serving.cancel()
    ended = await asyncio.wait_for(asyncio.gather(serving, return_exceptions=True), 30)
    assert isinstance(ended[0], asyncio.CancelledError)
    for who in done:
        saved = store.load(who)
        assert saved is not None
        assert saved.outputs["finish"] == f"done {who}"


def test_the_command_refuses_bad_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from executionkit._cli import main  # noqa: PLC0415

    base = ["worker", f"sqlite:///{tmp_path}/runs.db", "--workflow", "nowhere:flow"]
    assert main([*base, "--concurrency", "0"]) == 2
    assert "--concurrency must be 1 or more, got 0" in capsys.readouterr().err
    assert main([*base, "--poll", "0"]) == 2
    assert "--poll must be a number of seconds above 0" in capsys.readouterr().err


async def test_a_stop_that_comes_as_a_run_ends_is_not_lost(tmp_path: Path, clock: Clock) -> None:
    """Found by a hung CI run: `asyncio.wait_for` of Python 3.11 swallowed the cancellation."""
    made = worker(f"sqlite:///{tmp_path}/runs.db", Workflow([Step("a", lambda ctx: 1)]))
    try:
        made._wake = asyncio.Event()
        napping = asyncio.create_task(made._nap())
        await asyncio.sleep(0)  # one pass of the loop: the nap waits
        made._wake.set()  # a run ended...
        napping.cancel()  # ...as the worker is told to stop
        with pytest.raises(asyncio.CancelledError):
            await napping
    finally:
        await made.stop()


async def test_the_store_is_closed_only_once_a_cancelled_look_is_done(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found with the above: closing the store under a look's thread crashed the process."""
    made = worker(f"sqlite:///{tmp_path}/runs.db", Workflow([Step("a", lambda ctx: 1)]))
    entered, release = threading.Event(), threading.Event()
    look = made._look

    def slow(free: int) -> list[Any]:
        entered.set()
        release.wait(30)
        return look(free)

    monkeypatch.setattr(made, "_look", slow)
    stepping = asyncio.create_task(made.step())
    assert await asyncio.to_thread(entered.wait, 30)
    stepping.cancel()
    stopping = asyncio.create_task(made.stop())
    done, _ = await asyncio.wait({stopping}, timeout=0.2)
    assert not done  # the look holds the store: stop waits for it
    release.set()
    await asyncio.wait_for(stopping, 30)
    with pytest.raises(asyncio.CancelledError):
        await stepping
