"""`Step.wait`: a durable timer whose due time is fixed when reached and kept in checkpoints.

Short waits are slept through (holding no concurrency slot); longer ones end the
run with the wait in `WorkflowResult.waits`; a resume before the time runs
nothing that depends on it, one after it runs the rest. The time never moves:
not across resumes, stores, processes or a kill -9 during the wait. The clock is
the questions' (`executionkit._define._questions.utc_now`), which tests set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import executionkit._define._questions as questions
from executionkit import (
    RunArgumentError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
)
from executionkit import events as ev
from executionkit.stores import JsonFileStore, JsonLinesStore, PostgresStore, SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


class Clock:
    """The library's clock, set by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: datetime = START) -> None:
        self.now = at
        monkeypatch.setattr(questions, "utc_now", lambda: self.now)

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def reminder(seconds: float | timedelta = 3600) -> Workflow:
    return Workflow(
        [
            Step("invite", lambda ctx: "invited"),
            Step.wait("pause", seconds=seconds, depends_on=("invite",)),
            Step("remind", lambda ctx: f"reminded after {ctx['invite']}", depends_on=("pause",)),
            Step("unrelated", lambda ctx: "ran meanwhile"),
        ]
    )


# --- the rules, one run at a time ----------------------------------------------------------


def test_a_long_wait_suspends_the_run_with_its_due_time(monkeypatch: pytest.MonkeyPatch) -> None:
    Clock(monkeypatch)
    saved: list[WorkflowCheckpoint] = []
    events: list[Any] = []
    result = reminder().run_sync(checkpoint_fn=saved.append, on_event=events.append)
    due = START + timedelta(hours=1)
    assert dict(result.outputs) == {"invite": "invited", "unrelated": "ran meanwhile"}
    assert dict(result.waits) == {"pause": due}
    assert dict(saved[-1].waits) == {"pause": {"due": due.isoformat(), "since": START.isoformat()}}
    suspended = [e for e in events if isinstance(e, ev.RunSuspended)]
    assert [(e.pending, e.waits) for e in suspended] == [((), ("pause",))]
    assert not any(isinstance(e, ev.RunFinished) for e in events)
    # Plain data: through JSON and back it is the same checkpoint.
    again = WorkflowCheckpoint.from_dict(json.loads(json.dumps(saved[-1].to_dict())))
    assert again.waits == saved[-1].waits


def test_a_resume_before_the_time_runs_nothing_and_says_the_same_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    saved: list[WorkflowCheckpoint] = []
    first = reminder().run_sync(checkpoint_fn=saved.append)
    clock.advance(minutes=58)  # two minutes left: more than sleep_up_to
    early = reminder().run_sync(resume_from=saved[-1], checkpoint_fn=saved.append)
    assert early.executed == ()
    assert early.waits == first.waits  # fixed when first reached: it did not move
    assert "remind" not in early.outputs


def test_a_resume_at_the_time_runs_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    saved: list[WorkflowCheckpoint] = []
    reminder().run_sync(checkpoint_fn=saved.append)
    clock.advance(hours=1)
    done = reminder().run_sync(resume_from=saved[-1], checkpoint_fn=saved.append)
    assert done.executed == ("pause", "remind")
    assert done.outputs["pause"] is None
    assert done.outputs["remind"] == "reminded after invited"
    assert dict(done.waits) == {}
    assert dict(saved[-1].waits) == {}  # a wait that is over is an output, not a wait


def test_a_short_wait_is_slept_through_its_time_checkpointed_first() -> None:
    saved: list[WorkflowCheckpoint] = []
    result = reminder(seconds=0.05).run_sync(checkpoint_fn=saved.append)
    assert result.outputs["remind"] == "reminded after invited"
    assert dict(result.waits) == {}
    holding = [c for c in saved if c.waits]
    assert holding, "the due time was never checkpointed before the sleep"
    assert "pause" not in holding[0].outputs
    assert all("pause" not in c.waits for c in saved if "pause" in c.outputs)


def test_sleep_up_to_decides_which_waits_are_slept_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock(monkeypatch)
    saved: list[WorkflowCheckpoint] = []
    reminder().run_sync(checkpoint_fn=saved.append, sleep_up_to=3599)  # an hour left: ends
    clock.advance(seconds=3599.95)  # 50 ms left
    still = reminder().run_sync(resume_from=saved[-1], sleep_up_to=0.01)
    assert dict(still.waits) == {"pause": START + timedelta(hours=1)}
    slept = reminder().run_sync(resume_from=saved[-1], sleep_up_to=1)
    assert slept.executed == ("pause", "remind")


def test_a_wait_slept_through_holds_no_concurrency_slot() -> None:
    order: list[str] = []
    workflow = Workflow(
        [Step.wait("pause", seconds=0.3), Step("other", lambda ctx: order.append("other"))]
    )

    def seen(event: Any) -> None:
        if isinstance(event, ev.StepFinished):
            order.append(event.step)

    workflow.run_sync(max_concurrency=1, on_event=seen)
    # Declared first, the wait took its turn first; holding the one slot, it would
    # have kept "other" from starting until it was due.
    assert order.index("other") < order.index("pause")


def test_until_takes_an_aware_time_and_a_past_one_is_due_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    Clock(monkeypatch)
    tokyo = timezone_of(9)

    def when(ctx: Any) -> datetime:
        return datetime(2026, 12, 3, 9, 0, tzinfo=tokyo)  # 00:00 UTC

    later = Workflow([Step.wait("w", until=when), Step("after", lambda c: 1, depends_on=("w",))])
    result = later.run_sync()
    assert dict(result.waits) == {"w": datetime(2026, 12, 3, 0, 0, tzinfo=UTC)}
    past = Workflow(
        [
            Step.wait("w", until=lambda ctx: START - timedelta(days=1)),
            Step("after", lambda c: 1, depends_on=("w",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    assert past.run_sync(checkpoint_fn=saved.append).outputs == {"w": None, "after": 1}


def timezone_of(hours: int) -> timezone:
    return timezone(timedelta(hours=hours))


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        (datetime(2026, 12, 3, 9, 0), "a naive datetime (no tzinfo)"),  # noqa: DTZ001 - the point
        ("2026-12-03", "str '2026-12-03'"),
    ],
)
def test_until_returning_no_aware_time_fails_the_step_naming_it(returned: Any, said: str) -> None:
    workflow = Workflow([Step.wait("w", until=lambda ctx: returned)])
    with pytest.raises(WorkflowFailed) as caught:
        workflow.run_sync()
    error = caught.value.errors["w"]
    assert isinstance(error, TypeError)
    assert "step 'w': until(ctx) must return an aware datetime.datetime" in str(error)
    assert said in str(error)
    assert dict(caught.value.checkpoint.waits) == {}


def test_a_changed_version_drops_the_time_and_waits_again(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    saved: list[WorkflowCheckpoint] = []
    reminder().run_sync(checkpoint_fn=saved.append)
    clock.advance(minutes=30)
    changed = Workflow(
        [
            Step("invite", lambda ctx: "invited"),
            Step.wait("pause", seconds=3600, depends_on=("invite",), version="2"),
            Step("remind", lambda ctx: "reminded", depends_on=("pause",)),
            Step("unrelated", lambda ctx: "ran meanwhile"),
        ]
    )
    result = changed.run_sync(resume_from=saved[-1])
    assert result.invalidated["pause"].startswith("wait dropped: ")
    assert dict(result.waits) == {"pause": clock.now + timedelta(hours=1)}
    rerun = reminder().run_sync(resume_from=saved[-1], rerun=["pause"])
    assert dict(rerun.waits) == {"pause": clock.now + timedelta(hours=1)}


def test_a_wait_in_a_sub_workflow_is_named_by_path(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    child = Workflow(
        [
            Step.wait("cool_down", seconds=600),
            Step("call", lambda c: "called", depends_on=("cool_down",)),
        ]
    )
    parent = Workflow(
        [
            Step("research", child),
            Step("report", lambda c: c["research"]["call"], depends_on=("research",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    first = parent.run_sync(checkpoint_fn=saved.append)
    assert dict(first.waits) == {"research/cool_down": START + timedelta(minutes=10)}
    assert "research" not in first.outputs
    clock.advance(minutes=10)
    done = parent.run_sync(resume_from=saved[-1], checkpoint_fn=saved.append)
    assert done.outputs["report"] == "called"
    assert dict(done.waits) == {}


async def later(ctx: Any) -> datetime:
    return START


def test_bad_settings_are_named() -> None:
    with pytest.raises(WorkflowDefinitionError, match="exactly one of them"):
        Step.wait("w")
    with pytest.raises(WorkflowDefinitionError, match="not both"):
        Step.wait("w", seconds=1, until=lambda ctx: START)
    with pytest.raises(WorkflowDefinitionError, match=r"step 'w': seconds must be"):
        Step.wait("w", seconds=-1)
    with pytest.raises(WorkflowDefinitionError, match="until must be a plain function"):
        Step.wait("w", until=later)  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match="did you mean"):
        Step.wait("w", second=1)  # type: ignore[call-arg]
    with pytest.raises(RunArgumentError, match="sleep_up_to must be a number of seconds"):
        reminder().run_sync(sleep_up_to=-1)


# --- every store keeps the time, and another process resumes it ------------------------------


def test_every_store_keeps_the_time(
    tmp_path: Path, pg_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    makers: list[tuple[str, Any]] = [
        ("json-file", lambda: JsonFileStore(tmp_path / "cp.json")),
        ("json-lines", lambda: JsonLinesStore(tmp_path / "cp.jsonl")),
        ("sqlite", lambda: SQLiteStore(tmp_path / "cp.db")),
        ("postgres", lambda: PostgresStore(pg_uri)),
    ]
    for kind, make in makers:
        clock = Clock(monkeypatch)
        writer = make()
        reminder().run_sync(checkpoint_fn=writer, run_id=f"wait-{kind}")
        reader = make()  # what another process would open
        loaded = reader.load(f"wait-{kind}") if hasattr(reader, "run_ids") else reader.load()
        assert isinstance(loaded, WorkflowCheckpoint), kind
        due = (START + timedelta(hours=1)).isoformat()
        assert loaded.waits["pause"]["due"] == due, kind
        clock.advance(hours=2)
        result = reminder().run_sync(resume_from=loaded, checkpoint_fn=reader)
        assert result.executed == ("pause", "remind"), kind
        final = reader.load(f"wait-{kind}") if hasattr(reader, "run_ids") else reader.load()
        assert final is not None
        assert dict(final.waits) == {}, kind
        assert final.outputs["pause"] is None, kind
        for store in (writer, reader):
            close = getattr(store, "close", None)
            if close is not None:
                close()


SLEEPER = """\
import os
import sys

from executionkit import Step, Workflow
from executionkit.stores import SQLiteStore


def say(line):
    os.write(1, (line + "\\n").encode())


workflow = Workflow(
    [
        Step("before", lambda ctx: 1),
        Step.wait("pause", seconds=3600, depends_on=["before"]),
        Step("after", lambda ctx: 2, depends_on=["pause"]),
    ]
)


def main():
    store = SQLiteStore(sys.argv[1])

    def save(checkpoint):
        store(checkpoint)
        if checkpoint.waits:
            say("saved the wait")  # the run goes on sleeping through it

    workflow.run_sync(checkpoint_fn=save, run_id="r", sleep_up_to=7200)


if __name__ == "__main__":
    main()
"""


def test_kill_9_during_a_wait_slept_through_keeps_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run sleeping through an hour's wait is killed; a resume waits for the same time."""
    (tmp_path / "sleeper.py").write_text(SLEEPER, encoding="utf-8")
    store_path = tmp_path / "s.db"
    process = subprocess.Popen(  # noqa: S603 - our own interpreter and program
        [sys.executable, "sleeper.py", str(store_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"saved the wait\n"
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)  # reads and closes its pipes
    finally:
        watchdog.cancel()
    assert process.returncode == -signal.SIGKILL
    store = SQLiteStore(store_path)
    recorded = store.load("r")
    assert recorded is not None
    due = recorded.waits["pause"]["due"]
    monkeypatch.syspath_prepend(str(tmp_path))
    from sleeper import workflow  # type: ignore[import-not-found]  # noqa: PLC0415

    resumed = workflow.run_sync(resume_from=recorded, checkpoint_fn=store, sleep_up_to=0)
    assert resumed.waits["pause"].isoformat() == due  # the same time, not a fresh hour
    assert resumed.executed == ()
    store.close()
