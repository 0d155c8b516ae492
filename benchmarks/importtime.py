"""How long ``import executionkit`` takes, and which modules it loads.

Every figure comes from fresh interpreters started in the directory that holds
the package measured (the repository root, or the commit ``run.py --rev``
extracted; see `source`):

- wall time of ``python -c pass``, ``python -c "import asyncio"`` (what any
  asyncio program pays anyway) and ``python -c "import executionkit"``, the
  median of ``runs`` starts each, taken in interleaved rounds;
- the cumulative microseconds ``python -X importtime`` reports for the
  ``executionkit`` line (the median of ``runs`` starts);
- the modules in ``sys.modules`` after the import that a bare interpreter does
  not have, grouped by top-level name.

Bytecode caching is switched on for these interpreters (the suite removes
``PYTHONDONTWRITEBYTECODE`` from their environment and imports once before
timing), as it is for an installed package; otherwise every start would
compile the package from source.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time

import source

_IMPORTTIME_LINE = re.compile(r"^import time:\s*(\d+)\s*\|\s*(\d+)\s*\|(\s*)(\S+)\s*$")
_NEW_MODULES = (
    "import sys; before = set(sys.modules); import executionkit; "
    "print('\\n'.join(sorted(set(sys.modules) - before)))"
)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPATH", None)
    return env


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=source.directory(),
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )


def wall_seconds(codes: list[str], runs: int) -> list[float]:
    """Median wall time of ``python -c code`` for each of ``codes``, over ``runs`` rounds.

    Each round starts every code once, in turn, so that a change of load on the
    machine during the measurement affects them all alike.
    """
    seconds: list[list[float]] = [[] for _ in codes]
    for _ in range(runs):
        for code, times in zip(codes, seconds, strict=True):
            start = time.perf_counter()
            _python("-c", code)
            times.append(time.perf_counter() - start)
    return [statistics.median(times) for times in seconds]


def importtime_us(runs: int) -> int:
    """Median cumulative microseconds of the ``executionkit`` line of ``-X importtime``."""
    found: list[int] = []
    for _ in range(runs):
        report = _python("-X", "importtime", "-c", "import executionkit").stderr
        for line in report.splitlines():
            match = _IMPORTTIME_LINE.match(line)
            if match and not match.group(3).strip(" ") and match.group(4) == "executionkit":
                found.append(int(match.group(2)))
    return int(statistics.median(found))


def new_modules() -> list[str]:
    """Modules ``import executionkit`` adds to a bare interpreter's ``sys.modules``."""
    return _python("-c", _NEW_MODULES).stdout.split()


def measure(runs: int) -> dict[str, object]:
    """All the import figures, as plain data."""
    _python("-c", "import executionkit")  # writes the bytecode caches before timing
    modules = new_modules()
    top_level = sorted({name.partition(".")[0] for name in modules} - {"executionkit"})
    bare, with_asyncio, with_import = wall_seconds(
        ["pass", "import asyncio", "import executionkit"], runs
    )
    return {
        "runs": runs,
        "python_c_pass_s": bare,
        "import_asyncio_s": with_asyncio,
        "import_executionkit_s": with_import,
        "difference_s": with_import - bare,
        "importtime_cumulative_us": importtime_us(runs),
        "new_modules": modules,
        "new_top_level_stdlib": top_level,
        "new_module_count": len(modules),
    }
