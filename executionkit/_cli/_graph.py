"""``executionkit graph``: the dependency graph as Mermaid or Graphviz dot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from executionkit._cli._exits import EXIT_OK
from executionkit._cli._load import load_workflow
from executionkit._cli._location import DatabaseLocation, parse_location
from executionkit._cli._maps import map_sources, unfinished_maps
from executionkit._cli._text import out, say
from executionkit._define._conditions import condition_name
from executionkit._define._questions import waiting_in
from executionkit._define._waits import waits_in
from executionkit._paths import split_path
from executionkit._terminal import one_line, show

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from executionkit._checkpoint._value import WorkflowCheckpoint
    from executionkit._define._step import Step
    from executionkit._workflow import Workflow

_MERMAID_STYLES = (
    ("done", "fill:#d3f9d8,stroke:#2b8a3e,color:#1b4332"),
    ("failed", "fill:#ffe3e3,stroke:#c92a2a,color:#5c0011"),
    ("pending", "fill:#f1f3f5,stroke:#868e96,color:#343a40"),
    ("skipped", "fill:#fff9db,stroke:#e67700,stroke-dasharray:5 5,color:#5c3c00"),
    ("waiting", "fill:#e7f5ff,stroke:#1971c2,stroke-width:3px,color:#0b3d68"),
)
_DOT_FILLS = {
    "done": "#d3f9d8",
    "failed": "#ffe3e3",
    "pending": "#f1f3f5",
    "skipped": "#fff9db",
    "waiting": "#e7f5ff",
}
_OPTIONAL_STATES = ("skipped", "waiting")  # styled only in graphs that have such steps


def graph_command(args: argparse.Namespace) -> int:
    """Print ``args.workflow``'s graph, steps marked from ``args.checkpoint`` if given."""
    from executionkit._checkpoint._value import LEGACY_VERSION  # noqa: PLC0415

    checkpoint = None
    if args.checkpoint is not None:
        location = parse_location(args.checkpoint)
        if isinstance(location, DatabaseLocation):
            location.named_run("--checkpoint")
        checkpoint = location.load(missing_ok=False)
    workflow = load_workflow(args.workflow)
    statuses = None if checkpoint is None else step_statuses(workflow, checkpoint)
    if checkpoint is not None and checkpoint.version != LEGACY_VERSION:
        known = {step.name for step in workflow.steps}
        unknown = [name for name in checkpoint.outputs if name not in known]
        if unknown:
            say(
                f"warning: {args.checkpoint} records steps {args.workflow} does not have: "
                f"{', '.join(map(show, unknown))}"
            )
    draw = mermaid if args.format == "mermaid" else dot
    notes = None if checkpoint is None else item_notes(workflow, checkpoint)
    out(draw(workflow, statuses, notes))
    return EXIT_OK


def item_notes(workflow: Workflow, checkpoint: WorkflowCheckpoint) -> dict[str, str]:
    """``3 of 4 items recorded`` for each map of ``workflow`` that ``checkpoint`` has items of."""
    known = {step.name for step in workflow.steps}
    return {
        name: items.text()
        for name, items in unfinished_maps(checkpoint, workflow).items()
        if name in known
    }


def _labels(workflow: Workflow, notes: Mapping[str, str] | None) -> list[list[str]]:
    """The lines of each step's label: its name, ``[map over X]`` or ``[ask]``, then its note."""
    from executionkit._define._step_kinds import AskStep  # noqa: PLC0415 - only the commands that draw

    maps = map_sources(workflow)
    labels = []
    for step in workflow.steps:
        lines = [_label(step)]
        if step.name in maps:
            lines[0] += f" [map over {maps[step.name]}]"
        elif isinstance(step, AskStep):
            lines[0] += " [ask]"
        if notes is not None and step.name in notes:
            lines.append(notes[step.name])
        labels.append(lines)
    return labels


def step_statuses(workflow: Workflow, checkpoint: WorkflowCheckpoint) -> dict[str, str]:
    """Each step's state in ``checkpoint``.

    ``done``, ``failed``, ``skipped``, ``waiting`` (an ask step whose question waits
    for an answer, a wait step not due yet, or a sub-workflow step whose child
    waits for either) or ``pending``.
    """
    waiting = {split_path(path)[0] for path in (*waiting_in(checkpoint), *waits_in(checkpoint))}
    return {
        step.name: "waiting"
        if step.name in waiting and step.name not in checkpoint.errors
        else _status(step.name, checkpoint)
        for step in workflow.steps
    }


def _status(name: str, checkpoint: WorkflowCheckpoint) -> str:
    for state, recorded in (
        ("done", checkpoint.outputs),
        ("failed", checkpoint.errors),
        ("skipped", checkpoint.skipped),
        ("waiting", checkpoint.pending),
    ):
        if name in recorded:
            return state
    return "pending"


def _label(step: Step) -> str:
    """The step's name, and its condition and join rule if it has them."""
    marks = []
    if step.when is not None:
        marks.append(f"when: {condition_name(step.when)}")
    if step.join != "all":
        marks.append(f"join: {step.join}")
    return f"{step.name} ({'; '.join(marks)})" if marks else step.name


def _edges(workflow: Workflow) -> list[tuple[int, int]]:
    """(dependency, step) index pairs: by step in declaration order, then ``depends_on``."""
    index = {step.name: position for position, step in enumerate(workflow.steps)}
    return [
        (index[dep], position)
        for position, step in enumerate(workflow.steps)
        for dep in step.depends_on
    ]


def mermaid(
    workflow: Workflow,
    statuses: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
) -> str:
    """The graph as a Mermaid flowchart, steps styled by state when ``statuses`` is given.

    A map step is drawn as a subroutine (``[[...]]``) labelled ``[map over X]``;
    ``notes`` adds a line to the labels of the steps it names.
    """
    lines = ["flowchart TD"]
    maps = map_sources(workflow)
    for position, label in enumerate(_labels(workflow, notes)):
        text = "<br/>".join(map(_mermaid_label, label))
        shape = ("[[", "]]") if workflow.steps[position].name in maps else ("[", "]")
        lines.append(f'    s{position}{shape[0]}"{text}"{shape[1]}')
    lines.extend(f"    s{dep} --> s{position}" for dep, position in _edges(workflow))
    if statuses is not None:
        for state, style in _MERMAID_STYLES:
            if state not in _OPTIONAL_STATES or state in statuses.values():
                lines.append(f"    classDef {state} {style}")
        for state, _ in _MERMAID_STYLES:
            members = [
                f"s{position}"
                for position, step in enumerate(workflow.steps)
                if statuses[step.name] == state
            ]
            if members:
                lines.append(f"    class {','.join(members)} {state}")
    return "\n".join(lines)


def _mermaid_label(name: str) -> str:
    text = one_line(name)
    for char, code in (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, code)
    return text


def dot(
    workflow: Workflow,
    statuses: Mapping[str, str] | None = None,
    notes: Mapping[str, str] | None = None,
) -> str:
    """The graph in Graphviz dot, steps filled by state when ``statuses`` is given.

    A map step is labelled ``[map over X]``; ``notes`` adds a line to the labels
    of the steps it names.
    """
    style = "rounded" if statuses is None else "rounded,filled"
    lines = [
        "digraph workflow {",
        "    rankdir=TB;",
        f'    node [shape=box, style="{style}"];',
    ]
    for position, (step, label) in enumerate(
        zip(workflow.steps, _labels(workflow, notes), strict=True)
    ):
        text = "\\n".join(map(_dot_label, label))  # dot's own line break, escaped
        attributes = f'label="{text}"'
        if statuses is not None:
            attributes += f', fillcolor="{_DOT_FILLS[statuses[step.name]]}"'
            if statuses[step.name] == "skipped":
                attributes += ', style="rounded,filled,dashed"'
            elif statuses[step.name] == "waiting":
                attributes += ", penwidth=2"
        lines.append(f"    n{position} [{attributes}];")
    lines.extend(f"    n{dep} -> n{position};" for dep, position in _edges(workflow))
    lines.append("}")
    return "\n".join(lines)


def _dot_label(name: str) -> str:
    return one_line(name).replace("\\", "\\\\").replace('"', '\\"')
