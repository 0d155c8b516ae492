"""``executionkit fork``: a new run from a checkpoint, saved beside it, resumed as printed.

Each test runs the commands twice through the ``cli`` fixture, as a real
subprocess and in-process through ``main()``. The workflow is written into the
test's folder: a chain whose steps append their names to ``ran.log``, so that a
resume shows what it ran. The parent's stored data (the file's bytes, the
database's rows of the parent run) is compared before and after every fork.
"""

from __future__ import annotations

import importlib
import json
import shlex
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from cli_runner import Outcome, run_subprocess

from executionkit import WorkflowCheckpoint
from executionkit._cli import main
from executionkit.stores import JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

FLOW = """\
from pathlib import Path

from executionkit import Step, Workflow


def logged(name, make):
    def run(ctx):
        with Path("ran.log").open("a", encoding="utf-8") as log:
            log.write(name + "\\n")
        return make(ctx)

    return run


def whole(value):
    if not isinstance(value, int):
        raise TypeError(f"a count is an int, got {type(value).__name__}")
    return value


workflow = Workflow(
    [
        # inline: on the loop, one at a time, so the checkpoints come in one sequence
        Step("fetch", logged("fetch", lambda ctx: f"doc about {ctx['topic']}"), inline=True),
        Step(
            "summarize",
            logged("summarize", lambda ctx: f"summary of {ctx['fetch']}"),
            depends_on=("fetch",),
            inline=True,
        ),
        Step(
            "translate",
            logged("translate", lambda ctx: f"T({ctx['summarize']})"),
            depends_on=("summarize",),
            inline=True,
        ),
        Step(
            "count",
            logged("count", lambda ctx: len(ctx["fetch"])),
            depends_on=("fetch",),
            encode=whole,
            decode=whole,
            inline=True,
        ),
    ]
)
"""
TOPIC = "topic=cats"
DONE = {
    "fetch": "doc about cats",
    "summarize": "summary of doc about cats",
    "translate": "T(summary of doc about cats)",
    "count": 14,
}


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
    """Run ``executionkit ARGS`` in the temporary folder, which holds ``flow.py``."""
    (tmp_path / "flow.py").write_text(FLOW, encoding="utf-8")
    if request.param == "subprocess":
        return lambda *args: run_subprocess(tmp_path, *args)

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


def ran(folder: Path) -> list[str]:
    """The steps run since the last call, in order; the log is emptied."""
    log = folder / "ran.log"
    if not log.exists():
        return []
    names = log.read_text(encoding="utf-8").split()
    log.unlink()
    return names


def resume_args(printed: str) -> list[str]:
    """The arguments of the ``run`` command ``fork`` printed, with the input's value put in."""
    line = next(line for line in printed.splitlines() if line.startswith("resume it with: "))
    words = shlex.split(line.removeprefix("resume it with: "))
    words = words[words.index("executionkit") + 1 :]
    return [word.replace("topic=VALUE", TOPIC) for word in words]


def sqlite_rows(path: Path, run_id: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table that holds ``run_id``'s data."""
    connection = sqlite3.connect(path)
    try:
        tables = [row[0] for row in connection.execute("select name from sqlite_master")]
        rows = {}
        for table in tables:
            columns = [row[1] for row in connection.execute(f"pragma table_info({table})")]
            if "run_id" in columns:
                query = f"select * from {table} where run_id = ? order by 1, 2"  # noqa: S608
                rows[table] = list(connection.execute(query, (run_id,)))
        return rows
    finally:
        connection.close()


@pytest.mark.parametrize("name", ["run.json", "run.jsonl"])
def test_fork_a_file_with_an_override_then_resume_with_the_printed_command(
    cli: Callable[..., Outcome], tmp_path: Path, name: str
) -> None:
    """The fork goes to run.<id>.json(l) beside the parent; resuming runs only what depends."""
    assert cli("run", "flow:workflow", "--checkpoint", name, "--input", TOPIC).code == 0
    assert ran(tmp_path) == ["fetch", "summarize", "count", "translate"]
    parent = tmp_path / name
    before = parent.read_bytes()
    forked = cli(
        "fork", "flow:workflow", "--checkpoint", name, "--override", "summarize=better",
        "--run-id", "fixed", "--note", "by hand",
    )  # fmt: skip
    assert (forked.code, forked.err) == (0, "")
    stem, suffix = name.split(".")
    lines = forked.out.splitlines()
    assert lines[0].startswith("forked run 'fixed' from run ")
    assert lines[0].endswith(
        f" into {stem}.fixed.{suffix} (a file holds one run: the parent's stays in {name}); "
        f"overridden: summarize; dropped, so resuming runs them: translate"
    )
    assert lines[1].endswith(
        f"run flow:workflow --checkpoint {stem}.fixed.{suffix} --input topic=VALUE"
    )
    assert lines[2] == (
        "(put each input's value in place of VALUE: checkpoints keep input names, never values)"
    )
    assert parent.read_bytes() == before
    assert ran(tmp_path) == []  # forking runs nothing

    resumed = cli(*resume_args(forked.out))
    assert resumed.code == 0, resumed.err
    assert json.loads(resumed.out) == {
        **DONE,
        "summarize": "better",
        "translate": "T(better)",
    }
    assert ran(tmp_path) == ["translate"]
    assert parent.read_bytes() == before

    shown = cli("inspect", f"{stem}.fixed.{suffix}")
    assert "lineage     forked from run " in shown.out
    lineage = next(line for line in shown.out.splitlines() if line.startswith("lineage"))
    assert lineage.endswith(" seq 4; overridden: summarize; note: by hand")
    data = json.loads(cli("inspect", f"{stem}.fixed.{suffix}", "--json").out)
    assert data["run_id"] == "fixed"
    assert data["lineage"] == {
        "parent_run_id": data["lineage"]["parent_run_id"],
        "parent_seq": 4,
        "overridden": ["summarize"],
        "rerun": [],
        "note": "by hand",
    }
    assert json.loads(cli("inspect", name, "--json").out)["lineage"] == {}
    assert "lineage" not in cli("inspect", name).out


def test_fork_a_sqlite_run_then_resume_it_in_the_same_database(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """The fork is a run of its own in the database; the parent's rows never change."""
    url = "sqlite:///runs.db?run_id=parent"
    assert cli("run", "flow:workflow", "--checkpoint", url, "--input", TOPIC).code == 0
    ran(tmp_path)
    before = sqlite_rows(tmp_path / "runs.db", "parent")
    forked = cli(
        "fork", "flow:workflow", "--checkpoint", "sqlite:///runs.db", "--override", "count=3",
        "--run-id", "child",
    )  # fmt: skip
    assert (forked.code, forked.err) == (0, "")
    assert forked.out.splitlines()[0] == (
        "forked run 'child' from run 'parent' seq 4 into sqlite:///runs.db; overridden: count; "
        "dropped, so resuming runs them: nothing"
    )
    assert forked.out.splitlines()[1].endswith(
        "run flow:workflow --checkpoint 'sqlite:///runs.db?run_id=child' --input topic=VALUE"
    )
    assert sqlite_rows(tmp_path / "runs.db", "parent") == before
    resumed = cli(*resume_args(forked.out))
    assert resumed.code == 0, resumed.err
    assert json.loads(resumed.out) == {**DONE, "count": 3}
    assert ran(tmp_path) == []
    assert sqlite_rows(tmp_path / "runs.db", "parent") == before
    store = SQLiteStore(tmp_path / "runs.db")
    assert sorted(store.run_ids()) == ["child", "parent"]
    child = store.load("child")
    assert child is not None
    assert child.lineage["parent_run_id"] == "parent"

    # Two runs now: the parent must be named, with --run or ?run_id=.
    unnamed = cli("fork", "flow:workflow", "--checkpoint", "sqlite:///runs.db")
    assert unnamed.code == 2
    assert unnamed.err == (
        "executionkit: error: sqlite:///runs.db: holds 2 runs (child, parent); name one with "
        "--run RUN\n"
    )
    again = cli(
        "fork", "flow:workflow", "--checkpoint", "sqlite:///runs.db", "--run", "parent",
        "--rerun", "fetch", "--run-id", "child",
    )  # fmt: skip
    assert again.err == (
        "executionkit: error: sqlite:///runs.db: holds a run 'child' already; choose another "
        "--run-id\n"
    )
    rerun = cli(
        "fork", "flow:workflow", "--checkpoint", "sqlite:///runs.db?run_id=parent",
        "--rerun", "summarize", "--run-id", "redo",
    )  # fmt: skip
    assert rerun.code == 0, rerun.err
    assert "re-run: summarize; dropped, so resuming runs them: summarize, translate" in rerun.out
    assert cli(*resume_args(rerun.out)).code == 0
    assert ran(tmp_path) == ["summarize", "translate"]
    assert sqlite_rows(tmp_path / "runs.db", "parent") == before


def test_fork_an_earlier_checkpoint_with_seq(cli: Callable[..., Outcome], tmp_path: Path) -> None:
    """--seq N forks the checkpoint N of a JSON Lines file: what came after it runs again."""
    assert cli("run", "flow:workflow", "--checkpoint", "run.jsonl", "--input", TOPIC).code == 0
    ran(tmp_path)
    kept = JsonLinesStore(tmp_path / "run.jsonl").load(seq=2)
    assert kept is not None
    assert list(kept.outputs) == ["fetch", "summarize"]
    forked = cli(
        "fork", "flow:workflow", "--checkpoint", "run.jsonl", "--seq", "2", "--rerun", "summarize"
    )
    assert forked.code == 0, forked.err
    assert " seq 2 into run." in forked.out
    assert forked.out.splitlines()[0].endswith(
        "; re-run: summarize; dropped, so resuming runs them: summarize"
    )
    assert cli(*resume_args(forked.out)).code == 0
    assert ran(tmp_path) == ["summarize", "count", "translate"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--override", "nope=1"), "--override 'nope' is not a step of the workflow"),
        (
            ("--override", "sumarize=1"),
            "--override 'sumarize' is not a step of the workflow; did you mean 'summarize'?",
        ),
        (
            ("--rerun", "translat"),
            "--rerun 'translat' is not a step of the workflow; did you mean 'translate'?",
        ),
        (("--rerun", "nope"), "--rerun 'nope' is not a step of the workflow"),
        (
            ("--override", "count=many"),
            (
                "--override of step 'count': its decode refused the value: TypeError: a count is "
                "an int, got str"
            ),
        ),
        (
            ("--override", "summarize=x", "--rerun", "summarize"),
            "step 'summarize' is both overridden and re-run: choose one",
        ),
        (
            ("--override", "translate=x", "--rerun", "fetch"),
            (
                "step 'translate' is overridden but depends on re-run step 'fetch', which would "
                "drop its override; override or re-run, not both"
            ),
        ),
        (("--override", "count"), "--override 'count' is not STEP=VALUE"),
        (("--override", "count=1", "--override", "count=2"), "--override 'count' is given twice"),
        (
            ("--override", "count=NaN"),
            (
                "--override count: NaN is not a JSON value; to give the text itself, quote it "
                "as a JSON string"
            ),
        ),
        (
            ("--seq", "9"),
            "run.json: a JSON file keeps only its latest checkpoint, seq=4; it has no seq=9",
        ),
        (("--run", "other"), None),
        (("--run-id", ""), "--run-id is empty"),
        (("--note", ""), "--note is empty"),
        (("--run-id", "a/b"), None),
    ],
)
def test_bad_forks_exit_2_with_one_line_and_write_nothing(
    cli: Callable[..., Outcome], tmp_path: Path, flags: tuple[str, ...], message: str | None
) -> None:
    """Each refusal is one ``executionkit: error:`` line naming the step or flag; no file."""
    assert cli("run", "flow:workflow", "--checkpoint", "run.json", "--input", TOPIC).code == 0
    before = sorted(path.name for path in tmp_path.iterdir() if path.name != "ran.log")
    parent = (tmp_path / "run.json").read_bytes()
    refused = cli("fork", "flow:workflow", "--checkpoint", "run.json", *flags)
    assert refused.code == 2
    assert refused.out == ""
    assert refused.err.startswith("executionkit: error: ")
    assert refused.err.count("\n") == 1
    if message is not None:
        assert refused.err == f"executionkit: error: {message}\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "ran.log") == before
    assert (tmp_path / "run.json").read_bytes() == parent


def test_fork_refuses_what_holds_no_checkpoint(cli: Callable[..., Outcome]) -> None:
    """A missing file and an empty database are bad input, exit 2."""
    missing = cli("fork", "flow:workflow", "--checkpoint", "none.json")
    assert (missing.code, missing.err) == (2, "executionkit: error: none.json: no such file\n")
    empty = cli("fork", "flow:workflow", "--checkpoint", "sqlite:///empty.db")
    assert (empty.code, empty.err) == (
        2,
        "executionkit: error: sqlite:///empty.db: holds no run to fork\n",
    )
    absent = cli("fork", "flow:workflow", "--checkpoint", "sqlite:///empty.db?run_id=x")
    assert (absent.code, absent.err) == (
        2,
        "executionkit: error: sqlite:///empty.db: holds no checkpoint of run 'x'\n",
    )


def test_fork_never_overwrites_a_file(cli: Callable[..., Outcome], tmp_path: Path) -> None:
    """A second fork with the same --run-id is refused: its file exists."""
    assert cli("run", "flow:workflow", "--checkpoint", "run.json", "--input", TOPIC).code == 0
    args = ("fork", "flow:workflow", "--checkpoint", "run.json", "--run-id", "f")
    assert cli(*args).code == 0
    first = (tmp_path / "run.f.json").read_bytes()
    second = cli(*args, "--override", "count=1")
    assert second.err == (
        "executionkit: error: run.f.json: exists already; the fork of run.json is saved there\n"
    )
    assert (tmp_path / "run.f.json").read_bytes() == first
    loaded = WorkflowCheckpoint.from_dict(json.loads(first))
    assert (loaded.run_id, loaded.seq, loaded.lineage["overridden"]) == ("f", 1, ())


NESTED = """\
from executionkit import Step, Workflow

inner = Workflow(
    [
        Step("draft", lambda ctx: {"text": "a draft"}),
        Step("polish", lambda ctx: f"polished {ctx['draft']['text']}", depends_on=("draft",)),
    ]
)
workflow = Workflow(
    [
        Step("research", inner),
        Step("report", lambda ctx: "report on " + ctx["research"]["polish"], ("research",)),
        Step("other", lambda ctx: "other"),
    ]
)
"""


def test_an_override_by_path_reaches_into_a_sub_workflow(
    cli: Callable[..., Outcome], tmp_path: Path
) -> None:
    """``--override research/draft=JSON`` puts an object in place inside the sub-workflow."""
    (tmp_path / "nested.py").write_text(NESTED, encoding="utf-8")
    assert cli("run", "nested:workflow", "--checkpoint", "run.json").code == 0
    forked = cli(
        "fork", "nested:workflow", "--checkpoint", "run.json", "--run-id", "n",
        "--override", 'research/draft={"text": "a better draft"}',
    )  # fmt: skip
    assert forked.code == 0, forked.err
    assert forked.out.splitlines()[0].endswith(
        "; overridden: research/draft; dropped, so resuming runs them: research, report"
    )
    assert forked.out.splitlines()[1].endswith("run nested:workflow --checkpoint run.n.json")
    assert len(forked.out.splitlines()) == 2  # no inputs: nothing to put in the command
    resumed = cli(*resume_args(forked.out))
    assert resumed.code == 0, resumed.err
    assert json.loads(resumed.out)["report"] == "report on polished a better draft"


def test_run_names_the_parent_and_must_agree(cli: Callable[..., Outcome]) -> None:
    """--run must name the file's run, and agree with a database URL's ?run_id=."""
    assert cli("run", "flow:workflow", "--checkpoint", "run.json", "--input", TOPIC).code == 0
    run_id = json.loads(cli("inspect", "run.json", "--json").out)["run_id"]
    named = cli("fork", "flow:workflow", "--checkpoint", "run.json", "--run", run_id)
    assert named.code == 0, named.err
    wrong = cli("fork", "flow:workflow", "--checkpoint", "run.json", "--run", "other")
    assert wrong.err == (
        f"executionkit: error: --run 'other': run.json holds run {run_id!r} (a file holds one "
        f"run)\n"
    )
    both = cli("fork", "flow:workflow", "--checkpoint", "sqlite:///runs.db?run_id=a", "--run", "b")
    assert both.err == (
        "executionkit: error: --run 'b' and the run_id 'a' of --checkpoint name different runs\n"
    )
