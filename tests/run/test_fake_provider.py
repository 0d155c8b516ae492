"""The simulated rate-limited provider (tests/fake_provider.py) that limiter tests lean on.

The window logic runs on a fake clock whose ``now`` the test sets; the thread
tests use the real clock and synchronise with barriers, never with sleeps.
"""

from __future__ import annotations

import math
import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fake_provider import Call, FakeProvider, FakeResponse, RateLimitedError

from executionkit import TokenUsage


class FakeClock:
    """A clock that reads whatever the test set ``now`` to."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def at(provider: FakeProvider, clock: FakeClock, when: float, tokens: int = 1) -> float | None:
    """Call at ``when``: None if accepted, else the 429's retry_after."""
    clock.now = when
    try:
        provider.call(tokens)
    except RateLimitedError as exc:
        return exc.retry_after
    return None


def fits(calls: list[Call], when: float, tokens: int, provider: FakeProvider) -> bool:
    """Brute force: would a request of ``tokens`` fit the window (when - per, when]?"""
    inside = [c for c in calls if c.time <= when and when - c.time < provider.per]
    if provider.requests is not None and len(inside) + 1 > provider.requests:
        return False
    return provider.tokens is None or sum(c.tokens for c in inside) + tokens <= provider.tokens


def leaves(start: float, per: float) -> float:
    """The first float time at which a call made at ``start`` is out of the window."""
    end = start + per
    while end - start < per:  # start + per can round to a time still inside
        end = math.nextafter(end, math.inf)
    return end


def brute_max(calls: list[Call], per: float) -> tuple[int, int]:
    """Brute force: the most requests and tokens in any window (t - per, t], t a call's time."""
    most_requests = most_tokens = 0
    for end in calls:
        inside = [c for c in calls if c.time <= end.time and end.time - c.time < per]
        most_requests = max(most_requests, len(inside))
        most_tokens = max(most_tokens, sum(c.tokens for c in inside))
    return most_requests, most_tokens


# -- admission and retry_after -------------------------------------------------


def test_requests_sliding_window_with_exact_retry_after() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=2, per=1.0, clock=clock)
    assert at(provider, clock, 0.0) is None
    assert at(provider, clock, 0.25) is None
    assert at(provider, clock, 0.5) == 0.5  # the call at 0 leaves at 1.0
    assert at(provider, clock, 0.75) == 0.25
    assert at(provider, clock, 1.0) is None  # window (0, 1]: the call at 0 is out
    assert at(provider, clock, 1.0) == 0.25  # now 0.25 and 1.0 are in; 0.25 leaves at 1.25
    assert at(provider, clock, 1.25) is None
    assert [c.time for c in provider.accepted] == [0.0, 0.25, 1.0, 1.25]
    assert provider.rejected == 3
    assert provider.max_requests_in_window() == 2
    assert not provider.over_limit()


def test_window_boundary_is_half_open() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=1, per=1.0, clock=clock)
    assert at(provider, clock, 0.0) is None
    just_before = math.nextafter(1.0, 0.0)
    retry = at(provider, clock, just_before)
    assert retry is not None
    assert 0 < retry <= 2 * math.ulp(1.0)
    assert just_before + retry == 1.0
    assert at(provider, clock, 1.0) is None  # 1.0 - 0.0 < 1.0 is false: out of the window
    assert provider.rejected == 1


def test_many_requests_at_the_same_instant() -> None:
    clock = FakeClock(5.0)
    provider = FakeProvider(requests=3, per=2.0, clock=clock)
    assert [at(provider, clock, 5.0) for _ in range(5)] == [None, None, None, 2.0, 2.0]
    assert at(provider, clock, 7.0) is None
    assert provider.max_requests_in_window() == 3


def test_waiting_retry_after_is_enough_and_needed() -> None:
    # Times and windows that are not binary fractions: retry_after still lands on the edge.
    clock = FakeClock()
    provider = FakeProvider(requests=2, tokens=50, per=0.3, clock=clock)
    assert at(provider, clock, 0.1, tokens=10) is None
    assert at(provider, clock, 0.2, tokens=30) is None
    retry = at(provider, clock, 0.35, tokens=5)
    assert retry is not None
    assert retry == pytest.approx(0.05)
    assert at(provider, clock, math.nextafter(0.35 + retry, 0.0), tokens=5) is not None
    assert at(provider, clock, 0.35 + retry, tokens=5) is None


def test_retry_after_survives_float_rounding() -> None:
    # 0.9 - 0.2 is 0.7, but 0.2 + 0.7 is 0.8999999999999999: still inside the window.
    clock = FakeClock()
    provider = FakeProvider(requests=1, per=0.9, clock=clock)
    assert at(provider, clock, 0.0) is None
    retry = at(provider, clock, 0.2)
    assert retry is not None
    assert retry == pytest.approx(0.7)
    assert 0.2 + retry >= 0.9
    assert at(provider, clock, 0.2 + retry) is None


def test_tokens_sliding_window_with_exact_retry_after() -> None:
    clock = FakeClock()
    provider = FakeProvider(tokens=100, per=1.0, clock=clock)
    assert at(provider, clock, 0.0, tokens=60) is None
    assert at(provider, clock, 0.25, tokens=30) is None
    assert at(provider, clock, 0.5, tokens=10) is None  # exactly 100
    assert at(provider, clock, 0.5, tokens=1) == 0.5  # the 60 at 0 must leave
    assert at(provider, clock, 0.5, tokens=75) == 0.75  # 60 and 30 must both leave
    assert at(provider, clock, 0.5, tokens=100) == 1.0  # everything must leave
    assert at(provider, clock, 1.0, tokens=60) is None  # the 60 left; 30 + 10 + 60
    assert at(provider, clock, 1.0, tokens=0) is None  # zero tokens still fit
    assert provider.rejected == 3
    assert provider.max_tokens_in_window() == 100
    assert not provider.over_limit()


def test_both_limits_the_later_one_wins() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=3, tokens=10, per=1.0, clock=clock)
    assert at(provider, clock, 0.0, tokens=1) is None
    assert at(provider, clock, 0.125, tokens=8) is None
    assert at(provider, clock, 0.25, tokens=1) is None
    # Requests need the call at 0 gone (1.0); tokens need the 1 and the 8 gone (1.125).
    assert at(provider, clock, 0.5, tokens=2) == 0.625
    # One token: requests and tokens both need only the call at 0 gone (1.0).
    assert at(provider, clock, 0.5, tokens=1) == 0.5


def test_rejected_calls_take_no_room() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=1, per=1.0, clock=clock)
    assert at(provider, clock, 0.0) is None
    for when in (0.25, 0.5, 0.75):
        assert at(provider, clock, when) is not None
    assert at(provider, clock, 1.0) is None
    assert provider.rejected == 3
    assert len(provider.accepted) == 2


def test_request_larger_than_the_whole_token_limit() -> None:
    clock = FakeClock()
    provider = FakeProvider(tokens=100, per=60.0, clock=clock)
    with pytest.raises(ValueError, match=r"101 tokens .* 100 tokens per 60\.0 s"):
        provider.call(101)
    assert provider.accepted == []
    assert provider.rejected == 0
    assert provider.call(100) == TokenUsage(input_tokens=100, output_tokens=0, llm_calls=1)

    unenforced = FakeProvider(tokens=100, per=60.0, clock=clock, enforce=False)
    unenforced.call(101)
    assert unenforced.over_limit()


def test_call_returns_usage_and_records_the_model() -> None:
    clock = FakeClock(3.5)
    provider = FakeProvider(requests=10, clock=clock)
    usage = provider.call(7, model="big")
    assert usage == TokenUsage(input_tokens=7, output_tokens=0, llm_calls=1)
    clock.now = 4.0
    provider.call(2)
    assert provider.accepted == [(3.5, 7, "big"), (4.0, 2, "m")]
    assert provider.accepted[0].model == "big"
    provider.accepted.clear()  # a copy: the record is untouched
    assert len(provider.accepted) == 2


async def test_acall_admits_like_call() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=1, per=1.0, clock=clock)
    assert await provider.acall(4, model="x") == TokenUsage(4, 0, 1)
    clock.now = 0.75
    with pytest.raises(RateLimitedError) as info:
        await provider.acall(4)
    assert info.value.retry_after == 0.25
    assert provider.accepted == [(0.0, 4, "x")]
    assert provider.rejected == 1


def test_rate_limited_error_carries_a_429_response() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=1, per=2.0, clock=clock)
    provider.call(1)
    clock.now = 0.5
    with pytest.raises(RateLimitedError) as info:
        provider.call(1)
    exc = info.value
    assert exc.status_code == 429
    assert exc.retry_after == 1.5
    assert isinstance(exc.response, FakeResponse)
    assert exc.response.status_code == 429
    assert exc.response.headers == {"retry-after": "1.5"}
    assert float(exc.response.headers["retry-after"]) == exc.retry_after
    assert "1.5" in str(exc)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="requests must be at least 1"):
        FakeProvider(requests=0)
    with pytest.raises(ValueError, match="tokens must be at least 1"):
        FakeProvider(tokens=-5)
    with pytest.raises(ValueError, match="per must be"):
        FakeProvider(requests=1, per=0.0)
    with pytest.raises(TypeError, match="requests must be an int"):
        FakeProvider(requests=True)
    provider = FakeProvider(requests=1)
    with pytest.raises(ValueError, match="must not be negative"):
        provider.call(-1)
    with pytest.raises(TypeError, match="tokens must be an int"):
        provider.call(1.5)  # type: ignore[arg-type]


def test_a_clock_going_backwards_is_refused_while_enforcing() -> None:
    clock = FakeClock(10.0)
    provider = FakeProvider(requests=5, clock=clock)
    provider.call(1)
    clock.now = 9.0
    with pytest.raises(ValueError, match="clock went backwards"):
        provider.call(1)
    assert len(provider.accepted) == 1


def test_no_limits_accepts_everything() -> None:
    clock = FakeClock()
    provider = FakeProvider(clock=clock)
    for _ in range(50):
        provider.call(1000)
    assert provider.max_requests_in_window() == 50
    assert provider.max_tokens_in_window() == 50_000
    assert not provider.over_limit()


# -- the measured maxima ---------------------------------------------------------


def test_max_in_window_on_hand_made_sequences() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=2, tokens=10, per=1.0, clock=clock, enforce=False)
    assert provider.max_requests_in_window() == 0
    assert provider.max_tokens_in_window() == 0
    assert not provider.over_limit()
    for when, tokens in [(0.0, 4), (0.5, 3), (0.99, 2), (1.0, 6), (1.5, 1)]:
        assert at(provider, clock, when, tokens) is None
    # (0, 0.99]: 0, 0.5, 0.99; (0, 1.0]: 0.5, 0.99, 1.0 (11 tokens); (0.5, 1.5]: 0.99, 1.0, 1.5.
    assert provider.max_requests_in_window() == 3
    assert provider.max_tokens_in_window() == 11
    assert provider.over_limit()
    assert provider.rejected == 0


def test_max_in_window_respects_the_boundary() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=1, tokens=5, per=1.0, clock=clock, enforce=False)
    for when in (0.0, 1.0, 2.0, 3.0):
        at(provider, clock, when, tokens=5)
    assert provider.max_requests_in_window() == 1  # exactly per apart: never together
    assert provider.max_tokens_in_window() == 5
    assert not provider.over_limit()
    at(provider, clock, math.nextafter(4.0, 0.0), tokens=1)
    at(provider, clock, 4.0, tokens=0)
    assert provider.max_requests_in_window() == 2  # 3.0 is still in at just under 4.0
    assert provider.max_tokens_in_window() == 6
    assert provider.over_limit()


def test_only_tokens_over_counts_as_over_limit() -> None:
    clock = FakeClock()
    provider = FakeProvider(requests=100, tokens=10, per=1.0, clock=clock, enforce=False)
    at(provider, clock, 0.0, tokens=6)
    at(provider, clock, 0.5, tokens=5)
    assert provider.max_requests_in_window() == 2
    assert provider.over_limit()


def test_max_in_window_matches_brute_force_on_unsorted_times() -> None:
    rng = random.Random(1234)
    for _ in range(40):
        clock = FakeClock()
        per = rng.choice([0.5, 1.0, 1.7])
        provider = FakeProvider(requests=3, tokens=20, per=per, clock=clock, enforce=False)
        for _ in range(rng.randint(0, 30)):
            # Quarter-second steps make exact ties and exact boundaries common.
            when = rng.randint(0, 20) / 4 if rng.random() < 0.5 else rng.uniform(0, 5)
            at(provider, clock, when, tokens=rng.randint(0, 9))
        calls = provider.accepted
        expected_requests, expected_tokens = brute_max(calls, provider.per)
        assert provider.max_requests_in_window() == expected_requests
        assert provider.max_tokens_in_window() == expected_tokens
        assert provider.over_limit() == (expected_requests > 3 or expected_tokens > 20)


def test_enforced_random_traffic_stays_under_and_retry_after_is_the_earliest_fit() -> None:
    rng = random.Random(99)
    for _ in range(30):
        clock = FakeClock()
        per = rng.choice([0.5, 1.0, 0.3])
        requests = rng.randint(1, 4)
        tokens = rng.randint(5, 15)
        provider = FakeProvider(requests=requests, tokens=tokens, per=per, clock=clock)
        now = 0.0
        for _ in range(60):
            now += rng.choice([0.0, 0.05, 0.1, 0.25, rng.uniform(0, 0.4)])
            size = rng.randint(0, tokens)
            before = provider.accepted
            retry = at(provider, clock, now, tokens=size)
            assert (retry is None) == fits(before, now, size, provider)
            if retry is None:
                continue
            assert retry > 0
            # The earliest time it fits is when some accepted call leaves the window.
            candidates = [leaves(c.time, per) for c in before if now - c.time < per]
            earliest = min(t for t in candidates if fits(before, t, size, provider))
            assert now + retry == pytest.approx(earliest, abs=1e-12)
            assert fits(before, now + retry, size, provider)
        assert provider.max_requests_in_window() <= requests
        assert provider.max_tokens_in_window() <= tokens
        assert not provider.over_limit()


# -- threads ---------------------------------------------------------------------

THREADS = 8
CALLS = 200


def hammer(provider: FakeProvider, tokens: int = 1) -> None:
    """THREADS threads, released together, each making CALLS calls."""
    start = threading.Barrier(THREADS)
    retries: list[float] = []  # list.append is atomic

    def worker() -> None:
        start.wait(timeout=10)
        for _ in range(CALLS):
            try:
                provider.call(tokens)
            except RateLimitedError as exc:
                retries.append(exc.retry_after)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so that a missing lock shows
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            for future in [pool.submit(worker) for _ in range(THREADS)]:
                future.result(timeout=30)
    finally:
        sys.setswitchinterval(interval)
    assert len(retries) == provider.rejected
    assert all(retry > 0 for retry in retries)


def test_threads_hammering_a_long_window_get_exactly_the_limit() -> None:
    provider = FakeProvider(requests=500, per=3600.0)
    hammer(provider)
    assert len(provider.accepted) == 500
    assert provider.rejected == THREADS * CALLS - 500
    assert provider.max_requests_in_window() == 500
    assert not provider.over_limit()


def test_threads_hammering_a_token_limit() -> None:
    provider = FakeProvider(tokens=1000, per=3600.0)
    hammer(provider, tokens=3)
    assert len(provider.accepted) == 333
    assert provider.rejected == THREADS * CALLS - 333
    assert provider.max_tokens_in_window() == 999
    assert not provider.over_limit()


def test_threads_hammering_a_short_sliding_window_never_exceed_it() -> None:
    provider = FakeProvider(requests=5, tokens=12, per=0.002)
    hammer(provider, tokens=2)
    assert provider.accepted
    assert len(provider.accepted) + provider.rejected == THREADS * CALLS
    times = [c.time for c in provider.accepted]
    assert times == sorted(times)  # the clock is read under the lock
    assert provider.max_requests_in_window() <= 5
    assert provider.max_tokens_in_window() <= 12
    assert not provider.over_limit()


def test_threads_without_enforcement_are_caught_over_the_limit() -> None:
    provider = FakeProvider(requests=500, per=3600.0, enforce=False)
    hammer(provider)
    assert len(provider.accepted) == THREADS * CALLS
    assert provider.rejected == 0
    assert provider.max_requests_in_window() == THREADS * CALLS
    assert provider.over_limit()


def test_hold_counts_the_peak_of_concurrent_holders() -> None:
    provider = FakeProvider()
    holders = 5
    inside = threading.Barrier(holders)
    looked = threading.Barrier(holders)
    seen: list[int] = []

    def worker() -> None:
        with provider.hold():
            inside.wait(timeout=10)  # all holders are inside at once
            seen.append(provider.in_flight)
            looked.wait(timeout=10)

    with ThreadPoolExecutor(holders) as pool:
        for future in [pool.submit(worker) for _ in range(holders)]:
            future.result(timeout=30)
    assert seen == [holders] * holders
    assert provider.max_concurrent == holders
    assert provider.in_flight == 0


def test_hold_one_at_a_time_and_released_on_error() -> None:
    provider = FakeProvider()
    assert provider.max_concurrent == 0
    for _ in range(3):
        with provider.hold():
            assert provider.in_flight == 1
    with pytest.raises(RuntimeError, match="boom"), provider.hold():
        raise RuntimeError("boom")
    assert provider.in_flight == 0
    assert provider.max_concurrent == 1
    with provider.hold(), provider.hold():
        assert provider.in_flight == 2
    with provider.hold():
        assert provider.in_flight == 1
    assert provider.max_concurrent == 2  # the peak, not the last count
    assert provider.in_flight == 0
