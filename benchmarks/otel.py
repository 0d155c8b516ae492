"""What tracing costs a run, per step, beside what the OpenTelemetry SDK costs per span.

Runs ``--size`` no-op async steps as a chain (each depends on the one before)
and as one wide batch, with a ``checkpoint_fn`` that only counts, in four
configurations:

- ``off``: no ``on_event`` (tracing off: the core never imports OpenTelemetry);
- ``a no-op listener``: ``on_event`` a function that does nothing (what the
  core's events cost by themselves);
- ``Tracing, no SDK``: ``Tracing()`` on a `NoOpTracerProvider` (the API alone,
  as an application that installs no SDK has it);
- ``Tracing, SDK``: ``Tracing(provider)`` on an SDK `TracerProvider` with a
  `SimpleSpanProcessor` and an exporter that drops every span (so that what is
  measured is making the spans, not shipping them);
- ``SDK spans alone``: the same provider starting and ending ``--spans`` bare
  spans (no attributes) and as many with the attributes an attempt span gets,
  under one parent, in the same process.

The garbage collector is off while a run is timed (as `timeit` does); medians
of ``--repeat`` runs after two warm-up runs, the configurations taking turns
round by round. Prints a Markdown table: µs per
step, the extra µs per step tracing adds, and that extra against the SDK's own
µs per span (each step makes one span, the run one more)::

    python benchmarks/otel.py [--size 1000] [--spans 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import TYPE_CHECKING, Any

import source

source.put_on_path()

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from executionkit import Step, Workflow, WorkflowCheckpoint  # noqa: E402
from executionkit.otel import Tracing  # noqa: E402

TIMES = "\N{MULTIPLICATION SIGN}"

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from opentelemetry.sdk.trace import ReadableSpan

# What an attempt span carries at its end; set on the bare spans of the SDK's measure too.
ATTEMPT_ATTRIBUTES: dict[str, Any] = {
    "executionkit.run_id": "bench",
    "executionkit.step": "s1",
    "executionkit.attempt": 1,
}
END_ATTRIBUTES: dict[str, Any] = {
    "gen_ai.usage.input_tokens": 0,
    "gen_ai.usage.output_tokens": 0,
    "executionkit.llm_calls": 0,
    "executionkit.outcome": "ok",
}


class DroppingExporter(SpanExporter):
    """Accepts every span and keeps none."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        del spans
        return SpanExportResult.SUCCESS


def sdk_provider() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DroppingExporter()))
    return provider


def ignore(event: object) -> None:
    del event


async def noop(ctx: Any) -> int:
    del ctx
    return 1


def build(shape: str, size: int) -> Workflow:
    names = [f"s{n}" for n in range(size)]
    if shape == "wide":
        return Workflow(Step(name, noop) for name in names)
    return Workflow(
        Step(name, noop, depends_on=() if n == 0 else (names[n - 1],))
        for n, name in enumerate(names)
    )


def timed_once(work: Callable[[], object], per: int) -> float:
    """µs per unit of one call of ``work`` (``per`` units a call), the collector off."""
    gc.collect()
    gc.disable()
    try:
        began = time.perf_counter()
        work()
        took = time.perf_counter() - began
    finally:
        gc.enable()
    return took / per * 1e6


def timed(work: Callable[[], object], per: int, repeat: int) -> float:
    """Median µs per unit of ``work``, after two warm-up calls."""
    return statistics.median([timed_once(work, per) for _ in range(repeat + 2)][2:])


def per_step(shape: str, size: int, listeners: Sequence[object], repeat: int) -> list[float]:
    """Median µs per step with each ``on_event`` (None: none), interleaved round by round.

    Each round runs every configuration once, so that a machine busy for a while
    slows all of them alike rather than one.
    """
    workflow = build(shape, size)
    taken = [0]

    def count(checkpoint: WorkflowCheckpoint) -> None:
        del checkpoint
        taken[0] += 1

    def runner(on_event: object) -> Callable[[], object]:
        if on_event is None:
            return lambda: workflow.run_sync(checkpoint_fn=count)
        return lambda: workflow.run_sync(checkpoint_fn=count, on_event=on_event)  # type: ignore[arg-type]

    runs = [runner(on_event) for on_event in listeners]
    rounds = [[timed_once(run, size) for run in runs] for _ in range(repeat + 2)][2:]
    return [statistics.median(column) for column in zip(*rounds, strict=True)]


def per_span(provider: TracerProvider, spans: int, repeat: int, *, attributes: bool) -> float:
    tracer = provider.get_tracer("bench")
    parent = tracer.start_span("parent")
    context = trace.set_span_in_context(parent)

    def bare() -> None:
        for _ in range(spans):
            tracer.start_span("executionkit.step s1", context).end()

    def like_an_attempt() -> None:
        for _ in range(spans):
            span = tracer.start_span(
                "executionkit.step s1", context, attributes=ATTEMPT_ATTRIBUTES
            )
            span.set_attributes(END_ATTRIBUTES)
            span.set_status(trace.StatusCode.OK)
            span.end()

    took = timed(like_an_attempt if attributes else bare, spans, repeat)
    parent.end()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    provider = sdk_provider()
    bare = per_span(provider, args.spans, args.repeat, attributes=False)
    dressed = per_span(provider, args.spans, args.repeat, attributes=True)
    print(f"SDK alone, µs per span ({args.spans:,} spans): bare {bare:.2f}, ", end="")
    print(f"with an attempt span's attributes and status {dressed:.2f}")
    print()
    print(
        f"| {args.size:,} steps | off µs/step | no-op listener µs/step "
        "| Tracing, no SDK µs/step | Tracing, SDK µs/step "
        "| added by tracing µs/step | added ÷ SDK span (with attributes) | on ÷ off |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    spans_per_step = 1 + 1 / args.size  # an attempt span each, and the run's
    for shape in ("chain", "wide"):
        configurations = [None, ignore, Tracing(trace.NoOpTracerProvider()), Tracing(provider)]
        off, listener, no_sdk, on = per_step(shape, args.size, configurations, args.repeat)
        added = on - off
        print(
            f"| {shape} | {off:.1f} | {listener:.1f} | {no_sdk:.1f} | {on:.1f} | {added:.1f} "
            f"| {added / (dressed * spans_per_step):.2f}{TIMES} | {on / off:.2f}{TIMES} |"
        )
    provider.shutdown()


if __name__ == "__main__":
    main()
