"""Dollars on the command line: ``--prices FILE`` read, and a bill shown in dollars.

`load_prices` reads a price file (`executionkit.Prices.load`) into a `Prices`,
a bad file being a usage error naming it; `dollars` turns a `PricedSpending`
into the plain data ``inspect --json`` prints (amounts as strings, exact), and
`dollars_lines` into the lines ``inspect`` prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import CliError
from executionkit._terminal import show

if TYPE_CHECKING:
    from collections.abc import Mapping

    from executionkit._prices import PricedSpending, Prices


def load_prices(path: str) -> Prices:
    """The price table in ``path``; a file that cannot be read is a `CliError` naming it."""
    from executionkit._prices import Prices  # noqa: PLC0415 - loads decimal: only when asked

    try:
        return Prices.load(path)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def dollars(priced: PricedSpending) -> dict[str, Any]:
    """``priced`` as plain data: each amount a string of its exact Decimal.

    Usage reported without a model is under the model ``""`` (a model name is
    never empty; JSON keys cannot be null).
    """
    return {
        "total": str(priced.total),
        "spent": str(priced.spent),
        "wasted": str(priced.wasted),
        "steps": {path: str(amount) for path, amount in priced.by_step.items()},
        "models": {model or "": str(amount) for model, amount in priced.by_model.items()},
        "unpriced": {
            model or "": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "llm_calls": usage.llm_calls,
            }
            for model, usage in priced.unpriced.items()
        },
        "unknown": priced.unknown,
        "complete": priced.complete,
    }


def dollars_lines(bill: Mapping[str, Any]) -> list[str]:
    """``$0.0142 ($0.0138 spent, $0.0004 wasted)``, then per step, then what is not priced."""
    from decimal import Decimal  # noqa: PLC0415 - only with --prices

    from executionkit._prices import dollars_text  # noqa: PLC0415 - loaded with --prices

    def text(amount: str) -> str:
        return dollars_text(Decimal(amount))

    lines = [f"{text(bill['total'])} ({text(bill['spent'])} spent, {text(bill['wasted'])} wasted)"]
    lines.extend(f"  {show(path)}: {text(amount)}" for path, amount in bill["steps"].items())
    for model, usage in bill["unpriced"].items():
        tokens = usage["input_tokens"] + usage["output_tokens"]
        name = f"model {show(model)}" if model else "usage reported without a model"
        calls = usage["llm_calls"]
        lines.append(
            f"  not priced: {name}, {tokens:,} tokens ({calls:,} call{'s' if calls != 1 else ''})"
        )
    if bill["unknown"]:
        lines.append(f"  not priced: {bill['unknown']} attempt(s) of unknown usage")
    return lines
