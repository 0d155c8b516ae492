"""`crash_test` on the workflows of our own examples and demo: every crash point resumes right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from executionkit import PatternResult, TokenUsage
from executionkit._cli._demo import FakeLLM, build_workflow
from executionkit.testing import crash_test

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(EXAMPLES.parent / "tests"))


def test_the_command_line_example(examples: None) -> None:
    import cli_workflow  # noqa: PLC0415 - the example's folder was just put on the path

    report = crash_test(cli_workflow.workflow, {"text": "The cat sat", "lang": "fr"})
    assert report.outputs["report"] == {"words": 3, "translation": "le chat s'assit"}
    assert report.tried >= 3


def test_the_many_workers_example(examples: None) -> None:
    import many_workers  # noqa: PLC0415

    report = crash_test(many_workers.report_workflow(), {"run": "r1"}, checkpoint_every="step")
    assert report.outputs["report"].startswith("report(summary_en(fetch()")


class FakeChat:
    """The openai_compatible example's client, answering from the prompt: no network."""

    async def complete(self, messages: list[dict[str, str]], **_: Any) -> PatternResult[str]:
        prompt = messages[-1]["content"]
        return PatternResult(f"answer {len(prompt)}", cost=TokenUsage(len(prompt), 7, 1))


def test_the_openai_compatible_example(examples: None) -> None:
    import openai_compatible  # noqa: PLC0415

    report = crash_test(
        openai_compatible.build_workflow(),
        {"llm": FakeChat(), "document": openai_compatible.SAMPLE_DOCUMENT},
    )
    assert report.outputs["revise"].startswith("answer ")


def test_the_demo(examples: None) -> None:
    llm = FakeLLM(delay=False, echo=False)
    report = crash_test(build_workflow(), {"llm": llm, "document": "a document"})
    assert "assemble_report" in report.outputs
    assert report.tried == 4  # four batches


def test_the_workers_test_workflow(examples: None) -> None:
    import worker_flow  # noqa: PLC0415

    report = crash_test(
        worker_flow.workflow, {"seed": "s"}, answers={"approve": "ok s"}, checkpoint_every="step"
    )
    assert report.outputs == worker_flow.expected("s", "ok s")
