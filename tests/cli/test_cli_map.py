"""The command line and map steps: `run` reports items, `inspect` counts them, `graph` marks maps.

Each test runs the commands twice through the ``cli`` fixture, as ``tests/cli/test_cli.py``
does: as a real subprocess (``python -m executionkit ...``) and in-process through
``main()``. The workflow is a module written into the test's temporary folder, the
working directory. Its items record each call in ``calls.txt``, so a test can see which
items a run paid for.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_runner import Outcome, run_subprocess

from executionkit import TokenUsage, WorkflowCheckpoint
from executionkit._cli import main

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@pytest.fixture
def forget_modules(tmp_path: Path) -> Iterator[None]:
    """Forget the workflow modules a test imported from its folder: tests reuse names."""
    before = set(sys.modules)
    path = list(sys.path)
    yield
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None)
        if file is not None and Path(file).resolve().is_relative_to(tmp_path.resolve()):
            del sys.modules[name]
    sys.path[:] = path


@pytest.fixture(params=["subprocess", "in-process"])
def cli(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    forget_modules: None,
) -> Callable[..., Outcome]:
    """Run ``executionkit ARGS`` with the temporary folder as working directory."""
    if request.param == "subprocess":
        return lambda *args: run_subprocess(tmp_path, *args)

    def in_process(*args: str) -> Outcome:
        monkeypatch.chdir(tmp_path)
        for name in [name for name in sys.modules if name in {"chunks", "held"}]:
            del sys.modules[name]  # the module reads its broken chunks when imported
        importlib.invalidate_caches()
        code = main(list(args))
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return in_process


CHUNKS = """\
import os
from pathlib import Path

from executionkit import PatternResult, Step, TokenUsage, Workflow, current_step

BROKEN = set(Path("broken.txt").read_text().split()) if Path("broken.txt").exists() else set()


def split(ctx):
    return ctx["text"].split("|")


def summarise(chunk, ctx):
    with open("calls.txt", "a") as calls:
        calls.write(current_step().item_key + "\\n")
    if chunk in BROKEN:
        raise RuntimeError(f"model overloaded on {chunk}")
    return PatternResult(chunk.upper(), cost=TokenUsage(100, 10, 1))


def join(ctx):
    return " ".join(ctx["summaries"])


workflow = Workflow(
    [
        Step("split", split),
        Step.map("summaries", summarise, over="split", max_concurrency=1),
        Step("join", join, depends_on=("summaries",)),
    ]
)
"""

TEXT = "--input=text=alpha|beta|gamma|delta"


def calls(folder: Path) -> list[str]:
    """The item keys the runs so far called ``summarise`` for, in order, and forget them."""
    path = folder / "calls.txt"
    found = path.read_text().split() if path.exists() else []
    path.unlink(missing_ok=True)
    return found


@pytest.fixture
def failed_run(cli: Callable[..., Outcome], tmp_path: Path) -> Outcome:
    """``run`` with ``gamma`` broken: the two items before it recorded in run.json.

    Under the default ``on_error="finish"`` no item starts after one failed, and
    ``max_concurrency=1`` runs them one at a time, so ``delta`` never starts.
    """
    (tmp_path / "chunks.py").write_text(CHUNKS)
    (tmp_path / "broken.txt").write_text("gamma")
    outcome = cli("run", "chunks:workflow", "--checkpoint", "run.json", TEXT)
    assert calls(tmp_path) == ["0", "1", "2"]
    return outcome


def test_a_failed_item_is_named_and_the_saved_items_are_counted(failed_run: Outcome) -> None:
    assert (failed_run.code, failed_run.out) == (1, "")
    lines = failed_run.err.splitlines()
    assert "executionkit: summaries: 4 items" in lines
    assert any(
        line.startswith("executionkit: summaries item 2 failed after ")
        and "RuntimeError: model overloaded on gamma; " in line
        for line in lines
    ), lines
    assert lines[-3].startswith(
        "executionkit: step summaries failed: ExceptionGroup: map step 'summaries': 1 of 4 "
        "items failed ('2')"
    )
    assert lines[-2] == "executionkit:   item 2: RuntimeError: model overloaded on gamma"
    assert lines[-1] == (
        "executionkit: checkpoint saved to run.json (seq 5, 1 of 3 steps, 2 items of summaries "
        "recorded); run again with the same --checkpoint to resume"
    )


INSPECT_ITEMS = (
    "items       summaries: 2 items recorded (200 in + 20 out = 220 tokens, 2 LLM calls)"
)


def test_inspect_counts_the_recorded_items_and_their_tokens(
    cli: Callable[..., Outcome], failed_run: Outcome
) -> None:
    outcome = cli("inspect", "run.json")
    assert (outcome.code, outcome.err) == (0, "")
    lines = outcome.out.splitlines()
    assert "tokens      200 in + 20 out = 220 tokens, 2 LLM calls" in lines
    assert lines[-3:] == [INSPECT_ITEMS, "outputs", '  split  ["alpha", "beta", "gamma", "delta"]']


def test_inspect_with_the_workflow_knows_how_many_items_there_are(
    cli: Callable[..., Outcome], failed_run: Outcome
) -> None:
    outcome = cli("inspect", "run.json", "--workflow", "chunks:workflow")
    assert (outcome.code, outcome.err) == (0, "")
    lines = outcome.out.splitlines()
    assert "pending     summaries, join" in lines
    assert INSPECT_ITEMS.replace("2 items", "2 of 4 items") in lines


def test_inspect_json_counts_the_items(cli: Callable[..., Outcome], failed_run: Outcome) -> None:
    usage = {"input_tokens": 200, "output_tokens": 20, "llm_calls": 2}
    alone = json.loads(cli("inspect", "run.json", "--json").out)
    keys = ["0", "1"]
    assert alone["items"] == {
        "summaries": {"recorded": 2, "total": None, "cost": usage, "keys": keys}
    }
    both = cli("inspect", "run.json", "--json", "--workflow", "chunks:workflow")
    assert json.loads(both.out)["items"] == {
        "summaries": {"recorded": 2, "total": 4, "cost": usage, "keys": keys}
    }


MERMAID = """\
flowchart TD
    s0["split"]
    s1[["summaries [map over split]"]]
    s2["join"]
    s0 --> s1
    s1 --> s2
"""


def test_graph_draws_a_map_and_counts_its_recorded_items(
    cli: Callable[..., Outcome], failed_run: Outcome
) -> None:
    assert cli("graph", "chunks:workflow").out == MERMAID
    marked = cli("graph", "chunks:workflow", "--checkpoint", "run.json").out
    assert marked.startswith(
        MERMAID.replace('"]]', '<br/>2 of 4 items recorded"]]') + "    classDef done "
    )
    assert marked.endswith("    class s0 done\n    class s1 failed\n    class s2 pending\n")
    dot = cli("graph", "chunks:workflow", "--checkpoint", "run.json", "--format", "dot").out
    assert dot == (
        "digraph workflow {\n"
        "    rankdir=TB;\n"
        '    node [shape=box, style="rounded,filled"];\n'
        '    n0 [label="split", fillcolor="#d3f9d8"];\n'
        '    n1 [label="summaries [map over split]\\n2 of 4 items recorded", '
        'fillcolor="#ffe3e3"];\n'
        '    n2 [label="join", fillcolor="#f1f3f5"];\n'
        "    n0 -> n1;\n"
        "    n1 -> n2;\n"
        "}\n"
    )


def test_resuming_runs_only_the_missing_items_with_exact_tokens(
    cli: Callable[..., Outcome], failed_run: Outcome, tmp_path: Path
) -> None:
    (tmp_path / "broken.txt").write_text("")
    outcome = cli("run", "chunks:workflow", "--checkpoint", "run.json", TEXT)
    assert outcome.code == 0, outcome.err
    assert calls(tmp_path) == ["2", "3"]
    assert json.loads(outcome.out)["join"] == "ALPHA BETA GAMMA DELTA"
    lines = outcome.err.splitlines()
    assert lines[1] == "executionkit: summaries: 4 items, 2 recorded before"
    assert lines[-1].startswith("executionkit: run ")
    assert "finished; 3/3 done, " in lines[-1]
    assert lines[-1].endswith(", 440 tokens in 4 calls")  # the first run's 220 and 220 more
    shown = cli("inspect", "run.json").out
    assert "items " not in shown
    assert "400 in + 40 out = 440 tokens, 4 LLM calls" in shown


HELD = """\
from executionkit import Step, Workflow

workflow = Workflow(
    [
        Step("pages", lambda ctx: {"p1": "a", "p2": "b"}, encode=list, decode=dict.fromkeys),
        Step.map("over_pages", lambda item, ctx: item, over="pages"),
        Step.map("over_input", lambda item, ctx: item, over="docs"),
    ]
)
"""


def held_checkpoint(pages: object) -> WorkflowCheckpoint:
    """Items of both maps recorded, ``pages`` stored as given."""
    return WorkflowCheckpoint(
        step_index=1,
        outputs={"pages": pages},
        cost=TokenUsage(3, 3, 2),
        context_keys=("docs",),
        items={
            "over_pages": {"outputs": {"p1": "a"}, "cost": TokenUsage(1, 1, 1)},
            "over_input": {"outputs": {"x": 1}, "cost": TokenUsage(2, 2, 1)},
        },
    )


@pytest.mark.parametrize(
    ("pages", "total"),
    [
        (["p1", "p2", "p3"], 3),  # stored by encode, counted after decode
        (7, None),  # decode raises: the total stays unknown
    ],
)
def test_a_total_is_known_only_for_a_recorded_step_and_after_its_decode(
    cli: Callable[..., Outcome], tmp_path: Path, pages: object, total: int | None
) -> None:
    (tmp_path / "held.py").write_text(HELD)
    (tmp_path / "run.json").write_text(json.dumps(held_checkpoint(pages).to_dict()))
    outcome = cli("inspect", "run.json", "--json", "--workflow", "held:workflow")
    assert outcome.code == 0, outcome.err
    items = json.loads(outcome.out)["items"]
    assert (items["over_pages"]["total"], items["over_input"]["total"]) == (total, None)


def test_map_names_from_a_checkpoint_file_are_escaped(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    checkpoint = WorkflowCheckpoint(
        step_index=0,
        outputs={},
        cost=TokenUsage(1, 1, 1),
        items={"m\x1b[2J\n": {"outputs": {"k": 1}, "cost": TokenUsage(1, 1, 1)}},
    )
    (tmp_path / "run.json").write_text(json.dumps(checkpoint.to_dict()))
    outcome = cli("inspect", "run.json")
    assert outcome.code == 0
    assert all(line.isprintable() for line in outcome.out.splitlines())
    assert (
        'items       "m\\u001b[2J\\n": 1 item recorded (1 in + 1 out = 2 tokens, 1 LLM call)'
        in outcome.out.splitlines()
    )
