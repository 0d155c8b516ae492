"""The peers and the virtual environments the suite makes for them.

Each peer gets ``benchmarks/.venvs/<peer>`` (ignored by git), made with this
interpreter's ``venv`` module and filled by ``pip`` from PyPI with one pinned
requirement. Separate environments are needed because ExecutionKit 0.4.0 has
our package's name, and they keep the peers out of our dependencies. An
environment whose marker file records the same requirement is reused; any
other is made afresh. When making one fails (no network, say), the peer is
reported unavailable and the suite goes on without it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
VENVS = BENCHMARKS / ".venvs"
MARKER = "benchmark-requirement.txt"
INSTALL_TIMEOUT = 900.0


@dataclass(frozen=True, slots=True)
class Peer:
    """A library measured beside executionkit."""

    key: str
    label: str
    requirement: str
    script: Path
    also: tuple[str, ...] = ()  # more pinned requirements, installed with the first

    @property
    def requirements(self) -> list[str]:
        """Every pinned requirement of its environment."""
        return [self.requirement, *self.also]

    @property
    def venv(self) -> Path:
        """Where its virtual environment lives."""
        return VENVS / self.key

    @property
    def python(self) -> Path:
        """The interpreter of its virtual environment."""
        return self.venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


PEERS = {
    peer.key: peer
    for peer in (
        Peer(
            "executionkit04",
            "ExecutionKit 0.4.0",
            "executionkit==0.4.0",
            BENCHMARKS / "peers" / "peer_executionkit04.py",
        ),
        Peer(
            "langgraph",
            "LangGraph 1.2.22",
            "langgraph==1.2.22",
            BENCHMARKS / "peers" / "peer_langgraph.py",
        ),
        Peer(
            "pydantic-graph",
            "pydantic-graph 2.68.0",
            "pydantic-graph==2.68.0",
            BENCHMARKS / "peers" / "peer_pydantic_graph.py",
        ),
    )
}


STORE_PEERS = {
    peer.key: peer
    for peer in (
        Peer(
            "langgraph-sqlite",
            "LangGraph SqliteSaver 3.1.2",
            "langgraph-checkpoint-sqlite==3.1.2",
            BENCHMARKS / "peers" / "peer_langgraph_sqlite.py",
            also=("langgraph==1.2.22",),
        ),
        Peer(
            "langgraph-postgres",
            "LangGraph PostgresSaver 3.2.0",
            "langgraph-checkpoint-postgres==3.2.0",
            BENCHMARKS / "peers" / "peer_langgraph_postgres.py",
            also=("langgraph==1.2.22", "psycopg[binary]==3.3.9"),
        ),
    )
}
"""Checkpoint stores of other libraries, measured by ``stores.py`` (not by ``run.py``)."""


def _tail(text: str, lines: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def ensure(peer: Peer, log: list[str]) -> str | None:
    """Make ``peer``'s environment if needed; return why it is unavailable, or None."""
    marker = peer.venv / MARKER
    wanted = " ".join(peer.requirements)
    if peer.python.exists() and marker.exists() and marker.read_text() == wanted:
        return None
    if peer.venv.exists():
        shutil.rmtree(peer.venv)
    steps = (
        ("create the virtual environment", [sys.executable, "-m", "venv", str(peer.venv)]),
        (
            f"pip install {wanted}",
            [
                str(peer.python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                *peer.requirements,
            ],
        ),
    )
    for what, command in steps:
        log.append(f"{peer.key}: {what}")
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"could not {what}: {error}"
        if done.returncode != 0:
            return f"could not {what}: {_tail(done.stderr or done.stdout)}"
    marker.write_text(wanted)
    return None
