"""Named limits and 429s: against a simulated provider that enforces its own window.

The provider (`tests/fake_provider.py`) admits ``requests`` calls and ``tokens``
tokens per sliding window and answers 429 with a retry-after beyond them. With
limits set just under its own, a map of 500 items gets no 429 and no window
over the limit; with limits above them, every 429 pauses the key and the run
still finishes with every item recorded. The window's own accounting is tested
with explicit times, without a clock.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
import uuid
from typing import Any

import pytest
from fake_provider import FakeProvider, RateLimitedError
from hypothesis import given, settings
from hypothesis import strategies as st

from executionkit import (
    Limit,
    RateLimited,
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
from executionkit._limits import BACKOFF_FIRST, BACKOFF_MAX, Window, rate_limit_of
from executionkit._run._attempt import RATE_LIMITED_MAX
from executionkit._run._limiter import Limiter


def key() -> str:
    """A key of its own: every run of the process shares a key's window."""
    return f"k-{uuid.uuid4().hex[:8]}"


# --- the window, with explicit times ----------------------------------------------------


def test_requests_in_a_sliding_window() -> None:
    window = Window(Limit("k", requests=2, per=1.0))
    for at in (0.0, 0.25):
        assert window.wait(at, 0) == 0
        window.start(window.take(0), at)
    assert window.wait(0.5, 0) == pytest.approx(0.5)  # until the start at 0 leaves
    assert window.wait(0.999, 0) > 0
    assert window.wait(1.0, 0) == 0  # (0, 1]: the start at 0 has left


def test_admitted_attempts_hold_their_place_until_they_start() -> None:
    window = Window(Limit("k", requests=2, per=1.0))
    first = window.take(0)
    second = window.take(0)
    assert window.wait(0.0, 0) == math.inf  # two admitted: only a start or an end moves it
    window.start(first, 5.0)
    window.start(second, 5.5)
    assert window.wait(5.6, 0) == pytest.approx(0.4)  # counted from their real starts
    third = window.take  # nothing admitted yet
    assert callable(third)
    window.done(first, 0)
    window.done(second, 0)
    assert window.wait(6.5, 0) == 0


def test_an_admitted_attempt_that_never_starts_gives_its_place_back() -> None:
    window = Window(Limit("k", requests=1, tokens=100, per=1.0))
    ticket = window.take(80)
    assert (window.reserved, window.reserved_tokens) == (1, 80)
    assert window.wait(0.0, 0) == math.inf
    window.done(ticket, 0)
    assert (window.reserved, window.reserved_tokens, window.running) == (0, 0, 0)
    assert window.wait(0.0, 50) == 0


def test_tokens_reserve_the_estimate_then_count_what_was_spent() -> None:
    window = Window(Limit("k", tokens=1000, per=1.0))
    first = window.take(600)
    window.start(first, 0.0)
    assert window.wait(0.1, 600) == pytest.approx(0.9)  # 600 + 600 > 1000
    assert window.wait(0.1, 400) == 0
    window.done(first, 100)  # it spent less than estimated
    assert window.tokens_in_window == 100
    assert window.wait(0.2, 900) == 0
    assert window.estimate(None) == 100  # the key's mean from now on
    assert window.estimate(7) == 7


def test_an_estimate_over_the_whole_window_waits_for_an_empty_window() -> None:
    window = Window(Limit("k", tokens=100, per=1.0))
    ticket = window.take(10)
    window.start(ticket, 0.0)
    assert window.wait(0.5, 5000) == pytest.approx(0.5)  # capped at the limit: room at 1.0
    window.done(ticket, 10)
    assert window.wait(1.0, 5000) == 0


def test_concurrency_waits_for_an_attempt_to_end() -> None:
    window = Window(Limit("k", concurrency=2))
    tickets = [window.take(0) for _ in range(2)]
    assert window.wait(0.0, 0) == math.inf
    window.done(tickets[0], 0)
    assert window.wait(0.0, 0) == 0
    window.done(tickets[0], 0)  # a second end of the same attempt changes nothing
    assert window.running == 1


def test_a_429_pauses_the_key_and_the_backoff_doubles_up_to_its_cap() -> None:
    window = Window(Limit("k", concurrency=10))
    assert window.pause(0.0, 2.5) == 2.5
    assert window.wait(1.0, 0) == pytest.approx(1.5)
    waits = [window.pause(0.0, None) for _ in range(9)]
    assert waits[:3] == [BACKOFF_FIRST, 2 * BACKOFF_FIRST, 4 * BACKOFF_FIRST]
    assert waits[-1] == BACKOFF_MAX
    ticket = window.take(0)
    window.start(ticket, 100.0)
    window.done(ticket, 0)  # an attempt that was not limited resets the backoff
    assert window.pause(100.0, None) == BACKOFF_FIRST


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key": ""}, "non-empty str"),
        ({"key": "k", "requests": 0}, "requests must be a positive int"),
        ({"key": "k", "tokens": 1.5}, "tokens must be a positive int"),
        ({"key": "k", "concurrency": True}, "concurrency must be a positive int"),
        ({"key": "k", "requests": 1, "per": 0}, "positive, finite number of seconds"),
        ({"key": "k", "requests": 1, "per": math.inf}, "positive, finite number of seconds"),
        ({"key": "k"}, "limits nothing"),
    ],
)
def test_a_limit_names_what_is_wrong(fields: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        Limit(**fields)


def test_a_limit_as_the_command_line_writes_it() -> None:
    assert Limit("openai", requests=500, tokens=10**6).text() == (
        "openai:requests=500,tokens=1000000,per=60"
    )


# --- recognising a 429 ----------------------------------------------------------------


class _Response:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers


class _ClientError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = _Response(status, headers or {})


def test_429s_are_recognised_as_the_common_clients_raise_them() -> None:
    assert rate_limit_of(RateLimited(retry_after=3)) == (True, 3.0)
    assert rate_limit_of(RateLimited()) == (True, None)
    assert rate_limit_of(_ClientError(429, {"retry-after": "7"})) == (True, 7.0)
    assert rate_limit_of(_ClientError(429, {"Retry-After": "2.5"})) == (True, 2.5)
    assert rate_limit_of(_ClientError(429, {"retry-after-ms": "1500"})) == (True, 1.5)
    assert rate_limit_of(_ClientError(429)) == (True, None)
    assert rate_limit_of(_ClientError(500, {"retry-after": "7"})) == (False, None)
    assert rate_limit_of(ValueError("429")) == (False, None)
    assert rate_limit_of(KeyboardInterrupt()) == (False, None)
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    found, after = rate_limit_of(_ClientError(429, {"retry-after": later}))
    assert found
    assert after is not None
    assert 25 < after <= 30
    own = RateLimitedError(0.25)  # the simulated provider's, shaped like httpx's
    assert rate_limit_of(own) == (True, 0.25)
    status = Exception("aiohttp style")
    status.status = 429  # type: ignore[attr-defined]
    assert rate_limit_of(status) == (True, None)


def test_a_bad_retry_after_is_refused() -> None:
    with pytest.raises(ValueError, match="retry_after must be seconds"):
        RateLimited(retry_after=-1)
    with pytest.raises(ValueError, match="retry_after must be seconds"):
        RateLimited(retry_after=math.nan)


# --- runs against the simulated provider -----------------------------------------------


def _calling(provider: FakeProvider, tokens: int) -> Any:
    async def call(item: int, ctx: Any) -> int:
        current_step().add_usage(await provider.acall(tokens), model="m")
        return item

    return call


def _calling_plain(provider: FakeProvider, tokens: int) -> Any:
    def call(item: int, ctx: Any) -> int:
        current_step().add_usage(provider.call(tokens), model="m")
        return item

    return call


def _map(run: Any, items: int, limit: str, **options: Any) -> Workflow:
    return Workflow(
        [
            Step("split", lambda ctx: list(range(items))),
            Step.map("each", run, over="split", limit=limit, **options),
        ]
    )


@pytest.mark.parametrize("plain", [False, True], ids=["async", "plain"])
def test_limits_just_under_the_provider_s_get_no_429(plain: bool) -> None:
    # Half a second, so that a loaded machine's thread hand-offs (milliseconds) stay
    # well inside the 20 calls of slack between our limit and the provider's.
    provider = FakeProvider(requests=250, tokens=25_000, per=0.5)
    name = key()
    call = _calling_plain(provider, 100) if plain else _calling(provider, 100)
    saved: list[WorkflowCheckpoint] = []
    result = _map(call, 500, name).run_sync(
        limits=[Limit(name, requests=230, tokens=23_000, per=0.5)], checkpoint_fn=saved.append
    )
    assert provider.rejected == 0
    assert not provider.over_limit()  # never over the provider's 250
    if not plain:
        # Counted from the moment the coroutine calls: exactly ours. A thread is
        # counted as it starts, a moment before its call reaches the provider.
        assert provider.max_requests_in_window() <= 230
    assert len(result.outputs["each"]) == 500
    assert result.cost == TokenUsage(50_000, 0, 500)
    assert all(not c.in_flight_items or c.in_flight_items["each"] <= 500 for c in saved)


def test_tokens_alone_keep_the_provider_s_token_window() -> None:
    provider = FakeProvider(tokens=1000, per=0.1)
    name = key()
    result = _map(_calling(provider, 100), 60, name, tokens_estimate=100).run_sync(
        limits=[Limit(name, tokens=950, per=0.1)]
    )
    assert provider.rejected == 0
    assert provider.max_tokens_in_window() <= 950
    assert result.cost.input_tokens == 6000


def test_limits_above_the_provider_s_pause_on_every_429_and_lose_no_item() -> None:
    provider = FakeProvider(requests=10, per=0.05)
    name = key()
    seen: list[ev.Event] = []
    result = _map(_calling(provider, 1), 80, name).run_sync(
        limits=[Limit(name, requests=40, per=0.05)], on_event=seen.append
    )
    assert provider.rejected > 0  # the provider refused some: our limit was above its own
    assert len(provider.accepted) == 80
    assert not provider.over_limit()
    assert result.outputs["each"] == list(range(80))
    retried = [e for e in seen if isinstance(e, ev.StepRetried)]
    assert len(retried) == provider.rejected  # every 429 retried, none failed
    assert all(isinstance(e.error, RateLimitedError) for e in retried)


def test_a_429_spends_no_retry_and_counts_what_it_reported() -> None:
    tries: list[int] = []

    async def flaky(ctx: Any) -> str:
        attempt = current_step().attempt
        tries.append(attempt)
        current_step().add_usage(TokenUsage(10, 0, 1), model="m")
        if attempt <= 3:
            raise RateLimited(retry_after=0)
        return "ok"

    name = key()
    saved: list[WorkflowCheckpoint] = []
    result = Workflow([Step("call", flaky, limit=name)]).run_sync(
        limits=[Limit(name, concurrency=1)], checkpoint_fn=saved.append
    )
    assert tries == [1, 2, 3, 4]  # retries=0, yet it ran again after each 429
    outcomes = [(row.attempt, row.outcome) for row in result.spending.entries]
    assert outcomes == [(1, "rate_limited"), (2, "rate_limited"), (3, "rate_limited"), (4, "ok")]
    assert result.spending.wasted == TokenUsage(30, 0, 3)
    assert result.cost == TokenUsage(40, 0, 4)
    again = WorkflowCheckpoint.from_dict(saved[-1].to_dict())
    assert [row.outcome for row in again.ledger].count("rate_limited") == 3


def test_past_the_cap_a_429_is_an_ordinary_failure() -> None:
    tries: list[int] = []

    def always(ctx: Any) -> str:
        tries.append(1)
        raise RateLimited(retry_after=0)

    with pytest.raises(WorkflowFailed) as caught:
        Workflow([Step("call", always)]).run_sync()
    assert len(tries) == RATE_LIMITED_MAX + 1  # the cap's 429s, then one that fails
    assert isinstance(caught.value.errors["call"], RateLimited)


def test_a_step_without_a_limit_waits_the_retry_after_itself() -> None:
    tries: list[float] = []

    async def once(ctx: Any) -> str:
        tries.append(time.monotonic())
        if len(tries) == 1:
            raise _ClientError(429, {"retry-after": "0.05"})
        return "ok"

    result = Workflow([Step("call", once)]).run_sync()
    assert result.outputs["call"] == "ok"
    assert tries[1] - tries[0] >= 0.05


def test_concurrency_is_never_exceeded_by_a_map_and_its_retries() -> None:
    provider = FakeProvider(enforce=False)
    name = key()

    async def held(item: int, ctx: Any) -> int:
        with provider.hold():
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        if item % 7 == 0 and current_step().attempt == 1:
            raise RateLimited(retry_after=0)
        return item

    result = _map(held, 60, name).run_sync(limits=[Limit(name, concurrency=3)])
    assert result.outputs["each"] == list(range(60))
    assert provider.max_concurrent == 3


def test_starts_and_ends_on_the_loop_are_counted_before_any_admission() -> None:
    """`start_soon`/`end_soon` count at the pass's end, or as soon as anything asks the window.

    An attempt that started and ended in one pass counts as a start (never as
    one that gave its place back); its stamp is no earlier than its start; an
    admission in the same pass sees it; the run's end counts what is pending.
    """
    name = key()
    limiter = Limiter([Limit(name, requests=2, concurrency=5, per=60)])
    window = limiter.windows[name]

    async def one_pass() -> None:
        (first,), _ = limiter.admit_up_to(name, None, 1)
        before = time.monotonic()
        limiter.start_soon(first)
        limiter.end_soon(first, 7)
        limiter.end_soon(first, 9)  # ended once: the second is ignored
        assert first.started is None  # not stamped yet: still this pass
        admitted, wait = limiter.admit_up_to(name, None, 5)  # counts what is pending first
        stamped: float | None = getattr(first, "started")  # noqa: B009 - changed by the call
        assert stamped is not None
        assert stamped >= before
        assert len(admitted) == 1  # two requests per window: one is the ended attempt
        assert wait > 0
        (second,) = admitted
        limiter.start_soon(second)
        await asyncio.sleep(0)  # the pass ends: its start is stamped
        assert second.started is not None
        assert window.running == 1
        limiter.end_soon(second, 3)
        limiter.close()  # the run ends before the pass does: nothing is left uncounted

    asyncio.run(one_pass())
    assert window.running == 0
    assert window.reserved == 0
    assert window.wait(time.monotonic(), 0) > 0  # both starts are in the window


def test_two_runs_of_one_process_share_a_key() -> None:
    provider = FakeProvider(enforce=False)
    name = key()

    async def held(item: int, ctx: Any) -> int:
        with provider.hold():
            await asyncio.sleep(0.001)
        return item

    async def both() -> None:
        limits = [Limit(name, concurrency=2)]
        await asyncio.gather(
            _map(held, 20, name).run(limits=limits), _map(held, 20, name).run(limits=limits)
        )

    asyncio.run(both())
    assert provider.max_concurrent == 2


def test_waiting_for_a_limit_holds_no_concurrency_slot() -> None:
    """With max_concurrency=2, a step waiting for its key leaves its slot to another step."""
    name = key()

    async def main() -> list[str]:
        order: list[str] = []
        other_ran = asyncio.Event()

        async def holder(ctx: Any) -> str:
            order.append("holder")
            await other_ran.wait()  # only the free step can set it: a deadlock otherwise
            return "held"

        async def waiter(ctx: Any) -> str:
            order.append("waiter")
            return "waited"

        async def free(ctx: Any) -> str:
            order.append("free")
            other_ran.set()
            return "free"

        workflow = Workflow(
            [
                Step("holder", holder, limit=name),
                Step("waiter", waiter, limit=name),
                Step("free", free),
            ]
        )
        seen: list[ev.Event] = []
        await asyncio.wait_for(
            workflow.run(
                limits=[Limit(name, concurrency=1)], max_concurrency=2, on_event=seen.append
            ),
            timeout=30,
        )
        waits = [e for e in seen if isinstance(e, ev.WaitingForLimit)]
        assert [(e.step, e.key, e.seconds) for e in waits] == [("waiter", name, math.inf)]
        return order

    order = asyncio.run(main())
    assert order.index("free") < order.index("waiter")


def test_a_sub_workflow_s_steps_draw_on_the_parent_s_limits() -> None:
    provider = FakeProvider(enforce=False)
    name = key()

    async def held(ctx: Any) -> int:
        with provider.hold():
            await asyncio.sleep(0.001)
        return 1

    inner = Workflow([Step(f"s{i}", held, limit=name) for i in range(6)])
    outer = Workflow([Step("a", inner), Step("b", inner)])
    result = outer.run_sync(limits=[Limit(name, concurrency=2)])
    assert set(result.outputs) == {"a", "b"}
    assert provider.max_concurrent == 2


def test_a_map_waiting_for_its_limit_says_so_once_per_wait() -> None:
    name = key()
    seen: list[ev.Event] = []
    _map(lambda item, ctx: item, 5, name, inline=True).run_sync(
        limits=[Limit(name, requests=2, per=0.02)], on_event=seen.append
    )
    waits = [e for e in seen if isinstance(e, ev.WaitingForLimit)]
    assert waits
    assert all(e.step == "each" and e.key == name and e.item is None for e in waits)
    # Until the oldest start leaves the window, or (admitted, not started yet) unknown.
    assert all(0 < e.seconds <= 0.02 or e.seconds == math.inf for e in waits)
    assert any(e.seconds <= 0.02 for e in waits)


# --- arguments ----------------------------------------------------------------------------


def test_a_step_drawing_on_a_missing_limit_is_refused_before_anything_runs() -> None:
    ran: list[str] = []
    workflow = Workflow([Step("a", lambda ctx: ran.append("a"), limit="openai")])
    with pytest.raises(RunArgumentError) as caught:
        workflow.run_sync(limits=[Limit("opneai", requests=1)])
    message = str(caught.value)
    assert "step 'a' draws on limit 'openai'" in message
    assert "has 'opneai'" in message
    assert "did you mean 'opneai'" in message
    assert ran == []
    with pytest.raises(RunArgumentError, match="has none"):
        workflow.run_sync()


def test_a_sub_workflow_s_missing_limit_is_named_with_its_path() -> None:
    inner = Workflow([Step("draft", lambda ctx: 1, limit="claude")])
    with pytest.raises(RunArgumentError, match="step 'draft' of step 'research'"):
        Workflow([Step("research", inner)]).run_sync()


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (Limit("k", requests=1), "must be a list of executionkit.Limit"),
        ("k", "must be a list of executionkit.Limit"),
        ([{"key": "k"}], r"limits\[0\] must be an executionkit.Limit"),
        ([Limit("k", requests=1), Limit("k", tokens=5)], "two limits have the key 'k'"),
    ],
)
def test_bad_limits_are_named(limits: Any, message: str) -> None:
    with pytest.raises(RunArgumentError, match=message):
        Workflow([Step("a", lambda ctx: 1)]).run_sync(limits=limits)


def test_step_limit_settings_are_checked() -> None:
    with pytest.raises(WorkflowDefinitionError, match="limit must be the key of a Limit"):
        Step("a", lambda ctx: 1, limit="")
    with pytest.raises(WorkflowDefinitionError, match="tokens_estimate is only used with limit"):
        Step("a", lambda ctx: 1, tokens_estimate=10)
    with pytest.raises(WorkflowDefinitionError, match="tokens_estimate must be an int"):
        Step("a", lambda ctx: 1, limit="k", tokens_estimate=-1)
    inner = Workflow([Step("x", lambda ctx: 1)])
    with pytest.raises(WorkflowDefinitionError, match="a sub-workflow's own steps"):
        Step("a", inner, limit="k")


# --- shared through a store ------------------------------------------------------------


def test_a_shared_window_reads_back_what_it_wrote() -> None:
    from executionkit._limits import Shared  # noqa: PLC0415

    limit = Limit("k", concurrency=2, requests=3, per=10.0)
    first = Shared(limit, None, 100.0)
    ids = first.admit(100.0, None, 5, "p:1")
    assert ids == ["p:1:0", "p:1:1"]  # concurrency 2
    first.start(ids[0], 100.5)
    state = first.dump(100.5)
    second = Shared(limit, state, 101.0)
    assert second.admit(101.0, None, 5, "p:2") == []
    second.done(ids[0], 0, limited=False)
    third = Shared(limit, second.dump(101.0), 101.0)
    # One running, one start in the window: a place, and one more start allowed.
    assert third.admit(101.0, None, 5, "p:3") == ["p:3:0"]
    assert third.window.running == 2


def test_a_dead_process_s_places_come_back_when_its_leases_expire() -> None:
    from executionkit._limits import LEASE, Shared  # noqa: PLC0415

    limit = Limit("k", concurrency=1)
    held = Shared(limit, None, 0.0)
    (ticket_id,) = held.admit(0.0, None, 1, "dead:1")
    state = held.dump(0.0)
    assert Shared(limit, state, LEASE / 2).admit(LEASE / 2, None, 1, "live:1") == []
    renewed = Shared(limit, state, LEASE / 2)
    renewed.renew([ticket_id], LEASE / 2)
    state = renewed.dump(LEASE / 2)
    assert Shared(limit, state, LEASE + 1).admit(LEASE + 1, None, 1, "live:2") == []
    assert Shared(limit, state, 2 * LEASE).admit(2 * LEASE, None, 1, "live:3") == ["live:3:0"]


def test_two_runs_on_one_sqlite_file_share_a_key(tmp_path: Any) -> None:
    """Two runs, each on its own thread, loop and store object, draw on the file's row.

    (The processes that share a database are in test_limits_shared.py.)
    """
    import threading  # noqa: PLC0415

    from executionkit.stores import SQLiteStore  # noqa: PLC0415

    provider = FakeProvider(enforce=False)
    name = key()
    barrier = threading.Barrier(2)

    async def held(item: int, ctx: Any) -> int:
        with provider.hold():
            await asyncio.sleep(0.002)
        return item

    errors: list[BaseException] = []

    def one(number: int) -> None:
        store = SQLiteStore(tmp_path / "runs.db")
        try:
            barrier.wait(timeout=30)
            _map(held, 15, name).run_sync(
                limits=[Limit(name, concurrency=2)], checkpoint_fn=store, run_id=f"r{number}"
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert provider.max_concurrent == 2


def test_processes_take_turns_for_a_shared_key() -> None:
    """A process that waited longer is served first; one served in part goes to the back."""
    from executionkit._limits import STALE_WAIT, Shared  # noqa: PLC0415

    limit = Limit("k", concurrency=1)
    state = Shared(limit, None, 0.0)
    (held,) = state.admit(0.0, None, 1, "a:1", "a")
    assert state.admit(0.1, None, 1, "b:1", "b") == []  # no room: b queues
    state.done(held, 0, limited=False)
    # Room now, but b waited: a's next item waits behind it, and b gets the place.
    assert state.admit(0.2, None, 1, "a:2", "a") == []
    assert state.admit(0.25, None, 1, "b:2", "b") == ["b:2:0"]
    state = Shared(limit, state.dump(0.25), 0.3)
    state.done("b:2:0", 0, limited=False)
    assert state.admit(0.3, None, 5, "b:3", "b") == []  # a waits since 0.2: its turn
    assert state.admit(0.35, None, 5, "a:3", "a") == ["a:3:0"]  # got 1 of 5: to the back
    assert state.waiting["b"][0] < state.waiting["a"][0]  # b is ahead now
    # A process that stops looking leaves the queue.
    later = Shared(limit, state.dump(0.35), 0.35 + STALE_WAIT + 0.1)
    assert "b" not in later.waiting


@settings(max_examples=300, deadline=None)
@given(
    requests=st.one_of(st.none(), st.integers(1, 5)),
    tokens=st.one_of(st.none(), st.integers(1, 300)),
    concurrency=st.one_of(st.none(), st.integers(1, 4)),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["take", "start", "done", "pause", "tick"]),
            st.integers(0, 400),
            st.floats(0, 0.6),
        ),
        max_size=25,
    ),
    estimate=st.integers(0, 400),
)
def test_room_agrees_with_wait_in_every_state(
    requests: int | None,
    tokens: int | None,
    concurrency: int | None,
    steps: list[tuple[str, int, float]],
    estimate: int,
) -> None:
    """``room`` and ``wait`` agree: a map admits some exactly when one attempt needs no wait."""
    if requests is None and tokens is None and concurrency is None:
        concurrency = 2
    window = Window(Limit("k", requests=requests, tokens=tokens, concurrency=concurrency, per=1.0))
    now = 0.0
    tickets = []
    for action, amount, later in steps:
        now += later
        if action == "take" and window.wait(now, amount) == 0:
            tickets.append(window.take(amount))
        elif action == "start" and tickets:
            window.start(tickets[amount % len(tickets)], now)
        elif action == "done" and tickets:
            window.done(tickets.pop(amount % len(tickets)), amount)
        elif action == "pause":
            window.pause(now, later)
        room = window.room(now, estimate, 10)
        assert (room > 0) == (window.wait(now, estimate) == 0), (room, action)


def test_a_429_pauses_a_shared_key_and_running_attempts_renew_their_leases(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from executionkit._limits import Shared  # noqa: PLC0415
    from executionkit._run import _limiter  # noqa: PLC0415
    from executionkit.stores import SQLiteStore  # noqa: PLC0415

    monkeypatch.setattr(_limiter, "LEASE", 0.03)  # renewed every 10 ms
    renewed: list[list[str]] = []
    renew = Shared.renew

    def counted(self: Shared, ids: list[str], now: float) -> None:
        renewed.append(list(ids))
        renew(self, ids, now)

    monkeypatch.setattr(Shared, "renew", counted)
    name = key()

    async def call(ctx: Any) -> str:
        if current_step().attempt == 1:
            raise RateLimited(retry_after=0.01)
        await asyncio.sleep(0.1)  # the call: long enough for its lease to be renewed
        return "ok"

    store = SQLiteStore(tmp_path / "runs.db")
    try:
        result = Workflow([Step("a", call, limit=name)]).run_sync(
            limits=[Limit(name, concurrency=1)], checkpoint_fn=store, run_id="r"
        )
        state: Any = store.limit_state(name, lambda found: (found, found))
    finally:
        store.close()
    assert result.outputs["a"] == "ok"
    assert state["paused"] is not None  # the 429 paused the database's key
    assert state["open"] == {}  # and every place was given back
    assert renewed  # the second attempt's lease was renewed while it ran
    assert all(len(ids) == 1 for ids in renewed)
