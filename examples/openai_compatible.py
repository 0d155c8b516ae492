"""Steps that call an OpenAI-compatible chat API, using only the standard library.

Each call POSTs to ``/v1/chat/completions`` (OpenAI, or any server that speaks
its shape: vLLM, llama.cpp, Ollama, LiteLLM, ...) with `urllib.request` in a
worker thread, so steps stay async and run concurrently. The response's
``usage`` block becomes the step's `TokenUsage`::

    "usage": {"prompt_tokens": 812, "completion_tokens": 96, ...}
    -> TokenUsage(input_tokens=812, output_tokens=96, llm_calls=1)

Every request carries the step's idempotency key as an ``Idempotency-Key``
header: the same for each retry and each resume of that step in that run.

Run the summarize -> critique -> revise workflow over a text file::

    export OPENAI_BASE_URL=https://api.openai.com/v1   # or http://localhost:8000
    export OPENAI_API_KEY=sk-...                       # omit for local servers
    python examples/openai_compatible.py notes.txt --checkpoint run.json

Run it again with the same ``--checkpoint`` file after a failure or Ctrl-C and
only the steps that had not finished call the API again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executionkit import (
    PatternResult,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit.events import Event, StepFinished, StepRetried, StepStreamed

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
_DETAIL_CHARS = 200
_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_SERVER_ERROR = 500


class ChatAPIError(Exception):
    """A chat completion request failed, or its response was not usable.

    executionkit recognises a ``status`` of 429 as the provider's rate limit:
    the attempt is booked as ``"rate_limited"``, the step's limit key (if it
    has one) pauses for ``retry_after`` seconds, and the step is tried again
    without spending one of its retries.

    Attributes:
        status: The HTTP status code, or ``None`` when no response arrived
            (a timeout or a connection failure).
        endpoint: The URL that was called.
        retry_after: The seconds the server's ``Retry-After`` header asked to
            wait, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        endpoint: str,
        retry_after: float | None = None,
    ) -> None:
        """Create the error; ``message`` already names the status and endpoint."""
        super().__init__(message)
        self.status = status
        self.endpoint = endpoint
        self.retry_after = retry_after


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds, or None (absent, or an HTTP date)."""
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None


class RetryableChatAPIError(ChatAPIError):
    """A failure worth retrying: HTTP 408, 409, 429 or 5xx, a timeout, or no connection.

    Give steps ``retry_on=(RetryableChatAPIError,)`` so they retry these and
    fail at once on the rest (a bad request or API key will not get better).
    """


def endpoint_for(base_url: str) -> str:
    """Return the chat completions URL for ``base_url``.

    Both ``https://api.openai.com`` and ``https://api.openai.com/v1`` (the form
    the OpenAI SDK's ``OPENAI_BASE_URL`` uses) give
    ``https://api.openai.com/v1/chat/completions``.

    Raises:
        ValueError: If ``base_url`` is not an http or https URL.
    """
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        msg = f"base URL must be an http:// or https:// URL, got {base_url!r}"
        raise ValueError(msg)
    base = base_url.rstrip("/")
    return f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"


def _count(usage: dict[str, Any], key: str, endpoint: str) -> int:
    value = usage.get(key)
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        msg = f"POST {endpoint}: usage.{key} must be a non-negative int, got {value!r}"
        raise ChatAPIError(msg, status=200, endpoint=endpoint)
    return value


def usage_from_response(body: dict[str, Any], endpoint: str = "") -> TokenUsage:
    """Map a chat completion's ``usage`` block to `TokenUsage`; one call either way.

    A response without ``usage`` (some servers omit it) still counts the call,
    with zero tokens, so ``llm_calls`` budgets keep working.
    """
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return TokenUsage(llm_calls=1)
    return TokenUsage(
        input_tokens=_count(usage, "prompt_tokens", endpoint),
        output_tokens=_count(usage, "completion_tokens", endpoint),
        llm_calls=1,
    )


def content_from_response(body: dict[str, Any], endpoint: str = "") -> str:
    """Return ``choices[0].message.content``, or raise `ChatAPIError` saying what is missing."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    if not isinstance(content, str):
        msg = f"POST {endpoint}: response has no text at choices[0].message.content"
        raise ChatAPIError(msg, status=200, endpoint=endpoint)
    return content


def _error_detail(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = None
    detail = message if isinstance(message, str) else text
    return detail[:_DETAIL_CHARS] if detail else "(empty body)"


@dataclass(frozen=True)
class ChatClient:
    """A minimal client for ``POST /v1/chat/completions``.

    Pass it to a run in ``initial_context``: context values are never written
    to checkpoints, so the API key stays out of them.

    Attributes:
        base_url: Where the API lives, with or without the trailing ``/v1``.
        api_key: Sent as ``Authorization: Bearer ...``; ``None`` sends none.
        model: The ``model`` field of every request.
        timeout: Seconds to wait for the connection and for each read.
        stream: Ask for the answer as a stream of pieces, each handed to
            ``current_step().stream`` as it arrives (a person watching the run
            reads it grow); the step's output is still the whole answer.
    """

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    model: str = DEFAULT_MODEL
    timeout: float = 120.0
    stream: bool = False
    endpoint: str = field(init=False)

    def __post_init__(self) -> None:
        """Check the base URL once, so a typo fails before any step runs."""
        object.__setattr__(self, "endpoint", endpoint_for(self.base_url))

    @classmethod
    def from_env(
        cls,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 120.0,
        stream: bool = False,
    ) -> ChatClient:
        """Build a client from the arguments given, else from the environment.

        The variables are ``OPENAI_BASE_URL`` (default `DEFAULT_BASE_URL`),
        ``OPENAI_API_KEY`` (default: none) and ``OPENAI_MODEL`` (default `DEFAULT_MODEL`).
        """
        return cls(
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or None,
            model=model or os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL,
            timeout=timeout,
            stream=stream,
        )

    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        idempotency_key: str | None = None,
        **options: Any,
    ) -> PatternResult[str]:
        """Send one chat completion request; return its text and token usage.

        Inside a step, the usage of the response is reported at once with
        ``current_step().add_usage`` (so it counts even when the answer has no
        text, or the step fails afterwards) and the result's ``cost`` is zero;
        outside a step, the usage is the result's ``cost``.

        Args:
            messages: The conversation, as ``{"role": ..., "content": ...}`` dicts.
            idempotency_key: Sent as the ``Idempotency-Key`` header. Defaults
                to the running step's `StepContext.idempotency_key`; outside a
                step, no header is sent. A step that makes several calls
                should pass a distinct key for each, such as ``f"{key}-2"``.
            **options: Further request fields, such as ``temperature``.

        Raises:
            RetryableChatAPIError: HTTP 408, 409, 429 or 5xx, a timeout, or no connection.
            ChatAPIError: Any other HTTP error, or a response without text.
        """
        if idempotency_key is None:
            try:
                idempotency_key = current_step().idempotency_key
            except RuntimeError:
                idempotency_key = None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        fields: dict[str, Any] = {"model": self.model, "messages": messages, **options}
        if self.stream:
            fields.update(stream=True, stream_options={"include_usage": True})
            headers["Accept"] = "text/event-stream"
        payload = json.dumps(fields).encode()
        body = await asyncio.to_thread(self._post, payload, headers)
        usage = usage_from_response(body, self.endpoint)
        model = body.get("model")
        try:
            step = current_step()
        except RuntimeError:
            step = None
        if step is not None:
            # Paid for as soon as it came back: counted even if the answer turns out
            # unusable below (or the step fails later), as wasted then.
            step.add_usage(usage, model=model if isinstance(model, str) else self.model)
            usage = TokenUsage()  # reported once: not again with the result
        return PatternResult(
            content_from_response(body, self.endpoint),
            cost=usage,
            metadata={"model": model, "id": body.get("id")},
        )

    def _post(self, payload: bytes, headers: dict[str, str]) -> dict[str, Any]:
        """The blocking part, run in a worker thread."""
        endpoint = self.endpoint
        request = urllib.request.Request(endpoint, data=payload, headers=headers, method="POST")  # noqa: S310 - scheme checked by endpoint_for
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - same
                if self.stream:
                    return _streamed(response, endpoint)
                raw = response.read()
        except urllib.error.HTTPError as error:
            with error:
                detail = _error_detail(error.read())
            status = error.code
            kind = (
                RetryableChatAPIError
                if status in _RETRYABLE_STATUSES or status >= _SERVER_ERROR
                else ChatAPIError
            )
            msg = f"POST {endpoint} failed with HTTP {status} {error.reason}: {detail}"
            after = _seconds(error.headers.get("Retry-After"))
            raise kind(msg, status=status, endpoint=endpoint, retry_after=after) from None
        except TimeoutError:
            raise self._timed_out() from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise self._timed_out() from None
            msg = f"POST {endpoint} failed: no connection ({error.reason})"
            raise RetryableChatAPIError(msg, status=None, endpoint=endpoint) from None
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            msg = f"POST {endpoint}: response is not a JSON object: {_error_detail(raw)}"
            raise ChatAPIError(msg, status=200, endpoint=endpoint)
        return body

    def _timed_out(self) -> RetryableChatAPIError:
        msg = f"POST {self.endpoint} timed out after {self.timeout:g} s"
        return RetryableChatAPIError(msg, status=None, endpoint=self.endpoint)


def _streamed(response: Any, endpoint: str) -> dict[str, Any]:
    """Read a server-sent event stream of chunks; hand each piece of text on as it arrives.

    Returns the whole answer shaped as a non-streamed response (``choices``,
    ``usage``, ``model``, ``id``), so the rest of `ChatClient.complete` reads
    it as one. Runs in the request's thread, whose context has the step's
    `current_step` (``asyncio.to_thread`` copies it).
    """
    try:
        step = current_step()
    except RuntimeError:
        step = None
    pieces: list[str] = []
    body: dict[str, Any] = {}
    for chunk in _chunks(response, endpoint):
        for key in ("id", "model", "usage"):
            if chunk.get(key) is not None:
                body[key] = chunk[key]
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content")
            if isinstance(text, str) and text:
                pieces.append(text)
                if step is not None:
                    step.stream(text)
    body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": "".join(pieces)}}]
    return body


def _chunks(response: Any, endpoint: str) -> Any:
    """Each JSON chunk of a server-sent event stream, until ``data: [DONE]``."""
    for raw in response:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            continue  # blank separators, comments, event names
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        try:
            yield json.loads(data)
        except ValueError:
            msg = f"POST {endpoint}: a streamed chunk is not JSON: {_error_detail(raw)}"
            raise ChatAPIError(msg, status=200, endpoint=endpoint) from None
    msg = f"POST {endpoint}: the stream ended before its last chunk (data: [DONE])"
    raise RetryableChatAPIError(msg, status=None, endpoint=endpoint)


# --- the workflow ---------------------------------------------------------------------------

SYSTEM = "You are a careful editor. Answer with the requested text only."


def _ask(prompt: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]


async def summarize(ctx: Any) -> PatternResult[str]:
    """Summarize ``ctx["document"]``."""
    client: ChatClient = ctx["llm"]
    return await client.complete(_ask(f"Summarize this document:\n\n{ctx['document']}"))


async def critique(ctx: Any) -> PatternResult[str]:
    """List what the summary gets wrong or leaves out."""
    client: ChatClient = ctx["llm"]
    prompt = (
        f"Document:\n\n{ctx['document']}\n\nSummary:\n\n{ctx['summarize']}\n\n"
        f"List what the summary gets wrong or leaves out."
    )
    return await client.complete(_ask(prompt))


async def revise(ctx: Any) -> PatternResult[str]:
    """Rewrite the summary to address the critique."""
    client: ChatClient = ctx["llm"]
    prompt = (
        f"Document:\n\n{ctx['document']}\n\nSummary:\n\n{ctx['summarize']}\n\n"
        f"Critique:\n\n{ctx['critique']}\n\nRewrite the summary to address the critique."
    )
    return await client.complete(_ask(prompt))


def build_workflow(
    *, retries: int = 3, retry_delay: float = 2.0, timeout: float | None = None
) -> Workflow:
    """Summarize -> critique -> revise; each step retries rate limits and server errors.

    The run needs ``initial_context={"llm": ChatClient(...), "document": text}``.
    ``timeout`` bounds each attempt in the workflow (the request thread itself is
    bounded by `ChatClient.timeout`).
    """
    settings: dict[str, Any] = {
        "retries": retries,
        "retry_on": (RetryableChatAPIError,),
        "retry_delay": retry_delay,
        "timeout": timeout,
        "version": "prompts-1",
    }
    return Workflow(
        [
            Step("summarize", summarize, **settings),
            Step("critique", critique, depends_on=("summarize",), **settings),
            Step("revise", revise, depends_on=("summarize", "critique"), **settings),
        ]
    )


# --- the command line -----------------------------------------------------------------------

SAMPLE_DOCUMENT = """\
The harbour committee met on Tuesday to review the winter dredging plan. Silt
has narrowed the north channel to 40 metres, and two ferries touched bottom in
January. The contractor proposes dredging in March, before the fishing season,
at a cost of 1.2 million; the committee asked for a second quote and a plan to
keep the south channel open while the work goes on. A decision is due in May.
"""


def _save(path: Path, checkpoint: WorkflowCheckpoint) -> None:
    """Write the checkpoint so a crash mid-write never leaves a torn file."""
    temporary = path.with_name(f"{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as file:
        json.dump(checkpoint.to_dict(), file)
        file.flush()
        os.fsync(file.fileno())
    temporary.replace(path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Summarize, critique and revise a document with an OpenAI-compatible API."
    )
    parser.add_argument("document", nargs="?", type=Path, help="text file (default: a sample)")
    parser.add_argument("--base-url", help=f"default: $OPENAI_BASE_URL or {DEFAULT_BASE_URL}")
    parser.add_argument("--api-key", help="default: $OPENAI_API_KEY")
    parser.add_argument("--model", help=f"default: $OPENAI_MODEL or {DEFAULT_MODEL}")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    parser.add_argument("--checkpoint", type=Path, help="JSON file to save to and resume from")
    parser.add_argument(
        "--stream", action="store_true", help="print each answer to stderr as it arrives"
    )
    return parser


def _show_stream(event: Event) -> None:
    """Print streamed text to stderr as it arrives; a new attempt starts a new line."""
    if isinstance(event, StepStreamed):
        if event.text:
            sys.stderr.write(event.text)
            sys.stderr.flush()
    elif isinstance(event, (StepRetried, StepFinished)):
        sys.stderr.write("\n")


def main(argv: list[str] | None = None) -> int:
    """Run the workflow; print each output and the token usage. Returns the exit code."""
    args = _parser().parse_args(argv)
    document = args.document.read_text(encoding="utf-8") if args.document else SAMPLE_DOCUMENT
    client = ChatClient.from_env(
        base_url=args.base_url,
        api_key=args.api_key,
        model=args.model,
        timeout=args.timeout,
        stream=args.stream,
    )
    path: Path | None = args.checkpoint
    resume_from = None
    if path is not None and path.exists():
        resume_from = WorkflowCheckpoint.from_dict(json.loads(path.read_text(encoding="utf-8")))
        print(f"resuming run {resume_from.run_id} from {path}", file=sys.stderr)

    def save(checkpoint: WorkflowCheckpoint) -> None:
        if path is not None:
            _save(path, checkpoint)

    try:
        result = build_workflow().run_sync(
            {"llm": client, "document": document},
            checkpoint_fn=save,
            resume_from=resume_from,
            on_event=_show_stream if args.stream else None,
        )
    except WorkflowFailed as failed:
        print(failed, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # what completed was checkpointed before this propagated
        print("interrupted", file=sys.stderr)
        return 130
    for name, output in result.outputs.items():
        print(f"== {name} ==\n{output}\n")
    cost = result.cost
    print(
        f"tokens: {cost.input_tokens} in, {cost.output_tokens} out, {cost.llm_calls} calls "
        f"(restored: {', '.join(result.restored) or 'none'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
