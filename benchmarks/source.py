"""Which executionkit the benchmarks import, and a fingerprint of its source.

By default that is the package in this checkout's working tree. ``run.py
--rev REV`` extracts ``executionkit/`` of a commit into a temporary directory
instead and names it in `ENV_VAR` for every process it starts, so that a
commit can be measured while the working tree changes. The fingerprint (a hash
of the package's ``.py`` files) lets the report tell whether every measurement
saw the same code.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_VAR = "EXECUTIONKIT_BENCH_SOURCE"


def directory() -> Path:
    """The directory that holds the ``executionkit`` package to measure."""
    return Path(os.environ.get(ENV_VAR) or ROOT)


def put_on_path() -> Path:
    """Make ``import executionkit`` find the package to measure; return its directory."""
    where = directory()
    sys.path.insert(0, str(where))
    return where


def fingerprint(where: Path | None = None) -> str:
    """A short hash of every ``.py`` file of the package, by relative path and content."""
    package = (where or directory()) / "executionkit"
    digest = hashlib.sha256()
    for file in sorted(package.rglob("*.py")):
        digest.update(file.relative_to(package).as_posix().encode())
        digest.update(b"\0")
        digest.update(file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:12]
