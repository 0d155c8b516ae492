"""The code layout page and decision 0006 name only code that exists.

docs/code-layout.md says what each module of ``executionkit/`` owns and walks
one step and one map item through the runner, function by function; decision
0006 names the parts of a run. A contributor looks those names up, so every one
written in backticks is checked against the code:

- ``Class.member`` (``Run.ended``, ``Snapshots.take()``): a class of that name
  in some executionkit module has that method or attribute (instance attributes
  set in ``__init__`` count);
- ``module.name`` of executionkit (``_map.drive``, ``executionkit._run._runner.Run``):
  the module has it;
- a private name alone (``_exit``, ``_Driver``): something of executionkit has it;
- a class name alone (``Attempts``): a class of executionkit, or of the standard
  library a page may mention (``KeyboardInterrupt``, ``ParamSpec``);
- a file (``_runner.py``, ``tests/cancel_harness.py``): it exists;
- "N-method `Protocol`": the protocol has N methods;
- "`Name.member` (`file.py`)": ``Name`` is defined in that file;
- in the layout page's tables, a name alone in the "owns" cell is defined by one
  of that row's modules, and the tables list every module file of the package.

A decision record is history: its Context section describes the code before the
decision (0006's names ``Recorder`` and ``_cancel_running``, gone since), so
that section is not checked. Everything after it still describes the code, with
dated notes at the end where it has changed since.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import concurrent.futures
import contextvars
import dataclasses
import importlib
import re
import typing
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "executionkit"
LAYOUT = "docs/code-layout.md"
PAGES = (LAYOUT, "docs/decisions/0006-one-way-out-of-a-run.md")
# Sections of a page that describe the code as it was, not as it is.
HISTORY = {"docs/decisions/0006-one-way-out-of-a-run.md": ("Context",)}
# Modules whose class names a page may write alone without their module.
STANDARD = (builtins, asyncio, typing, contextvars, concurrent.futures, dataclasses)
SUBPACKAGES = tuple(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}

_SPAN = re.compile(r"`([^`\n]+)`")
_CALL = re.compile(r"\(.*\)$")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PRIVATE = re.compile(r"_[A-Za-z]\w*")
_CLASS = re.compile(r"[A-Z]\w*")
_FILE = re.compile(r"[\w./-]+\.py")
_PROTOCOL = re.compile(r"(\w+)-method\s+`(\w+)`")
_PLACED = re.compile(r"`([A-Za-z_]\w*)[\w.]*(?:\([^`]*\))?`\s+\(`([\w/]+\.py)`\)")


def module_files() -> list[str]:
    """Every module file of the package, relative to ``executionkit/``."""
    return sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    )


@cache
def modules() -> dict[str, ModuleType]:
    """Every module of the package by file (``stores/_sqlite.py``), imported.

    ``__main__.py`` is left out: importing it runs the command line.
    """
    found: dict[str, ModuleType] = {}
    for file in module_files():
        if file == "__main__.py":
            continue
        dotted = file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        name = "executionkit" if dotted == "__init__" else f"executionkit.{dotted}"
        found[file] = importlib.import_module(name)
    return found


def modules_named(head: str) -> list[ModuleType]:
    """The modules a page may mean by ``_map``, ``stores._sqlite`` or ``_cli._run``."""
    return [
        module
        for file, module in modules().items()
        if module.__name__.removeprefix("executionkit.") == head
        or ("." not in head and file.removesuffix(".py").rsplit("/", 1)[-1] == head)
    ]


@cache
def defined_in(module: ModuleType) -> dict[str, object]:
    """What ``module`` defines itself (not what it imports), by name: its top-level statements."""
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return {name: getattr(module, name) for name in names if hasattr(module, name)}


@cache
def classes() -> dict[str, list[type]]:
    """Every class defined in the package, by name (some names are used twice)."""
    found: dict[str, list[type]] = {}
    for module in modules().values():
        for name, value in defined_in(module).items():
            if isinstance(value, type):
                found.setdefault(name, []).append(value)
    return found


@cache
def class_node(cls: type) -> ast.ClassDef | None:
    """The class statement of ``cls`` in its module's source, if executionkit's."""
    module = importlib.import_module(cls.__module__)
    file = getattr(module, "__file__", None)
    if not cls.__module__.startswith("executionkit") or file is None:
        return None
    tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return node
    return None


def members(cls: type) -> set[str]:
    """What ``cls`` has: its attributes, and the attributes its methods set on ``self``."""
    found = set(dir(cls))
    for base in cls.__mro__:
        found.update(getattr(base, "__annotations__", {}))
        node = class_node(base)
        if node is None:
            continue
        for inner in ast.walk(node):
            if (
                isinstance(inner, ast.Attribute)
                and isinstance(inner.ctx, ast.Store)
                and isinstance(inner.value, ast.Name)
                and inner.value.id == "self"
            ):
                found.add(inner.attr)
    return found


def has_member(owner: object, name: str) -> bool:
    if isinstance(owner, type):
        return name in members(owner)
    return hasattr(owner, name)


def resolves(owner: object, path: list[str]) -> bool:
    """Whether ``owner.a.b...`` exists for ``path`` = ``[a, b, ...]``."""
    for position, part in enumerate(path):
        if not has_member(owner, part):
            return False
        if position < len(path) - 1:
            owner = getattr(owner, part, None)
            if owner is None:
                return False
    return True


def dotted_exists(name: str) -> bool | None:
    """Whether a dotted name of executionkit exists; None when it is not executionkit's.

    A private module (``_map.drive``) or a subpackage (``stores.JsonFileStore``) may
    be named alone; a public module is named with its package (``executionkit.events``),
    so that ``types.MappingProxyType`` stays the standard library's.
    """
    ours = name.startswith("executionkit.")
    parts = name.removeprefix("executionkit.").split(".")
    for split in range(len(parts), 0, -1):
        head = ".".join(parts[:split])
        if not (ours or head.startswith("_") or parts[0] in SUBPACKAGES):
            continue
        candidates = modules_named(head)
        if candidates:
            return any(resolves(module, parts[split:]) for module in candidates)
    first, rest = parts[0], parts[1:]
    if first in classes():
        return any(resolves(cls, rest) for cls in classes()[first])
    if ours or first.startswith("_"):
        return False  # a module or class of ours that does not exist
    if _CLASS.fullmatch(first):
        return any(resolves(getattr(std, first), rest) for std in STANDARD if hasattr(std, first))
    return None  # asyncio.Task, self._exit, ctx.keys: not names of executionkit


def private_exists(name: str) -> bool:
    """Whether some module or class of executionkit has the private ``name``."""
    if any(hasattr(module, name) for module in modules().values()):
        return True
    return any(name in members(cls) for found in classes().values() for cls in found)


def class_exists(name: str) -> bool:
    """Whether ``name`` is a class (or type alias) of executionkit, or of the standard library."""
    if name in classes() or any(name in defined_in(module) for module in modules().values()):
        return True
    return any(hasattr(std, name) for std in STANDARD)


def file_exists(name: str) -> bool:
    return (PACKAGE / name).is_file() or (ROOT / name).is_file()


def checked_text(page: str) -> str:
    """The page without fenced code and without the sections that are history."""
    skipped = HISTORY.get(page, ())
    kept: list[str] = []
    skipping = fenced = False
    for line in (ROOT / page).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if line.startswith("## "):
            skipping = line[3:].strip() in skipped
        if not (skipping or fenced):
            kept.append(line)
    return "\n".join(kept)


def missing_names(text: str) -> list[str]:
    """Every name in backticks in ``text`` that the code does not have, with why."""
    missing: list[str] = []
    for span in _SPAN.findall(text):
        if _FILE.fullmatch(span):
            if not file_exists(span):
                missing.append(f"`{span}`: no such file")
            continue
        name = _CALL.sub("", span)
        if _DOTTED.fullmatch(name):
            if dotted_exists(name) is False:
                missing.append(f"`{span}`: no such class member or module name")
        elif _PRIVATE.fullmatch(name) and not name.endswith("__"):
            if not private_exists(name):
                missing.append(f"`{span}`: nothing of executionkit has this name")
        elif _CLASS.fullmatch(name) and not class_exists(name):
            missing.append(f"`{span}`: no class of this name")
    for count, name in _PROTOCOL.findall(text):
        methods = protocol_methods(name)
        if methods is None or NUMBERS.get(count) != len(methods):
            shown = "not a class of executionkit" if methods is None else ", ".join(methods)
            missing.append(f"{count}-method `{name}`: its methods are {shown}")
    for name, file in _PLACED.findall(text):
        module = modules().get(file)
        if module is None or not (name in defined_in(module) or file.endswith(f"{name}.py")):
            missing.append(f"`{name}` (`{file}`): not defined in that file")
    return sorted(set(missing))


def protocol_methods(name: str) -> list[str] | None:
    found = classes().get(name)
    if not found:
        return None
    node = class_node(found[0])
    assert node is not None
    return [
        inner.name
        for inner in node.body
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


# --- the pages -----------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_name_the_page_gives_exists_in_the_code(page: str) -> None:
    """Classes, methods, module functions, private names and files named in backticks exist."""
    missing = missing_names(checked_text(page))
    assert not missing, f"{page} names what the code does not have:\n" + "\n".join(missing)


def table_rows() -> list[tuple[list[str], str]]:
    """The layout page's module tables: (the row's module files, its "owns" cell)."""
    rows = []
    for line in (ROOT / LAYOUT).read_text(encoding="utf-8").splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        files = [span for span in _SPAN.findall(cells[0]) if _FILE.fullmatch(span)]
        if files:
            rows.append((files, cells[1]))
    return rows


def test_the_module_tables_list_every_module_of_the_package() -> None:
    """Every module file of executionkit/ and its subpackages has a row, and no row is stale."""
    listed = [file for files, _ in table_rows() for file in files]
    existing = module_files()
    unlisted = sorted(set(existing) - set(listed))
    gone = sorted(set(listed) - set(existing))
    twice = sorted({file for file in listed if listed.count(file) > 1})
    assert not unlisted, f"{LAYOUT} lists no row for: {', '.join(unlisted)}"
    assert not gone, f"{LAYOUT} lists modules that do not exist: {', '.join(gone)}"
    assert not twice, f"{LAYOUT} lists these modules twice: {', '.join(twice)}"


def rows_by_folder() -> list[tuple[str, str]]:
    """Each module file of the tables with the folder its heading names ("" for the top)."""
    found = []
    folder: str | None = None
    for line in (ROOT / LAYOUT).read_text(encoding="utf-8").splitlines():
        if line.startswith("## ") and line != "## Modules":
            folder = None
        elif line.startswith(("### ", "#### ")):
            named = [span for span in _SPAN.findall(line) if span.endswith("/")]
            folder = named[0] if named else ""
        elif folder is not None and line.startswith("|") and not set(line) <= set("|- "):
            cell = line.strip("|").split("|")[0]
            found += [(span, folder) for span in _SPAN.findall(cell) if _FILE.fullmatch(span)]
    return found


def test_each_module_is_in_the_table_of_its_folder() -> None:
    """A table under a folder's heading lists only that folder's modules; the others, the top's."""
    rows = rows_by_folder()
    assert len(rows) == len(module_files())
    wrong = [
        f"`{file}` under the heading of {folder or 'the top of the package'}"
        for file, folder in rows
        if (file.rpartition("/")[0] + "/" if "/" in file else "") != folder
    ]
    assert not wrong, f"{LAYOUT} lists modules under another folder's heading:\n" + "\n".join(
        wrong
    )


def owned_by(module: ModuleType, name: str) -> bool:
    """Whether ``module`` defines ``name`` or one of its classes has it (a package: exports it)."""
    if module.__name__ == module.__package__ and hasattr(module, name):
        return True
    own = defined_in(module)
    return name in own or any(
        isinstance(value, type) and name in members(value) for value in own.values()
    )


def test_a_name_alone_in_a_row_is_owned_by_that_row() -> None:
    """A class or private name written alone in a row's "owns" cell is defined by its modules."""
    elsewhere = []
    for files, owns in table_rows():
        own = [modules()[file] for file in files if file in modules()]
        for span in _SPAN.findall(owns):
            name = _CALL.sub("", span)
            if not (_CLASS.fullmatch(name) or _PRIVATE.fullmatch(name)) or name.endswith("__"):
                continue
            if not any(owned_by(module, name) for module in own):
                elsewhere.append(f"`{name}` in the row of {', '.join(files)}")
    assert not elsewhere, f"{LAYOUT} names alone what its row does not define:\n" + "\n".join(
        elsewhere
    )


# --- the checker itself --------------------------------------------------------------------


def test_the_checker_finds_names_that_do_not_exist() -> None:
    """Gone methods, modules, classes, files and method counts are reported; real ones are not."""
    text = (
        "`Run.ended` `Record.land_item` `Snapshots.take()` `_map.drive` `_Driver._one` "
        "`executionkit._run._runner.Run` `Running.count` `asyncio.Task` `self._exit` `_exit` "
        "`KeyboardInterrupt` `_run/_runner.py` `stores/_sqlite.py` `tests/cancel_harness.py` "
        "three-method `Landing`; `Items.add` (`_record/_items.py`)"
    )
    assert missing_names(text) == []
    gone = (
        "`Attempts.run` `Kinds.landed_item` `_kinds.Kinds` `Run.landed_result` "
        "`_cancel_running` `Recorder` `_kinds.py` four-method `Landing`; "
        "`Record.land` (`_run/_runner.py`)"
    )
    assert missing_names(gone) == [
        "`Attempts.run`: no such class member or module name",
        "`Kinds.landed_item`: no such class member or module name",
        "`Record` (`_run/_runner.py`): not defined in that file",
        "`Recorder`: no class of this name",
        "`Run.landed_result`: no such class member or module name",
        "`_cancel_running`: nothing of executionkit has this name",
        "`_kinds.Kinds`: no such class member or module name",
        "`_kinds.py`: no such file",
        "four-method `Landing`: its methods are ended, finished, returned",
    ]


def test_history_sections_are_left_out() -> None:
    """0006's Context (the code before the decision) is not checked; its Decisions are."""
    text = checked_text("docs/decisions/0006-one-way-out-of-a-run.md")
    assert "`Recorder`" not in text
    assert "`Run.execute`" in text
