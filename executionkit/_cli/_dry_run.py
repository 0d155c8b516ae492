"""``executionkit run --dry-run``: print what a resume would do, run and write nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from executionkit._cli._exits import EXIT_OK, CliError
from executionkit._cli._text import error_text, out
from executionkit._terminal import show

if TYPE_CHECKING:
    import argparse

    from executionkit import ResumePlan
    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._cli._questions import GivenAnswers
    from executionkit._workflow import Workflow


def dry_run(
    args: argparse.Namespace,
    workflow: Workflow,
    context: dict[str, Any],
    answers: GivenAnswers,
    *,
    resume: WorkflowCheckpoint | None,
    run_id: str | None,
) -> int:
    """Print the plan of resuming ``resume`` (`Workflow.plan`) and return exit code 0.

    Raises:
        CliError: For what ``run`` would refuse before any step: bad inputs, a
            checkpoint that does not fit, an answer that is not wanted or that
            its step's check refuses.
    """
    from executionkit._cli._run import in_cli_terms  # noqa: PLC0415 - _run imports this module
    from executionkit._errors import RunArgumentError  # noqa: PLC0415

    try:
        plan = workflow.plan(
            context,
            resume_from=resume,
            answers=answers.values or None,
            rerun=args.rerun or None,
            unknown_steps="discard" if args.discard_unknown_steps else "error",
            run_id=run_id,
            on_code_change=args.on_code_change,
        )
    except RunArgumentError as exc:  # CheckpointMismatchError included
        raise CliError(in_cli_terms(str(exc), workflow)) from None
    except Exception as exc:
        source = answers.refused(exc)
        if source is None:
            raise
        msg = f"{source}: the step's check refused the answer: {error_text(exc)}"
        raise CliError(msg) from None
    out("\n".join(plan_lines(plan)))
    return EXIT_OK


def plan_lines(plan: ResumePlan) -> list[str]:
    """``would run: a, b``, then a line for each other part of ``plan`` that is not empty."""
    lines = [f"would run: {_names(plan.would_run) or 'nothing'}"]
    parts = (
        ("a condition may skip", _names(plan.may_skip)),
        ("restored", _names(plan.restored)),
        ("skipped", _reasons(plan.skipped)),
        ("invalidated", _reasons(plan.invalidated)),
        ("discarded", _names(plan.discarded)),
        ("answered", _names(plan.answered)),
        ("would ask", _names(plan.questions)),
        ("waiting for an answer", _names(plan.waiting)),
    )
    lines.extend(f"{label}: {text}" for label, text in parts if text)
    if plan.code_changed:
        changed = ", ".join(
            f"{show(name)} (rerunning it: {usage.input_tokens} in + {usage.output_tokens} out, "
            f"{usage.llm_calls} LLM call{'' if usage.llm_calls == 1 else 's'})"
            for name, usage in plan.code_changed.items()
        )
        lines.append(f"code changed since recorded, kept: {changed}")
    for name, (recorded, left) in plan.items.items():
        if left is None:
            rest = "the items left are known once the step it maps over has run"
        else:
            rest = f"{len(left)} would run" + (f" ({_names(left)})" if left else "")
        lines.append(f"items of {show(name)}: {recorded} recorded, {rest}")
    return lines


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(map(show, names))


def _reasons(reasons: Any) -> str:
    return ", ".join(f"{show(name)} ({reason})" for name, reason in reasons.items())
