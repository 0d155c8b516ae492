"""The benchmark suite: executionkit against a hand-written asyncio loop and its peers.

One command, from the repository root::

    python benchmarks/run.py

prints a Markdown report: microseconds per step of no-op steps with a
checkpoint after every batch, on chain, wide and layered graphs at 100, 1,000,
4,000 and 10,000 steps, for executionkit (this checkout), the hand-written
asyncio baseline (`baseline`) and each peer (ExecutionKit 0.4.0, LangGraph,
pydantic-graph, each in a virtual environment the suite makes under
``benchmarks/.venvs/``); ratios and growth with size; then the makespan of a
latency DAG in batch and eager mode, peak memory of wide runs, and import time.
Every measurement runs in a fresh process (see `bench_harness`).

Options: ``--sizes 100,1000``, ``--shapes chain,wide``, ``--repeat 5`` (median
of that many runs), ``--peers all|none|executionkit04,langgraph,pydantic-graph``,
``--quick`` (tiny sizes, one short run each: a smoke run), ``--json FILE`` (raw
results), ``--markdown FILE`` (the report), ``--parts speed,makespan,memory,import``,
``--rev REV`` (measure a commit instead of the working tree), ``--budget`` and
``--timeout`` (seconds; see the report's header).
Benchmarks are not part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import importtime
import report
import shapes
import source
import venvs
from bench_harness import PHASE_PREFIX, RESULT_PREFIX

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
PARTS = ("speed", "makespan", "memory", "import")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help="step counts, default 100,1000,4000,10000")
    parser.add_argument(
        "--shapes", default=",".join(shapes.SHAPES), help="graphs, default chain,wide,layered"
    )
    parser.add_argument("--repeat", type=int, help="runs per measurement (median), default 5")
    parser.add_argument(
        "--peers",
        default="all",
        help=f"all, none, or a comma-separated subset of {','.join(venvs.PEERS)}",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one short run each")
    parser.add_argument("--json", type=Path, help="write the raw results to this file")
    parser.add_argument("--markdown", type=Path, help="write the report to this file")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"what to measure, from {','.join(PARTS)}"
    )
    parser.add_argument(
        "--budget", type=float, default=60.0, help="seconds one measurement should use at most"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds after which a measurement is killed, default 300 (30 with --quick)",
    )
    parser.add_argument("--memory-sizes", help="wide run sizes, default 10000,50000,100000")
    parser.add_argument(
        "--rev", help="measure executionkit/ as of this git commit instead of the working tree"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.sizes = _ints(args.sizes or ("20,60" if quick else "100,1000,4000,10000"))
    args.repeat = args.repeat or (1 if quick else 5)
    args.timeout = args.timeout or (30.0 if quick else 300.0)
    args.memory_sizes = _ints(
        args.memory_sizes or ("1000,2000" if quick else "10000,50000,100000")
    )
    args.shapes = [shape for shape in args.shapes.split(",") if shape]
    unknown = sorted(set(args.shapes) - set(shapes.SHAPES))
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; choose from {shapes.SHAPES}")
    args.parts = [part for part in args.parts.split(",") if part]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if args.peers == "all":
        args.peers = list(venvs.PEERS)
    elif args.peers == "none":
        args.peers = []
    else:
        args.peers = [peer for peer in args.peers.split(",") if peer]
        unknown = sorted(set(args.peers) - set(venvs.PEERS))
        if unknown:
            parser.error(
                f"unknown peer(s) {', '.join(unknown)}; choose from all, none, "
                f"{', '.join(venvs.PEERS)}"
            )
    return args


def _ints(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part})


def progress(message: str) -> None:
    """A progress line on standard error (standard output carries the report)."""
    print(message, file=sys.stderr, flush=True)


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def machine() -> str:
    """CPU model, core count, OS and Python version."""
    model = platform.processor() or "unknown CPU"
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pass
    else:
        for line in lscpu.stdout.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                model = value.strip()
                break
    return (
        f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()} ({platform.python_implementation()})"
    )


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, where the system has them."""
    try:
        return [round(load, 2) for load in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # peers must never see this checkout's executionkit
    return env


def _result_line(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    return None


def _phase(expired: subprocess.TimeoutExpired) -> str:
    """`` while <phase>``: the last phase the killed measurement announced, if any."""
    text = expired.stderr.decode(errors="replace") if expired.stderr else ""
    phases = [line for line in text.splitlines() if line.startswith(PHASE_PREFIX)]
    return f" while {phases[-1][len(PHASE_PREFIX) :]}" if phases else ""


def _tail(text: str) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-3:])


def run_script(command: list[str], timeout: float) -> dict[str, Any]:
    """Run a measuring process; its result line, or ``status`` and ``reason``."""
    try:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        return {"status": "timeout", "reason": f"killed after {timeout:g} s{_phase(expired)}"}
    result = _result_line(done.stdout)
    if done.returncode != 0 or result is None:
        return {"status": "error", "reason": _tail(done.stderr) or f"exit {done.returncode}"}
    result["status"] = "ok"
    return result


def implementations(args: argparse.Namespace) -> list[dict[str, Any]]:
    """executionkit, the baseline and the requested peers, with interpreter and script."""
    impls: list[dict[str, Any]] = [
        {
            "key": report.OURS,
            "label": "executionkit",
            "python": sys.executable,
            "script": str(BENCHMARKS / "bench_executionkit.py"),
        },
        {
            "key": report.BASELINE,
            "label": "hand-written asyncio",
            "python": sys.executable,
            "script": str(BENCHMARKS / "baseline.py"),
        },
    ]
    for key in args.peers:
        peer = venvs.PEERS[key]
        log: list[str] = []
        progress(f"preparing {peer.label} in {peer.venv.relative_to(ROOT)}")
        reason = venvs.ensure(peer, log)
        for line in log:
            progress(f"  {line}")
        impls.append(
            {
                "key": key,
                "label": peer.label,
                "requirement": peer.requirement,
                "python": str(peer.python),
                "script": str(peer.script),
                "unavailable": reason,
            }
        )
        if reason:
            progress(f"  {peer.label} unavailable: {reason}")
    return impls


def measure_speed(args: argparse.Namespace, impls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (shape, size, implementation), each in its own process, within the budget."""
    measurements: list[dict[str, Any]] = []
    stopped: dict[tuple[str, str], str] = {}
    for shape in args.shapes:
        for size in args.sizes:
            for impl in impls:
                key = impl["key"]
                found: dict[str, Any]
                if impl.get("unavailable"):
                    found = {"status": "unavailable", "reason": impl["unavailable"]}
                elif (key, shape) in stopped:
                    found = {"status": "skipped", "reason": stopped[(key, shape)]}
                else:
                    command = [
                        impl["python"],
                        impl["script"],
                        f"--shape={shape}",
                        f"--size={size}",
                        f"--repeat={args.repeat}",
                        f"--budget={args.budget:g}",
                        *(("--warm-up=0.01", "--min-repeat=0.01") if args.quick else ()),
                    ]
                    started = dt.datetime.now(dt.UTC)
                    found = run_script(command, args.timeout)
                    elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
                    found["wall_s"] = elapsed
                    if found["status"] != "ok":
                        stopped[(key, shape)] = f"{size:,} steps: {found['status']}"
                    elif elapsed > args.budget:
                        stopped[(key, shape)] = f"{size:,} steps took {elapsed:.0f} s"
                found.update(impl=key, shape=shape, steps=size)
                measurements.append(found)
                us = report.per_step_us(found)
                progress(
                    f"{shape:>8} {size:>6,} {impl['label']:<22} "
                    + (f"{us:10.1f} µs/step" if us is not None else found["status"])
                )
    return measurements


def measure_makespan(args: argparse.Namespace) -> dict[str, Any]:
    """The latency DAG, in a process of its own."""
    command = [sys.executable, str(BENCHMARKS / "makespan.py"), f"--repeat={args.repeat}"]
    if args.quick:
        command += ["--layers=3", "--width=4", "--min-ms=1", "--max-ms=5"]
    found = run_script(command, args.timeout)
    if found["status"] != "ok":
        return {"error": f"{found['status']}: {found['reason']}"}
    progress(f"makespan: {found['median_s']}")
    return found


def measure_memory(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Wide runs with tracemalloc, one process per implementation and size."""
    entries: list[dict[str, Any]] = []
    for impl in (report.OURS, report.BASELINE):
        for size in args.memory_sizes:
            command = [
                sys.executable,
                str(BENCHMARKS / "memory.py"),
                f"--impl={impl}",
                f"--size={size}",
            ]
            found = run_script(command, args.timeout)
            if found["status"] != "ok":
                found = {"impl": impl, "steps": size, "error": found["status"]}
            entries.append(found)
            progress(f"memory {impl} {size:,}: {found}")
    return entries


def measure_import(args: argparse.Namespace) -> dict[str, Any]:
    """Import time and the modules executionkit loads."""
    try:
        return importtime.measure(3 if args.quick else 10)
    except (OSError, subprocess.SubprocessError) as error:
        return {"error": str(error)}


def extract(rev: str, into: Path) -> None:
    """Write ``executionkit/`` as of commit ``rev`` under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "executionkit"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(into, filter="data")
        else:  # pragma: no cover - git archive of our own repository is trusted
            tar.extractall(into)  # noqa: S202


def main(argv: list[str] | None = None) -> int:
    """Measure, print the report, and save what was asked."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not args.rev:
        return measure_all(argv, args)
    commit = _git("rev-parse", "--short", args.rev)
    if not commit:
        progress(f"unknown git revision {args.rev!r}")
        return 2
    extracted = Path(tempfile.mkdtemp(prefix="executionkit-bench-"))
    try:
        extract(args.rev, extracted)
        os.environ[source.ENV_VAR] = str(extracted)
        return measure_all(argv, args, commit=commit)
    finally:
        os.environ.pop(source.ENV_VAR, None)
        shutil.rmtree(extracted, ignore_errors=True)


def measure_all(argv: list[str], args: argparse.Namespace, commit: str | None = None) -> int:
    """Measure what ``args`` ask for, print the report, and save what was asked."""
    dirty = commit is None and bool(_git("status", "--porcelain", "--", "executionkit"))
    commit = commit or _git("rev-parse", "--short", "HEAD") or "unknown"
    raw: dict[str, Any] = {
        "meta": {
            "commit": commit,
            "dirty": dirty,
            "source": "git archive" if args.rev else "working tree",
            "fingerprint_before": source.fingerprint(),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "command": shlex.join(["python", "benchmarks/run.py", *argv]),
            "shapes": args.shapes,
            "sizes": args.sizes,
            "repeat": args.repeat,
            "budget_s": args.budget,
            "timeout_s": args.timeout,
            "load_average_before": _load_average(),
        },
        "speed": [],
    }
    progress(f"executionkit commit {commit}; {raw['meta']['machine']}")
    impls = implementations(args) if "speed" in args.parts else []
    raw["implementations"] = [
        {key: value for key, value in impl.items() if key not in {"python", "script"}}
        for impl in impls
    ]
    if "speed" in args.parts:
        raw["speed"] = measure_speed(args, impls)
    if "makespan" in args.parts:
        raw["makespan"] = measure_makespan(args)
    if "memory" in args.parts:
        raw["memory"] = measure_memory(args)
    if "import" in args.parts:
        raw["importtime"] = measure_import(args)
    raw["meta"]["load_average_after"] = _load_average()
    raw["meta"]["fingerprint_after"] = source.fingerprint()
    text = report.render(raw)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
