"""What every peer script shares: the benchmark protocol on the path, and a version check.

The peer scripts run with the Python of their own virtual environment (made by
`benchmarks/venvs.py`), never with this checkout on ``sys.path``: ExecutionKit
0.4.0 has our package's name. They import their library inside functions, so
that the type checker of this repository, which has none of them installed,
still checks the rest of each script.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))


def installed(distribution: str, version: str, module_file: str | None) -> str:
    """Check that ``distribution`` is at ``version`` and was imported from this environment.

    Returns the version, for the result line. Raises `RuntimeError` otherwise,
    so that a wrong environment never produces figures under the wrong name.
    """
    found = importlib.metadata.version(distribution)
    if found != version:
        msg = f"{distribution} {found} is installed, the benchmark pins {version}"
        raise RuntimeError(msg)
    if module_file is None or not Path(module_file).resolve().is_relative_to(
        Path(sys.prefix).resolve()
    ):
        msg = f"{distribution} was imported from {module_file}, outside {sys.prefix}"
        raise RuntimeError(msg)
    return found
