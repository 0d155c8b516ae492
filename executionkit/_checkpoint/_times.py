"""Format 5's fields about time: when each attempt ran (``attempts``) and the timers (``waits``).

``attempts`` is append-only, like the ledger: one entry per attempt that
ended, whether it reported usage or not, with its start and end in integer
milliseconds since the Unix epoch (UTC). A checkpoint a run took holds how
many entries it covers, and ``new_attempts`` (the entries since the previous
checkpoint) lets an incremental store write each entry once. ``waits`` holds,
for each `Step.wait` reached and not yet due, when it is due and since when it
waits. The readers here check both, naming the path of anything wrong.
"""

from __future__ import annotations

from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import (
    MAX_COUNT,
    fail,
    needs_version,
    optional_str,
    read_dict,
)
from executionkit._checkpoint._kinds import read_moment
from executionkit._errors import CheckpointFormatError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "ATTEMPT_OUTCOMES",
    "Attempt",
    "busy_seconds",
    "read_attempts",
    "read_new_attempts",
    "read_waits",
]

Attempt = tuple[str, "str | None", int, str, int, int]
"""One ``attempts`` entry: (step path, item key or None, attempt, outcome, started, ended)."""

ATTEMPT_OUTCOMES = ("ok", "failed", "timeout", "cancelled", "rate_limited")
"""How an attempt of ``attempts`` ended: the ledger's outcomes of an attempt that ran here.

An attempt that was running when the process stopped never ended: a resume
books it in the ledger as ``"unknown"``, and it has no entry here.
"""

_LENGTH = 6
_OUTCOMES_TEXT = ", ".join(map(repr, ATTEMPT_OUTCOMES))
_WAIT_KEYS = ("due", "since")


def _entry(value: object, path: str) -> Attempt:
    if not isinstance(value, (list, tuple)) or len(value) != _LENGTH:
        expected = "a list of 6 values [step, item, attempt, outcome, started, ended]"
        fail(path, expected, value)
    step, item, attempt, outcome, started, ended = value
    if type(step) is not str or not step:
        fail(f"{path}[0]", "a step path (a non-empty str)", step)
    optional_str(item, f"{path}[1]")
    if type(attempt) is not int or not 1 <= attempt <= MAX_COUNT:
        fail(f"{path}[2]", "an attempt number (an int of at least 1)", attempt)
    if type(outcome) is not str or outcome not in ATTEMPT_OUTCOMES:
        fail(f"{path}[3]", f"one of {_OUTCOMES_TEXT}", outcome)
    for index, moment in ((4, started), (5, ended)):
        if type(moment) is not int or not 0 <= moment <= MAX_COUNT:
            fail(f"{path}[{index}]", "milliseconds since the Unix epoch (an int >= 0)", moment)
    if ended < started:
        msg = (
            f"checkpoint field '{path}' ended ({ended}) before it started ({started}): "
            f"an attempt ends at or after its start"
        )
        raise CheckpointFormatError(msg, path=f"{path}[5]")
    if type(value) is tuple:
        return value
    return (step, item, attempt, outcome, started, ended)


def read_attempts(value: object, version: int) -> tuple[Attempt, ...]:
    """``attempts``: a list of entries, each checked at ``attempts[i]``."""
    if not isinstance(value, (list, tuple)):
        fail("attempts", "a list of [step, item, attempt, outcome, started, ended]", value)
    needs_version("attempts", value, version, 5)
    return tuple(_entry(entry, f"attempts[{index}]") for index, entry in enumerate(value))


def read_new_attempts(value: object, attempts: tuple[Attempt, ...]) -> tuple[Attempt, ...]:
    """``new_attempts``: the last entries of ``attempts`` (those since the previous checkpoint)."""
    if not isinstance(value, tuple) or len(value) > len(attempts):
        fail("new_attempts", "a tuple of the last entries of 'attempts'", value)
    if value and tuple(attempts[len(attempts) - len(value) :]) != value:
        fail("new_attempts", "a tuple of the last entries of 'attempts'", value)
    return value


def busy_seconds(attempts: Iterable[Attempt]) -> float:
    """Seconds during which at least one of ``attempts`` ran: overlapping ones count once.

    What earlier calls of a run spent running, without the time between them
    (a resume days later, a person answering): the union of the entries'
    intervals.
    """
    spans = sorted((entry[4], entry[5]) for entry in attempts)
    total = 0
    end = None
    start = 0
    for began, ended in spans:
        if end is None or began > end:
            if end is not None:
                total += end - start
            start, end = began, ended
        else:
            end = max(end, ended)
    if end is not None:
        total += end - start
    return total / 1000


def read_waits(
    value: object, version: int, outputs: Mapping[str, Any]
) -> MappingProxyType[str, Mapping[str, str]]:
    """``waits``: step name to ``{"due": ..., "since": ...}``, UTC ISO 8601, due not before since.

    A wait that is due is an output (``None``), so a step in ``outputs`` has none.
    """
    waits = read_dict(value, "waits")
    needs_version("waits", waits, version, 5)
    result: dict[str, Mapping[str, str]] = {}
    for name, entry in waits.items():
        path = f"waits.{name}"
        if not name:
            fail("waits", "a dict with non-empty step names as keys", name)
        if name in outputs:
            msg = (
                f"checkpoint field {path!r} names step {name!r}, which 'outputs' records: "
                f"a wait that is over is an output, not a wait"
            )
            raise CheckpointFormatError(msg, path=path)
        fields = read_dict(entry, path)
        for key in _WAIT_KEYS:
            if key not in fields:
                msg = f"checkpoint field '{path}.{key}' is missing"
                raise CheckpointFormatError(msg, path=f"{path}.{key}")
        for key in fields:
            if key not in _WAIT_KEYS:
                msg = f"checkpoint has unexpected field '{path}.{key}'"
                raise CheckpointFormatError(msg, path=f"{path}.{key}")
        due = read_moment(fields["due"], f"{path}.due")
        since = read_moment(fields["since"], f"{path}.since")
        if datetime.fromisoformat(due) < datetime.fromisoformat(since):
            msg = (
                f"checkpoint field '{path}.due' ({due}) is before '{path}.since' ({since}): "
                f"a wait is due at or after the moment it began"
            )
            raise CheckpointFormatError(msg, path=f"{path}.due")
        result[name] = MappingProxyType({"due": due, "since": since})
    return MappingProxyType(result)
