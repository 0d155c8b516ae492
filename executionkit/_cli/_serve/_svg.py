"""A run's graph drawn on the server as SVG: one box per step, in rows by dependency level.

A step's row is one below its deepest dependency; boxes keep the declaration
order within a row. Each box has the class of its status (``node-done``,
``node-running``...), which the stylesheet colours: no style attribute, so the
page's Content-Security-Policy needs none. The drawing is `Markup` built from
`html` templates (`_markup`): every name and number goes in through a hole,
escaped, in the text of a box as in an attribute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from executionkit._cli._serve._markup import Markup, html, join

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


def graph_svg(steps: Sequence[StepView]) -> Markup:
    """The SVG element drawing ``steps`` and their dependencies."""
    if not steps:
        return html("")
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
        html(
            '<svg class="graph" data-list="graph" xmlns="http://www.w3.org/2000/svg" '
            'width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
            'aria-label="the steps of the run and their dependencies">',
            width,
            height,
            width,
            height,
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
                    html(
                        '<path class="edge" d="M{},{} C{},{} {},{} {},{}"/>',
                        *(x1, y1, x1, middle, x2, middle, x2, y2),
                    )
                )
    for step in steps:
        x, y = place[step.name]
        name = step.name if len(step.name) <= _NAME_CHARS else step.name[: _NAME_CHARS - 1] + "…"
        parts.append(
            html(
                '<g class="node node-{}" data-part="node:{}"><title>{}: {}</title>'
                '<rect x="{}" y="{}" width="{}" height="{}" rx="6"/>'
                '<text x="{}" y="{}">{}</text>'
                '<text class="node-status" x="{}" y="{}">{} · {}</text></g>',
                *(step.status, step.name, step.name, step.status),
                *(x, y, _WIDTH, _HEIGHT),
                *(x + 10, y + 17, name),
                *(x + 10, y + 32, step.kind, step.status),
            )
        )
    parts.append(html("</svg>"))
    return join(parts)
