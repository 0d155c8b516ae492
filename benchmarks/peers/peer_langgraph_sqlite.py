"""LangGraph's ``SqliteSaver`` (langgraph-checkpoint-sqlite 3.1.2) on the chain of ``stores.py``.

Runs with the Python of ``benchmarks/.venvs/langgraph-sqlite``. The chain is a
``StateGraph`` with one node per step, each depending on the one before, that
returns ``{"outputs": {name: text}}``; the state's ``outputs`` channel merges
those dicts (``operator.or_``), so the state holds every output so far, as a
checkpoint of executionkit does. It is compiled with a ``SqliteSaver`` over a
new database file and run once with ``graph.invoke(..., durability="sync")``
(each checkpoint is written before the next step starts, as ``checkpoint_fn``
is awaited). The time counted is that spent in the saver's ``put`` and
``put_writes``, the calls that store a checkpoint; bytes written are the
process's ``wchar`` over the run, as in ``stores.py``. Prints one JSON line::

    benchmarks/.venvs/langgraph-sqlite/bin/python benchmarks/peers/peer_langgraph_sqlite.py \\
        --case 1000:1000
"""

from __future__ import annotations

import argparse
import importlib
import json
import operator
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import _peer
from store_outputs import text, written_bytes

DISTRIBUTION = "langgraph-checkpoint-sqlite"
VERSION = "3.1.2"


class State(TypedDict, total=False):
    """Every output so far, by step name."""

    outputs: Annotated[dict[str, str], operator.or_]


def node(number: int, size: int) -> Any:
    name = f"s{number}"

    def run(state: State) -> dict[str, Any]:
        del state
        return {"outputs": {name: text(number, size)}}

    return run


def measure(steps: int, size: int) -> dict[str, Any]:
    graph_module = importlib.import_module("langgraph.graph")
    sqlite_module = importlib.import_module("langgraph.checkpoint.sqlite")
    spent = [0]
    saves = [0]

    class TimedSaver(sqlite_module.SqliteSaver):  # type: ignore[misc,name-defined]
        def put(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return super().put(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter_ns() - started
                saves[0] += 1

        def put_writes(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return super().put_writes(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter_ns() - started

    builder: Any = graph_module.StateGraph(State)
    for number in range(steps):
        builder.add_node(f"s{number}", node(number, size))
        builder.add_edge(graph_module.START if number == 0 else f"s{number - 1}", f"s{number}")
    builder.add_edge(f"s{steps - 1}", graph_module.END)
    with tempfile.TemporaryDirectory(prefix="lg-stores-") as folder:
        connection = sqlite3.connect(Path(folder) / "runs.db", check_same_thread=False)
        saver = TimedSaver(connection)
        saver.setup()  # creating the tables is not a checkpoint: done before the clock
        graph: Any = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
        before = written_bytes()
        final = graph.invoke({"outputs": {}}, config, durability="sync")
        after = written_bytes()
        connection.close()
    outputs = final["outputs"]
    if len(outputs) != steps:
        msg = f"the graph recorded {len(outputs)} outputs, expected {steps}"
        raise RuntimeError(msg)
    output_bytes = sum(len(json.dumps(value).encode()) for value in outputs.values())
    return {
        "us_per_checkpoint": spent[0] / steps / 1000,  # per step, as for executionkit's stores
        "checkpoints": saves[0],
        "seconds": spent[0] / 1e9,
        "written": None if before is None or after is None else after - before,
        "output_bytes": output_bytes,
    }


def version() -> str:
    module = importlib.import_module("langgraph.checkpoint.sqlite")
    return _peer.installed(DISTRIBUTION, VERSION, module.__file__)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, help="steps:output size")
    parser.add_argument("--postgres", help=argparse.SUPPRESS)  # stores.py passes it to all
    args = parser.parse_args()
    version()
    steps, size = (int(part) for part in args.case.split(":"))
    print(json.dumps(measure(steps, size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
