"""Workflow types under their ExecutionKit 0.4 import path.

``from executionkit.workflow import Step, Workflow, WorkflowCheckpoint, WorkflowResult``
keeps working; new code can import the same objects from ``executionkit``.
"""

from __future__ import annotations

from executionkit._checkpoint._value import WorkflowCheckpoint
from executionkit._define._options import CheckpointFn
from executionkit._define._step import Step, StepFn
from executionkit._record._result import WorkflowResult
from executionkit._workflow import Workflow

__all__ = ["CheckpointFn", "Step", "StepFn", "Workflow", "WorkflowCheckpoint", "WorkflowResult"]
