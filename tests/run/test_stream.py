"""`current_step().stream(text)`: partial output to listeners, per attempt, never checkpointed."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from executionkit import Step, Workflow, WorkflowCheckpoint, current_step
from executionkit import events as ev


def streamed(events: list[ev.Event], step: str) -> dict[tuple[int, str | None], str]:
    """The text each attempt (and item) of ``step`` streamed, in order."""
    texts: dict[tuple[int, str | None], str] = {}
    for event in events:
        if isinstance(event, ev.StepStreamed) and event.step == step:
            key = (event.attempt, event.item)
            texts[key] = texts.get(key, "") + event.text
    return texts


async def talk(ctx: Any) -> str:
    step = current_step()
    for piece in ("tok-a ", "tok-b ", "tok-c"):
        step.stream(piece)
        await asyncio.sleep(0)
    if step.attempt == 1:
        msg = "the connection dropped mid-answer"
        raise ConnectionError(msg)
    return "Hello world"


def test_each_attempt_streams_its_own_text_and_the_output_is_the_return_value() -> None:
    events: list[ev.Event] = []
    saved: list[WorkflowCheckpoint] = []
    result = Workflow([Step("talk", talk, retries=1, retry_delay=0)]).run_sync(
        on_event=events.append, checkpoint_fn=saved.append
    )
    assert result.outputs["talk"] == "Hello world"
    text = "tok-a tok-b tok-c"
    assert streamed(events, "talk") == {(1, None): text, (2, None): text}
    retried = next(i for i, e in enumerate(events) if isinstance(e, ev.StepRetried))
    second = [e for e in events[retried:] if isinstance(e, ev.StepStreamed)]
    assert second
    assert {e.attempt for e in second} == {2}  # after the retry, never the failed attempt's
    for checkpoint in saved:
        assert "tok-" not in json.dumps(checkpoint.to_dict())  # never checkpointed


def test_a_plain_function_streams_from_its_thread_in_order() -> None:
    threads: set[str] = set()

    def plain(ctx: Any) -> str:
        threads.add(threading.current_thread().name)
        for index in range(50):
            current_step().stream(f"{index},")
        return "done"

    events: list[ev.Event] = []
    Workflow([Step("plain", plain)]).run_sync(on_event=events.append)
    assert threads != {threading.main_thread().name}
    assert streamed(events, "plain") == {(1, None): "".join(f"{i}," for i in range(50))}
    pieces = [e for e in events if isinstance(e, ev.StepStreamed)]
    finished = next(i for i, e in enumerate(events) if isinstance(e, ev.StepFinished))
    assert all(events.index(piece) < finished for piece in pieces)


def test_map_items_and_sub_workflows_stream_under_their_own_names() -> None:
    def item(value: int, ctx: Any) -> int:
        current_step().stream(f"item {value}")
        return value

    def say(ctx: Any) -> str:
        current_step().stream("inside")
        return "said"

    inner = Workflow([Step("say", say)])
    flow = Workflow(
        [
            Step("items", lambda ctx: [1, 2]),
            Step.map("each", item, over="items"),
            Step("sub", inner),
        ]
    )
    events: list[ev.Event] = []
    result = flow.run_sync(on_event=events.append)
    assert streamed(events, "each") == {(1, "0"): "item 1", (1, "1"): "item 2"}
    inside = [e for e in events if isinstance(e, ev.StepStreamed) and e.step == "say"]
    assert [e.text for e in inside] == ["inside"]
    assert inside[0].run_id == f"{result.run_id}/sub"


def test_without_listeners_nothing_is_kept_and_bad_text_is_refused() -> None:
    def chatty(ctx: Any) -> str:
        current_step().stream("ignored")
        current_step().stream("")
        return "ok"

    assert Workflow([Step("chatty", chatty)]).run_sync().outputs["chatty"] == "ok"

    def wrong(ctx: Any) -> str:
        current_step().stream(42)  # type: ignore[arg-type]
        return "never"

    with pytest.raises(Exception, match=r"stream\(\) takes a str, got int"):
        Workflow([Step("wrong", wrong)]).run_sync(on_event=lambda event: None)


def test_a_thread_streaming_after_its_run_ended_is_dropped_quietly() -> None:
    release = threading.Event()
    finished = threading.Event()
    errors: list[BaseException] = []
    contexts: list[Any] = []

    def leaves_a_thread(ctx: Any) -> str:
        step = current_step()
        contexts.append(step)

        def later() -> None:
            release.wait(10)
            try:
                step.stream("too late")
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                errors.append(exc)
            finished.set()

        threading.Thread(target=later, daemon=True).start()
        return "ok"

    events: list[ev.Event] = []
    Workflow([Step("leaves", leaves_a_thread)]).run_sync(on_event=events.append)
    release.set()
    assert finished.wait(10)
    assert errors == []
    assert not any(isinstance(e, ev.StepStreamed) for e in events)


def _streams_in_a_process(ctx: Any) -> str:
    current_step().stream("from another process")
    return "carried"


def test_a_process_executor_drops_streamed_text() -> None:
    events: list[ev.Event] = []
    with ProcessPoolExecutor(1) as executor:
        result = Workflow([Step("away", _streams_in_a_process)]).run_sync(
            executor=executor, on_event=events.append
        )
    assert result.outputs["away"] == "carried"
    assert not any(isinstance(e, ev.StepStreamed) for e in events)
