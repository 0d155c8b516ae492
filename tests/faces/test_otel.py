"""executionkit.otel: runs as OpenTelemetry spans, one trace across resumes.

Spans go to the SDK's in-memory exporter through a `SimpleSpanProcessor` (each
span is exported when it ends, on the thread that ends it), so a test reads them
right after ``run`` returns. One test sends them with the SDK's OTLP/HTTP
exporter to a receiver it starts on loopback and decodes the protobuf bodies.
Kills are simulated by cancelling the run's task while a step waits on an
`asyncio.Event`, keeping only what ``checkpoint_fn`` was handed.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit import events as ev
from executionkit.otel import Tracing
from executionkit.progress import ConsoleProgress

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from executionkit.events import EventCallback


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider
    tracer_provider.shutdown()


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else int(span.parent.span_id)


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


def tree(spans: tuple[ReadableSpan, ...]) -> list[tuple[Any, ...]]:
    """The spans as ``(name, item key or None, attempt, [children])``, in start order."""
    ids = {span_id(span) for span in spans}

    def below(parent: int | None) -> list[tuple[Any, ...]]:
        children = sorted(
            (span for span in spans if parent_id(span) == parent), key=lambda s: s.start_time or 0
        )
        return [
            (
                span.name,
                attrs(span).get("executionkit.item"),
                attrs(span).get("executionkit.attempt"),
                below(span_id(span)),
            )
            for span in children
        ]

    roots = {parent_id(span) for span in spans if parent_id(span) not in ids}
    return [node for root in sorted(roots, key=str) for node in below(root)]


def attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or {}


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def status(span: ReadableSpan) -> str:
    return span.status.status_code.name


def usage_of(span: ReadableSpan) -> tuple[object, object, object]:
    a = attrs(span)
    return (
        a.get("gen_ai.usage.input_tokens"),
        a.get("gen_ai.usage.output_tokens"),
        a.get("executionkit.llm_calls"),
    )


def reloaded(checkpoint: WorkflowCheckpoint) -> WorkflowCheckpoint:
    """The checkpoint as a store gives it back: through JSON text."""
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(checkpoint.to_dict())))


def spending(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """Reports usage as it spends it, and more with its result."""
    current_step().add_usage(TokenUsage(3, 4, 1), model="m")
    return PatternResult("A", cost=TokenUsage(10, 5, 1))


def pipeline() -> Workflow:
    """a spends; b needs a; sub is a sub-workflow; each maps a sub-workflow over two items."""
    inner = Workflow([Step("inner", lambda ctx: "i")])
    per_item = Workflow([Step("double", lambda ctx: ctx["item"] * 2)])
    return Workflow(
        [
            Step("a", spending),
            Step("b", lambda ctx: [1, 2], depends_on=("a",)),
            Step("sub", inner, depends_on=("a",)),
            Step.map("each", per_item, over="b"),
        ]
    )


async def test_the_span_tree_has_a_run_span_attempt_spans_and_nested_sub_workflows(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Run → step attempts; map items under their map step; sub-workflow runs under attempts."""
    await pipeline().run(run_id="tree", on_event=Tracing(provider))
    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        (
            "executionkit.run",
            None,
            None,
            [
                ("executionkit.step a", None, 1, []),
                ("executionkit.step b", None, 1, []),
                (
                    "executionkit.step sub",
                    None,
                    1,
                    [
                        (
                            "executionkit.run sub",
                            None,
                            None,
                            [("executionkit.step inner", None, 1, [])],
                        )
                    ],
                ),
                (
                    "executionkit.step each",
                    None,
                    1,
                    [
                        (
                            "executionkit.item each",
                            key,
                            1,
                            [
                                (
                                    "executionkit.run each",
                                    None,
                                    None,
                                    [("executionkit.step double", None, 1, [])],
                                )
                            ],
                        )
                        for key in ("0", "1")
                    ],
                ),
            ],
        )
    ]
    assert len({trace_id(span) for span in spans}) == 1
    assert all(status(span) == "OK" for span in spans)
    [run] = named(spans, "executionkit.run")
    assert dict(attrs(run)) == {
        "executionkit.run_id": "tree",
        "executionkit.resumed": False,
        "executionkit.steps": 4,
        "executionkit.restored": 0,
        "executionkit.outcome": "finished",
        "executionkit.executed": 4,
        "gen_ai.usage.input_tokens": 13,
        "gen_ai.usage.output_tokens": 9,
        "executionkit.llm_calls": 2,
    }
    [item] = [
        s for s in named(spans, "executionkit.item each") if attrs(s)["executionkit.item"] == "1"
    ]
    assert attrs(item)["executionkit.run_id"] == "tree"
    [child] = [s for s in named(spans, "executionkit.run each") if parent_id(s) == span_id(item)]
    assert attrs(child)["executionkit.run_id"] == "tree/each/1"
    assert attrs(child)["executionkit.parent_step"] == "each"
    [each] = named(spans, "executionkit.step each")
    assert (attrs(each)["executionkit.items"], attrs(each)["executionkit.items_recorded"]) == (
        2,
        0,
    )


async def test_an_attempt_span_carries_usage_reported_both_ways_under_gen_ai_names(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """``add_usage`` and ``PatternResult.cost`` add up on the attempt's span."""
    await Workflow([Step("a", spending)]).run(on_event=Tracing(provider))
    [step] = named(exporter.get_finished_spans(), "executionkit.step a")
    assert dict(attrs(step)) == {
        "executionkit.run_id": attrs(step)["executionkit.run_id"],
        "executionkit.step": "a",
        "executionkit.attempt": 1,
        "executionkit.outcome": "ok",
        "gen_ai.usage.input_tokens": 13,
        "gen_ai.usage.output_tokens": 9,
        "executionkit.llm_calls": 2,
    }
    assert step.kind is trace.SpanKind.INTERNAL


async def test_a_retried_attempt_is_an_error_span_with_what_it_wasted(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Attempt 1 fails after spending: ERROR, exception event, its usage; attempt 2 is ok."""
    calls: list[int] = []

    def flaky(ctx: Mapping[str, Any]) -> str:
        calls.append(1)
        current_step().add_usage(TokenUsage(7, 1, 1))
        if len(calls) == 1:
            msg = "could not parse the answer"
            raise ValueError(msg)
        return "ok"

    step = Step("flaky", flaky, retries=1, retry_delay=0, retry_jitter=0)
    await Workflow([step]).run(on_event=Tracing(provider))
    spans = exporter.get_finished_spans()
    first, second = sorted(
        named(spans, "executionkit.step flaky"), key=lambda s: s.start_time or 0
    )
    assert (attrs(first)["executionkit.attempt"], attrs(second)["executionkit.attempt"]) == (1, 2)
    assert status(first) == "ERROR"
    assert first.status.description == "ValueError: could not parse the answer"
    assert attrs(first)["executionkit.outcome"] == "failed"
    assert usage_of(first) == (7, 1, 1)
    [event] = first.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "ValueError"
    assert (status(second), attrs(second)["executionkit.outcome"]) == ("OK", "ok")
    assert usage_of(second) == (7, 1, 1)
    [run] = named(spans, "executionkit.run")
    assert usage_of(run) == (14, 2, 2)  # the waste is counted in the run's


async def test_a_failed_step_and_its_run_end_with_an_error_status_and_the_exception(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The failed attempt and the run span are ERROR; the other step still finished ok."""

    def bad(ctx: Mapping[str, Any]) -> str:
        msg = "boom"
        raise RuntimeError(msg)

    workflow = Workflow([Step("bad", bad), Step("fine", lambda ctx: 1)])
    with pytest.raises(WorkflowFailed):
        await workflow.run(on_event=Tracing(provider), on_error="continue")
    spans = exporter.get_finished_spans()
    [failed] = named(spans, "executionkit.step bad")
    assert (status(failed), attrs(failed)["executionkit.outcome"]) == ("ERROR", "failed")
    assert failed.status.description == "RuntimeError: boom"
    assert [event.name for event in failed.events] == ["exception"]
    [fine] = named(spans, "executionkit.step fine")
    assert status(fine) == "OK"
    [run] = named(spans, "executionkit.run")
    assert (status(run), attrs(run)["executionkit.outcome"]) == ("ERROR", "failed")
    assert str((run.events[0].attributes or {})["exception.type"]).endswith(".WorkflowFailed")


async def test_a_timed_out_attempt_says_timeout(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The runner's own timeout is told from a failure by its message."""
    never = asyncio.Event()

    async def stuck(ctx: Mapping[str, Any]) -> str:
        await never.wait()
        return "never"

    with pytest.raises(WorkflowFailed):
        await Workflow([Step("stuck", stuck, timeout=0.01)]).run(on_event=Tracing(provider))
    [span] = named(exporter.get_finished_spans(), "executionkit.step stuck")
    assert (status(span), attrs(span)["executionkit.outcome"]) == ("ERROR", "timeout")


async def test_a_failed_map_item_is_an_error_span_under_its_map_step(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Item spans carry their key; the failed one is ERROR, the map step fails with it."""

    def half(item: int, ctx: Mapping[str, Any]) -> int:
        current_step().add_usage(TokenUsage(item, 0, 1))
        if item == 2:
            msg = f"item {item} is bad"
            raise ValueError(msg)
        return item

    workflow = Workflow([Step.map("each", half, over="numbers")])
    with pytest.raises(WorkflowFailed):
        await workflow.run({"numbers": {"one": 1, "two": 2}}, on_event=Tracing(provider))
    spans = exporter.get_finished_spans()
    [step] = named(spans, "executionkit.step each")
    items = {
        attrs(span)["executionkit.item"]: span for span in named(spans, "executionkit.item each")
    }
    assert sorted(items) == ["one", "two"]
    assert all(parent_id(span) == span_id(step) for span in items.values())
    assert (status(items["one"]), usage_of(items["one"])) == ("OK", (1, 0, 1))
    assert (status(items["two"]), usage_of(items["two"])) == ("ERROR", (2, 0, 1))
    assert items["two"].status.description == "ValueError: item 2 is bad"
    assert status(step) == "ERROR"


async def test_a_suspended_run_ends_ok_waiting_for_an_answer_without_the_question(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The run span names the ask step; the question text is not recorded by default."""
    workflow = Workflow([Step.ask("approve", lambda ctx: "Ship the secret plan?")])
    result = await workflow.run(on_event=Tracing(provider))
    assert result.pending == {"approve": "Ship the secret plan?"}
    [run] = exporter.get_finished_spans()
    assert (status(run), attrs(run)["executionkit.outcome"]) == ("OK", "suspended")
    assert attrs(run)["executionkit.waiting_for"] == ("approve",)
    assert [event.name for event in run.events] == ["question asked", "waiting for an answer"]
    assert "secret" not in repr([dict(event.attributes or {}) for event in run.events])
    assert "secret" not in repr(dict(attrs(run)))


async def test_record_outputs_records_the_question_as_json_cut_short(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """With ``record_outputs=True`` the question is in the event, as JSON, at most 1,000 chars."""
    long = {"plan": "x" * 2000}
    workflow = Workflow(
        [Step.ask("short", lambda ctx: 'Ship "it"?'), Step.ask("long", lambda ctx: long)]
    )
    await workflow.run(on_event=Tracing(provider, record_outputs=True))
    [run] = exporter.get_finished_spans()
    asked = {
        (event.attributes or {})["executionkit.step"]: (event.attributes or {})[
            "executionkit.question"
        ]
        for event in run.events
        if event.name == "question asked"
    }
    assert asked["short"] == '"Ship \\"it\\"?"'
    assert isinstance(asked["long"], str)
    assert len(asked["long"]) == 1000
    assert asked["long"].startswith('{"plan": "xxx')


async def test_a_crash_and_a_resume_make_one_trace_under_the_first_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """The traceparent survives JSON; the resumed span is the first's child; none restored."""
    broken = [True]

    def fragile(ctx: Mapping[str, Any]) -> str:
        if broken[0]:
            msg = "crash"
            raise RuntimeError(msg)
        return "fixed"

    workflow = Workflow([Step("a", spending), Step("b", fragile, depends_on=("a",))])
    checkpoints: list[WorkflowCheckpoint] = []
    tracing = Tracing(provider)
    with pytest.raises(WorkflowFailed):
        await workflow.run(checkpoint_fn=checkpoints.append, on_event=tracing)
    [first_run] = named(exporter.get_finished_spans(), "executionkit.run")
    stored = checkpoints[-1].trace
    assert stored is not None
    assert stored.split("-")[1:3] == [f"{trace_id(first_run):032x}", f"{span_id(first_run):016x}"]
    exporter.clear()
    broken[0] = False
    await workflow.run(resume_from=reloaded(checkpoints[-1]), on_event=tracing)
    spans = exporter.get_finished_spans()
    assert {trace_id(span) for span in spans} == {trace_id(first_run)}
    assert [span.name for span in spans] == ["executionkit.step b", "executionkit.run"]
    resumed = spans[1]
    assert parent_id(resumed) == span_id(first_run)
    assert resumed.links == ()
    assert attrs(resumed)["executionkit.resumed"] is True
    assert attrs(resumed)["executionkit.restored"] == 1
    assert usage_of(resumed) == (0, 0, 0)  # this invocation spent nothing; a's usage was restored


async def test_link_resumes_starts_a_new_trace_that_links_to_the_first_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """With ``link_resumes=True`` the resumed invocation is a root with a link."""
    workflow = Workflow(
        [Step.ask("approve", lambda ctx: "ok?"), Step("after", lambda ctx: 1, ("approve",))]
    )
    checkpoints: list[WorkflowCheckpoint] = []
    tracing = Tracing(provider, link_resumes=True)
    await workflow.run(checkpoint_fn=checkpoints.append, on_event=tracing)
    [first] = exporter.get_finished_spans()
    exporter.clear()
    await workflow.run(
        resume_from=reloaded(checkpoints[-1]), answers={"approve": "yes"}, on_event=tracing
    )
    [step, run] = exporter.get_finished_spans()
    assert run.parent is None
    assert trace_id(run) != trace_id(first)
    assert trace_id(step) == trace_id(run)
    [link] = run.links
    assert (link.context.trace_id, link.context.span_id) == (trace_id(first), span_id(first))
    assert [event.name for event in run.events] == ["question answered"]


async def test_a_run_killed_and_resumed_three_times_reads_as_one_trace(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Each kill leaves a cancelled attempt; four invocations, one trace, one first span."""
    kills = 3
    entered = asyncio.Event()
    release = asyncio.Event()
    calls: list[str] = []

    async def slow(ctx: Mapping[str, Any]) -> str:
        name = current_step().name
        calls.append(name)
        if name != "four" and calls.count(name) == 1:
            entered.set()
            await release.wait()  # never set: the kill comes first
        return name

    workflow = Workflow(
        [
            Step("zero", lambda ctx: "zero"),  # checkpointed before the first kill
            Step("one", slow, depends_on=("zero",)),
            Step("two", slow, depends_on=("one",)),
            Step("three", slow, depends_on=("two",)),
            Step("four", slow, depends_on=("three",)),
        ]
    )
    saved: list[WorkflowCheckpoint] = []
    tracing = Tracing(provider)
    for _ in range(kills):
        entered.clear()
        resume = reloaded(saved[-1]) if saved else None
        task = asyncio.create_task(
            workflow.run(resume_from=resume, checkpoint_fn=saved.append, on_event=tracing)
        )
        async with asyncio.timeout(5):
            await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    result = await workflow.run(resume_from=reloaded(saved[-1]), on_event=tracing)
    assert result.outputs == {
        "zero": "zero",
        "one": "one",
        "two": "two",
        "three": "three",
        "four": "four",
    }

    spans = exporter.get_finished_spans()
    assert len({trace_id(span) for span in spans}) == 1
    runs = sorted(named(spans, "executionkit.run"), key=lambda s: s.start_time or 0)
    assert [attrs(run)["executionkit.outcome"] for run in runs] == [
        "cancelled",
        "cancelled",
        "cancelled",
        "finished",
    ]
    first = runs[0]
    assert first.parent is None
    assert [parent_id(run) for run in runs[1:]] == [span_id(first)] * 3
    cancelled = [span for span in spans if attrs(span).get("executionkit.outcome") == "cancelled"]
    assert sorted(span.name for span in cancelled if span.name != "executionkit.run") == [
        "executionkit.step one",
        "executionkit.step three",
        "executionkit.step two",
    ]
    assert all(status(span) == "ERROR" for span in cancelled)
    steps = [span.name for span in spans if span.name.startswith("executionkit.step")]
    assert sorted(steps) == sorted(
        ["executionkit.step zero"]
        + ["executionkit.step one"] * 2
        + ["executionkit.step two"] * 2
        + ["executionkit.step three"] * 2
        + ["executionkit.step four"]
    )


async def test_the_first_run_span_nests_under_the_callers_current_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A run started while a request span is current is part of the request's trace."""
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request") as request:
        await Workflow([Step("a", lambda ctx: 1)]).run(on_event=Tracing(provider))
    spans = exporter.get_finished_spans()
    [run] = named(spans, "executionkit.run")
    assert parent_id(run) == request.get_span_context().span_id
    assert trace_id(run) == request.get_span_context().trace_id


async def test_a_resume_under_another_request_stays_in_the_runs_trace_and_links_the_request(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """By default the stored trace wins; the current request span becomes a link."""
    workflow = Workflow([Step.ask("approve", lambda ctx: "ok?")])
    saved: list[WorkflowCheckpoint] = []
    tracing = Tracing(provider)
    await workflow.run(checkpoint_fn=saved.append, on_event=tracing)
    [first] = exporter.get_finished_spans()
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("another request") as request:
        await workflow.run(resume_from=saved[-1], answers={"approve": 1}, on_event=tracing)
    [resumed] = named(exporter.get_finished_spans(), "executionkit.run")[1:]
    assert parent_id(resumed) == span_id(first)
    [link] = resumed.links
    assert link.context.span_id == request.get_span_context().span_id


async def test_a_resumed_sub_workflow_runs_under_its_parent_attempt_in_the_runs_trace(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A child's own stored trace does not pull its span out of the parent's tree."""
    broken = [True]

    def fragile(ctx: Mapping[str, Any]) -> str:
        if broken[0]:
            msg = "crash"
            raise RuntimeError(msg)
        return "fixed"

    inner = Workflow([Step("x", lambda ctx: 1), Step("y", fragile, depends_on=("x",))])
    workflow = Workflow([Step("sub", inner)])
    saved: list[WorkflowCheckpoint] = []
    tracing = Tracing(provider)
    with pytest.raises(WorkflowFailed):
        await workflow.run(checkpoint_fn=saved.append, on_event=tracing)
    first_trace = {trace_id(span) for span in exporter.get_finished_spans()}
    exporter.clear()
    broken[0] = False
    await workflow.run(resume_from=reloaded(saved[-1]), on_event=tracing)
    spans = exporter.get_finished_spans()
    assert {trace_id(span) for span in spans} == first_trace
    assert [node[:3] for node in tree(spans)] == [("executionkit.run", None, None)]
    assert tree(spans)[0][3] == [
        (
            "executionkit.step sub",
            None,
            1,
            [("executionkit.run sub", None, None, [("executionkit.step y", None, 1, [])])],
        )
    ]


async def test_tracing_and_console_progress_both_get_every_event(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """``on_event=[Tracing(...), ConsoleProgress(...)]``: spans and the progress lines."""
    stream = io.StringIO()
    listeners: list[EventCallback] = [Tracing(provider), ConsoleProgress(stream, live=False)]
    await Workflow([Step("a", spending)]).run(run_id="both", on_event=listeners)
    assert [span.name for span in exporter.get_finished_spans()] == [
        "executionkit.step a",
        "executionkit.run",
    ]
    assert "a finished" in stream.getvalue()


async def test_without_an_sdk_tracing_costs_no_trace_in_the_checkpoint() -> None:
    """A no-op provider makes no valid span context, so nothing is stored."""
    saved: list[WorkflowCheckpoint] = []
    tracing = Tracing(trace.NoOpTracerProvider())
    result = await Workflow([Step("a", lambda ctx: 1)]).run(
        checkpoint_fn=saved.append, on_event=tracing
    )
    assert result.outputs == {"a": 1}
    assert saved[-1].trace is None


def test_importing_executionkit_imports_no_opentelemetry() -> None:
    """The core never imports the API; only ``executionkit.otel`` does."""
    code = (
        "import sys, executionkit, executionkit.progress, executionkit.events\n"
        "assert not any(m.startswith('opentelemetry') for m in sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)  # noqa: S603 - our own interpreter


# --- the wire: the SDK's OTLP/HTTP exporter to a receiver of our own ----------------------


class _Receiver(BaseHTTPRequestHandler):
    """Stores the body of each ``POST /v1/traces``; answers 200 with an empty response."""

    bodies: list[bytes]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        self.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Keep the test output quiet."""


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A local OTLP/HTTP endpoint and the bodies it received; stopped in every outcome."""
    bodies: list[bytes] = []
    handler = type("Receiver", (_Receiver,), {"bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def test_spans_reach_an_otlp_http_receiver_intact(
    receiver: tuple[str, list[bytes]],
) -> None:
    """The SDK's OTLP exporter sends protobuf that decodes to the same tree and attributes."""
    endpoint, bodies = receiver
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=5))
    )
    try:
        await Workflow([Step("a", spending), Step("b", lambda ctx: 2, ("a",))]).run(
            run_id="wire", on_event=Tracing(provider)
        )
    finally:
        provider.shutdown()
    spans = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "executionkit"
                spans.extend(scope_spans.spans)
    by_name = {span.name: span for span in spans}
    assert sorted(by_name) == ["executionkit.run", "executionkit.step a", "executionkit.step b"]
    run = by_name["executionkit.run"]
    assert {span.trace_id for span in spans} == {run.trace_id}
    assert len(run.trace_id) == 16
    assert by_name["executionkit.step a"].parent_span_id == run.span_id
    values = {kv.key: kv.value for kv in by_name["executionkit.step a"].attributes}
    assert values["gen_ai.usage.input_tokens"].int_value == 13
    assert values["gen_ai.usage.output_tokens"].int_value == 9
    assert values["executionkit.step"].string_value == "a"
    assert {kv.key: kv.value for kv in run.attributes}[
        "executionkit.run_id"
    ].string_value == "wire"


async def test_a_step_that_fails_before_any_attempt_gets_an_error_span_of_its_own(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A ``when`` condition that raises: no attempt began, the failure is still a span."""

    def broken_condition(ctx: Mapping[str, Any]) -> bool:
        msg = "cannot decide"
        raise ValueError(msg)

    with pytest.raises(WorkflowFailed):
        await Workflow([Step("a", lambda ctx: 1, when=broken_condition)]).run(
            on_event=Tracing(provider)
        )
    [step, run] = exporter.get_finished_spans()
    assert step.name == "executionkit.step a"
    assert "executionkit.attempt" not in attrs(step)
    assert parent_id(step) == span_id(run)
    assert (status(step), step.status.description) == ("ERROR", "ValueError: cannot decide")


async def test_attempts_cancelled_by_on_error_cancel_end_as_cancelled(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A step the run cancels gets no event of its own; its span ends with the run."""
    never = asyncio.Event()

    async def waits(ctx: Mapping[str, Any]) -> str:
        await never.wait()
        return "never"

    def fails(ctx: Mapping[str, Any]) -> str:
        msg = "x"
        raise ValueError(msg)

    workflow = Workflow([Step("waits", waits), Step("fails", fails)])
    with pytest.raises(WorkflowFailed):
        await workflow.run(on_event=Tracing(provider), on_error="cancel")
    spans = exporter.get_finished_spans()
    [waited] = named(spans, "executionkit.step waits")
    assert (status(waited), waited.status.description) == ("ERROR", "cancelled")
    assert attrs(waited)["executionkit.outcome"] == "cancelled"
    [run] = named(spans, "executionkit.run")
    assert attrs(run)["executionkit.outcome"] == "failed"


async def test_steps_that_do_not_run_and_questions_are_events_of_the_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Skipped and invalidated steps, a question's deadline and its answer: span events."""

    def make(version: str) -> Workflow:
        return Workflow(
            [
                Step("a", lambda ctx: 1, version=version),
                Step("never", lambda ctx: 2, when=lambda ctx: False),
                Step.ask("approve", lambda ctx: "ok?", depends_on=("a",), expires_after=3600),
            ]
        )

    saved: list[WorkflowCheckpoint] = []
    tracing = Tracing(provider)
    await make("1").run(checkpoint_fn=saved.append, on_event=tracing)
    first = named(exporter.get_finished_spans(), "executionkit.run")[0]
    events = {event.name: dict(event.attributes or {}) for event in first.events}
    assert events["step skipped"]["executionkit.step"] == "never"
    assert isinstance(events["step skipped"]["executionkit.reason"], str)
    assert isinstance(events["question asked"]["executionkit.expires_at"], str)
    exporter.clear()
    await make("2").run(resume_from=saved[-1], on_event=tracing)
    [again] = named(exporter.get_finished_spans(), "executionkit.run")
    invalidated = [dict(e.attributes or {}) for e in again.events if e.name == "step invalidated"]
    assert {
        "executionkit.step": "a",
        "executionkit.reason": "version changed from '1' to '2'",
    } in invalidated
    assert repr(tracing) == "Tracing(link_resumes=False, record_outputs=False)"


def test_events_out_of_order_end_every_span_and_raise_nothing(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """Events of runs it never saw start are ignored; an attempt never ended is ended."""
    tracing = Tracing(provider)
    none = TokenUsage()
    tracing(ev.StepFinished("unknown", "a", 0.0, none))
    tracing(ev.RunFinished("unknown", 0.0, none, 0))
    tracing(ev.RunSuspended("unknown", 0.0, none, ("q",)))
    tracing(ev.RunFailed("unknown", 0.0, RuntimeError("x"), {}))
    tracing(ev.MapStarted("unknown", "m", 3, 0))
    tracing(ev.QuestionAnswered("unknown", "q"))
    # A child whose parent Tracing never saw: a root of its own.
    tracing(ev.RunStarted("p/c", 1, (), resumed=False, parent=("p", "s", None)))
    tracing(ev.StepStarted("p/c", "a", 1))
    tracing(ev.StepStarted("p/c", "a", 2))  # attempt 1's end was never announced
    tracing(ev.StepStarted("p/c", "b", 1))
    tracing(ev.StepFailed("p/c", "b", 0.0, asyncio.CancelledError()))
    tracing(ev.RunFinished("p/c", 0.0, none, 1))  # a's attempt 2 is left open
    spans = exporter.get_finished_spans()
    assert [(span.name, attrs(span).get("executionkit.attempt")) for span in spans] == [
        ("executionkit.step a", 1),
        ("executionkit.step b", 1),
        ("executionkit.step a", 2),
        ("executionkit.run s", None),
    ]
    assert all(span.end_time is not None for span in spans)
    assert spans[-1].parent is None
    assert (attrs(spans[1])["executionkit.outcome"], status(spans[1])) == ("cancelled", "ERROR")
    assert "executionkit.outcome" not in attrs(spans[2])  # left open: no outcome invented
    assert tracing._runs == {}
    assert tracing._attempts == {}


def test_without_the_api_the_import_error_says_what_to_install() -> None:
    """``import executionkit.otel`` with no OpenTelemetry API names the extra."""
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import executionkit.otel\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code], check=True, timeout=60, capture_output=True, text=True
    )
    assert done.stdout == (
        "executionkit.otel needs the OpenTelemetry API; install it with "
        "pip install 'executionkit[otel]'\n"
    )
