"""The HTTP side: routes, the checks every request passes, and the headers every answer has.

- ``GET /``: the runs, 50 a page (``?page=N``), of one status (``&status=waiting``)
  and whose id holds a text (``&q=TEXT``); ``GET /run?id=ID``: one run
  (``&child=PATH``: a sub-workflow in progress); ``GET /questions``: every
  question waiting, the oldest asked first, each with its form;
  ``GET /compare?a=ID&b=ID``: two runs side by side; ``GET /output?id=ID&step=NAME``:
  one output whole, as JSON text. ``&live=1`` on a page gives what the page's
  script polls: ``{"live": bool, "header": header, "v": version}`` with
  ``"parts"`` (the parts of the main that changed since the render ``&since=V``,
  by key) or ``"html"`` (the whole main), see `_parts`.
- ``GET /stream?id=ID`` (``&child=PATH``: a sub-workflow's steps): the text the
  run's running steps streamed so far, from
  the events of a run this server resumes (no store read), else from the store's
  inbox where the process running it keeps it (`StreamPublisher`), for the
  page's script to ask for every 100 ms.
- ``POST /answer``: answers a question (fields ``token``, ``run``, ``path``, ``value``,
  and ``back=questions`` to come back to the inbox): with ``--workflow`` the run
  resumes here; without, the answer is saved in the store's inbox for a worker
  (`App.save_answer`) and the page says so (``/run?id=ID&saved=PATH``). Every
  answer is redirected (303) to a page to GET, refused ones too: to the run's
  page with the refusal's id (``/run?id=ID&refused=KEY``, `Refusals`), so that a
  reload never posts the answer again.
- A request whose ``Host`` header is not the address served is refused (DNS
  rebinding); a POST without the server's token is refused; without
  ``--workflow`` every POST but ``/answer`` is refused as read-only.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit

from executionkit._cli._exits import CliError
from executionkit._cli._questions import flag_value
from executionkit._cli._serve._html import document, message_main
from executionkit._cli._serve._markup import html
from executionkit._cli._serve._runs import Unreadable
from executionkit._cli._serve._survey import RunsQuery
from executionkit._cli._text import error_text, say

if TYPE_CHECKING:
    from executionkit._cli._serve._app import App, Shown

PER_PAGE = 50
_MAX_BODY = 1 << 20
REQUEST_TIMEOUT = 30.0
MAX_REQUESTS = 64
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 41\r\nConnection: close\r\n\r\n"
    b"too many requests at once: try again soon"
)
_ASSETS = {"serve.css": "text/css; charset=utf-8", "serve.js": "text/javascript; charset=utf-8"}
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)


class Server(ThreadingHTTPServer):
    """The HTTP server: a thread per request, at most `max_requests` at once; the `App`."""

    daemon_threads = True
    app: App
    url: str
    # Seconds a connection may stay silent (idle, or sending its request slowly).
    request_timeout: float = REQUEST_TIMEOUT
    # Requests served at once; a connection beyond them is answered 503 at once, so
    # stalled clients cannot hold an unbounded number of threads.
    max_requests: int = MAX_REQUESTS

    def server_activate(self) -> None:
        """Listen; and make the slots of the requests served at once."""
        super().server_activate()
        self._slots = threading.BoundedSemaphore(self.max_requests)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve ``request`` in a thread of its own if a slot is free; else answer 503."""
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one request, then give its slot back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class Handler(BaseHTTPRequestHandler):
    """One request: checked, routed to the `App`, answered with the safe headers."""

    server: Server

    def setup(self) -> None:
        """Give the connection the server's timeout: a silent client is dropped, not waited for."""
        super().setup()
        self.connection.settimeout(self.server.request_timeout)

    def version_string(self) -> str:
        """The ``Server`` header: the name alone, no Python version."""
        return "executionkit"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Log nothing: the terminal shows the address served, not every request."""

    def do_GET(self) -> None:
        """Answer a page, its live state, an output or an asset."""
        if not self._host_ok():
            return
        parts = urlsplit(self.path)
        query = {
            key: values[-1]
            for key, values in parse_qs(parts.query, keep_blank_values=True).items()
        }
        try:
            self._route(parts.path, query)
        except Unreadable as exc:
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "Cannot read the location", str(exc))
        except LookupError as exc:
            self._error(HTTPStatus.NOT_FOUND, "Not found", str(exc.args[0]))
        except Exception as exc:  # noqa: BLE001 - a bug of ours or a store's: a page, a line
            say(f"{parts.path}: {error_text(exc)}")
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "Server error", error_text(exc))

    def _route(self, path: str, query: dict[str, str]) -> None:
        """Answer the GET of ``path``: a page, an output, an asset (else 404)."""
        app = self.server.app
        if path == "/":
            asked = RunsQuery.of(
                _page_number(query.get("page")), query.get("status"), query.get("q")
            )
            self._page(app.runs_page(asked), query)
        elif path == "/run" and "id" in query:
            self._run_page(query)
        elif path == "/questions":
            self._page(app.questions_page(), query)
        elif path == "/compare" and "a" in query and "b" in query:
            self._page(app.compare_page(query["a"], query["b"]), query)
        elif path == "/output" and "id" in query and "step" in query:
            self._output(app.output(query["id"], query["step"], query.get("child")))
        elif path == "/stream" and "id" in query:
            self._stream(query["id"], query.get("child"))
        elif path.startswith("/assets/"):
            self._asset(path.removeprefix("/assets/"))
        else:
            self._error(HTTPStatus.NOT_FOUND, "Not found", f"nothing at {path}")

    def do_POST(self) -> None:
        """Answer a question: checked, then the run resumed or the answer saved (or refused)."""
        if not self._host_ok():
            return
        app = self.server.app
        length = self.headers.get("Content-Length", "")
        # ASCII digits only: str.isdigit() takes "²" too, which int() then refuses.
        if not (length.isascii() and length.isdigit()) or int(length) > _MAX_BODY:
            self._error(HTTPStatus.BAD_REQUEST, "Bad request", "a form of at most 1 MiB")
            return
        body = self.rfile.read(int(length)).decode("utf-8", "replace")
        form = {key: values[-1] for key, values in parse_qs(body, keep_blank_values=True).items()}
        if not hmac.compare_digest(form.get("token", "").encode(), app.token.encode()):
            self._error(
                HTTPStatus.FORBIDDEN, "Refused", "the form lacks this server's token: reload it"
            )
            return
        answering = urlsplit(self.path).path == "/answer"
        if app.resumer is None and not answering:
            self._error(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "Read-only",
                "this server runs nothing (it has no --workflow): the one form it takes is an "
                "answer, at /answer, which it saves for a worker",
            )
            return
        if not answering or not {"run", "path", "value"} <= form.keys():
            self._error(
                HTTPStatus.NOT_FOUND,
                "Not found",
                "answers go to /answer, with the fields token, run, path and value",
            )
            return
        self._answer(form["run"], form["path"], form["value"], form.get("back"))

    def _answer(self, run_id: str, path: str, text: str, back: str | None) -> None:
        app = self.server.app
        query = {"id": run_id}
        try:
            value = flag_value("--answer", path, text)
        except CliError as exc:
            refusal: str | None = str(exc)
        else:
            if app.resumer is None:
                refusal = app.save_answer(run_id, path, value)
                query["saved"] = path
            else:
                refusal = app.resumer.answer(run_id, path, value)
        if refusal is not None:
            location = "/run?" + urlencode(
                {"id": run_id, "refused": app.refusals.keep(run_id, refusal)}
            )
        elif back == "questions":
            location = "/questions"
        else:
            location = "/run?" + urlencode(query)
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", location)
        self._common_headers()
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _run_page(self, query: dict[str, str]) -> None:
        """A run's page; a refusal redirected to it whose run is not here: the refusal, 404."""
        app = self.server.app
        page_id = query["id"]
        try:
            shown = app.run_page(
                page_id, query.get("child"), saved=query.get("saved"), refused=query.get("refused")
            )
        except LookupError as exc:
            refusal = app.refusals.get(page_id, query.get("refused"))
            if refusal is None:
                raise
            extra = html('<p>{}</p><p><a href="/">all runs</a></p>', str(exc.args[0]))
            main = message_main("Not answered", refusal, extra)
            page = document("Not answered", app.header, main)
            self._send(HTTPStatus.NOT_FOUND, "text/html; charset=utf-8", page)
            return
        self._page(shown, query)

    def _host_ok(self) -> bool:
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1:
            # Which one would a proxy in front have judged? Refuse rather than guess.
            self._error(HTTPStatus.BAD_REQUEST, "Bad request", "more than one Host header")
            return False
        if hosts and hosts[0] in self.server.app.hosts:
            return True
        self._error(
            HTTPStatus.MISDIRECTED_REQUEST,
            "Wrong host",
            "this server answers only requests addressed to the address it serves",
        )
        return False

    def _page(self, shown: Shown, query: dict[str, str]) -> None:
        app = self.server.app
        header = app.header_of(shown.waiting)
        if query.get("live") == "1":
            # What changed since the render the page shows (``since``): its parts, or all.
            changed = app.renders.since(shown.main, query.get("since"))
            state = {"live": shown.live, "header": header, **changed}
            self._send(HTTPStatus.OK, "application/json", json.dumps(state).encode())
            return
        url = stream = version = None
        path = urlsplit(self.path).path
        if shown.live:  # rebuilt from what was parsed: only ever a path on this server
            asked = {key: value for key, value in query.items() if key != "since"}
            url = f"{path}?{urlencode({**asked, 'live': '1'})}"
            version = app.renders.remember(shown.main)
            if path == "/run":
                shown_run: dict[str, str] = {
                    key: query[key] for key in ("id", "child") if key in query
                }
                stream = f"/stream?{urlencode(shown_run)}"
        page = document(shown.title, header, shown.main, live=url, stream=stream, version=version)
        self._send(HTTPStatus.OK, "text/html; charset=utf-8", page)

    def _stream(self, page_id: str, child: str | None) -> None:
        """What the running steps of ``page_id`` (its sub-workflow ``child``) streamed so far.

        ``{"live": bool, "steps": {name: {"attempt": n, "text": str}}}``: from the
        events of a run resumed here, else from the store's inbox (`App.streams`).
        """
        state = self.server.app.streams(page_id, child)
        self._send(HTTPStatus.OK, "application/json", json.dumps(state).encode())

    def _output(self, text: str) -> None:
        self._send(HTTPStatus.OK, "text/plain; charset=utf-8", text)

    def _asset(self, name: str) -> None:
        kind = _ASSETS.get(name)
        if kind is None:
            self._error(HTTPStatus.NOT_FOUND, "Not found", f"no asset {name}")
            return
        data = resources.files("executionkit._cli._serve").joinpath("assets", name).read_bytes()
        self._send(HTTPStatus.OK, kind, data)

    def _error(self, status: HTTPStatus, title: str, message: str) -> None:
        home = html('<p><a href="/">all runs</a></p>')
        page = document(title, self.server.app.header, message_main(title, message, home))
        self._send(status, "text/html; charset=utf-8", page)

    def _send(self, status: HTTPStatus, kind: str, body: str | bytes) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self._common_headers()
        self.end_headers()
        self.wfile.write(data)

    def _common_headers(self) -> None:
        self.send_header("Content-Security-Policy", _CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")


def _page_number(text: str | None) -> int:
    if text is None or not text.isdigit():
        return 1
    return max(1, min(int(text), 1_000_000))


def page_count(count: int) -> int:
    """How many pages ``count`` runs fill, at least one."""
    return max(1, math.ceil(count / PER_PAGE))
