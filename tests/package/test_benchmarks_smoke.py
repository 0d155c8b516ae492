"""The benchmark suite runs on a tiny size. Timings are never asserted: they are not pass/fail."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_prints_the_tables_and_saves_the_results(tmp_path: Path) -> None:
    """`run.py --quick --peers none` exits 0, prints rows for us and the baseline, writes files."""
    raw_file = tmp_path / "results.json"
    markdown_file = tmp_path / "results.md"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "run.py"),
        "--quick",
        "--peers",
        "none",
        "--json",
        str(raw_file),
        "--markdown",
        str(markdown_file),
    ]
    # A session of its own, so that a hang is cleaned up with every process it started.
    with subprocess.Popen(  # noqa: S603 - our own interpreter and script
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    assert process.returncode == 0, stderr
    lines = stdout.splitlines()
    assert "| shape | steps | executionkit | hand-written asyncio |" in lines
    for shape in ("chain", "wide", "layered"):
        for size in (20, 60):
            assert any(line.startswith(f"| {shape} | {size} | ") for line in lines), (shape, size)
    for heading in ("### Makespan", "### Peak memory (wide runs)", "### Import time"):
        assert heading in lines
    assert markdown_file.read_text(encoding="utf-8") == stdout

    raw = json.loads(raw_file.read_text(encoding="utf-8"))
    assert [impl["key"] for impl in raw["implementations"]] == ["executionkit", "baseline"]
    speed = raw["speed"]
    assert len(speed) == 3 * 2 * 2
    assert {m["status"] for m in speed} == {"ok"}, [m for m in speed if m["status"] != "ok"]
    checkpoints = {(m["impl"], m["shape"], m["steps"]): m["checkpoints"] for m in speed}
    for impl in ("executionkit", "baseline"):
        # One checkpoint per batch: n for a chain, one for wide, one per layer of 10.
        assert checkpoints[impl, "chain", 60] == 60
        assert checkpoints[impl, "wide", 60] == 1
        assert checkpoints[impl, "layered", 60] == 6
    assert set(raw["makespan"]["runs_s"]) == {"batch", "eager"}
    assert [(m["impl"], m["steps"]) for m in raw["memory"]] == [
        ("executionkit", 1000),
        ("executionkit", 2000),
        ("baseline", 1000),
        ("baseline", 2000),
    ]
    assert "executionkit" in raw["importtime"]["new_modules"]


def test_checkpoint_cost_prints_a_row_per_way_on_tiny_chains() -> None:
    """`checkpoint_cost.py` runs every way in its own process and prints the table."""
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "checkpoint_cost.py"),
        "--sizes",
        "10,20",
        "--repeat",
        "1",
    ]
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "| checkpoint_fn | 10 steps | 20 steps | growth |"
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| none", "| drop", "| keep"]


def test_cancel_soak_prints_a_row_per_schedule() -> None:
    """`cancel_soak.py` runs its trials and prints one row per schedule, exit status 0."""
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "cancel_soak.py"),
        "--trials",
        "5",
        "--seed",
        "7",
    ]
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "| schedule | trials | trials with a broken promise |"
    assert lines[2:4] == ["| batch | 5 | 0 |", "| eager | 5 | 0 |"]


def test_stores_prints_a_row_per_store_and_output_size_on_tiny_chains() -> None:
    """`stores.py --peers none` measures each bundled store in fresh processes; no timings."""
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "stores.py"),
        "--sizes",
        "5,10",
        "--output-sizes",
        "20,100",
        "--bytes-steps",
        "10",
        "--repeat",
        "1",
        "--peers",
        "none",
    ]
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "| store | output | 5 steps | 10 steps | last / first |"
    stores = ("JsonFileStore", "JsonLinesStore", "SQLiteStore")
    rows = [line.split(" | ")[:2] for line in lines[2:8]]
    assert rows == [[f"| {store}", size] for store in stores for size in ("20 B", "100 B")]
    assert lines[8] == ""
    assert lines[9] == "| store | bytes written, 10 steps of 1 KB | output bytes | ratio |"
    assert [line.split(" | ")[0] for line in lines[11:]] == [f"| {store}" for store in stores]
    assert all(line.split(" | ")[2] == "10,020" for line in lines[11:])  # 10 x (1,000 + 2)


def test_map_prints_the_per_item_costs_and_the_stores_on_tiny_maps() -> None:
    """`map.py` measures Step.map, the hand-written loop and the stores in fresh processes."""
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "map.py"),
        "--sizes",
        "5,10",
        "--store-sizes",
        "5,10",
        "--repeat",
        "1",
    ]
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "| µs per item | 5 items | 10 items |"
    assert [line.split(" | ")[0] for line in lines[2:6]] == [
        "| Step.map",
        "| hand-written gather + Semaphore",
        "| ratio",
        "| checkpoints taken by Step.map",
    ]
    assert lines[6] == ""
    assert lines[7].startswith("| store | µs per item, 5 | µs per item, 10 | bytes per item, 5 |")
    rows = [line.split(" | ") for line in lines[9:]]
    assert [row[0] for row in rows] == [
        "| Step.map into JsonLinesStore",
        "| Step.map into SQLiteStore",
        "| the same, one item at a time: JsonLinesStore",
        "| the same, one item at a time: SQLiteStore",
    ]
    # One item at a time: a checkpoint per item, plus the split's, the map's own and the
    # one counting the first item before it starts (format 5's in_flight_items); a store
    # that writes in a thread may fold two of them into one while it writes.
    for row in rows[2:]:
        five, ten = int(row[-2]), int(row[-1].removesuffix(" |"))
        assert 6 <= five <= 8
        assert 11 <= ten <= 13


def test_workers_prints_the_look_and_throughput_tables_on_tiny_sizes() -> None:
    """`workers.py` fills a database, times a worker's looks and drains runs with one worker."""
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "workers.py"),
        "--finished",
        "3",
        "--waiting",
        "2",
        "--repeat",
        "2",
        "--runs",
        "3",
        "--latency",
        "0",
        "--workers",
        "1",
    ]
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "look: 3 finished runs and 2 waiting, one idle worker"
    assert lines[3].startswith("| SQLite | ")
    assert lines[5] == "throughput: 3 runs of 5 steps of 0 ms each"
    assert lines[8].startswith("| SQLite | 1 | ")
    assert len(lines) == 9


def test_virtual_clock_prints_its_table() -> None:
    """`virtual_clock.py` runs the month-long workflow on a clock, twice."""
    command = [sys.executable, str(ROOT / "benchmarks" / "virtual_clock.py"), "--repeat", "2"]
    done = subprocess.run(  # noqa: S603 - our own interpreter and script
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "| real seconds, median | real seconds, worst | time passed on the clock |"
    assert lines[2].endswith(" | 37 days, 0:0" + lines[2].split(" | 37 days, 0:0")[1])
