"""Dollars: a price table for models, and the ledger's usage priced with it.

`Price` is what one model costs per million input and output tokens (and per
call, for tools billed per request); `Prices` is the table, read from Python or
a JSON file. `Spending.priced` (``WorkflowResult.spending.priced(prices)``)
turns the ledger's rows into `PricedSpending`: exact `Decimal` dollars in total,
spent and wasted, per model and per step, with the usage of models the table
does not price kept apart as *unpriced*, never counted as $0.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from executionkit._errors import preview
from executionkit._types import TokenUsage

if TYPE_CHECKING:
    import os

__all__ = ["Budget", "Price", "PricedSpending", "Prices"]

_MILLION = Decimal(1_000_000)
_ZERO = Decimal(0)
_NO_USAGE = TokenUsage()
DEFAULT_KEY = "*"
"""The key of a price file's entry for models it does not list."""

_FIELDS = ("input_per_million", "output_per_million", "per_call")


def _dollars(value: object, where: str) -> Decimal:
    """``value`` as non-negative, finite dollars; a float is read as it prints (0.15)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        msg = f"{where} must be dollars (an int, float, str or Decimal), got {preview(value)}"
        raise TypeError(msg)
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else value)
    except (InvalidOperation, ValueError):
        amount = Decimal("NaN")
    if not amount.is_finite() or amount < 0:
        msg = f"{where} must be a finite, non-negative number of dollars, got {preview(value)}"
        raise ValueError(msg)
    return amount


@dataclass(frozen=True, slots=True, init=False)
class Price:
    """What one model costs, in dollars.

    Attributes:
        input_per_million: Dollars per million input (prompt) tokens.
        output_per_million: Dollars per million output (completion) tokens.
        per_call: Dollars per call (``TokenUsage.llm_calls``), for what is billed
            per request; 0 for most models.

    Each is given as an int, a str (``"2.50"``), a `Decimal` or a float (read as
    it prints: ``0.15`` is 0.15), and kept as a `Decimal`. A negative, NaN or
    infinite amount raises `ValueError` naming the field.
    """

    input_per_million: Decimal
    output_per_million: Decimal
    per_call: Decimal

    def __init__(
        self,
        input_per_million: Decimal | float | str,
        output_per_million: Decimal | float | str,
        per_call: Decimal | float | str = 0,
    ) -> None:
        """Set the three amounts, each checked and turned into a `Decimal`."""
        given = (input_per_million, output_per_million, per_call)
        for name, value in zip(_FIELDS, given, strict=True):
            object.__setattr__(self, name, _dollars(value, f"Price {name}"))

    def of(self, usage: TokenUsage) -> Decimal:
        """The dollars ``usage`` costs at this price, exactly."""
        return (
            usage.input_tokens * self.input_per_million / _MILLION
            + usage.output_tokens * self.output_per_million / _MILLION
            + usage.llm_calls * self.per_call
        )


class Prices(Mapping[str, Price]):
    """A price table: model name to its `Price`, and optionally one for every other model.

    ``Prices({"gpt-4o": Price(2.50, 10.00), "gpt-4o-mini": Price(0.15, 0.60)})``.
    Entries may also be dicts of `Price`'s fields (as a JSON file holds them).
    Usage of a model the table does not list, and usage reported without a
    model, is *unpriced*: `PricedSpending.unpriced` reports it, and it is never
    counted as $0. Give ``default`` to price it anyway.
    """

    __slots__ = ("_table", "default")

    def __init__(
        self, table: Mapping[str, Price | Mapping[str, Any]], *, default: Price | None = None
    ) -> None:
        """Read ``table``; errors name the model and the field."""
        given: object = table  # checked as the caller passed it, whatever the annotation
        if not isinstance(given, Mapping):
            msg = f"Prices takes a mapping of model name to Price, got {preview(given)}"
            raise TypeError(msg)
        read: dict[str, Price] = {}
        for model, entry in given.items():
            if not isinstance(model, str) or not model:
                msg = f"Prices: a model name must be a non-empty str, got {preview(model)}"
                raise TypeError(msg)
            read[model] = _price(entry, f"Prices[{model!r}]")
        other: object = default
        if other is not None and not isinstance(other, Price):
            msg = f"Prices default must be a Price or None, got {preview(other)}"
            raise TypeError(msg)
        self._table = read
        self.default = default

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Prices:
        """Read a JSON file: ``{"model": {"input_per_million": 2.5, "output_per_million": 10}}``.

        Amounts may be numbers or strings; the entry ``"*"`` prices every model
        not listed. Errors name the file, the model and the field.
        """
        where = Path(path)
        try:
            data = json.loads(where.read_text(encoding="utf-8"), parse_float=Decimal)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            msg = f"price file {str(where)!r} cannot be read as JSON: {exc}"
            raise ValueError(msg) from exc
        if not isinstance(data, dict):
            msg = f"price file {str(where)!r} must hold a JSON object of model to price"
            raise ValueError(msg)  # noqa: TRY004 - a bad file, as every other load error
        default = data.pop(DEFAULT_KEY, None)
        try:
            return cls(data, default=None if default is None else _price(default, "'*'"))
        except (TypeError, ValueError) as exc:
            msg = f"price file {str(where)!r}: {exc}"
            raise ValueError(msg) from exc

    def __getitem__(self, model: str) -> Price:
        """The price of ``model`` as listed (the default is not consulted)."""
        return self._table[model]

    def __iter__(self) -> Iterator[str]:
        """The models listed, in the order given."""
        return iter(self._table)

    def __len__(self) -> int:
        """How many models are listed."""
        return len(self._table)

    def __repr__(self) -> str:
        """``Prices({...}, default=...)``."""
        return f"Prices({self._table!r}, default={self.default!r})"

    def price_of(self, model: str | None) -> Price | None:
        """The price that applies to ``model``: listed, else the default, else None."""
        listed = self._table.get(model) if model is not None else None
        return listed if listed is not None else self.default

    def priced(self, rows: Iterable[Any]) -> PricedSpending:
        """Price ledger rows (`LedgerEntry`); `Spending.priced` is the usual way in."""
        spent = wasted = _ZERO
        by_model: dict[str | None, Decimal] = {}
        by_step: dict[str, Decimal] = {}
        unpriced: dict[str | None, TokenUsage] = {}
        unknown = 0
        for row in rows:
            if row.outcome == "unknown":
                unknown += 1
                continue
            usage = row.usage
            if usage == _NO_USAGE:
                continue
            price = self.price_of(row.model)
            if price is None:
                unpriced[row.model] = unpriced.get(row.model, _NO_USAGE) + usage
                continue
            cost = price.of(usage)
            if row.wasted:
                wasted += cost
            else:
                spent += cost
            by_model[row.model] = by_model.get(row.model, _ZERO) + cost
            by_step[row.step] = by_step.get(row.step, _ZERO) + cost
        return PricedSpending(
            spent + wasted,
            spent,
            wasted,
            MappingProxyType(by_model),
            MappingProxyType(by_step),
            MappingProxyType(unpriced),
            unknown,
        )


def _price(entry: object, where: str) -> Price:
    if isinstance(entry, Price):
        return entry
    if not isinstance(entry, Mapping):
        msg = f"{where} must be a Price or a dict of its fields, got {preview(entry)}"
        raise TypeError(msg)
    extra = sorted(str(key) for key in entry if key not in _FIELDS)
    missing = [name for name in _FIELDS[:2] if name not in entry]
    if extra or missing:
        msg = (
            f"{where} must have input_per_million and output_per_million (and may have "
            f"per_call); "
            + (f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(extra)}")
        )
        raise ValueError(msg)
    try:
        return Price(**{name: entry[name] for name in _FIELDS if name in entry})
    except (TypeError, ValueError) as exc:
        msg = f"{where}: {exc}".replace(": Price ", ": ")
        raise type(exc)(msg) from None


@dataclass(frozen=True)
class PricedSpending:
    """The ledger in dollars: what `Spending.priced` returns.

    Attributes:
        total: Dollars of all priced usage: ``spent + wasted``.
        spent: Dollars of the attempts whose output was recorded.
        wasted: Dollars of the attempts that failed, timed out, were cancelled
            or reported late.
        by_model: Dollars per model (None: usage reported without one, priced
            by the table's default).
        by_step: Dollars per step path.
        unpriced: Usage of models the table has no price for, per model: not in
            any dollar figure, and never counted as $0.
        unknown: Attempts whose usage is not known (running when a process
            stopped): not in any dollar figure either.
    """

    total: Decimal
    spent: Decimal
    wasted: Decimal
    by_model: Mapping[str | None, Decimal] = field(repr=False)
    by_step: Mapping[str, Decimal] = field(repr=False)
    unpriced: Mapping[str | None, TokenUsage]
    unknown: int

    @property
    def complete(self) -> bool:
        """Whether ``total`` is the whole bill: nothing unpriced, no attempt of unknown usage."""
        return not self.unpriced and self.unknown == 0


def dollars_text(amount: Decimal) -> str:
    """``$1.2345``: dollars to four decimals (rounded half even), for people to read."""
    return f"${amount.quantize(Decimal('0.0001')):,}"


@dataclass(frozen=True, slots=True, init=False)
class Budget:
    """A run's budget in tokens, dollars or both: ``run(budget=Budget(dollars=5), prices=...)``.

    Once either is reached, no new step, item or retry starts; what runs
    finishes and is counted, and the run raises `BudgetExceeded`. A resume with
    a larger budget runs only what is left (restored usage counts against it).

    Attributes:
        tokens: Limits on token counts, as ``budget=TokenUsage(...)`` gives them
            (0 in a field: no limit on it); None for none.
        dollars: The most the run may cost, priced with the run's ``prices``
            (the ledger's rows of every attempt, failed ones included); None for
            no dollar limit. Usage of a model ``prices`` cannot price stops the
            run as a reached budget does: it cannot be proven under the limit.
            Attempts of unknown usage are not priced.
    """

    tokens: TokenUsage | None
    dollars: Decimal | None

    def __init__(
        self,
        *,
        tokens: TokenUsage | None = None,
        dollars: Decimal | float | str | None = None,
    ) -> None:
        """Set the limits; ``dollars`` is read as `Price` reads its amounts."""
        given: object = tokens
        if given is not None and not isinstance(given, TokenUsage):
            msg = f"Budget tokens must be a TokenUsage or None, got {preview(given)}"
            raise TypeError(msg)
        object.__setattr__(self, "tokens", tokens)
        amount = None if dollars is None else _dollars(dollars, "Budget dollars")
        object.__setattr__(self, "dollars", amount)
