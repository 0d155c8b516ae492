"""The bundled demo: a document-report workflow that fails, is saved, and resumes.

Every step simulates an LLM call with a short fixed delay and fixed token usage,
so the run is deterministic and needs no network.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit._define._step import Step
from executionkit._record._result import WorkflowFailed
from executionkit._types import PatternResult, TokenUsage
from executionkit._workflow import Workflow

DOCUMENT = (
    "Quarterly operations review. Shipping volume rose 12% while returns fell to 3.1%. "
    "The Lisbon warehouse opened two weeks late after a permit delay. Customer support "
    "cut median reply time from 9 to 4 hours by routing billing questions to a new team."
)


@dataclass(frozen=True)
class _Call:
    """One simulated LLM call: its latency and what it costs."""

    seconds: float
    usage: TokenUsage


# Fixed per-step costs, so the demo can show that resumed totals are exact.
CALLS: dict[str, _Call] = {
    "extract_facts": _Call(0.25, TokenUsage(820, 140, 1)),
    "summarize": _Call(0.35, TokenUsage(810, 95, 1)),
    "classify_topic": _Call(0.15, TokenUsage(790, 6, 1)),
    "translate_summary": _Call(0.30, TokenUsage(160, 120, 1)),
    "fact_check": _Call(0.30, TokenUsage(420, 60, 1)),
    "headline": _Call(0.20, TokenUsage(150, 14, 1)),
}


class ProviderOutageError(RuntimeError):
    """The simulated model provider is down."""


class FakeLLM:
    """A stand-in model client: fixed latency and token usage, no network.

    It travels in the initial context, like a real client would; checkpoints
    record only its key name, never the object.
    """

    def __init__(self, *, delay: bool, echo: bool, down: frozenset[str] = frozenset()) -> None:
        """Create a client; calls made for the steps in ``down`` fail."""
        self.delay = delay
        self.echo = echo
        self.down = down

    def say(self, line: str) -> None:
        """Print one progress line, if echoing."""
        if self.echo:
            print(line, flush=True)

    async def complete(self, step: str, prompt: str, answer: str) -> PatternResult[str]:
        """Answer ``prompt`` for ``step`` with the canned ``answer`` and its usage."""
        call = CALLS[step]
        if self.delay:
            await asyncio.sleep(call.seconds)
        if step in self.down:
            self.say(f"    FAIL {step:<18} 503 from the model provider")
            msg = f"model provider answered 503 Service Unavailable ({len(prompt)}-char prompt)"
            raise ProviderOutageError(msg)
        usage = call.usage
        self.say(f"    ran  {step:<18} {usage.input_tokens:>4} in /{usage.output_tokens:>4} out")
        return PatternResult(answer, cost=usage)


def _llm(ctx: Mapping[str, Any]) -> FakeLLM:
    llm = ctx["llm"]
    assert isinstance(llm, FakeLLM)  # noqa: S101 - the demo always passes one
    return llm


def load_document(ctx: Mapping[str, Any]) -> str:
    """Read the document (no model call)."""
    _llm(ctx).say("    ran  load_document      (no model call)")
    return str(ctx["document"])


async def extract_facts(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """List the document's facts."""
    answer = "volume +12%; returns 3.1%; Lisbon late; replies 4h"
    return await _llm(ctx).complete("extract_facts", ctx["load_document"], answer)


async def summarize(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """Summarise the document."""
    answer = "Volume up, returns down, one late site, faster support."
    return await _llm(ctx).complete("summarize", ctx["load_document"], answer)


async def classify_topic(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """Name the document's topic."""
    return await _llm(ctx).complete("classify_topic", ctx["load_document"], "operations")


async def translate_summary(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """Translate the summary into Spanish."""
    answer = "Volumen arriba, devoluciones abajo."
    return await _llm(ctx).complete("translate_summary", ctx["summarize"], answer)


async def fact_check(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """Check the summary against the extracted facts."""
    prompt = f"{ctx['extract_facts']}\n{ctx['summarize']}"
    return await _llm(ctx).complete("fact_check", prompt, "all 4 claims supported")


async def headline(ctx: Mapping[str, Any]) -> PatternResult[str]:
    """Write a headline for the summary and topic."""
    prompt = f"{ctx['classify_topic']}: {ctx['summarize']}"
    answer = "Operations: more shipped, fewer returned"
    return await _llm(ctx).complete("headline", prompt, answer)


def assemble_report(ctx: Mapping[str, Any]) -> dict[str, str]:
    """Put the pieces together (no model call)."""
    _llm(ctx).say("    ran  assemble_report    (no model call)")
    return {
        "headline": ctx["headline"],
        "topic": ctx["classify_topic"],
        "summary": ctx["summarize"],
        "summary_es": ctx["translate_summary"],
        "fact_check": ctx["fact_check"],
    }


def build_workflow() -> Workflow:
    """Return the eight-step demo workflow (two diamonds, four batches)."""
    return Workflow(
        [
            Step("load_document", load_document),
            Step("extract_facts", extract_facts, depends_on=("load_document",)),
            Step("summarize", summarize, depends_on=("load_document",)),
            Step("classify_topic", classify_topic, depends_on=("load_document",)),
            Step("translate_summary", translate_summary, depends_on=("summarize",)),
            Step("fact_check", fact_check, depends_on=("extract_facts", "summarize")),
            Step("headline", headline, depends_on=("summarize", "classify_topic")),
            Step(
                "assemble_report",
                assemble_report,
                depends_on=("translate_summary", "fact_check", "headline"),
            ),
        ]
    )


def _usage(usage: TokenUsage) -> str:
    return (
        f"{usage.input_tokens} in + {usage.output_tokens} out = {usage.total_tokens} tokens, "
        f"{usage.llm_calls} call{'' if usage.llm_calls == 1 else 's'}"
    )


def run_demo(
    directory: Path | None = None, *, delay: bool = True, command: str = "executionkit"
) -> int:
    """Run the demo, writing its checkpoint file in ``directory``.

    Args:
        directory: Where to write ``checkpoint.json``; a new temporary folder if None.
            The file is left there, for the user to look at.
        delay: Whether to simulate the model's latency.
        command: How the user runs the command line, for the ``inspect`` command the
            demo ends by suggesting.

    Returns:
        The exit status: 0 when the resumed run's token totals are exact.
    """
    if directory is None:
        # Not a TemporaryDirectory: the file the demo talks about must outlive it.
        directory = Path(tempfile.mkdtemp(prefix="executionkit-demo-"))
    path = directory / "checkpoint.json"
    workflow = build_workflow()
    expected = sum((call.usage for call in CALLS.values()), TokenUsage())
    print("executionkit demo: an 8-step report workflow of simulated LLM calls")
    print(f"checkpoints are written to {path} by a plain lambda\n")

    def save(cp: WorkflowCheckpoint) -> int:
        return path.write_text(json.dumps(cp.to_dict(), indent=2), encoding="utf-8")

    outage = frozenset({"translate_summary"})
    print("Run 1: the model provider fails the translation call")
    try:
        workflow.run_sync(
            {"document": DOCUMENT, "llm": FakeLLM(delay=delay, echo=True, down=outage)},
            checkpoint_fn=save,
            metadata={"job": "demo-report"},
        )
    except WorkflowFailed as failure:
        print(f"  -> WorkflowFailed: {failure.errors['translate_summary']}")
    else:  # pragma: no cover - the first run always fails
        print("  unexpected: the first run did not fail")
        return 1

    saved = json.loads(path.read_text(encoding="utf-8"))
    restored = WorkflowCheckpoint.from_dict(saved)
    print(f"\nWhat {path.name} holds (seq={saved['seq']}, run_id={saved['run_id'][:8]}...):")
    print(f"  recorded steps ({saved['step_index']}): {', '.join(saved['outputs'])}")
    print(f"  failed steps: {saved['errors']}")
    print(f"  token usage so far: {_usage(restored.cost)}")
    print(f"  initial context: only the key names {saved['context_keys']}, never the values")

    print("\nRun 2: the provider is back; resume from the file")
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))
    result = workflow.run_sync(
        {"document": DOCUMENT, "llm": FakeLLM(delay=delay, echo=True)},
        checkpoint_fn=save,
        resume_from=checkpoint,
    )
    print(f"  restored (already paid for): {', '.join(result.restored)}")
    print(f"  ran now: {', '.join(result.executed)}")
    print("\nToken accounting")
    print(f"  restored from the checkpoint: {_usage(checkpoint.cost)}")
    print(f"  spent by run 2:               {_usage(result.cost - checkpoint.cost)}")
    print(f"  total:                        {_usage(result.cost)}")
    exact = result.cost == expected
    verdict = "exact" if exact else "MISMATCH"
    print(f"  an uninterrupted run costs:   {_usage(expected)} -> {verdict}")
    report = result.outputs["assemble_report"]
    print(f"\nReport: {report['headline']!r} [{report['topic']}] - {report['summary_es']}")
    print(f"\nThe checkpoint file is kept in {directory}. To see what it holds, run:")
    print(f"  {command} inspect {shlex.quote(str(path))}")
    return 0 if exact else 1
