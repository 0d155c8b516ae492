"""Property: the ledger matches the model's own bill, call for call, through kills and resumes.

A fake model writes a bill line for every call it serves. Random workflows
(plain and async steps, maps, retries, steps that fail for good and are
resumed) call it, report each call with ``add_usage`` or ``PatternResult``,
and are killed at random calls: the store keeps only what ``checkpoint_fn``
received before the kill, and the run resumes from the latest of it. At the
end, for every step (and item):

* no double count: what the ledger knows is at most what was billed;
* no loss: when it knows less, the step has an ``"unknown"`` row (it was in
  flight at a kill); without kills, the ledger equals the bill exactly;
* the documented limit: an invocation killed before it handed any checkpoint
  to ``checkpoint_fn`` leaves no trace at all, so its calls are not expected
  (docs/how-to/count-what-you-pay.md says so);
* the run's ``cost`` is the sum of its ledger.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from typing import Any, Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executionkit import (
    BudgetExceeded,
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)

Schedule = Literal["batch", "eager"]


class Killed(BaseException):
    """The process 'dies' here: nothing handed to checkpoint_fn from now on is stored."""


class World:
    """The fake model, its bill, the store, and the kill switch."""

    def __init__(self, kills: list[int], failing: dict[str, int]) -> None:
        self.kills = sorted(kills)
        self.failing = failing  # step -> how many attempts (over all runs) fail first
        self.calls = 0
        self.bill: dict[tuple[str, str | None], TokenUsage] = defaultdict(TokenUsage)
        self.attempts: dict[tuple[str, str | None], int] = defaultdict(int)
        self.stored: list[dict[str, Any]] = []
        self.dead = False

    def save(self, checkpoint: WorkflowCheckpoint) -> None:
        if not self.dead:
            self.stored.append(json.loads(json.dumps(checkpoint.to_dict())))

    def call(self, usage: TokenUsage) -> TokenUsage:
        """Serve one model call: bill it first (the provider charges), then maybe die.

        Once the process has "died", nothing it does reaches the provider: a plain
        step in a thread learns of the death only when the run does, and a real
        kill -9 would have stopped it with the rest of the process.
        """
        if self.dead:
            raise Killed
        step = current_step()
        self.calls += 1
        self.bill[step.name, step.item_key] += usage
        if self.kills and self.calls >= self.kills[0]:
            self.kills.pop(0)
            self.dead = True
            raise Killed
        return usage

    def work(self, name: str, key: str | None, calls: int, via_result: bool) -> Any:
        step = current_step()
        spent = TokenUsage()
        self.attempts[name, key] += 1
        fails = self.attempts[name, key] <= self.failing.get(name, 0)
        for number in range(calls):
            usage = TokenUsage(3 + number, 1, 1)
            self.call(usage)
            if via_result and not fails and number == calls - 1:
                spent += usage  # reported with the result instead (a failure has none)
            else:
                step.add_usage(usage, model=f"m{number % 2}")
        if fails:
            msg = f"{name} attempt fails"
            raise ValueError(msg)
        return PatternResult(f"{name}:{key}", cost=spent)


def build(world: World, shape: list[dict[str, Any]]) -> Workflow:
    steps: list[Step] = []
    for index, spec in enumerate(shape):
        name = f"s{index}"
        deps = tuple(f"s{d}" for d in spec["deps"])
        calls, via, retries = spec["calls"], spec["via_result"], spec["retries"]

        def plain(ctx: Any, name: str = name, calls: int = calls, via: bool = via) -> Any:
            return world.work(name, None, calls, via)

        async def coro(ctx: Any, name: str = name, calls: int = calls, via: bool = via) -> Any:
            await asyncio.sleep(0)
            return world.work(name, None, calls, via)

        async def item(
            value: int, ctx: Any, name: str = name, calls: int = calls, via: bool = via
        ) -> Any:
            await asyncio.sleep(0)
            return world.work(name, current_step().item_key, calls, via)

        if spec["kind"] == "map":
            steps.append(
                Step.map(name, item, over="xs", depends_on=deps, retries=retries, retry_delay=0)
            )
        else:
            run = plain if spec["kind"] == "plain" else coro
            steps.append(Step(name, run, depends_on=deps, retries=retries, retry_delay=0))
    return Workflow(steps)


step_spec = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["plain", "async", "map"]),
        "calls": st.integers(0, 3),
        "via_result": st.booleans(),
        "retries": st.integers(0, 2),
        "fails": st.integers(0, 3),
        "deps_seed": st.integers(0, 2**16),
    }
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[int], Schedule]:
    specs: list[dict[str, Any]] = draw(st.lists(step_spec, min_size=1, max_size=5))
    for index, spec in enumerate(specs):
        seed: int = spec.pop("deps_seed")
        spec["deps"] = [d for d in range(index) if (seed >> d) & 1]
    kills = draw(st.lists(st.integers(1, 30), max_size=3, unique=True))
    schedule: Schedule = draw(st.sampled_from(["batch", "eager"]))
    return specs, kills, schedule


async def run_to_the_end(world: World, workflow: Workflow, schedule: Schedule) -> Any:
    """Run, resuming from the store after every kill or failure, until it completes."""
    for _ in range(40):
        latest = world.stored[-1] if world.stored else None
        world.dead = False
        stored_before = len(world.stored)
        bill_before = dict(world.bill)
        try:
            return await workflow.run(
                {"xs": [1, 2]},
                checkpoint_fn=world.save,
                resume_from=None if latest is None else WorkflowCheckpoint.from_dict(latest),
                schedule=schedule,
            )
        except Killed:
            if len(world.stored) == stored_before:
                # Killed before this invocation's first checkpoint: nothing of it was
                # stored, so nothing of it can be counted (the documented limit).
                for where, usage in invocation_bill(world, bill_before).items():
                    world.bill[where] -= usage
        except (WorkflowFailed, BudgetExceeded):
            pass
    raise AssertionError("the run never completed")


def invocation_bill(
    world: World, before: dict[tuple[str, str | None], TokenUsage]
) -> dict[tuple[str, str | None], TokenUsage]:
    return {where: usage - before.get(where, TokenUsage()) for where, usage in world.bill.items()}


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(scenarios())
def test_the_ledger_matches_the_bill_through_kills_and_resumes(
    scenario: tuple[list[dict[str, Any]], list[int], Schedule],
) -> None:
    specs, kills, schedule = scenario
    failing = {f"s{i}": spec["fails"] for i, spec in enumerate(specs)}
    world = World(kills, failing)
    result = asyncio.run(run_to_the_end(world, build(world, specs), schedule))
    killed = len(kills) != len(world.kills)
    known: dict[tuple[str, str | None], TokenUsage] = defaultdict(TokenUsage)
    unknown: set[tuple[str, str | None]] = set()
    total = TokenUsage()
    for row in result.spending.entries:
        total += row.usage
        if row.outcome == "unknown":
            unknown.add((row.step, row.item))
        else:
            known[row.step, row.item] += row.usage
    assert result.cost == total
    for where in set(world.bill) | set(known):
        billed, counted = world.bill[where], known[where]
        # No double count, ever.
        assert counted.input_tokens <= billed.input_tokens, (where, counted, billed)
        assert counted.llm_calls <= billed.llm_calls, (where, counted, billed)
        if counted != billed:
            # Lost only what was in flight at a kill, and then said so.
            assert killed, (where, counted, billed)
            assert where in unknown or (where[0], None) in unknown, (where, result.spending)
    if not killed:
        assert not unknown
        assert total == sum(world.bill.values(), TokenUsage())


ATTEMPT_OUTCOMES = {"ok", "failed", "timeout", "cancelled", "rate_limited"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_attempts_log_agrees_with_the_ledger_and_the_calls_through_kills_and_resumes(
    scenario: tuple[list[dict[str, Any]], list[int], Schedule],
) -> None:
    """Format 5's ``attempts``: one entry per attempt that ended, never one more.

    Through the same kills and resumes: no step (item) has more entries than
    attempts it made; every output recorded has exactly one ``"ok"`` entry, of
    the attempt that made it, kept across every resume; every ledger row of an
    attempt that ended here has the entry of that attempt, ended the same way;
    each entry's times are ordered and fall within the test.
    """
    specs, kills, schedule = scenario
    failing = {f"s{i}": spec["fails"] for i, spec in enumerate(specs)}
    world = World(kills, failing)
    began = int(time.time() * 1000)
    result = asyncio.run(run_to_the_end(world, build(world, specs), schedule))
    ended = int(time.time() * 1000) + 1
    final = world.stored[-1]
    entries = [tuple(entry) for entry in final["attempts"]]
    by_place: dict[tuple[str, str | None], list[tuple[Any, ...]]] = defaultdict(list)
    for entry in entries:
        step, item, attempt, outcome, started, stopped = entry
        assert outcome in ATTEMPT_OUTCOMES, entry
        assert began <= started <= stopped <= ended, (entry, began, ended)
        assert attempt >= 1, entry
        by_place[step, item].append(entry)
    for place, found in by_place.items():
        assert len(found) <= world.attempts[place], (place, found, world.attempts[place])
        assert sum(entry[3] == "ok" for entry in found) <= 1, (place, found)
    for index, spec in enumerate(specs):
        name = f"s{index}"
        places = [(name, key) for key in ("0", "1")] if spec["kind"] == "map" else [(name, None)]
        for place in places:
            oks = [entry for entry in by_place[place] if entry[3] == "ok"]
            assert len(oks) == 1, (place, by_place[place], result.outputs)
    ran_here = {
        (row.step, row.item, row.attempt, row.outcome)
        for row in result.spending.entries
        if row.outcome in ATTEMPT_OUTCOMES
    }
    assert ran_here <= {entry[:4] for entry in entries}, (ran_here, entries)
