"""A run's dollars as its page shows them with ``--prices``: per step and per model, wasted apart.

Everything comes from what `executionkit._prices` has: `Spending.priced` gives
the total, the spent and the wasted dollars, and the dollars per step path and
per model; pricing the wasted rows alone (`Prices.priced` of the ledger's
wasted rows) gives the wasted part of each step and each model. A
sub-workflow's steps count for its step, as on the steps table. Usage of
models the prices do not price is kept apart, in tokens, never as $0, and the
attempts of unknown usage are counted, not priced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from executionkit._paths import split_path

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._prices import PricedSpending, Prices


@dataclass(frozen=True, slots=True)
class Dollars:
    """One line of a bill: its dollars and the wasted part of them, as text (``$1.2345``)."""

    name: str
    total: str
    wasted: str


@dataclass(frozen=True, slots=True)
class Money:
    """A run's bill: the total, each step's and each model's dollars, what is not priced."""

    total: str
    spent: str
    wasted: str
    steps: tuple[Dollars, ...]
    models: tuple[Dollars, ...]
    unpriced: tuple[tuple[str, int], ...]  # (model, tokens) of models the prices lack
    unknown: int  # attempts of unknown usage: in no figure


def money(
    checkpoint: WorkflowCheckpoint, prices: Prices, priced: PricedSpending | None = None
) -> Money:
    """The bill of ``checkpoint`` at ``prices``, by step and by model, wasted apart.

    ``priced``: the checkpoint's ``spending.priced(prices)``, if the caller has it already.
    """
    from executionkit._prices import dollars_text  # noqa: PLC0415 - with --prices only

    if priced is None:
        priced = checkpoint.spending.priced(prices)
    wasted = prices.priced(row for row in checkpoint.ledger if row.wasted)
    steps = _by_top_step(priced.by_step)
    wasted_steps = _by_top_step(wasted.by_step)
    zero = priced.total - priced.total
    return Money(
        dollars_text(priced.total),
        dollars_text(priced.spent),
        dollars_text(priced.wasted),
        tuple(
            Dollars(name, dollars_text(amount), dollars_text(wasted_steps.get(name, zero)))
            for name, amount in steps.items()
        ),
        tuple(
            Dollars(
                _model_name(model),
                dollars_text(amount),
                dollars_text(wasted.by_model.get(model, zero)),
            )
            for model, amount in priced.by_model.items()
        ),
        tuple(
            (_model_name(model), usage.total_tokens) for model, usage in priced.unpriced.items()
        ),
        priced.unknown,
    )


def _by_top_step(by_step: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Dollars by step path summed by top-level step (``research/search``: ``research``)."""
    found: dict[str, Decimal] = {}
    for path, amount in by_step.items():
        top = split_path(path)[0] if "/" in path else path
        found[top] = found[top] + amount if top in found else amount
    return found


def _model_name(model: str | None) -> str:
    return "no model" if model is None else model
