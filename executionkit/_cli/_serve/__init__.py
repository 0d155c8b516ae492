"""``executionkit serve``: a local page to watch the runs of a location and answer their questions.

Standard library only: `http.server` serves pages rendered here (`_html`, with
the graph drawn as SVG by `_svg` and the timeline by `_timeline`; the pages
across runs, `_pages`) from what the
store holds (`_runs`: its checkpoints, and its inbox of submitted runs, saved
answers and runs a worker left alone; `_survey`: every run's latest checkpoint
at a glance, read for each request; `_compare`: two runs side by side;
`_money`: a run's dollars with ``--prices``); with ``--workflow``, answers given
on a page resume their run in this process (`_answers`), without it they are
saved in the inbox for a worker (`App.save_answer`). `_http` checks every
request (its ``Host``, a POST's token) and `_app` builds the pages. The
stylesheet and the script live in ``assets/``.
"""

from __future__ import annotations

import signal
import socket
import threading
from typing import TYPE_CHECKING

from executionkit._cli._exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, CliError
from executionkit._cli._load import load_workflow, read_inputs
from executionkit._cli._location import FileLocation, parse_location
from executionkit._cli._run_options import RunFlags
from executionkit._cli._serve._answers import Resumer, Tracker
from executionkit._cli._serve._app import App
from executionkit._cli._serve._http import Handler, Server
from executionkit._cli._serve._runs import Source
from executionkit._cli._text import out, say

if TYPE_CHECKING:
    import argparse
    from types import FrameType

__all__ = ["App", "serve_command", "start_server"]


def serve_command(args: argparse.Namespace) -> int:
    """Serve ``args.location`` until Ctrl-C (exit 130) or SIGTERM (exit 143)."""
    location = parse_location(args.location)
    context = read_inputs(args)
    if context and args.workflow is None:
        msg = "--input and --inputs-json are what resumes need: they go with --workflow"
        raise CliError(msg)
    flags = RunFlags.of(args)
    try:
        if args.workflow is None and flags.asked:
            msg = "the run options are how runs resumed here run: they go with --workflow"
            raise CliError(msg)
        if flags.history and isinstance(location, FileLocation) and not location.lines:
            msg = (
                f"--history: {location.label} is a JSON file, which keeps only the latest "
                f"checkpoint; a JSON Lines file (.jsonl) or a database keeps every one"
            )
            raise CliError(msg)
        workflow = None if args.workflow is None else load_workflow(args.workflow)
        if workflow is not None:
            flags.check_limits(workflow)
        source = Source(location, workflow, prices=flags.options.get("prices"))
        tracker = Tracker()
        resumer = None
        if workflow is not None:
            resumer = Resumer(source, workflow, context, tracker, flags)
            source.resuming = resumer.busy
        app = App(source, resumer, args.workflow, tracker)
        server = start_server(app, args.host, args.port)
        return _until_stopped(server, app)
    finally:
        flags.close()


def start_server(app: App, host: str, port: int) -> Server:
    """Listen on ``host``:``port`` (0: a free port) for ``app``; `Server.serve_forever` serves.

    Raises:
        CliError: If the address cannot be listened on.
    """
    server_class = _Server6 if ":" in host else Server
    try:
        server = server_class((host, port), Handler)
    except OSError as exc:
        msg = f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        raise CliError(msg) from None
    port = server.server_address[1]
    app.hosts = allowed_hosts(host, port)
    server.app = app
    server.url = f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
    return server


class _Server6(Server):
    address_family = socket.AF_INET6


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` headers a request may carry: the address served (localhost for loopback)."""
    shown = f"[{host}]" if ":" in host else host
    hosts = {f"{shown}:{port}"}
    if host in {"127.0.0.1", "::1"}:
        hosts.add(f"localhost:{port}")
    return frozenset(hosts)


class _Terminated(Exception):  # noqa: N818 - a signal, not an error
    """SIGTERM, raised in the main thread so that the server stops as for Ctrl-C."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise _Terminated


def _until_stopped(server: Server, app: App) -> int:
    """Serve in a thread until a signal; stop the resumes, the server, and return the code."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="executionkit serve"
    )
    previous = signal.signal(signal.SIGTERM, _terminated)
    code = EXIT_OK
    try:
        thread.start()
        out(f"serving {server.url}")
        # A signal the kernel hands to another thread (the server's, a request's) does not
        # interrupt a join blocked in the main thread: a timed one comes back and lets the
        # handler run here.
        while thread.is_alive():
            thread.join(0.25)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except _Terminated:
        code = EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
        if thread.ident is not None:  # started: serve_forever runs, or will see the request
            server.shutdown()
        server.server_close()
        if app.resumer is not None:
            app.resumer.stop()
        app.close()
    say("interrupted; stopped serving" if code == EXIT_INTERRUPTED else "stopped serving")
    return code
