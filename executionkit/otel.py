"""OpenTelemetry spans for runs: pass a `Tracing` as ``on_event``.

`Tracing` turns a run's events into spans, with nothing but the OpenTelemetry
API (``pip install 'executionkit[otel]'``); the SDK, the exporter and the
sampler are the application's. executionkit's core never imports this module.

The spans, all of kind ``INTERNAL``:

- ``executionkit.run``: one per call of ``run`` (an *invocation*); a
  sub-workflow's run is ``executionkit.run <step>``, under the span of the
  parent step's attempt that runs it.
- ``executionkit.step <step>``: one per attempt of each step that runs, under
  its run's span.
- ``executionkit.item <step>``: one per attempt of each map item, under the
  span of its map step (the key is the attribute ``executionkit.item``, so that
  span names stay few).

Restored steps get no span. The first invocation's span is a child of the
current span (the request that started the run); its ``traceparent`` is
stored in the run's checkpoints, and a resumed invocation's span is a child of
it, so that a run killed and resumed three times reads as one trace (or, with
``link_resumes=True``, starts a trace of its own with a link to it).

Example:
    >>> from executionkit import Step, Workflow
    >>> from executionkit.otel import Tracing
    >>> workflow = Workflow([Step("hello", lambda ctx: "world")])
    >>> result = workflow.run_sync(on_event=Tracing())
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, TypeAlias

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - the dev environment has the API
    msg = (
        "executionkit.otel needs the OpenTelemetry API; install it with "
        "pip install 'executionkit[otel]'"
    )
    raise ImportError(msg) from exc

from executionkit import __version__
from executionkit.events import (
    ItemFailed,
    ItemFinished,
    ItemStarted,
    MapStarted,
    QuestionAnswered,
    QuestionAsked,
    RunFailed,
    RunFinished,
    RunStarted,
    RunSuspended,
    StepFailed,
    StepFinished,
    StepInvalidated,
    StepRetried,
    StepSkipped,
    StepStarted,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from executionkit._types import TokenUsage
    from executionkit.events import Event

__all__ = ["Tracing"]

_PROPAGATOR = TraceContextTextMapPropagator()
_QUESTION_LIMIT = 1000  # characters of a question kept with record_outputs=True
# The message of the TimeoutError an attempt that ran out of time fails with.
_TIMED_OUT = re.compile(r".* attempt \d+ timed out after \S+ s")

_Key: TypeAlias = tuple[str, str, str | None]


class _Open:
    """An open span, and the context that makes it a parent (made once, when first needed)."""

    __slots__ = ("_context", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self._context: otel_context.Context | None = None

    def context(self) -> otel_context.Context:
        """A context whose current span is this one."""
        if self._context is None:
            self._context = trace.set_span_in_context(self.span)
        return self._context


class _Run(_Open):
    """An open run span and what its invocation had restored when it began."""

    __slots__ = ("restored",)

    def __init__(self, span: trace.Span, restored: TokenUsage) -> None:
        super().__init__(span)
        self.restored = restored


class Tracing:
    """An ``on_event`` listener that records each run as OpenTelemetry spans.

    Pass it alone or beside other listeners:
    ``run(on_event=[Tracing(), ConsoleProgress()])``. One instance may serve
    any number of runs, one after another or at once (in one event loop or
    several threads); its spans are kept by the events' ``run_id``, step and
    item key.

    Run span attributes: ``executionkit.run_id``, ``executionkit.resumed``,
    ``executionkit.steps``, ``executionkit.restored`` (steps restored from the
    checkpoint), ``executionkit.parent_step`` (a sub-workflow's), and at its
    end ``executionkit.outcome`` (``finished``, ``suspended``, ``failed`` or
    ``cancelled``), ``executionkit.executed`` and what this invocation spent:
    ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens`` and
    ``executionkit.llm_calls`` (restored usage not included, sub-workflows'
    included). A suspended run ends with ``executionkit.waiting_for`` (the ask
    steps) and the span event ``waiting for an answer``; a failed one with an
    error status and an exception event.

    Attempt span attributes: ``executionkit.run_id``, ``executionkit.step``,
    ``executionkit.item`` (map items), ``executionkit.attempt``, the three
    usage attributes above (what the attempt spent) and
    ``executionkit.outcome``: ``ok``, ``failed``, ``timeout`` or ``cancelled``.
    Failed, timed-out and cancelled attempts have an error status; failed and
    timed-out ones an exception event.

    Outputs, questions and answers are never recorded, unless
    ``record_outputs=True``, which adds the question (as JSON, cut to 1,000
    characters) to the ``question asked`` span event.

    Args:
        tracer_provider: Where spans go; the global provider when None (set it
            with ``opentelemetry.trace.set_tracer_provider``). With no SDK
            installed every span is a no-op.
        link_resumes: Make a resumed invocation's span a new trace's root (or
            a child of the current span) with a link to the first invocation's
            span, instead of a child of it in the same trace.
        record_outputs: Record questions asked in span events.
    """

    __slots__ = (
        "_attempts",
        "_handlers",
        "_link_resumes",
        "_record_outputs",
        "_runs",
        "_tracer",
    )

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        link_resumes: bool = False,
        record_outputs: bool = False,
    ) -> None:
        """Take spans from ``tracer_provider``'s tracer named ``executionkit``."""
        self._tracer = trace.get_tracer(
            "executionkit", __version__, tracer_provider=tracer_provider
        )
        self._link_resumes = link_resumes
        self._record_outputs = record_outputs
        self._runs: dict[str, _Run] = {}
        # The open attempt spans, by (run_id, step, item key or None).
        self._attempts: dict[_Key, _Open] = {}
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            RunStarted: self._run_started,
            StepStarted: self._step_started,
            ItemStarted: self._item_started,
            MapStarted: self._map_started,
            StepRetried: self._retried,
            StepFinished: self._step_finished,
            ItemFinished: self._item_finished,
            StepFailed: self._step_failed,
            ItemFailed: self._item_failed,
            StepSkipped: self._skipped,
            StepInvalidated: self._invalidated,
            QuestionAsked: self._asked,
            QuestionAnswered: self._answered,
            RunFinished: self._run_finished,
            RunSuspended: self._run_suspended,
            RunFailed: self._run_failed,
        }

    def __repr__(self) -> str:
        """Show the options."""
        return (
            f"Tracing(link_resumes={self._link_resumes!r}, "
            f"record_outputs={self._record_outputs!r})"
        )

    def trace_run(self, event: RunStarted) -> str | None:
        """Start the span of a run invocation; return its W3C ``traceparent``.

        Called by the run before `RunStarted` is delivered. The run stores the
        first invocation's traceparent in its checkpoints and hands it back
        as ``event.trace`` when resumed.

        Returns:
            The span's traceparent, or None when the span has no valid context
            (no SDK and no current span).
        """
        span = self._start_run(event)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
        return carrier.get("traceparent")

    def __call__(self, event: Event) -> None:
        """Turn one event into span starts, ends and attributes."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    # --- runs ------------------------------------------------------------------------------

    def _start_run(self, event: RunStarted) -> trace.Span:
        run = self._runs.get(event.run_id)
        if run is not None:
            return run.span
        parent, links = self._run_parent(event)
        attributes: dict[str, Any] = {
            "executionkit.run_id": event.run_id,
            "executionkit.resumed": event.resumed,
            "executionkit.steps": event.steps,
        }
        name = "executionkit.run"
        if event.parent is not None:
            name = f"executionkit.run {event.parent[1]}"
            attributes["executionkit.parent_step"] = event.parent[1]
        span = self._tracer.start_span(name, parent, attributes=attributes, links=links)
        self._runs[event.run_id] = _Run(span, event.cost)
        return span

    def _run_parent(
        self, event: RunStarted
    ) -> tuple[otel_context.Context | None, list[trace.Link]]:
        """The context a run span starts in, and the links it carries."""
        if event.parent is not None:
            parent_run, step, key = event.parent
            opened = self._attempts.get((parent_run, step, key)) or self._runs.get(parent_run)
            if opened is not None:
                return opened.context(), []
        stored = _span_context(event.trace)
        if stored is None or event.parent is not None:
            return None, []  # the current context: the caller's span, if any
        current = trace.get_current_span().get_span_context()
        if self._link_resumes:
            return None, [trace.Link(stored)]
        # A resume started under another trace's span (a new request, say) links to it.
        elsewhere = current.is_valid and current.trace_id != stored.trace_id
        links = [trace.Link(current)] if elsewhere else []
        return trace.set_span_in_context(trace.NonRecordingSpan(stored)), links

    def _run_started(self, event: RunStarted) -> None:
        span = self._start_run(event)  # trace_run started it unless called without it
        span.set_attribute("executionkit.restored", len(event.recorded))

    def _run_finished(self, event: RunFinished) -> None:
        run = self._end_attempts_of(event.run_id, failed=False)
        if run is None:
            return
        span = run.span
        attributes = _usage(event.cost - run.restored)
        attributes["executionkit.executed"] = event.executed
        attributes["executionkit.outcome"] = "finished"
        span.set_attributes(attributes)
        span.set_status(trace.StatusCode.OK)
        span.end()

    def _run_suspended(self, event: RunSuspended) -> None:
        run = self._end_attempts_of(event.run_id, failed=False)
        if run is None:
            return
        span = run.span
        attributes = _usage(event.cost - run.restored)
        attributes["executionkit.outcome"] = "suspended"
        attributes["executionkit.waiting_for"] = list(event.pending)
        span.set_attributes(attributes)
        span.add_event("waiting for an answer", {"executionkit.waiting_for": list(event.pending)})
        span.set_status(trace.StatusCode.OK)
        span.end()

    def _run_failed(self, event: RunFailed) -> None:
        cancelled = not isinstance(event.error, Exception)
        run = self._end_attempts_of(event.run_id, failed=True)
        if run is None:
            return
        span = run.span
        attributes = _usage(event.cost - run.restored)
        attributes["executionkit.outcome"] = "cancelled" if cancelled else "failed"
        span.set_attributes(attributes)
        span.record_exception(event.error)
        span.set_status(trace.StatusCode.ERROR, _error_text(event.error))
        span.end()

    def _end_attempts_of(self, run_id: str, *, failed: bool) -> _Run | None:
        """End the spans left open in a run and its children; pop the run's.

        At a run's failure these are attempts it cancelled (on a cancellation,
        an interrupt or ``on_error="cancel"``); after a success there are none,
        unless an event was lost.
        """
        within = f"{run_id}/"
        # Copies first (list() of a dict is atomic): runs on other threads may add keys.
        attempts = [k for k in list(self._attempts) if k[0] == run_id or k[0].startswith(within)]
        children = [other for other in list(self._runs) if other.startswith(within)]
        spans = [opened.span for k in attempts if (opened := self._attempts.pop(k, None))]
        spans += [opened.span for other in children if (opened := self._runs.pop(other, None))]
        for span in spans:
            if failed:
                span.set_attribute("executionkit.outcome", "cancelled")
                span.set_status(trace.StatusCode.ERROR, "cancelled")
            span.end()
        return self._runs.pop(run_id, None)

    # --- attempts --------------------------------------------------------------------------

    def _start_attempt(
        self, run_id: str, step: str, item: str | None, attempt: int | None
    ) -> None:
        if item is None:
            parent: _Open | None = self._runs.get(run_id)
            name = f"executionkit.step {step}"
        else:
            parent = self._attempts.get((run_id, step, None)) or self._runs.get(run_id)
            name = f"executionkit.item {step}"
        attributes: dict[str, Any] = {"executionkit.run_id": run_id, "executionkit.step": step}
        if attempt is not None:
            attributes["executionkit.attempt"] = attempt
        if item is not None:
            attributes["executionkit.item"] = item
        context = None if parent is None else parent.context()
        key = (run_id, step, item)
        left = self._attempts.pop(key, None)
        if left is not None:  # an attempt whose end was never announced
            left.span.end()
        self._attempts[key] = _Open(self._tracer.start_span(name, context, attributes=attributes))

    def _end_attempt(
        self,
        key: _Key,
        usage: TokenUsage,
        error: BaseException | None,
    ) -> None:
        opened = self._attempts.pop(key, None)
        if opened is None:
            if error is None:
                return
            # A step that failed before any attempt began (its condition raised, say):
            # a span of no length, so that the failure is seen where it happened.
            run_id, step, item = key
            self._start_attempt(run_id, step, item, None)
            opened = self._attempts.pop(key)
        span = opened.span
        attributes = _usage(usage)
        if error is None:
            attributes["executionkit.outcome"] = "ok"
            span.set_attributes(attributes)
            span.set_status(trace.StatusCode.OK)
        elif isinstance(error, Exception):
            timed_out = type(error) is TimeoutError and _TIMED_OUT.fullmatch(str(error))
            attributes["executionkit.outcome"] = "timeout" if timed_out else "failed"
            span.set_attributes(attributes)
            span.record_exception(error)
            span.set_status(trace.StatusCode.ERROR, _error_text(error))
        else:
            attributes["executionkit.outcome"] = "cancelled"
            span.set_attributes(attributes)
            span.set_status(trace.StatusCode.ERROR, "cancelled")
        span.end()

    def _step_started(self, event: StepStarted) -> None:
        self._start_attempt(event.run_id, event.step, None, event.attempt)

    def _item_started(self, event: ItemStarted) -> None:
        self._start_attempt(event.run_id, event.step, event.item, event.attempt)

    def _map_started(self, event: MapStarted) -> None:
        opened = self._attempts.get((event.run_id, event.step, None))
        if opened is not None:
            opened.span.set_attributes(
                {"executionkit.items": event.items, "executionkit.items_recorded": event.recorded}
            )

    def _retried(self, event: StepRetried) -> None:
        self._end_attempt((event.run_id, event.step, event.item), event.usage, event.error)

    def _step_finished(self, event: StepFinished) -> None:
        self._end_attempt((event.run_id, event.step, None), event.cost, None)

    def _item_finished(self, event: ItemFinished) -> None:
        self._end_attempt((event.run_id, event.step, event.item), event.cost, None)

    def _step_failed(self, event: StepFailed) -> None:
        self._end_attempt((event.run_id, event.step, None), event.usage, event.error)

    def _item_failed(self, event: ItemFailed) -> None:
        self._end_attempt((event.run_id, event.step, event.item), event.usage, event.error)

    # --- what happens to steps that do not run ---------------------------------------------

    def _run_event(self, run_id: str, name: str, attributes: Mapping[str, Any]) -> None:
        run = self._runs.get(run_id)
        if run is not None:
            run.span.add_event(name, attributes)

    def _skipped(self, event: StepSkipped) -> None:
        attributes = {"executionkit.step": event.step, "executionkit.reason": event.reason}
        self._run_event(event.run_id, "step skipped", attributes)

    def _invalidated(self, event: StepInvalidated) -> None:
        attributes = {"executionkit.step": event.step, "executionkit.reason": event.reason}
        self._run_event(event.run_id, "step invalidated", attributes)

    def _asked(self, event: QuestionAsked) -> None:
        attributes: dict[str, Any] = {"executionkit.step": event.step}
        if event.expires_at is not None:
            attributes["executionkit.expires_at"] = event.expires_at
        if self._record_outputs:
            attributes["executionkit.question"] = _question_text(event.question)
        self._run_event(event.run_id, "question asked", attributes)

    def _answered(self, event: QuestionAnswered) -> None:
        self._run_event(event.run_id, "question answered", {"executionkit.step": event.step})


def _span_context(traceparent: str | None) -> trace.SpanContext | None:
    """The span context a stored ``traceparent`` names, or None."""
    if traceparent is None:
        return None
    extracted = _PROPAGATOR.extract({"traceparent": traceparent})
    found = trace.get_current_span(extracted).get_span_context()
    return found if found.is_valid else None


def _usage(usage: TokenUsage) -> dict[str, Any]:
    """Usage as span attributes, with the GenAI semantic conventions' names where they exist."""
    return {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "executionkit.llm_calls": usage.llm_calls,
    }


def _error_text(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _question_text(question: object) -> str:
    """A question as JSON text, cut to ``_QUESTION_LIMIT`` characters."""
    text = json.dumps(question, ensure_ascii=False, default=repr)
    if len(text) > _QUESTION_LIMIT:
        return f"{text[: _QUESTION_LIMIT - 1]}…"
    return text
