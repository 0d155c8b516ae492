"""``executionkit submit`` and ``executionkit answer``: a run or an answer handed to a worker.

And ``executionkit worker`` as a process: SIGTERM and Ctrl-C stop it with what its
runs completed saved.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from cli_runner import ROOT

from executionkit._cli import main
from executionkit.stores import JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from pathlib import Path

FLOW = """\
import os
import threading

from executionkit import Step, Workflow


def strict(answer):
    if answer not in ("yes", "no"):
        raise ValueError(f"say yes or no, not {answer!r}")
    return answer


def slow(ctx):
    print("slow started", flush=True)
    threading.Event().wait(60)
    return "slow"


workflow = Workflow(
    [
        Step("draft", lambda ctx: f"draft about {ctx['topic']}"),
        Step.ask("approve", lambda ctx: f"publish {ctx['draft']}?", check=strict,
                 depends_on=("draft",)),
        Step("publish", lambda ctx: f"published {ctx['draft']}", depends_on=("approve",)),
    ],
    inputs=("topic",),
)

stuck = Workflow([Step("quick", lambda ctx: "quick"), Step("slow", slow, depends_on=("quick",))])
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "inbox_flow.py").write_text(FLOW, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_submit_stores_the_run_with_its_inputs_and_prints_its_id(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "meta.json").write_text('{"team": "docs"}', encoding="utf-8")
    code, out, err = _main(
        capsys,
        "submit",
        "inbox_flow:workflow",
        "--checkpoint",
        "sqlite:///runs.db",
        "--input",
        "topic=owls",
        "--metadata-json",
        "meta.json",
        "--run-id",
        "r1",
    )
    assert (code, out) == (0, "r1\n"), err
    assert "executionkit worker sqlite:///runs.db --workflow inbox_flow:workflow" in err
    submission = SQLiteStore(here / "runs.db").inbox.submission("r1")
    assert submission is not None
    assert dict(submission.inputs) == {"topic": "owls"}
    assert dict(submission.metadata) == {"team": "docs"}
    assert submission.steps == ("draft", "approve", "publish")
    code, out, err = _main(
        capsys, "submit", "inbox_flow:workflow", "--checkpoint", "sqlite:///runs.db",
        "--input", "topic=x", "--run-id", "r1",
    )  # fmt: skip
    assert code == 2
    assert "run 'r1' was submitted already" in err
    code, out, _ = _main(
        capsys, "submit", "inbox_flow:workflow", "--checkpoint", "sqlite:///runs.db",
        "--input", "topic=y",
    )  # fmt: skip
    assert code == 0
    assert len(out.strip()) == 32  # a new random run id


def test_submit_checks_the_inputs_as_a_run_would(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _main(
        capsys, "submit", "inbox_flow:workflow", "--checkpoint", "sqlite:///runs.db"
    )
    assert code == 2
    assert "initial_context lacks the workflow's declared inputs: 'topic'" in err
    code, _, err = _main(
        capsys, "submit", "inbox_flow:workflow", "--checkpoint", "sqlite:///runs.db",
        "--input", "topic=t", "--input", "draft=clash",
    )  # fmt: skip
    assert code == 2
    assert "collide with step names: 'draft'" in err
    code, _, err = _main(
        capsys, "submit", "inbox_flow:workflow", "--checkpoint", "sqlite:///runs.db?run_id=a",
        "--input", "topic=t", "--run-id", "b",
    )  # fmt: skip
    assert code == 2
    assert "--run-id b and ?run_id=a name different runs" in err
    assert SQLiteStore(here / "runs.db").inbox.submissions() == []


def test_answer_saves_an_answer_and_runs_nothing(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _main(
        capsys, "run", "inbox_flow:workflow", "--checkpoint", "sqlite:///runs.db?run_id=r",
        "--input", "topic=owls",
    )  # fmt: skip
    assert code == 3, err
    store = SQLiteStore(here / "runs.db")
    before = store.load("r")
    assert before is not None
    code, _, err = _main(
        capsys, "answer", "sqlite:///runs.db", "--run", "r", "--answer", "aprove=yes"
    )
    assert code == 2
    assert (
        "run r has no question aprove waiting for an answer; did you mean 'approve'? "
        "(waiting: approve)" in err
    )
    code, _, err = _main(
        capsys, "answer", "sqlite:///runs.db", "--run", "r", "--answer", "approve=maybe",
        "--workflow", "inbox_flow:workflow",
    )  # fmt: skip
    assert code == 2
    assert "say yes or no, not 'maybe'" in err
    assert "nothing was saved" in err
    assert store.inbox.answers("r") == {}
    code, _, err = _main(capsys, "answer", "sqlite:///runs.db", "--answer", "approve=yes")
    assert code == 2
    assert "name the run with --run RUN" in err
    code, _, err = _main(
        capsys, "answer", "sqlite:///runs.db?run_id=r", "--answer", "approve=yes",
        "--workflow", "inbox_flow:workflow",
    )  # fmt: skip
    assert code == 0, err
    assert "saved the answer to approve of run r; nothing ran" in err
    assert store.inbox.answers("r") == {"approve": "yes"}
    after = store.load("r")
    assert after is not None
    assert after.seq == before.seq  # nothing ran, nothing was written
    code, _, err = _main(capsys, "answer", "sqlite:///runs.db", "--run", "nope", "--answer", "a=1")
    assert code == 2
    assert "run nope has no checkpoint yet" in err


def test_answer_on_a_file_names_its_one_run(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _main(
        capsys, "run", "inbox_flow:workflow", "--checkpoint", "run.jsonl", "--input", "topic=a"
    )
    assert code == 3, err
    code, _, err = _main(capsys, "answer", "run.jsonl", "--run", "other", "--answer", "approve=no")
    assert code == 2
    assert "holds run" in err
    code, _, err = _main(capsys, "answer", "run.jsonl", "--answer", "approve=no")
    assert code == 0, err
    store = JsonLinesStore(here / "run.jsonl")
    latest = store.load()
    assert latest is not None
    assert store.inbox.answers(latest.run_id or "") == {"approve": "no"}
    assert json.loads((here / "run.jsonl.inbox").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_worker_with_what_its_runs_completed_saved(
    here: Path, signum: int, code: int
) -> None:
    store = SQLiteStore(here / "runs.db")
    stuck = importlib.import_module("inbox_flow").stuck  # the module the test wrote
    stuck.submit(store, run_id="s")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(here)])}
    worker = subprocess.Popen(
        [sys.executable, "-m", "executionkit", "worker", "sqlite:///runs.db",
         "--workflow", "inbox_flow:stuck", "--poll", "0.1", "--stop-grace", "0.5"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "slow started\n"  # the plain step runs in a thread
        worker.send_signal(signum)
        _, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == code, err
    assert "stopped with the worker; what completed is saved" in err
    saved = store.load("s")
    assert saved is not None
    assert dict(saved.outputs) == {"quick": "quick"}
    assert store.owner("s") is None
