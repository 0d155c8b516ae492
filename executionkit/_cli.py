"""The ``executionkit`` command line (``python -m executionkit``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="executionkit",
        description="Resumable workflows of expensive steps, checkpointed where you like.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = commands.add_parser(
        "demo",
        help="run a workflow that fails, is checkpointed to JSON, and resumes",
        description=(
            "Run a bundled 8-step workflow of simulated LLM calls: the first run fails at "
            "one step, the checkpoint file shows what was saved, the second run resumes "
            "from it and skips every step already paid for."
        ),
    )
    demo.add_argument("--no-delay", action="store_true", help="skip the simulated model latency")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from executionkit._demo import run_demo  # noqa: PLC0415 - keep CLI start-up light

        return run_demo(delay=not args.no_delay)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
