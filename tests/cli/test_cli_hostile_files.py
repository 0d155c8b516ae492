"""Files the command line reads that are not what they should be: never a hang or a traceback.

A checkpoint file (``inspect``, ``run --checkpoint``, ``graph --checkpoint``) or
``--inputs-json`` may be a FIFO, a device, or JSON that Python's `json` chokes on
(nesting too deep to parse, integers too long to convert) or lets through although
it is no JSON anyone should resume from (NaN, lone surrogates). Each is refused
with one ``executionkit: error:`` line naming the file, and exit status 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executionkit import TokenUsage, WorkflowCheckpoint
from executionkit._cli import main

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

VALID = WorkflowCheckpoint(
    step_index=1,
    outputs={"words": ["the", "cat"]},
    cost=TokenUsage(1, 2, 1),
    run_id="run-1",
    seq=1,
    context_keys=("lang", "text"),
    metadata={"workflow": "cli_workflow:workflow"},
)

# Each command with FILE where the file goes; run gets the inputs it needs besides.
CHECKPOINT_COMMANDS = {
    "inspect": ("inspect", "FILE"),
    "inspect --json": ("inspect", "FILE", "--json"),
    "run --checkpoint": (
        "run",
        "cli_workflow:workflow",
        "--checkpoint",
        "FILE",
        "--input=text=the cat",
        "--input=lang=fr",
    ),
    "graph --checkpoint": ("graph", "cli_workflow:workflow", "--checkpoint", "FILE"),
}
INPUTS_COMMAND = (
    "run",
    "cli_workflow:workflow",
    "--inputs-json",
    "FILE",
    "--input=text=the cat",
    "--input=lang=fr",
)
ALL_COMMANDS = {**CHECKPOINT_COMMANDS, "run --inputs-json": INPUTS_COMMAND}


def _with_file(command: tuple[str, ...], file: str) -> list[str]:
    return [file if arg == "FILE" else arg for arg in command]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary folder as working directory, with examples/ importable.

    The workflow must import, so that a hostile file let through would make the
    command succeed (exit 0) instead of failing for another reason.
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield tmp_path
    sys.modules.pop("cli_workflow", None)


def _refused(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    """Run ``main(args)`` in-process; assert exit 2 and one error line; return that line."""
    code = main(args)
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, ""), captured.err
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("executionkit: error: ")
    return lines[0]


# --- FIFOs and devices: refused at once, never read ---------------------------------------


@pytest.mark.parametrize("command", list(ALL_COMMANDS), ids=list(ALL_COMMANDS))
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, command: str) -> None:
    """Nobody ever writes to the FIFO: reading it would block, so the timeout would fire."""
    os.mkfifo(tmp_path / "pipe.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLES)])}
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-m", "executionkit", *_with_file(ALL_COMMANDS[command], "pipe.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    label = "--inputs-json pipe.json" if "inputs" in command else "pipe.json"
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"executionkit: error: {label}: cannot read: a named pipe (FIFO), not a regular file\n",
    )


def test_a_device_is_refused(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused(capsys, ["inspect", os.devnull]) == (
        f"executionkit: error: {os.devnull}: cannot read: a character device, not a regular file"
    )


def test_a_folder_is_refused(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "folder").mkdir()
    assert _refused(capsys, _with_file(INPUTS_COMMAND, "folder")) == (
        "executionkit: error: --inputs-json folder: cannot read: a folder, not a regular file"
    )


def test_an_unreadable_file_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error from open() itself (here EACCES, which root would not get) is one line too."""
    (workdir / "locked.json").write_text("{}", encoding="utf-8")

    def denied(path: object, flags: int, mode: int = 0o777) -> int:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "open", denied)
    assert _refused(capsys, ["inspect", "locked.json"]) == (
        "executionkit: error: locked.json: cannot read: Permission denied"
    )


def test_a_read_error_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / "bad.json").write_text("{}", encoding="utf-8")

    def failing(fd: int, mode: str = "r", *args: object, **kwargs: object) -> object:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdopen", failing)
    assert _refused(capsys, ["inspect", "bad.json"]) == (
        "executionkit: error: bad.json: cannot read: Input/output error"
    )


# --- JSON that Python's json chokes on, or lets through --------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def _checkpoint_text(output: str) -> str:
    """VALID as JSON, with the output of ``words`` replaced by the JSON text ``output``."""
    return json.dumps(VALID.to_dict()).replace('["the", "cat"]', output)


HOSTILE_CHECKPOINTS = [
    (DEEP, "not a checkpoint file: nested too deeply to read"),
    (_checkpoint_text(DEEP), "not a checkpoint file: nested too deeply to read"),
    (
        _checkpoint_text("9" * 5000),
        "not a checkpoint file: an integer of 5000 digits (at most 4300 are read)",
    ),
    (
        _checkpoint_text("-" + "1" * 4301),
        "not a checkpoint file: an integer of 4301 digits (at most 4300 are read)",
    ),
    (
        _checkpoint_text('"\\ud800"'),
        (
            "not a checkpoint file: a string holds the lone surrogate \\ud800, which is not "
            "Unicode text"
        ),
    ),
    (
        _checkpoint_text('{"\\udfff": 1}'),
        (
            "not a checkpoint file: a string holds the lone surrogate \\udfff, which is not "
            "Unicode text"
        ),
    ),
    (_checkpoint_text("NaN"), "not a checkpoint file: NaN is not a JSON value"),
    (_checkpoint_text("[-Infinity]"), "not a checkpoint file: -Infinity is not a JSON value"),
    (
        _checkpoint_text("1e999"),
        'not a checkpoint file: the number "1e999" is out of range for a float',
    ),
]


@pytest.mark.parametrize("command", list(CHECKPOINT_COMMANDS), ids=list(CHECKPOINT_COMMANDS))
@pytest.mark.parametrize(
    ("text", "message"), HOSTILE_CHECKPOINTS, ids=[m for _, m in HOSTILE_CHECKPOINTS]
)
def test_hostile_json_in_a_checkpoint_is_one_line_and_exit_2(
    workdir: Path, capsys: pytest.CaptureFixture[str], command: str, text: str, message: str
) -> None:
    (workdir / "cp.json").write_text(text, encoding="utf-8")
    line = _refused(capsys, _with_file(CHECKPOINT_COMMANDS[command], "cp.json"))
    assert line == f"executionkit: error: cp.json: {message}"


HOSTILE_INPUTS = [
    (DEEP, "nested too deeply to read"),
    ('{"payload": ' + DEEP + "}", "nested too deeply to read"),
    ('{"payload": ' + "7" * 4400 + "}", "an integer of 4400 digits (at most 4300 are read)"),
    (
        '{"payload": ["\\udbff"]}',
        "a string holds the lone surrogate \\udbff, which is not Unicode text",
    ),
    ('{"payload": Infinity}', "Infinity is not a JSON value"),
]


@pytest.mark.parametrize(("text", "message"), HOSTILE_INPUTS, ids=[m for _, m in HOSTILE_INPUTS])
def test_hostile_json_in_inputs_is_one_line_and_exit_2(
    workdir: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    (workdir / "in.json").write_text(text, encoding="utf-8")
    line = _refused(capsys, _with_file(INPUTS_COMMAND, "in.json"))
    assert line == f"executionkit: error: --inputs-json in.json: not JSON ({message})"


def test_a_checkpoint_too_deep_to_validate_is_one_line_and_exit_2(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation may recurse where parsing did not (or fail once it is hardened): exit 2."""
    (workdir / "cp.json").write_text(json.dumps(VALID.to_dict()), encoding="utf-8")

    def too_deep(data: object) -> WorkflowCheckpoint:
        raise RecursionError

    monkeypatch.setattr(WorkflowCheckpoint, "from_dict", too_deep)
    assert _refused(capsys, ["inspect", "cp.json"]) == (
        "executionkit: error: cp.json: not a checkpoint file: nested too deeply to read"
    )


def test_values_too_deep_to_print_are_shown_as_such(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values that parsed and validated but that json.dumps cannot write from where it is called.

    The C encoder goes deeper than the parser, so this stands in for the pure-Python
    encoder, which does not.
    """
    (workdir / "cp.json").write_text(json.dumps(VALID.to_dict()), encoding="utf-8")

    def too_deep(value: object, **kwargs: object) -> str:
        raise RecursionError

    monkeypatch.setattr(json, "dumps", too_deep)
    assert main(["inspect", "cp.json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "metadata    (dict nested too deeply to show)" in lines
    assert lines[-1] == "  words  (list nested too deeply to show)"
    assert _refused(capsys, ["inspect", "cp.json", "--json"]) == (
        "executionkit: error: cp.json: metadata nested too deeply to print as JSON"
    )


# --- the same, drawn by hypothesis -------------------------------------------------------------


def _nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"k": ' * depth + "0" + "}" * depth


deep_json = st.builds(_nested, st.integers(2_000, 100_000), st.sampled_from(["list", "object"]))
huge_int = st.builds(
    lambda sign, digits: sign + "1" * digits, st.sampled_from(["", "-"]), st.integers(4_301, 6_000)
)
not_a_number = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-2.5E+999"])
lone_surrogate = st.integers(0xD800, 0xDFFF).map(lambda code: f'"\\u{code:04x}"')
hostile_value = st.one_of(deep_json, huge_int, not_a_number, lone_surrogate)
wrong_type = st.sampled_from(["[]", "3", '"text"', "null", "true", "-1", "{}", "[1, 2]"])

_FIELDS: tuple[str, ...] = ("version", "run_id", "seq", "step_index", "created_at", "outputs")
_FIELDS += ("cost", "context_keys", "errors", "metadata", "progress", "step_info")
_FIELDS += ("skipped", "items", "pending", "children")
# What wrong_type draws that is right for the field after all.
_FINE = {("run_id", '"text"'), ("run_id", "null"), ("seq", "3"), ("created_at", "null")}
_FINE |= {("context_keys", "[]"), ("errors", "{}"), ("metadata", "{}"), ("progress", "{}")}
_FINE |= {("step_info", "{}"), ("version", "3")}
_FINE |= {(name, "{}") for name in ("skipped", "items", "pending", "children")}


@st.composite
def hostile_checkpoint(draw: st.DrawFn) -> str:
    """A checkpoint file with something hostile in it: the whole file, a field, or a value."""
    data = VALID.to_dict()
    data["metadata"] = {"note": 1}
    data["progress"] = {"translate": 2}
    data["step_info"] = {"words": {"version": None, "depends_on": []}}
    where = draw(st.sampled_from(["file", "output", "metadata", "progress", "key", *_FIELDS]))
    if where == "file":
        whole: str = draw(st.one_of(hostile_value, wrong_type.filter(lambda text: text != "{}")))
        return whole
    if where in _FIELDS:
        data[where] = "@"
        fits = wrong_type.filter(lambda text: (where, text) not in _FINE)
        value = draw(st.one_of(hostile_value, fits))
    elif where == "key":  # only a string can be a key
        data["metadata"] = {"@": 1}
        value = draw(lone_surrogate)
    else:
        places = {"output": data["outputs"], "metadata": data["metadata"]}
        places["progress"] = data["progress"]
        mapping = places[where]
        mapping[next(iter(mapping))] = "@"
        value = draw(hostile_value)
    return json.dumps(data).replace('"@"', value)


@st.composite
def hostile_inputs(draw: st.DrawFn) -> str:
    """An --inputs-json file with something hostile in it, or that is no JSON object."""
    if draw(st.booleans()):
        whole: str = draw(st.one_of(hostile_value, wrong_type.filter(lambda t: t != "{}")))
        return whole
    value = draw(hostile_value)
    if draw(st.booleans()):
        return '{"payload": [1, {"inner": ' + value + "}]}"
    return '{"payload": ' + value + "}"


_HYPOTHESIS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_HYPOTHESIS
@given(text=hostile_checkpoint(), command=st.sampled_from(["inspect", "graph --checkpoint"]))
def test_any_hostile_checkpoint_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str], text: str, command: str
) -> None:
    (workdir / "cp.json").write_text(text, encoding="utf-8")
    line = _refused(capsys, _with_file(CHECKPOINT_COMMANDS[command], "cp.json"))
    assert line.startswith("executionkit: error: cp.json: ")


@_HYPOTHESIS
@given(text=hostile_inputs())
def test_any_hostile_inputs_file_is_refused(
    workdir: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    (workdir / "in.json").write_text(text, encoding="utf-8")
    line = _refused(capsys, _with_file(INPUTS_COMMAND, "in.json"))
    assert line.startswith("executionkit: error: --inputs-json in.json: ")
