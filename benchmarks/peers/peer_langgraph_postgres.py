"""LangGraph's ``PostgresSaver`` (langgraph-checkpoint-postgres 3.2.0) on the stores.py chain.

Runs with the Python of ``benchmarks/.venvs/langgraph-postgres``. The graph is
that of ``peer_langgraph_sqlite.py`` (one node per step, each depending on the
one before, the state's ``outputs`` channel merging their ``{name: text}``
dicts), compiled with a ``PostgresSaver`` over the empty database that
``--postgres`` names (``stores.py`` makes one per case on the server it
measures ``PostgresStore`` on), connected as LangGraph's ``from_conn_string``
connects (autocommit, no prepared statements, dict rows). It runs once with
``graph.invoke(..., durability="sync")``. The time counted is that spent in the
saver's ``put`` and ``put_writes``; bytes written are the growth of the
server's write-ahead log over the run, as ``stores.py`` counts them for
``PostgresStore``. Prints one JSON line::

    benchmarks/.venvs/langgraph-postgres/bin/python \\
        benchmarks/peers/peer_langgraph_postgres.py --case 1000:1000 --postgres DSN
"""

from __future__ import annotations

import argparse
import importlib
import json
import operator
import sys
import time
from typing import Annotated, Any, TypedDict

import _peer
import pg_server
from store_outputs import text

DISTRIBUTION = "langgraph-checkpoint-postgres"
VERSION = "3.2.0"


class State(TypedDict, total=False):
    """Every output so far, by step name."""

    outputs: Annotated[dict[str, str], operator.or_]


def node(number: int, size: int) -> Any:
    name = f"s{number}"

    def run(state: State) -> dict[str, Any]:
        del state
        return {"outputs": {name: text(number, size)}}

    return run


def measure(steps: int, size: int, dsn: str) -> dict[str, Any]:
    graph_module = importlib.import_module("langgraph.graph")
    postgres_module = importlib.import_module("langgraph.checkpoint.postgres")
    psycopg: Any = importlib.import_module("psycopg")
    rows: Any = importlib.import_module("psycopg.rows")
    spent = [0]
    saves = [0]

    class TimedSaver(postgres_module.PostgresSaver):  # type: ignore[misc,name-defined]
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
    with psycopg.connect(
        dsn, autocommit=True, prepare_threshold=0, row_factory=rows.dict_row
    ) as connection:
        saver = TimedSaver(connection)
        saver.setup()  # creating the tables is not a checkpoint: done before the clock
        graph: Any = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
        before = pg_server.wal_position(dsn)
        final = graph.invoke({"outputs": {}}, config, durability="sync")
        after = pg_server.wal_position(dsn)
    outputs = final["outputs"]
    if len(outputs) != steps:
        msg = f"the graph recorded {len(outputs)} outputs, expected {steps}"
        raise RuntimeError(msg)
    output_bytes = sum(len(json.dumps(value).encode()) for value in outputs.values())
    return {
        "us_per_checkpoint": spent[0] / steps / 1000,  # per step, as for executionkit's stores
        "checkpoints": saves[0],
        "seconds": spent[0] / 1e9,
        "written": after - before,  # by the server, into its write-ahead log
        "output_bytes": output_bytes,
    }


def version() -> str:
    module = importlib.import_module("langgraph.checkpoint.postgres")
    return _peer.installed(DISTRIBUTION, VERSION, module.__file__)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", required=True, help="steps:output size")
    parser.add_argument("--postgres", required=True, help="an empty database's DSN")
    args = parser.parse_args()
    version()
    steps, size = (int(part) for part in args.case.split(":"))
    print(json.dumps(measure(steps, size, args.postgres)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
