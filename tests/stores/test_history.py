"""Going back through a run's checkpoints (issue 22, "History"): listed cheaply, loaded by seq.

One story is run into each store, checkpointed after every step: a map whose
items land one checkpoint each, a step a condition skips, a step that fails,
a question; then a resume that answers it (the failed step succeeds), then a
resume that re-runs a step in the middle, so that the first save of that run
writes some outputs again only to keep their order. Every resume goes through
a new store object, as a new process would. The oracle is what was saved:
`CheckpointInfo.of` each checkpoint as the run handed it over (its
``new_outputs`` are the run's own), and its ``to_dict()``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from pg_fixture import new_database

from executionkit import Step, Workflow, WorkflowCheckpoint, WorkflowFailed
from executionkit._cli import main
from executionkit.stores import (
    CheckpointInfo,
    CheckpointNotKeptError,
    JsonFileStore,
    JsonLinesStore,
    PostgresStore,
    SQLiteStore,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

KINDS = ["json-lines", "sqlite-history", "sqlite", "postgres-history", "postgres"]
JSON_LINES_NOTE = "a JSON Lines file keeps the checkpoints of its current run until compact()"
RUN_ID = "story"


# --- the story -------------------------------------------------------------------------------


@dataclass
class Story:
    """Counts calls, so that a re-run step returns another output than the first time."""

    flaky: int = 0
    summaries: int = 0

    def fail_once(self, _ctx: object) -> str:
        self.flaky += 1
        if self.flaky == 1:
            msg = "rate limited"
            raise RuntimeError(msg)
        return f"ok {self.flaky}"

    def summarize(self, ctx: Any) -> str:
        self.summaries += 1
        return f"summary {self.summaries} of {len(ctx['per'])} parts"

    def workflow(self) -> Workflow:
        """Plain steps inline: on the loop, the checkpoints come in one sequence."""
        return Workflow(
            [
                Step("split", lambda _ctx: ["a", "b", "c"], inline=True),
                Step.map(
                    "per", lambda item, _ctx: item.upper(), over="split", key=str, inline=True
                ),
                Step("flaky", self.fail_once, depends_on=("split",), inline=True),
                Step("skipped", lambda _ctx: 1, when=lambda _ctx: False, inline=True),
                Step.ask("approve", lambda _ctx: "publish?", depends_on=("split",)),
                Step("summarize", self.summarize, depends_on=("per",), inline=True),
                Step(
                    "report",
                    lambda ctx: [ctx["summarize"], ctx["approve"], ctx["flaky"]],
                    depends_on=("summarize", "approve", "flaky"),
                    inline=True,
                ),
            ]
        )


@dataclass
class Target:
    """Where a story is stored: how to open a store on it, and what was saved into it."""

    kind: str
    where: Any  # the file, or the connection string
    saved: list[WorkflowCheckpoint] = field(default_factory=list)
    dicts: list[dict[str, Any]] = field(default_factory=list)
    opened: list[Any] = field(default_factory=list)

    @property
    def keeps_history(self) -> bool:
        return self.kind in {"json-lines", "sqlite-history", "postgres-history"}

    def open(self) -> Any:
        """A new store object on the same file or database, as a new process would make."""
        store: Any
        if self.kind == "json-lines":
            store = JsonLinesStore(self.where)
        elif self.kind.startswith("sqlite"):
            store = SQLiteStore(self.where, history=self.keeps_history)
        else:
            store = PostgresStore(self.where, history=self.keeps_history)
        self.opened.append(store)
        return store

    def checkpoints(self, store: Any, run_id: str | None = RUN_ID) -> list[CheckpointInfo]:
        found: list[CheckpointInfo] = (
            store.checkpoints() if self.kind == "json-lines" else store.checkpoints(run_id)
        )
        return found

    def load(self, store: Any, seq: int | None) -> WorkflowCheckpoint | None:
        found: WorkflowCheckpoint | None = (
            store.load(seq=seq) if self.kind == "json-lines" else store.load(RUN_ID, seq=seq)
        )
        return found

    def kept(self) -> list[WorkflowCheckpoint]:
        return self.saved if self.keeps_history else self.saved[-1:]

    def close(self) -> None:
        for store in self.opened:
            if hasattr(store, "close"):
                store.close()


def make_target(kind: str, folder: Path, request: pytest.FixtureRequest) -> Target:
    if kind == "json-lines":
        return Target(kind, folder / "run.jsonl")
    if kind.startswith("sqlite"):
        return Target(kind, folder / "runs.db")
    return Target(kind, new_database(request.getfixturevalue("pg_server")))


def tell(target: Target, *, check_each: bool = True) -> Story:
    """Run the story into ``target``, three runs, each through a new store object."""
    story = Story()

    def saver(store: Any) -> Callable[[WorkflowCheckpoint], None]:
        def save(checkpoint: WorkflowCheckpoint) -> None:
            store(checkpoint)
            target.saved.append(checkpoint)
            target.dicts.append(json.loads(json.dumps(checkpoint.to_dict())))
            if check_each and target.keeps_history:
                expected = [CheckpointInfo.of(saved) for saved in target.saved]
                assert target.checkpoints(target.open()) == expected

        return save

    store = target.open()
    with pytest.raises(WorkflowFailed):
        story.workflow().run_sync(
            checkpoint_fn=saver(store), checkpoint_every="step", run_id=RUN_ID
        )
    store = target.open()
    story.workflow().run_sync(
        checkpoint_fn=saver(store),
        checkpoint_every="step",
        resume_from=target.load(store, None),
        answers={"approve": True},
    )
    store = target.open()
    story.workflow().run_sync(
        checkpoint_fn=saver(store),
        checkpoint_every="step",
        resume_from=target.load(store, None),
        rerun=["flaky"],
    )
    return story


@pytest.fixture(params=KINDS)
def told(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """The story, stored in one kind of store."""
    yield from _told(request, tmp_path)


@pytest.fixture(params=[kind for kind in KINDS if Target(kind, None).keeps_history])
def told_with_history(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """The story, stored in one kind of store that keeps every checkpoint."""
    yield from _told(request, tmp_path)


def _told(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    target = make_target(request.param, tmp_path, request)
    try:
        tell(target)
        yield target
    finally:
        target.close()


def test_the_story_covers_what_a_listing_must_tell() -> None:
    """The checkpoints of the story hold items, a skip, an error, a question and a re-run."""
    story = Story()
    saved: list[WorkflowCheckpoint] = []
    with pytest.raises(WorkflowFailed):
        story.workflow().run_sync(checkpoint_fn=saved.append, checkpoint_every="step")
    story.workflow().run_sync(
        checkpoint_fn=saved.append,
        checkpoint_every="step",
        resume_from=saved[-1],
        answers={"approve": True},
    )
    rerun_from = len(saved)
    story.workflow().run_sync(
        checkpoint_fn=saved.append, checkpoint_every="step", resume_from=saved[-1], rerun=["flaky"]
    )
    assert [c.seq for c in saved] == list(range(1, len(saved) + 1))
    assert any(c.items for c in saved)
    assert any(c.skipped for c in saved)
    assert any(c.errors for c in saved)
    assert any(c.pending for c in saved)
    first_of_rerun = saved[rerun_from]
    assert first_of_rerun.new_outputs == ("flaky",)
    # The re-run step was recorded before "summarize", which the run keeps: a store
    # that keeps order writes "summarize" again, and must not call it new.
    before = list(saved[rerun_from - 1].outputs)
    assert before.index("flaky") < before.index("summarize")
    assert first_of_rerun.outputs["flaky"] != saved[rerun_from - 1].outputs["flaky"]


# --- listing ---------------------------------------------------------------------------------


def test_checkpoints_lists_every_kept_checkpoint_as_it_was_saved(told: Target) -> None:
    """Seqs in order, times, counts, errors, questions, items and the newly recorded names."""
    store = told.open()
    expected = [CheckpointInfo.of(checkpoint) for checkpoint in told.kept()]
    assert told.checkpoints(store) == expected
    if told.keeps_history:
        assert [info.seq for info in expected] == list(range(1, len(told.saved) + 1))
    else:
        assert [info.seq for info in expected] == [told.saved[-1].seq]


def test_the_first_save_of_a_rerun_lists_only_the_rerun_step_as_new(
    told_with_history: Target,
) -> None:
    """Outputs the save wrote again only to keep their order are not newly recorded."""
    told = told_with_history
    store = told.open()
    listed = {info.seq: info for info in told.checkpoints(store)}
    first = [c for c in told.saved if c.new_outputs == ("flaky",)][-1]  # the re-run's first
    assert listed[first.seq].new_outputs == ("flaky",)
    if told.kind.startswith("sqlite"):
        # The store did write "summarize" again at that seq, with the same text.
        connection = sqlite3.connect(told.where)
        try:
            names = connection.execute(
                "SELECT name FROM executionkit_outputs WHERE added = ? ORDER BY ord",
                (first.seq,),
            ).fetchall()
        finally:
            connection.close()
        assert names == [("summarize",), ("flaky",)]


def test_run_id_none_lists_the_run_saved_to_last(tmp_path: Path) -> None:
    """A database's other runs never mix in; without a run_id, the last one saved is listed."""
    store = SQLiteStore(tmp_path / "runs.db", history=True)
    try:
        first = chain_checkpoints(3, "first")
        second = chain_checkpoints(2, "second")
        for checkpoint in [*first, *second]:
            store(checkpoint)
        assert [info.seq for info in store.checkpoints("first")] == [1, 2, 3]
        assert [(info.run_id, info.seq) for info in store.checkpoints()] == [
            ("second", 1),
            ("second", 2),
        ]
        assert store.checkpoints("nobody") == []
        assert SQLiteStore(tmp_path / "none.db").checkpoints() == []
        assert not (tmp_path / "none.db").exists()
    finally:
        store.close()


def test_prune_leaves_the_kept_checkpoints_listed_and_loadable(tmp_path: Path) -> None:
    """After prune, the listing and load(seq=) see exactly the checkpoints kept."""
    target = Target("sqlite-history", tmp_path / "runs.db")
    try:
        tell(target, check_each=False)
        store = target.open()
        # Kept: the checkpoint before the re-run's first save, and those after it.
        assert store.prune(RUN_ID, keep_last=3) == len(target.saved) - 3
        kept = target.saved[-3:]
        assert store.checkpoints(RUN_ID) == [CheckpointInfo.of(c) for c in kept]
        with pytest.raises(CheckpointNotKeptError) as caught:
            store.load(RUN_ID, seq=1)
        assert caught.value.kept == tuple(c.seq for c in kept)
    finally:
        target.close()


# --- loading one -----------------------------------------------------------------------------


def test_load_seq_rebuilds_each_kept_checkpoint_exactly(told: Target) -> None:
    """to_dict() of load(seq=k) equals what checkpoint k was when saved, as load() rebuilds it.

    The outputs and the items of each map come back in the order they were
    recorded; ``step_info`` as a mapping (as `load` gives it: the stores keep
    no order between the steps it describes besides the recorded ones).
    """
    store = told.open()
    kept = told.kept()
    dicts = told.dicts[-len(kept) :]
    for checkpoint, saved in zip(kept, dicts, strict=True):
        loaded = told.load(store, checkpoint.seq)
        assert loaded is not None
        assert loaded.to_dict() == saved
        assert loaded == checkpoint
        assert list(loaded.outputs) == list(saved["outputs"])
        assert {name: list(entry["outputs"]) for name, entry in loaded.items.items()} == {
            name: list(entry["outputs"]) for name, entry in saved["items"].items()
        }
    latest = told.load(store, None)
    assert latest is not None
    assert latest.to_dict() == dicts[-1]


def test_a_seq_not_kept_raises_naming_the_seqs_kept(told: Target) -> None:
    """CheckpointNotKeptError (a LookupError) names the store, the run and what it keeps."""
    store = told.open()
    last = told.saved[-1].seq
    wanted = [0, last + 1] if told.keeps_history else [1, last - 1, last + 1]
    for seq in wanted:
        with pytest.raises(CheckpointNotKeptError) as caught:
            told.load(store, seq)
        error = caught.value
        assert isinstance(error, LookupError)
        assert (error.run_id, error.seq) == (RUN_ID, seq)
        kept = f"seq 1-{last}" if told.keeps_history else f"seq {last}"
        message = f"{store!r}, run {RUN_ID!r}: keeps no checkpoint seq={seq}; it keeps {kept}"
        if told.kind == "json-lines":
            message += (
                " (a JSON Lines file keeps the checkpoints of its current run until compact())"
            )
        elif not told.keeps_history:
            message += " (only the latest: a store keeps every one with history=True)"
        assert str(error) == message
        assert error.kept == tuple(c.seq for c in told.kept())


@pytest.mark.parametrize("kind", ["json-lines", "sqlite"])
def test_load_seq_of_nothing_saved_is_none_and_seq_must_be_an_int(
    kind: str, tmp_path: Path
) -> None:
    """No checkpoint at all: None, as load() gives; a seq that is not an int: TypeError."""
    store: Any = JsonLinesStore(tmp_path / "run.jsonl") if kind == "json-lines" else None
    if store is None:
        store = SQLiteStore(tmp_path / "runs.db")
    try:
        assert store.load(seq=1) is None
        assert store.checkpoints() == []
        for bad in ("1", True, 1.0):
            with pytest.raises(TypeError, match=r"^seq must be an int, got "):
                store.load(seq=bad)
    finally:
        if hasattr(store, "close"):
            store.close()


# --- JSON Lines: the current run only --------------------------------------------------------


def test_json_lines_lists_only_the_files_current_run(tmp_path: Path) -> None:
    """Lines from before the file started over (another run) are neither listed nor loaded."""
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    earlier = chain_checkpoints(5, "earlier")
    for checkpoint in earlier:
        store(checkpoint)
    target = Target("json-lines", path)
    tell(target, check_each=False)
    fresh = JsonLinesStore(path)
    assert fresh.checkpoints() == [CheckpointInfo.of(c) for c in target.saved]
    for checkpoint, saved in zip(target.saved, target.dicts, strict=True):
        loaded = fresh.load(seq=checkpoint.seq)
        assert loaded is not None
        assert loaded.to_dict() == saved
    # seq 1-5 of the earlier run are lines of the file, but not of its run.
    with pytest.raises(CheckpointNotKeptError) as caught:
        fresh.load(seq=len(target.saved) + 1)
    assert caught.value.run_id == RUN_ID
    assert len(path.read_text().splitlines()) == len(earlier) + len(target.saved)


def test_json_lines_ignores_a_torn_last_line_and_lists_one_line_after_compact(
    tmp_path: Path,
) -> None:
    """The listing reads the lines load() reads: not a torn one; compact leaves the latest."""
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    saved = chain_checkpoints(4, "r")
    for checkpoint in saved:
        store(checkpoint)
    with path.open("ab") as file:
        file.write(b'{"s": 5, "n": {"s4": ["half')
    assert [info.seq for info in JsonLinesStore(path).checkpoints()] == [1, 2, 3, 4]
    store.compact()
    listed = JsonLinesStore(path).checkpoints()
    assert [info.seq for info in listed] == [4]
    assert listed[0].new_outputs == ("s0", "s1", "s2", "s3")  # one line holds them all now
    loaded = JsonLinesStore(path).load(seq=4)
    assert loaded is not None
    assert loaded.to_dict() == saved[-1].to_dict()


def test_a_damaged_line_fails_the_listing_as_it_fails_load(tmp_path: Path) -> None:
    """A line that is not a checkpoint line is named by file and line, by listing and loading."""
    path = tmp_path / "run.jsonl"
    store = JsonLinesStore(path)
    for checkpoint in chain_checkpoints(3, "r"):
        store(checkpoint)
    lines = path.read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), "errors": ["not", "an", "object"]})
    path.write_text("\n".join(lines) + "\n")
    message = f"{path}:2: not a checkpoint line ('errors' must be an object)"
    from executionkit import CheckpointFormatError  # noqa: PLC0415

    with pytest.raises(CheckpointFormatError) as caught:
        JsonLinesStore(path).checkpoints()
    assert str(caught.value) == message
    lines[1] = "[]"
    path.write_text("\n".join(lines) + "\n")
    for read in (JsonLinesStore(path).checkpoints, lambda: JsonLinesStore(path).load(seq=1)):
        with pytest.raises(CheckpointFormatError, match=r":2: not a checkpoint line"):
            read()


# --- listing costs O(checkpoints), not O(checkpoints x outputs) -----------------------------


def wide_levels(levels: int, width: int) -> Workflow:
    """``levels`` batches of ``width`` steps, each batch depending on the one before."""
    steps: list[Step] = []
    for level in range(levels):
        before = (f"l{level - 1}s0",) if level else ()
        steps.extend(
            Step(f"l{level}s{n}", returns([level, n]), depends_on=before) for n in range(width)
        )
    return Workflow(steps)


def returns(value: object) -> Callable[[object], object]:
    """A step function returning ``value``."""

    def run(_ctx: object) -> object:
        return value

    return run


@dataclass
class Counted:
    """Calls of ``json.loads`` and of ``WorkflowCheckpoint.from_dict`` while it is active."""

    loads: int = 0
    rebuilds: int = 0


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Counted]:
    """Start counting: every store decodes JSON through ``json.loads``."""

    def start() -> Counted:
        counts = Counted()
        real_loads = json.loads
        real_from_dict = WorkflowCheckpoint.from_dict.__func__  # type: ignore[attr-defined]

        def loads(*args: Any, **kwargs: Any) -> Any:
            counts.loads += 1
            return real_loads(*args, **kwargs)

        def from_dict(cls: type[WorkflowCheckpoint], data: Any) -> WorkflowCheckpoint:
            counts.rebuilds += 1
            return real_from_dict(cls, data)  # type: ignore[no-any-return]

        monkeypatch.setattr(json, "loads", loads)
        monkeypatch.setattr(WorkflowCheckpoint, "from_dict", classmethod(from_dict))
        return counts

    return start


@pytest.mark.parametrize("kind", ["json-lines", "sqlite-history", "postgres-history"])
def test_listing_100_checkpoints_decodes_no_output(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, counted: Callable[[], Counted]
) -> None:
    """One JSON document per checkpoint (a header, or a line), no output row, no rebuild.

    100 checkpoints of 10 new outputs each: the old way (`history`) decodes every
    output row once and validates every checkpoint, 1,000 outputs and 100 rebuilds
    at least; listing decodes 100 headers or lines and rebuilds nothing.
    """
    target = make_target(kind, tmp_path, request)
    try:
        store = target.open()
        wide_levels(100, 10).run_sync(checkpoint_fn=store, run_id=RUN_ID)
        listing = counted()
        infos = target.checkpoints(target.open())
        assert len(infos) == 100
        assert [info.step_index for info in infos] == list(range(10, 1001, 10))
        assert all(len(info.new_outputs) == 10 for info in infos)
        assert (listing.loads, listing.rebuilds) == (100, 0)
        if kind != "json-lines":
            old = counted()
            assert len(target.open().history(RUN_ID)) == 100
            assert old.loads >= 100 + 1000
            assert old.rebuilds == 100
        one = counted()
        loaded = target.load(target.open(), 50)
        assert loaded is not None
        assert loaded.step_index == 500
        assert one.rebuilds == 1
    finally:
        target.close()


# --- the command line ------------------------------------------------------------------------


def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["inspect", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_target(kind: str, tmp_path: Path) -> tuple[Target, str]:
    if kind == "json-lines":
        target = Target(kind, tmp_path / "run.jsonl")
        return target, str(target.where)
    target = Target("sqlite-history", tmp_path / "runs.db")
    return target, f"sqlite:///{target.where}?run_id={RUN_ID}"


@pytest.mark.parametrize("kind", ["json-lines", "sqlite"])
def test_cli_history_lists_the_checkpoints_in_text(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per checkpoint: seq, time, outputs, new ones, failed steps, questions, items."""
    target, location = cli_target(kind, tmp_path)
    try:
        tell(target, check_each=False)
        code, out, err = inspect(capsys, location, "--history")
    finally:
        target.close()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:3] == [
        f"file        {location.replace(f'?run_id={RUN_ID}', '')}",
        f"run_id      {RUN_ID}",
        f"kept        {len(target.saved)} checkpoints, seq 1-{len(target.saved)}",
    ]
    rows = lines[3 : 3 + len(target.saved)]
    for row, checkpoint in zip(rows, target.saved, strict=True):
        assert row.startswith(f"  seq {checkpoint.seq:<2}  {checkpoint.created_at}  ")
    described = [row.split("  ", 3)[-1] for row in rows]
    assert described[:7] == [
        "1 output; new: split",
        "1 output",
        "1 output",  # the map counts its first item before it starts (in_flight_items)
        "1 output; 1 map item recorded",
        "1 output; 2 map items recorded",
        "1 output; 3 map items recorded",
        "2 outputs; new: per; failed: flaky; 1 waiting for an answer",
    ]
    assert described[-2:] == ["5 outputs; new: flaky", "6 outputs; new: report"]
    assert lines[-1].endswith(" --seq N")
    assert lines[-1].startswith("show one with: ")


@pytest.mark.parametrize("kind", ["json-lines", "sqlite"])
def test_cli_history_json_is_each_checkpoint_info(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--history --json``: the run and each `CheckpointInfo` as an object."""
    target, location = cli_target(kind, tmp_path)
    try:
        tell(target, check_each=False)
        code, out, _ = inspect(capsys, location, "--history", "--json")
    finally:
        target.close()
    assert code == 0
    data = json.loads(out)
    assert data["run_id"] == RUN_ID
    assert data["checkpoints"] == [
        {
            "run_id": RUN_ID,
            "seq": c.seq,
            "created_at": c.created_at,
            "step_index": c.step_index,
            "new_outputs": list(c.new_outputs),
            "errors": list(c.errors),
            "pending": len(c.pending),
            "items": sum(len(entry["outputs"]) for entry in c.items.values()),
        }
        for c in target.saved
    ]


@pytest.mark.parametrize("kind", ["json-lines", "sqlite"])
def test_cli_seq_shows_that_checkpoint_as_inspect_shows_the_latest(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--seq 7`` shows checkpoint 7: its seq, failure, question and outputs; --json too."""
    target, location = cli_target(kind, tmp_path)
    try:
        tell(target, check_each=False)
        code, out, err = inspect(capsys, location, "--seq", "7")
        _, as_json, _ = inspect(capsys, location, "--seq", "7", "--json")
    finally:
        target.close()
    assert (code, err) == (0, "")
    assert "seq         7\n" in out
    assert "failed      flaky: RuntimeError: rate limited\n" in out
    assert "waiting     approve" in out
    data = json.loads(as_json)
    assert (data["seq"], data["recorded"], list(data["waiting"])) == (
        7,
        ["split", "per"],
        ["approve"],
    )
    assert data["failed"] == {"flaky": "RuntimeError: rate limited"}


def test_cli_seq_not_kept_is_an_error_naming_the_seqs_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 and one line: the location, then the store's message naming what it keeps."""
    target, location = cli_target("json-lines", tmp_path)
    tell(target, check_each=False)
    code, out, err = inspect(capsys, location, "--seq", "99")
    assert (code, out) == (2, "")
    assert err == (
        f"executionkit: error: {location}: CheckpointNotKeptError: JsonLinesStore({location!r}), "
        f"run {RUN_ID!r}: keeps no checkpoint seq=99; it keeps seq 1-{len(target.saved)} "
        f"({JSON_LINES_NOTE})\n"
    )
    sqlite_target = Target("sqlite", tmp_path / "latest.db")
    try:
        tell(sqlite_target, check_each=False)
    finally:
        sqlite_target.close()
    url = f"sqlite:///{sqlite_target.where}"
    code, _, err = inspect(capsys, f"{url}?run_id={RUN_ID}", "--seq", "1")
    last = sqlite_target.saved[-1].seq
    assert code == 2
    assert err.endswith(
        f"keeps no checkpoint seq=1; it keeps seq {last} "
        f"(only the latest: a store keeps every one with history=True)\n"
    )
    code, _, err = inspect(capsys, url, "--history")
    assert code == 2
    assert err == (
        f"executionkit: error: inspect --history {url}: name the run in the database, "
        f"as in '{url}?run_id=NAME'\n"
    )


def test_cli_a_json_file_keeps_one_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--history`` of a JSON file lists its one checkpoint; ``--seq`` of another fails."""
    path = tmp_path / "run.json"
    store = JsonFileStore(path)
    saved = chain_checkpoints(3, "r")
    for checkpoint in saved:
        store(checkpoint)
    code, out, _ = inspect(capsys, str(path), "--history")
    assert code == 0
    assert out.splitlines() == [
        f"file        {path}",
        "run_id      r",
        "kept        1 checkpoint, seq 3",
        f"  seq 3  {saved[-1].created_at}  3 outputs",
        "(a JSON file keeps only its latest checkpoint, not what it newly recorded)",
    ]
    code, out, _ = inspect(capsys, str(path), "--seq", "3")
    assert (code, "seq         3\n" in out) == (0, True)
    code, out, err = inspect(capsys, str(path), "--seq", "2")
    assert (code, out) == (2, "")
    assert err == (
        f"executionkit: error: {path}: a JSON file keeps only its latest checkpoint, seq=3; "
        f"it has no seq=2\n"
    )


def test_cli_history_and_seq_cannot_be_given_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse refuses both at once (exit 2), and --history refuses --workflow."""
    with pytest.raises(SystemExit) as caught:
        main(["inspect", "run.jsonl", "--history", "--seq", "1"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    code, _, err = inspect(capsys, str(tmp_path / "x.jsonl"), "--history", "--workflow", "m:w")
    assert code == 2
    assert "--history lists what the store keeps and imports nothing" in err


# --- helpers ---------------------------------------------------------------------------------


def chain_checkpoints(n: int, run_id: str) -> list[WorkflowCheckpoint]:
    """The ``n`` checkpoints of a chain of ``n`` steps, one per step."""
    taken: list[WorkflowCheckpoint] = []
    steps = [
        Step(f"s{i}", returns(f"out {i}"), depends_on=(f"s{i - 1}",) if i else ())
        for i in range(n)
    ]
    Workflow(steps).run_sync(checkpoint_fn=taken.append, run_id=run_id)
    assert len(taken) == n
    return taken


def test_every_store_gives_the_history_of_a_run_as_load_with_seq_rebuilds_it(
    told: Target,
) -> None:
    """``history(run_id)``: every kept checkpoint, oldest first, JSON Lines too (issue 31).

    Each equals what ``load`` with its ``seq`` rebuilds and what was saved; a run the
    store does not hold has none.
    """
    store = told.open()
    history = store.history(RUN_ID)
    assert [checkpoint.seq for checkpoint in history] == [c.seq for c in told.kept()]
    for checkpoint, saved in zip(history, told.kept(), strict=True):
        assert checkpoint.to_dict() == saved.to_dict()
        loaded = told.load(store, checkpoint.seq)
        assert loaded is not None
        assert checkpoint.to_dict() == loaded.to_dict()
    assert store.history("another run") == []
