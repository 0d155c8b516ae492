"""The other process of the claim tests: it claims a run of a store and holds it.

Usage: ``python tests/claim_worker.py KIND PATH RUN_ID``, KIND one of ``json``,
``jsonl``, ``sqlite``. Not a test module (pytest only collects ``test_*.py``).
It prints ``claimed <pid>`` once it holds the claim, then holds it until its stdin
closes (it then leaves the claim and exits) or it is killed.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Callable

Store = JsonFileStore | JsonLinesStore | SQLiteStore
STORES: dict[str, Callable[[str], Store]] = {
    "json": JsonFileStore,
    "jsonl": JsonLinesStore,
    "sqlite": SQLiteStore,
}


def main(kind: str, path: str, run_id: str) -> None:
    """Claim ``run_id`` of the store at ``path``, say so, and hold it until stdin closes."""
    store = STORES[kind](path)
    with store.claim(run_id):
        sys.stdout.write(f"claimed {os.getpid()}\n")
        sys.stdout.flush()
        sys.stdin.read()


if __name__ == "__main__":
    main(*sys.argv[1:])
