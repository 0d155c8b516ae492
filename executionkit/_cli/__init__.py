"""The ``executionkit`` command line (``python -m executionkit``).

Commands: ``demo``, ``run``, ``inspect``, ``graph``, ``fork`` and ``serve``. Exit codes: 0
done, 1 a
step failed (or a checkpoint could not be saved), 2 usage or bad input, 3 the run
waits for answers to its questions (`Step.ask`), 4 another process owns the run or
saved it since it was loaded (nothing ran), 130 interrupted (Ctrl-C), 143
terminated (SIGTERM). Bad input is reported as one
``executionkit: error: ...`` line on stderr, never a traceback. The heavier
imports (stores, progress, the demo) stay inside the commands, so that
``executionkit --help`` and ``inspect`` start quickly.

One module per command (``_run``, ``_inspect``, ``_graph``, ``_fork``), with what they share
in ``_load`` (workflows, checkpoint files, inputs), ``_questions`` (answers given and
questions pending) and ``_text`` (terminal-safe text).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from executionkit._cli._exits import (
    EXIT_BROKEN_PIPE,
    EXIT_CLAIMED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SUSPENDED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    CliError,
)
from executionkit._cli._fork import fork_command
from executionkit._cli._graph import dot, graph_command, mermaid, step_statuses
from executionkit._cli._inspect import describe, inspect_command
from executionkit._cli._parser import build_parser
from executionkit._cli._run import run_command
from executionkit._cli._text import PREVIEW_CHARS, invocation, say

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_CLAIMED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SUSPENDED",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "PREVIEW_CHARS",
    "CliError",
    "describe",
    "dot",
    "main",
    "mermaid",
    "step_statuses",
]


def _submit(args: argparse.Namespace) -> int:
    from executionkit._cli._inbox import submit_command  # noqa: PLC0415 - keep CLI start-up light

    return submit_command(args)


def _answer(args: argparse.Namespace) -> int:
    from executionkit._cli._inbox import answer_command  # noqa: PLC0415 - keep CLI start-up light

    return answer_command(args)


def _worker(args: argparse.Namespace) -> int:
    from executionkit._cli._worker import worker_command  # noqa: PLC0415 - keep CLI start-up light

    return worker_command(args)


def _serve(args: argparse.Namespace) -> int:
    from executionkit._cli._serve import serve_command  # noqa: PLC0415 - keep CLI start-up light

    return serve_command(args)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run_command,
    "inspect": inspect_command,
    "graph": graph_command,
    "fork": fork_command,
    "serve": _serve,
    "submit": _submit,
    "answer": _answer,
    "worker": _worker,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            from executionkit._cli._demo import run_demo  # noqa: PLC0415 - keep CLI start-up light

            return run_demo(delay=not args.no_delay, command=invocation())
        command = _COMMANDS[args.command]
        return command(args)
    except CliError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whoever read stdout stopped early (``| head``): end quietly, as Unix tools do,
        # and keep Python from failing again when it flushes stdout at exit.
        import os  # noqa: PLC0415

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
