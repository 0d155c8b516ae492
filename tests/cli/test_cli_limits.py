"""``--limit KEY:FIELD=N,...``: the named limits of ``run`` and ``serve --workflow``.

Each ``--limit`` becomes an `executionkit.Limit` passed as ``run(limits=[...])``. The
reading and every refusal are checked in this process (``main()``); the limit itself
through a real process, whose map items write start and end marks to a file: the marks
show how many items were ever inside at once.
"""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_runner import Outcome, run_subprocess

from executionkit import Limit, Step, Workflow
from executionkit._cli import main
from executionkit._cli._exits import CliError
from executionkit._cli._location import parse_location
from executionkit._cli._parser import build_parser
from executionkit._cli._run import in_cli_terms
from executionkit._cli._run_options import RunFlags
from executionkit._cli._serve._answers import Resumer, Tracker
from executionkit._cli._serve._runs import Source
from executionkit._errors import RunArgumentError
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Iterator

DOC = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "command-line.md"
ITEMS = 30

# A map of ITEMS items drawing on limit "api". Each item marks its start ("+") and its
# end ("-") in marks.log, appended with one os.write each, and in between waits until
# ``together`` items (the input) have started: that many are inside at once, and the
# marks must show it. More than the limit allows would be inside at once too, if the
# limit let them in. A missing partner breaks the barrier (30 s), failing the item.
CALLS = f"""\
import os
import threading

from executionkit import Step, Workflow

_lock = threading.Lock()
_barriers = {{}}


def _barrier(parties):
    with _lock:
        return _barriers.setdefault(parties, threading.Barrier(parties))


def mark(sign):
    marks = os.open("marks.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(marks, sign + b"\\n")
    finally:
        os.close(marks)


def split(ctx):
    return list(range({ITEMS}))


def call(item, ctx):
    mark(b"+")
    _barrier(int(ctx["together"])).wait(30)
    mark(b"-")
    return item


workflow = Workflow([Step("split", split), Step.map("calls", call, over="split", limit="api")])
"""

# The module the how-to page's examples name: steps drawing on "openai" and "search".
SUMMARIES = """\
from executionkit import Step, Workflow

workflow = Workflow(
    [
        Step("search", lambda ctx: ["a", "b"], limit="search"),
        Step.map("summaries", lambda hit, ctx: hit.upper(), over="search", limit="openai"),
    ]
)
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The test's folder, the working directory, holding the workflow modules."""
    (tmp_path / "calls.py").write_text(CALLS, encoding="utf-8")
    (tmp_path / "summaries.py").write_text(SUMMARIES, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:  # the next test's modules of the same names
        file = getattr(sys.modules[name], "__file__", None)
        if file is not None and Path(file).resolve().is_relative_to(tmp_path.resolve()):
            del sys.modules[name]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> Outcome:
    """``executionkit ARGS`` in this process."""
    code = main(list(args))
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def flags_of(*argv: str) -> RunFlags:
    return RunFlags.of(build_parser().parse_args(["run", "m:w", *argv]))


# --- reading the flag --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "limits"),
    [
        (["api:concurrency=2"], [Limit("api", concurrency=2)]),
        (
            ["openai:requests=500,tokens=1000000,per=30"],
            [Limit("openai", requests=500, tokens=1_000_000, per=30)],
        ),
        (["api:per=0.5,requests=+7"], [Limit("api", requests=7, per=0.5)]),
        (["api:tokens=1000,per=1e1"], [Limit("api", tokens=1000, per=10)]),
        (
            ["openai:requests=5", "search:concurrency=4"],
            [Limit("openai", requests=5), Limit("search", concurrency=4)],
        ),
        # The key is everything before the last colon: a field holds none.
        (["azure:gpt-4o:requests=9"], [Limit("azure:gpt-4o", requests=9)]),
        (["my key:concurrency=1"], [Limit("my key", concurrency=1)]),
    ],
)
def test_each_limit_becomes_a_limit_passed_as_limits(argv: list[str], limits: list[Limit]) -> None:
    flags = flags_of(*(arg for text in argv for arg in ("--limit", text)))
    assert flags.options == {"limits": limits}
    assert flags.asked
    flags.close()


def test_no_limit_passes_no_limits() -> None:
    assert "limits" not in flags_of().options


@pytest.mark.parametrize(
    "limit",
    [
        Limit("openai", requests=500, tokens=1_000_000),
        Limit("api", concurrency=3, per=0.25),
        Limit("azure:gpt-4o", tokens=7, per=3600),
    ],
)
def test_what_limit_text_writes_reads_back(limit: Limit) -> None:
    assert flags_of("--limit", limit.text()).options["limits"] == [limit]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["api"],
            (
                "--limit api: expected KEY:FIELD=N,... with FIELD requests, tokens, "
                "concurrency or per, such as api:requests=500,per=60"
            ),
        ),
        (["requests=5"], "--limit requests=5: expected KEY:FIELD=N,... with FIELD requests"),
        ([":requests=5"], "--limit :requests=5: the KEY before the colon is empty"),
        (
            ["api:"],
            (
                "--limit api: nothing follows the colon; expected KEY:FIELD=N,... with FIELD "
                "requests, tokens, concurrency or per"
            ),
        ),
        (
            ["api:request=5"],
            (
                "--limit api:request=5: unknown field 'request'; did you mean 'requests'? (the "
                "fields are requests, tokens, concurrency, per)"
            ),
        ),
        (
            ["api:concurency=2"],
            "--limit api:concurency=2: unknown field 'concurency'; did you mean 'concurrency'?",
        ),
        (
            ["api:rpm=5"],
            (
                "--limit api:rpm=5: unknown field 'rpm' (the fields are requests, tokens, "
                "concurrency, per)"
            ),
        ),
        (
            ["api:requests"],
            "--limit api:requests: 'requests' is not FIELD=N; expected KEY:FIELD=N,...",
        ),
        (
            ["api:requests=5,"],
            "--limit api:requests=5,: '' is not FIELD=N; expected KEY:FIELD=N,...",
        ),
        (
            ["api:requests=x"],
            "--limit api:requests=x: requests must be a whole number, got 'x'",
        ),
        (["api:tokens="], "--limit api:tokens=: tokens must be a whole number, got ''"),
        (
            ["api:concurrency=1.5"],
            "--limit api:concurrency=1.5: concurrency must be a whole number, got '1.5'",
        ),
        (
            ["api:requests=٣"],
            "--limit api:requests=٣: requests must be a whole number, got '٣'",
        ),
        (
            ["api:concurrency=1,per=soon"],
            "--limit api:concurrency=1,per=soon: per must be a number of seconds, got 'soon'",
        ),
        (
            ["api:concurrency=1,per= 5"],
            "--limit api:concurrency=1,per= 5: per must be a number of seconds, got ' 5'",
        ),
        (
            ["api:requests=1,requests=2"],
            "--limit api:requests=1,requests=2: requests is given twice",
        ),
        (
            ["api:requests=1", "api:tokens=5"],
            (
                "--limit api is given twice (api:requests=1,per=60 and api:tokens=5): one "
                "--limit per key"
            ),
        ),
        # What Limit itself refuses, in its own words.
        (
            ["api:requests=5,per=0"],
            (
                "--limit api:requests=5,per=0: Limit 'api': per must be a positive, finite number "
                "of seconds, got 0.0"
            ),
        ),
        (
            ["api:requests=5,per=inf"],
            (
                "--limit api:requests=5,per=inf: Limit 'api': per must be a positive, finite "
                "number of seconds, got inf"
            ),
        ),
        (
            ["api:requests=0"],
            (
                "--limit api:requests=0: Limit 'api': requests must be a positive int or None, "
                "got 0"
            ),
        ),
        (
            ["api:concurrency=-2"],
            (
                "--limit api:concurrency=-2: Limit 'api': concurrency must be a positive int or "
                "None, got -2"
            ),
        ),
        (
            ["api:per=30"],
            (
                "--limit api:per=30: Limit 'api' limits nothing: give requests, tokens or "
                "concurrency"
            ),
        ),
    ],
)
def test_a_bad_limit_exits_2_naming_the_flag_and_what_is_wrong(
    folder: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    flags = [arg for text in argv for arg in ("--limit", text)]
    with pytest.raises(CliError) as raised:
        flags_of(*flags)
    assert str(raised.value).startswith(message)
    args = ("run", "calls:workflow", "--checkpoint", "run.json", "--input", "together=1")
    done = cli(capsys, *args, *flags)
    assert (done.code, done.out) == (2, "")
    (line,) = done.err.splitlines()
    assert line.startswith(f"executionkit: error: {message}")
    assert not (folder / "run.json").exists()
    assert not (folder / "marks.log").exists()


# --- a key no --limit gives --------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            (),
            (
                "step 'calls' draws on limit 'api' (limit='api'), but no --limit was given: pass "
                "--limit api:FIELD=N,... for it (FIELD requests, tokens, concurrency or per)"
            ),
        ),
        (
            ("--limit", "apj:concurrency=2", "--limit", "web:requests=3"),
            (
                "step 'calls' draws on limit 'api' (limit='api'), but --limit gives only 'apj', "
                "'web'; did you mean 'apj'?: pass --limit api:FIELD=N,... for it (FIELD "
                "requests, tokens, concurrency or per)"
            ),
        ),
    ],
)
def test_a_key_no_limit_gives_is_bad_input_naming_the_key(
    folder: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], message: str
) -> None:
    args = ("run", "calls:workflow", "--checkpoint", "run.json", "--input", "together=1")
    done = cli(capsys, *args, *flags)
    assert (done.code, done.out, done.err) == (2, "", f"executionkit: error: {message}\n")
    assert not (folder / "run.json").exists()
    assert not (folder / "marks.log").exists()


def test_the_advice_quotes_a_key_for_the_shell() -> None:
    workflow = Workflow([Step("call", lambda ctx: 1, limit="my key")])
    with pytest.raises(RunArgumentError) as raised:
        workflow.run_sync()
    said = in_cli_terms(str(raised.value), workflow)
    assert said.endswith(
        ": pass --limit 'my key':FIELD=N,... for it (FIELD requests, tokens, concurrency or per)"
    )
    assert shlex.split("--limit 'my key':concurrency=1") == ["--limit", "my key:concurrency=1"]


def test_a_key_of_a_sub_workflow_s_step_needs_its_limit_too(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "nested.py").write_text(
        "from executionkit import Step, Workflow\n"
        "inner = Workflow([Step('ask', lambda ctx: 1, limit='llm')])\n"
        "workflow = Workflow([Step('research', inner)])\n",
        encoding="utf-8",
    )
    done = cli(capsys, "run", "nested:workflow")
    assert done.code == 2
    assert "draws on limit 'llm'" in done.err
    assert "pass --limit llm:FIELD=N,... for it" in done.err
    done = cli(capsys, "run", "nested:workflow", "--limit", "llm:requests=10")
    assert done.code == 0, done.err


# --- through a real process --------------------------------------------------------------


def inside_at_once(folder: Path) -> int:
    """The most items ever inside at once, by the marks; every item started and ended."""
    marks = (folder / "marks.log").read_bytes().split()
    assert (marks.count(b"+"), marks.count(b"-")) == (ITEMS, ITEMS)
    inside = most = 0
    for mark in marks:
        inside += 1 if mark == b"+" else -1
        assert inside >= 0
        most = max(most, inside)
    return most


@pytest.mark.parametrize(
    ("limit", "together"),
    [
        ("api:concurrency=2", 2),
        ("api:concurrency=3,per=1", 3),
        # Without a concurrency bound all 30 go in at once: the marks can show it.
        ("api:requests=1000", ITEMS),
    ],
)
def test_concurrency_bounds_the_items_inside_at_once(
    tmp_path: Path, limit: str, together: int
) -> None:
    (tmp_path / "calls.py").write_text(CALLS, encoding="utf-8")
    args = ("run", "calls:workflow", "--input", f"together={together}")
    done = run_subprocess(tmp_path, *args, "--limit", limit)
    assert done.code == 0, done.err
    assert inside_at_once(tmp_path) == together


def test_a_missing_limit_exits_2_naming_the_key_and_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "calls.py").write_text(CALLS, encoding="utf-8")
    args = ("run", "calls:workflow", "--checkpoint", "run.json", "--input", "together=1")
    done = run_subprocess(tmp_path, *args, "--limit", "web:concurrency=2")
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "executionkit: error: step 'calls' draws on limit 'api' (limit='api'), but --limit "
        "gives only 'web': pass --limit api:FIELD=N,... for it (FIELD requests, tokens, "
        "concurrency or per)\n"
    )
    assert not (tmp_path / "marks.log").exists()
    assert not (tmp_path / "run.json").exists()


# --- serve --workflow --------------------------------------------------------------------


def test_serve_takes_limits_only_with_a_workflow_and_checks_them_at_start(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = cli(capsys, "serve", "runs.jsonl", "--port", "0", "--limit", "api:concurrency=1")
    assert done.code == 2
    assert "the run options are how runs resumed here run: they go with --workflow" in done.err
    done = cli(capsys, "serve", "runs.jsonl", "--port", "0", "--workflow", "calls:workflow")
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "executionkit: error: step 'calls' draws on limit 'api' (limit='api'), but no --limit "
        "was given: pass --limit api:FIELD=N,... for it (FIELD requests, tokens, concurrency "
        "or per)\n"
    )
    args = ("serve", "runs.jsonl", "--port", "0", "--workflow", "calls:workflow")
    done = cli(capsys, *args, "--limit", "api:per=1")
    assert done.code == 2
    assert "--limit api:per=1: Limit 'api' limits nothing" in done.err


def _approval() -> Workflow:
    return Workflow(
        [
            Step.ask("approve", lambda ctx: "Publish it?"),
            Step(
                "publish",
                lambda ctx: f"published: {ctx['approve']}",
                depends_on=("approve",),
                limit="api",
            ),
        ]
    )


def _answered(url: str, workflow: Workflow, flags: RunFlags) -> str | None:
    """Answer ``approve`` of run ``review`` as the page does; the refusal, if any."""
    source = Source(parse_location(url), workflow)
    resumer = Resumer(source, workflow, {}, Tracker(), flags)
    refusal = resumer.answer("review", "approve", "yes")
    resume = resumer._active.get("review")
    if resume is not None and resume.thread is not None:
        resume.thread.join(30)  # the resume goes on once its answer is saved
        assert not resume.thread.is_alive()
    return refusal


def test_serve_resumes_runs_with_the_limits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    workflow = _approval()
    first = workflow.run_sync(
        checkpoint_fn=store, run_id="review", limits=[Limit("api", concurrency=1)]
    )
    assert list(first.pending) == ["approve"]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    serve = ["serve", url, "--workflow", "m:w"]
    without = RunFlags.of(build_parser().parse_args(serve))
    refusal = _answered(url, workflow, without)
    assert refusal is not None
    assert "draws on limit 'api'" in refusal
    assert "nothing ran" in refusal
    with_limit = RunFlags.of(build_parser().parse_args([*serve, "--limit", "api:requests=5"]))
    assert with_limit.options == {"limits": [Limit("api", requests=5)]}
    assert _answered(url, workflow, with_limit) is None
    saved = store.load("review")
    assert saved is not None
    assert saved.outputs["publish"] == "published: yes"


# --- the how-to page ---------------------------------------------------------------------


def test_the_how_to_limit_errors_are_what_the_commands_print(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command of the page's example of refusals prints the ``#`` line after it."""
    page = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```$", page, flags=re.MULTILINE | re.DOTALL)
    (block,) = [block for block in blocks if "# executionkit: error: --limit" in block]
    lines = block.splitlines()
    commands = [number for number, line in enumerate(lines) if not line.startswith("# ")]
    assert len(commands) == 3
    for start, end in zip(commands, [*commands[1:], len(lines)], strict=True):
        executable, *args = shlex.split(lines[start])
        assert executable == "executionkit"
        done = cli(capsys, *args)
        assert done.code == 2, lines[start]
        expected = [line.removeprefix("# ") for line in lines[start + 1 : end]]
        assert done.err.splitlines() == expected, lines[start]
    (example,) = [block for block in blocks if "--limit openai:requests=500,tokens=" in block]
    command = shlex.split(example.replace("\\\n", " "))
    flags = RunFlags.of(build_parser().parse_args(command[1:]))
    assert flags.options == {
        "limits": [Limit("openai", requests=500, tokens=1_000_000), Limit("search", concurrency=4)]
    }


def test_the_help_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "serve"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        assert "--limit KEY:FIELD=N,..." in help_text
        assert "requests=N attempts and tokens=N tokens per window of per=SECONDS" in help_text
