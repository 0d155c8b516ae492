"""A run's graph drawn on the server as SVG: one box per step, in rows by dependency level.

A step's row is one below its deepest dependency; boxes keep the declaration
order within a row. Each box has the class of its status (``node-done``,
``node-running``...), which the stylesheet colours: no style attribute, so the
page's Content-Security-Policy needs none. Every name is escaped.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from executionkit._cli._serve._runs import StepView

_WIDTH = 180
_HEIGHT = 40
_GAP_X = 24
_GAP_Y = 44
_MARGIN = 8
_NAME_CHARS = 22


def levels(steps: Sequence[StepView]) -> dict[str, int]:
    """Each step's row: 0 without dependencies on the page, else one below its deepest."""
    known = {step.name: step for step in steps}
    found: dict[str, int] = {}

    def level(name: str, seen: frozenset[str]) -> int:
        if name in found:
            return found[name]
        deps = [dep for dep in known[name].depends_on if dep in known and dep not in seen]
        found[name] = 1 + max((level(dep, seen | {name}) for dep in deps), default=-1)
        return found[name]

    for step in steps:
        level(step.name, frozenset())
    return found


def graph_svg(steps: Sequence[StepView]) -> str:
    """The SVG element drawing ``steps`` and their dependencies."""
    if not steps:
        return ""
    rows: dict[int, list[str]] = {}
    for name, row in levels(steps).items():
        rows.setdefault(row, []).append(name)
    place: dict[str, tuple[int, int]] = {}
    for row, names in rows.items():
        for column, name in enumerate(names):
            place[name] = (
                _MARGIN + column * (_WIDTH + _GAP_X),
                _MARGIN + row * (_HEIGHT + _GAP_Y),
            )
    width = 2 * _MARGIN + max(len(names) for names in rows.values()) * (_WIDTH + _GAP_X)
    height = 2 * _MARGIN + len(rows) * (_HEIGHT + _GAP_Y) - _GAP_Y
    parts = [
        (
            f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="the steps of the run and their dependencies">'
        )
    ]
    for step in steps:
        x, y = place[step.name]
        for dep in step.depends_on:
            if dep in place:
                dx, dy = place[dep]
                x1, y1, x2, y2 = dx + _WIDTH // 2, dy + _HEIGHT, x + _WIDTH // 2, y
                middle = (y1 + y2) // 2
                parts.append(
                    f'<path class="edge" d="M{x1},{y1} C{x1},{middle} {x2},{middle} {x2},{y2}"/>'
                )
    for step in steps:
        x, y = place[step.name]
        name = step.name if len(step.name) <= _NAME_CHARS else step.name[: _NAME_CHARS - 1] + "…"
        parts.append(
            f'<g class="node node-{escape(step.status)}"><title>{escape(step.name)}: '
            f"{escape(step.status)}</title>"
            f'<rect x="{x}" y="{y}" width="{_WIDTH}" height="{_HEIGHT}" rx="6"/>'
            f'<text x="{x + 10}" y="{y + 17}">{escape(name)}</text>'
            f'<text class="node-status" x="{x + 10}" y="{y + 32}">'
            f"{escape(step.kind)} · {escape(step.status)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)
