"""Markdown tables from the raw results `benchmarks/run.py` collects."""

from __future__ import annotations

import statistics
from typing import Any

BASELINE = "baseline"
OURS = "executionkit"
TIMES = "\N{MULTIPLICATION SIGN}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; numeric-looking columns are right-aligned."""
    align = ["---:" if index > 1 else "---" for index in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(lines)


def number(value: float) -> str:
    """A time or size with as many digits as it deserves."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def ratio(value: float) -> str:
    """A ratio such as ``1.04x`` or ``38x``, with a multiplication sign."""
    return f"{value:.0f}{TIMES}" if value >= 10 else f"{value:.2f}{TIMES}"


def plural(count: int, noun: str) -> str:
    """``1 run``, ``5 runs``."""
    return f"{count} {noun}{'s' * (count != 1)}"


def per_step_us(measurement: dict[str, Any]) -> float | None:
    """Median microseconds per step, or None when there is no timing."""
    if measurement.get("status") != "ok":
        return None
    seconds: list[float] = measurement["runs_s"]
    steps: int = measurement["steps"]
    return statistics.median(seconds) / steps * 1e6


def build_us(measurement: dict[str, Any]) -> float | None:
    """Construction microseconds per step, or None when there is no timing."""
    if measurement.get("status") != "ok":
        return None
    seconds: float = measurement["build_s"]
    steps: int = measurement["steps"]
    return seconds / steps * 1e6


def _status(measurement: dict[str, Any] | None) -> str:
    if measurement is None:
        return "—"
    return {
        "timeout": "timeout",
        "skipped": "skipped",
        "error": "error",
        "unavailable": "unavailable",
    }.get(measurement.get("status", ""), "—")


class Results:
    """Look-ups over the raw results."""

    def __init__(self, raw: dict[str, Any]) -> None:
        """Index the speed measurements by implementation, shape and size."""
        self.raw = raw
        self.impls: list[dict[str, Any]] = raw["implementations"]
        self.shapes: list[str] = raw["meta"]["shapes"]
        self.sizes: list[int] = raw["meta"]["sizes"]
        self.repeat: int = raw["meta"]["repeat"]
        self.by_key: dict[tuple[str, str, int], dict[str, Any]] = {
            (m["impl"], m["shape"], m["steps"]): m for m in raw["speed"]
        }

    def get(self, impl: str, shape: str, size: int) -> dict[str, Any] | None:
        """The measurement of ``impl`` on ``shape`` at ``size``, if there is one."""
        return self.by_key.get((impl, shape, size))

    def us(self, impl: str, shape: str, size: int) -> float | None:
        """Median µs per step, if measured."""
        found = self.get(impl, shape, size)
        return None if found is None else per_step_us(found)

    def peers(self) -> list[dict[str, Any]]:
        """Every implementation but ours and the baseline."""
        return [impl for impl in self.impls if impl["key"] not in {OURS, BASELINE}]

    def timing_cell(self, impl: str, shape: str, size: int) -> str:
        """µs per step, marked when the time budget allowed fewer runs than asked."""
        found = self.get(impl, shape, size)
        value = None if found is None else per_step_us(found)
        if found is None or value is None:
            return _status(found)
        runs = len(found["runs_s"])
        return number(value) + (f" ({plural(runs, 'run')})" if runs < self.repeat else "")

    def ratio_cell(self, top: str, bottom: str, shape: str, size: int) -> str:
        """``top`` ÷ ``bottom`` per-step time, or a dash."""
        upper, lower = self.us(top, shape, size), self.us(bottom, shape, size)
        if upper is None or lower is None:
            return "—"
        return ratio(upper / lower)


def speed_tables(results: Results) -> list[str]:
    """Time per step, ratios, growth, construction and checkpoint counts."""
    labels = [impl["label"] for impl in results.impls]
    keys = [impl["key"] for impl in results.impls]
    rows = [
        [shape, f"{size:,}", *(results.timing_cell(key, shape, size) for key in keys)]
        for shape in results.shapes
        for size in results.sizes
    ]
    parts = [
        "### Time per step",
        "",
        (
            f"Microseconds per step, median of {plural(results.repeat, 'run')} (construction "
            "excluded); `(k runs)` marks a measurement the time budget cut short."
        ),
        "",
        table(["shape", "steps", *labels], rows),
    ]
    baseline_label = next(i["label"] for i in results.impls if i["key"] == BASELINE)
    ratio_headers = [f"executionkit ÷ {baseline_label}"] + [
        f"{peer['label']} ÷ executionkit" for peer in results.peers()
    ]
    ratio_rows = [
        [
            shape,
            f"{size:,}",
            results.ratio_cell(OURS, BASELINE, shape, size),
            *(results.ratio_cell(peer["key"], OURS, shape, size) for peer in results.peers()),
        ]
        for shape in results.shapes
        for size in results.sizes
    ]
    parts += [
        "",
        "### Ratios",
        "",
        (
            "Per-step time ratios from the table above. The first column is executionkit's "
            f"overhead over the hand-written loop (1.00{TIMES} = as fast); the others say how "
            "many times faster executionkit is than each peer."
        ),
        "",
        table(["shape", "steps", *ratio_headers], ratio_rows),
    ]
    smallest = results.sizes[0]
    growth_rows: list[list[str]] = []
    for shape in results.shapes:
        for impl in results.impls:
            first = results.us(impl["key"], shape, smallest)
            cells = []
            for size in results.sizes:
                value = results.us(impl["key"], shape, size)
                cells.append("—" if value is None or first is None else ratio(value / first))
            growth_rows.append([shape, impl["label"], *cells])
    parts += [
        "",
        "### Growth with size",
        "",
        (
            f"Per-step time at each size ÷ per-step time at {smallest:,} steps: 1.00{TIMES} at "
            "every size means a constant cost per step."
        ),
        "",
        table(["shape", "implementation", *(f"{size:,}" for size in results.sizes)], growth_rows),
    ]
    build_rows = []
    checkpoint_rows = []
    for shape in results.shapes:
        for size in results.sizes:
            build_cells = []
            checkpoint_cells = []
            for key in keys:
                found = results.get(key, shape, size)
                value = None if found is None else build_us(found)
                build_cells.append(_status(found) if value is None else number(value))
                checkpoint_cells.append(
                    _status(found)
                    if found is None or found.get("status") != "ok"
                    else f"{found['checkpoints']:,}"
                )
            build_rows.append([shape, f"{size:,}", *build_cells])
            checkpoint_rows.append([shape, f"{size:,}", *checkpoint_cells])
    parts += [
        "",
        "### Construction",
        "",
        (
            "Microseconds per step to build the workflow or graph from the step list "
            "(once per measurement, not part of the times above)."
        ),
        "",
        table(["shape", "steps", *labels], build_rows),
        "",
        "### Checkpoints per run",
        "",
        (
            "What each implementation recorded in one run: its checkpoints (LangGraph: the "
            "saver's checkpoints for the thread; pydantic-graph: the events of `Graph.iter`)."
        ),
        "",
        table(["shape", "steps", *labels], checkpoint_rows),
    ]
    label = {impl["key"]: impl["label"] for impl in results.impls}
    notes = [
        f"- {label[m['impl']]}, {m['shape']}, {m['steps']:,} steps: {m['status']}: {m['reason']}"
        for m in results.raw["speed"]
        if m.get("status") != "ok" and m.get("reason")
    ]
    if notes:
        parts += ["", "Measurements without a time:", "", *notes]
    return parts


def makespan_section(raw: dict[str, Any]) -> list[str]:
    """Batch and eager makespan against the critical path."""
    if "error" in raw:
        return ["### Makespan", "", f"Not measured: {raw['error']}"]
    critical = raw["critical_path_s"]
    rows = [
        ["critical path (computed)", number(critical * 1000), ratio(1.0)],
        ["batch lower bound (computed)", number(raw["batch_bound_s"] * 1000), ""],
    ]
    rows[1][2] = ratio(raw["batch_bound_s"] / critical)
    for schedule in ("batch", "eager"):
        runs = raw["runs_s"].get(schedule)
        if isinstance(runs, list):
            median = statistics.median(runs)
            rows.append(
                [
                    f'executionkit `schedule="{schedule}"`',
                    number(median * 1000),
                    ratio(median / critical),
                ]
            )
        else:
            rows.append([f'executionkit `schedule="{schedule}"`', str(runs), "—"])
    low, high = raw["latency_ms"]
    return [
        "### Makespan",
        "",
        (
            f"A DAG of {raw['steps']} steps and {raw['edges']} edges in layers with random "
            f"dependencies (seed {raw['seed']}); each step sleeps a latency drawn from "
            f"{low:g} to {high:g} ms. Median of {plural(len(raw['runs_s']['batch']), 'run')}."
        ),
        "",
        table(["", "ms", "÷ critical path"], rows),
    ]


def memory_section(raw: list[dict[str, Any]]) -> list[str]:
    """Bytes per step of wide runs at several sizes."""
    if not raw:
        return []
    rows = []
    for entry in raw:
        if "error" in entry:
            rows.append([entry["impl"], f"{entry['steps']:,}", entry["error"], "", ""])
            continue
        steps = entry["steps"]
        rows.append(
            [
                entry["impl"],
                f"{steps:,}",
                number(entry["build_bytes"] / steps),
                number(entry["run_peak_bytes"] / steps),
                number(entry["retained_bytes"] / steps),
            ]
        )
    return [
        "### Peak memory (wide runs)",
        "",
        (
            "Bytes per step traced by tracemalloc, one process per size: what the built "
            "workflow holds, the peak during the run above the memory before it, and what the "
            "result and checkpoints still hold afterwards. Equal figures at every size mean "
            "linear growth."
        ),
        "",
        table(
            ["implementation", "steps", "workflow B/step", "run peak B/step", "kept B/step"],
            rows,
        ),
    ]


def import_section(raw: dict[str, Any]) -> list[str]:
    """Import time against a bare interpreter, and the modules it loads."""
    if "error" in raw:
        return ["### Import time", "", f"Not measured: {raw['error']}"]
    rows = [
        ["`python -c pass`", number(raw["python_c_pass_s"] * 1000)],
        ['`python -c "import asyncio"`', number(raw["import_asyncio_s"] * 1000)],
        ['`python -c "import executionkit"`', number(raw["import_executionkit_s"] * 1000)],
        ["difference to `python -c pass`", number(raw["difference_s"] * 1000)],
        [
            "`-X importtime`, cumulative for `executionkit`",
            number(raw["importtime_cumulative_us"] / 1000),
        ],
    ]
    return [
        "### Import time",
        "",
        (
            f"Wall time of fresh interpreters, median of {plural(raw['runs'], 'start')} each, "
            "bytecode cached."
        ),
        "",
        table(["", "ms"], rows),
        "",
        f"`import executionkit` adds {raw['new_module_count']} modules to a bare "
        "interpreter; by top-level name (besides executionkit's own): "
        + ", ".join(f"`{name}`" for name in raw["new_top_level_stdlib"])
        + ".",
    ]


def render(raw: dict[str, Any]) -> str:
    """The whole report as Markdown."""
    meta = raw["meta"]
    dirty = " with uncommitted changes" if meta["dirty"] else ""
    where = "extracted from git" if meta["source"] == "git archive" else "this checkout"
    lines = [
        "## Results",
        "",
        (
            f"- executionkit: {where}, commit `{meta['commit']}`{dirty} "
            f"(source fingerprint `{meta['fingerprint_before']}`)"
        ),
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}",
        f"- command: `{meta['command']}`",
    ]
    if meta["fingerprint_after"] != meta["fingerprint_before"]:
        lines.append(
            f"- **warning**: executionkit's source changed during the run (fingerprint "
            f"`{meta['fingerprint_after']}` at the end): the figures may mix versions"
        )
    before, after = meta.get("load_average_before"), meta.get("load_average_after")
    if before and after:
        lines.append(
            f"- load average (1, 5, 15 min): {', '.join(map(str, before))} before, "
            f"{', '.join(map(str, after))} after"
        )
    for impl in raw["implementations"]:
        if impl.get("unavailable"):
            lines.append(f"- {impl['label']}: unavailable ({impl['unavailable']})")
        elif impl.get("requirement"):
            lines.append(
                f"- {impl['label']}: `{impl['requirement']}` in its own virtual environment"
            )
    lines.append(
        f"- time budget: a size is skipped when the previous size of the same implementation "
        f"and shape took over {meta['budget_s']:g} s in all, or timed out after "
        f"{meta['timeout_s']:g} s; repeats stop once a measurement has used "
        f"{meta['budget_s']:g} s"
    )
    lines.append("")
    if raw.get("speed"):
        lines += speed_tables(Results(raw))
        lines.append("")
    if "makespan" in raw:
        lines += [*makespan_section(raw["makespan"]), ""]
    if raw.get("memory"):
        lines += [*memory_section(raw["memory"]), ""]
    if "importtime" in raw:
        lines += [*import_section(raw["importtime"]), ""]
    return "\n".join(lines)
