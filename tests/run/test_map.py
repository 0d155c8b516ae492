"""`Step.map`: fan-out over a list or mapping a run produced, each item recorded as it lands.

Every rule of the issue: item order and keys, errors before any item runs,
per-item recording in both schedules, resume by key (never a recorded item
again, exact token totals), per-item identity, concurrency limits, retries,
failure policies, the budget, cancellation, codecs and invalidation.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from executionkit import (
    BudgetExceeded,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowDefinitionError,
    WorkflowFailed,
    current_step,
)
from executionkit import events as ev

SCHEDULES = ["batch", "eager"]


def round_trip(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def paid(text: str) -> PatternResult[Any]:
    return PatternResult(text.upper(), cost=TokenUsage(len(text), 1, 1))


# --- outputs, keys and definition errors ---------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_a_list_maps_to_a_list_in_item_order(schedule: str) -> None:
    async def shout(item: str, ctx: Any) -> PatternResult[Any]:
        return paid(item)

    workflow = Workflow(
        [
            Step("split", lambda ctx: ["b", "a", "c"]),
            Step.map("loud", shout, over="split"),
            Step("join", lambda ctx: "+".join(ctx["loud"]), depends_on=("loud",)),
        ]
    )
    result = await workflow.run(schedule=schedule)  # type: ignore[arg-type]
    assert result.outputs["loud"] == ["B", "A", "C"]
    assert result.outputs["join"] == "B+A+C"
    assert result.cost == TokenUsage(3, 3, 3)
    assert result.executed == ("split", "loud", "join")


async def test_a_mapping_maps_to_a_dict_by_its_keys_and_a_tuple_to_a_list() -> None:
    workflow = Workflow(
        [
            Step.map("by_lang", lambda item, ctx: item * 2, over="texts"),
            Step.map("pairs", lambda item, ctx: item[0], over="tuples"),
        ]
    )
    result = await workflow.run({"texts": {"fr": "a", "de": "b"}, "tuples": (("x", 1), ("y", 2))})
    assert result.outputs["by_lang"] == {"fr": "aa", "de": "bb"}
    assert list(result.outputs["by_lang"]) == ["fr", "de"]
    assert result.outputs["pairs"] == ["x", "y"]


@pytest.mark.parametrize(("items", "empty"), [([], []), ({}, {}), ((), [])])
async def test_no_items_gives_an_empty_output_at_once_and_dependants_run(
    items: Any, empty: Any
) -> None:
    calls: list[Any] = []
    workflow = Workflow(
        [
            Step.map("each", lambda item, ctx: calls.append(item), over="items"),
            Step("after", lambda ctx: ("ran", ctx["each"]), depends_on=("each",)),
        ]
    )
    result = await workflow.run({"items": items})
    assert result.outputs == {"each": empty, "after": ("ran", empty)}
    assert calls == []


async def test_key_names_items_and_the_checkpoint_uses_those_keys() -> None:
    seen: list[str] = []

    def summarise(item: dict[str, str], ctx: Any) -> str:
        key = current_step().item_key
        assert key is not None
        seen.append(key)
        return item["text"][::-1]

    saved: list[WorkflowCheckpoint] = []
    docs = [{"id": "doc-7", "text": "abc"}, {"id": "doc-2", "text": "xy"}]
    workflow = Workflow([Step.map("rev", summarise, over="docs", key=lambda doc: doc["id"])])
    result = await workflow.run({"docs": docs}, checkpoint_fn=saved.append)
    assert result.outputs["rev"] == ["cba", "yx"]
    assert sorted(seen) == ["doc-2", "doc-7"]
    recorded = [dict(cp.items["rev"]["outputs"]) for cp in saved if "rev" in cp.items]
    assert recorded, "items are recorded before the map finishes"
    assert set().union(*recorded) <= {"doc-7", "doc-2"}


@pytest.mark.parametrize(
    ("value", "found"),
    [("abc", "str"), ({1, 2}, "set"), (None, "NoneType"), (7, "int")],
)
async def test_over_must_hold_a_list_tuple_or_mapping(value: object, found: str) -> None:
    calls: list[object] = []
    workflow = Workflow(
        [
            Step("make", lambda ctx: value),
            Step.map("each", lambda item, ctx: calls.append(item), over="make"),
        ]
    )
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run()
    error = caught.value.errors["each"]
    assert isinstance(error, TypeError)
    assert str(error) == (
        f"map step 'each': over='make' must be a list, a tuple or a mapping of items, got {found}"
    )
    assert calls == []
    assert caught.value.checkpoint.outputs == {"make": value}


async def test_over_naming_nothing_is_refused_before_the_first_step() -> None:
    """An over= naming neither a step nor a context key is refused before anything is paid."""
    workflow = Workflow([Step.map("each", lambda item, ctx: item, over="documents")])
    with pytest.raises(RunArgumentError) as caught:
        await workflow.run({"docs": [1]})
    assert str(caught.value) == (
        "step 'each': over='documents' names neither a step nor a key of initial_context "
        "(keys: 'docs'); did you mean 'docs'?"
    )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (lambda item: "even" if item % 2 == 0 else "odd", "unique; 'odd' name more than one item"),
        (lambda item: item, "item keys must be non-empty str, got 1, 2, 3"),
        (lambda item: "", "item keys must be non-empty str, got '', '', ''"),
    ],
    ids=["duplicate", "not-str", "empty"],
)
async def test_bad_keys_fail_the_map_before_any_item_runs(key: Any, message: str) -> None:
    calls: list[int] = []

    def each(item: int, ctx: Any) -> int:
        calls.append(item)
        return item

    workflow = Workflow([Step.map("each", each, over="numbers", key=key)])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"numbers": [1, 2, 3]})
    assert message in str(caught.value.errors["each"])
    assert str(caught.value.errors["each"]).startswith("map step 'each': ")
    assert calls == []


def test_definition_errors_name_the_step() -> None:
    with pytest.raises(WorkflowDefinitionError, match=r"step 'm': over must name a step"):
        Step.map("m", lambda item, ctx: item, over="")
    with pytest.raises(WorkflowDefinitionError, match=r"step 'm': max_concurrency must be"):
        Step.map("m", lambda item, ctx: item, over="x", max_concurrency=0)
    with pytest.raises(WorkflowDefinitionError, match=r"step 'm': key must be callable"):
        Step.map("m", lambda item, ctx: item, over="x", key="id")  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError) as caught:
        Step.map("m", lambda item, ctx: item, over="x", retrys=2)
    assert str(caught.value) == (
        "step 'm': Step.map got unknown option(s) 'retrys' (it takes the keywords of Step); "
        "did you mean 'retries'?"
    )


def test_over_naming_a_step_is_a_dependency_recorded_in_step_info() -> None:
    workflow = Workflow(
        [Step("split", lambda ctx: [1]), Step.map("each", lambda i, ctx: i, over="split")]
    )
    saved: list[WorkflowCheckpoint] = []
    workflow.run_sync(checkpoint_fn=saved.append)
    info = saved[-1].step_info["each"]
    assert dict(info) == {
        "version": None,
        "depends_on": ("split",),
        "kind": "map",
        "code": info["code"],  # the fingerprint of the item function
    }
    assert "Step.map(" in repr(workflow.steps[1])
    assert "over='split'" in repr(workflow.steps[1])


# --- each item is recorded as it lands -----------------------------------------------------


class Gates:
    """Items that finish only when the test lets them, one at a time."""

    def __init__(self, keys: list[str]) -> None:
        self.gates = {key: asyncio.Event() for key in keys}
        self.calls: Counter[str] = Counter()

    async def item(self, item: str, ctx: Any) -> PatternResult[Any]:
        self.calls[item] += 1
        await self.gates[item].wait()
        return paid(item)


class Saves:
    """A checkpoint_fn that records each checkpoint and lets the test wait for the next."""

    def __init__(self) -> None:
        self.checkpoints: list[WorkflowCheckpoint] = []
        self.changed = asyncio.Event()

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        self.checkpoints.append(checkpoint)
        self.changed.set()

    async def until(self, count: int) -> WorkflowCheckpoint:
        while len(self.checkpoints) < count:
            self.changed.clear()
            await self.changed.wait()
        return self.checkpoints[-1]


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_each_item_is_checkpointed_as_it_lands_and_resume_runs_only_the_rest(
    schedule: str,
) -> None:
    keys = ["a", "b", "c", "d"]
    gates = Gates(keys)
    saves = Saves()
    workflow = Workflow(
        [
            Step("split", lambda ctx: keys),
            Step.map("each", gates.item, over="split", key=lambda item: item),
        ]
    )
    run = asyncio.ensure_future(workflow.run(checkpoint_fn=saves, schedule=schedule))  # type: ignore[arg-type]
    await saves.until(1)  # "split" recorded
    # The items are counted in a checkpoint before any starts.
    assert dict((await saves.until(2)).in_flight_items) == {"each": 4}
    for count, key in enumerate(["c", "a"], start=1):
        gates.gates[key].set()
        checkpoint = await saves.until(2 + count)
        assert dict(checkpoint.in_flight_items) == {"each": 4 - count}
        recorded = checkpoint.items["each"]["outputs"]
        assert list(recorded) == ["c", "a"][:count]
        assert checkpoint.new_items == {"each": (key,)}
        assert checkpoint.new_outputs == ()
        assert checkpoint.items["each"]["cost"] == TokenUsage(count, count, count)
        assert checkpoint.cost == TokenUsage(count, count, count)
        assert "each" in checkpoint.step_info
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    last = round_trip(saves.checkpoints[-1])
    assert dict(last.items["each"]["outputs"]) == {"c": "C", "a": "A"}
    # Resume: only b and d run; the total is that of one uninterrupted run.
    again = Gates(keys)
    for gate in again.gates.values():
        gate.set()
    resumed = Workflow(
        [
            Step("split", lambda ctx: keys),
            Step.map("each", again.item, over="split", key=lambda item: item),
        ]
    )
    result = await resumed.run(resume_from=last, schedule=schedule)  # type: ignore[arg-type]
    assert again.calls == Counter({"b": 1, "d": 1})
    assert result.outputs["each"] == ["A", "B", "C", "D"]
    assert result.cost == TokenUsage(4, 4, 4)
    assert result.restored == ("split",)


async def test_items_are_matched_by_key_not_position() -> None:
    """The list was reordered between runs: recorded items still belong to their keys."""
    calls: list[str] = []

    def each(item: str, ctx: Any) -> str:
        calls.append(item)
        if ctx["fail"] and item == "z":
            raise RuntimeError("down")
        return item.upper()

    def workflow(order: list[str]) -> Workflow:
        return Workflow([Step.map("each", each, over="items", key=lambda item: item)])

    with pytest.raises(WorkflowFailed) as caught:
        await workflow(["x", "y", "z"]).run({"items": ["x", "y", "z"], "fail": True})
    calls.clear()
    result = await workflow(["z", "y", "x"]).run(
        {"items": ["z", "y", "x"], "fail": False}, resume_from=round_trip(caught.value.checkpoint)
    )
    assert calls == ["z"]
    assert result.outputs["each"] == ["Z", "Y", "X"]


# --- identity, limits, retries ---------------------------------------------------------------


async def test_each_item_has_its_own_stable_idempotency_key() -> None:
    keys: dict[str, list[str]] = {}
    attempts: Counter[str] = Counter()

    async def each(item: str, ctx: Any) -> str:
        step = current_step()
        assert step.name == "each"
        assert step.item_key == item
        keys.setdefault(item, []).append(step.idempotency_key)
        attempts[item] += 1
        if item == "b" and attempts[item] == 1:
            raise ConnectionError("flaky")
        if item == "c" and ctx["fail"]:
            raise RuntimeError("down")
        return item

    workflow = Workflow(
        [Step.map("each", each, over="items", key=lambda i: i, retries=1, retry_delay=0)]
    )
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"items": ["a", "b", "c"], "fail": True}, run_id="r1")
    await workflow.run(
        {"items": ["a", "b", "c"], "fail": False}, resume_from=caught.value.checkpoint
    )
    assert len(keys["b"]) == 2  # a retry, same key
    assert len(set(keys["b"])) == 1
    assert len(keys["c"]) == 3  # two attempts, then the resume: one key throughout
    assert len(set(keys["c"])) == 1
    distinct = {values[0] for values in keys.values()}
    assert len(distinct) == 3
    step_key = Workflow([Step("each", lambda ctx: current_step().idempotency_key)])
    plain = (await step_key.run(run_id="r1")).outputs["each"]
    assert plain not in distinct


@pytest.mark.parametrize(("step_limit", "run_limit", "expected"), [(2, None, 2), (None, 3, 3)])
async def test_max_concurrency_bounds_the_items_running_at_once(
    step_limit: int | None, run_limit: int | None, expected: int
) -> None:
    running = 0
    peak = 0
    release = asyncio.Event()
    started = asyncio.Event()

    async def each(item: int, ctx: Any) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == expected:
            started.set()
        await release.wait()
        running -= 1
        return item

    workflow = Workflow([Step.map("each", each, over="items", max_concurrency=step_limit)])
    run = asyncio.ensure_future(
        workflow.run({"items": list(range(10))}, max_concurrency=run_limit)
    )
    await started.wait()
    for _ in range(5):
        await asyncio.sleep(0)  # give the driver every chance to overshoot
    assert running == expected
    release.set()
    result = await run
    assert result.outputs["each"] == list(range(10))
    assert peak == expected


async def test_an_item_timeout_names_the_item() -> None:
    never = asyncio.Event()

    async def each(item: int, ctx: Any) -> int:
        if item == 1:
            await never.wait()
        return item

    workflow = Workflow([Step.map("each", each, over="items", timeout=0.01)])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"items": [0, 1]})
    group = caught.value.errors["each"]
    assert isinstance(group, ExceptionGroup)
    (error,) = group.exceptions
    assert str(error) == "step 'each', item '1', attempt 1 timed out after 0.01 s"
    assert dict(caught.value.checkpoint.items["each"]["outputs"]) == {"0": 0}


# --- failures among items -----------------------------------------------------------------------


async def test_on_error_continue_runs_every_other_item_and_names_the_failed_keys() -> None:
    calls: Counter[int] = Counter()

    def each(item: int, ctx: Any) -> int:
        calls[item] += 1
        if item in ctx["bad"]:
            raise ValueError(f"bad item {item}")
        return item * 10

    workflow = Workflow([Step.map("each", each, over="items")])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"items": list(range(6)), "bad": {1, 4}}, on_error="continue")
    group = caught.value.errors["each"]
    assert isinstance(group, ExceptionGroup)
    assert str(group).startswith(
        "map step 'each': 2 of 6 items failed ('1', '4'); the others that completed are "
        "recorded, and a resume runs only the rest"
    )
    assert [str(e) for e in group.exceptions] == ["bad item 1", "bad item 4"]
    assert group.exceptions[0].__notes__ == ["executionkit: item '1' of map step 'each'"]
    checkpoint = round_trip(caught.value.checkpoint)
    assert dict(checkpoint.items["each"]["outputs"]) == {"0": 0, "2": 20, "3": 30, "5": 50}
    assert "each" in checkpoint.errors
    calls.clear()
    result = await workflow.run({"items": list(range(6)), "bad": set()}, resume_from=checkpoint)
    assert calls == Counter({1: 1, 4: 1})
    assert result.outputs["each"] == [0, 10, 20, 30, 40, 50]


async def test_on_error_finish_lets_running_items_finish_and_starts_no_more() -> None:
    release = asyncio.Event()
    both = asyncio.Event()
    started: list[int] = []

    async def each(item: int, ctx: Any) -> int:
        started.append(item)
        if len(started) == 2:
            both.set()
        if item == 0:
            raise ValueError("first fails")
        await release.wait()
        return item

    workflow = Workflow([Step.map("each", each, over="items", max_concurrency=2)])
    run = asyncio.ensure_future(workflow.run({"items": [0, 1, 2, 3]}))
    await both.wait()
    release.set()
    with pytest.raises(WorkflowFailed) as caught:
        await run
    assert started == [0, 1]  # item 1 was running and finished; 2 and 3 never started
    assert dict(caught.value.checkpoint.items["each"]["outputs"]) == {"1": 1}


async def test_on_error_cancel_cancels_running_items() -> None:
    cancelled: list[int] = []
    forever = asyncio.Event()

    async def each(item: int, ctx: Any) -> int:
        if item == 2:
            await asyncio.sleep(0)
            raise ValueError("boom")
        try:
            await forever.wait()
        except asyncio.CancelledError:
            cancelled.append(item)
            raise
        return item

    workflow = Workflow([Step.map("each", each, over="items")])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"items": [0, 1, 2]}, on_error="cancel")
    assert sorted(cancelled) == [0, 1]
    assert "each" not in caught.value.checkpoint.items


async def test_an_item_raising_keyboard_interrupt_stops_the_run_keeping_finished_items() -> None:
    saved: list[WorkflowCheckpoint] = []
    other_done = asyncio.Event()

    async def each(item: int, ctx: Any) -> int:
        if item == 1:
            await other_done.wait()
            raise KeyboardInterrupt
        other_done.set()
        return item

    workflow = Workflow([Step.map("each", each, over="items")])
    with pytest.raises(KeyboardInterrupt):
        await workflow.run({"items": [0, 1]}, checkpoint_fn=saved.append)
    assert dict(saved[-1].items["each"]["outputs"]) == {"0": 0}


# --- budget and cancellation ---------------------------------------------------------------------


async def test_the_budget_is_checked_before_each_item() -> None:
    calls: list[int] = []

    def each(item: int, ctx: Any) -> PatternResult[Any]:
        calls.append(item)
        return PatternResult(item, cost=TokenUsage(10, 0, 1))

    workflow = Workflow([Step.map("each", each, over="items", max_concurrency=1)])
    with pytest.raises(BudgetExceeded) as caught:
        await workflow.run({"items": list(range(5))}, budget=TokenUsage(llm_calls=2))
    assert calls == [0, 1]
    checkpoint = round_trip(caught.value.checkpoint)
    assert dict(checkpoint.items["each"]["outputs"]) == {"0": 0, "1": 1}
    assert checkpoint.cost == TokenUsage(20, 0, 2)
    calls.clear()
    result = await workflow.run(
        {"items": list(range(5))}, resume_from=checkpoint, budget=TokenUsage(llm_calls=10)
    )
    assert calls == [2, 3, 4]
    assert result.cost == TokenUsage(50, 0, 5)


@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_cancelling_the_run_mid_map_keeps_finished_items_and_leaves_no_task(
    schedule: str,
) -> None:
    gates = Gates(["a", "b", "c"])
    saves = Saves()
    workflow = Workflow([Step.map("each", gates.item, over="items", key=lambda item: item)])
    before = asyncio.all_tasks()
    run = asyncio.ensure_future(
        workflow.run({"items": ["a", "b", "c"]}, checkpoint_fn=saves, schedule=schedule)  # type: ignore[arg-type]
    )
    gates.gates["b"].set()
    await saves.until(1)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert dict(saves.checkpoints[-1].items["each"]["outputs"]) == {"b": "B"}
    assert asyncio.all_tasks() - before <= {asyncio.current_task()}


# --- codecs, validation, invalidation, events -------------------------------------------------


async def test_encode_and_decode_apply_to_each_item() -> None:
    workflow = Workflow(
        [
            Step.map(
                "each",
                lambda item, ctx: complex(item, 1),
                over="items",
                encode=lambda value: [value.real, value.imag],
                decode=lambda pair: complex(*pair),
            ),
            Step("sum", lambda ctx: sum(ctx["each"]), depends_on=("each",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    result = await workflow.run({"items": [1, 2]}, checkpoint_fn=saved.append)
    assert result.outputs["each"] == [complex(1, 1), complex(2, 1)]
    recorded = next(cp for cp in saved if "each" in cp.outputs)
    assert recorded.outputs["each"] == [[1.0, 1.0], [2.0, 1.0]]
    resumed = await workflow.run(
        {"items": [1, 2]}, resume_from=round_trip(recorded), rerun=["sum"]
    )
    assert resumed.outputs["each"] == [complex(1, 1), complex(2, 1)]
    assert resumed.outputs["sum"] == complex(3, 2)


async def test_validate_json_fails_an_item_that_is_not_plain_data() -> None:
    workflow = Workflow(
        [Step.map("each", lambda item, ctx: {item} if item == 2 else item, over="items")]
    )
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"items": [1, 2]}, validate_json=True, on_error="continue")
    group = caught.value.errors["each"]
    assert isinstance(group, ExceptionGroup)
    assert "output of step 'each', item '1'" in str(group.exceptions[0])
    assert dict(caught.value.checkpoint.items["each"]["outputs"]) == {"0": 1}


async def test_a_version_change_drops_recorded_items() -> None:
    def workflow(version: str) -> Workflow:
        return Workflow([Step.map("each", each, over="items", version=version)])

    calls: list[int] = []

    def each(item: int, ctx: Any) -> int:
        calls.append(item)
        if item == 2 and ctx["fail"]:
            raise ValueError("x")
        return item

    with pytest.raises(WorkflowFailed) as caught:
        await workflow("v1").run({"items": [1, 2], "fail": True})
    calls.clear()
    result = await workflow("v2").run(
        {"items": [1, 2], "fail": False}, resume_from=round_trip(caught.value.checkpoint)
    )
    assert sorted(calls) == [1, 2]
    assert result.invalidated == {
        "each": "recorded items dropped: version changed from 'v1' to 'v2'"
    }


async def test_a_step_that_became_a_map_is_run_again() -> None:
    saved: list[WorkflowCheckpoint] = []
    await Workflow([Step("each", lambda ctx: [1])]).run({"items": [5]}, checkpoint_fn=saved.append)
    result = await Workflow([Step.map("each", lambda i, ctx: i + 1, over="items")]).run(
        {"items": [5]}, resume_from=round_trip(saved[-1])
    )
    assert result.outputs["each"] == [6]
    assert result.invalidated == {"each": "kind changed from 'step' to 'map'"}


async def test_items_report_events_with_their_keys() -> None:
    seen: list[ev.Event] = []

    def each(item: int, ctx: Any) -> int:
        if item == 1:
            raise ValueError("no")
        return item

    # inline: each item runs when its task starts, its events around it
    workflow = Workflow([Step.map("each", each, over="items", key=str, inline=True)])
    with pytest.raises(WorkflowFailed):
        await workflow.run({"items": [0, 1]}, on_event=seen.append, on_error="continue")
    kinds = [
        (type(e).__name__, getattr(e, "item", None))
        for e in seen
        if isinstance(e, (ev.MapStarted, ev.ItemStarted, ev.ItemFinished, ev.ItemFailed))
    ]
    assert kinds == [
        ("MapStarted", None),
        ("ItemStarted", "0"),
        ("ItemFinished", "0"),
        ("ItemStarted", "1"),
        ("ItemFailed", "1"),
    ]
    started = next(e for e in seen if isinstance(e, ev.MapStarted))
    assert (started.step, started.items, started.recorded) == ("each", 2, 0)
    finished = next(e for e in seen if isinstance(e, ev.ItemFinished))
    assert finished.recorded == 1


def test_save_progress_is_refused_inside_an_item() -> None:
    def each(item: int, ctx: Any) -> int:
        current_step().save_progress(1)
        return item

    with pytest.raises(WorkflowFailed) as caught:
        Workflow([Step.map("each", each, over="items")]).run_sync({"items": [0]})
    group = caught.value.errors["each"]
    assert isinstance(group, ExceptionGroup)
    assert "save_progress() is not available in the items of a map" in str(group.exceptions[0])


async def test_recorded_items_no_longer_among_the_items_are_reported() -> None:
    def each(item: str, ctx: Any) -> PatternResult[str]:
        if item == "b" and ctx["fail"]:
            raise RuntimeError("down")
        return PatternResult(item.upper(), cost=TokenUsage(1, 1, 1))

    workflow = Workflow([Step.map("each", each, over="items", key=str)])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"items": ["a", "b", "c"], "fail": True})
    seen: list[ev.Event] = []
    result = await workflow.run(
        {"items": ["b", "c", "d"], "fail": False},
        resume_from=round_trip(caught.value.checkpoint),
        on_event=seen.append,
    )
    assert result.outputs["each"] == ["B", "C", "D"]
    assert result.cost == TokenUsage(4, 4, 4)  # 'a' was paid for
    assert result.invalidated == {"each": "recorded items dropped: 'a' no longer among the items"}
    assert [(e.step, e.reason) for e in seen if isinstance(e, ev.StepInvalidated)] == [
        ("each", "recorded items dropped: 'a' no longer among the items")
    ]


async def test_an_item_retry_names_the_item() -> None:
    attempts: Counter[str] = Counter()

    def each(item: str, ctx: Any) -> str:
        attempts[item] += 1
        if item == "b" and attempts[item] == 1:
            raise ConnectionError("flaky")
        return item

    seen: list[ev.Event] = []
    workflow = Workflow([Step.map("each", each, over="items", key=str, retries=1, retry_delay=0)])
    await workflow.run({"items": ["a", "b"]}, on_event=seen.append)
    retried = [e for e in seen if isinstance(e, ev.StepRetried)]
    assert [(e.step, e.item, e.attempt) for e in retried] == [("each", "b", 1)]


async def test_a_failed_maps_checkpoint_keeps_why_its_first_items_failed() -> None:
    """The checkpoint's errors quote the first three items' errors whole, then how many more."""

    def check(item: int, ctx: Any) -> int:
        if item % 2:
            msg = f"odd number {item}: use an even one"
            raise ValueError(msg)
        return item

    workflow = Workflow([Step.map("m", check, over="numbers")])
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run({"numbers": list(range(10))}, on_error="continue")
    text = caught.value.checkpoint.errors["m"]
    assert text.endswith(
        ". Why: item '1' of map step 'm': ValueError: odd number 1: use an even one; "
        "item '3' of map step 'm': ValueError: odd number 3: use an even one; "
        "item '5' of map step 'm': ValueError: odd number 5: use an even one; and 2 more"
    )
    assert text.startswith("ExceptionGroup: map step 'm': 5 of 10 items failed")
