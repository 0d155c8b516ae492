"""A simulated LLM provider with a sliding-window rate limit, for tests only.

`FakeProvider` stands in for a model API that admits at most ``requests``
requests and ``tokens`` tokens in any sliding window of ``per`` seconds, the
way a hosted provider's per-minute quotas do. A request over either limit is
refused with `RateLimitedError`, which carries HTTP status 429 and a
``Retry-After`` value the way httpx/openai exceptions do (``exc.status_code``,
``exc.response.status_code``, ``exc.response.headers["retry-after"]``).

The window is half-open: an accepted request at time ``s`` counts in the window
at time ``t`` when ``t - s < per``, that is for ``t`` in ``[s, s + per)``; so
the window at ``t`` holds the requests with times in ``(t - per, t]``.

It makes no network calls and never sleeps; time comes from an injectable
``clock`` (``time.monotonic`` by default), so tests can drive the window with a
fake clock. The recorded calls (`FakeProvider.accepted`,
`FakeProvider.rejected`) and the exact peaks over every window
(`FakeProvider.max_requests_in_window`, `FakeProvider.max_tokens_in_window`,
`FakeProvider.over_limit`) are what tests assert on. With ``enforce=False`` it
refuses nothing but still measures, so a test can check that a client-side
limiter alone kept the traffic under the limits.

`FakeProvider.hold` counts concurrent holders (`FakeProvider.in_flight`) and
their peak (`FakeProvider.max_concurrent`), for tests of concurrency caps.

Not part of executionkit: nothing here is imported by the library.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from executionkit import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["Call", "FakeProvider", "FakeResponse", "RateLimitedError"]


class FakeResponse:
    """The HTTP response a `RateLimitedError` carries, shaped like httpx's.

    Attributes:
        status_code: The HTTP status, 429.
        headers: The response headers; ``"retry-after"`` holds the seconds as a string.
    """

    def __init__(self, status_code: int, headers: dict[str, str]) -> None:
        """Keep the status and headers.

        Args:
            status_code: The HTTP status.
            headers: The response headers (lower-case names).
        """
        self.status_code = status_code
        self.headers = headers

    def __repr__(self) -> str:
        """Show the status and headers."""
        return f"FakeResponse(status_code={self.status_code!r}, headers={self.headers!r})"


class RateLimitedError(Exception):
    """A request refused because it would go over the provider's limits (HTTP 429).

    Attributes:
        status_code: Always 429.
        retry_after: Seconds from the refusal until the window has room for the
            same request again (positive).
        response: A `FakeResponse` with ``status_code == 429`` and
            ``headers == {"retry-after": str(retry_after)}``.
    """

    status_code = 429

    def __init__(self, retry_after: float) -> None:
        """Build the error and its response.

        Args:
            retry_after: Seconds until the request would fit.
        """
        super().__init__(f"429 rate limited: retry after {retry_after} s")
        self.retry_after = retry_after
        self.response = FakeResponse(self.status_code, {"retry-after": str(retry_after)})


class Call(NamedTuple):
    """One accepted call: when, how many tokens, which model (compares equal to a plain tuple)."""

    time: float
    tokens: int
    model: str


def _check_limit(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, not {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, not {value}")


class FakeProvider:
    """A fake model API admitting at most ``requests`` requests and ``tokens`` tokens per window.

    For every instant ``t``, the accepted requests with times in
    ``(t - per, t]`` number at most ``requests`` and their tokens sum to at
    most ``tokens`` (a limit of ``None`` is no limit). Thread-safe: every
    method takes one lock, and the clock is read under it.

    Args:
        requests: Most accepted requests in any window, or ``None``.
        tokens: Most tokens accepted in any window, or ``None``.
        per: The window's length in seconds.
        clock: Returns the current time in seconds; must not go backwards.
        enforce: When false, nothing is refused (no 429, no `ValueError` for
            an oversized request); the calls are still recorded and measured.

    Raises:
        ValueError: If a limit is below 1 or ``per`` is not positive.
        TypeError: If a limit is not an int.
    """

    def __init__(
        self,
        *,
        requests: int | None = None,
        tokens: int | None = None,
        per: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        enforce: bool = True,
    ) -> None:
        """Set the limits; see the class docstring."""
        _check_limit("requests", requests)
        _check_limit("tokens", tokens)
        if not (per > 0 and math.isfinite(per)):
            raise ValueError(f"per must be a positive number of seconds, not {per!r}")
        self.requests = requests
        self.tokens = tokens
        self.per = per
        self.enforce = enforce
        self._clock = clock
        self._lock = threading.Lock()
        self._accepted: list[Call] = []
        self._rejected = 0
        # The accepted calls still in the window at the last call, oldest first.
        self._window: deque[tuple[float, int]] = deque()
        self._window_tokens = 0
        self._last_time = -math.inf
        self._in_flight = 0
        self._max_concurrent = 0

    # -- calls ---------------------------------------------------------------

    def call(self, tokens: int, *, model: str = "m") -> TokenUsage:
        """Make one request of ``tokens`` tokens at the clock's current time.

        Args:
            tokens: The request's tokens (reported as input tokens).
            model: The model name, recorded with the call.

        Returns:
            ``TokenUsage(input_tokens=tokens, output_tokens=0, llm_calls=1)``.

        Raises:
            RateLimitedError: If accepting it would put a window over a limit
                (the call is counted in `rejected`).
            ValueError: If ``tokens`` is negative; or, when enforcing, if it
                exceeds the whole ``tokens`` limit (it could never fit), or the
                clock went backwards.
            TypeError: If ``tokens`` is not an int.
        """
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise TypeError(f"tokens must be an int, not {tokens!r}")
        if tokens < 0:
            raise ValueError(f"tokens must not be negative, not {tokens}")
        if self.enforce and self.tokens is not None and tokens > self.tokens:
            raise ValueError(
                f"a request of {tokens} tokens can never fit a limit of "
                f"{self.tokens} tokens per {self.per} s"
            )
        with self._lock:
            now = self._clock()
            if self.enforce:
                if now < self._last_time:
                    raise ValueError(f"the clock went backwards, from {self._last_time} to {now}")
                self._prune(now)
                retry_after = self._retry_after(now, tokens)
                if retry_after is not None:
                    self._rejected += 1
                    raise RateLimitedError(retry_after)
                self._window.append((now, tokens))
                self._window_tokens += tokens
                self._last_time = now
            self._accepted.append(Call(now, tokens, model))
        return TokenUsage(input_tokens=tokens, output_tokens=0, llm_calls=1)

    async def acall(self, tokens: int, *, model: str = "m") -> TokenUsage:
        """Await-able `call`: the same admission, without sleeping or yielding.

        Args:
            tokens: The request's tokens.
            model: The model name.

        Returns:
            What `call` returns.

        Raises:
            RateLimitedError: As `call`.
            ValueError: As `call`.
            TypeError: As `call`.
        """
        return self.call(tokens, model=model)

    def _prune(self, now: float) -> None:
        # Drop the oldest entries that are out of the window at `now` (now - s >= per).
        window = self._window
        while window and not now - window[0][0] < self.per:
            _, old_tokens = window.popleft()
            self._window_tokens -= old_tokens

    def _retry_after(self, now: float, tokens: int) -> float | None:
        # None when the request fits now; else the seconds until the oldest
        # entries that must go have left the window.
        window = self._window
        last_out = -1  # index of the newest entry that must leave
        if self.requests is not None and len(window) + 1 > self.requests:
            last_out = len(window) - self.requests
        if self.tokens is not None and self._window_tokens + tokens > self.tokens:
            remaining = self._window_tokens
            for index, (_, old_tokens) in enumerate(window):
                remaining -= old_tokens
                if remaining + tokens <= self.tokens:
                    last_out = max(last_out, index)
                    break
        if last_out < 0:
            return None
        start = window[last_out][0]
        leave = start + self.per
        while leave - start < self.per:  # the first float time it is out of the window
            leave = math.nextafter(leave, math.inf)
        retry_after = leave - now
        while now + retry_after < leave:  # waiting retry_after really reaches `leave`
            retry_after += math.ulp(max(abs(now), abs(leave), retry_after))
        return retry_after

    # -- views ---------------------------------------------------------------

    @property
    def accepted(self) -> list[Call]:
        """A copy of the accepted calls, ``(time, tokens, model)``, in the order accepted."""
        with self._lock:
            return list(self._accepted)

    @property
    def rejected(self) -> int:
        """How many calls were refused with `RateLimitedError` (429)."""
        with self._lock:
            return self._rejected

    def max_requests_in_window(self) -> int:
        """The most accepted requests in any window ``(t - per, t]``, exactly; 0 when none."""
        with self._lock:
            calls = sorted(self._accepted, key=lambda c: c.time)
        best = 0
        left = 0
        for right, call in enumerate(calls):
            while not call.time - calls[left].time < self.per:
                left += 1
            best = max(best, right - left + 1)
        return best

    def max_tokens_in_window(self) -> int:
        """The most tokens accepted in any window ``(t - per, t]``, exactly; 0 when none."""
        with self._lock:
            calls = sorted(self._accepted, key=lambda c: c.time)
        best = 0
        left = 0
        total = 0
        for call in calls:
            total += call.tokens
            while not call.time - calls[left].time < self.per:
                total -= calls[left].tokens
                left += 1
            best = max(best, total)
        return best

    def over_limit(self) -> bool:
        """Whether some window held more requests or tokens than the limits allow.

        Never true while enforcing; with ``enforce=False`` it tells whether the
        callers alone stayed within the limits.
        """
        if self.requests is not None and self.max_requests_in_window() > self.requests:
            return True
        return self.tokens is not None and self.max_tokens_in_window() > self.tokens

    # -- concurrency ---------------------------------------------------------

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Count the caller as in flight for the ``with`` block (released on errors too)."""
        with self._lock:
            self._in_flight += 1
            self._max_concurrent = max(self._max_concurrent, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        """How many callers are inside `hold` now."""
        with self._lock:
            return self._in_flight

    @property
    def max_concurrent(self) -> int:
        """The most callers that were inside `hold` at once."""
        with self._lock:
            return self._max_concurrent
