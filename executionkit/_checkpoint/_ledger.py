"""The cost ledger as a checkpoint holds it: its rows, what they add up to, reading them.

Every attempt of every step that spent something leaves `LedgerEntry` rows (one
per model) with how it ended; `Spending` adds them up. The ledger is
append-only, like the output log: a checkpoint holds how many rows it covers,
and ``new_ledger`` (the rows since the previous checkpoint) lets an incremental
store write each row once. Attempts open when a checkpoint is taken are listed
in its ``in_flight``; a resume from it records each as ``"unknown"`` (usage not
known, never silently zero). The readers here check the ``ledger``,
``new_ledger`` and ``in_flight`` fields, naming the path of anything wrong.
How a run keeps its ledger while it runs is `executionkit._record._ledger`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._checkpoint._fields import (
    fail,
    needs_version,
    needs_version_4,
    optional_str,
    read_count,
)
from executionkit._errors import CheckpointFormatError
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Iterable

    from executionkit._prices import PricedSpending, Prices

__all__ = [
    "OUTCOMES",
    "WASTED",
    "ZERO",
    "LedgerEntry",
    "Spending",
    "ledger_row",
    "read_in_flight",
    "read_in_flight_items",
    "read_ledger",
    "read_new_ledger",
]

OUTCOMES = (
    "ok",
    "failed",
    "timeout",
    "cancelled",
    "unknown",
    "late",
    "override",
    "rate_limited",
)
"""How the attempt of a ledger row ended.

``ok``: its output was recorded. ``failed``, ``timeout``, ``cancelled``: it
raised, ran out of time or was cancelled. ``unknown``: it was running when the
process stopped (its usage was not reported back). ``late``: usage reported
after its attempt had ended (by a thread the step left running). ``override``:
an output set by hand in a fork (no usage). ``rate_limited``: the provider
answered 429 (format 5); the step was tried again without spending a retry.
"""

WASTED = frozenset({"failed", "timeout", "cancelled", "unknown", "late", "rate_limited"})
"""The outcomes whose usage bought no recorded output."""

ZERO = TokenUsage()
_ZERO = ZERO


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row of the cost ledger: usage of one model by one attempt.

    Attributes:
        step: The step's path: its name, or ``parent/child`` for a step of a
            sub-workflow (``parent/item/child`` in a map of sub-workflows).
        item: In a map step, the item's key; None otherwise.
        attempt: 1 for the first attempt, 2 for the first retry, and so on.
        outcome: How the attempt ended, one of `OUTCOMES`.
        model: The model named with the usage, or None.
        usage: The tokens and calls.
    """

    step: str
    item: str | None
    attempt: int
    outcome: str
    model: str | None
    usage: TokenUsage

    @property
    def wasted(self) -> bool:
        """Whether this usage bought no recorded output (the attempt did not succeed)."""
        return self.outcome in WASTED

    def to_list(self) -> list[Any]:
        """The row as the checkpoint format writes it: eight plain values."""
        usage = self.usage
        return [
            self.step,
            self.item,
            self.attempt,
            self.outcome,
            self.model,
            usage.input_tokens,
            usage.output_tokens,
            usage.llm_calls,
        ]


_SET_FIELDS = tuple(getattr(LedgerEntry, name).__set__ for name in LedgerEntry.__slots__)
_new = object.__new__


def ledger_row(  # noqa: PLR0917 - the six fields of a row, in their order
    step: str,
    item: str | None,
    attempt: int,
    outcome: str,
    model: str | None,
    usage: TokenUsage,
) -> LedgerEntry:
    """A `LedgerEntry` built by a run, which knows its fields are right: half the cost.

    The frozen dataclass's own ``__init__`` sets each slot through
    ``object.__setattr__``; this sets them through their descriptors. A run
    writes a row per attempt that reports usage.
    """
    row = _new(LedgerEntry)
    set_step, set_item, set_attempt, set_outcome, set_model, set_usage = _SET_FIELDS
    set_step(row, step)
    set_item(row, item)
    set_attempt(row, attempt)
    set_outcome(row, outcome)
    set_model(row, model)
    set_usage(row, usage)
    return row


@dataclass(frozen=True)
class Spending:
    """A summary of ledger rows: what successful attempts spent and failed ones wasted.

    Get one from `WorkflowResult.spending` or `WorkflowCheckpoint.spending`;
    narrow it with `by_step`, `by_model` and `by_item`.

    Attributes:
        entries: The ledger rows it sums, in the order they were written.
        spent: Usage of attempts whose output was recorded.
        wasted: Usage of attempts that failed, timed out, were cancelled or
            reported late.
        unknown: Number of attempts whose usage is not known (running when the
            process stopped).
        this_call: Usage of the rows written by this call of ``run`` (zero on a
            checkpoint); ``restored`` is the rest.
        restored: Usage of the rows restored from ``resume_from``.
    """

    entries: tuple[LedgerEntry, ...]
    spent: TokenUsage
    wasted: TokenUsage
    unknown: int
    this_call: TokenUsage
    restored: TokenUsage
    _restored_rows: int = field(default=0, repr=False, compare=False)

    @classmethod
    def of(cls, entries: Iterable[LedgerEntry], restored: int = 0) -> Spending:
        """Sum ``entries``; the first ``restored`` of them came from the checkpoint resumed."""
        rows = tuple(entries)
        if not rows:
            return _NOTHING  # a run that reported no usage: one frozen value for all
        return _summed([(row, position < restored) for position, row in enumerate(rows)])

    @property
    def total(self) -> TokenUsage:
        """Spent plus wasted."""
        return self.spent + self.wasted

    def priced(self, prices: Prices) -> PricedSpending:
        """These rows in dollars at ``prices``: total, spent, wasted, per model and per step.

        Usage of models ``prices`` has no price for is reported apart
        (`PricedSpending.unpriced`), never as $0; attempts of unknown usage are
        counted (`PricedSpending.unknown`), not priced.
        """
        return prices.priced(self.entries)

    def by_step(self) -> Mapping[str, Spending]:
        """One `Spending` per step path (sub-workflows' steps as ``parent/child``)."""
        return self._grouped(lambda row: row.step)

    def by_model(self) -> Mapping[str | None, Spending]:
        """One `Spending` per model name (None for usage reported without one)."""
        return self._grouped(lambda row: row.model)

    def by_item(self, step: str) -> Mapping[str, Spending]:
        """One `Spending` per item key of map step ``step``."""
        return self._grouped(
            lambda row: row.item, lambda row: row.step == step and row.item is not None
        )

    def _grouped(self, key: Any, keep: Any = None) -> Mapping[Any, Spending]:
        groups: dict[Any, list[tuple[LedgerEntry, bool]]] = {}
        for position, row in enumerate(self.entries):
            if keep is None or keep(row):
                groups.setdefault(key(row), []).append((row, position < self._restored_rows))
        return MappingProxyType({name: _summed(pairs) for name, pairs in groups.items()})


def _summed(pairs: list[tuple[LedgerEntry, bool]]) -> Spending:
    spent = wasted = before = _ZERO
    unknown = 0
    rows = []
    restored_rows = 0
    for row, was_restored in pairs:
        rows.append(row)
        if row.outcome in WASTED:
            wasted += row.usage
            unknown += row.outcome == "unknown"
        else:
            spent += row.usage
        if was_restored:
            before += row.usage
            restored_rows += 1
    total = spent + wasted
    return Spending(tuple(rows), spent, wasted, unknown, total - before, before, restored_rows)


_NOTHING = Spending((), _ZERO, _ZERO, 0, _ZERO, _ZERO)


_ROW_LENGTH = 8
_OUTCOMES_TEXT = ", ".join(map(repr, OUTCOMES))


_SINCE_5 = frozenset({"rate_limited"})


def _row(value: object, path: str, version: int) -> LedgerEntry:
    if isinstance(value, LedgerEntry):
        fields: Any = value.to_list()
    elif isinstance(value, (list, tuple)) and len(value) == _ROW_LENGTH:
        fields = value
    else:
        expected = "a list of 8 values [step, item, attempt, outcome, model, in, out, calls]"
        fail(path, expected, value)
    step, item, attempt, outcome, model, tokens_in, tokens_out, calls = fields
    if type(step) is not str or not step:
        fail(f"{path}[0]", "a step path (a non-empty str)", step)
    optional_str(item, f"{path}[1]")
    if type(attempt) is not int or attempt < 1:
        fail(f"{path}[2]", "an attempt number (an int of at least 1)", attempt)
    if outcome not in OUTCOMES or type(outcome) is not str:
        fail(f"{path}[3]", f"one of {_OUTCOMES_TEXT}", outcome)
    if outcome in _SINCE_5 and version < 5:  # noqa: PLR2004 - the version that introduced it
        msg = (
            f"checkpoint field '{path}[3]' is {outcome!r}, an outcome of format version 5, "
            f"in a checkpoint of version {version}"
        )
        raise CheckpointFormatError(msg, path=f"{path}[3]")
    optional_str(model, f"{path}[4]")
    usage = TokenUsage(
        read_count(tokens_in, f"{path}[5]"),
        read_count(tokens_out, f"{path}[6]"),
        read_count(calls, f"{path}[7]"),
    )
    if isinstance(value, LedgerEntry):
        return value
    return LedgerEntry(step, item, attempt, outcome, model, usage)


def read_ledger(value: object, version: int) -> tuple[LedgerEntry, ...]:
    """``ledger``: a list of rows, each checked at ``ledger[i]``."""
    if not isinstance(value, (list, tuple)):
        fail("ledger", "a list of ledger rows", value)
    needs_version_4("ledger", value, version)
    return tuple(_row(row, f"ledger[{index}]", version) for index, row in enumerate(value))


def read_new_ledger(value: object, ledger: tuple[LedgerEntry, ...]) -> tuple[LedgerEntry, ...]:
    """``new_ledger``: the last rows of ``ledger`` (those since the previous checkpoint)."""
    if not isinstance(value, tuple) or len(value) > len(ledger):
        fail("new_ledger", "a tuple of the last rows of 'ledger'", value)
    if value and tuple(ledger[len(ledger) - len(value) :]) != value:
        fail("new_ledger", "a tuple of the last rows of 'ledger'", value)
    return value


def read_in_flight(value: object, version: int) -> tuple[tuple[str, str | None, int], ...]:
    """``in_flight``: ``[step path, item key or None, attempt]`` for each attempt running."""
    if not isinstance(value, (list, tuple)):
        fail("in_flight", "a list of [step, item, attempt]", value)
    needs_version_4("in_flight", value, version)
    attempts: list[tuple[str, str | None, int]] = []
    for index, entry in enumerate(value):
        path = f"in_flight[{index}]"
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:  # noqa: PLR2004
            fail(path, "a list [step, item, attempt]", entry)
        step, item, attempt = entry
        if type(step) is not str or not step:
            fail(f"{path}[0]", "a step path (a non-empty str)", step)
        optional_str(item, f"{path}[1]")
        if type(attempt) is not int or attempt < 1:
            fail(f"{path}[2]", "an attempt number (an int of at least 1)", attempt)
        attempts.append((step, item, attempt))
    return tuple(attempts)


def read_in_flight_items(value: object, version: int) -> Mapping[str, int]:
    """``in_flight_items``: map step name to the number of its items that may be spending.

    Format 5. A map's items are counted before they start (a checkpoint
    holding the count is handed over first), so a resume books exactly that
    many attempts of unknown usage. A count of 0 is never written.
    """
    if not isinstance(value, Mapping):
        fail("in_flight_items", "a dict of map step name to a count of items", value)
    needs_version("in_flight_items", value, version, 5)
    counts: dict[str, int] = {}
    for name, count in value.items():
        if type(name) is not str or not name:
            fail("in_flight_items", "a dict with non-empty step names as keys", name)
        path = f"in_flight_items.{name}"
        if type(count) is not int or count < 1:
            fail(path, "a count of items (an int of at least 1)", count)
        counts[name] = read_count(count, path)
    return MappingProxyType(counts)
