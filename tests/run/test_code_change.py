"""Resuming after the code changed: fingerprints recorded with outputs, and `on_code_change`.

A step edited between two runs (its module rewritten and reloaded, as a deploy
does) is found by its fingerprint: ``"keep"`` keeps its output and says so,
``"rerun"`` runs it and what depends on it, ``"refuse"`` raises before anything
runs. Moving code around, or a checkpoint recorded without fingerprints, is no
change. Fingerprints are the same in another process.
"""

from __future__ import annotations

import functools
import importlib
import json
import subprocess
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from executionkit import (
    CheckpointFormatError,
    CheckpointMismatchError,
    PatternResult,
    RunArgumentError,
    Step,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
)
from executionkit import events as ev
from executionkit._define._code import fingerprint

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType

STEPS = """\
from executionkit import PatternResult, Step, TokenUsage, Workflow

CALLS = []
{padding}

def draft(ctx):
    CALLS.append("draft")
    return PatternResult({text!r}, cost=TokenUsage(900, 100, 1))


def send(ctx):
    CALLS.append("send")
    return ctx["draft"] + "!"


def side(ctx):
    CALLS.append("side")
    return "side"


workflow = Workflow(
    [
        Step("draft", draft),
        Step("send", send, depends_on=("draft",)),
        Step("side", side),
    ]
)
"""


def deploy(folder: Path, text: str, padding: str = "") -> ModuleType:
    """Write the module as a deploy would, and (re)load it.

    Each version differs in size: Python trusts a cached .pyc of the same size and
    modification second, so same-sized versions written within a second could load stale.
    """
    (folder / "edited_steps.py").write_text(
        STEPS.format(text=text, padding=padding), encoding="utf-8"
    )
    module = sys.modules.get("edited_steps")
    importlib.invalidate_caches()
    return (
        importlib.reload(module) if module is not None else importlib.import_module("edited_steps")
    )


@pytest.fixture
def first_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkflowCheckpoint:
    """The module at its first version, run to the end: its last checkpoint, through JSON."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "edited_steps", raising=False)
    module = deploy(tmp_path, "draft one")
    saved: list[WorkflowCheckpoint] = []
    module.workflow.run_sync(checkpoint_fn=saved.append)
    assert Counter(module.CALLS) == Counter({"draft": 1, "side": 1, "send": 1})
    return WorkflowCheckpoint.from_dict(json.loads(json.dumps(saved[-1].to_dict())))


def test_an_unchanged_step_or_moved_code_is_no_change(
    tmp_path: Path, first_run: WorkflowCheckpoint
) -> None:
    module = deploy(tmp_path, "draft one", padding="\n\n# a comment moves every line down\n")
    events: list[Any] = []
    result = module.workflow.run_sync(resume_from=first_run, on_event=events.append)
    assert result.executed == ()
    assert not [e for e in events if isinstance(e, ev.CodeChanged)]
    assert dict(module.workflow.plan(resume_from=first_run).code_changed) == {}


def test_keep_keeps_the_output_says_so_and_remembers_the_old_code(
    tmp_path: Path, first_run: WorkflowCheckpoint
) -> None:
    recorded = first_run.step_info["draft"]["code"]
    module = deploy(tmp_path, "draft number two")
    plan = module.workflow.plan(resume_from=first_run)
    assert dict(plan.code_changed) == {"draft": TokenUsage(900, 100, 1)}  # rerunning costs that
    events: list[Any] = []
    saved: list[WorkflowCheckpoint] = []
    result = module.workflow.run_sync(
        resume_from=first_run, on_event=events.append, checkpoint_fn=saved.append, rerun=["side"]
    )
    assert result.outputs["draft"] == "draft one"  # kept, made by the old code
    assert module.CALLS == ["side"]
    changed = [e for e in events if isinstance(e, ev.CodeChanged)]
    current = fingerprint(module.draft)
    assert [(e.step, e.recorded, e.current) for e in changed] == [("draft", recorded, current)]
    # The output is still described by the code that made it: the next resume says it again.
    assert saved[-1].step_info["draft"]["code"] == recorded
    assert saved[-1].step_info["side"]["code"] == fingerprint(module.side)
    assert dict(module.workflow.plan(resume_from=saved[-1]).code_changed) == {
        "draft": TokenUsage(900, 100, 1)
    }


def test_rerun_runs_the_changed_step_and_what_depends_on_it(
    tmp_path: Path, first_run: WorkflowCheckpoint
) -> None:
    module = deploy(tmp_path, "draft number two")
    old, new = first_run.step_info["draft"]["code"], fingerprint(module.draft)
    plan = module.workflow.plan(resume_from=first_run, on_code_change="rerun")
    assert plan.would_run == ("draft", "send")
    result = module.workflow.run_sync(resume_from=first_run, on_code_change="rerun")
    assert result.outputs["send"] == "draft number two!"
    assert Counter(module.CALLS) == Counter({"draft": 1, "send": 1})
    assert dict(result.invalidated) == {
        "draft": f"code changed (fingerprint {old} to {new})",
        "send": "depends on invalidated step 'draft'",
    }


def test_refuse_names_the_step_before_anything_runs(
    tmp_path: Path, first_run: WorkflowCheckpoint
) -> None:
    module = deploy(tmp_path, "draft number two")
    old, new = first_run.step_info["draft"]["code"], fingerprint(module.draft)
    with pytest.raises(CheckpointMismatchError) as caught:
        module.workflow.run_sync(resume_from=first_run, on_code_change="refuse", rerun=["side"])
    assert str(caught.value).startswith(
        f"the code of 'draft' ({old} to {new}) changed since their outputs were recorded "
        f"(on_code_change='refuse')"
    )
    assert module.CALLS == []
    with pytest.raises(RunArgumentError, match="on_code_change must be one of"):
        module.workflow.run_sync(resume_from=first_run, on_code_change="ignore")


def test_a_checkpoint_without_fingerprints_is_no_change(
    tmp_path: Path, first_run: WorkflowCheckpoint
) -> None:
    data = first_run.to_dict()
    for entry in data["step_info"].values():
        entry.pop("code")
    module = deploy(tmp_path, "draft number two")
    result = module.workflow.run_sync(
        resume_from=WorkflowCheckpoint.from_dict(data), on_code_change="refuse"
    )
    assert result.executed == ()  # unknown code is never a change


def test_what_a_fingerprint_covers() -> None:
    def template_step(template: str) -> Any:
        def run(ctx: Any) -> str:
            return template.format(**ctx)

        return run

    def call(prompt: str, ctx: Any) -> str:
        return prompt

    assert fingerprint(template_step("hi {a}")) == fingerprint(template_step("hi {a}"))
    assert fingerprint(template_step("hi {a}")) != fingerprint(template_step("bye {a}"))
    same = fingerprint(functools.partial(call, "summarize"))
    assert same == fingerprint(functools.partial(call, "summarize"))
    assert same != fingerprint(functools.partial(call, "translate"))
    assert fingerprint(lambda ctx: ctx["a"] + 1) != fingerprint(lambda ctx: ctx["a"] - 1)
    assert fingerprint(3) is None
    huge = 10**5000  # an int past the digit limit of repr: still a fingerprint
    assert fingerprint(lambda ctx: huge) is not None


def test_a_decorated_function_is_fingerprinted_by_the_function_it_wraps() -> None:
    def traced(function: Any) -> Any:
        @functools.wraps(function)
        def wrapper(ctx: Any) -> Any:
            return function(ctx)

        return wrapper

    def one(ctx: Any) -> int:
        return 1

    def two(ctx: Any) -> int:
        return 2

    assert fingerprint(traced(one)) == fingerprint(one)
    assert fingerprint(traced(traced(one))) == fingerprint(one)
    assert fingerprint(traced(one)) != fingerprint(traced(two))
    nested = {"a": [{"b": [1, 2]}]}  # deep data in a closure: counted the same through a wrapper

    def deep(ctx: Any) -> Any:
        return nested

    assert fingerprint(traced(deep)) == fingerprint(deep)

    class Wrapper:
        def __init__(self, inner: Any) -> None:
            self.__wrapped__ = inner

        def __call__(self, ctx: Any) -> Any:
            return self.__wrapped__(ctx)

    assert fingerprint(Wrapper(one)) == fingerprint(one)
    assert fingerprint(Wrapper(3)) is not None  # wraps no code: the wrapper's own counts


def test_a_fingerprint_is_the_same_in_another_process(
    tmp_path: Path, first_run: WorkflowCheckpoint
) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import edited_steps; "
        "from executionkit._define._code import fingerprint; "
        "print(fingerprint(edited_steps.draft))"
    )
    out = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == first_run.step_info["draft"]["code"]


def test_asks_waits_and_sub_workflows_have_no_fingerprint_of_their_own() -> None:
    child = Workflow([Step("inner", lambda ctx: 1)])
    saved: list[WorkflowCheckpoint] = []
    Workflow(
        [
            Step.wait("pause", seconds=0),
            Step("nested", child),
            Step("plain", lambda ctx: PatternResult(1), depends_on=("pause",)),
        ]
    ).run_sync(checkpoint_fn=saved.append)
    info = saved[-1].step_info
    assert "code" not in info["pause"]
    assert "code" not in info["nested"]
    assert "code" in info["plain"]


@pytest.mark.parametrize("bad", [[1], {"x": 1}, "XYZ12345", "abc", 12345678])
def test_a_bad_fingerprint_in_a_checkpoint_is_named(bad: object) -> None:
    saved: list[WorkflowCheckpoint] = []
    Workflow([Step("a", lambda ctx: 1)]).run_sync(checkpoint_fn=saved.append)
    data = saved[-1].to_dict()
    data["step_info"]["a"]["code"] = bad
    with pytest.raises(CheckpointFormatError) as caught:
        WorkflowCheckpoint.from_dict(data)
    assert caught.value.path == "step_info.a.code"
    assert "must be a fingerprint (8 to 64 lowercase hex digits)" in str(caught.value)


def test_the_command_line_lists_and_applies_the_policy(
    tmp_path: Path, first_run: WorkflowCheckpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    from executionkit._cli import main  # noqa: PLC0415

    (tmp_path / "run.json").write_text(json.dumps(first_run.to_dict()), encoding="utf-8")
    deploy(tmp_path, "draft number two")
    run = ("run", "edited_steps:workflow", "--checkpoint", str(tmp_path / "run.json"))

    def call(*args: str) -> tuple[int, str, str]:
        try:
            code = main([*run, *args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, _ = call("--dry-run")
    assert code == 0
    assert (
        "code changed since recorded, kept: draft (rerunning it: 900 in + 100 out, 1 LLM call)"
        in out
    )
    code, out, _ = call("--dry-run", "--on-code-change", "rerun")
    assert out.splitlines()[0] == "would run: draft, send"
    code, _, err = call("--on-code-change", "refuse")
    assert code == 2
    assert "the code of 'draft'" in err


def test_inspect_with_the_workflow_lists_the_changed_steps(
    tmp_path: Path, first_run: WorkflowCheckpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    from executionkit._cli import main  # noqa: PLC0415

    (tmp_path / "run.json").write_text(json.dumps(first_run.to_dict()), encoding="utf-8")
    module = deploy(tmp_path, "draft number two")
    old, new = first_run.step_info["draft"]["code"], fingerprint(module.draft)
    inspect = ("inspect", str(tmp_path / "run.json"), "--workflow", "edited_steps:workflow")
    assert main([*inspect]) == 0
    assert f"code        draft: recorded by {old}, now {new}\n" in capsys.readouterr().out
    assert main([*inspect, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["code_changed"] == {"draft": {"recorded": old, "current": new}}
    assert main(["inspect", str(tmp_path / "run.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["code_changed"] is None  # unknown without it
