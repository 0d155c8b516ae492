"""The command line: ``run``, ``inspect`` and ``graph``, driven as a user would.

Most tests run twice through the ``cli`` fixture: as a real subprocess
(``python -m executionkit ...``, which is what users get) and in-process through
``main()`` (the same code, measured by coverage). Both give the exit code,
stdout and stderr. The workflow they run is ``examples/cli_workflow.py``, or a
module written into the test's temporary folder, which is the working directory.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cli_runner import Outcome, run_subprocess, subprocess_env

from executionkit import TokenUsage, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit import _cli as cli_module
from executionkit._cli import main
from executionkit._cli._exits import CliError
from executionkit._cli._location import DatabaseLocation, FileLocation, parse_location
from executionkit.stores import SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DOC = ROOT / "docs" / "how-to" / "command-line.md"


@pytest.fixture
def clean_modules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Forget the workflow modules a test imported: tests reuse names in different folders.

    Only modules from the temporary folders and examples/ go; anything else imported
    meanwhile (a stdlib module loaded for the first time) must stay the one object.
    """
    before = set(sys.modules)
    path = list(sys.path)
    yield
    roots = (tmp_path_factory.getbasetemp().resolve(), EXAMPLES)
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None)
        if file is not None and any(Path(file).resolve().is_relative_to(r) for r in roots):
            del sys.modules[name]
    sys.path[:] = path


@pytest.fixture(params=["subprocess", "in-process"])
def cli(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_modules: None,
) -> Callable[..., Outcome]:
    """Run ``executionkit ARGS`` with the temporary folder as working directory."""
    if request.param == "subprocess":
        return lambda *args: run_subprocess(tmp_path, *args)

    def in_process(*args: str) -> Outcome:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", [str(EXAMPLES), *sys.path])
        importlib.invalidate_caches()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return in_process


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def read_checkpoint(path: Path) -> WorkflowCheckpoint:
    return WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))


NO_LANG = "ValueError: no dictionary for language 'xx' (known: de, es, fr)"
TEXT = "--input=text=The cat sat"

# --- run ------------------------------------------------------------------------------------


def test_run_fails_saves_and_resumes_with_the_input_fixed(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """Exit 1 with the failure summarised and a checkpoint; the rerun resumes and exits 0."""
    args = ("run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT)
    failed = cli(*args, "--input", "lang=xx")
    assert failed.code == 1
    assert failed.out == ""
    assert failed.err.splitlines()[-2:] == [
        f"executionkit: step translate failed: {NO_LANG}",
        (
            "executionkit: checkpoint saved to run.json (seq 3, 2 of 4 steps recorded); run "
            "again with the same --checkpoint to resume"
        ),
    ]
    saved = read_checkpoint(tmp_path / "run.json")
    assert dict(saved.outputs) == {"words": ["the", "cat", "sat"], "count": 3}
    assert dict(saved.errors) == {"translate": NO_LANG}
    assert dict(saved.metadata) == {"workflow": "cli_workflow:workflow"}
    assert saved.context_keys == ("lang", "text")

    done = cli(*args, "--input", "lang=fr")
    assert done.code == 0, done.err
    outputs = {
        "words": ["the", "cat", "sat"],
        "count": 3,
        "translate": "le chat s'assit",
        "report": {"words": 3, "translation": "le chat s'assit"},
    }
    assert json.loads(done.out) == outputs
    final = read_checkpoint(tmp_path / "run.json")
    assert dict(final.outputs) == outputs
    assert (final.run_id, final.seq, final.errors) == (saved.run_id, 5, {})
    # count ran once (120 in) and translate once (150 in): nothing was paid for twice.
    assert final.cost == TokenUsage(270, 34, 2)
    assert dict(final.metadata) == {"workflow": "cli_workflow:workflow"}

    again = cli(*args, "--input", "lang=fr")
    assert (again.code, json.loads(again.out)) == (0, outputs)
    assert read_checkpoint(tmp_path / "run.json") == final


def test_run_without_a_checkpoint_prints_the_outputs_and_writes_nothing(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    done = cli("run", "cli_workflow:build", "--input", "text=the cat", "--input", "lang=de")
    assert done.code == 0, done.err
    assert json.loads(done.out)["report"] == {"words": 2, "translation": "die Katze"}
    assert list(tmp_path.iterdir()) == []


def test_a_failure_without_a_checkpoint_says_nothing_was_saved(
    cli: Callable[..., Outcome],
) -> None:
    failed = cli("run", "cli_workflow:workflow", TEXT, "--input", "lang=xx")
    assert failed.code == 1
    assert failed.err.splitlines()[-2:] == [
        f"executionkit: step translate failed: {NO_LANG}",
        "executionkit: nothing was saved; pass --checkpoint FILE to keep the steps that completed",
    ]


def test_progress_goes_to_stderr(cli: Callable[..., Outcome]) -> None:
    """The console reporter writes plain lines to stderr (not a terminal), none to stdout."""
    done = cli("run", "cli_workflow:workflow", TEXT, "--input", "lang=es")
    assert done.code == 0
    assert "executionkit: run " in done.err
    assert "4/4 done" in done.err.splitlines()[-1]
    assert "executionkit" not in done.out


TYPED = """\
from executionkit import Step, Workflow

def show(ctx):
    return {"n": ctx["n"], "type": type(ctx["n"]).__name__, "name": ctx["name"]}

workflow = Workflow([Step("show", show)])
"""


@pytest.mark.parametrize(
    ("inputs", "flags", "expected"),
    [
        ({"n": 3, "name": "file"}, (), {"n": 3, "type": "int", "name": "file"}),
        (
            {"n": [1, 2], "name": "file"},
            ("--input", "name=flag"),
            {"n": [1, 2], "type": "list", "name": "flag"},
        ),
        ({"name": "file"}, ("--input", "n=3"), {"n": "3", "type": "str", "name": "file"}),
        ({"n": 2.5, "name": "file"}, (), {"n": 2.5, "type": "float", "name": "file"}),
        ({}, ("--input", "n=a=b", "--input", "name="), {"n": "a=b", "type": "str", "name": ""}),
    ],
)
def test_inputs_are_strings_and_inputs_json_gives_typed_values(
    cli: Callable[..., Outcome],
    tmp_path: Path,
    inputs: dict[str, Any],
    flags: tuple[str, ...],
    expected: dict[str, Any],
) -> None:
    """--input VALUE stays a string (split at the first '='); --input wins over the file."""
    write(tmp_path, "typed.py", TYPED)
    write(tmp_path, "inputs.json", json.dumps(inputs))
    done = cli("run", "typed:workflow", "--inputs-json", "inputs.json", *flags)
    assert done.code == 0, done.err
    assert json.loads(done.out) == {"show": expected}


UNSTORABLE = """\
from executionkit import Step, Workflow

workflow = Workflow([
    Step("fine", lambda ctx: "kept"),
    Step("odd", lambda ctx: {1, 2}, depends_on=("fine",)),
])
"""


def test_an_output_json_cannot_hold_fails_its_step_and_keeps_the_rest(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """With --checkpoint, outputs are checked as they are recorded (validate_json)."""
    write(tmp_path, "unstorable.py", UNSTORABLE)
    failed = cli("run", "unstorable:workflow", "--checkpoint", "run.json")
    assert failed.code == 1
    assert failed.err.splitlines()[-2].startswith(
        "executionkit: step odd failed: CheckpointValueError: "
    )
    assert dict(read_checkpoint(tmp_path / "run.json").outputs) == {"fine": "kept"}


def test_without_a_checkpoint_an_output_json_cannot_hold_fails_its_step_too(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """The outputs are printed as JSON: one JSON cannot hold is refused, never a repr."""
    write(tmp_path, "unstorable.py", UNSTORABLE)
    failed = cli("run", "unstorable:workflow")
    assert failed.code == 1
    assert failed.out == ""
    assert failed.err.splitlines()[-2].startswith(
        "executionkit: step odd failed: CheckpointValueError: "
    )


NEEDS_INPUTS = """\
from executionkit import Step, Workflow

workflow = Workflow([
    Step("words", lambda ctx: ctx["text"].split()),
    Step("language", lambda ctx: ctx["lang"]),
    Step("count", lambda ctx: len(ctx["words"]), depends_on=("words",)),
])
"""


def test_a_fresh_run_missing_an_input_is_a_usage_error_naming_the_key(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """A step reading an input nobody gave: exit 2, the keys and the flag that gives them."""
    write(tmp_path, "needs.py", NEEDS_INPUTS)
    refused = cli("run", "needs:workflow")
    assert refused.code == 2
    assert refused.out == ""
    assert refused.err.splitlines()[-1] == (
        "executionkit: error: step words reads input text, which was not given: pass --input "
        "text=VALUE --input lang=VALUE (or --inputs-json FILE); declare "
        "Workflow(..., inputs=[...]) to have inputs checked before any step runs"
    )
    given = cli("run", "needs:workflow", "--input", "text=a b", "--input", "lang=fr")
    assert given.code == 0, given.err
    assert json.loads(given.out) == {"words": ["a", "b"], "language": "fr", "count": 2}


def test_resuming_from_another_workflows_checkpoint_is_refused_and_the_file_kept(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    other = WorkflowCheckpoint(step_index=1, outputs={"alpha": 1}, cost=TokenUsage(), seq=1)
    path = write(tmp_path, "run.json", json.dumps(other.to_dict()))
    before = path.read_bytes()
    refused = cli("run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT)
    assert refused.code == 2
    assert refused.err == (
        "executionkit: error: checkpoint records outputs of steps this workflow does not "
        "have: 'alpha' (a checkpoint of another workflow, or renamed steps); pass "
        "--discard-unknown-steps to drop them\n"
    )
    assert path.read_bytes() == before


def test_resuming_needs_the_same_input_keys(cli: Callable[..., Outcome]) -> None:
    """Checkpoints keep input names, never values: a resume must pass them again."""
    args = ("run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT)
    assert cli(*args, "--input", "lang=xx").code == 1
    refused = cli(*args)
    assert refused.code == 2
    assert refused.err == (
        "executionkit: error: inputs the checkpoint was run with are missing: 'lang'; "
        "checkpoints never store input values, so pass them again with --input or "
        "--inputs-json\n"
    )


def test_a_checkpoint_that_cannot_be_saved_is_exit_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_modules: None,
) -> None:
    """A storage failure stops the run: exit 1, saying what failed and what was saved."""
    from executionkit.stores import JsonFileStore  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def full(self: JsonFileStore, checkpoint: WorkflowCheckpoint) -> None:
        msg = "No space left on device"
        raise OSError(msg)

    monkeypatch.setattr(JsonFileStore, "__call__", full)
    code = main(
        ["run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT, "--input=lang=fr"]
    )
    assert code == 1
    assert capsys.readouterr().err.splitlines()[-2:] == [
        (
            "executionkit: could not save the checkpoint to run.json: OSError: No space left on "
            "device"
        ),
        "executionkit: nothing was saved to run.json",
    ]


STOP = """\
from executionkit import Step, Workflow

def stop(ctx):
    raise KeyboardInterrupt

workflow = Workflow([
    Step("first", lambda ctx: "one"),
    Step("stop", stop, depends_on=("first",)),
])
"""


def test_an_interrupt_saves_what_completed_and_exits_130(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """A KeyboardInterrupt inside the run (here raised by a step) is exit 130 and one line."""
    write(tmp_path, "stop.py", STOP)
    outcome = cli("run", "stop:workflow", "--checkpoint", "run.json")
    assert (outcome.code, outcome.out) == (130, "")
    assert outcome.err.splitlines()[-1] == (
        "executionkit: interrupted; checkpoint saved to run.json (seq 1, 1 of 2 steps "
        "recorded); run again with the same --checkpoint to resume"
    )
    assert "Traceback" not in outcome.err
    assert dict(read_checkpoint(tmp_path / "run.json").outputs) == {"first": "one"}
    bare = cli("run", "stop:workflow")
    assert (bare.code, bare.err.splitlines()[-1]) == (
        130,
        (
            "executionkit: interrupted; nothing was saved; pass --checkpoint FILE to keep the "
            "steps that completed"
        ),
    )


def test_ctrl_c_outside_the_run_is_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli_module._COMMANDS, "inspect", interrupted)
    assert main(["inspect", "run.json"]) == 130
    assert capsys.readouterr().err == "executionkit: interrupted\n"


def test_an_unexpected_error_of_the_run_is_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_modules: None
) -> None:
    """Only bad input becomes one line; anything else (a bug) keeps its traceback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def broken(self: Workflow, *args: object, **kwargs: object) -> None:
        msg = "a bug"
        raise RuntimeError(msg)

    monkeypatch.setattr(Workflow, "run_sync", broken)
    for flags in ((), ("--checkpoint", "run.json")):
        with pytest.raises(RuntimeError, match=r"^a bug$"):
            main(["run", "cli_workflow:workflow", *flags])


# --- resuming with flags: --discard-unknown-steps and --rerun ------------------------------


def test_discard_unknown_steps_resumes_from_another_workflows_checkpoint(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """The flag maps to unknown_steps='discard': the recorded steps the workflow has are kept."""
    older = WorkflowCheckpoint(
        step_index=2,
        outputs={"words": ["a", "b"], "alpha": 1},
        cost=TokenUsage(10, 1, 1),
        run_id="older-run",
        seq=3,
        context_keys=("lang", "text"),
    )
    write(tmp_path, "run.json", json.dumps(older.to_dict()))
    args = ("run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT, "--input=lang=fr")
    done = cli(*args, "--discard-unknown-steps")
    assert done.code == 0, done.err
    assert done.err.splitlines()[0] == (
        "executionkit: dropping what run.json records for steps this workflow does not have: alpha"
    )
    # words was not run again: its recorded output (not "the cat sat") fed count.
    assert json.loads(done.out)["report"] == {"words": 2, "translation": "a b"}
    saved = read_checkpoint(tmp_path / "run.json")
    assert list(saved.outputs) == ["words", "count", "translate", "report"]
    assert (saved.run_id, saved.seq) == ("older-run", 6)  # one checkpoint per step
    assert saved.cost == TokenUsage(280, 35, 3)


def test_discard_unknown_steps_says_nothing_when_nothing_is_dropped(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    args = ("run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT, "--input=lang=fr")
    assert cli(*args, "--discard-unknown-steps").code == 0  # no checkpoint yet
    again = cli(*args, "--discard-unknown-steps")
    assert again.code == 0
    assert "dropping" not in again.err


def test_discard_unknown_steps_keeps_the_inputs_of_an_executionkit_04_checkpoint(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """0.4 kept the initial context among the outputs: those are inputs, nothing is dropped."""
    legacy = {
        "step_index": 1,
        "outputs": {"words": ["a", "b"], "text": "a b", "lang": "de"},
        "cost": {"input_tokens": 1, "output_tokens": 1, "llm_calls": 1},
    }
    write(tmp_path, "old.json", json.dumps(legacy))
    done = cli(
        "run", "cli_workflow:workflow", "--checkpoint", "old.json", "--discard-unknown-steps"
    )
    assert done.code == 0, done.err
    assert "dropping" not in done.err
    assert json.loads(done.out)["translate"] == "a b"


def test_an_empty_checkpoint_file_starts_a_fresh_run(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "run.json", "  \n")
    done = cli("run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT, "--input=lang=fr")
    assert done.code == 0, done.err
    assert done.err.startswith("executionkit: run ")
    assert " started: 4 steps\n" in done.err.splitlines(keepends=True)[0]
    assert read_checkpoint(tmp_path / "run.json").step_index == 4


def test_rerun_runs_recorded_steps_again_and_what_depends_on_them(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """--rerun is repeatable and maps to run(rerun=[...]); words stays as recorded."""
    args = ("run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT, "--input=lang=fr")
    first = cli(*args)
    assert first.code == 0
    again = cli(*args, "--rerun", "count", "--rerun", "translate")
    assert again.code == 0, again.err
    assert json.loads(again.out) == json.loads(first.out)
    for line in (
        "executionkit: count invalidated: rerun requested",
        "executionkit: translate invalidated: rerun requested",
    ):
        assert line in again.err.splitlines()
    assert "executionkit: words finished" not in again.err
    saved = read_checkpoint(tmp_path / "run.json")
    # count (120 in) and translate (150 in) were paid for twice, words never.
    assert saved.cost == TokenUsage(540, 68, 4)
    assert saved.seq == 7  # one checkpoint per step: three after the first run's four


DECODE = """\
from executionkit import Step, Workflow

def decode(value):
    raise ValueError("cannot read " + repr(value))

workflow = Workflow([
    Step("it's", lambda ctx: "one", encode=str, decode=decode),
    Step("next", lambda ctx: ctx["it's"] * 2, depends_on=("it's",)),
])
"""


@pytest.mark.parametrize(
    ("files", "args", "message"),
    [
        (
            {},
            ("run", "cli_workflow:workflow", "--rerun", "count", "--rerun", "nope"),
            "--rerun names steps this workflow does not have: 'nope'",
        ),
        (
            {},
            ("run", "cli_workflow:workflow", "--checkpoint", "new.json", "--rerun", "count"),
            (
                "--rerun needs a checkpoint to resume from: without --checkpoint FILE holding "
                "one, every step runs anyway"
            ),
        ),
        (
            {
                "decode.py": DECODE,
                "run.json": json.dumps(
                    WorkflowCheckpoint(1, {"it's": "one"}, TokenUsage(), seq=1).to_dict()
                ),
            },
            ("run", "decode:workflow", "--checkpoint", "run.json"),
            (
                'step "it\'s": decode failed on the recorded output (ValueError: cannot read '
                "'one'); fix decode, or pass --rerun 'it'\"'\"'s'"
            ),
        ),
    ],
)
def test_run_argument_errors_name_the_flags(
    cli: Callable[..., Outcome],
    tmp_path: Path,
    files: dict[str, str],
    args: tuple[str, ...],
    message: str,
) -> None:
    for name, content in files.items():
        write(tmp_path, name, content)
    outcome = cli(*args)
    assert (outcome.code, outcome.out, outcome.err) == (2, "", f"executionkit: error: {message}\n")


def test_the_rerun_the_decode_error_suggests_works(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "decode.py", DECODE)
    checkpoint = WorkflowCheckpoint(1, {"it's": "one"}, TokenUsage(), seq=1)
    write(tmp_path, "run.json", json.dumps(checkpoint.to_dict()))
    done = cli("run", "decode:workflow", "--checkpoint", "run.json", "--rerun", "it's")
    assert done.code == 0, done.err
    assert json.loads(done.out) == {"it's": "one", "next": "oneone"}


# --- SIGTERM: run_sync checkpoints, then raises SystemExit(143) -------------------------------

TERMINATED = """\
from executionkit import Step, Workflow

def terminated(ctx):
    raise SystemExit(143)

def exits(ctx):
    raise SystemExit(3)

first = Step("first", lambda ctx: "one")
workflow = Workflow([first, Step("stop", terminated, depends_on=("first",))])
other = Workflow([first, Step("stop", exits, depends_on=("first",))])
"""


def test_a_termination_saves_what_completed_and_exits_143(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """SystemExit(143) out of run_sync (what SIGTERM becomes) is exit 143 and one line.

    Here a step raises it, which run_sync lets through after checkpointing, as it
    will for SIGTERM itself.
    """
    write(tmp_path, "terminated.py", TERMINATED)
    outcome = cli("run", "terminated:workflow", "--checkpoint", "run.json")
    assert (outcome.code, outcome.out) == (143, "")
    assert outcome.err.splitlines()[-1] == (
        "executionkit: terminated; checkpoint saved to run.json (seq 1, 1 of 2 steps "
        "recorded); run again with the same --checkpoint to resume"
    )
    assert "Traceback" not in outcome.err
    assert dict(read_checkpoint(tmp_path / "run.json").outputs) == {"first": "one"}
    bare = cli("run", "terminated:workflow")
    assert (bare.code, bare.err.splitlines()[-1]) == (
        143,
        (
            "executionkit: terminated; nothing was saved; pass --checkpoint FILE to keep the "
            "steps that completed"
        ),
    )


def test_any_other_system_exit_passes_through(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_modules: None,
) -> None:
    write(tmp_path, "terminated.py", TERMINATED)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        main(["run", "terminated:other", "--checkpoint", "run.json"])
    assert caught.value.code == 3
    assert "terminated" not in capsys.readouterr().err


# --- what run prints is safe on a terminal ----------------------------------------------------

HOSTILE_NAMES = """\
from executionkit import Step, Workflow

def fails(ctx):
    raise ValueError("\\x1b]0;pwned\\x07 \\u202eevil \\x9b2J")

workflow = Workflow([
    Step("ok\\x1b[2J\\nname", lambda ctx: "\\x85\\u202e\\u2066\\x1b"),
    Step("bad\\rname", fails, depends_on=("ok\\x1b[2J\\nname",)),
])
"""


def test_run_progress_escapes_step_names_and_error_messages(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "hostile.py", HOSTILE_NAMES)
    outcome = cli("run", "hostile:workflow", "--checkpoint", "run.json")
    assert outcome.code == 1
    lines = outcome.err.splitlines()
    assert all(line.isprintable() for line in lines), lines
    assert len(lines) == 6  # nothing split a line in two
    assert lines[1].startswith('executionkit: "ok\\u001b[2J\\nname" finished in ')
    assert lines[2].startswith(
        'executionkit: "bad\\rname" failed after 0.0s: ValueError: \\x1b]0;pwned\\x07 '
        "\\u202eevil \\x9b2J; "
    )
    assert lines[-2] == (
        'executionkit: step "bad\\rname" failed: ValueError: \\x1b]0;pwned\\x07 \\u202eevil '
        "\\x9b2J"
    )


def test_run_progress_escapes_the_run_id_of_the_checkpoint(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    checkpoint = WorkflowCheckpoint(
        1, {"words": ["x"]}, TokenUsage(), run_id="\x1b[31mred\u202e", seq=1
    )
    write(tmp_path, "run.json", json.dumps(checkpoint.to_dict()))
    outcome = cli("run", "cli_workflow:workflow", "--checkpoint", "run.json", "--input=lang=fr")
    assert outcome.code == 0, outcome.err
    assert outcome.err.splitlines()[0] == (
        "executionkit: run \\x1b[31mred\\u202e resumed: 1/4 steps recorded"
    )


def _read_until(fd: int, ending: str) -> str:
    """What the terminal shows, read until ``ending`` and the end of its line came through."""
    data = b""
    while not re.search(rf"{re.escape(ending)}[^\n]*\n", data.decode("utf-8", "replace")):
        ready, _, _ = select.select([fd], [], [], 30)
        assert ready, f"the terminal showed only {data!r}"
        data += os.read(fd, 65536)
    return data.decode("utf-8")


def test_the_live_progress_line_on_a_terminal_escapes_names_too(tmp_path: Path) -> None:
    """On a terminal the reporter redraws one line with carriage returns; those stay."""
    from executionkit.progress import ConsoleProgress  # noqa: PLC0415

    write(tmp_path, "hostile_live.py", HOSTILE_NAMES)
    spec = importlib.util.spec_from_file_location("hostile_live", tmp_path / "hostile_live.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    controller, terminal = pty.openpty()
    try:
        with os.fdopen(terminal, "w", encoding="utf-8", closefd=False) as stream:
            assert stream.isatty()
            with pytest.raises(WorkflowFailed):
                module.workflow.run_sync(on_event=ConsoleProgress(stream))
        shown = _read_until(controller, "failed: WorkflowFailed")
    finally:
        os.close(controller)
        os.close(terminal)
    assert "\x1b" not in shown
    assert "\u202e" not in shown
    assert "\r" in shown  # the live line was redrawn in place
    assert '"ok\\u001b[2J\\nname"' in shown
    assert "ValueError: \\x1b]0;pwned\\x07 \\u202eevil \\x9b2J" in shown


def test_run_prints_outputs_as_json_with_controls_escaped(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "hostile.py", HOSTILE_NAMES.replace("fails, depends", "str, depends"))
    outcome = cli("run", "hostile:workflow")
    assert outcome.code == 0, outcome.err
    assert all(line.isprintable() for line in outcome.out.splitlines())
    assert '  "ok\\u001b[2J\\nname": "\\u0085\\u202e\\u2066\\u001b",' in outcome.out
    assert json.loads(outcome.out)["ok\x1b[2J\nname"] == "\x85\u202e\u2066\x1b"


def test_inspect_json_escapes_c1_and_bidi_controls_and_stays_json(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    controls = "\x1b\x7f\x85\x9b\u061c\u200e\u200f\u202a\u202e\u2066\u2069"
    checkpoint = WorkflowCheckpoint(
        1,
        {f"name{controls}": "x"},
        TokenUsage(),
        run_id=f"id{controls}",
        seq=1,
        metadata={"note": controls, f"key{controls}": [controls]},
        errors={f"failed{controls}": f"ValueError: {controls}"},
    )
    write(tmp_path, "run.json", json.dumps(checkpoint.to_dict()))
    outcome = cli("inspect", "run.json", "--json")
    assert (outcome.code, outcome.err) == (0, "")
    assert outcome.out.isascii()  # every one of them is escaped as \uXXXX
    escaped = "\\u001b\\u007f\\u0085\\u009b\\u061c\\u200e\\u200f\\u202a\\u202e\\u2066\\u2069"
    assert f'"run_id": "id{escaped}",' in outcome.out
    summary = json.loads(outcome.out)
    assert summary["run_id"] == f"id{controls}"
    assert summary["metadata"] == {"note": controls, f"key{controls}": [controls]}
    assert summary["failed"] == {f"failed{controls}": f"ValueError: {controls}"}
    assert list(summary["outputs"]) == [f"name{controls}"]


def test_names_are_shown_unambiguously(cli: Callable[..., Outcome], tmp_path: Path) -> None:
    """A name that looks like a quoted name is quoted itself, so no two names look alike."""
    checkpoint = WorkflowCheckpoint(3, {"a\nb": 1, '"a\\nb"': 2, "plain": 3}, TokenUsage(), seq=1)
    write(tmp_path, "run.json", json.dumps(checkpoint.to_dict()))
    outcome = cli("inspect", "run.json")
    assert outcome.out.splitlines()[-3:] == [
        '  "a\\nb"       1',
        '  "\\"a\\\\nb\\""  2',
        "  plain        3",
    ]


def test_demo_through_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the demo's file is kept
    assert main(["demo", "--no-delay"]) == 0
    assert "-> exact" in capsys.readouterr().out
    assert len(list(tmp_path.glob("executionkit-demo-*/checkpoint.json"))) == 1


HANG = """\
import asyncio
import sys

from executionkit import Step, Workflow

async def quick(ctx):
    return "two"

async def hang(ctx):
    sys.stderr.write("HANGING\\n")
    sys.stderr.flush()
    await asyncio.Event().wait()

workflow = Workflow([
    Step("first", lambda ctx: "one"),
    Step("quick", quick, depends_on=("first",)),
    Step("hang", hang, depends_on=("first",)),
    Step("last", lambda ctx: "never", depends_on=("quick", "hang")),
])
"""


def test_ctrl_c_saves_what_completed_and_exits_130(tmp_path: Path) -> None:
    """SIGINT while a step waits: the finished steps are checkpointed, exit 130, one line."""
    write(tmp_path, "hang.py", HANG)
    process = subprocess.Popen(
        [sys.executable, "-m", "executionkit", "run", "hang:workflow", "--checkpoint", "run.json"],
        cwd=tmp_path,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    watchdog = threading.Timer(30, process.kill)  # never let a broken run hang the suite
    watchdog.start()
    try:
        assert process.stderr is not None
        before: list[str] = []
        while (line := process.stderr.readline()) not in ("", "HANGING\n"):
            before.append(line)
        assert line == "HANGING\n", "".join(before)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        watchdog.cancel()
    assert process.returncode == 130, err
    assert out == ""
    assert err.splitlines()[-1] == (
        "executionkit: interrupted; checkpoint saved to run.json (seq 2, 2 of 4 steps "
        "recorded); run again with the same --checkpoint to resume"
    )
    assert "Traceback" not in err
    saved = read_checkpoint(tmp_path / "run.json")
    assert dict(saved.outputs) == {"first": "one", "quick": "two"}
    assert saved.seq == 2


# --- bad input ------------------------------------------------------------------------------

SHAPES = """\
number = 42
things = {object}

def make_nothing():
    return None

def make_fails():
    raise RuntimeError("no config\\nsecond line")
"""

BAD_INPUT: list[tuple[tuple[str, ...], dict[str, str | bytes], str]] = [
    (
        ("run", "nomod:workflow"),
        {},
        "no module named 'nomod' (looked in the current directory and on PYTHONPATH)",
    ),
    (
        ("run", "nopkg.sub:workflow"),
        {},
        "no module named 'nopkg.sub' (looked in the current directory and on PYTHONPATH)",
    ),
    (("run", "cli_workflow:nope"), {}, "module 'cli_workflow' has no attribute 'nope'"),
    (
        ("run", "cli_workflow"),
        {},
        "'cli_workflow' is not MODULE:ATTR (for example my_pipeline:workflow)",
    ),
    (
        ("run", ":workflow"),
        {},
        "':workflow' is not MODULE:ATTR (for example my_pipeline:workflow)",
    ),
    (("run", "a:b:c"), {}, "'a:b:c' is not MODULE:ATTR (for example my_pipeline:workflow)"),
    (
        ("graph", "shapes:number"),
        {"shapes.py": SHAPES},
        "shapes:number is int 42, not a Workflow or a function returning one",
    ),
    (
        ("graph", "shapes:things"),
        {"shapes.py": SHAPES},
        "shapes:things is set {<class 'object'>}, not a Workflow or a function returning one",
    ),
    (
        ("run", "shapes:make_nothing"),
        {"shapes.py": SHAPES},
        "shapes:make_nothing() returned NoneType, not a Workflow",
    ),
    (
        ("run", "shapes:make_fails"),
        {"shapes.py": SHAPES},
        "calling shapes:make_fails() failed: RuntimeError: no config",
    ),
    (
        ("graph", "broken:workflow"),
        {"broken.py": "raise ValueError('bad module')\n"},
        "importing 'broken' failed: ValueError: bad module",
    ),
    (
        ("run", "needs:workflow"),
        {"needs.py": "import not_installed_anywhere_xyz\n"},
        (
            "importing 'needs' failed: ModuleNotFoundError: No module named "
            "'not_installed_anywhere_xyz'"
        ),
    ),
    (
        ("run", "syntax:workflow"),
        {"syntax.py": "def (:\n"},
        "importing 'syntax' failed: SyntaxError: invalid syntax (syntax.py, line 1)",
    ),
    (("run", "cli_workflow:workflow", "--input", "lang"), {}, "--input 'lang' is not KEY=VALUE"),
    (("run", "cli_workflow:workflow", "--input", "=fr"), {}, "--input '=fr' is not KEY=VALUE"),
    (
        ("run", "cli_workflow:workflow", "--input", "a=1", "--input", "a=2"),
        {},
        "--input 'a' is given twice",
    ),
    (
        ("run", "cli_workflow:workflow", "--input", "words=x"),
        {},
        (
            "inputs collide with step names: 'words'; a step's output and an input cannot "
            "share a ctx key, so rename them"
        ),
    ),
    (
        ("run", "cli_workflow:workflow", "--inputs-json", "missing.json"),
        {},
        "--inputs-json missing.json: no such file",
    ),
    (
        ("run", "cli_workflow:workflow", "--inputs-json", "in.json"),
        {"in.json": "lang=fr\n"},
        "--inputs-json in.json: not JSON (Expecting value: line 1 column 1 (char 0))",
    ),
    (
        ("run", "cli_workflow:workflow", "--inputs-json", "in.json"),
        {"in.json": b'{"lang": "\xff"}'},
        "--inputs-json in.json: cannot read: not UTF-8 text",
    ),
    (
        ("run", "cli_workflow:workflow", "--inputs-json", "in.json"),
        {"in.json": '["lang", "fr"]'},
        "--inputs-json in.json: must hold a JSON object of input names to values, got list",
    ),
    (
        ("run", "cli_workflow:workflow", "--checkpoint", str(Path("nodir", "run.json"))),
        {},
        f"--checkpoint {Path('nodir', 'run.json')}: folder nodir does not exist",
    ),
    (
        ("run", "cli_workflow:workflow", "--checkpoint", "run.json"),
        {"run.json": "not json"},
        "run.json: not a checkpoint file: invalid JSON at line 1 column 1 (Expecting value)",
    ),
    (("inspect", "missing.json"), {}, "missing.json: no such file"),
    (
        ("inspect", "latin1.json"),
        {"latin1.json": b'{"caf\xe9": 1}'},
        "latin1.json: not a checkpoint file: not UTF-8 text (invalid continuation byte at byte 5)",
    ),
    (
        ("inspect", "empty.json"),
        {"empty.json": ""},
        "empty.json: holds no checkpoint (the file is empty)",
    ),
    (
        ("inspect", "list.json"),
        {"list.json": "[1, 2]"},
        "list.json: checkpoint data must be a dict, got list [1, 2]",
    ),
    (
        ("inspect", "cp.json"),
        {"cp.json": '{"version": 2, "outputs": {}}'},
        "cp.json: checkpoint field 'context_keys' is missing",
    ),
    (
        ("inspect", "cp.json", "--workflow", "nomod:workflow"),
        {"cp.json": json.dumps(WorkflowCheckpoint(0, {}, TokenUsage()).to_dict())},
        "no module named 'nomod' (looked in the current directory and on PYTHONPATH)",
    ),
    (
        ("graph", "cli_workflow:workflow", "--checkpoint", "missing.json"),
        {},
        "missing.json: no such file",
    ),
]


@pytest.mark.parametrize(
    ("args", "files", "message"), BAD_INPUT, ids=[" ".join(case[0]) for case in BAD_INPUT]
)
def test_bad_input_is_one_error_line_and_exit_2(
    cli: Callable[..., Outcome],
    tmp_path: Path,
    args: tuple[str, ...],
    files: dict[str, str | bytes],
    message: str,
) -> None:
    for name, content in files.items():
        if isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            write(tmp_path, name, content)
    outcome = cli(*args)
    assert (outcome.code, outcome.out, outcome.err) == (2, "", f"executionkit: error: {message}\n")


def test_a_folder_given_as_a_checkpoint_file_is_bad_input(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    (tmp_path / "folder").mkdir()
    outcome = cli("inspect", "folder")
    assert (outcome.code, outcome.out) == (2, "")
    assert re.fullmatch(r"executionkit: error: folder: cannot read: .+\n", outcome.err)


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("run",),
        ("inspect",),
        ("graph", "cli_workflow:workflow", "--format", "svg"),
        ("run", "cli_workflow:workflow", "--checkpoint"),
        ("explode",),
    ],
)
def test_usage_errors_exit_2_with_argparse_usage(
    cli: Callable[..., Outcome], args: tuple[str, ...]
) -> None:
    outcome = cli(*args)
    assert (outcome.code, outcome.out) == (2, "")
    assert outcome.err.startswith("usage: executionkit")
    assert "Traceback" not in outcome.err


def test_help_lists_the_commands_and_exit_codes(cli: Callable[..., Outcome]) -> None:
    outcome = cli("--help")
    assert outcome.code == 0
    for word in ("demo", "run", "inspect", "graph", "130  interrupted", "143  terminated"):
        assert word in outcome.out


# --- inspect --------------------------------------------------------------------------------

FIXED = WorkflowCheckpoint(
    step_index=2,
    outputs={"words": ["the", "cat", "sat"], "count": 3},
    cost=TokenUsage(120, 4, 1),
    run_id="run-1",
    seq=2,
    context_keys=("lang", "text"),
    errors={"translate": NO_LANG},
    created_at="2025-01-02T03:04:05+00:00",
    metadata={"workflow": "cli_workflow:workflow"},
    progress={"translate": {"done": 1}},
)

INSPECT_TEXT = """\
file        run.json
format      version 5
run_id      run-1
seq         2
created_at  2025-01-02T03:04:05+00:00
claimed_by  nobody
metadata    {"workflow": "cli_workflow:workflow"}
context     lang, text (key names only, never values)
tokens      120 in + 4 out = 124 tokens, 1 LLM call
steps       2 recorded (--workflow MODULE:ATTR shows the total)
failed      translate: ValueError: no dictionary for language 'xx' (known: de, es, fr)
progress    translate: {"done": 1}
outputs
  words  ["the", "cat", "sat"]
  count  3
"""


def test_inspect_shows_the_checkpoint(cli: Callable[..., Outcome], tmp_path: Path) -> None:
    write(tmp_path, "run.json", json.dumps(FIXED.to_dict()))
    outcome = cli("inspect", "run.json")
    assert (outcome.code, outcome.err) == (0, "")
    assert outcome.out == INSPECT_TEXT


def test_inspect_with_the_workflow_shows_total_and_pending(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    write(tmp_path, "run.json", json.dumps(FIXED.to_dict()))
    outcome = cli("inspect", "run.json", "--workflow", "cli_workflow:workflow")
    assert (outcome.code, outcome.err) == (0, "")
    expected = INSPECT_TEXT.replace(
        "steps       2 recorded (--workflow MODULE:ATTR shows the total)\n",
        "steps       2 of 4 recorded\npending     translate, report\n",
    )
    assert outcome.out == expected


def test_inspect_json(cli: Callable[..., Outcome], tmp_path: Path) -> None:
    write(tmp_path, "run.json", json.dumps(FIXED.to_dict()))
    outcome = cli("inspect", "run.json", "--json", "--workflow", "cli_workflow:workflow")
    assert (outcome.code, outcome.err) == (0, "")
    assert json.loads(outcome.out) == {
        "file": "run.json",
        "version": 5,
        "run_id": "run-1",
        "seq": 2,
        "created_at": "2025-01-02T03:04:05+00:00",
        "metadata": {"workflow": "cli_workflow:workflow"},
        "context_keys": ["lang", "text"],
        "cost": {"input_tokens": 120, "output_tokens": 4, "llm_calls": 1},
        "recorded": ["words", "count"],
        "done": 2,
        "total": 4,
        "pending": ["translate", "report"],
        "unknown": [],
        "failed": {"translate": NO_LANG},
        "failed_items": {},
        "skipped": {},
        "progress": {"translate": '{"done": 1}'},
        "items": {},
        "waiting": {},
        "timers": {},
        "code_changed": {},
        "outputs": {"words": '["the", "cat", "sat"]', "count": "3"},
        "spending": {
            "spent": {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0},
            "wasted": {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0},
            "unknown": 0,
            "steps": {},
        },
        "in_flight": [],
        "in_flight_items": {},
        "lineage": {},
        "step_times": {},
        "claimed_by": None,
    }
    without = json.loads(cli("inspect", "run.json", "--json").out)
    assert (without["total"], without["pending"], without["unknown"]) == (None, None, None)


def test_inspect_an_executionkit_04_checkpoint(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    legacy = {
        "step_index": 1,
        "outputs": {"a": "x" * 100},
        "cost": {"input_tokens": 1, "output_tokens": 2, "llm_calls": 1},
    }
    write(tmp_path, "old.json", json.dumps(legacy))
    outcome = cli("inspect", "old.json")
    assert outcome.code == 0
    lines = outcome.out.splitlines()
    assert lines[1:5] == [
        "format      version 0 (ExecutionKit 0.4)",
        "run_id      -",
        "seq         0",
        "created_at  -",
    ]
    assert lines[-1] == f'  a  "{"x" * 56}...'
    assert len(lines[-1]) == 2 + 1 + 2 + 60


EVIL = """\
from pathlib import Path

from executionkit import Step, Workflow

Path("imported.marker").write_text("the module ran")
workflow = Workflow([Step("words", lambda ctx: [])])
"""


def test_inspect_never_imports_or_evaluates_anything(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """Outputs that look like code are printed; the module named in metadata is not imported."""
    payload = "__import__('os').system('touch pwned')"
    checkpoint = WorkflowCheckpoint(
        step_index=2,
        outputs={"words": payload, "payload\n\x1b[2J": "\x1b[31mred\u202e"},
        cost=TokenUsage(),
        metadata={"workflow": "evil:workflow"},
    )
    write(tmp_path, "evil.py", EVIL)
    write(tmp_path, "run.json", json.dumps(checkpoint.to_dict()))
    for flags in ((), ("--json",)):
        outcome = cli("inspect", "run.json", *flags)
        assert (outcome.code, outcome.err) == (0, "")
        assert "evil:workflow" in outcome.out
        assert not (tmp_path / "imported.marker").exists()
        assert not (tmp_path / "pwned").exists()
    text = cli("inspect", "run.json").out
    # Names are aligned to the longest shown name, '"payload\n\u001b[2J"' (20 characters).
    assert "  words" + " " * 17 + f'"{payload}"' in text.splitlines()
    # Control characters are shown escaped: the output cannot drive the terminal.
    assert all(line.isprintable() for line in text.splitlines())
    assert '  "payload\\n\\u001b[2J"  "\\u001b[31mred\\u202e"' in text.splitlines()
    # The control: with --workflow the module is imported, as documented.
    shown = cli("inspect", "run.json", "--workflow", "evil:workflow")
    assert shown.code == 0
    assert (tmp_path / "imported.marker").exists()
    assert (
        'unknown     "payload\\n\\u001b[2J" (recorded, but not a step of the workflow)'
        in shown.out.splitlines()
    )


# --- graph ----------------------------------------------------------------------------------

MERMAID = """\
flowchart TD
    s0["words"]
    s1["count"]
    s2["translate"]
    s3["report"]
    s0 --> s1
    s0 --> s2
    s1 --> s3
    s2 --> s3
"""
MERMAID_STYLES = """\
    classDef done fill:#d3f9d8,stroke:#2b8a3e,color:#1b4332
    classDef failed fill:#ffe3e3,stroke:#c92a2a,color:#5c0011
    classDef pending fill:#f1f3f5,stroke:#868e96,color:#343a40
    class s0,s1 done
    class s2 failed
    class s3 pending
"""
DOT = """\
digraph workflow {
    rankdir=TB;
    node [shape=box, style="rounded"];
    n0 [label="words"];
    n1 [label="count"];
    n2 [label="translate"];
    n3 [label="report"];
    n0 -> n1;
    n0 -> n2;
    n1 -> n3;
    n2 -> n3;
}
"""
DOT_MARKED = """\
digraph workflow {
    rankdir=TB;
    node [shape=box, style="rounded,filled"];
    n0 [label="words", fillcolor="#d3f9d8"];
    n1 [label="count", fillcolor="#d3f9d8"];
    n2 [label="translate", fillcolor="#ffe3e3"];
    n3 [label="report", fillcolor="#f1f3f5"];
    n0 -> n1;
    n0 -> n2;
    n1 -> n3;
    n2 -> n3;
}
"""


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), MERMAID),
        (("--format", "mermaid", "--checkpoint", "run.json"), MERMAID + MERMAID_STYLES),
        (("--format", "dot"), DOT),
        (("--checkpoint", "run.json", "--format", "dot"), DOT_MARKED),
    ],
)
def test_graph_output_is_exact(
    cli: Callable[..., Outcome], tmp_path: Path, flags: tuple[str, ...], expected: str
) -> None:
    write(tmp_path, "run.json", json.dumps(FIXED.to_dict()))
    outcome = cli("graph", "cli_workflow:workflow", *flags)
    assert (outcome.code, outcome.err) == (0, "")
    assert outcome.out == expected


ODD_NAMES = """\
from executionkit import Step, Workflow

workflow = Workflow([
    Step('say "hi"', lambda ctx: 1),
    Step("a#b<c>\\\\d", lambda ctx: 2, depends_on=('say "hi"',)),
    Step("alone", lambda ctx: 3),
])
"""


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        (
            "mermaid",
            (
                'flowchart TD\n    s0["say #quot;hi#quot;"]\n    s1["a#35;b#lt;c#gt;\\d"]\n'
                '    s2["alone"]\n    s0 --> s1\n'
            ),
        ),
        (
            "dot",
            (
                'digraph workflow {\n    rankdir=TB;\n    node [shape=box, style="rounded"];\n'
                '    n0 [label="say \\"hi\\""];\n    n1 [label="a#b<c>\\\\d"];\n'
                '    n2 [label="alone"];\n    n0 -> n1;\n}\n'
            ),
        ),
    ],
)
def test_graph_quotes_names_that_would_break_the_syntax(
    cli: Callable[..., Outcome], tmp_path: Path, fmt: str, expected: str
) -> None:
    write(tmp_path, "odd.py", ODD_NAMES)
    outcome = cli("graph", "odd:workflow", "--format", fmt)
    assert (outcome.code, outcome.out) == (0, expected)


def test_graph_warns_about_recorded_steps_the_workflow_lacks(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    checkpoint = WorkflowCheckpoint(2, {"words": [], "gone": 1}, TokenUsage())
    write(tmp_path, "run.json", json.dumps(checkpoint.to_dict()))
    outcome = cli("graph", "cli_workflow:workflow", "--checkpoint", "run.json")
    assert outcome.code == 0
    assert outcome.err == (
        "executionkit: warning: run.json records steps cli_workflow:workflow does not have: gone\n"
    )
    assert "    class s0 done\n    class s1,s2,s3 pending\n" in outcome.out


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """``executionkit inspect FILE --json | head -1``: no traceback when the pipe closes."""
    write(tmp_path, "run.json", json.dumps(FIXED.to_dict()))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "executionkit", "inspect", "run.json", "--json"],
            cwd=tmp_path,
            env=subprocess_env(),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_broken_pipe_sends_the_rest_of_stdout_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process view of the same: stdout is pointed at the null device, exit 141."""

    def reader_gone(args: object) -> int:
        raise BrokenPipeError

    monkeypatch.setitem(cli_module._COMMANDS, "inspect", reader_gone)
    with (tmp_path / "stdout").open("w", encoding="utf-8") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        assert main(["inspect", "run.json"]) == 141
        stdout.write("written after the pipe broke\n")
    assert (tmp_path / "stdout").read_text(encoding="utf-8") == ""


# --- how it is installed --------------------------------------------------------------------


def test_the_console_script_imports_from_the_current_directory(tmp_path: Path) -> None:
    """The ``executionkit`` script finds modules in the working directory, as ``-m`` does.

    A console script's ``sys.path[0]`` is its own folder, not the working
    directory; the wrapper here is what pip generates for the entry point.
    """
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, _, function = scripts["project"]["scripts"]["executionkit"].partition(":")
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    wrapper = write(
        bin_folder,
        "executionkit",
        f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n",
    )
    work = tmp_path / "work"
    work.mkdir()
    write(work, "here.py", TYPED)
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, str(wrapper), "graph", "here:workflow"],
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, 'flowchart TD\n    s0["show"]\n', "")


# --- the how-to page shows what the commands print ------------------------------------------


def _fenced(markdown: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", markdown, flags=re.MULTILINE | re.DOTALL)


def test_the_how_to_shows_the_example_module_verbatim() -> None:
    assert (EXAMPLES / "cli_workflow.py").read_text(encoding="utf-8") in _fenced(
        DOC.read_text(encoding="utf-8"), "python"
    )


def test_the_how_to_graph_is_what_graph_prints_after_the_failed_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_modules: None,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    run = ["run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT, "--input=lang=xx"]
    assert main(run) == 1
    capsys.readouterr()
    assert main(["graph", "cli_workflow:workflow", "--checkpoint", "run.json"]) == 0
    printed = capsys.readouterr().out
    assert _fenced(DOC.read_text(encoding="utf-8"), "mermaid") == [printed]


def _text_block(starting: str) -> str:
    blocks = _fenced(DOC.read_text(encoding="utf-8"), "text")
    (block,) = [block for block in blocks if block.startswith(starting)]
    return block


def test_the_how_to_shows_what_the_runs_print(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_modules: None,
) -> None:
    """The failed run's progress (the full run_id included) and the resumed run's outputs.

    Only what cannot repeat is replaced: the run's random id by the page's, and
    durations by 0.0s.
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    run = ["run", "cli_workflow:workflow", "--checkpoint", "run.json", "--input=text=The cat sat"]
    assert main([*run, "--input=lang=xx"]) == 1
    err = capsys.readouterr().err
    run_id = read_checkpoint(tmp_path / "run.json").run_id
    assert run_id is not None
    shown = _text_block("executionkit: run ")
    (documented_id,) = set(re.findall(r"run ([0-9a-f]{32}) ", shown))
    assert re.sub(r"\b\d+\.\ds\b", "0.0s", err.replace(run_id, documented_id)) == shown
    assert main([*run, "--input=lang=fr"]) == 0
    assert capsys.readouterr().out == _text_block('{\n  "words"')


def test_the_how_to_error_examples_are_what_the_commands_print(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    clean_modules: None,
) -> None:
    """Each ``$ executionkit ...`` line, run after the page's failed run, prints what follows."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    write(tmp_path, "notes.txt", "not a checkpoint\n")
    run = ["run", "cli_workflow:workflow", "--checkpoint", "run.json", TEXT, "--input=lang=xx"]
    assert main(run) == 1
    capsys.readouterr()
    lines = _text_block("$ executionkit ").splitlines()
    commands = [number for number, line in enumerate(lines) if line.startswith("$ ")]
    assert len(commands) == 4
    for start, end in zip(commands, [*commands[1:], len(lines)], strict=True):
        executable, *args = shlex.split(lines[start].removeprefix("$ "))
        assert executable == "executionkit"
        assert main(args) == 2
        assert capsys.readouterr().err.splitlines() == lines[start + 1 : end], lines[start]


@pytest.mark.parametrize(
    ("sig", "status", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGKILL, -signal.SIGKILL, None)],
)
def test_sigterm_saves_what_completed_and_exits_143_and_kill_loses_no_finished_step(
    tmp_path: Path, sig: signal.Signals, status: int, word: str | None
) -> None:
    """A real SIGTERM checkpoints and exits 143; even SIGKILL finds 'quick' saved as it landed."""
    # 'hang' says it hangs only once the checkpoint holding its batch sibling's output
    # ("two") is on disk: the run saves each step as it completes, not when its batch does.
    # (Its name is in the file earlier: the checkpoint before the batch lists it in flight.)
    saved_first = HANG.replace(
        '    sys.stderr.write("HANGING\\n")',
        "    from pathlib import Path\n"
        "    saved = Path('run.json')\n"
        "    for _ in range(100_000):\n"
        "        if '\"two\"' in (saved.read_text() if saved.exists() else ''):\n"
        "            break\n"
        "        await asyncio.sleep(0)\n"
        '    sys.stderr.write("HANGING\\n")',
    )
    assert saved_first != HANG
    write(tmp_path, "hang.py", saved_first)
    process = subprocess.Popen(
        [sys.executable, "-m", "executionkit", "run", "hang:workflow", "--checkpoint", "run.json"],
        cwd=tmp_path,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    watchdog = threading.Timer(30, process.kill)  # never let a broken run hang the suite
    watchdog.start()
    try:
        assert process.stderr is not None
        before: list[str] = []
        while (line := process.stderr.readline()) not in ("", "HANGING\n"):
            before.append(line)
        assert line == "HANGING\n", "".join(before)
        process.send_signal(sig)
        out, err = process.communicate(timeout=30)
    finally:
        watchdog.cancel()
    assert process.returncode == status, err
    assert out == ""
    assert "Traceback" not in err
    if word is not None:
        assert err.splitlines()[-1] == (
            f"executionkit: {word}; checkpoint saved to run.json (seq 2, 2 of 4 steps "
            "recorded); run again with the same --checkpoint to resume"
        )
    saved = read_checkpoint(tmp_path / "run.json")
    assert dict(saved.outputs) == {"first": "one", "quick": "two"}


# --- checkpoints in a database -------------------------------------------------------------

LOCATED = "cli_workflow:workflow"


def test_run_saves_into_a_named_run_and_resumes_from_it(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """A failed run is saved in the database under its run_id; the rerun resumes it."""
    where = "sqlite:///runs.db?run_id=night-1"
    failed = cli("run", LOCATED, "--checkpoint", where, TEXT, "--input", "lang=xx")
    assert failed.code == 1
    assert failed.err.splitlines()[-2:] == [
        f"executionkit: step translate failed: {NO_LANG}",
        (
            "executionkit: checkpoint saved to sqlite:///runs.db (seq 3, 2 of 4 steps "
            "recorded); run again with the same --checkpoint to resume"
        ),
    ]
    saved = SQLiteStore(tmp_path / "runs.db").load("night-1")
    assert saved is not None
    assert saved.run_id == "night-1"
    assert dict(saved.outputs) == {"words": ["the", "cat", "sat"], "count": 3}

    done = cli("run", LOCATED, "--checkpoint", where, TEXT, "--input", "lang=fr")
    assert done.code == 0, done.err
    assert json.loads(done.out)["translate"] == "le chat s'assit"
    final = SQLiteStore(tmp_path / "runs.db").load("night-1")
    assert final is not None
    # count ran once and translate once: nothing recorded was paid for twice.
    assert final.cost == TokenUsage(270, 34, 2)


def test_inspect_lists_the_runs_of_a_database_then_shows_one(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """Without a run_id, inspect lists the runs; with one, it shows that run's checkpoint."""
    for run_id, lang in (("a", "xx"), ("b", "fr")):
        cli(
            "run",
            LOCATED,
            "--checkpoint",
            f"sqlite:///runs.db?run_id={run_id}",
            TEXT,
            "--input",
            f"lang={lang}",
        )
    listed = cli("inspect", "sqlite:///runs.db", "--json")
    assert listed.code == 0, listed.err
    data = json.loads(listed.out)
    assert data["database"] == "sqlite:///runs.db"
    assert [
        (run["run_id"], run["seq"], run["recorded"], run["failed"]) for run in data["runs"]
    ] == [
        ("b", 4, 4, 0),
        ("a", 3, 2, 1),
    ]
    text = cli("inspect", "sqlite:///runs.db")
    assert text.code == 0
    lines = text.out.splitlines()
    assert lines[:2] == ["database: sqlite:///runs.db", "runs: 2"]
    assert lines[2].startswith("  b: seq 4, 4 recorded, 0 failed, saved ")
    assert lines[3].startswith("  a: seq 3, 2 recorded, 1 failed, saved ")
    # The latest run, so that the command works as printed (test_cli_new_user.py runs it).
    assert lines[4].startswith("inspect one with: ")
    assert lines[4].endswith(" inspect 'sqlite:///runs.db?run_id=b'")
    one = cli("inspect", "sqlite:///runs.db?run_id=a", "--json")
    assert one.code == 0, one.err
    assert json.loads(one.out)["run_id"] == "a"
    graph = cli("graph", LOCATED, "--checkpoint", "sqlite:///runs.db?run_id=a")
    assert graph.code == 0, graph.err
    assert "failed" in graph.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("run", LOCATED, "--checkpoint", "sqlite:///runs.db", TEXT, "--input", "lang=fr"),
            (
                "--checkpoint sqlite:///runs.db: name the run in the database, as in "
                "'sqlite:///runs.db?run_id=NAME'"
            ),
        ),
        (
            ("inspect", "sqlite:///runs.db?run_id=nope"),
            "sqlite:///runs.db: holds no checkpoint of run 'nope'",
        ),
        (
            ("inspect", "sqlite:///missing/runs.db"),
            "sqlite:///missing/runs.db: folder missing does not exist",
        ),
        (
            ("inspect", "sqlite://host/runs.db"),
            (
                "sqlite://host/runs.db: not an SQLite location; write "
                "sqlite:///relative/path.db or sqlite:////absolute/path.db, then ?run_id=NAME "
                "to name a run"
            ),
        ),
        (("inspect", "sqlite:///runs.db?run_id="), "sqlite:///runs.db?run_id=: run_id is empty"),
        (
            ("inspect", "sqlite:///runs.db?run_id=a&run_id=b"),
            "sqlite:///runs.db?run_id=a&run_id=b: run_id is given 2 times",
        ),
    ],
)
def test_bad_locations_are_one_line_and_exit_2(
    cli: Callable[..., Outcome], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """Each problem names the location as given and what to write instead."""
    outcome = cli(*args)
    assert outcome.code == 2, outcome.err
    assert outcome.err == f"executionkit: error: {message}\n"


def test_a_file_that_is_not_a_database_is_one_line(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """A file that is not SQLite gives the store's own message, never a traceback."""
    (tmp_path / "notes.db").write_text("meeting notes\n" * 20, encoding="utf-8")
    outcome = cli("inspect", "sqlite:///notes.db")
    assert outcome.code == 2
    assert outcome.err.startswith("executionkit: error: sqlite:///notes.db: ")
    assert "Traceback" not in outcome.err
    assert len(outcome.err.splitlines()) == 1


def test_locations_are_parsed_by_their_scheme() -> None:
    """Paths stay files; sqlite URLs are relative with three slashes, absolute with four."""
    assert parse_location("run.json") == FileLocation(Path("run.json"), "run.json")
    assert parse_location("c:/runs/run.json") == FileLocation(
        Path("c:/runs/run.json"), "c:/runs/run.json"
    )
    assert parse_location("sqlite:///runs.db?run_id=x") == DatabaseLocation(
        "sqlite:///runs.db", "sqlite", "runs.db", "x"
    )
    assert parse_location("sqlite:////var/runs.db") == DatabaseLocation(
        "sqlite:////var/runs.db", "sqlite", "/var/runs.db", None
    )


def test_a_postgresql_password_is_never_shown() -> None:
    """The label hides the password; the connection string keeps it, without run_id."""
    location = parse_location("postgresql://me:s3cret@db.local:5433/runs?sslmode=off&run_id=7")
    assert location == DatabaseLocation(
        "postgresql://me:***@db.local:5433/runs?sslmode=off",
        "postgresql",
        "postgresql://me:s3cret@db.local:5433/runs?sslmode=off",
        "7",
    )
    with pytest.raises(CliError, match=r"^postgresql://me:\*\*\*@db:x/runs: not a database URL"):
        parse_location("postgresql://me:s3cret@db:x/runs")


# --- conditions -----------------------------------------------------------------------------

BRANCHES = """\
from executionkit import Step, Workflow


def is_long(ctx):
    return ctx["classify"] == "long"


workflow = Workflow([
    Step("classify", lambda ctx: "short"),
    Step("summarize", lambda ctx: "gist", depends_on=("classify",), when=is_long),
    Step("polish", lambda ctx: "done", depends_on=("summarize",)),
    Step("report", lambda ctx: "ok", depends_on=("classify", "polish"), join="any"),
])
"""
BRANCHES_MERMAID = """\
flowchart TD
    s0["classify"]
    s1["summarize (when: is_long)"]
    s2["polish"]
    s3["report (join: any)"]
    s0 --> s1
    s1 --> s2
    s0 --> s3
    s2 --> s3
    classDef done fill:#d3f9d8,stroke:#2b8a3e,color:#1b4332
    classDef failed fill:#ffe3e3,stroke:#c92a2a,color:#5c0011
    classDef pending fill:#f1f3f5,stroke:#868e96,color:#343a40
    classDef skipped fill:#fff9db,stroke:#e67700,stroke-dasharray:5 5,color:#5c3c00
    class s0,s3 done
    class s1,s2 skipped
"""
BRANCHES_DOT_NODES = """\
    n0 [label="classify", fillcolor="#d3f9d8"];
    n1 [label="summarize (when: is_long)", fillcolor="#fff9db", style="rounded,filled,dashed"];
    n2 [label="polish", fillcolor="#fff9db", style="rounded,filled,dashed"];
    n3 [label="report (join: any)", fillcolor="#d3f9d8"];
"""
SKIPPED = {
    "summarize": "condition is_long returned False",
    "polish": "dependency 'summarize' was skipped",
}


def test_inspect_and_graph_show_skipped_steps(cli: Callable[..., Outcome], tmp_path: Path) -> None:
    write(tmp_path, "branches.py", BRANCHES)
    ran = cli("run", "branches:workflow", "--checkpoint", "run.json")
    assert ran.code == 0, ran.err
    text = cli("inspect", "run.json", "--workflow", "branches:workflow").out.splitlines()
    assert "steps       4 of 4 recorded (2 skipped)" in text
    assert "pending     (none)" in text
    at = text.index("skipped     summarize: condition is_long returned False")
    assert text[at + 1] == "            polish: dependency 'summarize' was skipped"
    summary = json.loads(cli("inspect", "run.json", "--json").out)
    assert summary["skipped"] == SKIPPED
    assert summary["recorded"] == ["classify", "report"]
    graph = cli("graph", "branches:workflow", "--checkpoint", "run.json")
    assert (graph.code, graph.err) == (0, "")
    assert graph.out == BRANCHES_MERMAID
    drawn = cli("graph", "branches:workflow", "--checkpoint", "run.json", "--format", "dot")
    assert BRANCHES_DOT_NODES in drawn.out
    plain = cli("graph", "branches:workflow").out
    assert 's1["summarize (when: is_long)"]' in plain
    assert "classDef" not in plain
