"""docs/reference.md agrees with the code, so that it cannot drift from it again.

- Every signature block of the reference (an unlabelled fence such as
  ``Step(name, run, ...)``) lists the parameters of the real object: the same
  names, in the same order, of the same kind, with the same defaults, and the
  same return annotation where the block shows one.
- The argument table of `Workflow.run` lists exactly its parameters, in order,
  and the `RunArgumentError` entry of its "Raises" list names every one of them
  (`RunOptions.check` checks them all). The field tables of the dataclasses
  list their fields.
- The package version the reference states is the installed one and
  pyproject's, the format version it says is written is
  `executionkit._checkpoint._value.FORMAT_VERSION`, and it names no other version of
  the package.

A parameter added to the code without its documentation fails here. The
``Workflow(...)`` block is checked by a test of its own,
`test_workflow_constructor_signature_matches`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import inspect
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import executionkit
from executionkit import (
    Limit,
    PatternResult,
    RateLimited,
    Step,
    StepContext,
    TokenUsage,
    Workflow,
    WorkflowCheckpoint,
    WorkflowResult,
    current_step,
)
from executionkit._checkpoint._value import FORMAT_VERSION
from executionkit.stores import StreamPublisher

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

# The call each signature block starts with, and the object it documents.
DOCUMENTED: dict[str, Any] = {
    "Workflow": Workflow,
    "workflow.run": Workflow.run,
    "workflow.run_sync": Workflow.run_sync,
    "workflow.plan": Workflow.plan,
    "workflow.fork": Workflow.fork,
    "workflow.submit": Workflow.submit,
    "Step": Step,
    "Step.map": Step.map,
    "Step.ask": Step.ask,
    "Step.wait": Step.wait,
    "current_step": current_step,
    "current_step().save_progress": StepContext.save_progress,
    "PatternResult": PatternResult,
    "TokenUsage": TokenUsage,
    "WorkflowCheckpoint": WorkflowCheckpoint,
    "checkpoint.to_dict": WorkflowCheckpoint.to_dict,
    "WorkflowCheckpoint.from_dict": WorkflowCheckpoint.from_dict,
    "Limit": Limit,
    "RateLimited": RateLimited,
    "StreamPublisher": StreamPublisher,
}
# Names a documented default may use, besides literals.
DEFAULT_NAMES: dict[str, Any] = {"Exception": Exception, "TokenUsage": TokenUsage}
_KINDS = {
    "posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonlyargs": inspect.Parameter.KEYWORD_ONLY,
}
_FENCE = re.compile(r"^```(\S*)")
_CALL = re.compile(r"^(?:await\s+)?([A-Za-z_][\w.]*(?:\(\)\.[\w.]+)?)\(")
_ROW = re.compile(r"^\| `([^`]+)` \|")


@dataclass(frozen=True)
class Param:
    """One parameter, as the documentation or the code has it."""

    name: str
    kind: inspect._ParameterKind
    has_default: bool
    default: Any = None


@dataclass(frozen=True)
class Documented:
    """One signature block of the reference."""

    call: str
    line: int
    params: tuple[Param, ...]
    returns: str | None


def _unlabelled_blocks(text: str) -> list[tuple[int, str]]:
    """Every fenced block without a language, with the line of its opening fence."""
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        start = number
        number += 1
        body: list[str] = []
        while number < len(lines) and lines[number].rstrip() != "```":
            body.append(lines[number])
            number += 1
        number += 1
        if opening.group(1) == "":
            blocks.append((start + 1, "\n".join(body)))
    return blocks


def _default(node: ast.expr) -> Any:
    """The value a documented default stands for: a literal, or a name in `DEFAULT_NAMES`."""
    result: Any
    match node:
        case ast.Constant(value=value):
            result = value
        case ast.Tuple(elts=items):
            result = tuple(_default(item) for item in items)
        case ast.List(elts=items):
            result = [_default(item) for item in items]
        case ast.Dict(keys=keys, values=values) if None not in keys:
            result = {
                _default(key): _default(value)
                for key, value in zip(keys, values, strict=True)
                if key is not None
            }
        case ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=int() | float() as value)):
            result = -value
        case ast.Name(id=name) if name in DEFAULT_NAMES:
            result = DEFAULT_NAMES[name]
        case ast.Call(func=ast.Name(id=name), args=[], keywords=[]) if name in DEFAULT_NAMES:
            result = DEFAULT_NAMES[name]()
        case _:
            msg = f"cannot read the documented default {ast.unparse(node)!r}"
            raise ValueError(msg)
    return result


def _params(arguments: ast.arguments) -> tuple[Param, ...]:
    """The parameters of a parsed ``def``, with their defaults read by `_default`."""
    params: list[Param] = []
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(arguments.defaults))
    defaults += arguments.defaults
    for arg, node in zip(positional, defaults, strict=True):
        kind = _KINDS["posonlyargs" if arg in arguments.posonlyargs else "args"]
        params.append(_param(arg.arg, kind, node))
    if arguments.vararg is not None:
        params.append(_param(arguments.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    for arg, node in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        params.append(_param(arg.arg, _KINDS["kwonlyargs"], node))
    if arguments.kwarg is not None:
        params.append(_param(arguments.kwarg.arg, inspect.Parameter.VAR_KEYWORD, None))
    return tuple(params)


def _param(name: str, kind: inspect._ParameterKind, default: ast.expr | None) -> Param:
    if default is None:
        return Param(name, kind, has_default=False)
    return Param(name, kind, has_default=True, default=_default(default))


def _closing_parenthesis(text: str, opening: int) -> int:
    """The position of the bracket that closes the one at ``opening``; -1 if none does."""
    depth = 0
    for position in range(opening, len(text)):
        if text[position] in "([{":
            depth += 1
        elif text[position] in ")]}":
            depth -= 1
            if depth == 0:
                return position
    return -1


def _parse_signature(line: int, text: str) -> Documented | None:
    """Read a block such as ``name(a, *, b=1) -> T``; ``None`` if it is no call."""
    flat = " ".join(part.strip() for part in text.splitlines())
    call = _CALL.match(flat)
    if call is None:
        return None
    opening = call.end() - 1
    closing = _closing_parenthesis(flat, opening)
    assert closing > 0, f"reference.md:{line}: unbalanced parentheses"
    rest = flat[closing + 1 :].strip()
    returns = rest.removeprefix("->").strip() if rest.startswith("->") else None
    assert rest == "" or returns, f"reference.md:{line}: unexpected text after the call: {rest}"
    parsed = ast.parse(f"def documented({flat[opening + 1 : closing]}): ...")
    function = parsed.body[0]
    assert isinstance(function, ast.FunctionDef)
    return Documented(call.group(1), line, _params(function.args), returns)


def documented_signatures() -> list[Documented]:
    """Every signature block of the reference, in page order."""
    found = (_parse_signature(line, text) for line, text in _unlabelled_blocks(REFERENCE))
    return [signature for signature in found if signature is not None]


def _real_default(obj: Any, parameter: inspect.Parameter) -> Any:
    """The default of ``parameter``, with a dataclass field's factory called."""
    if dataclasses.is_dataclass(obj) and isinstance(obj, type):
        for field in dataclasses.fields(obj):
            if field.name == parameter.name and field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
    return parameter.default


def real_params(obj: Any) -> tuple[Param, ...]:
    """The parameters of ``obj`` as `inspect.signature` sees them, without ``self``."""
    params: list[Param] = []
    for parameter in inspect.signature(obj).parameters.values():
        if parameter.name == "self":
            continue
        if parameter.default is inspect.Parameter.empty:
            params.append(Param(parameter.name, parameter.kind, has_default=False))
        else:
            default = _real_default(obj, parameter)
            params.append(Param(parameter.name, parameter.kind, has_default=True, default=default))
    return tuple(params)


def _same(documented: Param, real: Param) -> bool:
    if (documented.name, documented.kind, documented.has_default) != (
        real.name,
        real.kind,
        real.has_default,
    ):
        return False
    if not documented.has_default:
        return True
    # Equal, and a bool where the code has a bool (False == 0, but the docs must say False).
    return bool(documented.default == real.default) and isinstance(
        documented.default, bool
    ) == isinstance(real.default, bool)


def signature_problems(documented: Documented, obj: Any) -> list[str]:
    """How ``documented`` differs from the signature of ``obj``; empty if it does not."""
    where = f"reference.md:{documented.line}: {documented.call}(...)"
    real = real_params(obj)
    if [p.name for p in documented.params] != [p.name for p in real]:
        shown = [(p.name, p.kind.description) for p in documented.params]
        actual = [(p.name, p.kind.description) for p in real]
        return [f"{where} documents the parameters\n{shown}\nbut the code has\n{actual}"]
    problems = [
        f"{where} documents parameter {mine.name!r} as {mine}, the code has {theirs}"
        for mine, theirs in zip(documented.params, real, strict=True)
        if not _same(mine, theirs)
    ]
    annotation = str(inspect.signature(obj).return_annotation)
    if documented.returns is not None and documented.returns != annotation:
        problems.append(f"{where} returns {annotation}, documented as {documented.returns}")
    return problems


def assert_signature_matches(call: str) -> None:
    """The reference's one block for ``call`` shows the parameters of the real object."""
    blocks = [signature for signature in documented_signatures() if signature.call == call]
    assert len(blocks) == 1, f"reference.md has {len(blocks)} signature blocks of {call}(...)"
    problems = signature_problems(blocks[0], DOCUMENTED[call])
    assert not problems, "\n".join(problems)


def test_every_signature_block_is_checked() -> None:
    """Each signature block maps to an object here, and each object has one block."""
    calls = [signature.call for signature in documented_signatures()]
    assert sorted(calls) == sorted(DOCUMENTED)


@pytest.mark.parametrize("call", [call for call in DOCUMENTED if call != "Workflow"])
def test_signature_block_matches_the_code(call: str) -> None:
    """Names, order, kinds, defaults and return annotation agree with `inspect.signature`."""
    assert_signature_matches(call)


def test_workflow_constructor_signature_matches() -> None:
    """``Workflow(steps, *, inputs=())`` in the reference is the constructor's signature."""
    assert_signature_matches("Workflow")


def test_run_sync_takes_exactly_the_arguments_of_run() -> None:
    """run_sync is run's twin: the same parameters, so one table documents both."""
    assert real_params(Workflow.run_sync) == real_params(Workflow.run)


def section(heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading."""
    lines = REFERENCE.splitlines()
    assert lines.count(heading) == 1, f"reference.md has no single heading {heading!r}"
    start = lines.index(heading) + 1
    end = start
    in_code = False
    while end < len(lines):
        if lines[end].startswith("```"):
            in_code = not in_code
        elif not in_code and lines[end].startswith("#"):
            break
        end += 1
    return "\n".join(lines[start:end])


def table_names(heading: str) -> list[str]:
    """The first column of the first table under ``heading``, without backticks."""
    names: list[str] = []
    for line in section(heading).splitlines():
        row = _ROW.match(line)
        if row is not None:
            names.append(row.group(1))
        elif names:
            break
    return names


def run_parameters() -> list[str]:
    return [param.name for param in real_params(Workflow.run)]


def test_run_argument_table_lists_every_parameter_in_order() -> None:
    """A parameter added to run without a row in the table fails here."""
    assert table_names("### Workflow.run") == run_parameters()


def test_run_argument_error_entry_names_every_parameter() -> None:
    """RunOptions.check checks every argument, so the Raises entry names each one."""
    text = section("### Workflow.run")
    entry = re.search(r"^- \[`RunArgumentError`\].*?(?=^- |\Z)", text, re.MULTILINE | re.DOTALL)
    assert entry is not None
    missing = [name for name in run_parameters() if f"`{name}`" not in entry.group(0)]
    assert missing == []


@pytest.mark.parametrize(
    ("heading", "cls"),
    [
        ("## Step", Step),
        ("## PatternResult", PatternResult),
        ("## TokenUsage", TokenUsage),
        ("## WorkflowResult", WorkflowResult),
        ("## WorkflowCheckpoint", WorkflowCheckpoint),
        ("## Limit", Limit),
    ],
)
def test_field_table_lists_every_field_in_order(heading: str, cls: type) -> None:
    """Each dataclass's table documents its fields, in declaration order."""
    assert dataclasses.is_dataclass(cls)
    assert table_names(heading) == [field.name for field in dataclasses.fields(cls)]


def test_checkpoint_table_shows_the_real_defaults() -> None:
    """The Default column of the WorkflowCheckpoint table is what the constructor uses."""
    rows = [line for line in section("## WorkflowCheckpoint").splitlines() if _ROW.match(line)]
    for line, param in zip(rows, real_params(WorkflowCheckpoint), strict=True):
        cell = line.split(" | ")[2].strip()
        if not param.has_default:
            assert cell == "required", line
            continue
        documented = Param(
            param.name,
            param.kind,
            has_default=True,
            default=_default(ast.parse(cell.strip("`"), mode="eval").body),
        )
        assert _same(documented, param), line


def _stated_package_version() -> re.Match[str]:
    stated = re.search(
        r"executionkit\s+(\d+\.\d+\.\d+(?:\.dev\d+)?)(\s+\(in development\))?\s+writes\s+format\s+"
        r"\*\*version\s+(\d+)\*\*\s+and\s+reads\s+versions\s+([\d, and]+)\.",
        section("### Format versions"),
    )
    assert stated is not None, "the Format versions section no longer says what is written"
    return stated


def test_stated_package_version_is_the_real_one() -> None:
    """The version the reference gives the package is pyproject's and the installed one."""
    version = _stated_package_version().group(1)
    assert version == PYPROJECT["project"]["version"]
    assert version == importlib.metadata.version("executionkit")
    assert version == executionkit.__version__


def test_stated_format_versions_are_the_real_ones() -> None:
    """The format written is FORMAT_VERSION, and every version up to it is read."""
    stated = _stated_package_version()
    assert int(stated.group(3)) == FORMAT_VERSION
    assert [int(number) for number in re.findall(r"\d+", stated.group(4))] == list(
        range(FORMAT_VERSION + 1)
    )
    table = [
        int(row.group(1))
        for row in re.finditer(r"^\| (\d+) \|", section("### Format versions"), re.MULTILINE)
    ]
    assert table == list(range(FORMAT_VERSION + 1))
    assert f"at most `{FORMAT_VERSION}`" in section("### Keys")


def test_no_other_version_of_the_package_is_named() -> None:
    """``executionkit X.Y`` is this package's version; ExecutionKit 0.4 is another library."""
    package = executionkit.__version__
    named = set(re.findall(r"\bexecutionkit (\d+(?:\.\d+)+)", REFERENCE))
    assert named, "the reference no longer names the package version"
    assert [version for version in named if not package.startswith(version)] == []


def test_the_parser_reads_kinds_and_defaults() -> None:
    """The block parser itself: positional, keyword-only, defaults and the return."""
    documented = _parse_signature(
        1, "await thing.go(a, b=(Exception,), *,\n    c=None, d=TokenUsage(), e=-1) -> int"
    )
    assert documented is not None
    assert documented.call == "thing.go"
    assert documented.returns == "int"
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    keyword = inspect.Parameter.KEYWORD_ONLY
    assert documented.params == (
        Param("a", positional, has_default=False),
        Param("b", positional, has_default=True, default=(Exception,)),
        Param("c", keyword, has_default=True, default=None),
        Param("d", keyword, has_default=True, default=TokenUsage()),
        Param("e", keyword, has_default=True, default=-1),
    )
    assert _parse_signature(1, "wait = min(a, b)") is None
    with pytest.raises(ValueError, match="cannot read the documented default"):
        _parse_signature(1, "f(a=os.sep)")


def test_an_undocumented_parameter_or_a_wrong_default_is_caught() -> None:
    """The comparison fails for a block that lacks a parameter or shows a wrong default."""
    lacking = _parse_signature(1, "workflow.run(initial_context=None, *, checkpoint_fn=None)")
    assert lacking is not None
    assert signature_problems(lacking, Workflow.run) != []
    real = next(block for block in documented_signatures() if block.call == "workflow.run")
    assert signature_problems(real, Workflow.run) == []
    zero = Param("validate_json", inspect.Parameter.KEYWORD_ONLY, has_default=True, default=0)
    wrong = Documented(
        real.call,
        real.line,
        tuple(zero if p.name == "validate_json" else p for p in real.params),
        real.returns,
    )
    (problem,) = signature_problems(wrong, Workflow.run)
    assert "'validate_json'" in problem
    returning = Documented(real.call, real.line, real.params, "None")
    assert signature_problems(returning, Workflow.run) != []
