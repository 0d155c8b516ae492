"""``executionkit serve --prices FILE``: the runs page and a run's page show the bill."""

from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING, Any

import pytest
import serve_workflows as flows
from test_serve import Serve, _request

from executionkit import Prices, Step, TokenUsage, Workflow, WorkflowFailed, current_step
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

PRICES = {"large": {"input_per_million": "2.00", "output_per_million": "10.00"}}


def _runs_with_usage(folder: Path) -> str:
    """Two runs in a database: one finished ($3.00), one that wasted an attempt."""

    def draft(ctx: Any) -> str:
        current_step().add_usage(TokenUsage(1_000_000, 100_000, 1), model="large")
        return "draft"

    def check(ctx: Any) -> str:
        step = current_step()
        step.add_usage(TokenUsage(500_000, 0, 1), model="large")
        step.add_usage(TokenUsage(10, 0, 1), model="mystery")
        msg = "broken"
        raise RuntimeError(msg)

    store = SQLiteStore(folder / "runs.db")
    try:
        Workflow([Step("draft", draft)]).run_sync(checkpoint_fn=store, run_id="paid")
        with pytest.raises(WorkflowFailed):
            Workflow([Step("draft", draft), Step("check", check, depends_on=("draft",))]).run_sync(
                checkpoint_fn=store, run_id="wasted"
            )
    finally:
        store.close()
    return f"sqlite:///{folder / 'runs.db'}"


def test_the_pages_show_dollars_with_a_price_table(tmp_path: Path) -> None:
    location = _runs_with_usage(tmp_path)
    with flows.serving(location) as served:
        _, _, plain = _request(served.url, "/")
        assert "<th>dollars</th>" not in plain  # without prices: tokens only
        served.app.source.prices = Prices(PRICES)
        _, _, runs = _request(served.url, "/")
        _, _, paid = _request(served.url, "/run?id=paid")
        _, _, wasted = _request(served.url, "/run?id=wasted")
    assert "<th>dollars</th>" in runs
    assert '<td class="number">$3.0000</td>' in runs  # 1M in at $2, 100k out at $10
    assert '<td class="number">$4.0000</td>' in runs  # and 500k in at $2, wasted
    assert "<dt>dollars</dt><dd>$3.0000 ($3.0000 spent, $0.0000 wasted)</dd>" in paid
    assert (
        "<dt>dollars</dt><dd>$4.0000 ($3.0000 spent, $1.0000 wasted); "
        "not priced: 10 tokens of mystery</dd>"
    ) in wasted
    assert "500,010 (500,010 wasted), $1.0000</td>" in wasted  # the failed step's row
    assert "1,100,000, $3.0000</td>" in wasted


def test_the_command_takes_prices_without_a_workflow(tmp_path: Path) -> None:
    location = _runs_with_usage(tmp_path)
    (tmp_path / "prices.json").write_text(json.dumps(PRICES), encoding="utf-8")
    server = Serve(tmp_path, location, "--prices", "prices.json")
    try:
        status, _, page = _request(server.url, "/run?id=paid")
        code, _ = server.stop(signal.SIGTERM)
    finally:
        server.kill()
    assert status == 200
    assert "<dt>dollars</dt><dd>$3.0000" in page
    assert code == 143
