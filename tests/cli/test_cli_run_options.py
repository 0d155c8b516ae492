"""``executionkit run``'s run-option flags, each through a real process (issue 30).

``--executor``, ``--max-concurrency``, ``--budget``, ``--history`` and
``--trace`` reach `Workflow.run`; ``--stop-grace`` is attacked with real signals
in ``tests/run/test_plain_signals.py``. ``serve`` takes the same flags for the
runs it resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]

FLOWS = """\
import os, threading, time

from executionkit import PatternResult, Step, TokenUsage, Workflow

_lock = threading.Lock()
_running = [0, 0]  # now, most at once


def work(ctx):
    with _lock:
        _running[0] += 1
        _running[1] = max(_running[1], _running[0])
    time.sleep(0.05)
    with _lock:
        _running[0] -= 1
    return PatternResult(os.getpid(), cost=TokenUsage(10, 1, 1))


def most(ctx):
    pids = sorted({ctx[f"w{n}"] for n in range(4)})
    return {"most": _running[1], "pid": os.getpid(), "pids": pids}


wide = Workflow(
    [
        *(Step(f"w{n}", work) for n in range(4)),
        Step("most", most, depends_on=[f"w{n}" for n in range(4)], inline=True),
    ]
)

chain = Workflow(
    [Step(f"c{n}", work, depends_on=[f"c{n - 1}"] if n else []) for n in range(4)]
)
"""


def run_cli(
    folder: Path, *args: str, env: dict[str, str] | None = None, unset: str = "\0"
) -> tuple[int, str, str]:
    """``python -m executionkit ARGS`` in ``folder``: exit code, stdout, stderr.

    ``env`` adds variables; those whose names start with ``unset`` are left out.
    """
    environment = {
        **{name: value for name, value in os.environ.items() if not name.startswith(unset)},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)]),
        **(env or {}),
    }
    done = subprocess.run(  # noqa: S603 - our own interpreter and command
        [sys.executable, "-m", "executionkit", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env=environment,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "flows.py").write_text(FLOWS, encoding="utf-8")
    return tmp_path


def test_max_concurrency_bounds_the_plain_steps_running_at_once(folder: Path) -> None:
    code, out, err = run_cli(folder, "run", "flows:wide", "--max-concurrency", "1")
    assert code == 0, err
    assert json.loads(out)["most"]["most"] == 1
    code, out, err = run_cli(folder, "run", "flows:wide", "--max-concurrency", "3")
    assert code == 0, err
    assert 1 <= json.loads(out)["most"]["most"] <= 3


def test_executor_processes_runs_plain_steps_in_other_processes(folder: Path) -> None:
    code, out, err = run_cli(folder, "run", "flows:wide", "--executor", "processes")
    assert code == 0, err
    most = json.loads(out)["most"]
    assert most["pid"] not in most["pids"]  # the inline step ran here, the others elsewhere
    code, out, err = run_cli(folder, "run", "flows:wide", "--executor", "threads")
    assert code == 0, err
    most = json.loads(out)["most"]
    assert most["pids"] == [most["pid"]]


def test_budget_stops_the_run_saves_it_and_a_larger_budget_resumes_it(folder: Path) -> None:
    args = ("run", "flows:chain", "--checkpoint", "run.json")
    code, out, err = run_cli(folder, *args, "--budget", "llm_calls=2")
    assert code == 1, err
    assert out == ""
    lines = err.splitlines()
    assert "executionkit: budget reached: llm_calls 2 of 2" in lines[-2]
    assert lines[-1].endswith(
        "run again with the same --checkpoint to resume with a larger --budget"
    )
    assert "2 of 4 steps recorded" in lines[-1]
    code, out, err = run_cli(
        folder, *args, "--budget", "llm_calls=10", "--budget", "input_tokens=500"
    )
    assert code == 0, err
    assert sorted(json.loads(out)) == ["c0", "c1", "c2", "c3"]


def test_a_dollar_budget_stops_the_run_and_a_larger_one_resumes_it(folder: Path) -> None:
    """``--budget dollars=N --prices FILE``: a dollar a step here, two dollars, two steps."""
    prices = {"*": {"input_per_million": 100_000, "output_per_million": 0}}
    (folder / "prices.json").write_text(json.dumps(prices), encoding="utf-8")
    args = ("run", "flows:chain", "--checkpoint", "run.json", "--prices", "prices.json")
    code, out, err = run_cli(folder, *args, "--budget", "dollars=2")
    assert (code, out) == (1, ""), err
    assert "executionkit: budget reached: dollars $2 of $2" in err
    assert "2 of 4 steps recorded" in err.splitlines()[-1]
    code, out, err = run_cli(folder, *args, "--budget", "dollars=10")
    assert code == 0, err
    assert sorted(json.loads(out)) == ["c0", "c1", "c2", "c3"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--budget", "calls=2"), "--budget calls=2: expected FIELD=N with FIELD one of"),
        (
            ("--budget", "llm_calls=0"),
            "--budget llm_calls=0: N must be a whole number of 1 or more",
        ),
        (
            ("--budget", "llm_calls=1", "--budget", "llm_calls=2"),
            "--budget llm_calls is given twice",
        ),
        (("--max-concurrency", "0"), "expected a whole number of 1 or more, got '0'"),
        (("--stop-grace", "-1"), "expected a number of seconds, 0 or more (or inf), got '-1'"),
        (("--executor", "gpus"), "invalid choice: 'gpus'"),
        (("--history",), "--history: run.json is a JSON file, which keeps only the latest"),
    ],
)
def test_bad_run_options_exit_2_naming_the_flag(
    folder: Path, flags: tuple[str, ...], message: str
) -> None:
    code, out, err = run_cli(folder, "run", "flows:chain", "--checkpoint", "run.json", *flags)
    assert code == 2, err
    assert message in err
    assert out == ""
    assert not (folder / "run.json").exists()


@pytest.mark.parametrize(
    ("history", "kept"), [(False, [4]), (True, [1, 2, 3, 4])], ids=["latest", "history"]
)
def test_history_keeps_every_checkpoint_in_a_database(
    folder: Path, history: bool, kept: list[int]
) -> None:
    where = "sqlite:///runs.db?run_id=night"
    extra = ("--history",) if history else ()
    code, _out, err = run_cli(folder, "run", "flows:chain", "--checkpoint", where, *extra)
    assert code == 0, err
    code, out, err = run_cli(folder, "inspect", where, "--history", "--json")
    assert code == 0, err
    assert [entry["seq"] for entry in json.loads(out)["checkpoints"]] == kept


def test_trace_console_prints_a_span_for_the_run_and_each_step(folder: Path) -> None:
    code, out, err = run_cli(folder, "run", "flows:chain", "--trace", "console")
    assert code == 0, err
    assert sorted(json.loads(out)) == ["c0", "c1", "c2", "c3"]
    for name in ("executionkit.run", *(f"executionkit.step c{n}" for n in range(4))):
        assert f'"name": "{name}"' in err


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, int]]

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.rfile.read(length)
        self.received.append((self.path, length))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        del args


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """An OTLP/HTTP collector of our own on a free port: it keeps what it was sent."""
    received: list[tuple[str, int]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_trace_otlp_sends_the_spans_to_the_collector_the_environment_names(
    folder: Path, collector: tuple[str, list[tuple[str, int]]]
) -> None:
    endpoint, received = collector
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    code, _out, err = run_cli(folder, "run", "flows:chain", "--trace", "otlp", env=env)
    assert code == 0, err
    assert received, "no span reached the collector"
    assert {path for path, _ in received} == {"/v1/traces"}


def test_trace_otlp_without_an_endpoint_says_which_variable_to_set(folder: Path) -> None:
    args = ("run", "flows:chain", "--trace", "otlp")
    code, _out, err = run_cli(folder, *args, unset="OTEL_EXPORTER_OTLP_")
    assert code == 2, err
    assert "--trace otlp: set OTEL_EXPORTER_OTLP_ENDPOINT" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("serve", "run.jsonl", "--max-concurrency", "2"),
            "the run options are how runs resumed here run: they go with --workflow",
        ),
        (
            ("serve", "run.json", "--workflow", "flows:chain", "--history"),
            "--history: run.json is a JSON file, which keeps only the latest",
        ),
    ],
)
def test_serve_takes_the_run_options_only_for_the_runs_it_resumes(
    folder: Path, args: tuple[str, ...], message: str
) -> None:
    code, _out, err = run_cli(folder, *args, "--port", "0")
    assert code == 2, err
    assert message in err
