"""What ``stores.py`` and its peer scripts share: the outputs of the chain, and bytes written.

Standard library only: the peers import it under their own environment's Python.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def text(number: int, size: int) -> str:
    """The output of step ``number``: ``size`` characters (``size + 2`` JSON bytes).

    Its number, then hexadecimal digits of a hash of it: distinct, the same on
    every run, and as good as incompressible, so that a database that compresses
    large values (PostgreSQL's TOAST) writes them at full size, as it would real
    outputs, rather than a run of one repeated character.
    """
    head = f"{number:05d}"
    rest = max(0, size - len(head))
    return head + hashlib.shake_128(head.encode()).hexdigest((rest + 1) // 2)[:rest]


def written_bytes() -> int | None:
    """Bytes this process has passed to write calls so far, where Linux tells."""
    try:
        with Path("/proc/self/io").open(encoding="ascii") as io:
            for line in io:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None  # pragma: no cover - a /proc/self/io without wchar
