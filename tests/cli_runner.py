"""Running ``executionkit`` as a command in tests: in a subprocess, and what it did.

Shared by the CLI test modules; not a test module itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class Outcome:
    """What one command did."""

    code: int
    out: str
    err: str


def subprocess_env() -> dict[str, str]:
    """The environment of a CLI subprocess: this checkout and its examples importable."""
    path = os.pathsep.join([str(ROOT), str(EXAMPLES)])
    return {**os.environ, "PYTHONPATH": path, "PYTHONIOENCODING": "utf-8"}


def run_subprocess(cwd: Path, *args: str) -> Outcome:
    """Run ``python -m executionkit ARGS`` in ``cwd``."""
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-m", "executionkit", *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)
