"""examples/openai_compatible.py against a local server that answers like /v1/chat/completions."""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import pytest

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
)

# The example is a script in examples/, not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import openai_compatible as example

if TYPE_CHECKING:
    from collections.abc import Iterator

DOCUMENT = "The ferry timetable changes in May. Two crossings are added on Sundays."
API_KEY = "sk-test-key"
WAIT = 10.0  # seconds: the bound on every wait, so a broken test fails instead of hanging

Action: TypeAlias = int | Literal["no-usage", "not-json", "no-text", "hang", "cut"]
"""What the server does with one request: answer with that status, omit usage, send a
non-JSON page, answer (with usage) but without text, hang, or (streaming) stop mid-stream."""


@dataclass(frozen=True)
class Seen:
    """One request the server received, and the usage block it answered with (if any)."""

    number: int  # 1 for the first request the server received
    path: str
    headers: dict[str, str]  # names lower-cased: HTTP header names ignore case
    body: dict[str, Any]
    action: Action
    status: int
    usage: dict[str, int] | None


def words(text: str) -> int:
    return len(text.split())


class FakeChatAPI:
    """State shared by the handler threads: a script of actions and what was seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[Seen] = []
        self.script: deque[Action] = deque()
        self.release = threading.Event()  # lets hanging requests finish at teardown
        self.hanging = threading.Event()  # set once a request is hanging
        self.url = ""

    def plan(self, *actions: Action) -> None:
        """Queue what the next requests get; after the queue, every request succeeds."""
        with self.lock:
            self.script.extend(actions)

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Seen:
        """Decide the response to one request and record it before it is sent."""
        with self.lock:
            action: Action = self.script.popleft() if self.script else HTTPStatus.OK
            status = HTTPStatus.OK if isinstance(action, str) else action
            usage = None
            if status == HTTPStatus.OK and action not in {"no-usage", "not-json"}:
                prompt = sum(words(message["content"]) for message in body["messages"])
                usage = {"prompt_tokens": prompt, "completion_tokens": words(reply(body))}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            seen = Seen(len(self.seen) + 1, path, headers, body, action, status, usage)
            self.seen.append(seen)
        if action == "hang":
            self.hanging.set()
            self.release.wait(WAIT)
        return seen

    def requests(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)


def reply(body: dict[str, Any]) -> str:
    """The deterministic answer: the first words of the last message."""
    prompt = body["messages"][-1]["content"]
    return f"reply to {' '.join(prompt.split()[:4])}"


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread

    def __init__(self, api: FakeChatAPI) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (a timeout test) is expected; stay quiet."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        seen = self.server.api.answer(
            self.path, {name.lower(): value for name, value in self.headers.items()}, body
        )
        if seen.status != HTTPStatus.OK:
            error = {"error": {"message": f"fake error {seen.status}", "type": "test"}}
            after = {"Retry-After": "0"} if seen.status == HTTPStatus.TOO_MANY_REQUESTS else {}
            self._send(seen.status, error, after)
            return
        if seen.action == "not-json":
            self._send(HTTPStatus.OK, "<html>Bad gateway page</html>")
            return
        if body.get("stream"):
            self._stream(seen, body)
            return
        answer: dict[str, Any] = {
            "id": f"chatcmpl-{seen.number}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply(body)},
                    "finish_reason": "stop",
                }
            ],
        }
        if seen.usage is not None:
            answer["usage"] = seen.usage
        if seen.action == "no-text":
            answer["choices"][0]["message"]["content"] = None
        self._send(HTTPStatus.OK, answer)

    def _stream(self, seen: Seen, body: dict[str, Any]) -> None:
        """The answer as server-sent events: a chunk per word, then the usage, then [DONE]."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        words_of = reply(body).split(" ")
        pieces = [word if index == 0 else f" {word}" for index, word in enumerate(words_of)]
        base = {"id": f"chatcmpl-{seen.number}", "model": body["model"]}
        for index, piece in enumerate(pieces):
            if seen.action == "cut" and index == 2:
                self.wfile.flush()
                return
            chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(
            f"data: {json.dumps({**base, 'choices': [], 'usage': seen.usage})}\n\n".encode()
        )
        self.wfile.write(b"data: [DONE]\n\n")

    def _send(
        self, status: int, payload: dict[str, Any] | str, headers: dict[str, str] | None = None
    ) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Keep the test output clean."""


@pytest.fixture
def api() -> Iterator[FakeChatAPI]:
    state = FakeChatAPI()
    server = _Server(state)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(WAIT)
        assert not thread.is_alive()


@pytest.fixture
def client(api: FakeChatAPI) -> example.ChatClient:
    return example.ChatClient(api.url, api_key=API_KEY, model="test-model", timeout=WAIT)


def context(client: example.ChatClient) -> dict[str, Any]:
    return {"llm": client, "document": DOCUMENT}


def usage_sum(seen: list[Seen]) -> TokenUsage:
    total = TokenUsage()
    for request in seen:
        usage = request.usage or {}
        total += TokenUsage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), 1)
    return total


def expected_usage(seen: list[Seen]) -> TokenUsage:
    """The same sum, counted from the request bodies instead of the responses."""
    total = TokenUsage()
    for request in seen:
        prompt = sum(words(message["content"]) for message in request.body["messages"])
        total += TokenUsage(prompt, words(reply(request.body)), 1)
    return total


def step_of(request: Seen) -> str:
    """Which workflow step sent ``request``; later prompts quote earlier replies, so last first."""
    prompt = request.body["messages"][-1]["content"]
    for name, marker in (
        ("revise", "Rewrite the summary"),
        ("critique", "List what the summary"),
        ("summarize", "Summarize this document"),
    ):
        if marker in prompt:
            return name
    raise AssertionError(prompt)


# --- the workflow end to end ----------------------------------------------------------------


async def test_streaming_hands_each_piece_to_the_run_and_a_retry_starts_afresh(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    from dataclasses import replace  # noqa: PLC0415

    from executionkit.events import StepStreamed  # noqa: PLC0415

    streaming = replace(client, stream=True)
    api.plan("cut")  # the first answer stops after two pieces: retried, streamed afresh
    events: list[Any] = []
    result = await example.build_workflow(retry_delay=0).run(
        context(streaming), on_event=events.append
    )
    seen = api.requests()
    assert all(request.body["stream"] is True for request in seen)
    texts: dict[tuple[str, int], str] = {}
    for event in events:
        if isinstance(event, StepStreamed):
            key = (event.step, event.attempt)
            texts[key] = texts.get(key, "") + event.text
    for name in ("summarize", "critique", "revise"):
        last = max(attempt for step, attempt in texts if step == name)
        assert texts[name, last] == result.outputs[name]  # the whole answer, once
    assert texts["summarize", 1] == " ".join(result.outputs["summarize"].split(" ")[:2])
    assert result.cost == usage_sum([request for request in seen if request.action != "cut"])


async def test_the_workflow_runs_end_to_end_and_costs_the_sum_of_the_usage_blocks(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    result = await example.build_workflow().run(context(client))
    seen = api.requests()
    assert [step_of(request) for request in seen] == ["summarize", "critique", "revise"]
    assert result.cost == usage_sum(seen) == expected_usage(seen)
    assert result.cost.llm_calls == 3
    assert result.cost.input_tokens > 0
    assert result.cost.output_tokens > 0
    assert dict(result.outputs) == {
        "summarize": "reply to Summarize this document: The",
        "critique": "reply to Document: The ferry timetable",
        "revise": "reply to Document: The ferry timetable",
    }
    # Each prompt carries what the steps before it produced.
    assert result.outputs["summarize"] in seen[1].body["messages"][-1]["content"]
    assert result.outputs["critique"] in seen[2].body["messages"][-1]["content"]
    for request in seen:
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {API_KEY}"
        assert request.headers["content-type"] == "application/json"
        assert request.body["model"] == "test-model"
        assert request.body["messages"][0] == {"role": "system", "content": example.SYSTEM}
    keys = [request.headers["idempotency-key"] for request in seen]
    assert all(re.fullmatch("[0-9a-f]{32}", key) for key in keys)
    assert len(set(keys)) == 3


async def test_a_rate_limit_is_retried_and_only_the_successful_call_is_counted(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    api.plan(HTTPStatus.TOO_MANY_REQUESTS)
    workflow = example.build_workflow(retries=1, retry_delay=0)
    result = await workflow.run(context(client))
    seen = api.requests()
    assert [(step_of(r), r.status) for r in seen] == [
        ("summarize", 429),
        ("summarize", 200),
        ("critique", 200),
        ("revise", 200),
    ]
    assert result.cost == usage_sum(seen[1:]) == expected_usage(seen[1:])
    assert result.cost.llm_calls == 3
    assert seen[0].headers["idempotency-key"] == seen[1].headers["idempotency-key"]
    assert seen[1].body == seen[0].body


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (HTTPStatus.INTERNAL_SERVER_ERROR, True),
        (HTTPStatus.SERVICE_UNAVAILABLE, True),
        (HTTPStatus.BAD_REQUEST, False),
        (HTTPStatus.UNAUTHORIZED, False),
    ],
)
async def test_http_errors_name_the_status_and_endpoint_and_only_transient_ones_retry(
    api: FakeChatAPI, client: example.ChatClient, status: HTTPStatus, retryable: bool
) -> None:
    api.plan(status, status)
    workflow = example.build_workflow(retries=1, retry_delay=0)
    with pytest.raises(WorkflowFailed) as caught:
        await workflow.run(context(client))
    error = caught.value.errors["summarize"]
    assert isinstance(error, example.ChatAPIError)
    assert isinstance(error, example.RetryableChatAPIError) is retryable
    assert error.status == status
    assert error.endpoint == f"{api.url}/v1/chat/completions"
    assert str(error) == (
        f"POST {api.url}/v1/chat/completions failed with HTTP {status.value} "
        f"{status.phrase}: fake error {status.value}"
    )
    assert len(api.requests()) == (2 if retryable else 1)
    assert caught.value.checkpoint.cost == TokenUsage()


async def test_a_429_is_tried_again_without_spending_a_retry(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    """The client's 429 carries the server's Retry-After; executionkit waits it, then again."""
    api.plan(HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.TOO_MANY_REQUESTS)
    workflow = example.build_workflow(retries=0)
    result = await workflow.run(context(client))
    statuses = [(step_of(r), r.status) for r in api.requests()]
    assert statuses[:3] == [("summarize", 429), ("summarize", 429), ("summarize", 200)]
    assert set(result.outputs) >= {"summarize"}
    assert result.spending.wasted == TokenUsage()  # a refused request reported no usage


# --- resuming -------------------------------------------------------------------------------


async def test_resume_skips_recorded_steps_and_reuses_the_idempotency_key(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    """summarize succeeds, critique fails; the resumed run calls only critique and revise."""
    saved: list[str] = []
    api.plan(HTTPStatus.OK, HTTPStatus.BAD_GATEWAY)
    workflow = example.build_workflow(retries=0)
    with pytest.raises(WorkflowFailed):
        await workflow.run(
            context(client), checkpoint_fn=lambda cp: saved.append(json.dumps(cp.to_dict()))
        )
    first = api.requests()
    assert [(step_of(r), r.status) for r in first] == [("summarize", 200), ("critique", 502)]

    checkpoint = WorkflowCheckpoint.from_dict(json.loads(saved[-1]))
    assert list(checkpoint.outputs) == ["summarize"]
    assert checkpoint.cost == usage_sum(first[:1])
    result = await workflow.run(context(client), resume_from=checkpoint)

    seen = api.requests()
    resumed = seen[len(first) :]
    assert [step_of(r) for r in resumed] == ["critique", "revise"]
    assert result.restored == ("summarize",)
    assert result.executed == ("critique", "revise")
    assert result.run_id == checkpoint.run_id
    assert resumed[0].headers["idempotency-key"] == first[1].headers["idempotency-key"]
    assert result.cost == usage_sum([seen[0], *resumed]) == expected_usage([seen[0], *resumed])
    assert result.cost.llm_calls == 3


async def test_resuming_a_finished_run_sends_no_request(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    saved: list[str] = []
    workflow = example.build_workflow()
    first = await workflow.run(
        context(client), checkpoint_fn=lambda cp: saved.append(json.dumps(cp.to_dict()))
    )
    assert len(api.requests()) == 3
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(saved[-1]))
    again = await workflow.run(context(client), resume_from=checkpoint)
    assert len(api.requests()) == 3
    assert again.outputs == first.outputs
    assert again.cost == first.cost
    assert again.restored == ("summarize", "critique", "revise")


async def test_the_idempotency_key_is_the_same_for_a_run_id_and_differs_between_runs(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    workflow = Workflow([Step("summarize", example.summarize)])
    for run_id in ("run-a", "run-b", "run-a"):
        await workflow.run(context(client), run_id=run_id)
    keys = [request.headers["idempotency-key"] for request in api.requests()]
    assert keys[0] == keys[2]
    assert keys[0] != keys[1]


# --- usage mapping --------------------------------------------------------------------------


async def test_a_response_without_usage_counts_the_call_with_zero_tokens(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    api.plan("no-usage")
    result = await example.build_workflow().run(context(client))
    seen = api.requests()
    assert seen[0].usage is None
    assert (
        result.cost
        == usage_sum(seen)
        == TokenUsage(
            expected_usage(seen[1:]).input_tokens, expected_usage(seen[1:]).output_tokens, 3
        )
    )


@pytest.mark.parametrize(
    ("body", "usage"),
    [
        ({}, TokenUsage(0, 0, 1)),
        ({"usage": None}, TokenUsage(0, 0, 1)),
        ({"usage": {}}, TokenUsage(0, 0, 1)),
        ({"usage": {"prompt_tokens": 7}}, TokenUsage(7, 0, 1)),
        ({"usage": {"prompt_tokens": 7, "completion_tokens": None}}, TokenUsage(7, 0, 1)),
        (
            {"usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}},
            TokenUsage(12, 5, 1),
        ),
    ],
)
def test_usage_from_response(body: dict[str, Any], usage: TokenUsage) -> None:
    assert example.usage_from_response(body) == usage


@pytest.mark.parametrize("value", ["7", 7.0, -1, True])
def test_a_malformed_usage_count_is_an_error_naming_the_field(value: object) -> None:
    with pytest.raises(example.ChatAPIError) as caught:
        example.usage_from_response({"usage": {"completion_tokens": value}}, "http://x/v1")
    assert str(caught.value) == (
        f"POST http://x/v1: usage.completion_tokens must be a non-negative int, got {value!r}"
    )
    assert caught.value.status == 200
    assert not isinstance(caught.value, example.RetryableChatAPIError)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"choices": []},
        {"choices": [{"message": {}}]},
        {"choices": [{"message": {"content": None}}]},
    ],
)
def test_a_response_without_text_is_an_error(body: dict[str, Any]) -> None:
    with pytest.raises(example.ChatAPIError) as caught:
        example.content_from_response(body, "http://x/v1")
    assert (
        str(caught.value) == "POST http://x/v1: response has no text at choices[0].message.content"
    )


async def test_a_response_that_is_not_json_is_an_error(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    api.plan("not-json")
    with pytest.raises(example.ChatAPIError) as caught:
        await client.complete([{"role": "user", "content": "hi"}])
    assert str(caught.value) == (
        f"POST {api.url}/v1/chat/completions: response is not a JSON object: "
        f"<html>Bad gateway page</html>"
    )
    assert not isinstance(caught.value, example.RetryableChatAPIError)


async def test_an_answer_without_text_is_paid_for_and_counted_as_wasted(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    """The model answered (and billed) but with nothing usable: the step fails, the
    usage counts, in the run's cost and as waste of that step."""
    api.plan("no-text")
    with pytest.raises(WorkflowFailed) as caught:
        await example.build_workflow().run(context(client))
    seen = api.requests()
    assert len(seen) == 1
    checkpoint = caught.value.checkpoint
    assert checkpoint.cost == usage_sum(seen)
    assert checkpoint.spending.wasted == usage_sum(seen)
    assert [(row.step, row.outcome, row.model) for row in checkpoint.ledger] == [
        ("summarize", "failed", "test-model")
    ]


# --- the client on its own ------------------------------------------------------------------


async def test_a_call_outside_a_step_sends_no_idempotency_key_unless_given_one(
    api: FakeChatAPI, client: example.ChatClient
) -> None:
    messages = [{"role": "user", "content": "one two three"}]
    plain = await client.complete(messages)
    keyed = await client.complete(messages, idempotency_key="abc-1", temperature=0)
    first, second = api.requests()
    assert "idempotency-key" not in first.headers
    assert second.headers["idempotency-key"] == "abc-1"
    assert second.body == {"model": "test-model", "messages": messages, "temperature": 0}
    assert isinstance(plain, PatternResult)
    for result in (plain, keyed):
        assert result.value == "reply to one two three"
        assert result.cost == TokenUsage(3, 5, 1)  # "reply to one two three"
    assert dict(plain.metadata) == {"model": "test-model", "id": "chatcmpl-1"}
    assert dict(keyed.metadata) == {"model": "test-model", "id": "chatcmpl-2"}


async def test_no_api_key_sends_no_authorization_header(api: FakeChatAPI) -> None:
    await example.ChatClient(api.url, timeout=WAIT).complete([{"role": "user", "content": "hi"}])
    assert "authorization" not in api.requests()[0].headers


async def test_a_request_that_times_out_is_a_retryable_error(api: FakeChatAPI) -> None:
    api.plan("hang")
    client = example.ChatClient(api.url, timeout=0.2)
    with pytest.raises(example.RetryableChatAPIError) as caught:
        await client.complete([{"role": "user", "content": "hi"}])
    assert api.hanging.is_set()
    assert caught.value.status is None
    assert str(caught.value) == f"POST {api.url}/v1/chat/completions timed out after 0.2 s"


async def test_no_connection_is_a_retryable_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = example.ChatClient(f"http://127.0.0.1:{port}", timeout=WAIT)
    with pytest.raises(example.RetryableChatAPIError) as caught:
        await client.complete([{"role": "user", "content": "hi"}])
    assert caught.value.status is None
    assert str(caught.value).startswith(
        f"POST http://127.0.0.1:{port}/v1/chat/completions failed: no connection ("
    )


@pytest.mark.parametrize(
    ("base_url", "endpoint"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1/chat/completions"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1/chat/completions"),
        ("https://api.openai.com/v1", "https://api.openai.com/v1/chat/completions"),
        ("https://api.openai.com/v1/", "https://api.openai.com/v1/chat/completions"),
        ("https://proxy.example/openai/v1", "https://proxy.example/openai/v1/chat/completions"),
    ],
)
def test_endpoint_for(base_url: str, endpoint: str) -> None:
    assert example.endpoint_for(base_url) == endpoint
    assert example.ChatClient(base_url).endpoint == endpoint


@pytest.mark.parametrize("base_url", ["file:///etc/passwd", "api.openai.com/v1", "http://"])
def test_a_base_url_that_is_not_http_is_refused(base_url: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"http:// or https:// URL, got {base_url!r}")):
        example.ChatClient(base_url)


def test_from_env_reads_the_environment_and_arguments_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.example/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    from_env = example.ChatClient.from_env()
    assert (from_env.endpoint, from_env.api_key, from_env.model) == (
        "http://env.example/v1/chat/completions",
        "env-key",
        "env-model",
    )
    given = example.ChatClient.from_env(base_url="http://arg.example", api_key="k", model="m")
    assert (given.endpoint, given.api_key, given.model) == (
        "http://arg.example/v1/chat/completions",
        "k",
        "m",
    )
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(name)
    default = example.ChatClient.from_env()
    assert (default.endpoint, default.api_key, default.model) == (
        "https://api.openai.com/v1/chat/completions",
        None,
        example.DEFAULT_MODEL,
    )
    assert "env-key" not in repr(from_env)


# --- the command line -----------------------------------------------------------------------


def test_main_runs_saves_a_checkpoint_and_resumes_from_it(
    api: FakeChatAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tmp_path / "notes.txt"
    document.write_text(DOCUMENT, encoding="utf-8")
    saved = tmp_path / "run.json"
    argv = [str(document), "--base-url", api.url, "--api-key", API_KEY, "--checkpoint", str(saved)]
    api.plan(HTTPStatus.OK, HTTPStatus.UNAUTHORIZED)

    assert example.main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "workflow failed: step 'critique' raised ChatAPIError: POST" in err
    assert list(json.loads(saved.read_text(encoding="utf-8"))["outputs"]) == ["summarize"]

    assert example.main(argv) == 0
    out, err = capsys.readouterr()
    checkpoint = WorkflowCheckpoint.from_dict(json.loads(saved.read_text(encoding="utf-8")))
    assert err == f"resuming run {checkpoint.run_id} from {saved}\n"
    seen = api.requests()
    assert [(step_of(r), r.status) for r in seen] == [
        ("summarize", 200),
        ("critique", 401),
        ("critique", 200),
        ("revise", 200),
    ]
    cost = usage_sum([seen[0], *seen[2:]])
    assert checkpoint.cost == cost
    assert out.endswith(
        f"tokens: {cost.input_tokens} in, {cost.output_tokens} out, {cost.llm_calls} calls "
        f"(restored: summarize)\n"
    )
    assert out.startswith(f"== summarize ==\n{checkpoint.outputs['summarize']}\n")
    assert not saved.with_name("run.json.tmp").exists()
