"""`Cassette`: steps' outputs and usage recorded once, replayed without calling the steps."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from executionkit import (
    CheckpointValueError,
    ExecutionKitError,
    PatternResult,
    Step,
    StepContext,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    WorkflowResult,
    current_step,
)
from executionkit import events as ev
from executionkit._define._code import fingerprint
from executionkit.testing import Cassette, CassetteMiss

# The real calls each test's functions made, by name (and item).
Calls = Counter[Any]


def llm_workflow(calls: Calls, *, suffix: str = "!") -> Workflow:
    """A sync step and an async step reporting usage both ways, with two models."""

    def outline(ctx: Any) -> list[str]:
        calls["outline"] += 1
        current_step().add_usage(TokenUsage(100, 20, 1), model="small")
        current_step().add_usage(TokenUsage(50, 10, 1), model="small")
        return [f"{ctx['topic']} part {n}" for n in range(2)]

    async def write(ctx: Any) -> PatternResult[str]:
        calls["write"] += 1
        await asyncio.sleep(0)
        current_step().add_usage(TokenUsage(300, 400, 1), model="large")
        text = " / ".join(ctx["outline"]) + suffix
        return PatternResult(text, cost=TokenUsage(7, 8, 1))

    def count(ctx: Any) -> int:
        calls["count"] += 1
        return len(ctx["write"])

    return Workflow(
        [
            Step("outline", outline),
            Step("write", write, depends_on=("outline",)),
            Step("count", count, depends_on=("write",)),
        ],
        inputs=("topic",),
    )


def rows(result: WorkflowResult) -> list[tuple[Any, ...]]:
    """The ledger rows, in an order that does not depend on which step finished first."""
    return sorted(
        (row.step, row.item or "", row.attempt, row.outcome, row.model or "", row.usage)
        for row in result.spending.entries
    )


def failure(error: pytest.ExceptionInfo[WorkflowFailed], step: str) -> BaseException:
    """The exception step ``step`` failed with (a map's: its first failed item's)."""
    found = error.value.errors[step]
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found


def test_replay_gives_the_recorded_outputs_cost_and_spending_without_calling(
    tmp_path: Path,
) -> None:
    path = tmp_path / "calls.jsonl"
    calls: Calls = Counter()
    recorded = Cassette(path, mode="record").wrap(llm_workflow(calls)).run_sync({"topic": "ox"})
    assert calls == {"outline": 1, "write": 1, "count": 1}
    assert recorded.outputs["write"] == "ox part 0 / ox part 1!"
    assert recorded.cost == TokenUsage(457, 438, 4)

    replay_calls: Calls = Counter()
    replayed = Cassette(path).wrap(llm_workflow(replay_calls)).run_sync({"topic": "ox"})
    assert replay_calls == {}
    assert replayed.outputs == recorded.outputs
    assert replayed.cost == recorded.cost
    assert replayed.spending.total == recorded.spending.total
    assert replayed.spending.spent == recorded.spending.spent
    assert replayed.spending.wasted == recorded.spending.wasted == TokenUsage()
    by_model = {model: spent.total for model, spent in replayed.spending.by_model().items()}
    assert by_model == {
        model: spent.total for model, spent in recorded.spending.by_model().items()
    }
    assert by_model == {
        "small": TokenUsage(150, 30, 2),
        "large": TokenUsage(300, 400, 1),
        None: TokenUsage(7, 8, 1),
    }
    assert rows(replayed) == rows(recorded)


def test_the_plain_workflow_without_a_cassette_spends_the_same(tmp_path: Path) -> None:
    """Recording changes nothing the run counts: the wrapped run is the run."""
    plain = llm_workflow(Counter()).run_sync({"topic": "ox"})
    recorded = Cassette(tmp_path / "c.jsonl", "record").wrap(llm_workflow(Counter()))
    result = recorded.run_sync({"topic": "ox"})
    assert result.outputs == plain.outputs
    assert result.cost == plain.cost
    assert rows(result) == rows(plain)


def test_a_changed_initial_context_value_is_a_miss_naming_the_step_and_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "calls.jsonl"
    Cassette(path, "record").wrap(llm_workflow(Counter())).run_sync({"topic": "ox"})
    calls: Calls = Counter()
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(llm_workflow(calls)).run_sync({"topic": "yak"})
    assert calls == {}
    miss = failure(error, "outline")
    assert isinstance(miss, CassetteMiss)
    assert isinstance(miss, ExecutionKitError)
    assert isinstance(miss, LookupError)
    assert (miss.step, miss.item_key, miss.changed) == ("outline", None, "ctx key 'topic'")
    assert miss.file == str(path)
    text = str(miss)
    assert "cassette miss" in text
    assert "'outline'" in text
    assert "ctx key 'topic'" in text
    assert "not called" in text


def test_a_changed_upstream_output_is_a_miss_of_the_step_reading_it(tmp_path: Path) -> None:
    """A later line for a step wins: here a re-recorded upstream step with a new output."""
    path = tmp_path / "calls.jsonl"
    Cassette(path, "record").wrap(llm_workflow(Counter())).run_sync({"topic": "ox"})

    def new_outline(ctx: Any) -> list[str]:
        return ["a new outline"]

    Cassette(path, "record").wrap(Workflow([Step("outline", new_outline)])).run_sync(
        {"topic": "ox"}
    )
    assert len(path.read_text().splitlines()) == 4  # appended, the first line kept

    calls: Calls = Counter()
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(llm_workflow(calls)).run_sync({"topic": "ox"})
    assert calls == {}
    assert error.value.checkpoint.outputs["outline"] == ["a new outline"]  # the later line
    miss = failure(error, "write")
    assert isinstance(miss, CassetteMiss)
    assert (miss.step, miss.changed) == ("write", "ctx key 'outline'")


def test_the_later_of_two_lines_for_one_step_wins(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    for answer in ("first", "second"):

        def step(ctx: Any, answer: str = answer) -> str:
            return answer

        Cassette(path, "record").wrap(Workflow([Step("a", step)])).run_sync()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["output"] for line in lines] == ["first", "second"]

    def unused(ctx: Any) -> str:
        raise AssertionError

    result = Cassette(path).wrap(Workflow([Step("a", unused)])).run_sync()
    assert result.outputs == {"a": "second"}


def mapping_workflow(calls: Calls) -> Workflow:
    def each(item: dict[str, Any], ctx: Any) -> PatternResult[str]:
        calls[item["id"]] += 1
        current_step().add_usage(TokenUsage(item["n"], 1, 1), model="small")
        return PatternResult(f"{ctx['prefix']}{item['id']}", cost=TokenUsage(0, item["n"], 0))

    return Workflow(
        [Step.map("each", each, over="items", key=lambda item: item["id"], max_concurrency=2)],
        inputs=("items", "prefix"),
    )


ITEMS = [{"id": "a", "n": 1}, {"id": "b", "n": 2}, {"id": "c", "n": 3}]


def test_map_items_are_recorded_and_replayed_by_key(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    calls: Calls = Counter()
    context = {"items": ITEMS, "prefix": "#"}
    recorded = Cassette(path, "record").wrap(mapping_workflow(calls)).run_sync(context)
    assert calls == {"a": 1, "b": 1, "c": 1}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((line["step"], line["item_key"]) for line in lines) == [
        ("each", "a"),
        ("each", "b"),
        ("each", "c"),
    ]

    # The items in another order: found by key, not by position.
    calls.clear()
    shuffled = {"items": ITEMS[::-1], "prefix": "#"}
    replayed = Cassette(path).wrap(mapping_workflow(calls)).run_sync(shuffled)
    assert calls == {}
    assert replayed.outputs["each"] == ["#c", "#b", "#a"]
    assert replayed.cost == recorded.cost
    assert rows(replayed) == rows(recorded)
    assert replayed.spending.by_item("each").keys() == {"a", "b", "c"}

    # One item changed: that item misses, naming its key and the item.
    changed = {"items": [*ITEMS[:2], {"id": "c", "n": 30}], "prefix": "#"}
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(mapping_workflow(calls)).run_sync(changed)
    assert calls == {}
    miss = failure(error, "each")
    assert isinstance(miss, CassetteMiss)
    assert (miss.step, miss.item_key, miss.changed) == ("each", "c", "the item")
    assert "(item 'c')" in str(miss)


def test_auto_mode_records_only_what_is_missing_or_changed(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    calls: Calls = Counter()
    Cassette(path, "record").wrap(mapping_workflow(calls)).run_sync(
        {"items": ITEMS[:2], "prefix": "#"}
    )
    calls.clear()
    changed = [{"id": "a", "n": 1}, {"id": "b", "n": 20}, {"id": "c", "n": 3}]
    auto = Cassette(path, "auto").wrap(mapping_workflow(calls))
    result = auto.run_sync({"items": changed, "prefix": "#"})
    assert calls == {"b": 1, "c": 1}  # b changed, c was missing; a replayed
    assert result.outputs["each"] == ["#a", "#b", "#c"]
    assert result.cost == TokenUsage(24, 27, 3)

    # Everything is on the cassette now: a replay calls nothing.
    calls.clear()
    replayed = (
        Cassette(path).wrap(mapping_workflow(calls)).run_sync({"items": changed, "prefix": "#"})
    )
    assert calls == {}
    assert replayed.outputs == result.outputs
    assert replayed.cost == result.cost

    # The same wrapped workflow again: what it recorded is replayed.
    calls.clear()
    assert auto.run_sync({"items": changed, "prefix": "#"}).outputs == result.outputs
    assert calls == {}


def test_auto_mode_records_a_step_whose_version_changed(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    calls: Calls = Counter()

    def ask(ctx: Any) -> str:
        calls["ask"] += 1
        return f"answer {calls['ask']}"

    def workflow(version: str) -> Workflow:
        return Workflow([Step("ask", ask, version=version)])

    Cassette(path, "record").wrap(workflow("v1")).run_sync()
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(workflow("v2")).run_sync()
    assert getattr(failure(error, "ask"), "changed", None) == "the step's version"
    assert Cassette(path, "auto").wrap(workflow("v2")).run_sync().outputs == {"ask": "answer 2"}
    assert calls["ask"] == 2


def nested_workflow(calls: Calls) -> Workflow:
    def draft(ctx: Any) -> str:
        calls["draft"] += 1
        current_step().add_usage(TokenUsage(5, 5, 1), model="small")
        return f"draft of {ctx['topic']}"

    async def judge(item: int, ctx: Any) -> PatternResult[int]:
        calls["judge", item] += 1
        return PatternResult(item * 10 + len(ctx["topic"]), cost=TokenUsage(1, 1, 1))

    def polish(ctx: Any) -> str:
        calls["polish"] += 1
        return str(ctx["draft"]).upper()

    inner = Workflow(
        [
            Step("draft", draft),
            Step("polish", polish, depends_on=("draft",)),
            Step("scores", lambda ctx: [1, 2]),
            Step.map("judge", judge, over="scores"),
        ]
    )
    per_item = Workflow([Step("shout", lambda ctx: f"{ctx['item']}!", version="1")])
    return Workflow(
        [
            Step("review", inner),
            Step.map("each", per_item, over="words"),
            Step("deeper", Workflow([Step("again", inner)])),
        ],
        inputs=("topic", "words"),
    )


def test_the_steps_of_sub_workflows_are_recorded_by_path(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    calls: Calls = Counter()
    context = {"topic": "owls", "words": {"x": "hoot", "y/z": "hush"}}
    recorded = Cassette(path, "record").wrap(nested_workflow(calls)).run_sync(context)
    assert calls["draft"] == 2
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    places = sorted((line["step"], line["item_key"] or "") for line in lines)
    assert places == sorted(
        [
            *[(f"{where}/draft", "") for where in ("review", "deeper/again")],
            *[(f"{where}/polish", "") for where in ("review", "deeper/again")],
            *[(f"{where}/scores", "") for where in ("review", "deeper/again")],
            *[(f"{where}/judge", key) for where in ("review", "deeper/again") for key in "01"],
            ("each/x/shout", ""),
            ("each/y%2Fz/shout", ""),  # a key holding / is escaped, as in question paths
        ]
    )

    calls.clear()
    replayed = Cassette(path).wrap(nested_workflow(calls)).run_sync(context)
    assert calls == {}
    assert replayed.outputs == recorded.outputs
    assert replayed.outputs["each"] == {"x": {"shout": "hoot!"}, "y/z": {"shout": "hush!"}}
    assert replayed.cost == recorded.cost
    assert rows(replayed) == rows(recorded)
    assert any(row[0] == "deeper/again/judge" for row in rows(replayed))

    # A change inside: the sub-workflow's step misses, named by its path.
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(nested_workflow(calls)).run_sync({**context, "topic": "bats"})
    assert calls == {}
    inner = failure(error, "review")
    assert isinstance(inner, WorkflowFailed)
    miss = inner.errors["draft"]
    assert isinstance(miss, CassetteMiss)
    assert (miss.step, miss.changed) == ("review/draft", "ctx key 'topic'")


def test_sync_functions_stay_sync_in_a_thread_and_async_ones_async(tmp_path: Path) -> None:
    threads: list[str] = []

    def plain(ctx: Any) -> int:
        threads.append(threading.current_thread().name)
        return 1

    async def coroutine(ctx: Any) -> int:
        await asyncio.sleep(0)
        return 2

    def plain_item(item: int, ctx: Any) -> int:
        return item

    async def async_item(item: int, ctx: Any) -> int:
        return item

    workflow = Workflow(
        [
            Step("plain", plain),
            Step("coroutine", coroutine),
            Step.map("plain_items", plain_item, over="items"),
            Step.map("async_items", async_item, over="items"),
        ]
    )
    for mode in ("record", "replay"):
        wrapped = Cassette(tmp_path / "c.jsonl", mode).wrap(workflow)
        kinds = [inspect.iscoroutinefunction(step.run) for step in wrapped.steps]
        assert kinds == [False, True, False, True]
        result = wrapped.run_sync({"items": [1, 2]})
        assert result.outputs["plain"] == 1
        assert result.outputs["coroutine"] == 2
        assert result.outputs["async_items"] == [1, 2]
    assert len(threads) == 1  # called once, when recording
    assert threads[0] != threading.main_thread().name


def test_a_step_that_raised_is_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    tries: Calls = Counter()

    def flaky(ctx: Any) -> str:
        tries["flaky"] += 1
        current_step().add_usage(TokenUsage(1, 1, 1))
        if tries["flaky"] == 1:
            msg = "the provider is down"
            raise ConnectionError(msg)
        return "fine"

    def broken(ctx: Any) -> str:
        msg = "always broken"
        raise ValueError(msg)

    workflow = Workflow(
        [
            Step("flaky", flaky, retries=1, retry_delay=0),
            Step("broken", broken),
        ]
    )
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path, "record").wrap(workflow).run_sync(on_error="continue")
    assert isinstance(failure(error, "broken"), ValueError)  # propagated as it was
    assert str(failure(error, "broken")) == "always broken"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["step"], line["output"]) for line in lines] == [("flaky", "fine")]
    # Only the attempt that returned, with its own usage (the failed one's is not replayed).
    assert lines[0]["usage"] == [
        {"model": None, "input_tokens": 1, "output_tokens": 1, "llm_calls": 1}
    ]


def test_a_miss_is_not_retried(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    calls: Calls = Counter()

    def step(ctx: Any) -> str:
        calls["step"] += 1
        return str(ctx["x"])

    workflow = Workflow([Step("s", step, retries=3, retry_delay=0, retry_on=(LookupError,))])
    Cassette(path, "record").wrap(workflow).run_sync({"x": "a"})
    wrapped = Cassette(path).wrap(workflow)
    assert wrapped.steps[0].retries == 3
    events: list[ev.Event] = []
    with pytest.raises(WorkflowFailed) as error:
        wrapped.run_sync({"x": "b"}, on_event=events.append)
    assert isinstance(failure(error, "s"), CassetteMiss)
    assert not [event for event in events if isinstance(event, ev.StepRetried)]
    assert calls["step"] == 1
    # What the step retried before, it still retries.
    retry_on = wrapped.steps[0].retry_on
    assert isinstance(KeyError("k"), retry_on)
    assert not isinstance(ValueError("v"), retry_on)
    assert not isinstance(CassetteMiss("s", None, "the item", str(path)), retry_on)


def test_an_output_that_is_not_plain_data_is_refused_naming_the_step(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    workflow = Workflow([Step("tags", lambda ctx: {"a", "b"})])
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path, "record").wrap(workflow).run_sync()
    refused = failure(error, "tags")
    assert isinstance(refused, CheckpointValueError)
    assert "cassette" in str(refused)
    assert "'tags'" in str(refused)
    assert not path.exists() or path.read_text() == ""


@dataclass(frozen=True)
class Verdict:
    score: int
    reason: str


def test_encode_and_decode_carry_outputs_that_are_not_plain_data(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"

    def judge(ctx: Any) -> Verdict:
        return Verdict(ctx["n"], "ok")

    def use(ctx: Any) -> str:
        assert isinstance(ctx["judge"], Verdict)
        return ctx["judge"].reason * ctx["judge"].score

    workflow = Workflow(
        [
            Step(
                "judge",
                judge,
                encode=lambda v: {"score": v.score, "reason": v.reason},
                decode=lambda d: Verdict(**d),
            ),
            Step("use", use, depends_on=("judge",)),
        ]
    )
    recorded = Cassette(path, "record").wrap(workflow).run_sync({"n": 2})
    replayed = Cassette(path).wrap(workflow).run_sync({"n": 2})
    assert replayed.outputs == recorded.outputs == {"judge": Verdict(2, "ok"), "use": "okok"}


def test_a_damaged_line_is_reported_with_its_file_and_number(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    Cassette(path, "record").wrap(llm_workflow(Counter())).run_sync({"topic": "ox"})
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], '{"cassette": 1, "step": "x", "outp', *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"calls\.jsonl, line 2: not a line of JSON") as error:
        Cassette(path).wrap(llm_workflow(Counter()))
    assert str(path) in str(error.value)

    path.write_text("\n".join([*lines, '{"cassette": 1, "step": 5, "output": 1}']) + "\n")
    with pytest.raises(ValueError, match=r"line 4: 'reads' must map"):
        Cassette(path, "auto").wrap(llm_workflow(Counter()))
    path.write_text("\n".join([*lines, '{"cassette": 2}']) + "\n")
    with pytest.raises(ValueError, match=r"line 4: format 2 is newer"):
        Cassette(path).wrap(llm_workflow(Counter()))
    path.write_text("\n".join(["[1, 2]", *lines]) + "\n")
    with pytest.raises(ValueError, match=r"line 1: not a JSON object but list"):
        Cassette(path).wrap(llm_workflow(Counter()))


def test_a_write_cut_short_at_the_end_is_skipped_and_never_joins_a_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "calls.jsonl"
    calls: Calls = Counter()
    Cassette(path, "record").wrap(llm_workflow(calls)).run_sync({"topic": "ox"})
    with path.open("a") as file:
        file.write('{"cassette": 1, "step": "count", "out')  # no newline: cut short
    replayed = Cassette(path).wrap(llm_workflow(calls)).run_sync({"topic": "ox"})
    assert replayed.outputs["count"] == 22
    # A record appended after it starts a line of its own.
    Cassette(path, "record").wrap(Workflow([Step("z", lambda ctx: 1)])).run_sync()
    last = path.read_text().splitlines()[-1]
    assert json.loads(last)["step"] == "z"


def test_replay_without_a_file_misses_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "never.jsonl"
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(llm_workflow(Counter())).run_sync({"topic": "ox"})
    miss = failure(error, "outline")
    assert isinstance(miss, CassetteMiss)
    assert miss.changed == "no recording of this step"
    assert "holds no recording" in str(miss)
    assert "does not exist" in str(miss)


def test_wrap_keeps_names_dependencies_options_and_fingerprints(tmp_path: Path) -> None:
    def first(ctx: Any) -> int:
        return 1

    async def each(item: int, ctx: Any) -> int:
        return item + int(ctx["first"])

    def ok(ctx: Any) -> bool:
        return True

    workflow = Workflow(
        [
            Step(
                "first",
                first,
                metadata={"team": "x"},
                retries=2,
                retry_delay=0,
                timeout=5.0,
                version="v3",
                when=ok,
                limit="llm",
                tokens_estimate=10,
            ),
            Step.map(
                "each",
                each,
                over="items",
                key=str,
                depends_on=("first",),
                max_concurrency=3,
                join="any",
            ),
            Step.ask("approve", lambda ctx: "ok?", depends_on=("each",)),
            Step.wait("later", seconds=0, depends_on=("approve",)),
            Step("sub", Workflow([Step("inner", first)]), depends_on=("first",)),
        ],
        inputs=("items",),
    )
    for mode in ("record", "replay", "auto"):
        wrapped = Cassette(tmp_path / "c.jsonl", mode).wrap(workflow)
        assert wrapped.inputs == workflow.inputs
        for mine, theirs in zip(wrapped.steps, workflow.steps, strict=True):
            assert type(mine) is type(theirs)
            different = {
                field.name
                for field in fields(mine)
                if getattr(mine, field.name) != getattr(theirs, field.name)
            }
            expected = {"run"} if mode != "replay" or not theirs.retries else {"run", "retry_on"}
            if theirs.name in {"approve", "later"}:
                assert mine is theirs  # asks and waits are kept as they are
                continue
            assert different == expected, theirs.name
            if not isinstance(theirs.run, Workflow):
                assert fingerprint(mine.run) == fingerprint(theirs.run) is not None
                assert mine.run.__wrapped__ is theirs.run  # type: ignore[union-attr]
        inner = wrapped.steps[-1].run
        assert isinstance(inner, Workflow)
        assert fingerprint(inner.steps[0].run) == fingerprint(first)


def test_checkpoints_of_a_wrapped_and_a_plain_run_have_the_same_code(tmp_path: Path) -> None:
    plain: list[WorkflowCheckpoint] = []
    taped: list[WorkflowCheckpoint] = []
    llm_workflow(Counter()).run_sync({"topic": "ox"}, checkpoint_fn=plain.append)
    wrapped = Cassette(tmp_path / "c.jsonl", "record").wrap(llm_workflow(Counter()))
    wrapped.run_sync({"topic": "ox"}, checkpoint_fn=taped.append)
    assert taped[-1].step_info == plain[-1].step_info
    assert all(info.get("code") for info in plain[-1].step_info.values())
    # A plain run resumes from the wrapped run's checkpoint: nothing changed, nothing runs.
    calls: Calls = Counter()
    resumed = llm_workflow(calls).run_sync(
        {"topic": "ox"}, resume_from=taped[-1], on_code_change="rerun"
    )
    assert calls == {}
    assert not resumed.invalidated


def test_only_the_recorded_attempts_usage_is_noted_and_add_usage_is_put_back(
    tmp_path: Path,
) -> None:
    """Steps running at once each record their own reports; the method is restored after."""
    original = StepContext.__dict__["add_usage"]
    started = threading.Barrier(3)

    def spend(item: int, ctx: Any) -> int:
        started.wait(timeout=5)  # all three items report while the others run
        for _ in range(item):
            current_step().add_usage(TokenUsage(item, 0, 1), model=f"m{item}")
        return item

    path = tmp_path / "c.jsonl"
    workflow = Workflow([Step.map("spend", spend, over="items")])
    Cassette(path, "record").wrap(workflow).run_sync({"items": [1, 2, 3]})
    assert StepContext.__dict__["add_usage"] is original
    lines = sorted(
        (json.loads(line) for line in path.read_text().splitlines()), key=lambda d: d["output"]
    )
    assert [line["usage"] for line in lines] == [
        [{"model": f"m{n}", "input_tokens": n * n, "output_tokens": 0, "llm_calls": n}]
        for n in (1, 2, 3)
    ]


def test_ctx_reads_by_get_contains_and_listing_are_compared(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"

    def optional(ctx: Any) -> str:
        return str(ctx.get("style", "plain")) + ("!" if "loud" in ctx else "")

    def listing(ctx: Any) -> list[str]:
        return sorted(ctx)

    workflow = Workflow([Step("optional", optional), Step("listing", listing)])
    Cassette(path, "record").wrap(workflow).run_sync({"style": "bold"})
    assert Cassette(path).wrap(workflow).run_sync({"style": "bold"}).outputs == {
        "optional": "bold",
        "listing": ["style"],
    }
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(workflow).run_sync({"style": "bold", "loud": True})
    assert getattr(failure(error, "optional"), "changed", None) == "ctx key 'loud'"
    assert getattr(failure(error, "listing"), "changed", None) == "the set of ctx keys"


def test_values_that_are_not_plain_data_count_by_their_fields_or_type(tmp_path: Path) -> None:
    class Client:
        def __init__(self, secret: str) -> None:
            self.secret = secret

    path = tmp_path / "c.jsonl"

    def ask(ctx: Any) -> str:
        assert ctx["client"] is not None
        return str(ctx["verdict"].score)

    workflow = Workflow([Step("ask", ask)])
    Cassette(path, "record").wrap(workflow).run_sync(
        {"client": Client("one"), "verdict": Verdict(1, "x")}
    )
    # Another client object: only its type counts.
    again = (
        Cassette(path)
        .wrap(workflow)
        .run_sync({"client": Client("two"), "verdict": Verdict(1, "x")})
    )
    assert again.outputs == {"ask": "1"}
    with pytest.raises(WorkflowFailed) as error:
        Cassette(path).wrap(workflow).run_sync(
            {"client": Client("one"), "verdict": Verdict(2, "x")}
        )
    assert getattr(failure(error, "ask"), "changed", None) == "ctx key 'verdict'"


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="mode must be 'replay', 'record' or 'auto'"):
        Cassette("x.jsonl", mode="play")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a Workflow, got list"):
        Cassette("x.jsonl").wrap([])  # type: ignore[arg-type]
    cassette = Cassette(Path("x.jsonl"), "auto")
    assert (cassette.path, cassette.mode) == ("x.jsonl", "auto")
    assert repr(cassette) == "Cassette('x.jsonl', mode='auto')"
