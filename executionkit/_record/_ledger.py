"""The ledger a run keeps while it runs: each attempt's open spend, closed into rows.

A step reports usage as it spends it (`StepContext.add_usage`) and through
``PatternResult.cost``; both land in the open `Spend` of its attempt. When the
attempt ends, `Ledger.close` turns the spend into `LedgerEntry` rows (one per
model), with how the attempt ended, and returns their total for the run's
``cost``. An attempt that spent nothing and ended well leaves no row, so a run
that reports no usage pays one dict entry per attempt and nothing more. The
rows are the checkpoint's (`executionkit._checkpoint._ledger`); every
checkpoint of the run covers a prefix of them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from executionkit._checkpoint._ledger import ZERO, LedgerEntry, ledger_row

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from executionkit._types import TokenUsage

__all__ = ["Ledger", "Spend"]

_ZERO = ZERO
_FIRST_REPORT = threading.Lock()


class Spend(list[tuple["str | None", "TokenUsage"]]):
    """The usage reported by one attempt so far: a list of ``(model, usage)``.

    Reports may come from any thread the attempt runs in: each only appends
    (atomic in CPython); the loop reads the list once the attempt ended. A list
    of its own kind, made in C, because every attempt that reports makes one.
    """

    __slots__ = ("attempt",)

    attempt: int

    def by_model(self, extra: TokenUsage | None) -> dict[str | None, TokenUsage]:
        """The usage by model, ``extra`` (a result's cost) counted with no model."""
        reported = self
        if len(reported) == 1 and (extra is None or extra == _ZERO):
            return dict(reported)  # the common case: one report, nothing to add
        totals: dict[str | None, TokenUsage] = {}
        for model, usage in reported:
            totals[model] = totals.get(model, _ZERO) + usage
        if extra is not None and extra != _ZERO:
            totals[None] = totals.get(None, _ZERO) + extra
        return totals


def _spend(attempt: int) -> Spend:
    spend = Spend()
    spend.attempt = attempt
    return spend


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
        if type(opened) is not Spend or opened.attempt != attempt:
            if opened is None:
                if self.ended(step, key):
                    opened = None
                else:  # setdefault is atomic: two threads reporting first get one spend
                    opened = self.open.setdefault((step, key), _spend(attempt))
            if type(opened) is int and opened == attempt:
                with _FIRST_REPORT:  # two threads may replace the number at once
                    opened = self.open.get((step, key))
                    if type(opened) is int and opened == attempt:
                        opened = self.open[step, key] = _spend(attempt)
            if type(opened) is not Spend or opened.attempt != attempt:
                self.late.append(ledger_row(step, key, attempt, "late", model, usage))
                return
        opened.append((model, usage))

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
            self.entries.append(ledger_row(step, key, number, outcome, None, extra))
            return extra
        reported = spend
        if extra is None or extra is _ZERO or extra == _ZERO:
            if len(reported) == 1:  # the common case: one report, its usage is the total
                ((model, usage),) = reported
                self.entries.append(ledger_row(step, key, spend.attempt, outcome, model, usage))
                return usage
            if not reported:
                return _ZERO
        append = self.entries.append
        models = spend.by_model(extra)
        if len(models) == 1:  # the common case: one model, its usage is the total
            ((model, usage),) = models.items()
            append(ledger_row(step, key, spend.attempt, outcome, model, usage))
            return usage
        total = _ZERO
        for model, usage in models.items():
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
