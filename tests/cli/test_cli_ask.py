"""The command line and `Step.ask`: a run that waits for a person exits 3, and is answered.

``run`` prints the questions a suspended run waits for and exits with status 3;
a second ``run`` with ``--answer NAME=VALUE`` (or ``--answers-json FILE``) and the
same ``--checkpoint`` answers them and goes on. ``inspect`` shows the questions
with when they were asked and their deadlines; ``graph`` marks the waiting steps.
Most tests run each command twice through the ``cli`` fixture, as
``tests/cli/test_cli.py`` does: as a real subprocess and in-process through ``main()``.
The workflow is a module written into the test's temporary folder (the working
directory); its steps record each call in ``calls.txt``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_runner import Outcome, run_subprocess

import executionkit._define._questions as questions
from executionkit import TokenUsage, WorkflowCheckpoint
from executionkit._cli import EXIT_SUSPENDED, main
from executionkit._cli._location import parse_location
from executionkit._cli._questions import question_lines

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")


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


def _in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Outcome]:
    def in_process(*args: str) -> Outcome:
        monkeypatch.chdir(tmp_path)
        importlib.invalidate_caches()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return in_process


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
    return _in_process(tmp_path, monkeypatch, capsys)


@pytest.fixture
def main_cli(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    forget_modules: None,
) -> Callable[..., Outcome]:
    """In-process only: for tests that set the library's clock."""
    return _in_process(tmp_path, monkeypatch, capsys)


APPROVAL = """\
from executionkit import PatternResult, Step, TokenUsage, Workflow


def called(name):
    with open("calls.txt", "a", encoding="utf-8") as file:
        file.write(name + "\\n")


def plan(ctx):
    called("plan")
    return PatternResult({"steps": ["draft", "review"], "budget": 3}, cost=TokenUsage(100, 20, 1))


def question(ctx):
    return {"plan": ctx["plan"], "question": "Run this plan? Answer yes or no."}


def check(answer):
    if answer not in ("yes", "no"):
        raise ValueError(f"answer yes or no, not {answer!r}")
    return answer


def execute(ctx):
    called("execute")
    return f"executed: {ctx['approve']}"


workflow = Workflow([
    Step("plan", plan),
    Step.ask("approve", question, depends_on=("plan",), check=check, expires_after=3600),
    Step("execute", execute, depends_on=("approve",)),
])
"""

QUESTIONS = """\
waiting for an answer:
  approve (asked TIME, expires TIME)
    {
      "plan": {"steps": ["draft", "review"], "budget": 3},
      "question": "Run this plan? Answer yes or no."
    }
"""
OUTPUTS = {
    "plan": {"steps": ["draft", "review"], "budget": 3},
    "approve": "yes",
    "execute": "executed: yes",
}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def calls(folder: Path) -> list[str]:
    path = folder / "calls.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def timeless(text: str) -> str:
    return TIME.sub("TIME", text)


def read_checkpoint(path: Path) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))


# --- a suspended run, answered by a second run, wherever the checkpoint is ---------------------


@pytest.fixture(params=["file", "sqlite", "postgresql"])
def location(request: pytest.FixtureRequest) -> str:
    """A --checkpoint location of each kind (PostgreSQL: a new database on the test server)."""
    if request.param == "file":
        return "run.json"
    if request.param == "sqlite":
        return "sqlite:///runs.db?run_id=approval-1"
    uri: str = request.getfixturevalue("pg_uri")
    return f"{uri}{'&' if '?' in uri else '?'}run_id=approval-1"


def test_a_suspended_run_exits_3_and_a_second_run_answers_it(
    cli: Callable[..., Outcome], tmp_path: Path, location: str
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    label = parse_location(location).label
    args = ("run", "approval:workflow", "--checkpoint", location)

    first = cli(*args)
    assert first.code == EXIT_SUSPENDED == 3, first.err
    assert timeless(first.out) == QUESTIONS
    err = timeless(first.err).splitlines()
    assert re.fullmatch(
        r"executionkit: approve is waiting for an answer until TIME; 1/3 done, waiting for: "
        r"approve, \S+, 120 tokens in 1 call",
        err[-3],
    )
    assert re.fullmatch(
        r"executionkit: run \S+ suspended; 1/3 done, waiting for: approve, \S+, "
        r"120 tokens in 1 call",
        err[-2],
    )
    assert err[-1] == (
        f"executionkit: waiting for answers to approve; checkpoint saved to {label} (seq 2, "
        "1 of 3 steps recorded); run again with the same --checkpoint and --answer "
        "NAME=VALUE to answer"
    )
    assert "failed" not in first.err
    assert calls(tmp_path) == ["plan"]

    inspected = cli("inspect", location, "--workflow", "approval:workflow")
    assert inspected.code == 0, inspected.err
    lines = timeless(inspected.out).splitlines()
    assert "steps       1 of 3 recorded, 1 waiting for an answer" in lines
    at = lines.index("waiting     approve (asked TIME, expires TIME)")
    assert lines[at + 1 : at + 5] == [
        "              {",
        '                "plan": {"steps": ["draft", "review"], "budget": 3},',
        '                "question": "Run this plan? Answer yes or no."',
        "              }",
    ]
    graph = cli("graph", "approval:workflow", "--checkpoint", location)
    assert graph.code == 0, graph.err
    assert '    s1["approve [ask]"]' in graph.out
    assert graph.out.endswith("    class s0 done\n    class s2 pending\n    class s1 waiting\n")

    again = cli(*args)  # no answer yet: nothing runs, nothing is asked again
    assert (again.code, timeless(again.out)) == (3, QUESTIONS)
    assert again.out == first.out
    assert calls(tmp_path) == ["plan"]

    answered = cli(*args, "--answer", "approve=yes")
    assert answered.code == 0, answered.err
    assert json.loads(answered.out) == OUTPUTS
    assert "executionkit: approve answered; 2/3 done" in answered.err
    assert calls(tmp_path) == ["plan", "execute"]

    done = cli(*args)  # complete: runs nothing and prints the outputs again
    assert (done.code, json.loads(done.out)) == (0, OUTPUTS)
    assert calls(tmp_path) == ["plan", "execute"]
    shown = cli("inspect", location, "--json")
    assert json.loads(shown.out)["waiting"] == {}


def test_the_answered_checkpoint_holds_the_answer_and_the_usage_of_one_run(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    args = ("run", "approval:workflow", "--checkpoint", "run.json")
    assert cli(*args).code == 3
    asked = read_checkpoint(tmp_path / "run.json")
    assert list(asked.pending) == ["approve"]
    assert asked.pending["approve"]["question"]["question"] == "Run this plan? Answer yes or no."
    assert cli(*args, "--answer=approve=no").code == 0
    final = read_checkpoint(tmp_path / "run.json")
    assert (final.run_id, dict(final.pending)) == (asked.run_id, {})
    assert final.outputs["approve"] == "no"
    assert final.cost == TokenUsage(100, 20, 1)


def test_without_a_checkpoint_the_questions_are_printed_and_nothing_is_saved(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    outcome = cli("run", "approval:workflow")
    assert (outcome.code, timeless(outcome.out)) == (3, QUESTIONS)
    assert outcome.err.splitlines()[-1] == (
        "executionkit: waiting for answers to approve; nothing was saved, so they cannot be "
        "given: pass --checkpoint FILE to answer in a later run"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["approval.py", "calls.txt"]


# --- several questions, and what an answer is -------------------------------------------------

SEVERAL = """\
from executionkit import Step, Workflow

workflow = Workflow([
    Step.ask("title", lambda ctx: "Which title?\\nKeep it short."),
    Step.ask("tags", lambda ctx: ["pick", "any", "tags"]),
    Step.ask("count", lambda ctx: "How many?"),
    Step.ask("notes", lambda ctx: "Anything else?"),
    Step("report", lambda ctx: {
        name: [type(ctx[name]).__name__, ctx[name]] for name in ("title", "tags", "count", "notes")
    }, depends_on=("title", "tags", "count", "notes")),
])
"""


def test_several_questions_are_answered_a_few_at_a_time(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """VALUE is read as JSON, else taken as the string; --answer wins over --answers-json."""
    write(tmp_path, "several.py", SEVERAL)
    args = ("run", "several:workflow", "--checkpoint", "run.json")
    first = cli(*args)
    assert first.code == 3
    assert timeless(first.out) == (
        "waiting for 4 answers:\n"
        "  title (asked TIME, never expires)\n"
        "    Which title?\n"
        "    Keep it short.\n"
        "  tags (asked TIME, never expires)\n"
        '    ["pick", "any", "tags"]\n'
        "  count (asked TIME, never expires)\n"
        "    How many?\n"
        "  notes (asked TIME, never expires)\n"
        "    Anything else?\n"
    )
    write(tmp_path, "answers.json", json.dumps({"tags": ["a", "b"], "count": 2}))
    partly = cli(
        *args, "--answers-json", "answers.json", "--answer", "title=A title", "--answer", "count=3"
    )
    assert partly.code == 3
    assert timeless(partly.out) == (
        "waiting for an answer:\n  notes (asked TIME, never expires)\n    Anything else?\n"
    )
    assert "executionkit: waiting for answers to notes; " in partly.err
    done = cli(*args, "--answer", "notes=null")
    assert done.code == 0, done.err
    assert json.loads(done.out)["report"] == {
        "title": ["str", "A title"],
        "tags": ["list", ["a", "b"]],
        "count": ["int", 3],
        "notes": ["NoneType", None],
    }


@pytest.mark.parametrize(
    ("value", "answer"),
    [
        ("yes", "yes"),
        ('"5"', "5"),
        ("5", 5),
        ("2.5", 2.5),
        ("true", True),
        ("null", None),
        ('{"ok": [1, "two"]}', {"ok": [1, "two"]}),
        ("[1, 2", "[1, 2"),  # not JSON: the text itself
        ("", ""),
        ("a=b", "a=b"),  # everything after the first '='
        ("Grüße ✓", "Grüße ✓"),
    ],
)
def test_an_answer_is_json_else_the_text(
    main_cli: Callable[..., Outcome], tmp_path: Path, value: str, answer: object
) -> None:
    write(tmp_path, "one.py", ONE_QUESTION)
    args = ("run", "one:workflow", "--checkpoint", "run.json")
    assert main_cli(*args).code == 3
    done = main_cli(*args, "--answer", f"ok={value}")
    assert done.code == 0, done.err
    assert json.loads(done.out)["ok"] == answer


ONE_QUESTION = """\
from executionkit import Step, Workflow

workflow = Workflow([Step.ask("ok", lambda ctx: "OK?")])
"""


# --- bad answers: one line, exit 2, nothing run or saved --------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ("--answer", "aprove=yes"),
            (
                "answers given (--answer, --answers-json) for steps that are not waiting for "
                "one: 'aprove' (no such step; did you mean 'approve'?); the questions pending "
                "in the checkpoint: 'approve'"
            ),
        ),
        (
            ("--answer", "plan=yes"),
            (
                "answers given (--answer, --answers-json) for steps that are not waiting for "
                "one: 'plan' (not an ask step); the questions pending in the checkpoint: "
                "'approve'"
            ),
        ),
        (
            ("--answer", "approve=maybe"),
            (
                "--answer approve: the step's check refused the answer: ValueError: answer yes "
                "or no, not 'maybe'"
            ),
        ),
        (
            ("--answers-json", "answers.json"),
            (
                "--answers-json answers.json: the step's check refused the answer: ValueError: "
                "answer yes or no, not 'sure'"
            ),
        ),
        (("--answer", "approve"), "--answer 'approve' is not NAME=VALUE"),
        (("--answer", "=yes"), "--answer '=yes' is not NAME=VALUE"),
        (
            ("--answer", "approve=yes", "--answer", "approve=no"),
            "--answer 'approve' is given twice",
        ),
        (
            ("--answer", "approve=NaN"),
            (
                "--answer approve: NaN is not a JSON value; to answer with the text itself, "
                "quote it as a JSON string"
            ),
        ),
        (
            ("--answer", "approve=" + "7" * 5000),
            (
                "--answer approve: an integer of 5000 digits (at most 4300 are read); to answer "
                "with the text itself, quote it as a JSON string"
            ),
        ),
        (("--answers-json", "missing.json"), "--answers-json missing.json: no such file"),
        (
            ("--answers-json", "list.json"),
            "--answers-json list.json: must hold a JSON object of step names to answers, got list",
        ),
    ],
)
def test_bad_answers_are_one_line_and_exit_2(
    cli: Callable[..., Outcome], tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    write(tmp_path, "answers.json", '{"approve": "sure"}')
    write(tmp_path, "list.json", '["yes"]')
    args = ("run", "approval:workflow", "--checkpoint", "run.json")
    assert cli(*args).code == 3
    saved = (tmp_path / "run.json").read_text(encoding="utf-8")
    outcome = cli(*args, *flags)
    assert (outcome.code, outcome.out, outcome.err) == (2, "", f"executionkit: error: {message}\n")
    assert (tmp_path / "run.json").read_text(encoding="utf-8") == saved
    assert calls(tmp_path) == ["plan"]


def test_answers_need_a_checkpoint_holding_their_questions(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    without = cli("run", "approval:workflow", "--answer", "approve=yes")
    assert (without.code, without.err) == (
        2,
        (
            "executionkit: error: --answer and --answers-json need --checkpoint: they answer the "
            "questions a run saved there is waiting for\n"
        ),
    )
    fresh = cli("run", "approval:workflow", "--checkpoint", "new.json", "--answer", "approve=yes")
    assert (fresh.code, fresh.err) == (
        2,
        (
            "executionkit: error: answers given (--answer, --answers-json) for steps that are "
            "not waiting for one: 'approve' (not asked yet); the questions pending in the "
            "checkpoint: none\n"
        ),
    )
    args = ("run", "approval:workflow", "--checkpoint", "run.json")
    assert cli(*args).code == 3
    assert cli(*args, "--answer", "approve=yes").code == 0
    twice = cli(*args, "--answer", "approve=no")
    assert twice.code == 2
    assert "'approve' (already answered); the questions pending in the checkpoint: none" in (
        twice.err
    )
    assert calls(tmp_path) == ["plan", "execute"]


HOSTILE_ANSWERS = [
    ("[" * 100_000 + "]" * 100_000, "not JSON (nested too deeply to read)"),
    (
        '{"approve": ["\\udbff"]}',
        "not JSON (a string holds the lone surrogate \\udbff, which is not Unicode text)",
    ),
    ('{"approve": Infinity}', "not JSON (Infinity is not a JSON value)"),
    (
        '{"approve": ' + "9" * 4400 + "}",
        "not JSON (an integer of 4400 digits (at most 4300 are read))",
    ),
    ("\xff", "not JSON (Expecting value: line 1 column 1 (char 0))"),
]


@pytest.mark.parametrize(("text", "message"), HOSTILE_ANSWERS, ids=[m for _, m in HOSTILE_ANSWERS])
def test_a_hostile_answers_file_is_one_line_and_exit_2(
    main_cli: Callable[..., Outcome], tmp_path: Path, text: str, message: str
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    write(tmp_path, "answers.json", text)
    outcome = main_cli(
        "run", "approval:workflow", "--checkpoint", "run.json", "--answers-json", "answers.json"
    )
    assert (outcome.code, outcome.out) == (2, "")
    assert outcome.err == f"executionkit: error: --answers-json answers.json: {message}\n"
    assert not (tmp_path / "run.json").exists()


def test_an_answers_file_that_is_not_utf8_or_not_a_file_is_refused(
    main_cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    (tmp_path / "latin1.json").write_bytes(b'{"approve": "\xe9"}')
    (tmp_path / "folder").mkdir()
    args = ("run", "approval:workflow", "--checkpoint", "run.json", "--answers-json")
    assert main_cli(*args, "latin1.json").err == (
        "executionkit: error: --answers-json latin1.json: cannot read: not UTF-8 text\n"
    )
    assert main_cli(*args, "folder").err == (
        "executionkit: error: --answers-json folder: cannot read: a folder, not a regular file\n"
    )


def test_a_fifo_of_answers_is_refused_without_blocking(tmp_path: Path) -> None:
    """Nobody ever writes to the FIFO: reading it would block, so the timeout would fire."""
    write(tmp_path, "approval.py", APPROVAL)
    os.mkfifo(tmp_path / "pipe.json")
    outcome = run_subprocess(
        tmp_path,
        "run",
        "approval:workflow",
        "--checkpoint",
        "run.json",
        "--answers-json",
        "pipe.json",
    )
    assert (outcome.code, outcome.out, outcome.err) == (
        2,
        "",
        (
            "executionkit: error: --answers-json pipe.json: cannot read: a named pipe (FIFO), "
            "not a regular file\n"
        ),
    )


# --- deadlines --------------------------------------------------------------------------------

ASKED = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def test_an_answer_after_the_deadline_fails_the_step_and_rerun_asks_again(
    main_cli: Callable[..., Outcome], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    args = ("run", "approval:workflow", "--checkpoint", "run.json")
    monkeypatch.setattr(questions, "utc_now", lambda: ASKED)
    assert main_cli(*args).code == 3
    later = ASKED + timedelta(hours=2)
    monkeypatch.setattr(questions, "utc_now", lambda: later)
    inspected = main_cli("inspect", "run.json").out.splitlines()
    assert (
        "waiting     approve (asked 2026-12-01T10:00:00+00:00, expired 2026-12-01T11:00:00+00:00)"
        in inspected
    )
    late = main_cli(*args, "--answer", "approve=yes")
    assert late.code == 1
    assert late.err.splitlines()[-2] == (
        "executionkit: step approve failed: TimeoutError: step 'approve': the question expired "
        "at 2026-12-01T11:00:00+00:00, before the answer given at 2026-12-01T12:00:00+00:00; "
        "--rerun approve asks it again"
    )
    again = main_cli(*args, "--rerun", "approve")
    assert again.code == 3
    assert again.out.splitlines()[1] == (
        "  approve (asked 2026-12-01T12:00:00+00:00, expires 2026-12-01T13:00:00+00:00)"
    )
    assert main_cli(*args, "--answer", "approve=yes").code == 0
    assert calls(tmp_path) == ["plan", "execute"]


# --- inspect and graph of a checkpoint with questions -------------------------------------------

WAITING = WorkflowCheckpoint(
    step_index=1,
    outputs={"plan": {"steps": ["draft", "review"], "budget": 3}},
    cost=TokenUsage(100, 20, 1),
    run_id="run-1",
    seq=2,
    created_at="2020-01-02T03:04:05+00:00",
    metadata={"workflow": "approval:workflow"},
    step_info={
        "plan": {"version": None, "depends_on": ()},
        "approve": {"version": None, "depends_on": ("plan",), "kind": "ask"},
        "late": {"version": None, "depends_on": (), "kind": "ask"},
    },
    pending={
        "approve": {
            "question": "Run it?\x1b[2J",
            "asked_at": "2020-01-02T03:04:05+00:00",
            "expires_at": "2999-01-01T00:00:00+00:00",
        },
        "late": {
            "question": {"pick": list(range(30))},
            "asked_at": "2020-01-02T03:04:05+00:00",
            "expires_at": "2020-01-03T03:04:05+00:00",
        },
    },
)

INSPECT_TEXT = """\
file        run.json
format      version 5
run_id      run-1
seq         2
created_at  2020-01-02T03:04:05+00:00
claimed_by  nobody
metadata    {"workflow": "approval:workflow"}
tokens      100 in + 20 out = 120 tokens, 1 LLM call
steps       1 recorded (--workflow MODULE:ATTR shows the total)
failed      (none)
progress    (none)
waiting     approve (asked 2020-01-02T03:04:05+00:00, expires 2999-01-01T00:00:00+00:00)
              Run it?\\x1b[2J
            late (asked 2020-01-02T03:04:05+00:00, expired 2020-01-03T03:04:05+00:00)
              {
                "pick": [
                  0,
                  1,
"""


def test_inspect_shows_each_question_when_asked_and_its_deadline(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "run.json", json.dumps(WAITING.to_dict()))
    text = cli("inspect", "run.json")
    assert (text.code, text.err) == (0, "")
    assert text.out.startswith(INSPECT_TEXT)
    assert all(line.isprintable() for line in text.out.splitlines())
    shown = cli("inspect", "run.json", "--json")
    assert json.loads(shown.out)["waiting"] == {
        "approve": {
            "question": "Run it?\x1b[2J",
            "asked_at": "2020-01-02T03:04:05+00:00",
            "expires_at": "2999-01-01T00:00:00+00:00",
            "expired": False,
        },
        "late": {
            "question": {"pick": list(range(30))},
            "asked_at": "2020-01-02T03:04:05+00:00",
            "expires_at": "2020-01-03T03:04:05+00:00",
            "expired": True,
        },
    }
    assert "\x1b" not in shown.out  # written as \u001b: safe on a terminal, still JSON


def test_inspect_lists_the_runs_waiting_for_answers(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "approval.py", APPROVAL)
    assert cli("run", "approval:workflow", "--checkpoint", "sqlite:///runs.db?run_id=a").code == 3
    listed = cli("inspect", "sqlite:///runs.db")
    assert listed.out.splitlines()[2].startswith(
        "  a: seq 2, 1 recorded, 0 failed, 1 waiting for an answer, saved "
    )
    data = json.loads(cli("inspect", "sqlite:///runs.db", "--json").out)
    assert [(run["run_id"], run["waiting"]) for run in data["runs"]] == [("a", 1)]


GRAPHED = """\
from executionkit import Step, Workflow

workflow = Workflow([
    Step("plan", lambda ctx: "p"),
    Step.ask("approve", lambda ctx: "ok?", depends_on=("plan",)),
    Step("execute", lambda ctx: "done", depends_on=("approve",)),
])
"""
MERMAID = """\
flowchart TD
    s0["plan"]
    s1["approve [ask]"]
    s2["execute"]
    s0 --> s1
    s1 --> s2
    classDef done fill:#d3f9d8,stroke:#2b8a3e,color:#1b4332
    classDef failed fill:#ffe3e3,stroke:#c92a2a,color:#5c0011
    classDef pending fill:#f1f3f5,stroke:#868e96,color:#343a40
    classDef waiting fill:#e7f5ff,stroke:#1971c2,stroke-width:3px,color:#0b3d68
    class s0 done
    class s2 pending
    class s1 waiting
"""
DOT = """\
digraph workflow {
    rankdir=TB;
    node [shape=box, style="rounded,filled"];
    n0 [label="plan", fillcolor="#d3f9d8"];
    n1 [label="approve [ask]", fillcolor="#e7f5ff", penwidth=2];
    n2 [label="execute", fillcolor="#f1f3f5"];
    n0 -> n1;
    n1 -> n2;
}
"""


def test_graph_marks_the_waiting_step(cli: Callable[..., Outcome], tmp_path: Path) -> None:
    write(tmp_path, "graphed.py", GRAPHED)
    assert cli("run", "graphed:workflow", "--checkpoint", "run.json").code == 3
    mermaid = cli("graph", "graphed:workflow", "--checkpoint", "run.json")
    assert (mermaid.code, mermaid.out) == (0, MERMAID)
    dot = cli("graph", "graphed:workflow", "--checkpoint", "run.json", "--format", "dot")
    assert (dot.code, dot.out) == (0, DOT)
    plain = cli("graph", "graphed:workflow")
    assert "classDef" not in plain.out
    assert '    s1["approve [ask]"]' in plain.out
    assert (
        cli("run", "graphed:workflow", "--checkpoint", "run.json", "--answer=approve=yes").code
        == 0
    )
    done = cli("graph", "graphed:workflow", "--checkpoint", "run.json")
    assert "waiting" not in done.out
    assert done.out.endswith("    class s0,s1,s2 done\n")


# --- how questions are shown, and the help ----------------------------------------------------


def test_questions_are_shown_pretty_but_compact_and_safe() -> None:
    assert question_lines("Approve?") == ["Approve?"]
    assert question_lines("Line one\nline\x1b two") == ["Line one", "line\\x1b two"]
    assert question_lines("") == ['""']
    assert question_lines(["a", 1, None]) == ['["a", 1, null]']
    assert question_lines({"plan": ["x" * 30, "y" * 30], "n": 1, "empty": {}}) == [
        "{",
        '  "plan": [',
        '    "' + "x" * 30 + '",',
        '    "' + "y" * 30 + '"',
        "  ],",
        '  "n": 1,',
        '  "empty": {}',
        "}",
    ]
    deep: list[object] = []
    for _ in range(5000):
        deep = [deep]
    assert question_lines(deep) == ["(list nested too deeply to show)"]


def test_help_documents_exit_status_3_and_the_answer_flags(cli: Callable[..., Outcome]) -> None:
    top = cli("--help")
    assert "  3    waiting for answers: the questions are printed" in top.out
    run_help = cli("run", "--help")
    assert "--answer NAME=VALUE" in run_help.out
    assert "--answers-json FILE" in run_help.out


NESTED = """\
from executionkit import Step, Workflow

child = Workflow(
    [
        Step("draft", lambda ctx: "a draft"),
        Step.ask("approve", lambda ctx: "publish the draft?", depends_on=("draft",)),
        Step("final", lambda ctx: "final: " + ctx["approve"], depends_on=("approve",)),
    ]
)
workflow = Workflow(
    [
        Step("research", child),
        Step("publish", lambda ctx: ctx["research"]["final"], depends_on=("research",)),
    ]
)
"""


def test_a_question_inside_a_sub_workflow_is_shown_and_answered_by_its_path(
    tmp_path: Path, main_cli: Callable[..., Outcome]
) -> None:
    (tmp_path / "nested.py").write_text(NESTED, encoding="utf-8")
    first = main_cli("run", "nested:workflow", "--checkpoint", "run.json")
    assert first.code == EXIT_SUSPENDED
    assert "research/approve" in first.out
    inspected = main_cli("inspect", "run.json", "--json")
    assert inspected.code == 0
    waiting = json.loads(inspected.out)["waiting"]
    assert list(waiting) == ["research/approve"]
    assert waiting["research/approve"]["question"] == "publish the draft?"
    graph = main_cli("graph", "nested:workflow", "--checkpoint", "run.json")
    assert graph.code == 0
    assert "class s0 waiting" in graph.out  # the sub-workflow step waits
    assert "class s1 pending" in graph.out
    done = main_cli(
        "run", "nested:workflow", "--checkpoint", "run.json", "--answer", "research/approve=yes"
    )
    assert done.code == 0, done.err
    assert "final: yes" in done.out


EQUALS = """\
from executionkit import Step, Workflow

workflow = Workflow(
    [
        Step.ask("a=b", lambda ctx: "ship it?"),
        Step("done", lambda ctx: f"answered {ctx['a=b']}", depends_on=("a=b",)),
    ]
)
"""


def test_a_question_whose_name_holds_an_equals_sign_is_answered(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """``--answer 'a=b=yes'`` answers ``a=b``, the longest name that waits (issue 31)."""
    (tmp_path / "equals.py").write_text(EQUALS, encoding="utf-8")
    args = ("run", "equals:workflow", "--checkpoint", "run.json")
    assert cli(*args).code == EXIT_SUSPENDED
    answered = cli(*args, "--answer", "a=b=yes")
    assert answered.code == 0, answered.err
    assert json.loads(answered.out) == {"a=b": "yes", "done": "answered yes"}


def test_an_answer_names_the_longest_waiting_question_else_ends_at_the_first_equals(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """``b=x``: no ``b`` waits, refused by name; ``a=b=c=d``: ``a=b`` waits, given ``c=d``."""
    (tmp_path / "equals.py").write_text(EQUALS, encoding="utf-8")
    args = ("run", "equals:workflow", "--checkpoint", "run.json")
    assert cli(*args).code == EXIT_SUSPENDED
    refused = cli(*args, "--answer", "b=x")
    assert refused.code == 2
    assert "'b'" in refused.err
    answered = cli(*args, "--answer", "a=b=c=d")
    assert answered.code == 0, answered.err
    assert json.loads(answered.out)["a=b"] == "c=d"
