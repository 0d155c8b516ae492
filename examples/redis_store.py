"""A checkpoint store on Redis: one hash per run, replaced only by a newer ``seq``.

Needs the ``redis`` client (``pip install redis``); executionkit itself never
imports it. Use it like the built-in stores::

    import redis

    store = RedisStore(redis.Redis())
    workflow.run_sync(checkpoint_fn=store, run_id="invoice-42")
    # ... later, in any process that can reach the server:
    workflow.run_sync(checkpoint_fn=store, resume_from=store.load("invoice-42"))

Each run is a hash at ``<key_prefix><run_id>`` with two fields: ``seq`` and
``data`` (the checkpoint's ``to_dict()`` as JSON). The seq check runs inside
Redis as one Lua script, so it is atomic: however many workers save
checkpoints of the same run, an older checkpoint never replaces a newer one.
A stale checkpoint is refused with `StaleCheckpointError`, as the built-in
stores do; saving the very same checkpoint again is harmless. It passes
`executionkit.conformance.check_store` in the test suite, against a real
redis-server.

Run this file to see it work against a server on localhost:6379::

    python examples/redis_store.py
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from executionkit import Step, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit.stores import StaleCheckpointError

if TYPE_CHECKING:
    import redis

# KEYS[1]: the run's hash. ARGV[1]: the checkpoint's seq. ARGV[2]: its JSON.
# Returns 1 when written, 0 when it is the stored checkpoint already, and
# -stored_seq when refused as stale (the stored seq is newer, or equal with
# different contents).
SAVE_SCRIPT = """
local stored = redis.call('HGET', KEYS[1], 'seq')
local seq = tonumber(ARGV[1])
if stored then
  stored = tonumber(stored)
  if seq < stored then return -stored end
  if seq == stored then
    if redis.call('HGET', KEYS[1], 'data') == ARGV[2] then return 0 end
    return -stored
  end
end
redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'data', ARGV[2])
return 1
"""


class RedisStore:
    """Checkpoints in Redis, one hash per run; a ``checkpoint_fn`` with ``load(run_id)``.

    Args:
        client: A ``redis.Redis`` client (with or without ``decode_responses``).
        key_prefix: Prefix of every key this store writes.
    """

    def __init__(self, client: redis.Redis, key_prefix: str = "executionkit:") -> None:
        self.client = client
        self.key_prefix = key_prefix
        self._save = client.register_script(SAVE_SCRIPT)

    def __repr__(self) -> str:
        return f"RedisStore(key_prefix={self.key_prefix!r})"

    def key(self, run_id: str) -> str:
        """The key of a run's hash."""
        return f"{self.key_prefix}{run_id}"

    def __call__(self, checkpoint: WorkflowCheckpoint) -> None:
        """Save ``checkpoint`` unless the server holds a newer one of its run.

        Raises:
            StaleCheckpointError: If the stored checkpoint of the run has a newer
                ``seq``, or the same ``seq`` with different contents.
            ValueError: If the checkpoint has no run_id, or an output is not
                JSON data.
        """
        if checkpoint.run_id is None:
            msg = f"{self!r} keys checkpoints by run_id, and this checkpoint has none"
            raise ValueError(msg)
        try:
            data = json.dumps(checkpoint.to_dict(), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            msg = f"{self!r}: checkpoint seq={checkpoint.seq} is not JSON data: {exc}"
            raise ValueError(msg) from exc
        outcome = int(self._save(keys=[self.key(checkpoint.run_id)], args=[checkpoint.seq, data]))
        if outcome < 0:
            raise StaleCheckpointError(repr(self), checkpoint.run_id, checkpoint.seq, -outcome)

    def load(self, run_id: str) -> WorkflowCheckpoint | None:
        """The latest checkpoint stored for ``run_id``, or None."""
        data: Any = self.client.hget(self.key(run_id), "data")
        if data is None:
            return None
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        return WorkflowCheckpoint.from_dict(json.loads(data))


def demo(client: redis.Redis, run_id: str = "redis-store-demo") -> None:
    """Run a workflow that fails once, then resume it from Redis."""
    store = RedisStore(client, key_prefix="executionkit-demo:")
    client.delete(store.key(run_id))
    attempts: list[str] = []

    def flaky(ctx: Any) -> str:
        attempts.append("translate")
        if len(attempts) == 1:
            msg = "rate limited"
            raise RuntimeError(msg)
        return str(ctx["fetch"]).upper()

    workflow = Workflow(
        [
            Step("fetch", lambda _ctx: "the document"),
            Step("translate", flaky, depends_on=("fetch",)),
        ]
    )
    try:
        workflow.run_sync(checkpoint_fn=store, run_id=run_id)
    except WorkflowFailed as failure:
        print(f"first run failed: {failure.errors['translate']}")
    saved = store.load(run_id)
    assert saved is not None  # noqa: S101 - the failure checkpoint was stored
    print(f"stored in Redis: seq={saved.seq}, done={sorted(saved.outputs)}")
    result = workflow.run_sync(checkpoint_fn=store, resume_from=saved)
    print(f"resumed: ran {list(result.executed)}, restored {list(result.restored)}")
    print(f"output: {result.outputs['translate']!r}")


if __name__ == "__main__":
    import redis as redis_client

    demo(redis_client.Redis(host=sys.argv[1] if len(sys.argv) > 1 else "localhost"))
