"""Named limits: how many attempts, tokens and concurrent calls a key allows, and 429s.

`Limit` is what a provider allows (``requests`` and ``tokens`` per window of
``per`` seconds, ``concurrency`` at once); a step draws on one with
``Step(..., limit="openai")``. `Window` is the pure accounting of one key: the
attempts started and the tokens spent in the sliding window, the attempts
running, and a pause after a 429. It reads no clock (every method takes
``now``), so the in-process limiter (`executionkit._run._limiter`) and the
stores that share a key between processes use it alike. `RateLimited` is what
a step raises when the provider answered 429; `rate_limit_of` also recognises
the errors of the common HTTP clients that carry that status.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from executionkit._errors import preview

__all__ = ["Limit", "RateLimited", "Ticket", "Window", "rate_limit_of"]

TOO_MANY_REQUESTS = 429
BACKOFF_FIRST = 1.0
"""Seconds a key pauses after a 429 that says nothing of when to come back, doubled each time."""
BACKOFF_MAX = 60.0
"""The longest such pause, in seconds."""


def _positive_int(value: object, what: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 1:
        msg = f"{what} must be a positive int or None, got {preview(value)}"
        raise ValueError(msg) if isinstance(value, int) else TypeError(msg)
    return value


@dataclass(frozen=True, slots=True)
class Limit:
    """What a provider allows a key: attempts and tokens per window, and calls at once.

    Pass a list to ``run(..., limits=[...])``; a step draws on one with
    ``Step(..., limit=key)`` (a map's items, and each retry, too). An attempt
    starts only when its key has room: fewer than ``requests`` attempts
    started in the last ``per`` seconds, the tokens spent in that window plus
    the attempt's estimate within ``tokens``, fewer than ``concurrency``
    running. Waiting for room is not an attempt and costs nothing.

    Attributes:
        key: The limit's name, such as ``"openai"``.
        requests: Attempts that may start in any window of ``per`` seconds.
        tokens: Tokens (input plus output, as the steps report them) that
            attempts started in any window of ``per`` seconds may spend.
        concurrency: Attempts of the key that may run at once.
        per: The window, in seconds (default 60: per minute).

    Raises:
        ValueError: ``key`` is empty, a count is not positive, ``per`` is not
            a positive finite number, or no limit is given at all.
        TypeError: A field has the wrong type.
    """

    key: str
    requests: int | None = None
    tokens: int | None = None
    concurrency: int | None = None
    per: float = 60.0

    def __post_init__(self) -> None:
        """Check every field, naming it and the key."""
        key: object = self.key
        if type(key) is not str or not key:
            msg = f"Limit key must be a non-empty str, got {preview(key)}"
            raise ValueError(msg) if isinstance(key, str) else TypeError(msg)
        for name in ("requests", "tokens", "concurrency"):
            _positive_int(getattr(self, name), f"Limit {key!r}: {name}")
        per: object = self.per
        if isinstance(per, bool) or not isinstance(per, (int, float)):
            msg = f"Limit {key!r}: per must be seconds (an int or float), got {preview(per)}"
            raise TypeError(msg)
        if not (math.isfinite(per) and per > 0):
            msg = f"Limit {key!r}: per must be a positive, finite number of seconds, got {per!r}"
            raise ValueError(msg)
        object.__setattr__(self, "per", float(per))
        if self.requests is None and self.tokens is None and self.concurrency is None:
            msg = f"Limit {key!r} limits nothing: give requests, tokens or concurrency"
            raise ValueError(msg)

    def text(self) -> str:
        """The limit as the command line writes it: ``openai:requests=500,per=60``."""
        parts = [
            f"{name}={getattr(self, name)}"
            for name in ("requests", "tokens", "concurrency")
            if getattr(self, name) is not None
        ]
        return f"{self.key}:{','.join(parts)},per={self.per:g}"


class RateLimited(Exception):  # noqa: N818 - named as the provider's answer, 429
    """Raise it from a step when the provider answered 429 (too many requests).

    The attempt ends as ``"rate_limited"`` in the ledger (what it reported
    counts), every attempt of the step's limit key waits until ``retry_after``
    seconds have passed (or, without it, a backoff that doubles from 1 s up to
    60 s), and the step is tried again without spending one of its
    ``retries``. An exception of an HTTP client that carries status 429 (a
    ``status_code`` or ``status`` of 429, or a ``response`` with one, and a
    ``retry-after`` header when present) is treated the same way.

    Attributes:
        retry_after: Seconds the provider asked to wait, or None.
    """

    def __init__(
        self, message: str = "rate limited (429)", *, retry_after: float | None = None
    ) -> None:
        """A 429, with the seconds to wait if the provider said."""
        super().__init__(message)
        given: object = retry_after
        if given is not None and (
            isinstance(given, bool)
            or not isinstance(given, (int, float))
            or not math.isfinite(given)
            or given < 0
        ):
            msg = f"retry_after must be seconds (a number >= 0) or None, got {preview(given)}"
            raise ValueError(msg)
        self.retry_after = None if retry_after is None else float(retry_after)


_NOT = (False, None)


def rate_limit_of(error: BaseException) -> tuple[bool, float | None]:
    """Whether ``error`` says the provider answered 429, and the seconds it asked to wait.

    `RateLimited`, or an exception with ``status_code``/``status`` 429 (itself
    or its ``response``), as httpx, requests, aiohttp and the OpenAI and
    Anthropic clients raise it. The wait comes from ``retry_after``, or the
    ``retry-after-ms`` or ``retry-after`` header (seconds or an HTTP date).
    """
    if isinstance(error, RateLimited):
        return True, error.retry_after
    if not isinstance(error, Exception):
        return _NOT
    response = getattr(error, "response", None)
    if not (_is_429(error) or (response is not None and _is_429(response))):
        return _NOT
    for holder in (error, response):
        after = getattr(holder, "retry_after", None)
        if isinstance(after, (int, float)) and not isinstance(after, bool) and after >= 0:
            return True, float(after)
        headers = getattr(holder, "headers", None)
        if headers is not None:
            waited = _from_headers(headers)
            if waited is not None:
                return True, waited
    return True, None


def _is_429(holder: object) -> bool:
    for name in ("status_code", "status"):
        try:
            value = getattr(holder, name, None)
        except Exception:  # noqa: BLE001, S112 - a property of a client's object may raise
            continue
        if value == TOO_MANY_REQUESTS and not isinstance(value, bool):
            return True
    return False


def _from_headers(headers: Any) -> float | None:
    try:
        milliseconds = _header(headers, "retry-after-ms")
        if milliseconds is not None:
            return max(float(milliseconds) / 1000, 0.0)
        text = _header(headers, "retry-after")
        if text is None:
            return None
        try:
            return max(float(text), 0.0)
        except ValueError:
            import time  # noqa: PLC0415 - rare: a date
            from email.utils import parsedate_to_datetime  # noqa: PLC0415

            return max(parsedate_to_datetime(str(text)).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, OverflowError):
        return None


def _header(headers: Any, name: str) -> Any:
    getter = getattr(headers, "get", None)
    if getter is None:
        return None
    value = getter(name)
    if value is None:
        value = getter(name.title())  # a plain dict, as a test builds it
    return value


class Ticket:
    """One attempt admitted by a `Window`: its start, its tokens (an estimate until it ends).

    Admitted, it holds a place in the window (a reservation) until it starts
    (`Window.start`), when it counts from its real start: a map's item admitted
    now may wait for the checkpoint counting it before it calls the provider.
    """

    __slots__ = (
        "open",
        "reserving",
        "shared",
        "started",
        "starting",
        "tokens",
        "window",
        "windowed",
    )

    def __init__(self, window: Window, tokens: int, reserving: bool) -> None:
        """Admitted with ``tokens`` reserved, not started yet.

        ``reserving``: it holds a place in a sliding window until it starts (else
        only the key's concurrency counts it).
        """
        self.window = window
        self.started: float | None = None
        self.tokens = tokens
        self.open = True
        self.windowed = False  # its start is in the window: its tokens count there
        self.reserving = reserving
        # Started on the run's loop, its stamp still to come (`Limiter.start_soon`).
        self.starting = False
        # Its id in a window shared through a store, or None in one of this process.
        self.shared: str | None = None


class Window:
    """The accounting of one key: a sliding window of starts and tokens, and what runs.

    An entry started at ``s`` is in the window at ``now`` while ``now - s <
    per``. The tokens of an attempt count from its start (providers count a
    request's tokens when it arrives): reserved as an estimate when it is
    admitted, corrected to what it reported when it ends. Not thread-safe: the
    limiter holds a lock around it.
    """

    __slots__ = (
        "_done",
        "_done_tokens",
        "_spent",
        "_starts",
        "backoff",
        "limit",
        "paused_until",
        "reserved",
        "reserved_tokens",
        "running",
        "sliding",
        "tokens_in_window",
    )

    def __init__(self, limit: Limit) -> None:
        """An empty window for ``limit``."""
        self.limit = limit
        # Whether it keeps a sliding window (requests or tokens), not only a count.
        self.sliding = limit.requests is not None or limit.tokens is not None
        self._starts: deque[float] = deque()
        self._spent: deque[Ticket] = deque()
        self.tokens_in_window = 0
        # Attempts admitted that have not started yet, and the tokens they reserve.
        self.reserved = 0
        self.reserved_tokens = 0
        self.running = 0
        self.paused_until = -math.inf
        self.backoff = 0.0
        # What ended attempts spent, for the estimate of the next one (the running mean).
        self._done = 0
        self._done_tokens = 0

    def estimate(self, given: int | None) -> int:
        """The tokens to reserve for an attempt: ``given``, else the key's running mean."""
        if given is not None:
            return given
        return -(-self._done_tokens // self._done) if self._done else 0

    def _expire(self, now: float) -> None:
        per = self.limit.per
        starts = self._starts
        while starts and now - starts[0] >= per:
            starts.popleft()
        spent = self._spent
        while spent and now - spent[0].started >= per:  # type: ignore[operator]  # started ones
            ticket = spent.popleft()
            ticket.windowed = False
            self.tokens_in_window -= ticket.tokens

    def wait(self, now: float, estimate: int) -> float:
        """Seconds until an attempt reserving ``estimate`` tokens may start: 0 for now.

        `math.inf` when only the attempts running stand in the way (one ending
        makes room). Admitting nothing, it changes nothing but the expired entries.
        """
        limit = self.limit
        if limit.concurrency is not None and self.running >= limit.concurrency:
            return math.inf
        longest = self.paused_until - now
        if limit.requests is not None or limit.tokens is not None:
            self._expire(now)
            starts = self._starts
            if limit.requests is not None and len(starts) + self.reserved >= limit.requests:
                # The admitted ones that have not started will: count them as starting now.
                first = len(starts) + self.reserved - limit.requests
                until = starts[first] + limit.per - now if first < len(starts) else math.inf
                longest = max(longest, until)
            if limit.tokens is not None:
                longest = max(longest, self._tokens_wait(now, min(estimate, limit.tokens)))
        return longest if longest > 0 else 0.0

    @property
    def timed(self) -> bool:
        """Whether admitting needs the time: a window to slide, or a pause to wait out."""
        return self.sliding or self.paused_until != -math.inf

    def use(self, limit: Limit) -> None:
        """Count by ``limit`` from now on (a later run's numbers for the key)."""
        self.limit = limit
        self.sliding = limit.requests is not None or limit.tokens is not None

    def _tokens_wait(self, now: float, estimate: int) -> float:
        tokens = self.limit.tokens
        assert tokens is not None  # noqa: S101 - the caller checked
        excess = self.tokens_in_window + self.reserved_tokens + estimate - tokens
        if excess <= 0:
            return 0.0
        for ticket in self._spent:
            excess -= ticket.tokens
            if excess <= 0:
                return ticket.started + self.limit.per - now  # type: ignore[operator]
        return math.inf  # what runs now has to end first (its estimate is too high)

    def room(self, now: float, estimate: int, most: int) -> int:
        """How many attempts reserving ``estimate`` tokens each may start now, up to ``most``."""
        limit = self.limit
        if self.paused_until > now:
            return 0
        fit = most
        if limit.concurrency is not None:
            fit = min(fit, limit.concurrency - self.running)
        if self.sliding and fit > 0:
            self._expire(now)
            if limit.requests is not None:
                fit = min(fit, limit.requests - len(self._starts) - self.reserved)
            if limit.tokens is not None:
                left = limit.tokens - self.tokens_in_window - self.reserved_tokens
                if estimate <= 0:
                    fit = fit if left >= 0 else 0
                elif estimate > limit.tokens:  # above the whole window: alone in an empty one
                    fit = min(
                        fit, 1 if not self.tokens_in_window and not self.reserved_tokens else 0
                    )
                else:
                    fit = min(fit, max(left, 0) // estimate)
        return max(fit, 0)

    def take(self, estimate: int) -> Ticket:
        """Admit an attempt (`wait` said 0): reserve its place and its tokens until it starts."""
        (ticket,) = self.take_many(estimate, 1)
        return ticket

    def take_many(self, estimate: int, count: int) -> list[Ticket]:
        """Admit ``count`` attempts (`room` said so), reserving as `take` does each."""
        reserving = self.sliding
        tickets = [Ticket(self, estimate, reserving) for _ in range(count)]
        if reserving:
            self.reserved += count
            self.reserved_tokens += estimate * count
        self.running += count
        return tickets

    def start(self, ticket: Ticket, now: float) -> None:
        """The admitted attempt of ``ticket`` starts now: it counts in the window from now.

        Starts come in time order, so the window stays sorted.
        """
        if ticket.started is None and ticket.open:
            self.stamp(ticket, now)

    def stamp(self, ticket: Ticket, now: float) -> None:
        """`start` for a ticket not stamped yet, open or closed already (`close`)."""
        ticket.started = now
        if not ticket.reserving:
            return
        self.reserved -= 1
        self.reserved_tokens -= ticket.tokens
        limit = self.limit
        if limit.requests is not None:
            self._starts.append(now)
        if limit.tokens is not None:
            ticket.windowed = True
            self._spent.append(ticket)
            self.tokens_in_window += ticket.tokens

    def done(self, ticket: Ticket, tokens: int, *, limited: bool = False) -> None:
        """The attempt of ``ticket`` ended having spent ``tokens``; a 429 if ``limited``.

        Its tokens replace its estimate while its start is in the window.
        """
        if ticket.open:
            ticket.open = False
            self.close(ticket, tokens, limited=limited)

    def close(self, ticket: Ticket, tokens: int, *, limited: bool = False) -> None:
        """`done` for a ticket its owner closed already (``open`` False), counted now."""
        self.running -= 1
        if ticket.started is None:  # never started: it gives its place back
            if ticket.reserving:
                self.reserved -= 1
                self.reserved_tokens -= ticket.tokens
            return
        if ticket.windowed:  # correct the reservation
            self.tokens_in_window += tokens - ticket.tokens
        ticket.tokens = tokens
        if not limited:
            self._done += 1
            self._done_tokens += tokens
            self.backoff = 0.0

    def pause(self, now: float, seconds: float | None) -> float:
        """A 429: no attempt starts for ``seconds`` (None: the doubling backoff); return them."""
        if seconds is None:
            self.backoff = min(self.backoff * 2 or BACKOFF_FIRST, BACKOFF_MAX)
            seconds = self.backoff
        self.paused_until = max(self.paused_until, now + seconds)
        return seconds


LEASE = 30.0
"""Seconds an admitted attempt of a shared key holds its place without being renewed.

A process that dies holding places loses them once its leases expire; a live
one renews the leases of its running attempts well before (`Shared.renew`).
"""


STALE_WAIT = 1.0
"""Seconds after which a process that no longer looks for room leaves the queue (it died,
or its wait was cancelled); a waiting process looks every 50 ms."""


class Shared:
    """One key's window as several processes share it: read from plain data, changed, written.

    The SQL stores keep a row per key holding `Shared.dump`'s data, and run
    each change in a transaction that locks the row: admit, start, done,
    pause, renew. Times are wall-clock seconds (every process reads the same
    clock), and each admitted attempt is known by an id and holds a lease.
    """

    __slots__ = ("open", "waiting", "window")

    def __init__(self, limit: Limit, state: object, now: float) -> None:
        """The window ``state`` describes (empty for None), its expired leases dropped."""
        self.window = Window(limit)
        self.open: dict[str, tuple[Ticket, float]] = {}
        # The processes waiting for room: owner -> [in the queue since, last looked].
        self.waiting: dict[str, list[float]] = {}
        if not isinstance(state, dict):
            return
        self._load(state, now)

    def _load(self, state: dict[str, Any], now: float) -> None:
        window = self.window
        window.paused_until = float(state.get("paused", -math.inf) or -math.inf)
        window.backoff = float(state.get("backoff", 0.0))
        window._done = int(state.get("done", 0))  # noqa: SLF001 - this module's own
        window._done_tokens = int(state.get("done_tokens", 0))  # noqa: SLF001
        window._starts.extend(float(t) for t in state.get("starts", ()))  # noqa: SLF001
        tickets: dict[str, Ticket] = {}
        for ticket_id, started, tokens in state.get("spent", ()):
            ticket = Ticket(window, int(tokens), True)  # noqa: FBT003
            ticket.started = float(started)
            ticket.windowed = True
            ticket.open = False
            window._spent.append(ticket)  # noqa: SLF001
            window.tokens_in_window += ticket.tokens
            tickets[str(ticket_id)] = ticket
        for ticket_id, (started, tokens, reserving, expires) in state.get("open", {}).items():
            ticket = tickets.get(ticket_id) or Ticket(window, int(tokens), bool(reserving))
            ticket.open = True
            ticket.reserving = bool(reserving)
            ticket.started = None if started is None else float(started)
            window.running += 1
            if ticket.started is None and ticket.reserving:
                window.reserved += 1
                window.reserved_tokens += ticket.tokens
            self.open[ticket_id] = (ticket, float(expires))
        for ticket_id, (ticket, expires) in list(self.open.items()):
            if expires < now:  # its process stopped renewing it: it died
                window.done(ticket, ticket.tokens)
                del self.open[ticket_id]
        for owner, (since, looked) in state.get("waiting", {}).items():
            if now - float(looked) < STALE_WAIT:  # else it stopped looking: gone
                self.waiting[str(owner)] = [float(since), float(looked)]

    def admit(
        self, now: float, given: int | None, most: int, prefix: str, owner: str = ""
    ) -> list[str]:
        """Admit up to ``most`` attempts of process ``owner`` now: their ids, ``prefix:0``...

        ``prefix`` is unique to this call (the process and a count of its calls).
        Processes take turns: while another has waited longer, this one admits
        nothing and queues; one that got less than it asked for goes to the
        back of the queue, so a process with many items never keeps the others
        out (it would: its own waiting items take a place its ending freed
        before the others look again).
        """
        waiting = self.waiting
        mine = waiting.get(owner)
        if any(
            other != owner and (mine is None or since < mine[0])
            for other, (since, _) in waiting.items()
        ):
            if mine is None:
                waiting[owner] = [now, now]
            else:
                mine[1] = now
            return []
        window = self.window
        estimate = window.estimate(given) if window.limit.tokens is not None else 0
        ids: list[str] = []
        while len(ids) < most and window.wait(now, estimate) == 0:
            ticket_id = f"{prefix}:{len(ids)}"
            self.open[ticket_id] = (window.take(estimate), now + LEASE)
            ids.append(ticket_id)
        if len(ids) < most:
            # Still short: in the queue, at its back if it got some now.
            waiting[owner] = [now if ids or mine is None else mine[0], now]
        else:
            waiting.pop(owner, None)
        return ids

    def start(self, ticket_id: str, now: float) -> None:
        """The attempt ``ticket_id`` starts now."""
        found = self.open.get(ticket_id)
        if found is not None:
            self.window.start(found[0], now)

    def done(self, ticket_id: str, tokens: int, *, limited: bool) -> None:
        """The attempt ``ticket_id`` ended having spent ``tokens``."""
        found = self.open.pop(ticket_id, None)
        if found is not None:
            self.window.done(found[0], tokens, limited=limited)

    def renew(self, ticket_ids: list[str], now: float) -> None:
        """The attempts ``ticket_ids`` still run: their leases start again."""
        for ticket_id in ticket_ids:
            found = self.open.get(ticket_id)
            if found is not None:
                self.open[ticket_id] = (found[0], now + LEASE)

    def dump(self, now: float) -> dict[str, Any]:
        """The window as plain data (JSON), what has left it dropped."""
        window = self.window
        window._expire(now)  # noqa: SLF001 - this module's own
        ids = {id(ticket): ticket_id for ticket_id, (ticket, _) in self.open.items()}
        spent = []
        for number, ticket in enumerate(window._spent):  # noqa: SLF001
            spent.append([ids.get(id(ticket), f"done:{number}"), ticket.started, ticket.tokens])
        paused = window.paused_until
        return {
            "starts": list(window._starts),  # noqa: SLF001
            "spent": spent,
            "open": {
                ticket_id: [ticket.started, ticket.tokens, ticket.reserving, expires]
                for ticket_id, (ticket, expires) in self.open.items()
            },
            "waiting": self.waiting,
            "paused": None if paused == -math.inf else paused,
            "backoff": window.backoff,
            "done": window._done,  # noqa: SLF001
            "done_tokens": window._done_tokens,  # noqa: SLF001
        }
