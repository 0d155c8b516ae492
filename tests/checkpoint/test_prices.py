"""Dollars: `Price`, `Prices` and `Spending.priced` (issue 32).

A priced bill is exact (`Decimal`), equals a total computed by hand for a run
with several models, retries and failures, adds up the same way by model and by
step, and never counts an unpriced model or an attempt of unknown usage as $0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import executionkit
from executionkit import (
    LedgerEntry,
    Price,
    PricedSpending,
    Prices,
    Spending,
    Step,
    TokenUsage,
    Workflow,
    WorkflowFailed,
    current_step,
)

if TYPE_CHECKING:
    from pathlib import Path


def test_amounts_are_kept_as_decimals_and_floats_as_they_print() -> None:
    """0.15 is 0.15 dollars, not the binary float nearest to it."""
    price = Price(0.15, "0.60", per_call=Decimal("0.01"))
    assert (price.input_per_million, price.output_per_million, price.per_call) == (
        Decimal("0.15"),
        Decimal("0.60"),
        Decimal("0.01"),
    )
    assert Price(2, 10).per_call == 0
    assert price.of(TokenUsage(1_000_000, 500_000, 3)) == Decimal("0.48")
    assert Price(1, 1) == Price("1", Decimal(1))


@pytest.mark.parametrize(
    ("amounts", "error", "message"),
    [
        ((-1, 1), ValueError, "Price input_per_million must be a finite, non-negative number"),
        ((1, float("nan")), ValueError, "Price output_per_million must be a finite"),
        ((1, "inf"), ValueError, "Price output_per_million must be a finite"),
        ((1, "two"), ValueError, "Price output_per_million must be a finite"),
        ((True, 1), TypeError, "Price input_per_million must be dollars (an int, float, str"),
        ((1, None), TypeError, "Price output_per_million must be dollars"),
    ],
)
def test_a_bad_amount_is_refused_naming_the_field(
    amounts: tuple[Any, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        Price(*amounts)
    assert str(caught.value).startswith(message)


def test_a_table_reads_prices_and_dicts_and_names_what_is_wrong() -> None:
    """Entries may be dicts of Price's fields; errors name the model and the field."""
    prices = Prices({"a": Price(1, 2), "b": {"input_per_million": "0.5", "output_per_million": 1}})
    assert list(prices) == ["a", "b"]
    assert len(prices) == 2
    assert prices["b"] == Price("0.5", 1)
    assert prices.price_of("c") is None
    assert prices.price_of(None) is None
    assert Prices({}, default=Price(1, 1)).price_of("c") == Price(1, 1)
    assert repr(Prices({"a": Price(1, 2)})).startswith("Prices({'a': Price(")
    cases: list[tuple[Any, str]] = [
        ({"a": {"input_per_million": 1}}, "Prices['a'] must have input_per_million and "),
        ({"a": {"input_per_million": 1, "output_per_million": 1, "cached": 1}}, "unknown cached"),
        ({"a": {"input_per_million": -2, "output_per_million": 1}}, "Prices['a']: input_per"),
        ({"a": 3}, "Prices['a'] must be a Price or a dict of its fields, got 3"),
        ({"": Price(1, 1)}, "Prices: a model name must be a non-empty str, got ''"),
        ([("a", Price(1, 1))], "Prices takes a mapping of model name to Price"),
    ]
    for table, message in cases:
        with pytest.raises((TypeError, ValueError)) as caught:
            Prices(table)
        assert message in str(caught.value), (table, str(caught.value))
    with pytest.raises(TypeError, match="Prices default must be a Price or None, got 1"):
        Prices({}, default=1)  # type: ignore[arg-type]


def _paid(calls: list[str]) -> Workflow:
    """Three models, a retry after a failed attempt, and a step that fails for good."""

    def draft(ctx: Any) -> str:
        step = current_step()
        calls.append(f"draft{step.attempt}")
        step.add_usage(TokenUsage(1000, 200, 1), model="large")
        step.add_usage(TokenUsage(300, 0, 1), model="small")
        if step.attempt == 1:
            msg = "rate limited"
            raise RuntimeError(msg)
        return "draft"

    def check(ctx: Any) -> str:
        current_step().add_usage(TokenUsage(50, 5, 1), model="tiny")
        msg = "the check broke"
        raise ValueError(msg)

    def edit(ctx: Any) -> str:
        current_step().add_usage(TokenUsage(2000, 1000, 1), model="large")
        return "edited"

    return Workflow(
        [
            Step("draft", draft, retries=1, retry_delay=0),
            Step("check", check),
            Step("edit", edit, depends_on=("draft",)),
        ]
    )


PRICES = Prices(
    {
        "large": Price("2.50", "10.00"),
        "small": Price("0.15", "0.60"),
        "tiny": Price("0.10", "0.40", per_call="0.001"),
    }
)


def test_a_run_with_retries_and_failures_costs_what_a_hand_computation_says() -> None:
    """Every attempt priced: the failed first draft and the broken check as wasted."""
    calls: list[str] = []
    with pytest.raises(WorkflowFailed) as caught:
        _paid(calls).run_sync(checkpoint_fn=lambda checkpoint: None, on_error="continue")
    assert calls == ["draft1", "draft2"]
    priced = caught.value.checkpoint.spending.priced(PRICES)
    large_draft = Decimal(1000) * Decimal("2.50") / 10**6 + Decimal(200) * 10 / 10**6
    small_draft = Decimal(300) * Decimal("0.15") / 10**6
    tiny_check = Decimal(50) * Decimal("0.10") / 10**6 + Decimal(5) * Decimal("0.40") / 10**6
    tiny_check += Decimal("0.001")
    large_edit = Decimal(2000) * Decimal("2.50") / 10**6 + Decimal(1000) * 10 / 10**6
    assert priced.wasted == large_draft + small_draft + tiny_check  # draft 1 and check
    assert priced.spent == large_draft + small_draft + large_edit  # draft 2 and edit
    assert priced.total == priced.spent + priced.wasted == Decimal("0.025097")
    assert dict(priced.by_model) == {
        "large": 2 * large_draft + large_edit,
        "small": 2 * small_draft,
        "tiny": tiny_check,
    }
    assert dict(priced.by_step) == {
        "draft": 2 * (large_draft + small_draft),
        "check": tiny_check,
        "edit": large_edit,
    }
    assert priced.complete
    assert priced.unpriced == {}


def test_unpriced_models_and_unknown_attempts_are_never_zero_dollars() -> None:
    """Usage the table cannot price is reported apart; unknown attempts are counted."""
    rows = [
        LedgerEntry("a", None, 1, "ok", "large", TokenUsage(10, 1, 1)),
        LedgerEntry("a", None, 1, "ok", None, TokenUsage(7, 7, 0)),
        LedgerEntry("b", "k", 1, "failed", "mystery", TokenUsage(5, 0, 1)),
        LedgerEntry("b", "k", 2, "unknown", None, TokenUsage()),
        LedgerEntry("c", None, 1, "override", None, TokenUsage()),
    ]
    priced = Spending.of(rows).priced(PRICES)
    assert priced.total == PRICES["large"].of(TokenUsage(10, 1, 1))
    assert dict(priced.unpriced) == {None: TokenUsage(7, 7, 0), "mystery": TokenUsage(5, 0, 1)}
    assert priced.unknown == 1
    assert not priced.complete
    with_default = Spending.of(rows).priced(Prices(dict(PRICES), default=Price(1, 1)))
    assert with_default.unpriced == {}
    assert with_default.by_model[None] == Decimal(14) / 10**6
    assert not with_default.complete  # the unknown attempt still is
    assert Spending.of(rows[:1]).priced(PRICES).complete


def test_a_price_file_is_read_with_its_default_and_errors_name_the_file(tmp_path: Path) -> None:
    good = tmp_path / "prices.json"
    good.write_text(
        json.dumps(
            {
                "large": {"input_per_million": "2.50", "output_per_million": 10.0},
                "*": {"input_per_million": 3, "output_per_million": 15, "per_call": "0.5"},
            }
        )
    )
    prices = Prices.load(good)
    assert prices["large"] == Price("2.50", 10)
    assert prices.default == Price(3, 15, per_call="0.5")
    assert list(prices) == ["large"]
    bad = tmp_path / "bad.json"
    for text, message in [
        ("{", "cannot be read as JSON"),
        ("[1]", "must hold a JSON object of model to price"),
        ('{"m": {"input_per_million": 1}}', "Prices['m'] must have input_per_million"),
        ('{"*": {"input_per_million": -1, "output_per_million": 1}}', "'*': input_per_million"),
    ]:
        bad.write_text(text)
        with pytest.raises(ValueError, match="price file ") as caught:
            Prices.load(bad)
        assert str(bad) in str(caught.value)
        assert message in str(caught.value), str(caught.value)
    with pytest.raises(ValueError, match="cannot be read as JSON"):
        Prices.load(tmp_path / "missing.json")


counts = st.integers(min_value=0, max_value=10**9)
rows_strategy = st.lists(
    st.builds(
        LedgerEntry,
        st.sampled_from(["a", "b", "sub/c"]),
        st.none() | st.sampled_from(["0", "1"]),
        st.integers(min_value=1, max_value=3),
        st.sampled_from(["ok", "failed", "timeout", "cancelled", "unknown", "late"]),
        st.none() | st.sampled_from(["large", "small", "tiny", "mystery"]),
        st.builds(TokenUsage, counts, counts, st.integers(min_value=0, max_value=100)),
    ),
    max_size=30,
)


@given(rows_strategy)
def test_the_bill_adds_up_the_same_way_by_model_and_by_step(rows: list[LedgerEntry]) -> None:
    """Total = spent + wasted = the sum by model = the sum by step = each priced row's cost."""
    priced: PricedSpending = Spending.of(rows).priced(PRICES)
    priced_rows = [
        row
        for row in rows
        if row.outcome != "unknown" and row.model is not None and row.model in PRICES
    ]
    assert priced.total == sum(
        (PRICES[str(row.model)].of(row.usage) for row in priced_rows), Decimal(0)
    )
    assert priced.total == priced.spent + priced.wasted
    assert priced.total == sum(priced.by_model.values(), Decimal(0))
    assert priced.total == sum(priced.by_step.values(), Decimal(0))
    assert priced.unknown == sum(row.outcome == "unknown" for row in rows)
    unpriced = sum(
        (row.usage for row in rows if row.outcome != "unknown" and row not in priced_rows),
        TokenUsage(),
    )
    assert sum(priced.unpriced.values(), TokenUsage()) == unpriced


def test_importing_executionkit_leaves_decimal_and_json_unloaded() -> None:
    """The dollar types load on first use: `import executionkit` stays as fast as it was."""
    code = (
        "import sys, executionkit\n"
        "print('decimal' in sys.modules, 'json' in sys.modules)\n"
        "executionkit.Prices\n"
        "print('decimal' in sys.modules)\n"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False", "True"]
    with pytest.raises(AttributeError, match="module 'executionkit' has no attribute 'Nope'"):
        executionkit.Nope  # noqa: B018
