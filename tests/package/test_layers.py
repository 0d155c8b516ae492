"""The folders are the layers, and every import points down them.

Each module of ``executionkit/`` belongs to one layer, lowest first:

1. the leaves: value types, errors, the event types, path and text helpers;
2. ``_checkpoint/``: the checkpoint format, pure data;
3. ``_define/``: a workflow's shape (steps, graph, conditions, questions, options);
4. ``_resume/``: what a checkpoint means now (restore, fork);
5. ``_record/``: what one run knows (the record and each kind's room);
6. ``_run/``: running, the only layer where asyncio lives;
7. the façade: ``Workflow`` and the public names;
8. the faces: stores, progress, tracing, the conformance kit, the command line
   with its page; they read events and stores, and use the façade's public
   names, never the runner's insides (``_run/``).

Every import is read from the source: at module level, under ``TYPE_CHECKING``
and inside functions alike, since each of them is a dependency a reader has to
follow. A module may import its own layer and the layers below; a face may not
import ``_run/``; the faces' folders import each other without a cycle; and no
module below ``_run/`` imports asyncio at run time. Every failure names the
file, the line and the import.
"""

from __future__ import annotations

import ast
import itertools
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "executionkit"

# The modules at the top of the package, by layer; every folder is a layer of its own
# (the faces' folders share the faces' layer).
LEAVES = frozenset(
    {
        "_clock",
        "_errors",
        "_owner",
        "_paths",
        "_plain",
        "_prices",
        "_limits",
        "_terminal",
        "_types",
        "events",
        "types",
    }
)
FACADE = frozenset({"__init__", "_workflow", "workflow"})
FACES = frozenset({"__main__", "otel", "progress", "stores", "conformance", "testing", "_cli"})
LAYERS = ("leaves", "_checkpoint", "_define", "_resume", "_record", "_run", "façade", "faces")
PURE = frozenset({"leaves", "_checkpoint", "_define", "_resume", "_record"})


def part_of(dotted: str) -> str:
    """The top-level part of executionkit a dotted module name is in: ``_run``, ``_errors``."""
    parts = dotted.split(".")
    assert parts[0] == "executionkit", dotted
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(part: str) -> str:
    """The layer of a top-level part of the package."""
    if part in LEAVES:
        return "leaves"
    if part in FACADE:
        return "façade"
    if part in FACES:
        return "faces"
    if part in LAYERS:
        return part
    msg = f"executionkit.{part} is in no layer: add it to test_layers.py and the code map"
    raise AssertionError(msg)


def dotted_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


@cache
def imports_of(path: Path) -> tuple[tuple[int, str, str], ...]:
    """Every executionkit module ``path`` imports: (line, imported module, statement)."""
    source = path.read_text(encoding="utf-8")
    return imports_in(source, dotted_of(path), is_package=path.name == "__init__.py")


def imports_in(source: str, dotted: str, *, is_package: bool) -> tuple[tuple[int, str, str], ...]:
    """`imports_of` the module ``dotted`` whose source is ``source``."""
    tree = ast.parse(source)
    package = dotted if is_package else dotted.rpartition(".")[0]
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name, ast.unparse(node))
                for alias in node.names
                if alias.name.split(".")[0] == "executionkit"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] != "executionkit":
                continue
            for alias in node.names:
                # `from executionkit._run import _map` imports the module _run._map.
                inner = f"{module}.{alias.name}"
                target = inner if is_module(inner) else module
                found.append((node.lineno, target, ast.unparse(node)))
    return tuple(sorted(found))


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT).as_posix()}:{line}"


def test_every_module_is_in_a_layer() -> None:
    """A new top-level module or folder must be placed in a layer before it is imported."""
    parts = {part_of(dotted_of(path)) for path in modules()}
    unplaced = sorted(p for p in parts if p not in LEAVES | FACADE | FACES | set(LAYERS))
    assert not unplaced, f"not in any layer: {unplaced}"


def upward_imports() -> list[str]:
    wrong = []
    for path in modules():
        here = layer_of(part_of(dotted_of(path)))
        for line, target, statement in imports_of(path):
            there = layer_of(part_of(target))
            if LAYERS.index(there) > LAYERS.index(here):
                wrong.append(f"{where(path, line)}: {statement}  ({here} imports {there})")
    return wrong


def test_imports_point_down_the_layers() -> None:
    """No module imports a layer above its own, at run time, for types or in a function."""
    wrong = upward_imports()
    assert not wrong, "imports that point up the layers:\n" + "\n".join(wrong)


def test_the_faces_never_import_the_runner() -> None:
    """Stores, progress, tracing, the kit and the command line use the façade, not _run/."""
    wrong = [
        f"{where(path, line)}: {statement}"
        for path in modules()
        if layer_of(part_of(dotted_of(path))) == "faces"
        for line, target, statement in imports_of(path)
        if part_of(target) == "_run"
    ]
    assert not wrong, "faces importing the runner's insides:\n" + "\n".join(wrong)


def folder_edges() -> dict[str, dict[str, str]]:
    """Which top-level part imports which other, with one import that shows it."""
    edges: dict[str, dict[str, str]] = {}
    for path in modules():
        here = part_of(dotted_of(path))
        for line, target, statement in imports_of(path):
            there = part_of(target)
            if there != here:
                edges.setdefault(here, {}).setdefault(there, f"{where(path, line)}: {statement}")
    return edges


def cycle_in(edges: dict[str, dict[str, str]], nodes: set[str]) -> list[str] | None:
    """A cycle among ``nodes`` as a list of parts (first repeated last), or None."""
    state: dict[str, int] = {}
    trail: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        trail.append(node)
        for there in sorted(edges.get(node, {})):
            if there not in nodes:
                continue
            if state.get(there) == 1:
                return [*trail[trail.index(there) :], there]
            if there not in state and (found := visit(there)) is not None:
                return found
        state[node] = 2
        trail.pop()
        return None

    for node in sorted(nodes):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_cycle_between_folders() -> None:
    """The top-level parts of the package import each other without a cycle, faces included."""
    edges = folder_edges()
    parts = {part_of(dotted_of(path)) for path in modules()}
    cycle = cycle_in(edges, parts)
    assert cycle is None, "a cycle between parts of the package:\n" + "\n".join(
        edges[a][b] for a, b in itertools.pairwise(cycle)
    )


def test_asyncio_lives_only_in_the_runner_and_above() -> None:
    """Below _run/, nothing imports asyncio at run time (type names under TYPE_CHECKING aside)."""
    wrong = []
    for path in modules():
        if layer_of(part_of(dotted_of(path))) not in PURE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checking = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if id(node) not in checking and any(n.split(".")[0] == "asyncio" for n in names):
                wrong.append(f"{where(path, node.lineno)}: {ast.unparse(node)}")
    assert not wrong, "asyncio below the runner:\n" + "\n".join(wrong)


# --- the checker itself --------------------------------------------------------------------


def test_the_checker_reads_every_kind_of_import() -> None:
    """Imports in functions, under TYPE_CHECKING and relative ones are all found and placed."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import _graph\n"
        "if TYPE_CHECKING:\n"
        "    from executionkit._run._runner import Run\n"
        "def f():\n"
        "    import executionkit._cli\n"
        "    from executionkit._run import _map\n"
    )
    found = imports_in(source, "executionkit._define._probe", is_package=False)
    assert [(line, target) for line, target, _ in found] == [
        (2, "executionkit._define._graph"),
        (4, "executionkit._run._runner"),
        (6, "executionkit._cli"),
        (7, "executionkit._run._map"),
    ]
    assert [layer_of(part_of(target)) for _, target, _ in found] == [
        "_define",
        "_run",
        "faces",
        "_run",
    ]


def test_the_checker_finds_a_cycle_and_names_its_imports() -> None:
    """A cycle of three parts is found, in order; a chain is not a cycle."""
    edges = {"a": {"b": "a->b"}, "b": {"c": "b->c"}, "c": {"a": "c->a"}}
    assert cycle_in(edges, {"a", "b", "c"}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b": "x"}, "b": {"c": "y"}}, {"a", "b", "c"}) is None


def test_an_unplaced_part_is_an_error() -> None:
    """A part of the package in no layer fails with its name."""
    with pytest.raises(AssertionError, match=r"executionkit\._new_thing is in no layer"):
        layer_of("_new_thing")
