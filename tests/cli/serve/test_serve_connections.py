"""The page's server against bad clients, through real sockets: strict headers, bounded waits.

A client that stalls is dropped after the server's timeout; connections beyond the
requests served at once are answered 503 at once, not given a thread each; a
``Content-Length`` that is not ASCII digits and a request with two ``Host``
headers are refused with a response, never with a dropped connection (issue 31).
"""

from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING

import serve_workflows as flows

if TYPE_CHECKING:
    from pathlib import Path

WAIT = 10.0  # seconds the client waits for the server before calling it a failure


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    connection = socket.create_connection((host, int(port)), timeout=WAIT)
    connection.settimeout(WAIT)
    return connection


def _exchange(url: str, request: bytes) -> bytes:
    """Send ``request`` raw; return all the server answers until it closes."""
    with _connect(url) as connection:
        connection.sendall(request)
        return _read_all(connection)


def _read_all(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _host(url: str) -> bytes:
    return url.removeprefix("http://").rstrip("/").encode()


def test_a_content_length_of_other_digits_is_refused_with_400(tmp_path: Path) -> None:
    """ "²" passes str.isdigit(); it is answered 400, not left to kill the request."""
    with flows.serving(str(tmp_path / "runs.json")) as served:
        answer = _exchange(
            served.url,
            b"POST /answer HTTP/1.1\r\nHost: " + _host(served.url) + b"\r\n"
            b"Content-Length: \xb2\r\nConnection: close\r\n\r\n",  # latin-1: "²"
        )
    assert answer.startswith((b"HTTP/1.0 400 ", b"HTTP/1.1 400 "))
    assert b"a form of at most 1 MiB" in answer


def test_two_host_headers_are_refused(tmp_path: Path) -> None:
    """The first Host is ours, the second another's: refused, not judged by the first."""
    with flows.serving(str(tmp_path / "runs.json")) as served:
        answer = _exchange(
            served.url,
            b"GET / HTTP/1.1\r\nHost: " + _host(served.url) + b"\r\n"
            b"Host: evil.example\r\nConnection: close\r\n\r\n",
        )
        one = _exchange(
            served.url,
            b"GET / HTTP/1.1\r\nHost: " + _host(served.url) + b"\r\nConnection: close\r\n\r\n",
        )
    assert answer.split(b"\r\n", 1)[0].endswith(b"400 Bad Request")
    assert b"more than one Host header" in answer
    assert one.split(b"\r\n", 1)[0].endswith(b"200 OK")


def test_a_silent_client_is_dropped_after_the_timeout(tmp_path: Path) -> None:
    """A connection that sends half a request and stalls is closed by the server."""
    with flows.serving(str(tmp_path / "runs.json")) as served:
        served.server.request_timeout = 0.2
        with _connect(served.url) as connection:
            connection.sendall(b"POST /answer HTTP/1.1\r\nHost: ")
            # Closed by the server, long before our own WAIT: recv returns b"".
            assert _read_all(connection) == b""


def test_connections_beyond_the_limit_get_503_at_once(tmp_path: Path) -> None:
    """With two requests served at once, two stalled clients make a third get 503."""
    with flows.serving(str(tmp_path / "runs.json")) as served:
        served.server._slots = threading.BoundedSemaphore(2)  # two requests at once
        stalled = [_connect(served.url) for _ in range(2)]
        try:
            for connection in stalled:
                connection.sendall(b"GET / HTTP/1.1\r\n")  # never finished
            # Each stalled request holds its slot once the server has accepted it.
            answer = b""
            for _ in range(50):
                answer = _exchange(
                    served.url,
                    b"GET / HTTP/1.1\r\nHost: " + _host(served.url) + b"\r\n"
                    b"Connection: close\r\n\r\n",
                )
                if b" 503 " in answer.split(b"\r\n", 1)[0]:
                    break
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable")
            assert answer.endswith(b"too many requests at once: try again soon")
        finally:
            for connection in stalled:
                connection.close()
        # Once they are gone, the server answers again.
        for _ in range(50):
            answer = _exchange(
                served.url,
                b"GET / HTTP/1.1\r\nHost: " + _host(served.url) + b"\r\nConnection: close\r\n\r\n",
            )
            if b" 200 " in answer.split(b"\r\n", 1)[0]:
                break
        assert answer.split(b"\r\n", 1)[0].endswith(b"200 OK")
