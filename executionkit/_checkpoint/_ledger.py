"""The cost ledger: what every attempt of every step spent, whether it succeeded or not.

A step reports usage as it spends it (`StepContext.add_usage`) and through
``PatternResult.cost``; both land in the open `Spend` of its attempt. When the
attempt ends, `Ledger.close` turns the spend into `LedgerEntry` rows (one per
model), with how the attempt ended, and returns their total for the run's
``cost``. An attempt that spent nothing and ended well leaves no row, so a run
that reports no usage pays one dict entry per attempt and nothing more.

The ledger is append-only, like the output log: a checkpoint holds how many
rows it covers, and ``new_ledger`` (the rows since the previous checkpoint)
lets an incremental store write each row once. Attempts open when a
checkpoint is taken are listed in its ``in_flight``; a resume from it records
each as ``"unknown"`` (usage not known, never silently zero).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._types import TokenUsage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

__all__ = ["OUTCOMES", "WASTED", "ZERO", "Ledger", "LedgerEntry", "Spend", "Spending"]

OUTCOMES = ("ok", "failed", "timeout", "cancelled", "unknown", "late", "override")
"""How the attempt of a ledger row ended.

``ok``: its output was recorded. ``failed``, ``timeout``, ``cancelled``: it
raised, ran out of time or was cancelled. ``unknown``: it was running when the
process stopped (its usage was not reported back). ``late``: usage reported
after its attempt had ended (by a thread the step left running). ``override``:
an output set by hand in a fork (no usage).
"""

WASTED = frozenset({"failed", "timeout", "cancelled", "unknown", "late"})
"""The outcomes whose usage bought no recorded output."""

ZERO = TokenUsage()
_ZERO = ZERO
_FIRST_REPORT = threading.Lock()


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


class Spend:
    """The usage reported by one attempt so far, by model.

    `add` may be called from any thread the attempt runs in: it only appends
    to a list (atomic in CPython); the loop reads it once the attempt ended.
    """

    __slots__ = ("attempt", "reported")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.reported: list[tuple[str | None, TokenUsage]] = []

    def add(self, usage: TokenUsage, model: str | None) -> None:
        self.reported.append((model, usage))

    def by_model(self, extra: TokenUsage | None) -> dict[str | None, TokenUsage]:
        """The usage by model, ``extra`` (a result's cost) counted with no model."""
        totals: dict[str | None, TokenUsage] = {}
        for model, usage in self.reported:
            totals[model] = totals.get(model, _ZERO) + usage
        if extra is not None and extra != _ZERO:
            totals[None] = totals.get(None, _ZERO) + extra
        return totals


def _never(step: str, key: str | None) -> bool:
    del step, key
    return False


class Ledger:
    """The ledger of one run: its rows (restored and new) and the attempts open now."""

    __slots__ = ("ended", "entries", "late", "open", "restored")

    def __init__(self, restored: Iterable[LedgerEntry] = ()) -> None:
        self.entries: list[LedgerEntry] = list(restored)
        self.restored = len(self.entries)
        # (step, item key) -> its attempt running now: the attempt's number until it
        # reports usage (no object per attempt for steps that never do), then its Spend.
        self.open: dict[tuple[str, str | None], int | Spend] = {}
        # Whether the attempt of a step (item) has ended: set by the run's record.
        self.ended: Callable[[str, str | None], bool] = _never
        # Usage reported after its attempt ended, waiting for the loop to book it.
        self.late: list[LedgerEntry] = []

    def begin(self, step: str, key: str | None, attempt: int) -> None:
        """An attempt starts: note it as open."""
        self.open[step, key] = attempt

    def add(
        self, step: str, key: str | None, attempt: int, usage: TokenUsage, model: str | None
    ) -> None:
        """Usage reported by a running attempt (from any thread).

        An attempt is open from its first report (a single attempt) or from
        `begin` (an attempt of a step that retries or times out), until `close`.
        Usage of an attempt that already ended (``ended(step, key)``, given by
        the run) is booked as ``"late"``.
        """
        opened = self.open.get((step, key))
        if not isinstance(opened, Spend) or opened.attempt != attempt:
            with _FIRST_REPORT:  # two threads of one attempt may report first at once
                opened = self.open.get((step, key))
                fresh = opened is None and not self.ended(step, key)
                if fresh or (type(opened) is int and opened == attempt):
                    opened = self.open[step, key] = Spend(attempt)
        if isinstance(opened, Spend) and opened.attempt == attempt:
            opened.add(usage, model)
        else:
            self.late.append(LedgerEntry(step, key, attempt, "late", model, usage))

    def close(
        self,
        step: str,
        key: str | None,
        outcome: str,
        extra: TokenUsage | None = None,
        attempt: int = 1,
    ) -> TokenUsage:
        """The attempt of ``step`` (item ``key``) ended: write its rows; return their total.

        ``extra`` is the usage its result reported (``PatternResult.cost``).
        Without an open spend (an attempt that never reported usage), the
        attempt is number ``attempt``.
        """
        spend = self.open.pop((step, key), None)
        if not isinstance(spend, Spend):
            if extra is None or extra == _ZERO:
                return _ZERO
            number = attempt if spend is None else spend
            self.entries.append(LedgerEntry(step, key, number, outcome, None, extra))
            return extra
        if not spend.reported and (extra is None or extra == _ZERO):
            return _ZERO
        total = _ZERO
        append = self.entries.append
        for model, usage in spend.by_model(extra).items():
            append(LedgerEntry(step, key, spend.attempt, outcome, model, usage))
            total += usage
        return total

    def book_late(self, *, closing: bool = False) -> TokenUsage:
        """Write the rows of usage reported late; return their total.

        ``closing``: the run has stopped every attempt, so a spend still open
        got its usage after its attempt ended: it is late too.
        """
        if closing and self.open:
            for (step, key), opened in list(self.open.items()):
                if isinstance(opened, Spend):
                    for model, usage in opened.by_model(None).items():
                        self.late.append(
                            LedgerEntry(step, key, opened.attempt, "late", model, usage)
                        )
            self.open.clear()
        if not self.late:
            return _ZERO
        late, self.late = self.late, []
        self.entries += late
        total = _ZERO
        for entry in late:
            total += entry.usage
        return total

    def unknown(self, in_flight: Iterable[tuple[str, str | None, int]]) -> None:
        """Attempts a resumed checkpoint found running: their usage is unknown."""
        for step, key, attempt in in_flight:
            self.entries.append(LedgerEntry(step, key, attempt, "unknown", None, _ZERO))

    def in_flight(self) -> tuple[tuple[str, str | None, int], ...]:
        """The attempts open now, for a checkpoint's ``in_flight``."""
        return tuple(
            (step, key, opened if type(opened) is int else opened.attempt)  # type: ignore[union-attr]
            for (step, key), opened in self.open.items()
        )

    def extend(self, prefix: str, rows: Iterable[LedgerEntry]) -> None:
        """Rows of a sub-workflow, each under this run's path ``prefix/step``."""
        self.entries += [
            LedgerEntry(
                f"{prefix}/{row.step}", row.item, row.attempt, row.outcome, row.model, row.usage
            )
            for row in rows
        ]


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
