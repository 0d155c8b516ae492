"""executionkit.stores over hypothesis-drawn hostile data (issue 12, item 4).

Two properties, for every store:

- Hostile JSON text written into the store's file or row (deep nesting, lone
  surrogates, huge ints, NaN, invalid UTF-8, lists where names are expected)
  and read back: ``load`` and ``history`` return a checkpoint or None, or raise
  `CheckpointFormatError` naming the file; a save afterwards writes, or
  refuses with `CheckpointFormatError` or `StaleCheckpointError`.
- Hostile values returned by a step and handed to the store: the save raises
  `CheckpointValueError` naming the store and leaves the previous checkpoint
  loadable, or succeeds, and ``load`` returns the value as JSON gives it back.
"""

from __future__ import annotations

import json
import math
import sqlite3
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from executionkit import (
    CheckpointFormatError,
    CheckpointValueError,
    Step,
    Workflow,
    WorkflowCheckpoint,
    WorkflowFailed,
    current_step,
)
from executionkit.stores import JsonFileStore, JsonLinesStore, SQLiteStore, StaleCheckpointError

if TYPE_CHECKING:
    from collections.abc import Callable

EXAMPLES = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = ["json-file", "json-lines", "sqlite"]


def make_store(kind: str, folder: Path) -> Any:
    if kind == "json-file":
        return JsonFileStore(folder / "run.json")
    if kind == "json-lines":
        return JsonLinesStore(folder / "run.jsonl")
    return SQLiteStore(folder / "runs.db", history=True)


def named(store: Any) -> str:
    return repr(store) if isinstance(store, SQLiteStore) else str(store.path)


def sample_run() -> list[WorkflowCheckpoint]:
    """Checkpoints with every field filled: versions, metadata, context, an error, progress."""

    def paged(_ctx: Any) -> None:
        current_step().save_progress({"page": 3, "seen": ["a", "b"]})
        msg = "rate limited"
        raise RuntimeError(msg)

    workflow = Workflow(
        [
            Step("a", lambda ctx: {"doc": ctx["doc"], "n": [1, 2.5, None, True]}, version="v1"),
            Step("b", lambda _ctx: ["x", {"y": "z"}], depends_on=("a",)),
            Step("c", paged, depends_on=("a",)),
        ]
    )
    taken: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed):
        workflow.run_sync(
            {"doc": "text"}, checkpoint_fn=taken.append, run_id="r", metadata={"job": [1, {}]}
        )
    return taken


SAMPLES = sample_run()
LATER = WorkflowCheckpoint.from_dict({**SAMPLES[-1].to_dict(), "seq": SAMPLES[-1].seq + 5})


# --- hostile JSON text ------------------------------------------------------------------


def nested(depth: int, inner: str, *, as_dict: bool) -> str:
    return (
        ('{"k":' * depth + inner + "}" * depth) if as_dict else "[" * depth + inner + "]" * depth
    )


# Surrogates in these strings are written with surrogateescape: "\udcff" becomes the
# byte 0xff, so they stand for bytes that are not UTF-8.
string_literals = st.one_of(
    st.text(max_size=6).map(json.dumps),
    st.sampled_from(['"\\udce9"', '"a\\ud800"', '"caf\udce9"', '"\udcff"', '"\\u0000"', '""']),
)
leaf_texts = st.one_of(
    st.sampled_from(["null", "true", "false", "0", "-0", "1.5", "-1", "[]", "{}"]),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "1" * 5000, "-" + "9" * 4400]),
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    string_literals,
    st.builds(
        nested,
        st.integers(1, 100_000),
        st.sampled_from(["1", "[]", '"x"']),
        as_dict=st.booleans(),
    ),
    st.sampled_from(['{"a": 1', "[1,]", "tru", '"\\x"', "\udcff", "1 2"]),  # not JSON at all
)
json_texts = st.recursive(
    leaf_texts,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(string_literals, inner), max_size=3).map(
            lambda pairs: "{" + ",".join(f"{key}:{value}" for key, value in pairs) + "}"
        ),
    ),
    max_leaves=6,
)


def paths(value: object, here: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every place in ``value``: the whole, each dict value and each list item, nested."""
    found = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*here, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*here, index))
    return found


def emit(value: object, target: tuple[object, ...], hostile: str, *, key: bool) -> str:
    """``value`` as JSON text with ``hostile`` at ``target`` (as its dict key if ``key``)."""
    if not key and not target:
        return hostile
    if isinstance(value, dict):
        pairs = []
        for name, item in value.items():
            here = bool(target) and target[0] == name
            label = hostile if key and here and len(target) == 1 else json.dumps(name)
            rest = target[1:] if here else ("-",)  # ("-",) matches nothing below
            pairs.append(f"{label}:{emit(item, rest, hostile, key=key)}")
        return "{" + ",".join(pairs) + "}"
    if isinstance(value, list):
        items = [
            emit(item, target[1:] if target and target[0] == index else ("-",), hostile, key=key)
            for index, item in enumerate(value)
        ]
        return "[" + ",".join(items) + "]"
    return json.dumps(value)


@st.composite
def damaged(draw: st.DrawFn, document: object) -> bytes:
    """``document`` as JSON with one value, or one dict key, replaced by hostile text."""
    key = draw(st.booleans())
    places = [path for path in paths(document) if path] if key else paths(document)
    target = draw(st.sampled_from(places))
    if key and not isinstance(target[-1], str):
        key = False  # a list index has no key to damage: damage the item
    hostile = draw(string_literals if key else json_texts)
    return emit(document, target, hostile, key=key).encode("utf-8", "surrogateescape")


def write_damaged(kind: str, store: Any, data: st.DataObject) -> None:
    """Save the sample run, then damage what the store wrote."""
    for checkpoint in SAMPLES:
        store(checkpoint)
    if kind == "json-file":
        store.path.write_bytes(data.draw(damaged(SAMPLES[-1].to_dict())))
    elif kind == "json-lines":
        lines = store.path.read_bytes().splitlines()
        number = data.draw(st.integers(0, len(lines) - 1))
        lines[number] = data.draw(damaged(json.loads(lines[number])))
        store.path.write_bytes(b"".join(line + b"\n" for line in lines))
    else:
        seq = data.draw(st.sampled_from([SAMPLES[-1].seq, SAMPLES[0].seq]))
        text = data.draw(damaged(SAMPLES[-1].to_dict()))
        connection = sqlite3.connect(store.path)
        try:
            with connection:  # stored as TEXT even where the bytes are not UTF-8
                connection.execute(
                    "UPDATE executionkit_headers SET header = CAST(? AS TEXT) WHERE seq = ?",
                    (text, seq),
                )
        finally:
            connection.close()


def reads(kind: str, store: Any) -> list[Any]:
    if kind != "sqlite":
        return [store.load]
    return [store.load, lambda: store.load("r"), lambda: store.history("r")]


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(data=st.data())
def test_damaged_data_only_ever_raises_checkpoint_format_error(
    kind: str, data: st.DataObject
) -> None:
    """Loads give a checkpoint, None or CheckpointFormatError; a later save writes or refuses."""
    with tempfile.TemporaryDirectory() as folder:
        store = make_store(kind, Path(folder))
        write_damaged(kind, store, data)
        for read in reads(kind, make_store(kind, Path(folder))):
            loaded, error = attempt(read, CheckpointFormatError)
            if error is None:
                assert loaded is None or isinstance(loaded, (WorkflowCheckpoint, list))
            else:
                assert str(error).startswith(named(store)), error
        if kind == "sqlite":
            assert store.run_ids() == ["r"]
        fresh = make_store(kind, Path(folder))
        _, error = attempt(lambda: fresh(LATER), CheckpointFormatError, StaleCheckpointError)
        if error is None:
            assert make_store(kind, Path(folder)).load() == LATER
        elif isinstance(error, StaleCheckpointError):
            # A stale save names the store as its repr shows it (the path inside).
            assert str(error).startswith(repr(store)), error
        else:
            assert str(error).startswith(named(store)), error


def attempt(
    call: Callable[[], object], *allowed: type[Exception]
) -> tuple[object, Exception | None]:
    """What ``call`` returned, or the exception of an ``allowed`` type it raised."""
    try:
        return call(), None
    except allowed as exc:
        return None, exc


# --- hostile step outputs ---------------------------------------------------------------


class CollisionError(Exception):
    """Two keys of one dict become the same JSON key ({1: ..., "1": ...})."""


def as_json_gives_it(value: Any) -> Any:
    """What JSON gives back for ``value``: tuples as lists, keys as the str JSON writes."""
    if isinstance(value, (list, tuple)):
        return [as_json_gives_it(item) for item in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = key if isinstance(key, str) else json.dumps(key)
            if name in out:
                raise CollisionError
            out[name] = as_json_gives_it(item)
        return out
    return value


def deep(depth: int, inner: object) -> object:
    for _ in range(depth):
        inner = [inner]
    return inner


# st.text leaves lone surrogates out even when its alphabet has them: join characters.
texts = st.lists(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=6).map(
    "".join
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.just(5000).map(lambda digits: 10**digits),  # past the digit limit
    st.floats(),  # NaN and infinities included
    texts,
)
keys = st.one_of(texts, st.integers(), st.floats(), st.booleans(), st.none(), st.just((1, 2)))
odd_objects = st.sampled_from([{1, 2}, frozenset(), b"bytes", range(2), 1j])
hostile_values = st.recursive(
    st.one_of(scalars, odd_objects),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=3),
    ),
    max_leaves=8,
) | st.builds(deep, st.sampled_from([1, 50, 5000, 20_000]), scalars)


def two_checkpoints(output: object) -> list[WorkflowCheckpoint]:
    taken: list[WorkflowCheckpoint] = []
    workflow = Workflow(
        [Step("good", lambda _ctx: "fine"), Step("odd", lambda _ctx: output, depends_on=("good",))]
    )
    workflow.run_sync(checkpoint_fn=taken.append, run_id="r")
    return taken


@pytest.mark.parametrize("kind", KINDS)
@EXAMPLES
@given(value=hostile_values)
def test_hostile_outputs_fail_the_save_with_checkpoint_value_error_or_round_trip(
    kind: str, value: object
) -> None:
    """The save raises CheckpointValueError, leaving the old checkpoint, or round-trips."""
    first, second = two_checkpoints(value)
    with tempfile.TemporaryDirectory() as folder:
        store = make_store(kind, Path(folder))
        store(first)
        _, error = attempt(lambda: store(second), CheckpointValueError)
        if error is not None:
            assert str(error).startswith(f"{store!r}: cannot store checkpoint seq=2 of run 'r'")
            assert make_store(kind, Path(folder)).load() == first
            return
        assert not _has_nan(value)
        try:
            expected = as_json_gives_it(value)
        except CollisionError:
            reject()  # written as JSON writes it, keeping one of the two values
        loaded = make_store(kind, Path(folder)).load()
        assert loaded is not None
        assert dict(loaded.outputs) == {"good": "fine", "odd": expected}


def _has_nan(value: object) -> bool:
    """Whether a float JSON cannot write is anywhere in ``value`` (depth-first, iteratively)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False
