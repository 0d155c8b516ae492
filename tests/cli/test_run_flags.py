"""The run-option flags read in this process: what `RunFlags` asks of `Workflow.run` (issue 30).

`tests/cli/test_cli_run_options.py` runs each flag through a real process; these check
the reading itself, every refusal and the resources the flags make (a process pool, a
tracer provider) closed after the run, where coverage can see them.
"""

from __future__ import annotations

import io
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from executionkit import Budget, Price, Prices, Step, TokenUsage, Workflow
from executionkit._cli._exits import CliError
from executionkit._cli._parser import build_parser
from executionkit._cli._run_options import RunFlags
from executionkit.otel import Tracing

if TYPE_CHECKING:
    from pathlib import Path


def flags_of(*argv: str) -> RunFlags:
    return RunFlags.of(build_parser().parse_args(["run", "m:w", *argv]))


def test_no_flag_asks_for_nothing() -> None:
    flags = flags_of()
    assert (flags.options, flags.listeners, flags.history, flags.asked) == ({}, [], False, False)
    flags.close()


def test_each_flag_becomes_its_run_option() -> None:
    flags = flags_of(
        "--max-concurrency",
        "3",
        "--budget",
        "llm_calls=5",
        "--budget",
        "input_tokens=900",
        "--stop-grace",
        "0.5",
        "--history",
    )
    assert flags.options == {
        "max_concurrency": 3,
        "budget": TokenUsage(input_tokens=900, llm_calls=5),
        "stop_grace": 0.5,
    }
    assert flags.history
    assert flags.asked
    assert flags_of("--stop-grace", "inf").options == {"stop_grace": float("inf")}


def test_executor_processes_makes_a_pool_that_close_shuts_down() -> None:
    flags = flags_of("--executor", "processes")
    pool = flags.options["executor"]
    assert isinstance(pool, ProcessPoolExecutor)
    flags.close()
    with pytest.raises(RuntimeError):
        pool.submit(int)
    assert flags_of("--executor", "threads").options == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--budget", "tokens=5"), "--budget tokens=5: expected FIELD=N with FIELD one of"),
        (("--budget", "llm_calls"), "--budget llm_calls: expected FIELD=N"),
        (("--budget", "llm_calls=x"), "N must be a whole number of 1 or more, got 'x'"),
        (("--budget", "llm_calls=²"), "N must be a whole number of 1 or more, got '²'"),
        (("--budget", "output_tokens=1", "--budget", "output_tokens=2"), "given twice"),
        (("--budget", "dollars=5"), r"--budget dollars=5 needs --prices FILE to turn"),
    ],
)
def test_a_bad_budget_is_bad_input_naming_it(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(CliError, match=message):
        flags_of(*argv)


def test_a_dollar_budget_with_a_price_file_is_a_budget_in_dollars(tmp_path: Path) -> None:
    """``--budget dollars=N --prices FILE``: a `Budget` with the tokens limits given beside."""
    prices = tmp_path / "prices.json"
    prices.write_text('{"m": {"input_per_million": 1, "output_per_million": "2.5"}}')
    flags = flags_of("--prices", str(prices), "--budget", "dollars=2.50")
    assert flags.options["budget"] == Budget(dollars="2.50")
    assert flags.options["prices"] == Prices({"m": Price(1, "2.5")})
    both = flags_of("--prices", str(prices), "--budget", "dollars=1", "--budget", "llm_calls=3")
    assert both.options["budget"] == Budget(tokens=TokenUsage(llm_calls=3), dollars=1)
    bad = [
        ("dollars=0", "N must be a positive number of dollars, got '0'"),
        ("dollars=x", "N must be a positive number of dollars, got 'x'"),
        ("dollars=inf", "N must be a positive number of dollars, got 'inf'"),
        ("dollars=٣", "N must be a positive number of dollars, got '٣'"),
    ]
    for text, message in bad:
        with pytest.raises(CliError, match=message):
            flags_of("--prices", str(prices), "--budget", text)
    with pytest.raises(CliError, match="given twice"):
        flags_of("--prices", str(prices), "--budget", "dollars=1", "--budget", "dollars=2")
    with pytest.raises(CliError, match="cannot be read as JSON"):
        flags_of("--prices", str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--max-concurrency", "x"), "expected a whole number of 1 or more, got 'x'"),
        (("--max-concurrency", "-2"), "expected a whole number of 1 or more, got '-2'"),
        (("--stop-grace", "soon"), "expected a number of seconds, 0 or more (or inf), got 'soon'"),
        (("--stop-grace", "nan"), "expected a number of seconds, 0 or more (or inf), got 'nan'"),
    ],
)
def test_a_bad_number_is_a_usage_error(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        flags_of(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_trace_console_traces_a_run_and_close_exports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    flags = flags_of("--trace", "console")
    (tracing,) = flags.listeners
    assert isinstance(tracing, Tracing)
    assert isinstance(flags.provider, TracerProvider)
    Workflow([Step("only", lambda ctx: 1, inline=True)]).run_sync(on_event=tracing)
    flags.close()
    assert '"name": "executionkit.step only"' in stream.getvalue()


def test_trace_otlp_needs_an_endpoint_and_takes_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [name for name in _environ() if name.startswith("OTEL_EXPORTER_OTLP_")]:
        monkeypatch.delenv(name)
    with pytest.raises(CliError, match="set OTEL_EXPORTER_OTLP_ENDPOINT"):
        flags_of("--trace", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    flags = flags_of("--trace", "otlp")
    assert isinstance(flags.listeners[0], Tracing)
    flags.provider.shutdown = lambda: None  # nothing listens there: no export to wait for
    flags.close()


def _environ() -> dict[str, Any]:
    import os  # noqa: PLC0415

    return dict(os.environ)
