"""The run options the command line reaches: ``run``'s flags, and ``serve --workflow``'s.

`add_run_options` adds the flags to a parser; `RunFlags.of` reads them (a
`CliError` naming the flag for a bad value) into the keyword arguments of
`Workflow.run` they stand for, the listeners they add and whether the store
keeps every checkpoint. Both commands read them here, so a run resumed from
the page runs as the command line would have run it.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import CliError

if TYPE_CHECKING:
    import argparse

    from executionkit._workflow import Workflow

_BUDGET_FIELDS = ("input_tokens", "output_tokens", "llm_calls")
_EXECUTORS = ("threads", "processes")
_TRACES = ("console", "otlp")
_LIMIT_FIELDS = ("requests", "tokens", "concurrency", "per")
_LIMIT_FORM = "KEY:FIELD=N,... with FIELD requests, tokens, concurrency or per"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Add the flags of the run options to ``parser`` (``run``, ``serve``)."""
    group = parser.add_argument_group("run options")
    group.add_argument(
        "--executor",
        choices=_EXECUTORS,
        default="threads",
        help=(
            "where plain (def) steps run: a worker thread each (default), or a pool of "
            "processes (CPU-bound steps; their functions and ctx values must pickle)"
        ),
    )
    group.add_argument(
        "--max-concurrency",
        metavar="N",
        type=_positive_int,
        help="at most N steps and map items at once in the whole run (default: no limit)",
    )
    group.add_argument(
        "--budget",
        metavar="FIELD=N",
        action="append",
        default=[],
        help=(
            "stop starting steps once the run has spent N of FIELD (input_tokens, "
            "output_tokens, llm_calls, or dollars with --prices), restored usage included; "
            "repeat for more"
        ),
    )
    group.add_argument(
        "--limit",
        metavar="KEY:FIELD=N,...",
        action="append",
        default=[],
        help=(
            "the named limit of the steps that draw on KEY (Step(..., limit=KEY)): at most "
            "requests=N attempts and tokens=N tokens per window of per=SECONDS (default "
            "60), and concurrency=N at once; give one or more of the three, such as "
            "openai:requests=500,tokens=1000000; repeat for more keys"
        ),
    )
    group.add_argument(
        "--prices",
        metavar="FILE",
        help=(
            "a JSON price file (model to input_per_million and output_per_million dollars, "
            "'*' for any other model): for --budget dollars=N, and to show the bill in "
            "dollars (run's progress, serve's pages)"
        ),
    )
    group.add_argument(
        "--stop-grace",
        metavar="SECONDS",
        type=_grace,
        default=5.0,
        help=(
            "after Ctrl-C or SIGTERM, how long to wait for plain steps already running in "
            "threads; those still running then are abandoned, left in flight, and run again "
            "on resume (default 5; 0: at once; inf: wait for them)"
        ),
    )
    group.add_argument(
        "--history",
        action="store_true",
        help=(
            "keep every checkpoint in a sqlite:// or postgresql:// checkpoint, not only "
            "the latest (for inspect --history and fork --seq); JSON Lines files always do"
        ),
    )
    group.add_argument(
        "--trace",
        choices=_TRACES,
        help=(
            "record the run as OpenTelemetry spans (needs opentelemetry-sdk): printed to "
            "stderr (console), or sent with OTLP over HTTP (opentelemetry-exporter-otlp-"
            "proto-http) to the endpoint the standard OTEL_EXPORTER_OTLP_* variables name"
        ),
    )


def _positive_int(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        msg = f"expected a whole number of 1 or more, got {text!r}"
        raise _bad(msg)
    return number


def _grace(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0:
        msg = f"expected a number of seconds, 0 or more (or inf), got {text!r}"
        raise _bad(msg)
    return seconds


def _bad(message: str) -> Exception:
    import argparse  # noqa: PLC0415 - loaded already: the parser is running

    return argparse.ArgumentTypeError(message)


@dataclass
class RunFlags:
    """What the run-option flags ask for."""

    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of `Workflow.run`."""
    listeners: list[Any] = field(default_factory=list)
    """Listeners to add to the run's ``on_event``."""
    history: bool = False
    """Whether the store keeps every checkpoint."""
    executor: Any = None
    """The executor made for ``--executor processes``, to shut down after the run."""
    provider: Any = None
    """The tracer provider made for ``--trace``, flushed after the run."""
    asked: bool = False
    """Whether any flag was given another value than its default."""

    @classmethod
    def of(cls, args: argparse.Namespace) -> RunFlags:
        """Read the flags of ``args``; `CliError` naming the flag if one cannot be used."""
        flags = cls(history=bool(args.history))
        options = flags.options
        if args.max_concurrency is not None:
            options["max_concurrency"] = args.max_concurrency
        if args.prices is not None:
            from executionkit._cli._prices import load_prices  # noqa: PLC0415 - loads decimal

            options["prices"] = load_prices(args.prices)
        if args.budget:
            options["budget"] = _budget(args.budget, priced="prices" in options)
        if args.limit:
            options["limits"] = _limits(args.limit)
        if args.stop_grace != 5.0:  # noqa: PLR2004 - run()'s default, passed only when changed
            options["stop_grace"] = args.stop_grace
        if args.executor == "processes":
            from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

            flags.executor = options["executor"] = ProcessPoolExecutor()
        if args.trace is not None:
            tracing, flags.provider = _tracing(args.trace)
            flags.listeners.append(tracing)
        # --prices alone also shows dollars (serve's pages), with or without a workflow.
        chosen = [name for name in options if name != "prices"]
        flags.asked = bool(chosen or flags.listeners or flags.history)
        return flags

    def check_limits(self, workflow: Workflow) -> None:
        """`CliError` if a step of ``workflow`` draws on a limit key no ``--limit`` gives.

        What a run refuses before any step, said before any run: ``serve`` checks at
        start rather than refusing every answer given on its pages.
        """
        from executionkit._cli._run import in_cli_terms  # noqa: PLC0415 - _run imports this
        from executionkit._define._options import _checked_limits  # noqa: PLC0415
        from executionkit._errors import RunArgumentError  # noqa: PLC0415

        graph = workflow._graph  # noqa: SLF001 - the keys its steps draw on, as run() reads them
        try:
            _checked_limits(graph, self.options.get("limits"))
        except RunArgumentError as exc:
            raise CliError(in_cli_terms(str(exc), workflow)) from None

    def close(self) -> None:
        """Export the spans still buffered; shut the process pool down, if one was made."""
        if self.provider is not None:
            self.provider.shutdown()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


def _budget(given: list[str], *, priced: bool) -> Any:
    """``--budget FIELD=N``s: a `TokenUsage`, or a `Budget` when dollars are among them."""
    from executionkit._types import TokenUsage  # noqa: PLC0415

    limits: dict[str, int] = {}
    dollars = None
    for text in given:
        name, equals, value = text.partition("=")
        if not equals or name not in (*_BUDGET_FIELDS, "dollars"):
            fields = ", ".join((*_BUDGET_FIELDS, "dollars"))
            msg = f"--budget {text}: expected FIELD=N with FIELD one of {fields}"
            raise CliError(msg)
        if name in limits or (name == "dollars" and dollars is not None):
            msg = f"--budget {name} is given twice"
            raise CliError(msg)
        if name == "dollars":
            dollars = _dollars(text, value, priced=priced)
            continue
        if not value.isascii() or not value.isdigit() or int(value) < 1:
            msg = f"--budget {text}: N must be a whole number of 1 or more, got {value!r}"
            raise CliError(msg)
        limits[name] = int(value)
    if dollars is None:
        return TokenUsage(**limits)
    from executionkit._prices import Budget  # noqa: PLC0415 - loads decimal

    return Budget(tokens=TokenUsage(**limits) if limits else None, dollars=dollars)


def _dollars(text: str, value: str, *, priced: bool) -> Any:
    """The amount of ``--budget dollars=N``: a positive decimal, with ``--prices`` given."""
    from decimal import Decimal, InvalidOperation  # noqa: PLC0415

    if not priced:
        msg = f"--budget {text} needs --prices FILE to turn the ledger's tokens into dollars"
        raise CliError(msg)
    try:
        amount = Decimal(value) if value.isascii() else Decimal("NaN")
    except InvalidOperation:
        amount = Decimal("NaN")
    if not amount.is_finite() or amount <= 0:
        msg = f"--budget {text}: N must be a positive number of dollars, got {value!r}"
        raise CliError(msg)
    return amount


def _limits(given: list[str]) -> list[Any]:
    """``--limit KEY:FIELD=N,...``s: a `Limit` each, one per key."""
    from executionkit._limits import Limit  # noqa: PLC0415 - only runs with limits load it

    limits: dict[str, Limit] = {}
    for text in given:
        key, fields = _limit_fields(text)
        if key in limits:
            msg = (
                f"--limit {key} is given twice ({limits[key].text()} and {text}): one "
                f"--limit per key"
            )
            raise CliError(msg)
        try:
            limits[key] = Limit(key, **fields)
        except (TypeError, ValueError) as exc:  # the Limit's own message names the field
            msg = f"--limit {text}: {exc}"
            raise CliError(msg) from None
    return list(limits.values())


def _limit_fields(text: str) -> tuple[str, dict[str, Any]]:
    """The key and the fields of one ``--limit``: `CliError` naming the part that is wrong.

    The key is everything before the last colon (no field holds one), so a key such as
    ``azure:gpt-4o`` reads back as `Limit.text` writes it.
    """
    from executionkit._errors import did_you_mean  # noqa: PLC0415 - only errors need difflib

    key, colon, rest = text.rpartition(":")
    if not colon:
        msg = f"--limit {text}: expected {_LIMIT_FORM}, such as api:requests=500,per=60"
        raise CliError(msg)
    if not key:
        msg = f"--limit {text}: the KEY before the colon is empty"
        raise CliError(msg)
    if not rest:
        msg = f"--limit {text} nothing follows the colon; expected {_LIMIT_FORM}"
        raise CliError(msg)
    fields: dict[str, Any] = {}
    for part in rest.split(","):
        name, equals, value = part.partition("=")
        if not equals:
            msg = f"--limit {text}: {part!r} is not FIELD=N; expected {_LIMIT_FORM}"
            raise CliError(msg)
        if name not in _LIMIT_FIELDS:
            hint = did_you_mean(name, _LIMIT_FIELDS)
            msg = (
                f"--limit {text}: unknown field {name!r}{hint} (the fields are "
                f"{', '.join(_LIMIT_FIELDS)})"
            )
            raise CliError(msg)
        if name in fields:
            msg = f"--limit {text}: {name} is given twice"
            raise CliError(msg)
        fields[name] = _limit_value(text, name, value)
    return key, fields


def _limit_value(text: str, name: str, value: str) -> int | float:
    """A field's number as it was written; whether it is one `Limit` can use, it says."""
    if name == "per":
        seconds = None
        if value.isascii() and value.strip() == value:
            with contextlib.suppress(ValueError):
                seconds = float(value)
        if seconds is None:
            msg = f"--limit {text}: per must be a number of seconds, got {value!r}"
            raise CliError(msg)
        return seconds
    digits = value[1:] if value[:1] in {"+", "-"} else value
    if not (digits.isascii() and digits.isdigit()):
        msg = f"--limit {text}: {name} must be a whole number, got {value!r}"
        raise CliError(msg)
    return int(value)


def _tracing(kind: str) -> tuple[Any, Any]:
    """A `Tracing` listener exporting spans to the console or with OTLP, and its provider."""
    try:
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
        from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        from executionkit.otel import Tracing  # noqa: PLC0415
    except ImportError:
        msg = (
            f"--trace {kind} needs the OpenTelemetry SDK beside executionkit[otel]: "
            f"pip install opentelemetry-sdk"
        )
        raise CliError(msg) from None
    provider = TracerProvider()
    if kind == "console":
        import sys  # noqa: PLC0415

        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )
        except ImportError:
            msg = (
                "--trace otlp needs the OTLP exporter: pip install "
                "opentelemetry-exporter-otlp-proto-http"
            )
            raise CliError(msg) from None
        if not any(name.startswith("OTEL_EXPORTER_OTLP_") for name in os.environ):
            msg = (
                "--trace otlp: set OTEL_EXPORTER_OTLP_ENDPOINT (or "
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) to the collector's address"
            )
            raise CliError(msg)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider), provider
