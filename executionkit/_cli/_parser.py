"""The ``executionkit`` argument parser: commands, options, help and epilogs."""

from __future__ import annotations

import argparse
from typing import Any

from executionkit import __version__
from executionkit._cli._run_options import add_run_options

_EXIT_CODES = """\
exit codes:
  0    done
  1    a step failed, or a checkpoint could not be saved (what completed is saved)
  2    usage error or bad input (a missing file, not a checkpoint, a wrong MODULE:ATTR,
       an answer to a step that is not waiting for one, or one its check refuses)
  3    waiting for answers: the questions are printed and what completed is saved;
       run again with --answer NAME=VALUE
  4    another process owns the run (it is running it now), or saved it since this
       command loaded it: nothing ran; run the same command again once that process
       has ended
  130  interrupted with Ctrl-C (what completed is saved)
  143  terminated with SIGTERM (what completed is saved)
"""

_READ_EXIT_CODES = """\
exit codes:
  0    done
  2    usage error or bad input (a missing file, not a checkpoint, a wrong MODULE:ATTR)
"""

_RUN_EPILOG = f"""\
MODULE is imported as with 'python -m': from the current directory or PYTHONPATH.
ATTR names a Workflow, or a function taking no arguments that returns one.
--input values are strings; use --inputs-json for numbers, lists or objects
(--input wins over a key of the file). Each step's output is checkpointed as
soon as it completes, atomically to FILE, or into a database run given as
sqlite:///path.db?run_id=NAME or postgresql://...?run_id=NAME. When it already
holds a checkpoint, the run resumes from it: pass the same input keys again,
since values are never saved. To
resume from a checkpoint of an older version of the workflow, pass
--discard-unknown-steps to drop the steps it no longer has; to run recorded
steps again (and what depends on them), name them with --rerun.

A step built with Step.ask asks a person a question: the run goes on with
everything else, then prints the questions waiting for an answer and exits
with status 3. Answer by running again with the same --checkpoint and
--answer NAME=VALUE (VALUE is read as JSON, else taken as a string: approve=true
is the boolean, approve=yes the string) or --answers-json FILE (a JSON object
of step names to answers; --answer wins over a key of the file).

{_EXIT_CODES}"""


_FORK_EPILOG = f"""\
The parent's checkpoint is the latest of its run, or the one --seq N names
(inspect --history lists them). Each --override VALUE is read as --answer reads
one: JSON, else a string (summarize='"text"' and summarize=text are the same
string). Everything that depends on an overridden or re-run step is dropped
from the fork, so resuming it runs exactly those steps.

A database holds many runs: the fork is saved there under its own run id, and
--run (or ?run_id=) names the parent when the database holds more than one. A
JSON or JSON Lines file holds one run: the fork is saved to a new file beside
it, named after the fork's run id (run.json -> run.RUN_ID.json). The parent is
never changed. The command that resumes the fork is printed.

{_READ_EXIT_CODES}"""


def build_parser() -> argparse.ArgumentParser:
    """The ``executionkit`` argument parser, with its nine commands."""
    parser = argparse.ArgumentParser(
        prog="executionkit",
        description="Resumable workflows of expensive steps, checkpointed where you like.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"executionkit {__version__}")
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

    run = commands.add_parser(
        "run",
        help="run a workflow, checkpointing to a file and resuming from it",
        description=(
            "Import MODULE:ATTR and run it, with progress on stderr. On success its\n"
            "outputs are printed to stdout as a JSON object."
        ),
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("workflow", metavar="MODULE:ATTR", help="the workflow to run")
    run.add_argument(
        "--checkpoint",
        metavar="FILE",
        help=(
            "JSON file (JSON Lines when it ends in .jsonl; or a database run, "
            "sqlite:///path.db?run_id=NAME) to write checkpoints to, and to resume from "
            "when it holds one"
        ),
    )
    _add_inputs(run, "an initial-context value (a string); repeat for more", " (typed values)")
    _add_answers(
        run,
        "answer the question ask step NAME waits for (VALUE: JSON, else a string); repeat",
        "a JSON object of ask step names to answers",
    )
    run.add_argument(
        "--rerun",
        metavar="STEP",
        action="append",
        default=[],
        help="run this recorded step again, and the steps that depend on it; repeat for more",
    )
    run.add_argument(
        "--on-code-change",
        choices=("keep", "rerun", "refuse"),
        default="keep",
        help=(
            "what to do with recorded outputs whose step's code changed since: keep them "
            "and say so (default), rerun them with what depends on them, or refuse to run"
        ),
    )
    run.add_argument(
        "--discard-unknown-steps",
        action="store_true",
        help="resume although the checkpoint records steps the workflow does not have",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help=(
            "print what the run would do (the steps it would run, restore or invalidate, the "
            "questions, the items of maps) and exit 0: nothing runs and nothing is written"
        ),
    )
    add_run_options(run)

    inspect = commands.add_parser(
        "inspect",
        help="show what a checkpoint file holds (imports nothing)",
        description=(
            "Show a checkpoint file: format, run_id, seq, the process that claims the\n"
            "run (one running it now), recorded and failed steps, saved progress,\n"
            "the items recorded of unfinished map steps, the questions\n"
            "waiting for an answer (when asked, until when), token usage and a preview\n"
            "of each output. Nothing is imported or executed unless\n"
            "--workflow is given. --history lists the checkpoints kept of the run (a JSON\n"
            "Lines file or a database with history=True keeps every one), --seq N shows one."
        ),
        epilog=_READ_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument(
        "file",
        metavar="FILE",
        help=(
            "the checkpoint file (JSON, or JSON Lines when it ends in .jsonl), or a database "
            "run (sqlite:///path.db?run_id=NAME); a database without ?run_id= lists its runs"
        ),
    )
    inspect.add_argument(
        "--workflow",
        metavar="MODULE:ATTR",
        help="import this workflow to show the total, the pending steps and the items of maps",
    )
    inspect.add_argument("--json", action="store_true", help="print a JSON object instead")
    inspect.add_argument(
        "--prices",
        metavar="FILE",
        help=(
            "a JSON price file (model to input_per_million and output_per_million dollars, "
            "'*' for any other model): show the bill in dollars too"
        ),
    )
    going_back = inspect.add_mutually_exclusive_group()
    going_back.add_argument(
        "--history",
        action="store_true",
        help=(
            "list the checkpoints kept of the run: seq, time, outputs recorded, those newly "
            "recorded and the failed steps"
        ),
    )
    going_back.add_argument(
        "--seq",
        type=int,
        metavar="N",
        help="show the run's checkpoint of seq N instead of its latest (--history lists them)",
    )

    _add_fork(commands)

    graph = commands.add_parser(
        "graph",
        help="print the workflow's dependency graph (Mermaid or Graphviz dot)",
        description=(
            "Print the steps and their dependencies in declaration order; a map step\n"
            "is labelled [map over X], an ask step [ask]. With --checkpoint, each step\n"
            "is marked done, failed, skipped, waiting (for an answer) or pending, and an\n"
            "unfinished map says how many items are recorded."
        ),
        epilog=_READ_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    graph.add_argument("workflow", metavar="MODULE:ATTR", help="the workflow to draw")
    graph.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="mark steps from this checkpoint file or database run (sqlite:///x.db?run_id=NAME)",
    )
    graph.add_argument(
        "--format",
        choices=("mermaid", "dot"),
        default="mermaid",
        help="mermaid (renders on GitHub; the default) or dot (Graphviz)",
    )
    _add_serve(commands)
    add_inbox_commands(commands)
    return parser


def _add_fork(commands: Any) -> None:
    """The ``fork`` command: a new run from a checkpoint, outputs fixed by hand."""
    fork = commands.add_parser(
        "fork",
        help="make a new run from a checkpoint, with outputs fixed by hand or steps re-run",
        description=(
            "Import MODULE:ATTR, fork the run --checkpoint holds (Workflow.fork) and save\n"
            "the fork's first checkpoint beside it, then print the command that resumes it."
        ),
        epilog=_FORK_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fork.add_argument("workflow", metavar="MODULE:ATTR", help="the workflow of the run")
    fork.add_argument(
        "--checkpoint",
        metavar="LOCATION",
        required=True,
        help=(
            "the parent run: a JSON file (JSON Lines when it ends in .jsonl), or a database, "
            "sqlite:///path.db or postgresql://..., with ?run_id=NAME or --run"
        ),
    )
    fork.add_argument(
        "--run", metavar="RUN", help="the parent run in a database that holds several"
    )
    fork.add_argument(
        "--seq",
        type=int,
        metavar="N",
        help="fork the run's checkpoint of seq N instead of its latest",
    )
    fork.add_argument(
        "--override",
        metavar="STEP=VALUE",
        action="append",
        default=[],
        help=(
            "put VALUE (JSON, else a string) in place of STEP's output; a path sub/step "
            "reaches into a sub-workflow; repeat for more"
        ),
    )
    fork.add_argument(
        "--rerun",
        metavar="STEP",
        action="append",
        default=[],
        help="drop STEP's output so the fork runs it again, with what depends on it; repeat",
    )
    fork.add_argument(
        "--run-id", metavar="NEW", help="the fork's run id (a new random one if not given)"
    )
    fork.add_argument("--note", metavar="TEXT", help="why the fork was made, kept in its lineage")


_SERVE_EPILOG = """\
The page lists every run of LOCATION, newest first, with its status (running,
waiting, failed or finished), and shows each run: its graph, its steps, the
items of its maps, the questions it waits for. A page of a running run follows
it without a reload. Without --workflow the pages are read-only and show the
command that answers a question; with it, a question is answered on the page and
the run resumes in this process, under its claim (--input and --inputs-json give
the initial-context values it needs, as for run: values are never stored).

Only requests addressed to HOST:PORT are answered, and every form carries a
token of this server. Ctrl-C stops it (exit 130), SIGTERM too (exit 143);
a run resumed here is stopped first, with what completed saved.
"""


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="a local web page to watch runs and answer their questions",
        description=(
            "Serve a page over the runs of LOCATION (a checkpoint file, or a database:\n"
            "sqlite:///path.db, postgresql://...). Prints 'serving http://HOST:PORT/'."
        ),
        epilog=_SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "location",
        metavar="LOCATION",
        help="a JSON or JSON Lines checkpoint file, or a database (sqlite:///x.db)",
    )
    serve.add_argument(
        "--workflow",
        metavar="MODULE:ATTR",
        help="the runs' workflow: shows their totals, and answers questions from the page",
    )
    _add_inputs(
        serve,
        "an initial-context value for the runs resumed here (a string); repeat",
        " for the runs resumed here",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=int, default=8765, help="the port (default 8765; 0 picks a free one)"
    )
    add_run_options(serve)


def _add_inputs(parser: argparse.ArgumentParser, one: str, of_file: str = "") -> None:
    """``--input KEY=VALUE`` (``one`` its help) and ``--inputs-json FILE``."""
    parser.add_argument("--input", metavar="KEY=VALUE", action="append", default=[], help=one)
    parser.add_argument(
        "--inputs-json", metavar="FILE", help=f"a JSON object of initial-context values{of_file}"
    )


def _add_answers(parser: argparse.ArgumentParser, one: str, of_file: str) -> None:
    """``--answer NAME=VALUE`` (``one`` its help) and ``--answers-json FILE``."""
    parser.add_argument("--answer", metavar="NAME=VALUE", action="append", default=[], help=one)
    parser.add_argument("--answers-json", metavar="FILE", help=of_file)


_WORKER_EPILOG = """\
A worker carries on, each under its claim, every run of LOCATION that can go on
and nobody runs: runs submitted with 'executionkit submit' (or Workflow.submit),
runs whose process died, runs whose timer is due, runs with an answer saved
('executionkit answer', the page) or a question past its deadline. Start as many
workers on one database as you like: claims keep each run to one of them, and a
worker killed even with kill -9 loses nothing (another takes the run on).

A JSON or JSON Lines file holds one run: a worker on it watches that run. A run
it cannot resume (inputs needed and not stored, a checkpoint this workflow
refuses, a saved answer its check refuses, a spent budget) is left alone, with
the reason shown by 'executionkit inspect' and the page.

Ctrl-C stops it (exit 130), SIGTERM too (exit 143): every run it carries saves
what completed first.
"""

_INBOX_EXIT_CODES = """\
exit codes:
  0    done: nothing ran; a worker carries the run on
  2    usage error or bad input (a missing file, a wrong MODULE:ATTR, a run that
       exists already, a question that is not waiting, an answer its check refuses)
"""


def add_inbox_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``submit``, ``answer`` and ``worker``: runs that go on with nobody watching."""
    submit = commands.add_parser(
        "submit",
        help="store a run for a worker to start (its inputs are stored)",
        description=(
            "Import MODULE:ATTR and store a run of it that has not started, with its\n"
            "inputs, for 'executionkit worker' to run. Prints the run id. The inputs are\n"
            "stored as plain JSON where anyone who reads the store can read them: put\n"
            "secrets in the environment, not in inputs."
        ),
        epilog=_INBOX_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    submit.add_argument("workflow", metavar="MODULE:ATTR", help="the workflow of the run")
    submit.add_argument(
        "--checkpoint",
        metavar="LOCATION",
        required=True,
        help="a database (sqlite:///runs.db, postgresql://...) or a checkpoint file",
    )
    _add_inputs(submit, "an initial-context value (a string); repeat for more")
    submit.add_argument(
        "--metadata-json", metavar="FILE", help="a JSON object the run's checkpoints carry"
    )
    submit.add_argument(
        "--run-id", metavar="ID", help="the run's id (a new random one if not given)"
    )

    answer = commands.add_parser(
        "answer",
        help="save an answer to a question a run waits for (a worker resumes it)",
        description=(
            "Save answers to the questions run RUN of LOCATION waits for, without\n"
            "running anything: 'executionkit worker' resumes the run with them. Each\n"
            "NAME must be a question waiting in the run's latest checkpoint; with\n"
            "--workflow, the ask steps' checks are run on the answers first."
        ),
        epilog=_INBOX_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    answer.add_argument(
        "location",
        metavar="LOCATION",
        help="a database (sqlite:///runs.db, postgresql://...) or a checkpoint file",
    )
    answer.add_argument("--run", metavar="RUN", help="the run (a database holds many)")
    _add_answers(
        answer,
        "the answer to question NAME (VALUE: JSON, else a string); repeat",
        "a JSON object of question names to answers",
    )
    answer.add_argument(
        "--workflow",
        metavar="MODULE:ATTR",
        help="check the answers with the ask steps of this workflow before saving them",
    )

    worker = commands.add_parser(
        "worker",
        help="carry the runs of a location on, for ever (submitted, crashed, due, answered)",
        description=(
            "Import MODULE:ATTR and carry on every run of LOCATION that can go on, each\n"
            "under its claim, until stopped. Logs one line per run started or ended."
        ),
        epilog=_WORKER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker.add_argument(
        "location",
        metavar="LOCATION",
        help="a database (sqlite:///runs.db, postgresql://...) or a checkpoint file",
    )
    worker.add_argument(
        "--workflow", metavar="MODULE:ATTR", required=True, help="the runs' workflow"
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="N",
        help="how many runs this worker carries at once (default 4)",
    )
    worker.add_argument(
        "--poll",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often it looks for runs that can go on (default 2)",
    )
    worker.add_argument(
        "--on-code-change",
        choices=("keep", "rerun", "refuse"),
        default="keep",
        help=(
            "recorded outputs whose step's code changed since: keep them (default), rerun "
            "them, or refuse (the run is left alone, with the steps named)"
        ),
    )
    add_run_options(worker)
