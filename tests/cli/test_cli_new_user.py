"""Issue 19, the command line and inspect: what a new user saw wrong, each pinned.

- progress of sub-workflows: counts per run, each child's events to that child;
- ``--checkpoint`` chooses its store by the file's extension;
- every command the CLI prints works when pasted into a shell;
- a map's failed items are named with their causes, whole;
- one way of counting steps, in progress, ``run``'s last lines and ``inspect``;
- ``--version``, item keys in ``inspect --json``, the page's word on checkpoints.

Commands run as real subprocesses (``python -m executionkit``), in the test's
temporary folder; progress is driven in-process with a clock that stands still.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from cli_runner import EXAMPLES, ROOT, Outcome, run_subprocess, subprocess_env
from pg_fixture import new_database

import executionkit
from executionkit import PatternResult, Step, TokenUsage, Workflow
from executionkit._cli import main
from executionkit._cli._location import DatabaseLocation, parse_location
from executionkit.events import Event, StepFinished
from executionkit.progress import ConsoleProgress
from executionkit.stores import JsonLinesStore

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path


def cli(folder: Path, *args: str) -> Outcome:
    """``python -m executionkit ARGS`` in ``folder``."""
    return run_subprocess(folder, *args)


def pasted(folder: Path, command: str) -> Outcome:
    """``command`` as a person would paste it into a shell in ``folder``."""
    done = subprocess.run(  # noqa: S603 - the shell runs what the CLI printed, as a user's would
        ["/bin/sh", "-c", command],
        cwd=folder,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def printed_command(out: str, lead: str) -> str:
    """The command on the line of ``out`` that starts with ``lead``."""
    (line,) = [line for line in out.splitlines() if line.startswith(lead)]
    return line.removeprefix(lead)


def cost(value: int) -> Callable[[Mapping[str, Any]], PatternResult[int]]:
    """A step returning ``value`` as if a model had been asked (11 tokens, 1 call)."""
    return lambda ctx: PatternResult(value, cost=TokenUsage(10, 1, 1))


# --- 1. progress of sub-workflows -----------------------------------------------------------

CHILD = Workflow(  # inline: the items' children end in one order, and so do their lines
    [
        Step("a", cost(1), inline=True),
        Step("b", cost(2), depends_on=("a",), inline=True),
        Step("c", cost(3), depends_on=("b",), inline=True),
    ]
)


def plain_progress(workflow: Workflow, **kwargs: Any) -> list[str]:
    """The plain lines ConsoleProgress writes for a run of ``workflow`` named ``p``."""
    stream = io.StringIO()
    workflow.run_sync(
        on_event=ConsoleProgress(stream, live=False, clock=lambda: 0.0), run_id="p", **kwargs
    )
    return stream.getvalue().splitlines()


def test_a_sub_workflows_steps_are_counted_in_its_own_run_and_named_by_path() -> None:
    """``sub/a`` counts 1/3 in the child; the parent stays 1/2 and finishes as itself."""
    workflow = Workflow([Step("first", cost(0)), Step("sub", CHILD, depends_on=("first",))])
    assert plain_progress(workflow) == [
        "executionkit: run p started: 2 steps",
        "executionkit: first finished in 0.0s; 1/2 done, 0.0s, 11 tokens in 1 call",
        "executionkit: sub started: 3 steps",
        (
            "executionkit: sub/a finished in 0.0s; 1/2 done, 1 running (sub: 1/3 done), 0.0s, "
            "22 tokens in 2 calls"
        ),
        (
            "executionkit: sub/b finished in 0.0s; 1/2 done, 1 running (sub: 2/3 done), 0.0s, "
            "33 tokens in 3 calls"
        ),
        (
            "executionkit: sub/c finished in 0.0s; 1/2 done, 1 running (sub: 3/3 done), 0.0s, "
            "44 tokens in 4 calls"
        ),
        "executionkit: sub finished in 0.0s; 2/2 done, 0.0s, 44 tokens in 4 calls",
        "executionkit: run p finished; 2/2 done, 0.0s, 44 tokens in 4 calls",
    ]


async def test_concurrent_childrens_finishes_are_credited_each_to_its_own_child() -> None:
    """left/x, right/x, right/y, left/y land in that order; each counts in its own child.

    The parent's own finishes may land between them; whenever they do, each child's
    count is that of its own steps (``right`` has none until its child has started).
    """
    gates: dict[tuple[str, str], asyncio.Event] = {
        ("p/left", "x"): asyncio.Event(),
        ("p/right", "y"): asyncio.Event(),
    }

    def after(run_id: str, step: str) -> Callable[[Mapping[str, Any]], Any]:
        async def wait(ctx: Mapping[str, Any]) -> PatternResult[int]:
            await gates[run_id, step].wait()
            return PatternResult(1, cost=TokenUsage(10, 1, 1))

        return wait

    left = Workflow([Step("x", cost(1)), Step("y", after("p/right", "y"), depends_on=("x",))])
    right = Workflow([Step("x", after("p/left", "x")), Step("y", cost(2), depends_on=("x",))])
    workflow = Workflow([Step("left", left), Step("right", right)])
    stream = io.StringIO()
    progress = ConsoleProgress(stream, live=False, clock=lambda: 0.0)

    def on_event(event: Event) -> None:
        progress(event)
        if isinstance(event, StepFinished) and (event.run_id, event.step) in gates:
            gates[event.run_id, event.step].set()

    async with asyncio.timeout(10):
        await workflow.run(on_event=on_event, run_id="p")
    lines = stream.getvalue().splitlines()
    landed = [match[1] for line in lines if (match := STEP_LINE.match(line))]
    assert landed == ["left/x", "right/x", "right/y", "left/y"]
    counted: Counter[str] = Counter()
    for line in lines:  # each child's count is the number of its own steps landed so far
        match = STEP_LINE.match(line)
        if match:
            counted[match[2]] += 1
        for child, done in re.findall(r"(left|right): (\d)/2 done", line):
            assert int(done) == counted[child], line
    assert "executionkit: right started: 2 steps" in lines
    assert lines[-1] == "executionkit: run p finished; 2/2 done, 0.0s, 44 tokens in 4 calls"


STEP_LINE = re.compile(r"executionkit: ((left|right)/[xy]) finished in ")


def test_a_map_of_sub_workflows_counts_items_and_never_more_steps_than_there_are() -> None:
    """Each item's child runs quietly; the map counts items; the parent finishes as itself."""
    workflow = Workflow(
        [Step("texts", lambda ctx: ["x", "y", "z"]), Step.map("per", CHILD, over="texts")]
    )
    lines = plain_progress(workflow)
    assert lines == [
        "executionkit: run p started: 2 steps",
        "executionkit: texts finished in 0.0s; 1/2 done, 0.0s",
        "executionkit: per: 3 items",
        "executionkit: 1/2 done, 1 running (per), per: 1/3 items, 0.0s, 99 tokens in 9 calls",
        "executionkit: 1/2 done, 1 running (per), per: 2/3 items, 0.0s, 99 tokens in 9 calls",
        "executionkit: per finished in 0.0s (3 items); 2/2 done, 0.0s, 99 tokens in 9 calls",
        "executionkit: run p finished; 2/2 done, 0.0s, 99 tokens in 9 calls",
    ]


def test_a_question_in_a_child_is_named_by_its_path_and_the_parent_suspends() -> None:
    """``sub/approve`` waits; the child's suspension is no line; the parent's is the last."""
    child = Workflow(
        [
            Step("a", cost(1)),
            Step.ask("approve", lambda ctx: "ok?", depends_on=("a",)),
            Step("b", cost(2), depends_on=("approve",)),
        ]
    )
    workflow = Workflow([Step("first", cost(0)), Step("sub", child, depends_on=("first",))])
    lines = plain_progress(workflow)
    assert lines[-2:] == [
        (
            "executionkit: sub/approve is waiting for an answer; 1/2 done, 1 running "
            "(sub: 1/3 done), waiting for: sub/approve, 0.0s, 22 tokens in 2 calls"
        ),
        (
            "executionkit: run p suspended; 1/2 done, waiting for: sub/approve, 0.0s, "
            "22 tokens in 2 calls"
        ),
    ]


def test_live_mode_ends_with_the_parents_finish() -> None:
    """The live line's last word names the parent run, counted as the parent."""
    stream = io.StringIO()
    workflow = Workflow([Step("first", cost(0)), Step("sub", CHILD, depends_on=("first",))])
    workflow.run_sync(on_event=ConsoleProgress(stream, live=True, clock=lambda: 0.0), run_id="p")
    last = stream.getvalue().split("\r")[-1].rstrip()
    assert last == "executionkit: run p finished; 2/2 done, 0.0s, 44 tokens in 4 calls"


# --- 2. the store is chosen by the file's extension -----------------------------------------

LANG_XX = ("--input=text=The cat sat", "--input=lang=xx")
LANG_FR = ("--input=text=The cat sat", "--input=lang=fr")


def test_a_jsonl_checkpoint_is_written_read_and_resumed_as_json_lines(tmp_path: Path) -> None:
    """``--checkpoint run.jsonl``: JsonLinesStore writes it; inspect, graph and run read it."""
    failed = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", "run.jsonl", *LANG_XX)
    assert failed.code == 1, failed.err
    path = tmp_path / "run.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3  # a line per checkpoint: words, count, then the failure
    stored = JsonLinesStore(path).load()
    assert stored is not None
    assert list(stored.outputs) == ["words", "count"]
    shown = cli(tmp_path, "inspect", "run.jsonl", "--json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["recorded"] == ["words", "count"]
    graph = cli(tmp_path, "graph", "cli_workflow:workflow", "--checkpoint", "run.jsonl")
    assert graph.code == 0, graph.err
    done = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", "run.jsonl", *LANG_FR)
    assert done.code == 0, done.err
    assert json.loads(done.out)["translate"] == "le chat s'assit"
    final = JsonLinesStore(path).load()
    assert final is not None
    assert final.cost == TokenUsage(270, 34, 2)  # count was not paid for twice


@pytest.mark.parametrize("name", ["runs.db", "runs.sqlite", "runs.SQLITE3"])
def test_a_database_file_is_refused_with_the_location_to_write_instead(
    tmp_path: Path, name: str
) -> None:
    """A .db, .sqlite or .sqlite3 path names the sqlite:/// location that works."""
    url = f"sqlite:///{name}"
    expected = (
        f"executionkit: error: {name}: an SQLite database, by its extension; name a run in "
        f"it as {shlex.quote(f'{url}?run_id=NAME')} (inspect {url} lists its runs)\n"
    )
    for args in (
        ("run", "cli_workflow:workflow", "--checkpoint", name, *LANG_FR),
        ("inspect", name),
    ):
        refused = cli(tmp_path, *args)
        assert (refused.code, refused.err) == (2, expected)
    assert not (tmp_path / name).exists()
    location = f"{url}?run_id=night-1"
    done = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", location, *LANG_FR)
    assert done.code == 0, done.err


def test_an_absolute_database_path_is_refused_with_four_slashes(tmp_path: Path) -> None:
    """The advice for /abs/runs.db is sqlite:////abs/runs.db, which the CLI reads."""
    path = tmp_path / "runs.db"
    refused = cli(tmp_path, "inspect", str(path))
    assert refused.code == 2
    assert f"sqlite:///{path}?run_id=NAME" in refused.err
    assert f"sqlite:///{path}".startswith("sqlite:////")


def test_a_jsonl_file_holding_one_json_checkpoint_is_refused_with_a_rename(
    tmp_path: Path,
) -> None:
    """What the CLI used to write as run.jsonl is plain JSON: renamed as told, it resumes."""
    cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", "run.json", *LANG_XX)
    (tmp_path / "run.json").rename(tmp_path / "old.jsonl")
    before = (tmp_path / "old.jsonl").read_bytes()
    for args in (
        ("run", "cli_workflow:workflow", "--checkpoint", "old.jsonl", *LANG_FR),
        ("inspect", "old.jsonl"),
    ):
        refused = cli(tmp_path, *args)
        assert refused.code == 2
        assert refused.err == (
            "executionkit: error: old.jsonl: holds one JSON checkpoint, not JSON Lines (as "
            "--checkpoint FILE.jsonl wrote it before); rename it to resume from it: "
            "mv old.jsonl old.json\n"
        )
    assert (tmp_path / "old.jsonl").read_bytes() == before  # left alone
    renamed = pasted(tmp_path, "mv old.jsonl old.json")
    assert renamed.code == 0
    done = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", "old.json", *LANG_FR)
    assert done.code == 0, done.err


def test_json_lines_in_a_json_file_say_to_name_it_jsonl(tmp_path: Path) -> None:
    """Instead of only "Extra data", the error says the file is JSON Lines."""
    cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", "run.jsonl", *LANG_XX)
    (tmp_path / "run.jsonl").rename(tmp_path / "run.json")
    refused = cli(tmp_path, "inspect", "run.json")
    assert refused.code == 2
    assert refused.err == (
        "executionkit: error: run.json: not a checkpoint file: invalid JSON at line 2 column 1 "
        "(Extra data); it holds JSON Lines, as JsonLinesStore writes them: give it a .jsonl "
        "name to read it\n"
    )


# --- 3. commands the CLI prints work when pasted ------------------------------------------

INSPECT_ONE = "inspect one with: "


def with_run_id(url: str, run_id: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}run_id={run_id}"


def test_the_sqlite_listing_prints_a_command_that_works_when_pasted(tmp_path: Path) -> None:
    """The command names the latest run, its run_id escaped, the URL shell-quoted."""
    run_id = "night 1&x"
    location = "sqlite:///runs.db?run_id=night%201%26x"
    done = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", location, *LANG_FR)
    assert done.code == 0, done.err
    listed = cli(tmp_path, "inspect", "sqlite:///runs.db")
    assert listed.code == 0, listed.err
    command = printed_command(listed.out, INSPECT_ONE)
    assert command.endswith(" inspect 'sqlite:///runs.db?run_id=night%201%26x'")
    shown = pasted(tmp_path, f"{command} --json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["run_id"] == run_id


def test_the_postgresql_listing_prints_a_command_that_works_when_pasted(
    tmp_path: Path, pg_server: Any
) -> None:
    """A URL with ``?host=`` gets ``&run_id=``; an empty password stays empty, not ``***``."""
    uri = new_database(pg_server)
    assert "?host=" in uri
    assert ":@" in uri  # the test server's user has an empty password
    location = with_run_id(uri, "night-1")
    done = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", location, *LANG_FR)
    assert done.code == 0, done.err
    listed = cli(tmp_path, "inspect", uri)
    assert listed.code == 0, listed.err
    assert "***" not in listed.out
    command = printed_command(listed.out, INSPECT_ONE)
    assert command.endswith(f" inspect {shlex.quote(location)}")
    shown = pasted(tmp_path, f"{command} --json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["run_id"] == "night-1"


def test_a_postgresql_password_is_never_printed_and_the_command_says_where_it_goes(
    tmp_path: Path, pg_server: Any
) -> None:
    """The command holds PASSWORD where the password goes; put back, it works."""
    uri = new_database(pg_server).replace(":@", ":s3cret@", 1)  # the server trusts its socket
    location = with_run_id(uri, "night-1")
    done = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", location, *LANG_FR)
    assert done.code == 0, done.err
    listed = cli(tmp_path, "inspect", uri)
    assert listed.code == 0, listed.err
    assert "s3cret" not in listed.out + listed.err
    command = printed_command(listed.out, INSPECT_ONE)
    assert (
        listed.out.splitlines()[-1]
        == "(put the password in place of PASSWORD: it is never printed)"
    )
    assert command.endswith(f" inspect {shlex.quote(location.replace('s3cret', 'PASSWORD'))}")
    shown = pasted(tmp_path, f"{command.replace('PASSWORD', 's3cret')} --json")
    assert shown.code == 0, shown.err
    assert json.loads(shown.out)["run_id"] == "night-1"


def test_the_advice_to_name_a_run_keeps_the_urls_query(tmp_path: Path, pg_server: Any) -> None:
    """``run`` without ``run_id`` suggests the URL with ``&run_id=NAME``, which works."""
    uri = new_database(pg_server)
    refused = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", uri, *LANG_FR)
    assert refused.code == 2
    suggested = with_run_id(uri, "NAME")
    assert refused.err.endswith(f", as in {shlex.quote(suggested)}\n"), refused.err
    location = suggested.replace("NAME", "night-2")
    done = cli(tmp_path, "run", "cli_workflow:workflow", "--checkpoint", location, *LANG_FR)
    assert done.code == 0, done.err


def test_a_password_in_the_query_is_hidden_too() -> None:
    """``?password=`` is masked in what is shown and left out of what is to be pasted."""
    location = parse_location("postgresql://me@db/runs?password=s3cret&sslmode=off&run_id=7")
    assert isinstance(location, DatabaseLocation)
    assert "s3cret" not in location.label
    assert location.run_url("8") == (
        "postgresql://me@db/runs?password=PASSWORD&sslmode=off&run_id=8",
        True,
    )
    empty = parse_location("postgresql://me:@db/runs?host=/run/pg")
    assert isinstance(empty, DatabaseLocation)
    assert empty.run_url("night 1") == (
        "postgresql://me:@db/runs?host=/run/pg&run_id=night%201",
        False,
    )


# --- 4. map item failures: keys and causes, whole -------------------------------------------

FAILING_MAP = """\
import asyncio

from executionkit import Step, Workflow


async def square(item, ctx):
    await asyncio.sleep(0)  # every item has started before the first one fails
    if item % 8 == 3:
        return {item}  # a set: not JSON
    return item * item


workflow = Workflow(
    [Step("nums", lambda ctx: list(range(40))), Step.map("sq", square, over="nums")]
)
"""
SET_HINT = (
    "(set) is not plain data; checkpoints hold plain data only: dict with str keys, list, "
    "str, int, finite float, bool, None"
)


def test_run_names_the_first_failed_items_and_their_causes_whole(tmp_path: Path) -> None:
    """Three items' keys and errors, hint included, then how many more failed."""
    write(tmp_path, "failing.py", FAILING_MAP)
    failed = cli(tmp_path, "run", "failing:workflow", "--checkpoint", "run.json")
    assert failed.code == 1, failed.err
    lines = failed.err.splitlines()
    start = lines.index(
        "executionkit: step sq failed: ExceptionGroup: map step 'sq': 5 of 40 items failed "
        "('3', '11', '19', '27', '35'); the others that completed are recorded, and a resume "
        "runs only the rest (5 sub-exceptions)"
    )
    assert lines[start + 1 : start + 5] == [
        (
            f"executionkit:   item 3: CheckpointValueError: output of step 'sq', item '3': {{3}} "
            f"{SET_HINT}"
        ),
        (
            f"executionkit:   item 11: CheckpointValueError: output of step 'sq', "
            f"item '11': {{11}} {SET_HINT}"
        ),
        (
            f"executionkit:   item 19: CheckpointValueError: output of step 'sq', "
            f"item '19': {{19}} {SET_HINT}"
        ),
        "executionkit:   and 2 more items failed",
    ]


CHILD_MAP = """\
from executionkit import PatternResult, Step, TokenUsage, Workflow


def b(ctx):
    if ctx["item"] == "bad":
        raise RuntimeError("model overloaded")
    return PatternResult(2, cost=TokenUsage(10, 1, 1))


child = Workflow(
    [
        Step("a", lambda ctx: PatternResult(1, cost=TokenUsage(10, 1, 1))),
        Step("b", b, depends_on=("a",)),
    ]
)
workflow = Workflow(
    [Step("texts", lambda ctx: ["x", "bad", "y"]), Step.map("per", child, over="texts")]
)
"""


def test_inspect_names_failed_items_of_a_map_of_sub_workflows_with_their_causes(
    tmp_path: Path,
) -> None:
    """The failed item's own checkpoint says which of its steps failed and why."""
    write(tmp_path, "children.py", CHILD_MAP)
    failed = cli(tmp_path, "run", "children:workflow", "--checkpoint", "run.json")
    assert failed.code == 1, failed.err
    assert (
        "executionkit:   item 1: WorkflowFailed: workflow failed: step 'b' raised " in failed.err
    )
    shown = cli(tmp_path, "inspect", "run.json")
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith("failed "))
    assert lines[at + 1] == "              item 1: b: RuntimeError: model overloaded"
    data = json.loads(cli(tmp_path, "inspect", "run.json", "--json").out)
    assert data["failed_items"] == {"per": {"1": {"b": "RuntimeError: model overloaded"}}}


# --- 5. one way of counting ----------------------------------------------------------------

COUNTED = """\
import os

from executionkit import PatternResult, Step, TokenUsage, Workflow


def model(value):
    return lambda ctx: PatternResult(value, cost=TokenUsage(10, 1, 1))


def flaky(ctx):
    if os.path.exists("broken"):
        raise RuntimeError("boom")
    return 1


child = Workflow([Step("a", model(1)), Step("b", model(2), depends_on=("a",))])
workflow = Workflow(
    [
        Step("s1", model(1)),
        Step("s2", model(2)),
        Step("skip", model(5), when=lambda ctx: False),
        Step("texts", lambda ctx: ["x", "y"], depends_on=("s1", "s2")),
        Step("flaky", flaky, depends_on=("texts",)),
        Step.map("per", child, over="texts", depends_on=("flaky",)),
    ]
)
"""


def counts_everywhere(folder: Path, run: Outcome) -> dict[str, str]:
    """What progress, run's last lines, inspect's text and its JSON say of one checkpoint.

    Progress's last status is run's last word when it finishes; when it stops short,
    run's own last line says what the checkpoint holds too.
    """
    status = re.findall(r"; (\d+)/6 done", run.err)[-1]
    saved = re.findall(r"(\d+) of 6 steps recorded", run.err)
    tokens = re.findall(r"([\d,]+) tokens in", run.err)[-1]
    inspect = ("inspect", "run.json", "--workflow", "counted:workflow")
    text = cli(folder, *inspect)
    data = json.loads(cli(folder, *inspect, "--json").out)
    shown = re.search(r"^steps +(\d+) of 6 recorded", text.out, re.MULTILINE)
    assert shown is not None, text.out
    cost = data["cost"]
    return {
        "progress": status,
        "run": saved[-1] if saved else status,
        "inspect": shown.group(1),
        "json": str(data["done"]),
        "progress tokens": tokens,
        "inspect tokens": str(cost["input_tokens"] + cost["output_tokens"]),
    }


def test_progress_run_and_inspect_count_the_same_steps_and_tokens(tmp_path: Path) -> None:
    """A skipped step counts as recorded everywhere; a failed run and its resume agree."""
    write(tmp_path, "counted.py", COUNTED)
    write(tmp_path, "broken", "")
    failed = cli(tmp_path, "run", "counted:workflow", "--checkpoint", "run.json")
    assert failed.code == 1, failed.err
    assert counts_everywhere(tmp_path, failed) == {
        "progress": "4",
        "run": "4",
        "inspect": "4",
        "json": "4",
        "progress tokens": "22",
        "inspect tokens": "22",
    }
    assert re.search(
        r"checkpoint saved to run.json \(seq \d+, 4 of 6 steps recorded\)", failed.err
    )
    (tmp_path / "broken").unlink()
    done = cli(tmp_path, "run", "counted:workflow", "--checkpoint", "run.json")
    assert done.code == 0, done.err
    assert "resumed: 4/6 steps recorded" in done.err
    assert counts_everywhere(tmp_path, done) == {
        "progress": "6",
        "run": "6",
        "inspect": "6",
        "json": "6",
        "progress tokens": "66",
        "inspect tokens": "66",
    }
    text = cli(tmp_path, "inspect", "run.json", "--workflow", "counted:workflow").out
    assert "steps       6 of 6 recorded (1 skipped)" in text


def test_an_unfinished_map_of_sub_workflows_never_shows_zero_tokens(tmp_path: Path) -> None:
    """Its items' usage, finished and in progress, is what the run spent on them: 55, not 0."""
    write(tmp_path, "children.py", CHILD_MAP)
    cli(tmp_path, "run", "children:workflow", "--checkpoint", "run.json")
    text = cli(tmp_path, "inspect", "run.json", "--workflow", "children:workflow").out
    assert "tokens      50 in + 5 out = 55 tokens, 5 LLM calls" in text
    assert (
        "items       per: 2 of 3 items recorded (50 in + 5 out = 55 tokens, 5 LLM calls)" in text
    )
    data = json.loads(cli(tmp_path, "inspect", "run.json", "--json").out)
    assert data["items"]["per"]["cost"] == {
        "input_tokens": 50,
        "output_tokens": 5,
        "llm_calls": 5,
    }


def test_the_database_listing_counts_as_inspect_does(tmp_path: Path) -> None:
    """A run's line in the listing counts its skipped step as recorded."""
    write(tmp_path, "counted.py", COUNTED)
    location = "sqlite:///runs.db?run_id=night-1"
    done = cli(tmp_path, "run", "counted:workflow", "--checkpoint", location)
    assert done.code == 0, done.err
    listed = cli(tmp_path, "inspect", "sqlite:///runs.db")
    assert listed.out.splitlines()[2].startswith("  night-1: seq ")
    assert ", 6 recorded, 0 failed, " in listed.out
    data = json.loads(cli(tmp_path, "inspect", "sqlite:///runs.db", "--json").out)
    assert data["runs"][0]["recorded"] == 6


# --- 6. --version, item keys, the page's word ----------------------------------------------


def test_version_prints_the_packages_version(tmp_path: Path) -> None:
    """``executionkit --version`` prints ``executionkit <version>`` and exits 0."""
    shown = cli(tmp_path, "--version")
    assert (shown.code, shown.out, shown.err) == (
        0,
        f"executionkit {executionkit.__version__}\n",
        "",
    )


def test_inspect_json_lists_the_recorded_item_keys_of_unfinished_maps(tmp_path: Path) -> None:
    """``items.per.keys`` are the keys the checkpoint records, in its order."""
    write(tmp_path, "children.py", CHILD_MAP)
    cli(tmp_path, "run", "children:workflow", "--checkpoint", "run.json")
    data = json.loads(cli(tmp_path, "inspect", "run.json", "--json").out)
    saved = json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))
    # Items run side by side: recorded in the order they ended, which inspect keeps.
    assert data["items"]["per"]["keys"] == list(saved["items"]["per"]["outputs"])
    assert sorted(data["items"]["per"]["keys"]) == ["0", "2"]


def test_the_page_says_each_step_is_checkpointed_as_it_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page says what the command asks the library for: a checkpoint per step."""
    page = (ROOT / "docs" / "how-to" / "command-line.md").read_text(encoding="utf-8")
    assert "after every batch" not in page
    assert "written atomically as soon as each step completes" in page
    asked: dict[str, object] = {}
    run_sync = Workflow.run_sync

    def spy(self: Workflow, *args: Any, **kwargs: Any) -> Any:
        asked.update(kwargs)
        return run_sync(self, *args, **kwargs)

    monkeypatch.setattr(Workflow, "run_sync", spy)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    imported = "cli_workflow" in sys.modules
    try:
        assert main(["run", "cli_workflow:workflow", "--checkpoint", "run.json", *LANG_FR]) == 0
    finally:
        if not imported:
            sys.modules.pop("cli_workflow", None)
    assert asked["checkpoint_every"] == "step"
    assert "le chat" in capsys.readouterr().out
