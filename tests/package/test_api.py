"""The public API: exported names, import paths and metadata are part of the contract."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import executionkit

PUBLIC = [
    "Budget",
    "BudgetExceeded",
    "CheckpointFormatError",
    "CheckpointMismatchError",
    "CheckpointValueError",
    "ClaimLostError",
    "ContextKeyError",
    "ExecutionKitError",
    "LedgerEntry",
    "Limit",
    "PatternResult",
    "Price",
    "PricedSpending",
    "Prices",
    "RateLimited",
    "ResumePlan",
    "RunArgumentError",
    "RunClaimedError",
    "RunOwner",
    "Spending",
    "StaleCheckpointError",
    "Step",
    "StepContext",
    "TokenUsage",
    "Workflow",
    "WorkflowCheckpoint",
    "WorkflowDefinitionError",
    "WorkflowFailed",
    "WorkflowResult",
    "current_step",
]
ROOT = Path(__file__).resolve().parents[2]


def test_all_is_the_documented_sorted_set() -> None:
    """__all__ lists exactly the public names, sorted."""
    assert executionkit.__all__ == PUBLIC
    assert sorted(executionkit.__all__) == executionkit.__all__


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_imports_and_is_documented(name: str) -> None:
    """Each name is importable from the package and has a docstring."""
    obj = getattr(executionkit, name)
    assert inspect.getdoc(obj)
    assert obj.__module__.startswith("executionkit.")


@pytest.mark.parametrize("name", PUBLIC)
def test_public_methods_are_documented(name: str) -> None:
    """Every public method and property of a public class has a docstring."""
    obj = getattr(executionkit, name)
    for attr, member in vars(obj).items():
        if attr.startswith("_") or (not callable(member) and not isinstance(member, property)):
            continue
        assert inspect.getdoc(member), f"{name}.{attr} has no docstring"


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("executionkit.workflow", ["Step", "Workflow", "WorkflowCheckpoint", "WorkflowResult"]),
        ("executionkit.types", ["PatternResult", "TokenUsage"]),
    ],
)
def test_executionkit_04_import_paths_still_work(module: str, names: list[str]) -> None:
    """ExecutionKit 0.4 code importing from submodules gets the same objects."""
    imported = importlib.import_module(module)
    for name in names:
        assert getattr(imported, name) is getattr(executionkit, name)


def test_error_hierarchy() -> None:
    """One root; each error also is the builtin it refines."""
    for name in (
        "WorkflowDefinitionError",
        "CheckpointFormatError",
        "RunArgumentError",
        "CheckpointMismatchError",
        "CheckpointValueError",
    ):
        cls = getattr(executionkit, name)
        assert issubclass(cls, executionkit.ExecutionKitError)
        assert issubclass(cls, ValueError)
    assert issubclass(executionkit.ContextKeyError, KeyError)
    assert issubclass(executionkit.CheckpointMismatchError, executionkit.RunArgumentError)
    assert issubclass(executionkit.WorkflowFailed, executionkit.ExecutionKitError)
    assert issubclass(executionkit.BudgetExceeded, executionkit.ExecutionKitError)


def test_version_matches_pyproject() -> None:
    """__version__ is the version in pyproject.toml, and there are no runtime dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert executionkit.__version__ == project["version"] == "0.5.0.dev0"
    assert project["dependencies"] == []
    assert project["requires-python"] == ">=3.11"


def test_package_is_typed() -> None:
    """py.typed ships with the package."""
    assert (Path(executionkit.__file__).parent / "py.typed").is_file()


def test_import_pulls_in_only_the_standard_library() -> None:
    """A fresh interpreter importing executionkit loads no third-party module."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import executionkit\n"
        "print('\\n'.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    loaded = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.split()
    assert "executionkit" in loaded
    outside = [name for name in loaded if name not in {*sys.stdlib_module_names, "executionkit"}]
    assert outside == []
    # Reading and writing checkpoints needs no event loop: asyncio (and the ssl,
    # subprocess and concurrent.futures it brings) loads on the first run only.
    assert not {"asyncio", "ssl", "subprocess", "concurrent"} & set(loaded)
