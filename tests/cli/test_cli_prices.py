"""``executionkit inspect --prices FILE``: the bill in dollars, exact, with what is not priced.

Run in process (``main``), and once through a real process to show the flag
reaches the command as a user types it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from cli_runner import run_subprocess

from executionkit import Step, TokenUsage, Workflow, WorkflowFailed, current_step
from executionkit._cli import main

if TYPE_CHECKING:
    from pathlib import Path

PRICES = {
    "large": {"input_per_million": "2.50", "output_per_million": "10.00"},
    "tiny": {"input_per_million": 0.1, "output_per_million": 0.4, "per_call": "0.001"},
}


def _run_file(folder: Path) -> Path:
    """A checkpoint whose ledger has two priced models, an unpriced one, a retry, a failure."""

    def draft(ctx: Any) -> str:
        step = current_step()
        step.add_usage(TokenUsage(1000, 200, 1), model="large")
        step.add_usage(TokenUsage(300, 0, 1), model="mystery")
        if step.attempt == 1:
            msg = "try again"
            raise RuntimeError(msg)
        return "draft"

    def check(ctx: Any) -> str:
        current_step().add_usage(TokenUsage(50, 5, 1), model="tiny")
        current_step().add_usage(TokenUsage(7, 3, 1))
        msg = "broken"
        raise ValueError(msg)

    saved: list[Any] = []
    with pytest.raises(WorkflowFailed):
        # check after draft: the ledger's rows, and so the bill's lines, in one order.
        Workflow(
            [
                Step("draft", draft, retries=1, retry_delay=0),
                Step("check", check, depends_on=("draft",)),
            ]
        ).run_sync(checkpoint_fn=saved.append, run_id="r")
    path = folder / "run.json"
    path.write_text(json.dumps(saved[-1].to_dict()), encoding="utf-8")
    (folder / "prices.json").write_text(json.dumps(PRICES), encoding="utf-8")
    return path


def _inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["inspect", *args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_inspect_shows_the_bill_in_dollars_and_what_it_could_not_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_file(tmp_path)
    code, out, err = _inspect(capsys, str(run), "--prices", str(tmp_path / "prices.json"))
    assert (code, err) == (0, "")
    at = out.index("dollars     ")
    assert out[at:].splitlines()[:5] == [
        "dollars     $0.0100 ($0.0045 spent, $0.0055 wasted)",
        "              draft: $0.0090",
        "              check: $0.0010",
        "              not priced: model mystery, 600 tokens (2 calls)",
        "              not priced: usage reported without a model, 10 tokens (1 call)",
    ]
    code, plain, _ = _inspect(capsys, str(run))
    assert code == 0
    assert "dollars" not in plain


def test_inspect_json_gives_exact_amounts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_file(tmp_path)
    code, out, err = _inspect(
        capsys, str(run), "--json", "--prices", str(tmp_path / "prices.json")
    )
    assert (code, err) == (0, "")
    assert json.loads(out)["dollars"] == {
        "total": "0.010007",
        "spent": "0.0045",
        "wasted": "0.005507",
        "steps": {"draft": "0.0090", "check": "0.001007"},
        "models": {"large": "0.0090", "tiny": "0.001007"},
        "unpriced": {
            "mystery": {"input_tokens": 600, "output_tokens": 0, "llm_calls": 2},
            "": {"input_tokens": 7, "output_tokens": 3, "llm_calls": 1},
        },
        "unknown": 0,
        "complete": False,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "cannot be read as JSON"),
        ('{"large": {"input_per_million": 1}}', "Prices['large'] must have input_per_million"),
        ('{"large": {"input_per_million": -1, "output_per_million": 1}}', "finite, non-negative"),
    ],
)
def test_a_bad_price_file_is_a_usage_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    run = _run_file(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(text, encoding="utf-8")
    code, out, err = _inspect(capsys, str(run), "--prices", str(bad))
    assert (code, out) == (2, "")
    assert err.startswith(f"executionkit: error: price file {str(bad)!r}")
    assert message in err


def test_history_with_prices_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_file(tmp_path)
    code, _, err = _inspect(capsys, str(run), "--history", "--prices", "prices.json")
    assert code == 2
    assert "--history lists what the store keeps: leave out --prices" in err


def test_the_flag_reaches_inspect_from_a_shell(tmp_path: Path) -> None:
    _run_file(tmp_path)
    outcome = run_subprocess(tmp_path, "inspect", "run.json", "--prices", "prices.json")
    assert (outcome.code, outcome.err) == (0, "")
    assert "dollars     $0.0100 ($0.0045 spent, $0.0055 wasted)" in outcome.out
