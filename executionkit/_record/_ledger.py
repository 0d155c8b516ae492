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

from executionkit._checkpoint._ledger import ZERO, LedgerEntry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from executionkit._types import TokenUsage

__all__ = ["Ledger", "Spend"]

_ZERO = ZERO
_FIRST_REPORT = threading.Lock()


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
        reported = self.reported
        if len(reported) == 1 and (extra is None or extra == _ZERO):
            return dict(reported)  # the common case: one report, nothing to add
        totals: dict[str | None, TokenUsage] = {}
        for model, usage in reported:
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
        append = self.entries.append
        models = spend.by_model(extra)
        if len(models) == 1:  # the common case: one model, its usage is the total
            ((model, usage),) = models.items()
            append(LedgerEntry(step, key, spend.attempt, outcome, model, usage))
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
